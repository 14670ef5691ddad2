//! The seeded simulation of the protocol: several lock managers' lock states on one name, each
//! with a model of its shell (timers, the Watchdog, subscriptions, callers and their guards),
//! against one model of Redis, under a seeded scheduler that loses, delays and repeats what can
//! be lost, delayed or repeated. Everything runs in virtual time on one thread, so a schedule is a
//! function of its seed: a failure prints the seed, and `LOCKMAN_SIM_SEED=<seed> cargo test --lib
//! simulation` replays it with a trace.
//!
//! Each step is one of: a caller's request (`acquire`, `try_acquire`, a bounded wait; with or
//! without a lease; nested holds of one holder; the same holder from several callers at once, as
//! clones of a handle are), a guard released or dropped, a caller gone while it waits, a round
//! trip finished (its reply delivered, lost after the request ran, or lost before it ran), an
//! unlock message delivered, lost or delivered twice, a resubscription, time passing (timers,
//! watchdog renewals, expiry), the key deleted by someone else, or a manager shut down. The lock
//! is reentrant, fenced, fair, non-reentrant or non-reentrant fair; with the fair kinds also a
//! manager killed (its places stay, its holds expire) and a leave lost in a failover (it ran,
//! replied, and was undone). A non-reentrant kind's second acquire by a holder is refused by the
//! model's script (`AlreadyHeld`) while Redis counts that holder.
//!
//! Fair kind, after every step: when no live manager has anything under way, every place in the
//! queue is a live waiter's or one whose failed leave is being sent again (but for a killed
//! manager's and a lost leave's, which expire); and liveness: a refresh that names a live waiter
//! of a free lock as its head is followed by a grant before three such replies have come.
//!
//! After every step: never two holders with live guards (but for guards whose key someone else
//! deleted: that is the documented window fenced tokens exist for); a hold ended by release has
//! no live guard left; every waiter and every release is answered once; fenced tokens are never
//! handed out twice; a non-reentrant kind never counts a holder twice, in Redis or in its live
//! guards, and no other kind is ever refused `AlreadyHeld`. Whenever a manager is quiet (nothing under way, nothing unresolved), Redis
//! counts each of its holders exactly as many holds as its live guards (or, for a holder with
//! none, a count nobody renews that expires by itself: a lease is reported lost when it ends
//! counted from the request, a little before Redis's copy of it ends). At the end every manager
//! shuts down: every waiter and release has its answer, and once the longest lease has passed
//! (nobody renews any more) Redis holds nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::super::*;
use super::model::Redis;
use super::{settings, timeout};
use crate::actors::name::seeded::{Rng, Schedule, must_catch, run_one, run_schedules};

/// The key of a manager's timer table among its timers: the shell's one timer for the table's
/// next instant (sorts after every `Debug` of a `Timer`).
const TABLE: &str = "~table";

/// Schedules run by `cargo test` (each with its own seed).
const SCHEDULES: u64 = 100_000;
/// Steps per schedule.
const STEPS: usize = 48;
const MANAGERS: usize = 2;
const HOLDERS: usize = 2;
/// The model shell's response timeout.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct Guard {
    key: HoldKey,
    epoch: u64,
    lost: bool,
    /// Someone else deleted the key while it was live: exclusion is not promised for it.
    tainted: bool,
}

/// One manager's lock actor, as its shell would drive it.
struct Manager {
    state: LockState,
    flight: Option<Op>,
    /// When the round trip under way was sent: a reply later than the response timeout is
    /// never delivered (the shell bounds every command).
    sent_at: Instant,
    timers: BTreeMap<String, (Instant, Timer)>,
    /// The Watchdog's holds, by holder (one kind per schedule).
    tracked: BTreeMap<Arc<str>, (HoldKey, u64)>,
    waiting: BTreeSet<WaiterId>,
    /// Each waiter's holder.
    whose: BTreeMap<WaiterId, Arc<str>>,
    /// Waiters whose holder had a guard at some time while they waited: only those may be
    /// refused `AlreadyHeld` (a fair waiter's answer waits for its leave, by when the guard may
    /// be gone).
    saw_guard: BTreeSet<WaiterId>,
    answered: BTreeSet<WaiterId>,
    releases: BTreeSet<ReplyId>,
    guards: Vec<Guard>,
    subscribed: BTreeSet<String>,
    /// Subscriptions to confirm to the state (the pub/sub actor's reply).
    confirm: Vec<String>,
    holders: Vec<Arc<str>>,
    /// Epochs of holds whose key someone else deleted.
    tainted: BTreeSet<u64>,
    next_reply: ReplyId,
    stopping: bool,
    stopped: bool,
    /// Killed (its process died): nothing of it runs any more, and its places stay in Redis.
    dead: bool,
}

struct Sim {
    rng: Rng,
    now: Instant,
    redis: Redis,
    managers: Vec<Manager>,
    kind: LockKind,
    next_renewal: Instant,
    tokens: BTreeSet<u64>,
    trace: Option<String>,
    step: usize,
    /// Fair lock: places whose leave ran and was then lost (a failover): nobody owns them.
    orphans: BTreeSet<Arc<str>>,
    /// Fair lock: refresh replies that named a live local head of the free lock since the lock
    /// was last taken (liveness: the head takes its turn).
    named: u32,
}

type Failure = String;

impl Sim {
    fn new(seed: u64, trace: bool) -> Self {
        let mut rng = Rng(seed);
        let kind = match rng.below(16) {
            0..=2 => LockKind::Fenced,
            3..=5 => LockKind::Fair,
            6..=7 => LockKind::NonReentrant,
            8..=9 => LockKind::NonReentrantFair,
            10..=11 => LockKind::Spin,
            _ => LockKind::Reentrant,
        };
        let now = Instant::now();
        let managers = (0..MANAGERS)
            .map(|m| Manager {
                state: LockState::new(kind, "name".into(), settings(), now),
                flight: None,
                sent_at: now,
                timers: BTreeMap::new(),
                tracked: BTreeMap::new(),
                waiting: BTreeSet::new(),
                whose: BTreeMap::new(),
                saw_guard: BTreeSet::new(),
                answered: BTreeSet::new(),
                releases: BTreeSet::new(),
                guards: Vec::new(),
                subscribed: BTreeSet::new(),
                confirm: Vec::new(),
                holders: (0..HOLDERS).map(|h| format!("m{m}:{h}").into()).collect(),
                tainted: BTreeSet::new(),
                next_reply: 0,
                stopping: false,
                stopped: false,
                dead: false,
            })
            .collect();
        Self {
            rng,
            now,
            redis: Redis::new(kind == LockKind::Fenced),
            managers,
            kind,
            next_renewal: now + settings().watchdog_timeout / 3,
            tokens: BTreeSet::new(),
            trace: trace.then(String::new),
            step: 0,
            orphans: BTreeSet::new(),
            named: 0,
        }
    }

    fn log(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = &mut self.trace {
            let _ = writeln!(trace, "{}", line());
        }
    }

    fn run(&mut self) -> Result<(), Failure> {
        for step in 0..STEPS {
            self.step = step;
            self.one_step()?;
            self.settle_effects()?;
            if !self.redis.counts.is_empty() {
                self.named = 0;
            }
            self.check()?;
        }
        self.finish()
    }

    fn one_step(&mut self) -> Result<(), Failure> {
        let m = self.rng.below(MANAGERS);
        if self.managers[m].dead {
            return Ok(());
        }
        match self.rng.below(100) {
            0..=19 => self.request(m),
            20..=29 => self.release(m, true),
            30..=33 => self.release(m, false),
            34..=59 => self.finish_flight(m, true),
            60..=67 => self.deliver_message(),
            68..=70 => self.caller_gone(m),
            71..=92 => {
                let ms = [1, 20, 300, 2_000, 9_000][self.rng.below(5)];
                self.advance(Duration::from_millis(ms));
            }
            93..=95 => {
                self.log(|| format!("resubscribed m{m}"));
                let now = self.now;
                self.managers[m].state.resubscribed(now);
            }
            96..=97
                if self.kind.is_fair()
                    && self.rng.chance(15)
                    && !self.managers.iter().any(|m| m.dead) =>
            {
                self.kill(m);
            }
            96..=97 if self.rng.chance(20) => {
                self.log(|| "the key is deleted by someone else".into());
                self.redis.delete();
                // Every hold of the moment. A re-entry after the deletion is a new hold (its
                // script finds no count and says so), with a new epoch: not excused.
                for m in &mut self.managers {
                    let epochs: Vec<u64> = m.state.holds.values().map(|h| h.epoch).collect();
                    m.tainted.extend(epochs);
                    for g in &mut m.guards {
                        g.tainted = true;
                        m.tainted.insert(g.epoch);
                    }
                }
            }
            98..=99 if self.rng.chance(15) && !self.managers[m].stopping => {
                self.log(|| format!("m{m} shuts down"));
                let now = self.now;
                self.managers[m].stopping = true;
                self.managers[m].state.stop(true, now);
            }
            _ => {}
        }
        Ok(())
    }

    /// Manager `m`'s process dies (SIGKILL): its round trip under way ran or not, nothing of it
    /// runs any more (no leave, no release, no renewal): its holds expire, its places stay until
    /// they expire.
    fn kill(&mut self, m: usize) {
        self.log(|| format!("m{m} is killed"));
        let now = self.now;
        if let Some(op) = self.managers[m].flight.take()
            && self.rng.chance(50)
        {
            self.redis.run(&op, now);
        }
        let mgr = &mut self.managers[m];
        mgr.dead = true;
        mgr.state.abandon();
        mgr.state.drain();
        mgr.timers.clear();
        mgr.tracked.clear();
        mgr.guards.clear();
        mgr.waiting.clear();
        mgr.releases.clear();
        mgr.confirm.clear();
    }

    /// The manager whose holder `holder` is (holders are named `m<i>:<j>`).
    fn owner(&self, holder: &str) -> Option<usize> {
        self.managers
            .iter()
            .position(|m| m.holders.iter().any(|h| &**h == holder))
    }

    fn request(&mut self, m: usize) {
        let holder = self.managers[m].holders[self.rng.below(HOLDERS)].clone();
        let wait = match self.rng.below(4) {
            0 => Wait::No,
            1 => Wait::Up(Duration::from_millis(self.rng.below(5_000) as u64)),
            _ => Wait::Forever,
        };
        let lease = self
            .rng
            .chance(40)
            .then(|| Duration::from_millis(500 + self.rng.below(20_000) as u64)); // ≤ 20.5 s
        let req = Request {
            holder: holder.clone(),
            kind: self.kind,
            lease,
            wait,
        };
        let now = self.now;
        let id = self.managers[m].state.request(req, now);
        self.log(|| format!("m{m} request {id}: {holder} {wait:?} lease {lease:?}"));
        self.managers[m].waiting.insert(id);
        let mgr = &mut self.managers[m];
        if mgr.guards.iter().any(|g| g.key.0 == holder) {
            mgr.saw_guard.insert(id);
        }
        mgr.whose.insert(id, holder);
    }

    fn release(&mut self, m: usize, reply: bool) {
        let mgr = &mut self.managers[m];
        if mgr.guards.is_empty() {
            return;
        }
        let g = mgr.guards.remove(self.rng.below(mgr.guards.len()));
        let reply = reply.then(|| {
            mgr.next_reply += 1;
            mgr.releases.insert(mgr.next_reply);
            mgr.next_reply
        });
        let now = self.now;
        mgr.state.release(g.key.clone(), g.epoch, reply, now);
        self.log(|| format!("m{m} release {g:?} reply {reply:?}"));
    }

    /// Finishes manager `m`'s round trip: delivered, or (with `faults`) its reply lost, with
    /// the request run or not.
    fn finish_flight(&mut self, m: usize, faults: bool) {
        let Some(op) = self.managers[m].flight.take() else {
            return;
        };
        let late = self.now.saturating_duration_since(self.managers[m].sent_at) >= RESPONSE_TIMEOUT;
        // A request runs when it reaches Redis, in order with the rest of its connection (the
        // Watchdog's renewals too): one whose reply is later than the response timeout is
        // modelled as never having run, since the model cannot run it back then.
        let (ran, lost) = match faults.then(|| self.rng.below(100)) {
            _ if late => (false, true),
            Some(0..=9) => (true, true),
            Some(10..=14) => (false, true),
            _ => (true, false),
        };
        let now = self.now;
        if let (Op::LeaveQueue { holder, .. }, true) = (&op, faults && self.rng.chance(5)) {
            // It ran on a primary that failed over before a replica had it: the leave is lost,
            // though its reply said it ran.
            self.log(|| format!("m{m} leave of {holder} lost in a failover"));
            if self.redis.queue.contains(holder) {
                self.orphans.insert(holder.clone());
            }
            self.managers[m]
                .state
                .ran(Outcome::LeaveQueue(Ok(true)), now);
            return;
        }
        let mut outcome = if ran {
            self.redis.run(&op, now)
        } else {
            Outcome::Shutdown
        };
        if ran {
            // A place no longer queued is no orphan, nor one a queued attempt took over.
            if let Op::Acquire { holder, fair, .. } = &op
                && !fair.once
            {
                self.orphans.remove(holder);
            }
            let redis = &self.redis;
            self.orphans.retain(|h| redis.queued(h));
        }
        if lost {
            outcome = match &op {
                Op::Acquire { .. } => Outcome::Acquire(Err(timeout())),
                Op::Release { .. } | Op::HandOff { .. } => Outcome::Release(Err(timeout())),
                Op::Settle { .. } => Outcome::Settle(Err(timeout())),
                Op::LeaveQueue { .. } => Outcome::LeaveQueue(Err(timeout())),
                Op::FairRefresh { .. } => Outcome::FairRefresh(Err(timeout())),
                // Shutdown's round trips log their failures and end.
                Op::Shutdown { .. } => {
                    if !ran {
                        self.redis.run(&op, now);
                    }
                    Outcome::Shutdown
                }
            };
        }
        self.log(|| format!("m{m} ran {op:?} (ran {ran}, reply lost {lost}) -> {outcome:?}"));
        if let Outcome::FairRefresh(Ok(r)) = &outcome
            && let Some(head) = &r.head
            && self.owner(head) == Some(m)
            && self.managers[m]
                .state
                .waiters
                .iter()
                .any(|w| w.holder == *head && w.may_wait())
            && !self.managers[m]
                .state
                .trips
                .is_unsure(&(head.clone(), self.kind))
            && !self.managers[m]
                .state
                .trips
                .is_abandoned(&(head.clone(), self.kind))
        {
            // The head of a free lock, a live waiter of this manager free to try (no request of
            // its holder unresolved or being settled): its turn is told.
            self.named += 1;
        }
        let failed_leave = match (&op, &outcome) {
            (Op::LeaveQueue { holder, .. }, Outcome::LeaveQueue(Err(_))) => Some(holder.clone()),
            _ => None,
        };
        self.managers[m].state.ran(outcome, now);
        if let Some(holder) = failed_leave {
            let state = &self.managers[m].state;
            if !state.fair.leaves(&holder)
                && state.fair.place(&holder).is_none()
                && self.redis.queued(&holder)
            {
                // Its resends ended when the place would have expired at the head; behind
                // others it lives on (moved on with them) and costs its wait once it is the
                // head, as a killed waiter's place does.
                self.log(|| format!("m{m} gave up leaving {holder}"));
                self.orphans.insert(holder);
            }
        }
    }

    fn deliver_message(&mut self) {
        if self.kind.is_fair() {
            return self.deliver_fair_message();
        }
        if self.redis.published == 0 {
            return;
        }
        if self.kind.spins() {
            // Nobody listens: a spin lock's waiters find the lock free by their own attempts
            // (the model counts the force unlock's and a lost key's as published).
            self.redis.published = 0;
            return;
        }
        let fate = self.rng.below(10);
        if fate != 0 {
            // Not a duplicate: this message is used up.
            self.redis.published -= 1;
        }
        if fate == 1 {
            self.log(|| "an unlock message is lost".into());
            return;
        }
        self.log(|| "an unlock message is delivered".into());
        let now = self.now;
        for mgr in &mut self.managers {
            mgr.state
                .unlocked(false, "redisson_lock__channel:{name}", now);
        }
    }

    /// A fair lock's message, on the channel of the waiter it is for: delivered, lost, or
    /// delivered twice.
    fn deliver_fair_message(&mut self) {
        if self.redis.woken.is_empty() {
            return;
        }
        let fate = self.rng.below(10);
        let holder = if fate == 0 {
            self.redis.woken[0].clone()
        } else {
            self.redis.woken.remove(0)
        };
        if fate == 1 {
            self.log(|| format!("the message to {holder} is lost"));
            return;
        }
        self.log(|| format!("the message to {holder} is delivered"));
        let now = self.now;
        if let Some(m) = self.owner(&holder).filter(|m| !self.managers[*m].dead) {
            let state = &mut self.managers[m].state;
            let channel = state.channel_of(&holder);
            state.unlocked(false, &channel, now);
        }
    }

    fn caller_gone(&mut self, m: usize) {
        let mgr = &mut self.managers[m];
        let waiting: Vec<_> = mgr
            .waiting
            .iter()
            .copied()
            .filter(|id| mgr.state.is_waiting(*id))
            .collect();
        if waiting.is_empty() {
            return;
        }
        let id = waiting[self.rng.below(waiting.len())];
        let now = self.now;
        mgr.state.caller_gone(id, now);
        self.log(|| format!("m{m} caller of {id} gone"));
    }

    /// Moves time on: timers fire in order, the Watchdog renews on its schedule, keys expire.
    fn advance(&mut self, by: Duration) {
        let until = self.now + by;
        self.log(|| format!("time +{by:?}"));
        loop {
            let next_timer = self
                .managers
                .iter()
                .enumerate()
                .flat_map(|(m, mgr)| {
                    // The deadlines the shell was asked to arm, and the state's table: the
                    // shell's one timer for its next instant (none once the manager died).
                    let table = mgr
                        .state
                        .next_timeout()
                        .filter(|_| !mgr.dead)
                        .map(|at| (at, m, TABLE.to_string()));
                    mgr.timers
                        .iter()
                        .map(move |(k, (at, _))| (*at, m, k.clone()))
                        .chain(table)
                })
                .min();
            let next_renewal = self.next_renewal;
            // The shell bounds every round trip by the response timeout.
            let overdue = (0..MANAGERS)
                .filter(|m| self.managers[*m].flight.is_some())
                .map(|m| (self.managers[m].sent_at + RESPONSE_TIMEOUT, m))
                .min();
            if let Some((at, m)) = overdue
                && at <= until
                && next_timer.as_ref().is_none_or(|(t, _, _)| at <= *t)
                && at <= next_renewal
            {
                self.now = self.now.max(at);
                self.finish_flight(m, true);
                if self.settle_effects().is_err() {
                    return;
                }
                continue;
            }
            match next_timer {
                Some((at, m, k)) if at <= until && at <= next_renewal && k == TABLE => {
                    self.now = self.now.max(at);
                    self.log(|| format!("m{m} timeout"));
                    let now = self.now;
                    self.managers[m].state.timeout(now);
                    if self.settle_effects().is_err() {
                        return;
                    }
                }
                Some((at, m, k)) if at <= until && at <= next_renewal => {
                    self.now = self.now.max(at);
                    let Some((_, timer)) = self.managers[m].timers.remove(&k) else {
                        continue;
                    };
                    self.log(|| format!("m{m} fired {timer:?}"));
                    let now = self.now;
                    self.managers[m].state.fired(timer, now);
                    // Effects of a timer come before the next one fires.
                    if self.settle_effects().is_err() {
                        return;
                    }
                }
                _ if next_renewal <= until => {
                    self.now = self.now.max(next_renewal);
                    self.renew();
                    self.next_renewal = self.now + settings().watchdog_timeout / 3;
                }
                _ => break,
            }
        }
        self.now = until;
        self.redis.tick(until);
    }

    fn renew(&mut self) {
        let now = self.now;
        let timeout = settings().watchdog_timeout;
        for m in 0..MANAGERS {
            if self.managers[m].stopped || self.managers[m].dead {
                // Its Watchdog halted with it.
                continue;
            }
            let tracked: Vec<_> = self.managers[m].tracked.values().cloned().collect();
            for (key, epoch) in tracked {
                if !self.redis.renew(&key.0, now, timeout) {
                    self.log(|| format!("m{m} renewal finds {key:?} gone"));
                    self.managers[m].tracked.remove(&key.0);
                    self.managers[m].state.hold_lost(&key, epoch, now);
                }
            }
        }
        self.redis.tick(now);
    }

    /// Carries out every effect until none is left.
    fn settle_effects(&mut self) -> Result<(), Failure> {
        for _ in 0..100 {
            let mut more = false;
            for m in 0..MANAGERS {
                let effects = self.managers[m].state.drain();
                more |= !effects.is_empty();
                for e in effects {
                    self.effect(m, e)?;
                }
                let now = self.now;
                for channel in std::mem::take(&mut self.managers[m].confirm) {
                    more = true;
                    self.managers[m].state.subscribed(&channel, true, now);
                }
            }
            if !more {
                return Ok(());
            }
        }
        Err("effects never settle".into())
    }

    fn effect(&mut self, m: usize, e: Effect) -> Result<(), Failure> {
        self.log(|| format!("  m{m} {e:?}"));
        let now = self.now;
        // The caller goes as its grant comes: the shell releases the hold at once
        // (`LockActor::answer`).
        let went = matches!(e, Effect::Answer(_, Answer::Granted { .. })) && self.rng.chance(5);
        let mgr = &mut self.managers[m];
        match e {
            Effect::Run(op) => {
                if mgr.flight.is_some() {
                    return Err("two round trips at once".into());
                }
                mgr.flight = Some(op);
                mgr.sent_at = now;
            }
            Effect::Answer(id, answer) => {
                if !mgr.answered.insert(id) {
                    return Err(format!("m{m}: waiter {id} answered twice"));
                }
                if mgr.state.is_waiting(id) {
                    return Err(format!("m{m}: waiter {id} answered but still waiting"));
                }
                mgr.waiting.remove(&id);
                if let Answer::Failed(LockError::AlreadyHeld { .. }) = &answer {
                    if !self.kind.is_non_reentrant() {
                        return Err(format!(
                            "m{m}: waiter {id} refused AlreadyHeld by {:?}",
                            self.kind
                        ));
                    }
                    // Only a holder with a guard holds it already.
                    if !mgr.saw_guard.contains(&id) {
                        return Err(format!(
                            "m{m}: waiter {id} of {:?} refused AlreadyHeld, its holder with no guard",
                            mgr.whose.get(&id)
                        ));
                    }
                }
                if let (true, Answer::Granted { key, epoch, .. }) = (went, &answer) {
                    mgr.state.release(key.clone(), *epoch, None, now);
                } else if let Answer::Granted {
                    key, epoch, token, ..
                } = answer
                {
                    if let Some(token) = token
                        && !self.tokens.insert(token)
                    {
                        return Err(format!("token {token} handed out twice"));
                    }
                    let tainted = mgr.tainted.contains(&epoch);
                    for (w, _) in mgr.whose.iter().filter(|(_, h)| **h == key.0) {
                        mgr.saw_guard.insert(*w);
                    }
                    mgr.guards.push(Guard {
                        key,
                        epoch,
                        lost: false,
                        tainted,
                    });
                }
            }
            Effect::Done(id, _) => {
                if !mgr.releases.remove(&id) {
                    return Err(format!("m{m}: release {id} answered twice or never asked"));
                }
            }
            Effect::Subscribe(c) => {
                mgr.subscribed.insert(c.to_string());
                mgr.confirm.push(c.to_string());
            }
            Effect::Unsubscribe(c) => {
                if !mgr.subscribed.remove(&*c) {
                    return Err(format!("m{m}: unsubscribed {c} twice"));
                }
            }
            Effect::Arm(id, after) => {
                let t = Timer::Deadline(id);
                mgr.timers.insert(format!("{t:?}"), (now + after, t));
            }
            Effect::Cancel(id) => {
                mgr.timers.remove(&format!("{:?}", Timer::Deadline(id)));
            }
            Effect::Track {
                hold: key, epoch, ..
            } => {
                mgr.tracked.insert(key.0.clone(), (key, epoch));
            }
            Effect::Untrack { hold: key, epoch } => {
                if mgr.tracked.get(&key.0).is_some_and(|(_, e)| *e == epoch) {
                    mgr.tracked.remove(&key.0);
                }
            }
            Effect::Lost(epoch, _) => {
                for g in mgr.guards.iter_mut().filter(|g| g.epoch == epoch) {
                    g.lost = true;
                }
            }
            Effect::Ended(epoch) => {
                if let Some(g) = mgr
                    .guards
                    .iter()
                    .find(|g| g.epoch == epoch && !g.lost && !g.tainted)
                {
                    return Err(format!(
                        "m{m}: hold {epoch} ended by release under a live guard {g:?}"
                    ));
                }
            }
            Effect::Stopped => mgr.stopped = true,
            Effect::Watch(_) | Effect::Busy | Effect::Idle => {}
        }
        Ok(())
    }

    fn check(&self) -> Result<(), Failure> {
        // Exclusion across managers: the holders of live, untainted guards.
        let holders: BTreeSet<&str> = self
            .managers
            .iter()
            .flat_map(|m| &m.guards)
            .filter(|g| !g.lost && !g.tainted)
            .map(|g| &*g.key.0)
            .collect();
        if holders.len() > 1 {
            return Err(format!("two holders inside: {holders:?}"));
        }
        if self.kind.is_non_reentrant() {
            // The non-reentrant rule: never two holds of one holder, in Redis or in live guards.
            if let Some(twice) = self.redis.counts.iter().find(|(_, n)| **n > 1) {
                return Err(format!("counted twice in Redis: {twice:?}"));
            }
            for m in &self.managers {
                let live: Vec<&str> = m
                    .guards
                    .iter()
                    .filter(|g| !g.lost)
                    .map(|g| &*g.key.0)
                    .collect();
                let distinct: BTreeSet<&str> = live.iter().copied().collect();
                if distinct.len() != live.len() {
                    return Err(format!("two live guards of one holder: {live:?}"));
                }
            }
        }
        self.no_stranded_place()?;
        // An actor with nothing left says so (`Effect::Idle`), or it never lingers and stops:
        // a leak of one actor per name ever used. One with something left is busy.
        for (i, m) in self.managers.iter().enumerate() {
            if m.dead || m.stopping {
                continue;
            }
            let s = &m.state;
            if s.busy != s.has_work() {
                return Err(format!(
                    "m{i}: busy {} with work left {}",
                    s.busy,
                    s.has_work()
                ));
            }
        }
        if self.named >= 3 {
            return Err(format!(
                "a free fair lock: {} refreshes named its live head, never taken",
                self.named
            ));
        }
        // Exact counts wherever a manager is quiet.
        for (i, m) in self.managers.iter().enumerate() {
            let s = &m.state;
            let quiet = m.flight.is_none() && s.is_quiet();
            if !quiet || m.stopping || m.dead {
                continue;
            }
            for holder in &m.holders {
                let guards: Vec<&Guard> = m.guards.iter().filter(|g| g.key.0 == *holder).collect();
                let held_epoch = s.holds.get(&(holder.clone(), self.kind)).map(|h| h.epoch);
                if guards.iter().any(|g| g.tainted)
                    || held_epoch.is_some_and(|e| m.tainted.contains(&e))
                {
                    continue;
                }
                let live = guards.iter().filter(|g| !g.lost).count() as u32;
                let held = s
                    .holds
                    .get(&(holder.clone(), self.kind))
                    .map_or(0, |h| h.count);
                let in_redis = self.redis.count(holder);
                // A lease hold is reported lost when its lease, counted from the request, ends;
                // Redis counted from when the script ran, a little later. Until then a count
                // nobody holds may stay, never renewed: it expires by itself.
                let expiring = live == 0 && held == 0 && self.redis.expires.is_some();
                if (in_redis != live && !expiring) || held != live {
                    return Err(format!(
                        "m{i} {holder}: Redis counts {in_redis}, the state {held}, live guards {live}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Fair lock: when no live manager has anything under way, every place in the queue is a
    /// live waiter's, or one whose failed leave is being sent again; but for places of a killed
    /// manager, leaves lost in a failover and leaves whose resends ended (past the time the place
    /// would have expired at the head), which expire by themselves.
    fn no_stranded_place(&self) -> Result<(), Failure> {
        if !self.kind.is_fair() {
            return Ok(());
        }
        let quiet = self
            .managers
            .iter()
            .all(|m| m.dead || (m.flight.is_none() && m.state.is_quiet() && !m.stopping));
        if !quiet {
            return Ok(());
        }
        for h in &self.redis.queue {
            let Some(m) = self.owner(h) else {
                continue;
            };
            let mgr = &self.managers[m];
            if mgr.dead || self.orphans.contains(h) {
                continue;
            }
            if !mgr.state.waiters.has_holder(h) && !mgr.state.fair.leaves(h) {
                return Err(format!(
                    "a place of {h} with no waiter: queue {:?}",
                    self.redis.queue
                ));
            }
        }
        Ok(())
    }

    /// Every manager shuts down; round trips finish without faults and time runs until nothing
    /// is left. Then every waiter and release has its answer and Redis holds nothing.
    fn finish(&mut self) -> Result<(), Failure> {
        self.log(|| "-- the end: every manager shuts down".into());
        let now = self.now;
        for mgr in self.managers.iter_mut().filter(|m| !m.dead) {
            if !mgr.stopping {
                mgr.stopping = true;
                mgr.state.stop(true, now);
            }
        }
        self.settle_effects()?;
        for _ in 0..10_000 {
            if self
                .managers
                .iter()
                .all(|m| m.dead || (m.stopped && m.flight.is_none()))
            {
                break;
            }
            match (0..MANAGERS).find(|m| self.managers[*m].flight.is_some()) {
                Some(m) => self.finish_flight(m, false),
                None => self.advance(Duration::from_secs(1)),
            }
            self.settle_effects()?;
        }
        for (i, m) in self.managers.iter().enumerate().filter(|(_, m)| !m.dead) {
            if !m.stopped {
                return Err(format!("m{i} never stopped"));
            }
            if let Some(id) = m.waiting.iter().find(|id| !m.answered.contains(id)) {
                return Err(format!("m{i}: waiter {id} never answered"));
            }
            if let Some(id) = m.releases.iter().next() {
                return Err(format!("m{i}: release {id} never answered"));
            }
        }
        // A count released at shutdown is gone now; one nobody holds (a lease reported lost a
        // little before Redis's copy ended) ends within its lease, since nobody renews it.
        // A killed manager's watchdog holds end within the watchdog timeout.
        let longest_lease = Duration::from_millis(20_500).max(settings().watchdog_timeout);
        self.advance(longest_lease);
        if !self.redis.counts.is_empty() {
            return Err(format!("left in Redis: {:?}", self.redis.counts));
        }
        Ok(())
    }
}

impl Schedule for Sim {
    fn run(&mut self) -> Result<(), String> {
        Sim::run(self)
    }

    fn report(&mut self) -> (String, usize) {
        (self.trace.take().unwrap_or_default(), self.step)
    }
}

/// Runs one schedule; the failure with its seed, step and (when `trace`) the whole trace.
fn run_seed(seed: u64, trace: bool) -> Result<(), String> {
    let replay = "LOCKMAN_SIM_SEED={seed} cargo test --lib simulation";
    run_one(Sim::new(seed, trace), seed, replay)
}

#[test]
fn every_schedule_keeps_one_holder_and_exact_counts() {
    run_schedules("LOCKMAN_SIM", SCHEDULES, run_seed);
}

/// The simulation is what proves a resent request counted once: with Redis's scripts ignoring
/// the counts a request expects (a resend of a request that ran runs again), some schedule
/// breaks an invariant.
#[test]
fn a_redis_that_ignores_the_expected_counts_is_caught() {
    must_catch(SCHEDULES, |seed| {
        let mut sim = Sim::new(seed, false);
        sim.redis.check_counts = false;
        sim
    });
}
