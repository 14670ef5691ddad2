//! The state machine on its own: no Redis, no actix. A small model of Redis answers its round
//! trips; the property test drives it with random event sequences and checks the invariants of
//! the module doc after every step.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

const SECOND: Duration = Duration::from_secs(1);

fn settings() -> Settings {
    Settings {
        watchdog_timeout: Duration::from_secs(30),
        fair_wait_timeout: Duration::from_secs(300),
        hand_off: true,
    }
}

fn state(kind: LockKind) -> LockState {
    LockState::new(kind, "name".into(), settings(), Instant::now())
}

fn req(holder: &str, wait: Wait) -> Request {
    Request {
        holder: holder.into(),
        kind: LockKind::Reentrant,
        lease: None,
        wait,
    }
}

fn runs(effects: &[Effect]) -> Vec<&Op> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Run(op) => Some(op),
            _ => None,
        })
        .collect()
}

fn granted(effects: &[Effect], id: WaiterId) -> Option<(HoldKey, u64)> {
    effects.iter().find_map(|e| match e {
        Effect::Answer(i, Answer::Granted { key, epoch, .. }) if *i == id => {
            Some((key.clone(), *epoch))
        }
        _ => None,
    })
}

fn answered(effects: &[Effect], id: WaiterId) -> bool {
    effects
        .iter()
        .any(|e| matches!(e, Effect::Answer(i, _) if *i == id))
}

fn acquired() -> Outcome {
    Outcome::Acquire(Ok(Attempt::Acquired { token: None }))
}

fn busy() -> Outcome {
    Outcome::Acquire(Ok(Attempt::Busy { ttl: Some(SECOND) }))
}

fn timeout() -> LockError {
    LockError::Timeout {
        op: "test",
        after: SECOND,
    }
}

#[test]
fn uncontended_acquire_and_release() {
    let mut s = state(LockKind::Reentrant);
    let id = s.request(req("a", Wait::Forever), Instant::now());
    let fx = s.drain();
    assert!(matches!(runs(&fx)[..], [Op::Acquire { .. }]));
    s.ran(acquired(), Instant::now());
    let fx = s.drain();
    let (key, epoch) = granted(&fx, id).expect("granted");
    s.release(key, epoch, Some(7), Instant::now());
    let fx = s.drain();
    assert!(matches!(runs(&fx)[..], [Op::Release { .. }]));
    s.ran(Outcome::Release(Ok(Released::Unlocked)), Instant::now());
    let fx = s.drain();
    assert!(
        matches!(fx[..], [Effect::Cancel(_), Effect::Cancel(_), Effect::Ended(e), Effect::ReleaseDone(7, Ok(())), ..] if e == epoch),
        "{fx:?}"
    );
    assert!(matches!(fx.last(), Some(Effect::Idle)), "{fx:?}");
}

#[test]
fn a_busy_attempt_subscribes_and_the_unlock_message_retries() {
    let mut s = state(LockKind::Reentrant);
    s.request(req("a", Wait::Forever), Instant::now());
    s.drain();
    s.ran(busy(), Instant::now());
    let fx = s.drain();
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Subscribe(c) if &**c == "redisson_lock__channel:{name}"))
    );
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Arm(Timer::Retry, d) if *d == SECOND))
    );
    s.unlocked(false, "redisson_lock__channel:{name}", Instant::now());
    assert!(matches!(runs(&s.drain())[..], [Op::Acquire { .. }]));
}

#[test]
fn a_second_holder_queues_behind_a_waiter_without_a_round_trip() {
    let mut s = state(LockKind::Reentrant);
    s.request(req("a", Wait::Forever), Instant::now());
    s.ran(busy(), Instant::now());
    s.drain();
    s.request(req("b", Wait::Forever), Instant::now());
    assert!(runs(&s.drain()).is_empty());
}

#[test]
fn release_hands_the_lock_to_the_next_local_waiter_in_one_round_trip() {
    let mut s = state(LockKind::Reentrant);
    let a = s.request(req("a", Wait::Forever), Instant::now());
    s.ran(acquired(), Instant::now());
    let (key_a, epoch_a) = granted(&s.drain(), a).expect("a granted");
    let b = s.request(req("b", Wait::Forever), Instant::now());
    s.ran(busy(), Instant::now());
    s.drain();
    s.release(key_a, epoch_a, Some(1), Instant::now());
    let fx = s.drain();
    assert!(
        matches!(runs(&fx)[..], [Op::HandOff { from, to, .. }] if &**from == "a" && &**to == "b"),
        "{fx:?}"
    );
    s.ran(
        Outcome::HandOff(Ok(HandedOff::To { token: None })),
        Instant::now(),
    );
    let fx = s.drain();
    assert!(granted(&fx, b).is_some(), "{fx:?}");
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Ended(e) if *e == epoch_a))
    );
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::ReleaseDone(1, Ok(()))))
    );
    assert!(runs(&fx).is_empty(), "no second acquire: {fx:?}");
}

#[test]
fn a_hand_off_streak_ends_with_a_release_that_publishes() {
    let mut s = state(LockKind::Reentrant);
    let mut current = s.request(req("h0", Wait::Forever), Instant::now());
    s.ran(acquired(), Instant::now());
    let mut hold = granted(&s.drain(), current).expect("granted");
    for i in 1..=MAX_HAND_OFF_STREAK + 1 {
        let next = s.request(req(&format!("h{i}"), Wait::Forever), Instant::now());
        if !runs(&s.drain()).is_empty() {
            s.ran(busy(), Instant::now());
            s.drain();
        }
        s.release(hold.0.clone(), hold.1, None, Instant::now());
        let fx = s.drain();
        if i <= MAX_HAND_OFF_STREAK {
            assert!(matches!(runs(&fx)[..], [Op::HandOff { .. }]), "{i}: {fx:?}");
            s.ran(
                Outcome::HandOff(Ok(HandedOff::To { token: None })),
                Instant::now(),
            );
            hold = granted(&s.drain(), next).expect("handed off");
            current = next;
        } else {
            assert!(matches!(runs(&fx)[..], [Op::Release { .. }]), "{i}: {fx:?}");
        }
    }
    assert!(s.is_waiting(current + 1));
}

#[test]
fn a_bounded_wait_ends_at_its_deadline_even_with_a_round_trip_under_way() {
    let mut s = state(LockKind::Reentrant);
    let id = s.request(req("a", Wait::Up(SECOND)), Instant::now());
    s.drain();
    // The attempt is still under way when the deadline fires: the caller hears at once.
    s.fired(Timer::Deadline(id), Instant::now());
    let fx = s.drain();
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Answer(i, Answer::TimedOut) if *i == id)),
        "{fx:?}"
    );
    // The late grant goes to nobody: it is released.
    s.ran(acquired(), Instant::now());
    let fx = s.drain();
    assert!(matches!(runs(&fx)[..], [Op::Release { .. }]), "{fx:?}");
}

#[test]
fn a_fair_waiter_that_gives_up_leaves_the_queue_before_its_answer() {
    let mut s = state(LockKind::Fair);
    let mut r = req("a", Wait::Up(SECOND));
    r.kind = LockKind::Fair;
    let id = s.request(r, Instant::now());
    s.ran(busy(), Instant::now());
    s.drain();
    s.fired(Timer::Deadline(id), Instant::now());
    let fx = s.drain();
    assert!(matches!(runs(&fx)[..], [Op::LeaveQueue { .. }]), "{fx:?}");
    assert!(!answered(&fx, id));
    s.ran(Outcome::LeaveQueue(Ok(true)), Instant::now());
    assert!(answered(&s.drain(), id));
}

#[test]
fn an_acquire_of_unknown_outcome_is_undone_next() {
    let mut s = state(LockKind::Reentrant);
    s.request(req("a", Wait::Forever), Instant::now());
    s.drain();
    s.ran(Outcome::Acquire(Err(timeout())), Instant::now());
    let fx = s.drain();
    assert!(matches!(runs(&fx)[..], [Op::Release { .. }]), "{fx:?}");
    assert!(fx.iter().any(|e| matches!(e, Effect::Arm(Timer::Retry, _))));
}

#[test]
fn an_unconfirmed_release_is_settled_and_later_releases_join_it() {
    let mut s = state(LockKind::Reentrant);
    let a = s.request(req("a", Wait::Forever), Instant::now());
    s.ran(acquired(), Instant::now());
    let (key, epoch) = granted(&s.drain(), a).expect("granted");
    s.request(req("a", Wait::Forever), Instant::now());
    s.ran(acquired(), Instant::now());
    s.drain();
    s.release(key.clone(), epoch, Some(1), Instant::now());
    s.ran(Outcome::Release(Err(timeout())), Instant::now());
    let fx = s.drain();
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::ReleaseDone(1, Err(_))))
    );
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Arm(Timer::Reconcile(..), _)))
    );
    s.release(key.clone(), epoch, Some(2), Instant::now());
    let fx = s.drain();
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::ReleaseDone(2, Ok(()))))
    );
    assert!(runs(&fx).is_empty());
    s.fired(Timer::Reconcile(key, epoch), Instant::now());
    let fx = s.drain();
    assert!(
        matches!(runs(&fx)[..], [Op::Settle { target: 0, .. }]),
        "{fx:?}"
    );
    s.ran(Outcome::Settle(Ok(0)), Instant::now());
    let fx = s.drain();
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Ended(e) if *e == epoch))
    );
    assert!(matches!(fx.last(), Some(Effect::Idle)));
}

#[test]
fn ten_thousand_waiters_leave_in_linear_time() {
    let mut s = state(LockKind::Reentrant);
    let first = s.request(req("h0", Wait::Forever), Instant::now());
    s.ran(busy(), Instant::now());
    let n = 10_000;
    let ids: Vec<_> = (1..n)
        .map(|i| s.request(req(&format!("h{i}"), Wait::Forever), Instant::now()))
        .collect();
    s.drain();
    let started = std::time::Instant::now();
    for id in std::iter::once(first).chain(ids) {
        s.caller_gone(id, Instant::now());
    }
    let fx = s.drain();
    let unsubscribes = fx
        .iter()
        .filter(|e| matches!(e, Effect::Unsubscribe(_)))
        .count();
    assert_eq!(unsubscribes, 1);
    assert!(matches!(fx.last(), Some(Effect::Idle)));
    // Quadratic removal took seconds here; linear takes milliseconds (generous bound).
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn bad_requests_are_refused_without_a_round_trip() {
    let mut s = state(LockKind::Reentrant);
    let mut r = req("", Wait::No);
    let id = s.request(r.clone(), Instant::now());
    r.holder = "a".into();
    r.lease = Some(Duration::ZERO);
    let id2 = s.request(r.clone(), Instant::now());
    r.lease = None;
    r.kind = LockKind::Read;
    let id3 = s.request(r, Instant::now());
    let fx = s.drain();
    for id in [id, id2, id3] {
        assert!(fx.iter().any(|e| matches!(e, Effect::Answer(i, Answer::Failed(LockError::InvalidArgument { .. })) if *i == id)));
    }
    assert!(runs(&fx).is_empty());
}

// ----- the property test ----------------------------------------------------------------------

/// Redis as the scripts of one reentrant lock see it: who holds it, how often.
#[derive(Default, Debug)]
struct Redis {
    owner: Option<(Arc<str>, u32)>,
}

impl Redis {
    fn acquire(&mut self, holder: &Arc<str>) -> Attempt {
        match &mut self.owner {
            None => {
                self.owner = Some((holder.clone(), 1));
                Attempt::Acquired { token: None }
            }
            Some((h, n)) if h == holder => {
                *n += 1;
                Attempt::Acquired { token: None }
            }
            Some(_) => Attempt::Busy { ttl: Some(SECOND) },
        }
    }

    fn release(&mut self, holder: &Arc<str>) -> Released {
        match &mut self.owner {
            Some((h, n)) if h == holder => {
                *n -= 1;
                if *n == 0 {
                    self.owner = None;
                    Released::Unlocked
                } else {
                    Released::StillHeld
                }
            }
            _ => Released::NotHeld,
        }
    }

    fn count(&self, holder: &Arc<str>) -> u32 {
        match &self.owner {
            Some((h, n)) if h == holder => *n,
            _ => 0,
        }
    }
}

#[derive(Clone, Debug)]
enum Step {
    Request {
        holder: u8,
        wait: u8,
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
    Message,
    Resubscribed,
    LoseHold {
        which: usize,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u8..3, 0u8..3).prop_map(|(holder, wait)| Step::Request { holder, wait }),
        2 => any::<usize>().prop_map(|which| Step::Release { which }),
        1 => any::<usize>().prop_map(|which| Step::Drop { which }),
        6 => (proptest::bool::weighted(0.1), any::<bool>()).prop_map(|(fail, ran)| Step::Finish { fail, ran }),
        2 => any::<usize>().prop_map(|which| Step::Fire { which }),
        1 => any::<usize>().prop_map(|which| Step::CallerGone { which }),
        2 => Just(Step::Message),
        1 => Just(Step::Resubscribed),
        1 => any::<usize>().prop_map(|which| Step::LoseHold { which }),
    ]
}

/// The shell's side: what the effects did.
#[derive(Default)]
struct Shell {
    redis: Redis,
    flight: Option<Op>,
    waiting: BTreeSet<WaiterId>,
    answered: BTreeSet<WaiterId>,
    /// Guards held: (key, epoch).
    guards: Vec<(HoldKey, u64)>,
    lost: BTreeSet<u64>,
    timers: BTreeMap<String, Timer>,
    subscribed: BTreeSet<String>,
    messages: usize,
    next_reply: u64,
}

impl Shell {
    fn apply(&mut self, s: &mut LockState) -> Result<(), TestCaseError> {
        for e in s.drain() {
            match e {
                Effect::Run(op) => {
                    prop_assert!(self.flight.is_none(), "two round trips at once");
                    self.flight = Some(op);
                }
                Effect::Answer(id, answer) => {
                    prop_assert!(self.answered.insert(id), "waiter {id} answered twice");
                    prop_assert!(!s.is_waiting(id), "waiter {id} answered but still waiting");
                    self.waiting.remove(&id);
                    if let Answer::Granted { key, epoch, .. } = answer {
                        self.guards.push((key, epoch));
                    }
                }
                Effect::Arm(t, _) => {
                    self.timers.insert(format!("{t:?}"), t);
                }
                Effect::Cancel(t) => {
                    self.timers.remove(&format!("{t:?}"));
                }
                Effect::Subscribe(c) => {
                    self.subscribed.insert(c.to_string());
                }
                Effect::Unsubscribe(c) => {
                    prop_assert!(self.subscribed.remove(&*c), "unsubscribed {c} twice");
                }
                Effect::Lost(epoch) | Effect::Ended(epoch) => {
                    self.lost.insert(epoch);
                    self.guards.retain(|(_, e)| *e != epoch);
                }
                _ => {}
            }
        }
        s.check()?;
        // Exclusion: the live guards belong to one holder at most, and Redis agrees.
        let holders: BTreeSet<&str> = self.guards.iter().map(|((h, _), _)| &**h).collect();
        prop_assert!(holders.len() <= 1, "two local holders: {holders:?}");
        if let Some(h) = holders.iter().next() {
            prop_assert!(
                self.redis.owner.as_ref().is_some_and(|(o, _)| &**o == *h),
                "{h} holds here but not in Redis ({:?})",
                self.redis.owner
            );
        }
        if s.waiters.is_empty() {
            prop_assert!(self.subscribed.is_empty(), "subscribed without a waiter");
        }
        Ok(())
    }

    /// Finishes the round trip under way against the model.
    fn finish(&mut self, s: &mut LockState, fail: bool, ran: bool) {
        let Some(op) = self.flight.take() else {
            return;
        };
        let err = fail.then(timeout);
        let outcome = match op {
            Op::Acquire { holder, .. } => {
                if err.is_none() || ran {
                    let a = self.redis.acquire(&holder);
                    Outcome::Acquire(err.map_or(Ok(a), Err))
                } else {
                    Outcome::Acquire(Err(timeout()))
                }
            }
            Op::Release { holder, .. } => {
                let r = if err.is_none() || ran {
                    self.redis.release(&holder)
                } else {
                    Released::NotHeld
                };
                if r == Released::Unlocked {
                    self.messages += 1;
                }
                Outcome::Release(err.map_or(Ok(r), Err))
            }
            Op::HandOff { from, to, .. } => {
                let mut r = HandedOff::No(Released::NotHeld);
                if err.is_none() || ran {
                    r = HandedOff::No(self.redis.release(&from));
                    if r == HandedOff::No(Released::Unlocked) {
                        self.redis.owner = Some((to, 1));
                        r = HandedOff::To { token: None };
                    }
                }
                Outcome::HandOff(err.map_or(Ok(r), Err))
            }
            Op::LeaveQueue { .. } => Outcome::LeaveQueue(Ok(true)),
            Op::Settle { holder, target, .. } => {
                while self.redis.count(&holder) > target {
                    if self.redis.release(&holder) == Released::Unlocked {
                        self.messages += 1;
                    }
                }
                Outcome::Settle(Ok(self.redis.count(&holder)))
            }
            Op::Shutdown { release, .. } => {
                for ((holder, _), count, _) in release {
                    for _ in 0..count {
                        self.redis.release(&holder);
                    }
                }
                Outcome::Shutdown
            }
        };
        s.ran(outcome, Instant::now());
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
        for channel in &self.subscribed {
            prop_assert!(self.waiters.on_channel(channel) > 0, "{channel}: no waiter");
        }
        prop_assert_eq!(self.waiters.iter().count(), self.waiters.len());
        Ok(())
    }
}

fn pick<T: Clone>(items: &[T], which: usize) -> Option<T> {
    (!items.is_empty()).then(|| items[which % items.len()].clone())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn random_event_sequences_keep_the_invariants(steps in proptest::collection::vec(step(), 1..120)) {
        let mut s = state(LockKind::Reentrant);
        let mut sh = Shell::default();
        let holders = ["a", "b", "c"];
        for step in steps {
            match step {
                Step::Request { holder, wait } => {
                    let wait = [Wait::No, Wait::Up(SECOND), Wait::Forever][wait as usize];
                    let id = s.request(req(holders[holder as usize], wait), Instant::now());
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
                        s.release(key, epoch, reply, Instant::now());
                    }
                }
                Step::Finish { fail, ran } => sh.finish(&mut s, fail, ran),
                Step::Fire { which } => {
                    let timers: Vec<_> = sh.timers.values().cloned().collect();
                    if let Some(t) = pick(&timers, which) {
                        sh.timers.remove(&format!("{t:?}"));
                        s.fired(t, Instant::now());
                    }
                }
                Step::CallerGone { which } => {
                    let waiting: Vec<_> = sh.waiting.iter().copied().collect();
                    if let Some(id) = pick(&waiting, which) {
                        s.caller_gone(id, Instant::now());
                    }
                }
                Step::Message => {
                    if sh.messages > 0 {
                        sh.messages -= 1;
                        s.unlocked(false, "redisson_lock__channel:{name}", Instant::now());
                    }
                }
                Step::Resubscribed => s.resubscribed(Instant::now()),
                Step::LoseHold { which } => {
                    if let Some(((holder, kind), epoch)) = pick(&sh.guards, which) {
                        // The key is gone from Redis (expired, deleted).
                        if sh.redis.count(&holder) > 0 {
                            sh.redis.owner = None;
                            sh.messages += 1;
                        }
                        s.hold_lost(&(holder, kind), epoch, Instant::now());
                    }
                }
            }
            sh.apply(&mut s)?;
        }
        // The end: stop, and let every round trip finish. Every waiter has its answer.
        s.stop(false, Instant::now());
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
    }
}
