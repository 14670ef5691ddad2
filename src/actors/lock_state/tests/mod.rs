//! The state machine on its own: no Redis, no actix. A small model of Redis answers its round
//! trips; the property test drives it with random event sequences and checks the invariants of
//! the module doc after every step.

mod fair_places;
mod kept;
mod model;
mod outage;
mod property;
mod resend;
mod short;
mod simulation;
mod spin;
mod turns;

use super::*;

const SECOND: Duration = Duration::from_secs(1);

fn settings() -> Settings {
    Settings {
        watchdog_timeout: Duration::from_secs(30),
        fair_wait_timeout: Duration::from_secs(300),
        fair_place_timeout: Duration::from_secs(5),
        hand_off: true,
        unavailable_after: Duration::from_secs(15),
        watch_holds: false,
        spin_backoff: SpinBackOff::default(),
        last_try_grace: crate::config::LAST_TRY_GRACE,
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

impl LockState {
    /// Nothing of the state is under way, unresolved or waiting to be settled: Redis then counts
    /// exactly what it grants (with no round trip in flight in its shell either).
    fn is_quiet(&self) -> bool {
        self.trips.is_empty() && !self.timers.iter().any(|t| matches!(t, Timer::Settle(_)))
    }

    /// How long after the last event `timer` fires, if armed.
    fn armed_in(&self, timer: &Timer) -> Option<Duration> {
        self.timers
            .at(timer)
            .map(|at| at.saturating_duration_since(self.now))
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
    Outcome::Acquire(Ok(Attempt::Acquired {
        token: None,
        fresh: true,
    }))
}

/// A re-entry granted: the holder's count in Redis went up from one or more.
fn reentered() -> Outcome {
    Outcome::Acquire(Ok(Attempt::Acquired {
        token: None,
        fresh: false,
    }))
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
    s.ran(
        Outcome::Release(Ok(HandedOff::No(Released::Unlocked))),
        Instant::now(),
    );
    let fx = s.drain();
    assert!(
        matches!(fx[..], [Effect::Ended(e), Effect::Done(7, Ok(())), ..] if e == epoch),
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
    assert_eq!(s.armed_in(&Timer::Retry), Some(SECOND));
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
        Outcome::Release(Ok(HandedOff::To { token: None })),
        Instant::now(),
    );
    let fx = s.drain();
    assert!(granted(&fx, b).is_some(), "{fx:?}");
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Ended(e) if *e == epoch_a))
    );
    assert!(fx.iter().any(|e| matches!(e, Effect::Done(1, Ok(())))));
    assert!(runs(&fx).is_empty(), "no second acquire: {fx:?}");
}

/// A write release wakes every local waiter (Redisson's wake-all message). Once one of them
/// gets in as a writer, the others' attempts could only fail: they are dropped, and the others
/// wait for that writer's release (or its lease). Before, every waiter tried after each write
/// release: N round trips per hand-off for N waiters in one process.
#[test]
fn once_a_woken_writer_gets_in_the_other_holders_woken_with_it_do_not_try() {
    let t0 = Instant::now();
    let mut s = state(LockKind::Read);
    let write = |holder: &str| Request {
        kind: LockKind::Write,
        ..req(holder, Wait::Forever)
    };
    // The first tries and finds it taken; the later writers wait their turn behind it.
    let ids: Vec<WaiterId> = ["a", "b", "c", "d"]
        .into_iter()
        .map(|h| {
            let id = s.request(write(h), t0);
            let fx = s.drain();
            if h == "a" {
                assert!(matches!(runs(&fx)[..], [Op::Acquire { .. }]));
                s.ran(busy(), t0);
                s.drain();
            } else {
                assert!(runs(&fx).is_empty(), "{h} queues: {fx:?}");
            }
            id
        })
        .collect();
    let channel = s.channel.clone();
    s.unlocked(true, &channel, t0);
    assert!(matches!(runs(&s.drain())[..], [Op::Acquire { .. }]));
    s.ran(acquired(), t0);
    let fx = s.drain();
    let (key, epoch) = granted(&fx, ids[0]).expect("the oldest writer granted");
    assert!(runs(&fx).is_empty(), "no attempt beside the writer: {fx:?}");
    assert_eq!(
        s.armed_in(&Timer::Retry),
        Some(Duration::from_secs(30)),
        "the others still retry when the writer's lease would run out"
    );
    // Its release publishes; the message wakes the others, and the next one gets in.
    s.release(key, epoch, None, t0);
    assert!(matches!(runs(&s.drain())[..], [Op::Release { .. }]));
    s.ran(Outcome::Release(Ok(HandedOff::No(Released::Unlocked))), t0);
    s.drain();
    s.unlocked(true, &channel, t0);
    assert!(matches!(runs(&s.drain())[..], [Op::Acquire { .. }]));
    s.ran(acquired(), t0);
    let fx = s.drain();
    assert!(granted(&fx, ids[1]).is_some(), "{fx:?}");
    assert!(runs(&fx).is_empty(), "{fx:?}");
    assert!(s.is_waiting(ids[2]) && s.is_waiting(ids[3]));
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
                Outcome::Release(Ok(HandedOff::To { token: None })),
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
fn a_bounded_wait_whose_attempt_is_under_way_at_its_deadline_is_answered_by_it() {
    use crate::config::LAST_TRY_GRACE;
    let t0 = Instant::now();
    let mut s = state(LockKind::Reentrant);
    let id = s.request(req("a", Wait::Up(SECOND)), t0);
    s.drain();
    // The attempt is still under way when the deadline fires, sent just now: its answer
    // decides (a holder, an outage or the lock), not the clock.
    s.fired(Timer::Deadline(id), t0);
    let fx = s.drain();
    assert!(!answered(&fx, id), "{fx:?}");
    s.ran(acquired(), t0 + LAST_TRY_GRACE / 2);
    let fx = s.drain();
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Answer(i, Answer::Granted { .. }) if *i == id)),
        "{fx:?}"
    );

    // Its reply does not come within `LAST_TRY_GRACE`: Redis is away, and the late grant goes to
    // nobody: it is released.
    let mut s = state(LockKind::Reentrant);
    let id = s.request(req("a", Wait::Up(SECOND)), t0);
    s.drain();
    s.fired(Timer::Deadline(id), t0);
    s.drain();
    s.fired(Timer::Verdict, t0 + LAST_TRY_GRACE);
    let fx = s.drain();
    assert!(
        fx.iter().any(|e| matches!(e, Effect::Answer(i, Answer::Failed(LockError::Unavailable { .. })) if *i == id)),
        "{fx:?}"
    );
    s.ran(acquired(), t0 + SECOND);
    let fx = s.drain();
    assert!(matches!(runs(&fx)[..], [Op::Release { .. }]), "{fx:?}");
}

/// A fair waiter that gives up is answered at once; its leave of the queue is sent next, and
/// nobody waits for it (on a frozen server it held the answer a response timeout or more).
#[test]
fn a_fair_waiter_that_gives_up_is_answered_before_its_leave_of_the_queue() {
    let mut s = state(LockKind::Fair);
    let mut r = req("a", Wait::Up(SECOND));
    r.kind = LockKind::Fair;
    let id = s.request(r, Instant::now());
    s.ran(busy(), Instant::now());
    s.drain();
    s.fired(Timer::Deadline(id), Instant::now());
    let fx = s.drain();
    assert!(answered(&fx, id), "{fx:?}");
    assert!(matches!(runs(&fx)[..], [Op::LeaveQueue { .. }]), "{fx:?}");
    s.ran(Outcome::LeaveQueue(Ok(true)), Instant::now());
    assert!(!answered(&s.drain(), id));
}

/// The number of the one request among `effects`, and the count it expects its holder to have.
fn sent_of(effects: &[Effect]) -> (u64, u32) {
    match runs(effects)[..] {
        [op] => {
            let expect = match op {
                Op::Acquire { expect, .. }
                | Op::Release { expect, .. }
                | Op::HandOff { expect, .. } => expect.count,
                _ => panic!("an acquire, release or hand-off expected: {op:?}"),
            };
            (op.seq().expect("a request sent again"), expect)
        }
        _ => panic!("one round trip expected: {effects:?}"),
    }
}

#[test]
fn an_acquire_whose_reply_never_came_is_sent_again_as_it_was() {
    let mut s = state(LockKind::Reentrant);
    let id = s.request(req("a", Wait::Forever), Instant::now());
    let (seq, expect) = sent_of(&s.drain());
    assert_eq!(expect, 0, "a new hold expects no count");
    s.ran(Outcome::Acquire(Err(timeout())), Instant::now());
    let fx = s.drain();
    assert!(runs(&fx).is_empty(), "nothing is guessed or undone: {fx:?}");
    assert!(
        !answered(&fx, id),
        "a waiter that may wait waits for the resolution"
    );
    assert!(s.timers.is_armed(&Timer::Resend(seq)));
    s.fired(Timer::Resend(seq), Instant::now());
    assert_eq!(
        sent_of(&s.drain()),
        (seq, 0),
        "the same request, expecting the same count"
    );
    // It had run: the count it left tells, and it replies as its first run did.
    s.ran(acquired(), Instant::now());
    assert!(granted(&s.drain(), id).is_some());
}

#[test]
fn a_single_attempt_whose_reply_never_came_fails_now_and_is_resolved_behind() {
    let mut s = state(LockKind::Reentrant);
    let id = s.request(req("a", Wait::No), Instant::now());
    let (seq, _) = sent_of(&s.drain());
    s.ran(Outcome::Acquire(Err(timeout())), Instant::now());
    let fx = s.drain();
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Answer(i, Answer::Failed(_)) if *i == id))
    );
    s.fired(Timer::Resend(seq), Instant::now());
    assert_eq!(sent_of(&s.drain()), (seq, 0));
    // It had acquired: nobody takes the grant, so it is released.
    s.ran(acquired(), Instant::now());
    let fx = s.drain();
    assert!(matches!(runs(&fx)[..], [Op::Release { .. }]), "{fx:?}");
}

#[test]
fn a_release_whose_reply_never_came_is_resolved_by_sending_it_again() {
    let mut s = state(LockKind::Reentrant);
    let a = s.request(req("a", Wait::Forever), Instant::now());
    s.ran(acquired(), Instant::now());
    let (key, epoch) = granted(&s.drain(), a).expect("granted");
    s.request(req("a", Wait::Forever), Instant::now());
    s.ran(reentered(), Instant::now());
    s.drain();
    s.release(key.clone(), epoch, Some(1), Instant::now());
    let (first, expect) = sent_of(&s.drain());
    assert_eq!(expect, 2, "two holds before it");
    s.ran(Outcome::Release(Err(timeout())), Instant::now());
    let fx = s.drain();
    assert!(fx.iter().any(|e| matches!(e, Effect::Done(1, Err(_)))));
    // The holder's other release waits behind it: one request of a holder at a time.
    s.release(key.clone(), epoch, Some(2), Instant::now());
    assert!(runs(&s.drain()).is_empty());
    // Sent again, still expecting two holds, the first replies what it did then (it had run:
    // one hold left), and only then does the second go, expecting one, and free the lock.
    s.fired(Timer::Resend(first), Instant::now());
    assert_eq!(sent_of(&s.drain()), (first, 2));
    s.ran(
        Outcome::Release(Ok(HandedOff::No(Released::StillHeld))),
        Instant::now(),
    );
    let (second, expect) = sent_of(&s.drain());
    assert_ne!(first, second);
    assert_eq!(expect, 1);
    s.ran(
        Outcome::Release(Ok(HandedOff::No(Released::Unlocked))),
        Instant::now(),
    );
    let fx = s.drain();
    assert!(fx.iter().any(|e| matches!(e, Effect::Done(2, Ok(())))));
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Ended(e) if *e == epoch))
    );
    assert!(fx.iter().any(|e| matches!(e, Effect::Idle)));
}

#[test]
fn a_request_unresolved_past_the_watchdog_timeout_is_settled_by_count() {
    let mut s = state(LockKind::Reentrant);
    let t0 = Instant::now();
    let a = s.request(req("a", Wait::Forever), t0);
    s.ran(acquired(), t0);
    let (key, epoch) = granted(&s.drain(), a).expect("granted");
    s.release(key.clone(), epoch, Some(1), t0);
    let (seq, _) = sent_of(&s.drain());
    s.ran(Outcome::Release(Err(timeout())), t0);
    s.drain();
    // Past its horizon: given up, and settled by reading the count instead.
    let late = t0 + settings().watchdog_timeout;
    s.fired(Timer::Resend(seq), late);
    let fx = s.drain();
    // A release the user asked for: its settling ends the lock-delay too.
    assert!(
        matches!(
            runs(&fx)[..],
            [Op::Settle {
                target: 0,
                lapsed: false,
                ..
            }]
        ),
        "{fx:?}"
    );
    s.ran(Outcome::Settle(Ok(0)), late);
    let fx = s.drain();
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Ended(e) if *e == epoch))
    );
}

/// A re-entry never creates its holder's field: found by the property test, a re-entry whose
/// key was deleted before it ran took the lock afresh, lost its reply, and its resend, finding
/// the count it expected, took it a second time. Now it replies `Gone`: the old hold is lost,
/// and the waiter asks again as a new hold.
#[test]
fn a_re_entry_whose_hold_is_gone_loses_it_and_asks_again_as_a_new_hold() {
    let mut s = state(LockKind::Reentrant);
    let a = s.request(req("a", Wait::Forever), Instant::now());
    s.ran(acquired(), Instant::now());
    let (_, epoch) = granted(&s.drain(), a).expect("granted");
    let again = s.request(req("a", Wait::Forever), Instant::now());
    assert_eq!(
        sent_of(&s.drain()).1,
        1,
        "a re-entry expects the count held"
    );
    s.ran(Outcome::Acquire(Ok(Attempt::Gone)), Instant::now());
    let fx = s.drain();
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Lost(e, Loss::Reentry) if *e == epoch)),
        "{fx:?}"
    );
    assert!(!answered(&fx, again), "{fx:?}");
    assert_eq!(sent_of(&fx).1, 0, "asked again as a new hold: {fx:?}");
    s.ran(acquired(), Instant::now());
    assert!(granted(&s.drain(), again).is_some());
}

/// Found by the simulation (seed 315273 of a longer run): the settle of a given-up release
/// woke the holder's waiter before the hold it settled had ended, and the waiter's attempt
/// expected the old count; its resend then took the first run for none and counted twice.
#[test]
fn a_waiter_woken_by_a_settle_expects_the_settled_count() {
    let mut s = state(LockKind::Reentrant);
    let t0 = Instant::now();
    let a = s.request(req("a", Wait::Forever), t0);
    s.ran(acquired(), t0);
    let (key, epoch) = granted(&s.drain(), a).expect("granted");
    s.release(key.clone(), epoch, Some(1), t0);
    let (seq, _) = sent_of(&s.drain());
    s.ran(Outcome::Release(Err(timeout())), t0);
    // The same holder asks again: it waits behind the unresolved release.
    let again = s.request(req("a", Wait::Forever), t0);
    assert!(runs(&s.drain()).is_empty());
    let late = t0 + settings().watchdog_timeout;
    s.fired(Timer::Resend(seq), late);
    assert!(matches!(
        runs(&s.drain())[..],
        [Op::Settle { target: 0, .. }]
    ));
    // Redis counts nothing: the hold ends first, then the waiter tries, expecting no count.
    s.ran(Outcome::Settle(Ok(0)), late);
    let fx = s.drain();
    let ended = fx
        .iter()
        .position(|e| matches!(e, Effect::Ended(e) if *e == epoch))
        .expect("the hold ended");
    let tried = fx
        .iter()
        .position(|e| matches!(e, Effect::Run(Op::Acquire { .. })))
        .expect("the waiter tries");
    assert!(ended < tried, "{fx:?}");
    assert_eq!(sent_of(&fx[tried..=tried]).1, 0, "{fx:?}");
    s.ran(acquired(), late);
    assert!(granted(&s.drain(), again).is_some());
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

/// Found by the simulation with the non-reentrant kind (seed 92222): a holder's hold was gone
/// from Redis unnoticed (its key deleted by someone else), another holder of this manager took
/// the lock, and its release handed it to a waiter of the first holder. The hand-off counted
/// the fresh hold as a re-entry of the gone one: its guard was never told lost, and a
/// non-reentrant lock granted one holder two live holds. Now no hand-off goes to a holder with
/// a hold here: the release publishes, and the waiter's own attempt finds its hold gone.
#[test]
fn no_hand_off_to_a_holder_whose_hold_here_is_gone_from_redis() {
    for kind in [LockKind::NonReentrant, LockKind::Reentrant] {
        let mut s = state(kind);
        let now = Instant::now();
        let ask = |holder: &str, wait| Request {
            kind,
            ..req(holder, wait)
        };
        let a = s.request(ask("a", Wait::Forever), now);
        s.ran(acquired(), now);
        let (_, stale) = granted(&s.drain(), a).expect("a granted");
        // The key is deleted behind a's back; b takes the free lock.
        let b = s.request(ask("b", Wait::No), now);
        s.ran(acquired(), now);
        let (key_b, epoch_b) = granted(&s.drain(), b).expect("b granted");
        // c tries once (its attempt under way), b releases, and a asks again behind them.
        let c = s.request(ask("c", Wait::No), now);
        s.release(key_b, epoch_b, Some(1), now);
        let again = s.request(ask("a", Wait::Forever), now);
        s.drain();
        s.ran(busy(), now);
        let fx = s.drain();
        assert!(answered(&fx, c));
        assert!(
            matches!(runs(&fx)[..], [Op::Release { .. }]),
            "{kind:?}: released, not handed to a: {fx:?}"
        );
        s.ran(Outcome::Release(Ok(HandedOff::No(Released::Unlocked))), now);
        // a's attempt, queued behind the release, goes next: it finds its hold gone, the old
        // hold is lost, and a asks again as a new hold.
        assert_eq!(
            sent_of(&s.drain()).1,
            1,
            "{kind:?}: a re-entry of the stale hold"
        );
        s.ran(Outcome::Acquire(Ok(Attempt::Gone)), now);
        let fx = s.drain();
        assert!(
            fx.iter()
                .any(|e| matches!(e, Effect::Lost(e, Loss::Reentry) if *e == stale)),
            "{kind:?}: {fx:?}"
        );
        assert_eq!(sent_of(&fx).1, 0, "{kind:?}: asked again as a new hold");
        s.ran(acquired(), now);
        let (_, fresh) = granted(&s.drain(), again).expect("a granted anew");
        assert_ne!(fresh, stale, "{kind:?}: a new hold, not the gone one");
        assert_eq!(s.holds.get(&("a".into(), kind)).map(|h| h.count), Some(1));
    }
}

/// How long after the last event the settle timer of `key` fires, if armed.
fn settle_armed(s: &LockState, key: &HoldKey) -> Option<Duration> {
    s.armed_in(&Timer::Settle(key.clone()))
}

#[test]
fn a_lease_ended_here_is_settled_before_its_holder_takes_again_and_a_single_try_finds_it_taken() {
    let mut s = state(LockKind::Reentrant);
    let t0 = Instant::now();
    let leased = Request {
        lease: Some(SECOND),
        ..req("a", Wait::Forever)
    };
    let a = s.request(leased, t0);
    s.ran(acquired(), t0);
    let (key, epoch) = granted(&s.drain(), a).expect("granted");
    // The lease ends here a little before Redis's copy, which may still count: the holder's
    // count is settled to none before it takes anything new.
    let t1 = t0 + SECOND;
    s.fired(Timer::Expiry(key.clone(), epoch), t1);
    let fx = s.drain();
    // The hold ended without a release: its settling leaves the lock-delay (the break: a
    // settle that deleted the delay key opened the name at the lease's end).
    assert!(
        matches!(
            runs(&fx)[..],
            [Op::Settle {
                target: 0,
                lapsed: true,
                ..
            }]
        ),
        "{fx:?}"
    );
    // It fails: tried again on the one settle timer, after the backoff of one failure.
    s.ran(Outcome::Settle(Err(timeout())), t1);
    let fx = s.drain();
    assert_eq!(settle_armed(&s, &key), Some(backoff(1)), "{fx:?}");
    // Meanwhile a single try of the holder cannot wait for the settling: the lock is not free
    // to it (Redis may still count its ended hold). Redis did not answer the settling (a
    // time-out): the try fails with that, as Redis away (outage.rs); it is no holder's.
    let once = s.request(req("a", Wait::No), t1);
    let fx = s.drain();
    assert!(runs(&fx).is_empty(), "{fx:?}");
    assert!(
        fx.iter().any(|e| matches!(e,
            Effect::Answer(i, Answer::Failed(LockError::Timeout { .. })) if *i == once)),
        "{fx:?}"
    );
    // A waiter that may wait waits for it, and tries once the count is settled.
    let waiter = s.request(req("a", Wait::Forever), t1);
    let fx = s.drain();
    assert!(runs(&fx).is_empty() && !answered(&fx, waiter), "{fx:?}");
    let t2 = t1 + backoff(1);
    s.fired(Timer::Settle(key.clone()), t2);
    let fx = s.drain();
    assert!(
        matches!(
            runs(&fx)[..],
            [Op::Settle {
                target: 0,
                lapsed: true,
                ..
            }]
        ),
        "{fx:?}"
    );
    s.ran(Outcome::Settle(Ok(0)), t2);
    let fx = s.drain();
    assert!(
        matches!(runs(&fx)[..], [Op::Acquire { expect, .. }] if expect.count == 0),
        "{fx:?}"
    );
}

#[test]
fn a_refused_release_and_its_failed_settling_share_one_settle_timer_and_backoff() {
    let mut s = state(LockKind::Reentrant);
    let t0 = Instant::now();
    let a = s.request(req("a", Wait::Forever), t0);
    s.ran(acquired(), t0);
    let (key, epoch) = granted(&s.drain(), a).expect("granted");
    s.request(req("a", Wait::Forever), t0);
    s.ran(reentered(), t0);
    s.drain();
    s.release(key.clone(), epoch, Some(1), t0);
    s.drain();
    // Redis answered with an error: the release did not run; the hold's count is settled
    // after the first backoff.
    let refused = LockError::OutOfMemory { op: "test" };
    s.ran(Outcome::Release(Err(refused)), t0);
    let fx = s.drain();
    assert_eq!(settle_armed(&s, &key), Some(backoff(0)), "{fx:?}");
    assert!(fx.iter().any(|e| matches!(e, Effect::Done(1, Err(_)))));
    s.fired(Timer::Settle(key.clone()), t0 + backoff(0));
    let fx = s.drain();
    assert!(
        matches!(runs(&fx)[..], [Op::Settle { target: 1, .. }]),
        "{fx:?}"
    );
    // Still two in Redis: the same timer again, one failure further.
    s.ran(Outcome::Settle(Ok(2)), t0 + backoff(0));
    let fx = s.drain();
    assert_eq!(settle_armed(&s, &key), Some(backoff(1)), "{fx:?}");
    s.fired(Timer::Settle(key.clone()), t0 + SECOND);
    s.drain();
    s.ran(Outcome::Settle(Ok(1)), t0 + SECOND);
    let fx = s.drain();
    assert!(runs(&fx).is_empty(), "{fx:?}");
    assert_eq!(
        s.holds.get(&key).map(|h| (h.count, h.unreleased)),
        Some((1, 0))
    );
    assert!(s.is_quiet());
}

fn watched(kind: LockKind) -> LockState {
    let settings = Settings {
        watch_holds: true,
        ..settings()
    };
    LockState::new(kind, "name".into(), settings, Instant::now())
}

/// A watched hold as the shell sees it: granted, and its hand-over timer fired
/// [`WATCHED_AFTER`] later (the Watchdog has it); its key and epoch.
fn watched_hold(s: &mut LockState) -> (HoldKey, u64) {
    let t0 = Instant::now();
    let id = s.request(req("a", Wait::Forever), t0);
    s.ran(acquired(), t0);
    let fx = s.drain();
    let (key, epoch) = granted(&fx, id).expect("granted");
    s.fired(Timer::Track, t0 + WATCHED_AFTER);
    let fx = s.drain();
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Track { epoch: x, .. } if *x == epoch)),
        "{fx:?}"
    );
    (key, epoch)
}

/// With holds watched, a watchdog hold goes to the Watchdog [`WATCHED_AFTER`] after its grant;
/// without, only once it has lived a sixth of the timeout. (The break: a hold watched only from
/// the sixth, so a young hold's loss waited for the take-over, 5 s at the default timeout.)
#[test]
fn a_watched_hold_is_handed_over_soon_after_its_grant() {
    let mut s = watched(LockKind::Reentrant);
    s.request(req("a", Wait::Forever), Instant::now());
    s.ran(acquired(), Instant::now());
    let fx = s.drain();
    assert!(!fx.iter().any(|e| matches!(e, Effect::Track { .. })));
    assert_eq!(s.armed_in(&Timer::Track), Some(WATCHED_AFTER), "{fx:?}");
    let mut s = watched(LockKind::Reentrant);
    watched_hold(&mut s);
    let mut s = state(LockKind::Reentrant);
    s.request(req("a", Wait::Forever), Instant::now());
    s.ran(acquired(), Instant::now());
    let fx = s.drain();
    assert_eq!(
        s.armed_in(&Timer::Track),
        Some(Duration::from_secs(5)),
        "{fx:?}"
    );
}

/// A hold found gone while its own release is under way is no loss: the release's outcome
/// says (here: it unlocked, the hold ended). (The break: the first check of a hold released at
/// once found the key its release had deleted, and the guard was told lost.)
#[test]
fn a_hold_found_gone_during_its_release_ends_by_the_release() {
    let mut s = watched(LockKind::Reentrant);
    let (key, epoch) = watched_hold(&mut s);
    s.release(key.clone(), epoch, Some(1), Instant::now());
    s.drain();
    s.hold_lost(&key, epoch, Instant::now());
    let fx = s.drain();
    assert!(!fx.iter().any(|e| matches!(e, Effect::Lost(..))), "{fx:?}");
    s.ran(
        Outcome::Release(Ok(HandedOff::No(Released::Unlocked))),
        Instant::now(),
    );
    let fx = s.drain();
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Ended(e) if *e == epoch)),
        "{fx:?}"
    );
    assert!(!fx.iter().any(|e| matches!(e, Effect::Lost(..))), "{fx:?}");
    assert!(fx.iter().any(|e| matches!(e, Effect::Done(1, Ok(())))));
}

/// ... and when the release does not end the hold (Redis refused it), the hold found gone is
/// lost after all: the Watchdog renews it no more.
#[test]
fn a_hold_found_gone_during_a_release_that_failed_is_lost() {
    let mut s = watched(LockKind::Reentrant);
    let (key, epoch) = watched_hold(&mut s);
    s.release(key.clone(), epoch, Some(1), Instant::now());
    s.drain();
    s.hold_lost(&key, epoch, Instant::now());
    s.drain();
    s.ran(
        Outcome::Release(Err(LockError::NoPermission {
            what: "run EVALSHA".into(),
            detail: "test".into(),
        })),
        Instant::now(),
    );
    let fx = s.drain();
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Lost(e, Loss::Watchdog) if *e == epoch)),
        "{fx:?}"
    );
}

/// A watched hold's last release lets the Watchdog go of it before it is sent (the
/// invalidation the release causes then costs no check), and a release Redis refused puts it
/// back under the watch. (The break: a hold left unrenewed after a failed release; or a second
/// check per short hold.)
#[test]
fn a_last_release_untracks_first_and_a_failed_one_tracks_again() {
    let mut s = watched(LockKind::Reentrant);
    let (key, epoch) = watched_hold(&mut s);
    s.release(key.clone(), epoch, Some(1), Instant::now());
    let fx = s.drain();
    let untrack = fx
        .iter()
        .position(|e| matches!(e, Effect::Untrack { epoch: x, .. } if *x == epoch));
    let run = fx.iter().position(|e| matches!(e, Effect::Run(_)));
    assert!(
        matches!((untrack, run), (Some(u), Some(r)) if u < r),
        "{fx:?}"
    );
    s.ran(
        Outcome::Release(Err(LockError::NoPermission {
            what: "run EVALSHA".into(),
            detail: "test".into(),
        })),
        Instant::now(),
    );
    let fx = s.drain();
    assert!(s.timers.is_armed(&Timer::Track), "{fx:?}");
    s.fired(Timer::Track, Instant::now() + WATCHED_AFTER);
    let fx = s.drain();
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Track { epoch: x, .. } if *x == epoch)),
        "{fx:?}"
    );
}

/// A release at shutdown that failed quickly is tried again after a growing backoff, three
/// times at most; one that took 400 ms or more (a frozen server's response timeout) is not.
#[test]
fn a_release_at_shutdown_is_tried_again_only_after_a_quick_failure() {
    let quick = Duration::from_millis(5);
    let ms = Duration::from_millis;
    assert_eq!(shutdown_retry(1, quick), Some(ms(100)));
    assert_eq!(shutdown_retry(2, quick), Some(ms(200)));
    assert_eq!(shutdown_retry(3, quick), Some(ms(300)));
    assert_eq!(shutdown_retry(4, quick), None);
    assert_eq!(shutdown_retry(1, ms(399)), Some(ms(100)));
    assert_eq!(shutdown_retry(1, ms(400)), None);
}

/// The `Lost` effects of `epoch` among `effects`.
fn losses(effects: &[Effect], epoch: u64) -> Vec<Loss> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Lost(x, loss) if *x == epoch => Some(*loss),
            _ => None,
        })
        .collect()
}

/// A hold is told lost once, whatever tells it: a watched hold the Watchdog finds gone, and
/// then again (a second check in flight), yields one `Lost`; a lease hold whose lease ran out
/// yields one `Lost`, and a Watchdog report of it after that none. (The break: a loss reported
/// twice, which the shell would carry out twice: the lost-holds metric counted twice.)
#[test]
fn a_hold_is_told_lost_once() {
    let mut s = watched(LockKind::Reentrant);
    let (key, epoch) = watched_hold(&mut s);
    s.hold_lost(&key, epoch, Instant::now());
    let mut fx = s.drain();
    s.hold_lost(&key, epoch, Instant::now());
    fx.extend(s.drain());
    assert_eq!(losses(&fx, epoch), [Loss::Watchdog], "{fx:?}");
    let untracks = fx
        .iter()
        .filter(|e| matches!(e, Effect::Untrack { epoch: x, .. } if *x == epoch))
        .count();
    assert_eq!(untracks, 1, "{fx:?}");

    let mut s = state(LockKind::Reentrant);
    let t0 = Instant::now();
    let leased = Request {
        lease: Some(SECOND),
        ..req("a", Wait::Forever)
    };
    let a = s.request(leased, t0);
    s.ran(acquired(), t0);
    let (key, epoch) = granted(&s.drain(), a).expect("granted");
    s.fired(Timer::Expiry(key.clone(), epoch), t0 + SECOND);
    let mut fx = s.drain();
    s.hold_lost(&key, epoch, t0 + SECOND);
    fx.extend(s.drain());
    assert_eq!(losses(&fx, epoch), [Loss::Lease], "{fx:?}");
}

/// A writer that asks again right after its release, while older local waiters of other
/// holders wait for that release's message, waits its turn behind them: no attempt of its own
/// (it would get in first, round after round). The message wakes the oldest first.
#[test]
fn a_writer_asking_again_waits_behind_older_local_waiters() {
    let t0 = Instant::now();
    let mut s = state(LockKind::Read);
    let with = |holder: &str, kind| Request {
        kind,
        ..req(holder, Wait::Forever)
    };
    let w = s.request(with("w", LockKind::Write), t0);
    s.ran(acquired(), t0);
    let (key, epoch) = granted(&s.drain(), w).expect("the writer holds");
    let r = s.request(with("r", LockKind::Read), t0);
    assert!(matches!(runs(&s.drain())[..], [Op::Acquire { .. }]));
    s.ran(busy(), t0);
    s.drain();
    s.release(key, epoch, None, t0);
    s.drain();
    s.ran(Outcome::Release(Ok(HandedOff::No(Released::Unlocked))), t0);
    s.drain();
    let again = s.request(with("w", LockKind::Write), t0);
    let fx = s.drain();
    assert!(runs(&fx).is_empty(), "the writer barged: {fx:?}");
    let channel = s.channel.clone();
    s.unlocked(true, &channel, t0);
    s.ran(acquired(), t0);
    let fx = s.drain();
    assert!(granted(&fx, r).is_some(), "the older reader first: {fx:?}");
    assert!(
        matches!(
            runs(&fx)[..],
            [
                Op::Acquire {
                    kind: LockKind::Read,
                    ..
                },
                Op::Acquire {
                    kind: LockKind::Write,
                    ..
                }
            ]
        ),
        "the reader's attempt, then the writer's: {fx:?}"
    );
    assert!(s.is_waiting(again));
}
