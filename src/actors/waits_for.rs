//! [`WaitsFor`]: the waits-for graph of one manager's lock waits, for deadlock detection
//! ([`crate::deadlock`]). Its nodes are owners (tasks, or scopes); an owner waiting for a lock
//! has an edge to every owner holding it in this manager. A cycle means that none of its owners
//! will ever proceed: it is looked for whenever an edge appears (a wait begins, or a waited-for
//! lock gains a holder), so it is found when it closes, with no Redis round trip.
//!
//! Per-name lock actors (`shell`) write it, only for waits: a caller that waits (its first
//! attempt found the lock taken) is put in it, and the owners holding that name are put in it
//! for as long as someone of this manager waits for the name. An uncontended acquire and release
//! never touch it. Lock actors run on several threads (`Config::arbiters`), hence one mutex,
//! held for a map update and a search of the (small) graph of waits.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use actix::WeakRecipient;
use rustc_hash::{FxHashMap, FxHashSet};

use super::messages::{Deadlocked, StillWaiting};
use super::name::WaiterId;
use super::lost::Claim;
use crate::config::{Config, Deadlocks};
use crate::error::{Cycle, Owner, Site, Step};

/// The graph, shared by a manager's lock actors.
pub(crate) struct WaitsFor {
    policy: Deadlocks,
    client: uuid::Uuid,
    service: String,
    /// The name prefix, taken off the names a cycle shows.
    prefix: String,
    inner: Mutex<Graph>,
}

#[derive(Default)]
struct Graph {
    /// Each owner's waits now (one, unless it waits in several branches at once).
    waits: FxHashMap<Owner, Vec<Edge>>,
    /// The holds of each lock name waited for, per actor (the kinds of one name may be served
    /// by more than one).
    holders: FxHashMap<Arc<str>, Vec<(u64, Vec<Hold>)>>,
    /// The cycles this manager broke or reported lately, newest last: for its client record
    /// (`lockman top`, `inspect`).
    recent: std::collections::VecDeque<(Instant, String)>,
}

/// How many recent cycles are kept, and for how long.
const RECENT: usize = 5;
const RECENT_FOR: Duration = Duration::from_secs(600);

/// One hold of a name, as its actor reports it.
pub(crate) struct Hold {
    pub owner: Owner,
    /// Its holder field, `<client id>:<n>`: a request of the same holder re-enters the hold
    /// rather than waiting for it.
    pub holder: Arc<str>,
    /// Its kind's label (`read`, `write`, `lock`, …).
    pub kind: &'static str,
    /// Whether a grant of it still claims it.
    pub claim: Arc<dyn Claim>,
}

impl Hold {
    /// Whether this hold is one that `edge` waits for: claimed, and of another holder — or of
    /// the same one, when it is a read hold and the wait a write (a read-write lock's reader
    /// cannot upgrade: Redisson lets the writer read, not the reader write). A request of a
    /// holder that holds the lock otherwise waits only for a round trip under way.
    fn blocks(&self, edge: &Edge) -> bool {
        self.claim.is_claimed()
            && (self.holder != edge.holder || (edge.kind == "write" && self.kind == "read"))
    }
}

/// Where a wait's actor is asked about it and told to break it: weak, so that the graph never
/// keeps an actor alive; made once per actor and shared by its waits.
pub(crate) struct Asks {
    pub still: WeakRecipient<StillWaiting>,
    pub broken: WeakRecipient<Deadlocked>,
}

/// One wait: an owner's waiter in a lock actor.
struct Edge {
    name: Arc<str>,
    kind: &'static str,
    holder: Arc<str>,
    /// Where the caller's code asked for it, for the cycle's message.
    site: Option<Site>,
    actor: u64,
    waiter: WaiterId,
    since: Instant,
    asks: Arc<Asks>,
    /// In a cycle being confirmed, or reported already (`Deadlocks::Report`): not looked at
    /// again until that ends.
    suspected: bool,
    reported: bool,
}

/// A wait that began, as a lock actor reports it.
pub(crate) struct Wait {
    pub owner: Owner,
    pub name: Arc<str>,
    pub kind: &'static str,
    pub holder: Arc<str>,
    pub site: Option<Site>,
    pub actor: u64,
    pub waiter: WaiterId,
    pub since: Instant,
    pub asks: Arc<Asks>,
}

/// A wait past the publishing threshold, as `long_waits` gives it.
#[derive(Clone)]
pub(crate) struct LongWait {
    pub owner: Owner,
    pub name: Arc<str>,
    pub kind: &'static str,
    pub holder: Arc<str>,
    /// Where the caller's code asked for it: published for other processes' messages.
    pub site: Option<Site>,
    /// When it began.
    pub since: Instant,
    actor: u64,
    waiter: WaiterId,
    asks: Arc<Asks>,
}

/// One wait of a cycle found, by identity (the graph may change while it is confirmed).
#[derive(Clone)]
struct Link {
    owner: Owner,
    actor: u64,
    waiter: WaiterId,
    asks: Arc<Asks>,
}

impl WaitsFor {
    pub(crate) fn new(config: &Config, client: uuid::Uuid) -> Self {
        Self {
            policy: config.get_deadlocks(),
            client,
            service: config.get_client_name(),
            prefix: config.get_name_prefix().to_owned(),
            inner: Mutex::default(),
        }
    }

    /// Whether deadlocks are looked for at all.
    pub(crate) fn is_on(&self) -> bool {
        self.policy != Deadlocks::Off
    }

    fn lock(&self) -> MutexGuard<'_, Graph> {
        // A panic elsewhere while holding it leaves plain maps: still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A wait began: its edges may close a cycle.
    pub(crate) fn wait_began(self: &Arc<Self>, wait: Wait) {
        let Wait {
            owner,
            name,
            kind,
            holder,
            site,
            actor,
            waiter,
            since,
            asks,
        } = wait;
        let mut graph = self.lock();
        graph.waits.entry(owner).or_default().push(Edge {
            name,
            kind,
            holder,
            site,
            actor,
            waiter,
            since,
            asks,
            suspected: false,
            reported: false,
        });
        self.look_from(&mut graph, owner);
    }

    /// Waiter `waiter` of actor `actor` no longer waits (answered, gone, or broken).
    pub(crate) fn wait_ended(&self, owner: Owner, actor: u64, waiter: WaiterId) {
        let mut graph = self.lock();
        if let Some(edges) = graph.waits.get_mut(&owner) {
            edges.retain(|e| e.actor != actor || e.waiter != waiter);
            if edges.is_empty() {
                graph.waits.remove(&owner);
            }
        }
    }

    /// The holds of `name` in actor `actor` now (empty: none, or nobody waits for it any
    /// more). An owner new among them may close a cycle through a wait for `name`.
    pub(crate) fn holders(self: &Arc<Self>, name: &Arc<str>, actor: u64, holds: Vec<Hold>) {
        let mut graph = self.lock();
        // A new cycle runs through a new holder, and on from it only if it waits itself: a
        // hand-off to an owner that waits for nothing else (the usual one) needs no search.
        let searched = {
            let old = graph
                .holders
                .get(name)
                .and_then(|slots| slots.iter().find(|(a, _)| *a == actor))
                .map_or(&[][..], |(_, holds)| holds.as_slice());
            holds.iter().any(|h| {
                graph.waits.contains_key(&h.owner)
                    && !old
                        .iter()
                        .any(|o| o.owner == h.owner && o.holder == h.holder)
            })
        };
        let slots = graph.holders.entry(name.clone()).or_default();
        let before = slots.iter().position(|(a, _)| *a == actor);
        match (before, holds.is_empty()) {
            (Some(i), true) => {
                slots.swap_remove(i);
            }
            (Some(i), false) => slots[i].1 = holds,
            (None, true) => {}
            (None, false) => slots.push((actor, holds)),
        }
        if slots.is_empty() {
            graph.holders.remove(name);
        }
        if !searched {
            return;
        }
        // Every new edge ends at an added owner and starts at a waiter of `name`.
        let waiting: Vec<Owner> = graph
            .waits
            .iter()
            .filter(|(_, edges)| edges.iter().any(|e| e.name == *name))
            .map(|(owner, _)| *owner)
            .collect();
        for owner in waiting {
            self.look_from(&mut graph, owner);
        }
    }

    /// Looks for a cycle through `start`'s waits; one found is confirmed by every wait's actor
    /// (`confirm`) before it is broken or reported.
    fn look_from(self: &Arc<Self>, graph: &mut Graph, start: Owner) {
        let Some(path) = graph.cycle_from(start) else {
            return;
        };
        if path.iter().all(|&e| graph.edge(e).suspected) {
            return; // being confirmed already
        }
        if self.policy == Deadlocks::Report && path.iter().all(|&e| graph.edge(e).reported) {
            return;
        }
        let mut links = Vec::with_capacity(path.len());
        for &(owner, i) in &path {
            let Some(edge) = graph.waits.get_mut(&owner).and_then(|e| e.get_mut(i)) else {
                return;
            };
            edge.suspected = true;
            links.push(Link {
                owner,
                actor: edge.actor,
                waiter: edge.waiter,
                asks: edge.asks.clone(),
            });
        }
        let this = self.clone();
        // Called from a lock actor, on its arbiter: the confirmation runs there too.
        actix::spawn(async move { this.confirm(links).await });
    }

    /// Asks each wait of a cycle found whether it still waits, then (under the graph's lock)
    /// whether the cycle still closes: only then is its youngest wait broken (or the cycle
    /// reported). A caller that dropped its request before the wait that closed the cycle
    /// began is seen gone here, whatever its watch has reported: no stale wait makes a cycle.
    async fn confirm(&self, links: Vec<Link>) {
        let asked = links.iter().map(|l| still_waiting(&l.asks, l.waiter));
        let still = futures_util::future::join_all(asked)
            .await
            .into_iter()
            .all(|still| still);
        let mut graph = self.lock();
        // Every wait of it still there may be suspected again, whatever comes of this one.
        for link in &links {
            let edges = graph.waits.get_mut(&link.owner).into_iter().flatten();
            for edge in edges.filter(|e| e.actor == link.actor && e.waiter == link.waiter) {
                edge.suspected = false;
            }
        }
        let found = graph.find(&links);
        let Some(path) = found.filter(|path| still && graph.closes(path)) else {
            return;
        };
        // The youngest wait of the cycle is broken: the one that closed it, or one begun after
        // the others.
        let Some(youngest) = (0..path.len()).max_by_key(|&i| graph.edge(path[i]).since) else {
            return;
        };
        let mut path = path;
        path.rotate_left(youngest);
        let cycle = self.describe(&graph, &path);
        match self.policy {
            Deadlocks::Break => {
                let Some(edge) = graph.take(path[0]) else {
                    return;
                };
                graph.remember(&cycle);
                drop(graph);
                tell(edge, cycle, "in this manager");
            }
            Deadlocks::Report => {
                for &(owner, i) in &path {
                    if let Some(edge) = graph.waits.get_mut(&owner).and_then(|e| e.get_mut(i)) {
                        edge.reported = true;
                    }
                }
                graph.remember(&cycle);
                drop(graph);
                report(&cycle, "in this manager");
            }
            Deadlocks::Off => {}
        }
    }

    /// The waits begun at least `older_than` before `now`: what this manager publishes for
    /// other processes to follow (`watchdog/deadlocks.rs`).
    pub(crate) fn long_waits(&self, older_than: Duration, now: Instant) -> Vec<LongWait> {
        let graph = self.lock();
        graph
            .waits
            .iter()
            .flat_map(|(owner, edges)| edges.iter().map(move |e| (*owner, e)))
            .filter(|(_, e)| now.saturating_duration_since(e.since) >= older_than)
            .map(|(owner, e)| LongWait {
                owner,
                name: e.name.clone(),
                kind: e.kind,
                holder: e.holder.clone(),
                site: e.site.clone(),
                since: e.since,
                actor: e.actor,
                waiter: e.waiter,
                asks: e.asks.clone(),
            })
            .collect()
    }

    /// A cycle through other processes, found by following `wait`, whose youngest wait is
    /// `wait` itself: once its actor confirms it still waits (and it is still in the graph),
    /// it is broken or reported as an in-process cycle's would be.
    pub(crate) async fn break_found(&self, wait: &LongWait, cycle: Cycle) {
        if !still_waiting(&wait.asks, wait.waiter).await {
            return;
        }
        let mut graph = self.lock();
        let Some(edges) = graph.waits.get_mut(&wait.owner) else {
            return;
        };
        let Some(i) = edges
            .iter()
            .position(|e| e.actor == wait.actor && e.waiter == wait.waiter)
        else {
            return;
        };
        match self.policy {
            Deadlocks::Break => {
                let Some(edge) = graph.take((wait.owner, i)) else {
                    return;
                };
                graph.remember(&cycle);
                drop(graph);
                tell(edge, cycle, "across processes");
            }
            Deadlocks::Report => {
                if std::mem::replace(&mut edges[i].reported, true) {
                    return;
                }
                graph.remember(&cycle);
                drop(graph);
                report(&cycle, "across processes");
            }
            Deadlocks::Off => {}
        }
    }

    /// The cycles this manager broke or reported in the last ten minutes (at most five), newest
    /// first, with how long ago, as their `Display` says them.
    pub(crate) fn recent_cycles(&self, now: Instant) -> Vec<(Duration, String)> {
        let graph = self.lock();
        graph
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
    fn describe(&self, graph: &Graph, path: &[(Owner, usize)]) -> Cycle {
        Cycle {
            steps: path
                .iter()
                .map(|&(owner, i)| {
                    let edge = graph.edge((owner, i));
                    Step {
                        owner,
                        client: self.client,
                        service: self.service.clone(),
                        name: edge
                            .name
                            .strip_prefix(self.prefix.as_str())
                            .unwrap_or(&edge.name)
                            .to_owned(),
                        kind: edge.kind.to_owned(),
                        place: edge.site.as_ref().map(|s| s.place.to_string()),
                        label: edge
                            .site
                            .as_ref()
                            .and_then(|s| s.label.as_deref().map(str::to_owned)),
                    }
                })
                .collect(),
        }
    }
}

/// Breaks `cycle` at `edge`, its youngest wait (taken out of the graph already): logged,
/// counted, and its actor told, which fails the waiter with `LockError::Deadlock`.
fn tell(edge: Edge, cycle: Cycle, found: &'static str) {
    tracing::warn!(%cycle, found, "deadlock: its youngest wait fails");
    crate::metrics::deadlock("broken");
    if let Some(broken) = edge.asks.broken.upgrade() {
        broken.do_send(Deadlocked {
            waiter: edge.waiter,
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

impl Graph {
    /// Takes the wait `i` of `owner` out of the graph.
    fn take(&mut self, (owner, i): (Owner, usize)) -> Option<Edge> {
        let edges = self.waits.get_mut(&owner)?;
        if i >= edges.len() {
            return None;
        }
        let edge = edges.swap_remove(i);
        if edges.is_empty() {
            self.waits.remove(&owner);
        }
        Some(edge)
    }

    /// Keeps `cycle` among the recent ones.
    fn remember(&mut self, cycle: &Cycle) {
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back((Instant::now(), cycle.to_string()));
    }

    fn edge(&self, (owner, i): (Owner, usize)) -> &Edge {
        &self.waits[&owner][i]
    }

    /// Where the waits of `links` are now, if all are still in the graph.
    fn find(&self, links: &[Link]) -> Option<Vec<(Owner, usize)>> {
        links
            .iter()
            .map(|l| {
                let edges = self.waits.get(&l.owner)?;
                let i = edges
                    .iter()
                    .position(|e| e.actor == l.actor && e.waiter == l.waiter)?;
                Some((l.owner, i))
            })
            .collect()
    }

    /// Whether each wait of `path` is still blocked by a hold of the next step's owner, the
    /// last by one of the first's.
    fn closes(&self, path: &[(Owner, usize)]) -> bool {
        path.iter().enumerate().all(|(n, &step)| {
            let next = path[(n + 1) % path.len()].0;
            self.blockers(self.edge(step)).any(|owner| owner == next)
        })
    }

    /// The owners whose holds `edge` waits for.
    fn blockers<'a>(&'a self, edge: &'a Edge) -> impl Iterator<Item = Owner> + 'a {
        self.holders
            .get(&edge.name)
            .into_iter()
            .flatten()
            .flat_map(|(_, holds)| holds.iter())
            .filter(|hold| hold.blocks(edge))
            .map(|hold| hold.owner)
    }

    /// A cycle of waits through `start`: each step an owner and the index of its wait that
    /// leads to the next step's owner (a holder of that wait's name); the last leads back to
    /// `start`. Depth first, each owner entered once: linear in the graph's edges.
    fn cycle_from(&self, start: Owner) -> Option<Vec<(Owner, usize)>> {
        // Most waits wait for owners that wait for nothing: no cycle, and nothing allocated.
        let onward = self.waits.get(&start)?.iter().any(|e| {
            self.blockers(e)
                .any(|o| o != start && self.waits.contains_key(&o))
        });
        if !onward {
            return None;
        }
        let mut seen: FxHashSet<Owner> = FxHashSet::default();
        seen.insert(start);
        let mut stack: Vec<Frame> = Vec::new();
        let mut next = Some((start, 0));
        loop {
            if let Some((owner, wait)) = next.take()
                && let Some(mut frame) = self.frame(owner, wait)
            {
                if stack.is_empty() {
                    // A wait for a lock its own owner holds (through another handle) is no
                    // cycle by itself: it may be another branch of the same task (`join!`),
                    // which will let it go; or a probe with a timeout. Left to its wait.
                    frame.holders.retain(|h| *h != start);
                }
                let closes = frame.holders.contains(&start);
                stack.push(frame);
                if closes {
                    return Some(stack.iter().map(|f| (f.owner, f.wait)).collect());
                }
            }
            let top = stack.last_mut()?;
            match top.holders.pop() {
                Some(holder) => {
                    if seen.insert(holder) {
                        next = Some((holder, 0));
                    }
                }
                // Every holder of this wait tried: the owner's next wait, if it has one.
                None => {
                    let done = stack.pop()?;
                    next = Some((done.owner, done.wait + 1));
                }
            }
        }
    }

    /// `owner`'s wait number `wait`, with the holders of its name to try; `None` past its last.
    fn frame(&self, owner: Owner, wait: usize) -> Option<Frame> {
        let edge = self.waits.get(&owner)?.get(wait)?;
        let holders = self.blockers(edge).collect();
        Some(Frame {
            owner,
            wait,
            holders,
        })
    }
}

/// One step of the search: `owner`'s wait number `wait`, and the holders of its name not
/// tried yet.
struct Frame {
    owner: Owner,
    wait: usize,
    holders: Vec<Owner>,
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use actix::prelude::*;

    use super::*;

    /// A lock actor as the graph sees it: answers whether its waiters still wait, records the
    /// waits it is told to break.
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
    struct Flag(AtomicBool);

    impl Claim for Flag {
        fn is_claimed(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }

    fn claim(claimed: bool) -> Arc<Flag> {
        Arc::new(Flag(AtomicBool::new(claimed)))
    }

    fn hold(owner: u64, claim: Arc<Flag>) -> Hold {
        Hold {
            owner: Owner::Task(owner),
            holder: format!("held by {owner}").into(),
            kind: "lock",
            claim,
        }
    }

    struct Bench {
        graph: Arc<WaitsFor>,
        broken: Arc<Mutex<Vec<(WaiterId, Cycle)>>>,
        asks: Arc<Asks>,
        gone: Arc<Asks>,
        /// The two actors, kept alive (the graph holds them weakly).
        _actors: (Addr<Actor_>, Addr<Actor_>),
    }

    fn asks_of(actor: &Addr<Actor_>) -> Arc<Asks> {
        Arc::new(Asks {
            still: actor.clone().recipient().downgrade(),
            broken: actor.clone().recipient().downgrade(),
        })
    }

    fn bench(policy: Deadlocks) -> Bench {
        let config = Config::new("redis://127.0.0.1/").deadlocks(policy);
        let broken = Arc::new(Mutex::new(Vec::new()));
        let there = Actor_ {
            still: true,
            broken: broken.clone(),
        }
        .start();
        let gone = Actor_ {
            still: false,
            broken: broken.clone(),
        }
        .start();
        Bench {
            graph: Arc::new(WaitsFor::new(&config, uuid::Uuid::nil())),
            broken,
            asks: asks_of(&there),
            gone: asks_of(&gone),
            _actors: (there, gone),
        }
    }

    impl Bench {
        fn wait(&self, owner: u64, name: &str, waiter: WaiterId, asks: &Arc<Asks>) {
            self.graph.wait_began(Wait {
                owner: Owner::Task(owner),
                name: name.into(),
                kind: "lock",
                holder: format!("h{waiter}").into(),
                site: None,
                actor: 1,
                waiter,
                since: Instant::now(),
                asks: asks.clone(),
            });
        }

        fn hold(&self, name: &str, owner: u64, claim: Arc<Flag>) {
            self.graph
                .holders(&name.into(), 1, vec![hold(owner, claim)]);
        }

        /// Once every confirmation under way has ended: what was broken.
        async fn settled(&self) -> Vec<(WaiterId, Cycle)> {
            for _ in 0..1000 {
                let pending = self
                    .graph
                    .lock()
                    .waits
                    .values()
                    .flatten()
                    .any(|e| e.suspected);
                if !pending {
                    break;
                }
                actix_rt::time::sleep(Duration::from_millis(1)).await;
            }
            self.broken.lock().unwrap().clone()
        }
    }

    #[actix_rt::test]
    async fn a_cycle_of_two_breaks_the_wait_that_closed_it() {
        let b = bench(Deadlocks::Break);
        b.hold("x", 1, claim(true));
        b.hold("y", 2, claim(true));
        b.wait(1, "y", 10, &b.asks);
        assert!(b.settled().await.is_empty());
        b.wait(2, "x", 20, &b.asks);
        let broken = b.settled().await;
        assert_eq!(broken.len(), 1);
        let (waiter, cycle) = &broken[0];
        assert_eq!(*waiter, 20);
        let names: Vec<(Owner, &str)> = cycle
            .steps
            .iter()
            .map(|s| (s.owner, s.name.as_str()))
            .collect();
        assert_eq!(names, vec![(Owner::Task(2), "x"), (Owner::Task(1), "y")]);
        // The broken wait left the graph: nothing more to break.
        b.hold("x", 1, claim(true));
        assert_eq!(b.settled().await.len(), 1);
    }

    #[actix_rt::test]
    async fn a_cycle_closed_by_a_new_holder_is_found_too() {
        let b = bench(Deadlocks::Break);
        b.hold("y", 2, claim(true));
        b.wait(1, "y", 10, &b.asks);
        b.wait(2, "x", 20, &b.asks);
        assert!(b.settled().await.is_empty());
        // Owner 1 comes to hold x (granted elsewhere while it waits in a branch).
        b.hold("x", 1, claim(true));
        assert_eq!(b.settled().await.len(), 1);
    }

    #[actix_rt::test]
    async fn a_wait_whose_caller_has_gone_closes_no_cycle() {
        let b = bench(Deadlocks::Break);
        b.hold("x", 1, claim(true));
        b.hold("y", 2, claim(true));
        // Owner 1 dropped its request for y; its actor has not reported it yet.
        b.wait(1, "y", 10, &b.gone);
        b.wait(2, "x", 20, &b.asks);
        assert!(b.settled().await.is_empty());
    }

    #[actix_rt::test]
    async fn a_hold_let_go_closes_no_cycle() {
        let b = bench(Deadlocks::Break);
        let x = claim(true);
        b.hold("x", 1, x.clone());
        b.hold("y", 2, claim(true));
        b.wait(1, "y", 10, &b.asks);
        // Owner 1 dropped its guard of x: being released in the background.
        x.0.store(false, Ordering::SeqCst);
        b.wait(2, "x", 20, &b.asks);
        assert!(b.settled().await.is_empty());
    }

    #[actix_rt::test]
    async fn report_only_breaks_nothing_and_reports_a_cycle_once() {
        let b = bench(Deadlocks::Report);
        b.hold("x", 1, claim(true));
        b.hold("y", 2, claim(true));
        b.wait(1, "y", 10, &b.asks);
        b.wait(2, "x", 20, &b.asks);
        assert!(b.settled().await.is_empty());
        let reported = |b: &Bench| {
            b.graph
                .lock()
                .waits
                .values()
                .flatten()
                .filter(|e| e.reported)
                .count()
        };
        assert_eq!(reported(&b), 2);
        // A holder published again changes nothing: the same cycle is not looked at again.
        b.hold("x", 1, claim(true));
        assert!(b.settled().await.is_empty());
    }

    #[actix_rt::test]
    async fn a_wait_for_a_lock_its_own_owner_holds_is_no_cycle() {
        let b = bench(Deadlocks::Break);
        let wait = |holder: &str, kind, waiter| {
            b.graph.wait_began(Wait {
                owner: Owner::Task(1),
                name: "rw".into(),
                kind,
                holder: holder.into(),
                site: None,
                actor: 1,
                waiter,
                since: Instant::now(),
                asks: b.asks.clone(),
            })
        };
        let held = |kind| Hold {
            owner: Owner::Task(1),
            holder: "h".into(),
            kind,
            claim: claim(true),
        };
        // A re-entry of the holder (queued behind a round trip) waits for nobody.
        b.graph.holders(&"rw".into(), 1, vec![held("lock")]);
        wait("h", "lock", 1);
        assert!(b.settled().await.is_empty());
        b.graph.wait_ended(Owner::Task(1), 1, 1);
        // A reader that waits to write, or another handle of the same task: maybe another
        // branch of the task (`join!`) that will let go. Left to its wait.
        b.graph.holders(&"rw".into(), 1, vec![held("read")]);
        wait("h", "write", 2);
        wait("other", "lock", 3);
        assert!(b.settled().await.is_empty());
    }

    #[test]
    fn a_search_finds_the_cycle_through_the_owner_that_waits_in_two_branches() {
        // Owner 1 waits for y (held by 3, who waits for nothing) and for z (held by 2, who
        // waits for x, held by 1).
        let mut g = Graph::default();
        let edge = |name: &str| Edge {
            name: name.into(),
            kind: "lock",
            holder: "waiter".into(),
            site: None,
            actor: 1,
            waiter: 0,
            since: Instant::now(),
            asks: Arc::new(Asks {
                still: dead_recipient(),
                broken: dead_recipient(),
            }),
            suspected: false,
            reported: false,
        };
        g.waits.insert(Owner::Task(1), vec![edge("y"), edge("z")]);
        g.waits.insert(Owner::Task(2), vec![edge("x")]);
        for (name, owner) in [("x", 1), ("y", 3), ("z", 2)] {
            g.holders
                .insert(name.into(), vec![(1, vec![hold(owner, claim(true))])]);
        }
        assert_eq!(
            g.cycle_from(Owner::Task(1)),
            Some(vec![(Owner::Task(1), 1), (Owner::Task(2), 0)])
        );
        assert_eq!(g.cycle_from(Owner::Task(3)), None);
    }

    /// A recipient nobody reads, for graphs searched without an actor system.
    fn dead_recipient<M>() -> WeakRecipient<M>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        Actor_: Handler<M>,
    {
        let system = actix::System::new();
        system.block_on(async {
            Actor_ {
                still: false,
                broken: Arc::default(),
            }
            .start()
            .recipient()
            .downgrade()
        })
    }
}
