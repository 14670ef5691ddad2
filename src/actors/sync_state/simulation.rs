//! The seeded simulation of the synchronizers: several managers' synchronizer states on one
//! semaphore or permit semaphore, each with a model of its shell (timers, the Watchdog, the
//! subscription, callers and their guards), against one model of Redis that runs the scripts as
//! docs/protocol.md says (a permit semaphore's lazy reclaim of expired permits, what each kind
//! publishes, request latches recording each request's reply), under a seeded scheduler that
//! loses, delays and reorders what can be. Everything runs in virtual time on one thread: a
//! failure prints its seed, and `LOCKMAN_SYNC_SIM_SEED=<seed> cargo test --lib sync_state`
//! replays it with a trace (`LOCKMAN_SYNC_SIM_SCHEDULES=<n>` runs more schedules).
//!
//! Each step is one of: a caller's request (one attempt, a bounded wait or none; a permit
//! semaphore's with or without a lease), permits given back or dropped, a caller gone while it
//! waits, a round trip finished (its reply delivered, lost after the request ran, or lost before
//! it ran), a channel message delivered, the pub/sub connection dropped (its messages lost, then
//! resubscribed), a subscription completed or failed, permits added, time passing (timers,
//! deadlines, watchdog renewals, leases ending), or a manager killed (its state gone, nothing
//! given back, nothing renewed).
//!
//! After every step: Redis's free count and the permits held add up to the permits there are
//! (less those held outside; a request applied twice breaks it), no manager's live guards hold
//! more than Redis counts for it, and every guard still within its validity has its permit ids
//! in Redis; every waiter, give-back and adjustment is answered once. Whenever a manager has no
//! round trip under way, Redis counts for it exactly what its live guards hold (plus requests
//! given up after they ran: a documented leak), and no parked waiter wants no more than is free
//! unless a message, a timer or a subscription is coming to it (nor one that a permit whose lease
//! ended would make room for, unless the retry timer is armed for a waiter due). At the end every manager stops:
//! everything has its answer, and Redis counts nothing for a stopped manager but its leaks.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;

use super::*;
use crate::actors::name::seeded::{Rng, Schedule, must_catch, run_one, run_schedules};
use crate::actors::name::state::NameState;

/// Schedules run by `cargo test` (each with its own seed).
const SCHEDULES: u64 = 20_000;
/// Steps per schedule.
const STEPS: usize = 80;
const MANAGERS: usize = 3;
/// The watchdog timeout of every manager: renewals every third of it, and a third is how long
/// a request is sent again.
const TIMEOUT: Duration = Duration::from_secs(3);

fn settings() -> Settings {
    Settings {
        watchdog_timeout: TIMEOUT,
        hand_off: true,
        unavailable_after: Duration::from_secs(15),
        last_try_grace: LAST_TRY_GRACE,
    }
}

/// A permit id: the manager's number, then a counter (as a real id carries its client's).
fn permit_ids(m: usize, next: &mut u64, n: u32) -> Arc<[u8]> {
    let mut ids = Vec::new();
    for _ in 0..n {
        *next += 1;
        let mut id = [0u8; 16];
        id[0] = m as u8;
        id[8..].copy_from_slice(&next.to_be_bytes());
        ids.extend_from_slice(&id);
    }
    ids.into()
}

fn split(ids: &[u8]) -> Vec<[u8; 16]> {
    ids.chunks(16)
        .filter_map(|c| <[u8; 16]>::try_from(c).ok())
        .collect()
}

/// What Redis replied to a request, kept under its latch.
#[derive(Clone, Copy, Debug)]
enum Reply {
    Take(Take),
    Number(i64),
}

/// The model of Redis for one semaphore or permit semaphore.
struct Redis {
    kind: SyncKind,
    /// How many permits there are.
    permits: i64,
    /// How many of them a client outside the simulation holds, for good.
    foreign: i64,
    /// The free count.
    free: i64,
    /// A permit semaphore's held ids and when each expires.
    ids: BTreeMap<[u8; 16], Instant>,
    /// Each request latch lane's last request (manager, lane → number) and its reply.
    latches: BTreeMap<(usize, u32), (u64, Reply)>,
    /// Whether the scripts honour request latches (always, but in a test that turns them off
    /// on purpose, to see the simulation catch it).
    check_latches: bool,
    /// Published and not yet handed to the listeners.
    published: Vec<i64>,
}

impl Redis {
    /// A permit semaphore's expired permits (at most `limit`) go back to the free count, which
    /// is published when then positive.
    fn reclaim(&mut self, limit: Option<u32>, now: Instant) {
        let expired: Vec<[u8; 16]> = self
            .ids
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| *id)
            .take(limit.map_or(usize::MAX, |l| l as usize))
            .collect();
        if expired.is_empty() {
            return;
        }
        for id in &expired {
            self.ids.remove(id);
        }
        self.free += expired.len() as i64;
        if self.free > 0 {
            self.published.push(self.free);
        }
    }

    /// Runs `op` for manager `m` as the scripts do; a request whose latch recorded it replies
    /// as then.
    fn run(&mut self, m: usize, trip: &Trip, now: Instant) -> Reply {
        let key = (m, trip.lane);
        if self.check_latches
            && let Some((seq, reply)) = self.latches.get(&key)
            && *seq == trip.seq
        {
            return *reply;
        }
        let permit = self.kind == SyncKind::PermitSemaphore;
        let reply = match &trip.op {
            Op::Take {
                permits,
                ids,
                lease,
                ..
            } => {
                if permit {
                    self.reclaim(Some(*permits), now);
                }
                if self.free >= i64::from(*permits) {
                    self.free -= i64::from(*permits);
                    for id in split(ids) {
                        self.ids.insert(id, now + *lease);
                    }
                    Reply::Take(Take::Taken)
                } else {
                    let first = self.ids.values().min();
                    Reply::Take(Take::Short {
                        free: self.free,
                        retry_in: first.map(|at| at.saturating_duration_since(now)),
                    })
                }
            }
            Op::Give { ids, .. } if permit => {
                self.reclaim(None, now);
                let released = split(ids)
                    .iter()
                    .filter(|id| self.ids.remove(*id).is_some())
                    .count() as i64;
                if released > 0 {
                    self.free += released;
                    self.published.push(self.free);
                }
                Reply::Number(released)
            }
            Op::Give { permits, .. } => {
                self.free += i64::from(*permits);
                self.published.push(self.free);
                Reply::Number(self.free)
            }
            Op::Adjust(Adjustment::AddPermits(d)) => {
                self.permits += d;
                self.free += d;
                self.published.push(if permit { *d } else { self.free });
                Reply::Number(self.free)
            }
            other => panic!("not modelled: {other:?}"),
        };
        self.latches.insert(key, (trip.seq, reply));
        reply
    }

    /// A permit semaphore's unexpired ids.
    fn live(&self, now: Instant) -> BTreeSet<[u8; 16]> {
        self.ids
            .iter()
            .filter(|(_, at)| **at > now)
            .map(|(id, _)| *id)
            .collect()
    }
}

/// Permits a caller holds.
#[derive(Debug)]
struct Guard {
    permits: u32,
    ids: Arc<[u8]>,
    lost: bool,
    /// Until when Redis is known to keep them (none: a plain semaphore's never expire).
    valid_until: Option<Instant>,
}

/// One manager's synchronizer actor, as its shell would drive it.
struct Manager {
    state: SyncState,
    alive: bool,
    stopping: bool,
    stopped: bool,
    /// Round trips sent and not yet finished.
    trips: Vec<Trip>,
    /// The waiters' deadlines armed (every other timer is in the state's table, on the shell's
    /// one timer for its next instant).
    timers: BTreeMap<String, (Instant, Timer)>,
    subscribing: bool,
    listening: bool,
    inbox: VecDeque<i64>,
    /// Waiters not answered yet, with what they want; those whose caller left.
    waiting: BTreeMap<WaiterId, u32>,
    gone: BTreeSet<WaiterId>,
    answered: BTreeSet<WaiterId>,
    /// Give-backs and adjustments whose reply is awaited.
    replies: BTreeSet<ReplyId>,
    guards: BTreeMap<u64, Guard>,
    tracked: BTreeSet<u64>,
    /// Grants nobody took (their caller left): their drop gives them back.
    dropped: Vec<u64>,
    /// Permits Redis counts for this manager (a plain semaphore).
    in_redis: i64,
    /// Requests that ran, by number: what each took (+) or gave back (-).
    ran: BTreeMap<u64, i64>,
    /// Given up after they ran (takes) or before (give-backs): Redis keeps counting them.
    leaked: i64,
    leaked_ids: BTreeSet<[u8; 16]>,
    next_waiter: WaiterId,
    next_reply: ReplyId,
    next_id: u64,
}

struct Sim {
    rng: Rng,
    now: Instant,
    redis: Redis,
    managers: Vec<Manager>,
    next_renewal: Instant,
    trace: Option<String>,
    step: usize,
}

type Failure = String;

impl Sim {
    fn new(seed: u64, trace: bool) -> Self {
        let mut rng = Rng(seed);
        let kind = if rng.chance(50) {
            SyncKind::PermitSemaphore
        } else {
            SyncKind::Semaphore
        };
        let permits = 1 + rng.below(3) as i64;
        // Held by a client outside the simulation, for good: waiters wanting them all wait
        // until permits are added.
        let foreign = rng.below(permits as usize) as i64;
        let now = Instant::now();
        let managers = (0..MANAGERS)
            .map(|_| Manager {
                state: SyncState::new(kind, "name".into(), settings(), now),
                alive: true,
                stopping: false,
                stopped: false,
                trips: Vec::new(),
                timers: BTreeMap::new(),
                subscribing: false,
                listening: false,
                inbox: VecDeque::new(),
                waiting: BTreeMap::new(),
                gone: BTreeSet::new(),
                answered: BTreeSet::new(),
                replies: BTreeSet::new(),
                guards: BTreeMap::new(),
                tracked: BTreeSet::new(),
                dropped: Vec::new(),
                in_redis: 0,
                ran: BTreeMap::new(),
                leaked: 0,
                leaked_ids: BTreeSet::new(),
                next_waiter: 0,
                next_reply: 0,
                next_id: 0,
            })
            .collect();
        Self {
            rng,
            now,
            redis: Redis {
                kind,
                permits,
                foreign,
                free: permits - foreign,
                ids: BTreeMap::new(),
                latches: BTreeMap::new(),
                check_latches: true,
                published: Vec::new(),
            },
            managers,
            next_renewal: now + TIMEOUT / 3,
            trace: trace.then(String::new),
            step: 0,
        }
    }

    fn log(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = &mut self.trace {
            let _ = writeln!(trace, "{:>3} {}", self.step, line());
        }
    }

    fn run(&mut self) -> Result<(), Failure> {
        let kind = self.redis.kind;
        let (permits, free) = (self.redis.permits, self.redis.free);
        self.log(|| format!("{kind:?} of {permits} permits, {free} free"));
        for step in 0..STEPS {
            self.step = step;
            self.one_step()?;
            self.settle()?;
            self.check()?;
        }
        self.finish()
    }

    fn one_step(&mut self) -> Result<(), Failure> {
        let m = self.rng.below(MANAGERS);
        if !self.managers[m].alive {
            return Ok(());
        }
        match self.rng.below(100) {
            0..15 => self.arrive(m),
            15..20 => self.foreign_add(),
            20..41 => self.finish_trip(m, true),
            41..53 => self.deliver(m),
            53..58 => self.complete_subscription(m),
            58..68 => self.give_back(m),
            68..72 => self.caller_gone(m),
            72..81 => self.add_permits(m),
            81..83 => self.connection_dropped(m),
            83..84 => self.kill(m),
            _ => {
                let by = Duration::from_millis(self.rng.below(1_500) as u64);
                self.advance(by)?;
            }
        }
        Ok(())
    }

    fn arrive(&mut self, m: usize) {
        let kind = self.redis.kind;
        let most = u32::try_from(self.redis.permits).unwrap_or(1).min(3);
        let wants = if self.rng.chance(50) {
            most
        } else {
            1 + self.rng.below(most as usize) as u32
        };
        let lease = (kind == SyncKind::PermitSemaphore && self.rng.chance(50))
            .then(|| Duration::from_millis(300 + self.rng.below(2_000) as u64));
        let wait = match self.rng.below(3) {
            0 => None,
            1 => Some(Duration::from_millis(200 + self.rng.below(4_000) as u64)),
            _ => Some(Duration::MAX),
        };
        let now = self.now;
        let mgr = &mut self.managers[m];
        // A few waiters per manager: enough to queue and hand off, few enough that a wake-up
        // is not always covered by someone else's attempt under way.
        if mgr.stopping || mgr.waiting.len() >= 3 {
            return;
        }
        mgr.next_waiter += 1;
        let id = mgr.next_waiter;
        let ids = if kind == SyncKind::PermitSemaphore {
            permit_ids(m, &mut mgr.next_id, wants)
        } else {
            Arc::from([])
        };
        mgr.waiting.insert(id, wants);
        let want = Want {
            permits: wants,
            lease,
            ids,
        };
        let wait = match wait {
            None => Wait::No,
            Some(d) if d == Duration::MAX => Wait::Forever,
            Some(d) => Wait::Up(d),
        };
        mgr.state.request(id, want, wait, now);
        self.log(|| format!("m{m}: waiter {id} wants {wants}, lease {lease:?}, wait {wait:?}"));
    }

    /// Finishes one round trip of manager `m`: its reply delivered, or (with `faults`) lost
    /// after it ran or before.
    fn finish_trip(&mut self, m: usize, faults: bool) {
        if self.managers[m].trips.is_empty() {
            return;
        }
        let at = self.rng.below(self.managers[m].trips.len());
        let trip = self.managers[m].trips.remove(at);
        let fault = if faults { self.rng.below(100) } else { 99 };
        let now = self.now;
        let reply = if fault < 15 {
            None
        } else {
            let reply = self.redis.run(m, &trip, now);
            let mgr = &mut self.managers[m];
            if let std::collections::btree_map::Entry::Vacant(e) = mgr.ran.entry(trip.seq) {
                let counted = match (&trip.op, reply) {
                    (Op::Take { permits, .. }, Reply::Take(Take::Taken)) => i64::from(*permits),
                    (Op::Give { permits, .. }, _) => -i64::from(*permits),
                    _ => 0,
                };
                e.insert(counted);
                if self.redis.kind == SyncKind::Semaphore {
                    mgr.in_redis += counted;
                }
            }
            (fault >= 30).then_some(reply)
        };
        self.log(|| format!("m{m}: trip {} {:?} → {reply:?}", trip.seq, trip.op));
        let outcome = match reply {
            Some(Reply::Take(t)) => Outcome::Take(Ok(t)),
            Some(Reply::Number(n)) => Outcome::Reply(Ok(n)),
            None => {
                let e = LockError::Timeout {
                    op: "synchronizer",
                    after: Duration::from_secs(1),
                };
                match trip.op {
                    Op::Take { .. } => Outcome::Take(Err(e)),
                    _ => Outcome::Reply(Err(e)),
                }
            }
        };
        let unknown = outcome.unknown();
        let mgr = &mut self.managers[m];
        mgr.state.ran(trip.seq, outcome, now);
        if unknown && !mgr.state.is_under_way(trip.seq) {
            // Given up: what it did (or did not do) in Redis nobody holds any more.
            let ran = mgr.ran.get(&trip.seq).copied();
            match &trip.op {
                Op::Take { permits, ids, .. } if ran.is_some_and(|n| n > 0) => {
                    mgr.leaked += i64::from(*permits);
                    mgr.leaked_ids.extend(split(ids));
                }
                Op::Give { permits, ids } if ran.is_none() => {
                    mgr.leaked += i64::from(*permits);
                    mgr.leaked_ids.extend(split(ids));
                }
                _ => {}
            }
            self.log(|| format!("m{m}: trip {} given up", trip.seq));
        }
    }

    fn deliver(&mut self, m: usize) {
        let now = self.now;
        let mgr = &mut self.managers[m];
        if let Some(x) = mgr.inbox.pop_front() {
            mgr.state.unlocked(Some(x), now);
            self.log(|| format!("m{m}: message {x}"));
        }
    }

    fn connection_dropped(&mut self, m: usize) {
        let now = self.now;
        let mgr = &mut self.managers[m];
        mgr.inbox.clear();
        if mgr.listening {
            mgr.state.resubscribed(now);
        }
        self.log(|| format!("m{m}: pub/sub connection dropped and back"));
    }

    fn complete_subscription(&mut self, m: usize) {
        let ok = self.rng.chance(90);
        self.complete_subscription_as(m, ok);
    }

    fn complete_subscription_as(&mut self, m: usize, ok: bool) {
        let now = self.now;
        let mgr = &mut self.managers[m];
        if std::mem::take(&mut mgr.subscribing) {
            mgr.listening = ok;
            mgr.state.subscribed(ok, now);
            self.log(|| format!("m{m}: subscribed {ok}"));
        }
    }

    fn give_back(&mut self, m: usize) {
        let reply = self.rng.chance(50);
        let now = self.now;
        let pick = self.rng.below(usize::MAX);
        let mgr = &mut self.managers[m];
        let Some(&epoch) = mgr.guards.keys().nth(pick % mgr.guards.len().max(1)) else {
            return;
        };
        mgr.guards.remove(&epoch);
        let reply = reply.then(|| {
            mgr.next_reply += 1;
            mgr.replies.insert(mgr.next_reply);
            mgr.next_reply
        });
        mgr.state.release(epoch, reply, now);
        self.log(|| format!("m{m}: epoch {epoch} given back (reply {reply:?})"));
    }

    fn caller_gone(&mut self, m: usize) {
        let pick = self.rng.below(usize::MAX);
        let now = self.now;
        let mgr = &mut self.managers[m];
        let left: Vec<WaiterId> = mgr
            .waiting
            .keys()
            .filter(|id| !mgr.gone.contains(id))
            .copied()
            .collect();
        let Some(&id) = left.get(pick % left.len().max(1)) else {
            return;
        };
        mgr.gone.insert(id);
        mgr.state.caller_gone(id, now);
        if !mgr.state.has(id) {
            // Left while parked: the actor counts it abandoned; no answer may follow.
            mgr.waiting.remove(&id);
            mgr.answered.insert(id);
            mgr.timers.remove(&format!("{:?}", Timer::Deadline(id)));
        }
        self.log(|| format!("m{m}: waiter {id}'s caller left"));
    }

    fn add_permits(&mut self, m: usize) {
        if self.redis.permits >= 6 {
            return;
        }
        let now = self.now;
        let mgr = &mut self.managers[m];
        if mgr.stopping {
            return;
        }
        mgr.next_reply += 1;
        mgr.replies.insert(mgr.next_reply);
        let op = Op::Adjust(Adjustment::AddPermits(1));
        mgr.state.adjust(op, Some(mgr.next_reply), now);
        self.log(|| format!("m{m}: add 1 permit"));
    }

    /// Another client (a Java one, say) adds a permit: straight into Redis, with the message
    /// its kind publishes (a permit semaphore's is the delta, 1).
    fn foreign_add(&mut self) {
        if self.redis.permits >= 6 {
            return;
        }
        self.redis.permits += 1;
        self.redis.free += 1;
        let message = match self.redis.kind {
            SyncKind::PermitSemaphore => 1,
            _ => self.redis.free,
        };
        self.redis.published.push(message);
        self.log(|| "another client adds 1 permit".into());
    }

    /// Manager `m`'s process dies: nothing more of it runs, nothing is given back or renewed.
    fn kill(&mut self, m: usize) {
        let mgr = &mut self.managers[m];
        mgr.alive = false;
        mgr.trips.clear();
        mgr.listening = false;
        mgr.inbox.clear();
        self.log(|| format!("m{m}: killed"));
    }

    /// Time passes by `by`: timers (waiters' deadlines among them) and renewals due fire in order.
    fn advance(&mut self, by: Duration) -> Result<(), Failure> {
        let end = self.now + by;
        loop {
            // A deadline, or the state's table (`None`): the shell's timer for its next instant.
            let mut next: Option<(Instant, usize, Option<Timer>)> = None;
            for (m, mgr) in self.managers.iter().enumerate() {
                if !mgr.alive {
                    continue;
                }
                let table = mgr.state.next_timeout().map(|at| (at, None));
                let deadlines = mgr.timers.values().map(|(at, t)| (*at, Some(t)));
                for (at, timer) in deadlines.chain(table) {
                    if next.as_ref().is_none_or(|n| at < n.0) {
                        next = Some((at, m, timer.cloned()));
                    }
                }
            }
            let renewal = self.next_renewal;
            match next {
                Some((at, m, None)) if at <= end && at <= renewal => {
                    self.now = at;
                    self.log(|| format!("m{m}: its table's timers fired"));
                    self.managers[m].state.timeout(at);
                }
                Some((at, m, Some(timer))) if at <= end && at <= renewal => {
                    self.now = at;
                    self.managers[m].timers.remove(&format!("{timer:?}"));
                    self.log(|| format!("m{m}: {timer:?} fired"));
                    self.managers[m].state.fired(timer, at);
                }
                _ if renewal <= end => {
                    self.now = renewal;
                    self.next_renewal = renewal + TIMEOUT / 3;
                    self.renew();
                }
                _ => {
                    self.now = end;
                    return Ok(());
                }
            }
            self.settle()?;
            self.check()?;
        }
    }

    /// The Watchdog's tick: every tracked grant whose ids are all held is renewed for another
    /// timeout; the others are lost.
    fn renew(&mut self) {
        let now = self.now;
        for m in 0..MANAGERS {
            if !self.managers[m].alive {
                continue;
            }
            let tracked: Vec<u64> = self.managers[m].tracked.iter().copied().collect();
            for epoch in tracked {
                // The ids the Watchdog was given with the grant.
                let ids = self.managers[m]
                    .state
                    .holds
                    .get(epoch)
                    .map(|h| h.ids.clone());
                if let Some(ids) = ids {
                    self.renew_one(m, epoch, &ids, now);
                }
            }
        }
    }

    fn renew_one(&mut self, m: usize, epoch: u64, ids: &[u8], now: Instant) {
        let ids = split(ids);
        let held = ids
            .iter()
            .all(|id| self.redis.ids.get(id).is_some_and(|at| *at > now));
        let mgr = &mut self.managers[m];
        if held {
            for id in ids {
                self.redis.ids.insert(id, now + TIMEOUT);
            }
            if let Some(g) = mgr.guards.get_mut(&epoch) {
                g.valid_until = Some(now + TIMEOUT);
            }
        } else {
            mgr.tracked.remove(&epoch);
            mgr.state.hold_lost(epoch, now);
            self.log(|| format!("m{m}: renewal found epoch {epoch} gone"));
        }
    }

    /// Carries out every manager's effects, hands published messages to the listeners, and
    /// gives back grants nobody took; until nothing is left.
    fn settle(&mut self) -> Result<(), Failure> {
        loop {
            let mut any = false;
            for m in 0..MANAGERS {
                let mut out = Vec::new();
                self.managers[m].state.drain_into(&mut out);
                for e in out {
                    any = true;
                    if self.managers[m].alive {
                        self.effect(m, e)?;
                    }
                }
                let now = self.now;
                let mgr = &mut self.managers[m];
                for epoch in std::mem::take(&mut mgr.dropped) {
                    any = true;
                    mgr.guards.remove(&epoch);
                    mgr.state.release(epoch, None, now);
                }
            }
            for x in std::mem::take(&mut self.redis.published) {
                for mgr in &mut self.managers {
                    if mgr.alive && mgr.listening {
                        mgr.inbox.push_back(x);
                    }
                }
            }
            if !any {
                return Ok(());
            }
        }
    }

    fn effect(&mut self, m: usize, e: Effect) -> Result<(), Failure> {
        let now = self.now;
        if !matches!(e, Effect::Run(_)) {
            self.log(|| format!("m{m}: → {e:?}"));
        }
        let mgr = &mut self.managers[m];
        match e {
            Effect::Run(trip) => mgr.trips.push(trip),
            Effect::Answer(id, answer) => {
                if mgr.waiting.remove(&id).is_none() || !mgr.answered.insert(id) {
                    return Err(format!("m{m}: waiter {id} answered twice, or never waited"));
                }
                mgr.timers.remove(&format!("{:?}", Timer::Deadline(id)));
                if let Answer::Done { grant: Some(g), .. } = answer {
                    mgr.guards.insert(
                        g.epoch,
                        Guard {
                            permits: g.permits,
                            ids: g.ids,
                            lost: false,
                            valid_until: g.confirmed.map(|(sent, ttl)| sent + ttl),
                        },
                    );
                    if mgr.gone.contains(&id) {
                        mgr.dropped.push(g.epoch);
                    }
                }
            }
            Effect::Done(r, _) if !mgr.replies.remove(&r) => {
                return Err(format!("m{m}: reply {r} sent twice, or never asked"));
            }
            Effect::Done(..) => {}
            Effect::Subscribe(_) => {
                if mgr.subscribing || mgr.listening {
                    return Err(format!("m{m}: subscribed twice"));
                }
                mgr.subscribing = true;
            }
            Effect::Unsubscribe(_) => {
                mgr.subscribing = false;
                mgr.listening = false;
                mgr.inbox.clear();
            }
            Effect::Arm(id, after) => {
                let timer = Timer::Deadline(id);
                mgr.timers
                    .insert(format!("{timer:?}"), (now + after, timer));
            }
            Effect::Cancel(id) => {
                mgr.timers.remove(&format!("{:?}", Timer::Deadline(id)));
            }
            Effect::Track { epoch, .. } => {
                mgr.tracked.insert(epoch);
            }
            Effect::Untrack { epoch, .. } => {
                mgr.tracked.remove(&epoch);
            }
            Effect::Lost(epoch, _) => {
                if let Some(g) = mgr.guards.get_mut(&epoch) {
                    g.lost = true;
                }
            }
            Effect::Ended(epoch) => {
                // Given back by the stop: its guard learns it lost.
                mgr.guards.remove(&epoch);
            }
            Effect::Busy | Effect::Idle | Effect::Watch(_) => {}
            Effect::Stopped => {
                mgr.stopped = true;
                mgr.guards.clear();
            }
        }
        Ok(())
    }

    /// What must hold after every step.
    fn check(&self) -> Result<(), Failure> {
        let now = self.now;
        self.check_conservation()?;
        let live = self.redis.live(now);
        for (m, mgr) in self.managers.iter().enumerate() {
            if !mgr.alive {
                continue;
            }
            // Busy while it has anything, idle (free to linger and stop) once it has nothing.
            let s = &mgr.state;
            if s.busy != s.has_work() {
                return Err(format!(
                    "m{m}: busy {} with work left {}",
                    s.busy,
                    s.has_work()
                ));
            }
            // An idle actor keeps no timer armed: the shell's timer for the table keeps the
            // actor alive after it departs while set (a permit semaphore's retry, armed a
            // watchdog timeout away, held one 30 s).
            if !s.busy && (!mgr.timers.is_empty() || s.timers.next().is_some()) {
                let armed: Vec<String> = (mgr.timers.keys().cloned())
                    .chain(s.timers.iter().map(|t| format!("{t:?}")))
                    .collect();
                return Err(format!("m{m}: idle with timers armed: {armed:?}"));
            }
            let held: i64 = mgr.guards.values().map(|g| i64::from(g.permits)).sum();
            if self.redis.kind == SyncKind::Semaphore {
                if held > mgr.in_redis {
                    return Err(format!(
                        "m{m}: guards hold {held}, Redis counts {} for it",
                        mgr.in_redis
                    ));
                }
            } else {
                for (epoch, g) in &mgr.guards {
                    let valid = !g.lost && g.valid_until.is_some_and(|v| now < v);
                    if valid && !split(&g.ids).iter().all(|id| live.contains(id)) {
                        return Err(format!(
                            "m{m}: epoch {epoch} valid, its ids gone from Redis"
                        ));
                    }
                }
            }
            if !mgr.trips.is_empty() || !mgr.state.trips.is_empty() || mgr.stopping {
                continue;
            }
            // Nothing under way: Redis counts exactly what its guards hold, and its leaks.
            if self.redis.kind == SyncKind::Semaphore {
                if mgr.in_redis != held + mgr.leaked {
                    return Err(format!(
                        "m{m}: Redis counts {}, guards hold {held}, leaked {}",
                        mgr.in_redis, mgr.leaked
                    ));
                }
            } else {
                let mine: BTreeSet<[u8; 16]> =
                    live.iter().filter(|id| id[0] == m as u8).copied().collect();
                let accounted: BTreeSet<[u8; 16]> = mgr
                    .guards
                    .values()
                    .flat_map(|g| split(&g.ids))
                    .chain(mgr.leaked_ids.iter().copied())
                    .collect();
                if !mine.is_subset(&accounted) {
                    return Err(format!(
                        "m{m}: Redis holds {:?} for nobody",
                        mine.difference(&accounted).collect::<Vec<_>>()
                    ));
                }
            }
            // A free permit with a waiter always has a message, timer or round trip coming:
            // a message queued, the subscription completing, a request sent again, or the retry
            // timer of an error's backoff or a failed subscription. A permit semaphore's retry
            // hint (when a held permit expires) is for permits not free yet: it does not count
            // for those free now, which a message should have woken it for.
            let table = &mgr.state.timers;
            let resend = table.iter().any(|t| matches!(t, Timer::Resend(_)));
            let retry = table.is_armed(&Timer::Retry);
            let coming = !mgr.inbox.is_empty() || mgr.subscribing || resend;
            let stranded = mgr.state.waiters.iter().find(|w| {
                let backoff = retry && (w.failures > 0 || !mgr.state.link.has_subscription());
                i64::from(w.wants) <= self.redis.free && !coming && !backoff
            });
            if let Some(w) = stranded {
                return Err(format!(
                    "m{m}: waiter {} wants {} with {} free and nothing coming",
                    w.id, w.wants, self.redis.free
                ));
            }
            // A permit semaphore's permit whose lease ended goes back to the free count only
            // when some client's script reclaims it, and publishes nothing before: a waiter it
            // would make room for needs the retry timer, armed for a waiter due.
            if self.redis.kind == SyncKind::PermitSemaphore {
                let expired = self.redis.ids.values().filter(|at| **at <= now).count() as i64;
                let due = retry && mgr.state.waiters.iter().any(|w| w.due);
                let stranded = mgr.state.waiters.iter().find(|w| {
                    expired > 0
                        && i64::from(w.wants) <= self.redis.free + expired
                        && !coming
                        && !due
                });
                if let Some(w) = stranded {
                    return Err(format!(
                        "m{m}: waiter {} wants {} with {} free and {expired} expired, not \
                         reclaimed, and no retry coming",
                        w.id, w.wants, self.redis.free
                    ));
                }
            }
        }
        Ok(())
    }

    /// Permits are neither made nor lost: the free count and what is held (a semaphore's, by
    /// what each manager's requests took and gave back on their first run, dead managers'
    /// included; a permit semaphore's, by its ids) add up to the permits there are, less those
    /// held outside the simulation. A request applied twice breaks it at once, even where no
    /// manager's own count shows it.
    fn check_conservation(&self) -> Result<(), Failure> {
        let redis = &self.redis;
        let held = match redis.kind {
            SyncKind::PermitSemaphore => redis.ids.len() as i64,
            _ => self.managers.iter().map(|mgr| mgr.in_redis).sum(),
        };
        if redis.free + held != redis.permits - redis.foreign {
            return Err(format!(
                "conservation: {} free and {held} held of {} permits, {} held outside",
                redis.free, redis.permits, redis.foreign
            ));
        }
        Ok(())
    }

    /// Every manager left stops, giving back what it holds; round trips finish without faults
    /// and time runs until nothing is left. Then everything has its answer, and Redis counts
    /// nothing for a stopped manager but its leaks.
    fn finish(&mut self) -> Result<(), Failure> {
        self.log(|| "-- the end: every manager stops".into());
        let now = self.now;
        for mgr in &mut self.managers {
            if mgr.alive {
                mgr.stopping = true;
                mgr.state.stop(true, now);
            }
        }
        self.settle()?;
        for _ in 0..10_000 {
            let busy = (0..MANAGERS).find(|&m| {
                let mgr = &self.managers[m];
                mgr.alive && (!mgr.trips.is_empty() || !mgr.stopped)
            });
            match busy {
                Some(m) if !self.managers[m].trips.is_empty() => self.finish_trip(m, false),
                Some(_) => self.advance(Duration::from_millis(100))?,
                None => break,
            }
            self.settle()?;
        }
        for (m, mgr) in self.managers.iter().enumerate() {
            if !mgr.alive {
                continue;
            }
            if !mgr.stopped || !mgr.waiting.is_empty() || !mgr.replies.is_empty() {
                return Err(format!(
                    "m{m}: stopped {}, waiters {:?} and replies {:?} left unanswered",
                    mgr.stopped, mgr.waiting, mgr.replies
                ));
            }
            if self.redis.kind == SyncKind::Semaphore && mgr.in_redis != mgr.leaked {
                return Err(format!(
                    "m{m}: stopped, Redis counts {} for it, leaked {}",
                    mgr.in_redis, mgr.leaked
                ));
            }
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
    let replay = "LOCKMAN_SYNC_SIM_SEED={seed} cargo test --lib sync_state";
    run_one(Sim::new(seed, trace), seed, replay)
}

#[test]
fn every_schedule_keeps_the_permits_counted_and_every_waiter_answered() {
    run_schedules("LOCKMAN_SYNC_SIM", SCHEDULES, run_seed);
}

/// The simulation is what proves a request sent again counted once: with Redis's scripts
/// ignoring request latches (a resend of a request that ran runs again), some schedule breaks
/// an invariant, and the first to break is the conservation of permits, at the step the
/// request runs again (not a later symptom that some schedule may happen to show).
#[test]
fn a_redis_that_ignores_request_latches_is_caught() {
    must_catch(SCHEDULES, |seed| {
        let mut sim = Sim::new(seed, false);
        sim.redis.check_latches = false;
        sim
    });
    let first = (0..SCHEDULES).find_map(|seed| {
        let mut sim = Sim::new(seed, false);
        sim.redis.check_latches = false;
        sim.run().err()
    });
    assert!(
        first
            .as_ref()
            .is_some_and(|why| why.starts_with("conservation")),
        "{first:?}"
    );
}

/// The schedule of issue 35, step by step: a permit semaphore of 2 permits with 1 free (the
/// other held elsewhere); a waiter wants 2; another client adds 1 permit, which publishes 1. The
/// waiter must try again at that message: nothing else is coming. With the wake rule that read
/// a message as a budget of free permits, this fails.
#[test]
fn a_message_of_one_wakes_a_waiter_of_two_when_nothing_else_is_coming() -> Result<(), Failure> {
    let mut sim = Sim::new(0, true);
    sim.redis.kind = SyncKind::PermitSemaphore;
    (sim.redis.permits, sim.redis.free, sim.redis.foreign) = (2, 1, 1);
    sim.managers[0].state = SyncState::new(sim.redis.kind, "name".into(), settings(), sim.now);
    let mgr = &mut sim.managers[0];
    mgr.waiting.insert(1, 2);
    let want = Want {
        permits: 2,
        lease: None,
        ids: permit_ids(0, &mut mgr.next_id, 2),
    };
    mgr.state.request(1, want, Wait::Forever, sim.now);
    sim.settle()?;
    sim.finish_trip(0, false);
    sim.settle()?;
    sim.complete_subscription_as(0, true);
    sim.settle()?;
    sim.finish_trip(0, false);
    sim.settle()?;
    sim.check()?;
    sim.foreign_add();
    sim.settle()?;
    sim.deliver(0);
    sim.settle()?;
    sim.check()?;
    sim.finish_trip(0, false);
    sim.settle()?;
    let mgr = &sim.managers[0];
    assert!(
        mgr.answered.contains(&1) && mgr.guards.len() == 1,
        "{:?}",
        sim.trace
    );
    Ok(())
}

/// Item 1 of the synchronizer review, step by step: the one permit is held by a client that
/// crashed, its lease ending at T. Waiter 1 (bounded wait) falls short with the hint T; waiter 2
/// (no limit) queues behind it without an attempt. Waiter 1's deadline comes before T and times
/// it out. The expiry at T publishes nothing: the retry timer must wake waiter 2. Without the
/// hint handed on, the check (an expired permit not reclaimed, a waiter it makes room for, no
/// retry coming) fails at T.
#[test]
fn a_waiter_queued_behind_a_hint_is_woken_when_the_permit_expires() -> Result<(), Failure> {
    let mut sim = Sim::new(0, true);
    sim.redis.kind = SyncKind::PermitSemaphore;
    (sim.redis.permits, sim.redis.free, sim.redis.foreign) = (1, 0, 0);
    let t = sim.now + Duration::from_secs(5);
    sim.redis.ids.insert([9; 16], t);
    for mgr in &mut sim.managers {
        mgr.state = SyncState::new(sim.redis.kind, "name".into(), settings(), sim.now);
    }
    let request = |sim: &mut Sim, id: WaiterId, wait: Wait| {
        let mgr = &mut sim.managers[0];
        mgr.waiting.insert(id, 1);
        let want = Want {
            permits: 1,
            lease: None,
            ids: permit_ids(0, &mut mgr.next_id, 1),
        };
        mgr.state.request(id, want, wait, sim.now);
    };
    request(&mut sim, 1, Wait::Up(Duration::from_secs(1)));
    sim.settle()?;
    sim.finish_trip(0, false);
    sim.settle()?;
    sim.complete_subscription_as(0, true);
    sim.settle()?;
    sim.finish_trip(0, false);
    sim.settle()?;
    request(&mut sim, 2, Wait::Forever);
    sim.settle()?;
    assert!(sim.managers[0].trips.is_empty(), "waiter 2 queues");
    sim.advance(Duration::from_secs(1))?;
    sim.finish_trip(0, false);
    sim.settle()?;
    sim.check()?;
    assert!(sim.managers[0].answered.contains(&1));
    sim.advance(Duration::from_secs(5))?;
    sim.finish_trip(0, false);
    sim.settle()?;
    sim.check()?;
    let mgr = &sim.managers[0];
    assert!(
        mgr.answered.contains(&2) && mgr.guards.len() == 1,
        "{:?}",
        sim.trace
    );
    Ok(())
}
