//! The property test: random event sequences, answered by a model of Redis, with the invariants
//! of the state machine checked after every step.
//!
//! The lock is reentrant, fenced, read-write (a request takes either side), fair (its queue
//! and its waiters' own channels in the model), non-reentrant or non-reentrant fair, chosen per
//! case; a request has a lease or
//! none (a lease's end is a timer, which a step may fire at any time). Every round trip may fail: an acquire,
//! release or hand-off with an unknown outcome (the request ran or not; sent again, it expects
//! the same counts and the model recognises a run from them), the others before or after
//! they ran (a settle, a queue leave, a shutdown that never reached Redis); unlock messages may
//! come twice, or with nothing released. After every step: one holder at most, and Redis counts
//! at least what its live guards hold (a count below it would be a hold taken back); whenever
//! the state is quiet, exactly what they hold; fencing tokens only go up; a free lock with
//! waiters has a round trip, a timer or a message coming; a non-reentrant lock counts no holder
//! twice, in Redis or in its live guards (a second acquire by the holder is refused,
//! `AlreadyHeld`, and only while Redis counts it). At the end the state stops: every
//! waiter is answered, and Redis holds nothing (unless the shutdown never reached it: then its
//! holds expire, nobody renewing them).
//!
//! Leases counted in virtual time, their expiry in Redis and several managers on one name are
//! the simulation's (`simulation.rs`),
//! which shares this model of Redis.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::super::*;
use super::model::Redis;
use super::{SECOND, req, state, timeout};

#[derive(Clone, Debug)]
pub(super) enum Step {
    Request {
        holder: u8,
        wait: u8,
        /// The write side, when the lock is a read-write lock.
        write: bool,
        /// With a lease (its expiry is a timer the case may fire), else on the watchdog.
        lease: bool,
    },
    Release {
        which: usize,
    },
    Drop {
        which: usize,
    },
    /// Finish the round trip under way; `fail`: an error of unknown outcome, `ran`: it still ran.
    Finish {
        fail: bool,
        ran: bool,
    },
    Fire {
        which: usize,
    },
    CallerGone {
        which: usize,
    },
    /// An unlock message: delivered (`twice`: delivered again), or one nobody published.
    Message {
        twice: bool,
    },
    Spurious,
    Resubscribed,
    LoseHold {
        which: usize,
    },
}

pub(super) fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u8..3, 0u8..3, any::<bool>(), proptest::bool::weighted(0.3))
            .prop_map(|(holder, wait, write, lease)| Step::Request { holder, wait, write, lease }),
        2 => any::<usize>().prop_map(|which| Step::Release { which }),
        1 => any::<usize>().prop_map(|which| Step::Drop { which }),
        6 => (proptest::bool::weighted(0.1), any::<bool>()).prop_map(|(fail, ran)| Step::Finish { fail, ran }),
        2 => any::<usize>().prop_map(|which| Step::Fire { which }),
        1 => any::<usize>().prop_map(|which| Step::CallerGone { which }),
        2 => any::<bool>().prop_map(|twice| Step::Message { twice }),
        1 => Just(Step::Spurious),
        1 => Just(Step::Resubscribed),
        1 => any::<usize>().prop_map(|which| Step::LoseHold { which }),
    ]
}

/// The shell's side: what the effects did.
struct Shell {
    redis: Redis,
    flight: Option<Op>,
    waiting: BTreeSet<WaiterId>,
    answered: BTreeSet<WaiterId>,
    watched: BTreeSet<WaiterId>,
    /// Guards held: (key, epoch).
    guards: Vec<(HoldKey, u64)>,
    lost: BTreeSet<u64>,
    timers: BTreeMap<String, Timer>,
    subscribed: BTreeSet<String>,
    next_reply: u64,
    /// The newest fencing token handed out.
    token: u64,
    /// The state was told to stop.
    stopping: bool,
    /// The shutdown's round trip never reached Redis.
    shutdown_failed: bool,
    /// The case's lock kind (a read-write lock's: `Read`).
    family: LockKind,
    /// Requests answered `AlreadyHeld`.
    refused: u32,
    /// The differential test's recording (`short.rs`): every effect, in order, its hold
    /// epochs numbered as first seen (epochs are process-wide, so two runs differ in them).
    log: Option<Vec<String>>,
    epochs: Vec<u64>,
    /// A virtual clock for recorded runs: its start, and the reads so far (a millisecond each),
    /// so that two runs see the same instants.
    clock: Option<(Instant, u32)>,
}

impl Default for Shell {
    fn default() -> Self {
        Self {
            redis: Redis::new(false),
            flight: None,
            waiting: BTreeSet::new(),
            answered: BTreeSet::new(),
            watched: BTreeSet::new(),
            guards: Vec::new(),
            lost: BTreeSet::new(),
            timers: BTreeMap::new(),
            subscribed: BTreeSet::new(),
            next_reply: 0,
            token: 0,
            stopping: false,
            shutdown_failed: false,
            family: LockKind::Reentrant,
            refused: 0,
            log: None,
            epochs: Vec::new(),
            clock: None,
        }
    }
}

impl Shell {
    /// The time now: the virtual clock's, when the run is recorded.
    fn now(&mut self) -> Instant {
        match &mut self.clock {
            Some((start, reads)) => {
                *reads += 1;
                *start + Duration::from_millis(u64::from(*reads))
            }
            None => Instant::now(),
        }
    }

    /// Hold `epoch`'s number in the recording: in the order epochs were first seen.
    fn epoch_no(&mut self, epoch: u64) -> usize {
        match self.epochs.iter().position(|e| *e == epoch) {
            Some(n) => n,
            None => {
                self.epochs.push(epoch);
                self.epochs.len() - 1
            }
        }
    }

    /// `e` as recorded: its epoch (if any) by number.
    fn recorded(&mut self, e: &Effect) -> String {
        match e {
            Effect::Answer(
                id,
                Answer::Granted {
                    key,
                    epoch,
                    token,
                    confirmed,
                },
            ) => format!(
                "Answer({id}, Granted {{ {key:?}, #{}, {token:?}, {confirmed:?} }})",
                self.epoch_no(*epoch)
            ),
            Effect::Track {
                hold,
                epoch,
                confirmed,
            } => format!("Track({hold:?}, #{}, {confirmed:?})", self.epoch_no(*epoch)),
            Effect::Untrack { hold, epoch } => {
                format!("Untrack({hold:?}, #{})", self.epoch_no(*epoch))
            }
            Effect::Lost(epoch, loss) => format!("Lost(#{}, {loss:?})", self.epoch_no(*epoch)),
            Effect::Ended(epoch) => format!("Ended(#{})", self.epoch_no(*epoch)),
            other => format!("{other:?}"),
        }
    }

    /// How the Fire step orders `t` among the timers armed: by its debug form, its epoch by
    /// number in a recorded run (so that two recorded runs fire the same timers).
    fn timer_key(&mut self, t: &Timer) -> String {
        match t {
            Timer::Expiry(key, epoch) if self.log.is_some() => {
                format!("Expiry({key:?}, #{})", self.epoch_no(*epoch))
            }
            other => format!("{other:?}"),
        }
    }

    fn apply(&mut self, s: &mut LockState) -> Result<(), TestCaseError> {
        let trace = std::env::var_os("LOCKMAN_TRACE").is_some();
        for e in s.drain() {
            if trace {
                eprintln!("  {e:?}");
            }
            if self.log.is_some() {
                let line = self.recorded(&e);
                if let Some(log) = &mut self.log {
                    log.push(line);
                }
            }
            match e {
                Effect::Run(op) => {
                    prop_assert!(self.flight.is_none(), "two round trips at once");
                    self.flight = Some(op);
                }
                Effect::Answer(id, answer) => {
                    prop_assert!(self.answered.insert(id), "waiter {id} answered twice");
                    prop_assert!(!s.is_waiting(id), "waiter {id} answered but still waiting");
                    self.waiting.remove(&id);
                    if let Answer::Failed(LockError::AlreadyHeld { .. }) = &answer {
                        // Refused by the model's script, which refuses only a holder it counts.
                        prop_assert!(
                            self.family.is_non_reentrant(),
                            "waiter {id}: AlreadyHeld from a reentrant kind"
                        );
                        self.refused += 1;
                    }
                    if let Answer::Granted {
                        key, epoch, token, ..
                    } = answer
                    {
                        if let Some(token) = token {
                            prop_assert!(token > self.token, "token {token} after {}", self.token);
                            self.token = token;
                        }
                        self.guards.push((key, epoch));
                    }
                }
                Effect::Watch(id) => {
                    prop_assert!(
                        !self.answered.contains(&id),
                        "watching {id}, answered before"
                    );
                    prop_assert!(self.watched.insert(id), "waiter {id} watched twice");
                }
                Effect::Arm(id, _) => {
                    let t = Timer::Deadline(id);
                    self.timers.insert(format!("{t:?}"), t);
                }
                Effect::Cancel(id) => {
                    self.timers.remove(&format!("{:?}", Timer::Deadline(id)));
                }
                Effect::Subscribe(c) => {
                    self.subscribed.insert(c.to_string());
                }
                Effect::Unsubscribe(c) => {
                    prop_assert!(self.subscribed.remove(&*c), "unsubscribed {c} twice");
                }
                Effect::Lost(epoch, _) | Effect::Ended(epoch) => {
                    self.lost.insert(epoch);
                    self.guards.retain(|(_, e)| *e != epoch);
                }
                _ => {}
            }
        }
        s.check()?;
        // Every waiter is watched, but the one whose attempt is under way: a caller that leaves
        // is noticed.
        let attempting = s.trips.attempting();
        for id in &self.waiting {
            if s.is_waiting(*id) && Some(*id) != attempting {
                prop_assert!(self.watched.contains(id), "waiter {id} waits unwatched");
            }
        }
        // Exclusion: the live guards of an exclusive kind belong to one holder at most, and no
        // one else holds beside it (readers share; a writer may read too). Redis agrees: see
        // `counts`.
        let exclusive: BTreeSet<&str> = self
            .guards
            .iter()
            .filter(|((_, kind), _)| *kind != LockKind::Read)
            .map(|((h, _), _)| &**h)
            .collect();
        prop_assert!(exclusive.len() <= 1, "two exclusive holders: {exclusive:?}");
        if let Some(owner) = exclusive.first() {
            let others: Vec<_> = self
                .guards
                .iter()
                .filter(|((h, _), _)| &**h != *owner)
                .collect();
            prop_assert!(others.is_empty(), "{owner} holds beside {others:?}");
        }
        if s.waiters.is_empty() {
            // But the channel kept after a grant (`Link::keep`), which the state knows of.
            let kept = s.link.kept().map(|c| c.to_string());
            let unneeded: Vec<_> = (self.subscribed.iter())
                .filter(|c| Some(*c) != kept.as_ref())
                .collect();
            prop_assert!(
                unneeded.is_empty(),
                "subscribed without a waiter: {unneeded:?}"
            );
        }
        if self.family.is_non_reentrant() {
            // The non-reentrant rule: one hold per holder at most, in Redis and in live guards.
            let twice = self.redis.counts.iter().find(|(_, n)| **n > 1);
            prop_assert!(twice.is_none(), "counted twice in Redis: {twice:?}");
            let mut holders: Vec<&str> = self.guards.iter().map(|((h, _), _)| &**h).collect();
            let all = holders.len();
            holders.dedup();
            prop_assert_eq!(holders.len(), all, "two live guards of one holder");
        }
        self.counts(s)?;
        // No stranded place: when the state is quiet, every place in the fair queue is a local
        // waiter's, or one whose failed leave is being sent again.
        if self.flight.is_none() && s.is_quiet() && !self.stopping {
            for h in &self.redis.queue {
                prop_assert!(
                    s.waiters.has_holder(h) || s.fair.leaves(h),
                    "a place of {h} with no waiter: queue {:?}",
                    self.redis.queue
                );
            }
        }
        // Liveness: a free lock with waiters has something coming that makes one of them try.
        if self.redis.counts.is_empty() && !s.waiters.is_empty() {
            let published = self.redis.published > 0 || !self.redis.woken.is_empty();
            let message = published && !self.subscribed.is_empty();
            prop_assert!(
                self.flight.is_some()
                    || !self.timers.is_empty()
                    || s.next_timeout().is_some()
                    || message,
                "a free lock, {} waiting, nothing coming",
                s.waiters.len()
            );
        }
        Ok(())
    }

    /// Redis counts each holder at least the holds of its live guards; exactly as many when the
    /// state is quiet (nothing under way, unresolved or waiting to be settled).
    fn counts(&self, s: &LockState) -> Result<(), TestCaseError> {
        let quiet = self.flight.is_none() && s.is_quiet();
        let mut fields: BTreeSet<String> = self
            .guards
            .iter()
            .map(|((h, kind), _)| kind.field(h))
            .collect();
        fields.extend(self.redis.counts.keys().map(|f| f.to_string()));
        for field in fields {
            let live = self
                .guards
                .iter()
                .filter(|((h, kind), _)| kind.field(h) == field)
                .count() as u32;
            let in_redis = self.redis.count(&field);
            prop_assert!(
                in_redis >= live,
                "{field}: Redis counts {in_redis}, live guards {live}"
            );
            if quiet && !self.stopping {
                prop_assert_eq!(
                    in_redis,
                    live,
                    "{}: quiet, Redis and the guards differ",
                    field
                );
            }
        }
        Ok(())
    }

    /// Finishes the round trip under way against the model.
    fn finish(&mut self, s: &mut LockState, fail: bool, ran: bool) {
        let Some(op) = self.flight.take() else {
            return;
        };
        // A reply lost on the way back (`ran`) or a request lost on the way there.
        if !fail || ran {
            let now = self.now();
            let outcome = self.redis.run(&op, now);
            if !fail {
                s.ran(outcome, self.now());
                return;
            }
        }
        let outcome = match op {
            Op::Acquire { .. } => Outcome::Acquire(Err(timeout())),
            Op::Release { .. } | Op::HandOff { .. } => Outcome::Release(Err(timeout())),
            Op::LeaveQueue { .. } => Outcome::LeaveQueue(Err(timeout())),
            Op::FairRefresh { .. } => Outcome::FairRefresh(Err(timeout())),
            Op::Settle { .. } => Outcome::Settle(Err(timeout())),
            // A shutdown is answered whatever became of it (the actor stops either way).
            Op::Shutdown { .. } => {
                self.shutdown_failed |= !ran;
                Outcome::Shutdown
            }
        };
        s.ran(outcome, self.now());
    }
}

impl LockState {
    /// The state's own invariants.
    fn check(&self) -> Result<(), TestCaseError> {
        for (key, hold) in &self.holds {
            prop_assert!(hold.count >= 1, "{key:?}: count {}", hold.count);
            prop_assert!(
                hold.unreleased <= hold.count,
                "{key:?}: more unreleased than held"
            );
        }
        for channel in self.link.subscriptions() {
            let needed = self
                .waiters
                .iter()
                .any(|w| self.channel_of(&w.holder) == *channel);
            // Kept after a grant: only the lock's own channel, of an unfair kind.
            let kept = self.link.kept() == Some(channel)
                && *channel == self.channel
                && !self.family.is_fair();
            prop_assert!(needed || kept, "{channel}: no waiter");
        }
        prop_assert_eq!(self.waiters.iter().count(), self.waiters.len());
        Ok(())
    }
}

fn pick<T: Clone>(items: &[T], which: usize) -> Option<T> {
    (!items.is_empty()).then(|| items[which % items.len()].clone())
}

proptest! {
    // PCASES=20000 for a long run.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PCASES").ok().and_then(|n| n.parse().ok()).unwrap_or(400),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_event_sequences_keep_the_invariants(
        family in 0u8..7,
        steps in proptest::collection::vec(step(), 1..120),
    ) {
        run(family, steps)?;
    }
}

/// One case: the lock of `family` (0 reentrant, 1 fenced, 2 read-write, 3 fair, 4 non-reentrant,
/// 5 non-reentrant fair, 6 spin) driven by `steps`.
fn run(family: u8, steps: Vec<Step>) -> Result<(), TestCaseError> {
    run_counting(family, steps).map(|_| ())
}

/// [`run`], returning how many requests were refused `AlreadyHeld`.
fn run_counting(family: u8, steps: Vec<Step>) -> Result<u32, TestCaseError> {
    drive(family, steps, None).map(|(refused, _)| refused)
}

/// [`run`], recording every effect (see `Shell::recorded`) with the short path on or off
/// (`short`), on a virtual clock from `start`: the differential test's run.
pub(super) fn recorded(
    family: u8,
    steps: Vec<Step>,
    short: bool,
    start: Instant,
) -> Result<Vec<String>, TestCaseError> {
    drive(family, steps, Some((short, start))).map(|(_, log)| log)
}

/// One case (see [`run`]); `record`: whether the short path is on, and the virtual clock's
/// start, for a recorded run. Returns the requests refused `AlreadyHeld`, and the recording.
fn drive(
    family: u8,
    steps: Vec<Step>,
    record: Option<(bool, Instant)>,
) -> Result<(u32, Vec<String>), TestCaseError> {
    let family = [
        LockKind::Reentrant,
        LockKind::Fenced,
        LockKind::Read,
        LockKind::Fair,
        LockKind::NonReentrant,
        LockKind::NonReentrantFair,
        LockKind::Spin,
    ][family as usize];
    let mut s = state(family);
    let mut sh = Shell {
        redis: Redis::new(family == LockKind::Fenced),
        family,
        ..Shell::default()
    };
    if let Some((short, start)) = record {
        s.general_only = !short;
        sh.log = Some(Vec::new());
        sh.clock = Some((start, 0));
    }
    let holders = ["a", "b", "c"];
    for step in steps {
        if std::env::var_os("LOCKMAN_TRACE").is_some() {
            eprintln!("{step:?}");
        }
        match step {
            Step::Request {
                holder,
                wait,
                write,
                lease,
            } => {
                let kind = match family {
                    LockKind::Read if write => LockKind::Write,
                    other => other,
                };
                let wait = [Wait::No, Wait::Up(SECOND), Wait::Forever][wait as usize];
                let request = Request {
                    kind,
                    lease: lease.then_some(10 * SECOND),
                    ..req(holders[holder as usize], wait)
                };
                let id = s.request(request, sh.now());
                sh.waiting.insert(id);
            }
            Step::Release { which } | Step::Drop { which } => {
                if let Some((key, epoch)) = pick(&sh.guards, which) {
                    let at = sh.guards.iter().position(|g| g.1 == epoch && g.0 == key);
                    if let Some(at) = at {
                        sh.guards.remove(at);
                    }
                    sh.next_reply += 1;
                    let reply = matches!(step, Step::Release { .. }).then_some(sh.next_reply);
                    s.release(key, epoch, reply, sh.now());
                }
            }
            Step::Finish { fail, ran } => sh.finish(&mut s, fail, ran),
            Step::Fire { which } => {
                // Any timer armed, at any moment: the deadlines the shell was asked to arm, and
                // the state's table (in an order that does not depend on its hashing).
                let mut armed = BTreeMap::new();
                let deadlines: Vec<Timer> = sh.timers.values().cloned().collect();
                for t in deadlines.iter().chain(s.timers.iter()) {
                    armed.insert(sh.timer_key(t), t.clone());
                }
                let timers: Vec<_> = armed.into_values().collect();
                if let Some(t) = pick(&timers, which) {
                    sh.timers.remove(&format!("{t:?}"));
                    s.fired(t, sh.now());
                }
            }
            Step::CallerGone { which } => {
                let waiting: Vec<_> = sh.waiting.iter().copied().collect();
                if let Some(id) = pick(&waiting, which) {
                    s.caller_gone(id, sh.now());
                }
            }
            Step::Message { twice } => {
                // A fair lock's release wakes its queue's head on that waiter's own channel.
                let channel = if !sh.redis.woken.is_empty() {
                    Some(s.channel_of(&sh.redis.woken.remove(0)))
                } else if sh.redis.published > 0 {
                    sh.redis.published -= 1;
                    Some(s.channel_of(holders[0]))
                } else {
                    None
                };
                if let Some(channel) = channel {
                    for _ in 0..1 + usize::from(twice) {
                        s.unlocked(false, &channel, sh.now());
                    }
                }
            }
            Step::Spurious => {
                let channel = s.channel_of(holders[0]);
                s.unlocked(false, &channel, sh.now());
            }
            Step::Resubscribed => s.resubscribed(sh.now()),
            Step::LoseHold { which } => {
                if pick(&sh.guards, which).is_some() {
                    // The key is gone from Redis (expired, deleted): every hold in it is
                    // lost, and each is found so (as the Watchdog's renewals find them).
                    sh.redis.delete();
                    let mut held = sh.guards.clone();
                    held.dedup();
                    for (key, epoch) in held {
                        s.hold_lost(&key, epoch, sh.now());
                    }
                }
            }
        }
        sh.apply(&mut s)?;
    }
    // The end: stop, and let every round trip finish. Every waiter has its answer.
    // As a manager's shutdown stops its lock actors: every hold released.
    s.stop(true, sh.now());
    sh.stopping = true;
    sh.apply(&mut s)?;
    for _ in 0..1000 {
        if sh.flight.is_none() {
            break;
        }
        sh.finish(&mut s, false, true);
        sh.apply(&mut s)?;
    }
    prop_assert!(sh.flight.is_none());
    for id in &sh.waiting {
        prop_assert!(sh.answered.contains(id), "waiter {id} never answered");
    }
    if !sh.shutdown_failed {
        prop_assert!(
            sh.redis.counts.is_empty(),
            "left in Redis: {:?}",
            sh.redis.counts
        );
        prop_assert!(
            sh.redis.queue.is_empty(),
            "places left in Redis: {:?}",
            sh.redis.queue
        );
    }
    Ok((sh.refused, sh.log.unwrap_or_default()))
}

// Cases the property test found, kept as they were shrunk (each failed before its fix).

/// A request step.
fn ask(holder: u8, wait: u8, write: bool, lease: bool) -> Step {
    Step::Request {
        holder,
        wait,
        write,
        lease,
    }
}

/// A round trip finished as sent.
fn ok() -> Step {
    Step::Finish {
        fail: false,
        ran: false,
    }
}

/// A hold deleted behind its holder's back, entered again by the holder, then the old hold's
/// release: it took back the new hold (Redis counted 0 under a live guard). A re-entry that finds
/// no count in Redis now ends the old hold (`Loss::Reentry`).
#[test]
fn found_a_release_of_a_lost_hold_took_back_the_re_entry() {
    use Step::*;
    let r = |holder, wait, write| ask(holder, wait, write, false);
    let ok = ok();
    let steps = vec![
        r(0, 0, false),
        r(0, 0, false),
        r(0, 0, false),
        ok.clone(),
        r(0, 0, false),
        ok.clone(),
        ok.clone(),
        ok.clone(),
        ok.clone(),
        LoseHold { which: 0 },
        r(0, 0, false),
        r(1, 0, false),
        r(0, 0, false),
        r(2, 0, false),
        r(0, 0, true),
        ok.clone(),
        LoseHold { which: 0 },
        r(2, 1, false),
        CallerGone {
            which: 2396791512521525705,
        },
        r(0, 2, false),
        r(0, 1, false),
        Message { twice: false },
        ok.clone(),
        Release { which: 0 },
        ok.clone(),
        Release { which: 0 },
        ok.clone(),
        Message { twice: false },
        ok.clone(),
        LoseHold { which: 0 },
        Fire {
            which: 3167776741391211793,
        },
        Finish {
            fail: true,
            ran: false,
        },
        ok.clone(),
        ok.clone(),
        Finish {
            fail: true,
            ran: true,
        },
        r(0, 0, false),
        r(0, 0, false),
    ];
    run(2, steps).unwrap();
}

/// An unlock message woke a waiter whose attempt queued behind a release; the waiter gave up
/// before its turn, and the wake-up was lost with it: the other waiter waited on a free lock with
/// nothing coming. A wake-up whose waiter left now goes on with another.
#[test]
fn found_a_wake_up_lost_with_the_waiter_that_left() {
    use Step::*;
    let r = |holder, wait| ask(holder, wait, false, false);
    let ok = ok();
    let steps = vec![
        r(0, 1),
        r(0, 0),
        r(1, 1),
        ok.clone(),
        Release { which: 0 },
        r(2, 2),
        ok.clone(),
        LoseHold { which: 0 },
        Message { twice: false },
        Fire { which: 0 },
        Fire { which: 0 },
        ok,
    ];
    run(0, steps).unwrap();
}

/// A lease hold ran out (its settle queued), its holder took the lock again (the settle became
/// a settling of the new hold), and the new hold was lost while that settling ran:
/// its outcome was dropped with the hold, the holder stayed marked as settling, and its next
/// waiter waited for good on a free lock. The settle now goes on.
#[test]
fn found_a_settle_dropped_with_a_hold_lost_meanwhile() {
    use Step::*;
    let r = |holder, wait, lease| ask(holder, wait, false, lease);
    let ok = ok();
    let steps = vec![
        r(0, 0, false),
        ok.clone(),
        Release { which: 0 },
        r(0, 0, false),
        r(0, 0, false),
        r(1, 0, false),
        ok.clone(),
        ok.clone(),
        Release { which: 0 },
        ok.clone(),
        r(1, 0, false),
        ok.clone(),
        Release { which: 0 },
        r(1, 0, false),
        ok.clone(),
        r(1, 1, true),
        CallerGone {
            which: 6713216069482237894,
        },
        ok.clone(),
        r(1, 0, false),
        ok.clone(),
        r(1, 2, false),
        Fire { which: 0 },
        Fire { which: 0 },
        ok.clone(),
        LoseHold { which: 0 },
        Message { twice: false },
        Fire { which: 0 },
        ok.clone(),
    ];
    run(0, steps).unwrap();
}

/// A lease hold ran out (its holder marked as settling), the holder took the lock again, the
/// settling of the hold that stood for the settle failed, and the new hold was released: the mark
/// stayed with nothing left to clear it, the holder's waiter was held back for good, and the
/// wake-up it had been given was lost with it, so other waiters waited on a free lock. A hold
/// that ends while its holder is settling now leaves the settle queued.
#[test]
fn found_a_settle_left_behind_by_a_hold_released_meanwhile() {
    use Step::*;
    let r = |holder, wait, lease| ask(holder, wait, false, lease);
    let ok = ok();
    let steps = vec![
        r(2, 0, true),
        r(2, 2, false),
        r(2, 1, false),
        ok.clone(),
        Fire {
            which: 233240668208956996,
        },
        Fire {
            which: 419116820769000905,
        },
        ok.clone(),
        Finish {
            fail: true,
            ran: true,
        },
        Release { which: 0 },
        ok.clone(),
        r(0, 2, false),
        Message { twice: false },
        r(0, 2, false),
        Fire { which: 0 },
        Fire { which: 0 },
    ];
    run(0, steps).unwrap();
}

/// A fair holder's place left behind at the stop (found by the "no stranded place" invariant).
#[test]
fn found_a_fair_place_left_at_the_stop() {
    use Step::*;
    let steps = vec![
        ask(2, 1, false, false),
        ask(0, 0, false, false),
        Finish {
            fail: true,
            ran: false,
        },
        Fire {
            which: 1875767713139290260,
        },
        ask(1, 1, false, false),
        ok(),
        ok(),
        ask(0, 0, false, false),
        ask(1, 2, false, false),
        ask(0, 2, false, false),
        ask(0, 2, false, false),
        Release { which: 0 },
        ask(2, 2, false, false),
        Fire {
            which: 10658158598693251217,
        },
        CallerGone {
            which: 196884889907871552,
        },
        Finish {
            fail: true,
            ran: false,
        },
        ask(0, 1, false, false),
        CallerGone {
            which: 9037334793464288624,
        },
        Fire {
            which: 3363791014595931900,
        },
        ask(0, 1, false, false),
        ok(),
        Fire {
            which: 2502449135297630157,
        },
        ask(0, 0, false, false),
        ok(),
        ok(),
        ok(),
        ok(),
        Fire {
            which: 2735732401258030290,
        },
        Finish {
            fail: true,
            ran: false,
        },
        ok(),
        Finish {
            fail: true,
            ran: false,
        },
        Fire {
            which: 13453505481501947437,
        },
        CallerGone {
            which: 15750249749580382494,
        },
        Fire {
            which: 10530391903691829332,
        },
        ok(),
        ok(),
        ok(),
        Finish {
            fail: true,
            ran: true,
        },
    ];
    run(3, steps).unwrap();
}
