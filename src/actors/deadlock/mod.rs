//! Deadlock detection ([`crate::deadlock`]), in one home:
//!
//! - `graph.rs`: the waits-for graph, pure — the waits, the cycle search, the one blocking
//!   rule, the victim; it answers a [`Verdict`];
//! - this file: the [`Detector`], which owns the graph and carries its verdicts out (asks each
//!   wait's actor whether it still waits, fails the victim, logs, counts, remembers);
//! - `seat.rs`: what one lock actor keeps of its place in the graph;
//! - `probe.rs`: the cross-process probe, an actor on its own schedule.
//!
//! Per-name lock actors write the graph, only for waits: a caller that waits (its first attempt
//! found the lock taken) is put in it, and the owners holding that name are put in it for as
//! long as someone of this manager waits for the name. A cycle is looked for whenever an edge
//! appears, so it is found when it closes, with no Redis round trip. An uncontended acquire and
//! release never touch it. Lock actors run on several threads (`Config::arbiters`), hence one
//! mutex, held for a map update and a search of the (small) graph of waits.

pub(crate) mod graph;
pub(crate) mod probe;
pub(crate) mod seat;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use actix::dev::ToEnvelope;
use actix::{Actor, Addr, Handler, WeakRecipient};

use super::messages::{Deadlocked, StillWaiting};
use super::name::WaiterId;
use crate::config::{Config, Deadlocks};
use crate::error::{Cycle, Owner, Step};
use crate::protocol::Groups;
use graph::{Graph, Hold, Verdict, WaitId};

/// A wait as the detector keeps it: with where its actor is asked about it.
pub(crate) type Wait = graph::Wait<Arc<Asks>>;

/// Where a wait's actor is asked about it and told to break it: weak, so that the graph never
/// keeps an actor alive; made once per actor and shared by its waits.
#[derive(Debug)]
pub(crate) struct Asks {
    pub still: WeakRecipient<StillWaiting>,
    pub broken: WeakRecipient<Deadlocked>,
}

impl Asks {
    /// How the graph asks the actor of address `me` about its waits.
    pub(crate) fn of<A>(me: Addr<A>) -> Self
    where
        A: Actor + Handler<StillWaiting> + Handler<Deadlocked>,
        A::Context: ToEnvelope<A, StillWaiting> + ToEnvelope<A, Deadlocked>,
    {
        Self {
            still: me.clone().recipient().downgrade(),
            broken: me.recipient().downgrade(),
        }
    }
}

/// The detector, shared by a manager's lock actors and its probe.
pub(crate) struct Detector {
    policy: Deadlocks,
    client: uuid::Uuid,
    service: String,
    /// The name prefix, taken off the names a cycle shows.
    prefix: String,
    /// Each group holder's members: what a group lock's wait and hold are in the graph.
    groups: Groups,
    inner: Mutex<Inner>,
}

struct Inner {
    graph: Graph<Arc<Asks>>,
    /// The cycles this manager broke or reported lately, newest last: for its client record
    /// (`lockman top`, `inspect`).
    recent: VecDeque<(Instant, String)>,
}

/// How many recent cycles are kept, and for how long.
const RECENT: usize = 5;
const RECENT_FOR: Duration = Duration::from_secs(600);

impl Detector {
    pub(crate) fn new(config: &Config, client: uuid::Uuid, groups: Groups) -> Self {
        let policy = config.get_deadlocks();
        Self {
            policy,
            client,
            service: config.get_client_name(),
            prefix: config.get_name_prefix().to_owned(),
            groups,
            inner: Mutex::new(Inner {
                graph: Graph::new(policy),
                recent: VecDeque::new(),
            }),
        }
    }

    /// Group holder `holder`'s members, sorted (`None`: not a group holder this manager knows).
    pub(crate) fn members(&self, holder: &str) -> Option<graph::Members> {
        self.groups.sorted_members(holder)
    }

    /// Whether deadlocks are looked for at all.
    pub(crate) fn is_on(&self) -> bool {
        self.policy != Deadlocks::Off
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while holding it leaves plain maps: still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A wait began: it may close a cycle.
    pub(crate) fn wait_began(self: &Arc<Self>, wait: Wait) {
        let verdict = self.lock().graph.wait_began(wait);
        self.confirm_each(verdict);
    }

    /// Wait `id` of `owner` no longer waits (answered, gone, or broken).
    pub(crate) fn wait_ended(&self, owner: Owner, id: WaitId) {
        self.lock().graph.wait_ended(owner, id);
    }

    /// The holds of `name` in actor `actor` now (empty: none, or nobody waits for it any
    /// more): they may close cycles.
    pub(crate) fn holders(self: &Arc<Self>, name: &Arc<str>, actor: u64, holds: Vec<Hold>) {
        let verdicts = self.lock().graph.holders(name, actor, holds);
        self.confirm_each(verdicts);
    }

    /// Has each cycle found confirmed by every wait's actor before it is judged. Called from a
    /// lock actor, on its arbiter: the confirmation runs there too.
    fn confirm_each(self: &Arc<Self>, verdicts: impl IntoIterator<Item = Verdict<Arc<Asks>>>) {
        for verdict in verdicts {
            if let Verdict::Confirm(cycle) = verdict {
                let this = self.clone();
                actix::spawn(async move { this.confirm(cycle).await });
            }
        }
    }

    /// Asks each wait of a cycle found whether it still waits, then has the graph judge it
    /// (under its lock: the cycle must still close). A caller that dropped its request before
    /// the wait that closed the cycle began is seen gone here, whatever its watch has
    /// reported: no stale wait makes a cycle.
    async fn confirm(&self, cycle: Vec<Wait>) {
        let asked = cycle.iter().map(|w| still_waiting(&w.via, w.id.waiter));
        let still = futures_util::future::join_all(asked)
            .await
            .into_iter()
            .all(|still| still);
        let mut inner = self.lock();
        let verdict = inner.graph.judge(&cycle, still);
        let described = match &verdict {
            Some(Verdict::Break(path) | Verdict::Report(path)) => self.describe(path),
            _ => return,
        };
        self.carry_out(inner, verdict, described, "in this manager");
    }

    /// A cycle through other processes, found by following `wait`, whose youngest wait is
    /// `wait` itself: once its actor confirms it still waits (and it is still in the graph),
    /// it is broken or reported as an in-process cycle's would be.
    pub(crate) async fn break_found(&self, wait: &Wait, cycle: Cycle) {
        if !still_waiting(&wait.via, wait.id.waiter).await {
            return;
        }
        let mut inner = self.lock();
        let verdict = inner.graph.judge_across(wait.owner, wait.id);
        self.carry_out(inner, verdict, cycle, "across processes");
    }

    /// Breaks or reports `cycle` as `verdict` says, remembering it.
    fn carry_out(
        &self,
        mut inner: MutexGuard<'_, Inner>,
        verdict: Option<Verdict<Arc<Asks>>>,
        cycle: Cycle,
        found: &'static str,
    ) {
        let victim = match verdict {
            Some(Verdict::Break(mut path)) if !path.is_empty() => Some(path.swap_remove(0)),
            Some(Verdict::Report(_)) => None,
            _ => return,
        };
        if inner.recent.len() == RECENT {
            inner.recent.pop_front();
        }
        inner.recent.push_back((Instant::now(), cycle.to_string()));
        drop(inner);
        match victim {
            Some(wait) => tell(wait, cycle, found),
            None => report(&cycle, found),
        }
    }

    /// The waits begun at least `older_than` before `now`: what this manager publishes for
    /// other processes to follow (`probe.rs`).
    pub(crate) fn long_waits(&self, older_than: Duration, now: Instant) -> Vec<Wait> {
        self.lock().graph.long_waits(older_than, now)
    }

    /// The cycles this manager broke or reported in the last ten minutes (at most five), newest
    /// first, with how long ago, as their `Display` says them.
    pub(crate) fn recent_cycles(&self, now: Instant) -> Vec<(Duration, String)> {
        self.lock()
            .recent
            .iter()
            .rev()
            .map(|(at, text)| (now.saturating_duration_since(*at), text.clone()))
            .filter(|(ago, _)| *ago <= RECENT_FOR)
            .collect()
    }

    /// A name as a cycle shows it: without this manager's prefix.
    pub(crate) fn given<'a>(&self, key: &'a str) -> &'a str {
        key.strip_prefix(self.prefix.as_str()).unwrap_or(key)
    }

    /// This manager's service name.
    pub(crate) fn service(&self) -> &str {
        &self.service
    }

    /// The cycle of `path`, as the error and the reports show it.
    fn describe(&self, path: &[Wait]) -> Cycle {
        let steps = path
            .iter()
            .map(|wait| Step {
                owner: wait.owner,
                client: self.client,
                service: self.service.clone(),
                name: self.given(&wait.name).to_owned(),
                kind: wait.kind.label().to_owned(),
                place: wait.site.as_ref().map(|s| s.place.to_string()),
                label: wait
                    .site
                    .as_ref()
                    .and_then(|s| s.label.as_deref().map(str::to_owned)),
            })
            .collect();
        Cycle { steps }
    }
}

/// Breaks `cycle` at `wait`, its youngest wait (taken out of the graph already): logged,
/// counted, and its actor told, which fails the waiter with `LockError::Deadlock`.
fn tell(wait: Wait, cycle: Cycle, found: &'static str) {
    tracing::warn!(%cycle, found, "deadlock: its youngest wait fails");
    crate::metrics::deadlock("broken");
    if let Some(broken) = wait.via.broken.upgrade() {
        broken.do_send(Deadlocked {
            waiter: wait.id.waiter,
            cycle,
        });
    }
}

/// Reports `cycle`, breaking nothing (`Deadlocks::Report`).
fn report(cycle: &Cycle, found: &'static str) {
    tracing::warn!(%cycle, found, "deadlock: reported only (Config::deadlocks)");
    crate::metrics::deadlock("reported");
}

/// Whether waiter `waiter` of the actor of `asks` still waits, its caller there (false when the
/// actor is gone).
async fn still_waiting(asks: &Asks, waiter: WaiterId) -> bool {
    match asks.still.upgrade() {
        Some(still) => matches!(still.send(StillWaiting { waiter }).await, Ok(true)),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use actix::prelude::*;

    use super::graph::Marks;
    use super::*;
    use crate::actors::lost::Claim;
    use crate::protocol::LockKind;

    /// A lock actor as the detector sees it: answers whether its waiters still wait, records
    /// the waits it is told to break.
    struct Actor_ {
        still: bool,
        broken: Arc<Mutex<Vec<(WaiterId, Cycle)>>>,
    }

    impl Actor for Actor_ {
        type Context = Context<Self>;
    }

    impl Handler<StillWaiting> for Actor_ {
        type Result = bool;
        fn handle(&mut self, _: StillWaiting, _: &mut Context<Self>) -> bool {
            self.still
        }
    }

    impl Handler<Deadlocked> for Actor_ {
        type Result = ();
        fn handle(&mut self, msg: Deadlocked, _: &mut Context<Self>) {
            self.broken.lock().unwrap().push((msg.waiter, msg.cycle));
        }
    }

    #[derive(Debug)]
    struct Held;

    impl Claim for Held {
        fn is_claimed(&self) -> bool {
            true
        }
    }

    fn start(
        still: bool,
        broken: &Arc<Mutex<Vec<(WaiterId, Cycle)>>>,
    ) -> (Addr<Actor_>, Arc<Asks>) {
        let actor = Actor_ {
            still,
            broken: broken.clone(),
        }
        .start();
        let asks = Arc::new(Asks {
            still: actor.clone().recipient().downgrade(),
            broken: actor.clone().recipient().downgrade(),
        });
        (actor, asks)
    }

    fn wait(owner: u64, name: &str, waiter: WaiterId, via: &Arc<Asks>) -> Wait {
        graph::Wait {
            owner: Owner::Task(owner),
            id: WaitId { actor: 1, waiter },
            name: name.into(),
            kind: LockKind::Reentrant,
            holder: format!("h{waiter}").into(),
            members: None,
            site: None,
            since: Instant::now(),
            via: via.clone(),
            marks: Marks::default(),
        }
    }

    fn hold(owner: u64) -> Vec<Hold> {
        vec![Hold {
            owner: Owner::Task(owner),
            holder: format!("held by {owner}").into(),
            kind: LockKind::Reentrant,
            members: None,
            claim: Arc::new(Held),
        }]
    }

    /// Once the confirmation under way has ended: what was broken.
    async fn settled(
        detector: &Detector,
        broken: &Arc<Mutex<Vec<(WaiterId, Cycle)>>>,
    ) -> Vec<(WaiterId, Cycle)> {
        for _ in 0..1000 {
            if !detector.lock().graph.confirming() && !broken.lock().unwrap().is_empty() {
                break;
            }
            actix_rt::time::sleep(Duration::from_millis(1)).await;
        }
        broken.lock().unwrap().clone()
    }

    #[actix_rt::test]
    async fn a_cycle_confirmed_by_its_actors_fails_its_youngest_wait_with_the_cycle() {
        let config = Config::new("redis://127.0.0.1/").name_prefix("app:");
        let detector = Arc::new(Detector::new(&config, uuid::Uuid::nil(), Groups::default()));
        let broken = Arc::default();
        let (_actor, asks) = start(true, &broken);
        detector.holders(&"app:x".into(), 1, hold(1));
        detector.holders(&"app:y".into(), 1, hold(2));
        detector.wait_began(wait(1, "app:y", 10, &asks));
        detector.wait_began(wait(2, "app:x", 20, &asks));
        let broken = settled(&detector, &broken).await;
        assert_eq!(broken.len(), 1);
        let (waiter, cycle) = &broken[0];
        assert_eq!(*waiter, 20);
        let names: Vec<(Owner, &str)> = cycle
            .steps
            .iter()
            .map(|s| (s.owner, s.name.as_str()))
            .collect();
        assert_eq!(names, vec![(Owner::Task(2), "x"), (Owner::Task(1), "y")]);
        assert_eq!(detector.recent_cycles(Instant::now()).len(), 1);
    }

    #[actix_rt::test]
    async fn a_cycle_whose_actor_says_a_wait_is_gone_breaks_nothing() {
        let config = Config::new("redis://127.0.0.1/");
        let detector = Arc::new(Detector::new(&config, uuid::Uuid::nil(), Groups::default()));
        let broken = Arc::default();
        let (_there, asks) = start(true, &broken);
        let (_gone, gone) = start(false, &broken);
        detector.holders(&"x".into(), 1, hold(1));
        detector.holders(&"y".into(), 1, hold(2));
        detector.wait_began(wait(1, "y", 10, &gone));
        detector.wait_began(wait(2, "x", 20, &asks));
        for _ in 0..1000 {
            if !detector.lock().graph.confirming() {
                break;
            }
            actix_rt::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(broken.lock().unwrap().is_empty());
        assert!(detector.recent_cycles(Instant::now()).is_empty());
    }
}
