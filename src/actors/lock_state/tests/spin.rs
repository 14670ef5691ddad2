//! The spin lock's rules: its waiters listen on no channel and retry on their back-off's timer;
//! its releases wake this process's own waiters, since nothing is published.

use super::*;
use crate::actors::lock_state::turns::{HOLD_BACK_MIN, UNUSED_TURN_SPACING};

fn spin_req(holder: &str, wait: Wait) -> Request {
    Request {
        kind: LockKind::Spin,
        ..req(holder, wait)
    }
}

fn no_hand_off() -> LockState {
    let settings = Settings {
        hand_off: false,
        ..settings()
    };
    LockState::new(LockKind::Spin, "name".into(), settings, Instant::now())
}

fn retry_armed(s: &LockState) -> Option<Duration> {
    s.armed_in(&Timer::Retry)
}

fn subscribes(fx: &[Effect]) -> bool {
    fx.iter().any(|e| matches!(e, Effect::Subscribe(_)))
}

/// A held spin lock: the waiter subscribes to nothing and tries again after each sleep of
/// Redisson's default back-off, 1 ms, then 2, then 4 or 5 (jitter), up to 128 ms; every retry
/// is one attempt.
#[test]
fn a_spin_waiter_subscribes_to_nothing_and_retries_on_its_back_off() {
    let mut s = state(LockKind::Spin);
    let t0 = Instant::now();
    let id = s.request(spin_req("a", Wait::Forever), t0);
    let fx = s.drain();
    assert!(matches!(runs(&fx)[..], [Op::Acquire { .. }]), "{fx:?}");
    let mut sleeps = Vec::new();
    for _ in 0..12 {
        s.ran(busy(), t0);
        let fx = s.drain();
        assert!(!subscribes(&fx), "{fx:?}");
        assert!(fx.iter().any(|e| matches!(e, Effect::Watch(i) if *i == id)) || !sleeps.is_empty());
        let sleep = retry_armed(&s).expect("a retry timer");
        sleeps.push(sleep.as_millis() as u64);
        s.fired(Timer::Retry, t0);
        let fx = s.drain();
        assert!(matches!(runs(&fx)[..], [Op::Acquire { .. }]), "{fx:?}");
    }
    assert_eq!(&sleeps[..2], &[1, 2], "{sleeps:?}");
    assert!((4..=5).contains(&sleeps[2]), "{sleeps:?}");
    assert_eq!(sleeps[11], 128, "{sleeps:?}");
    assert!(sleeps.windows(2).all(|w| w[0] <= w[1]), "{sleeps:?}");
    s.ran(acquired(), t0);
    assert!(granted(&s.drain(), id).is_some());
}

/// A holder whose lease ends sooner than the next sleep: the retry comes at the lease's end.
#[test]
fn a_spin_retry_comes_no_later_than_the_holders_ttl() {
    let settings = Settings {
        spin_backoff: SpinBackOff::constant(Duration::from_millis(500)),
        ..settings()
    };
    let mut s = LockState::new(LockKind::Spin, "name".into(), settings, Instant::now());
    s.request(spin_req("a", Wait::Forever), Instant::now());
    s.drain();
    s.ran(busy(), Instant::now());
    s.drain();
    assert_eq!(retry_armed(&s), Some(Duration::from_millis(500)));
    s.fired(Timer::Retry, Instant::now());
    s.drain();
    let short = Outcome::Acquire(Ok(Attempt::Busy {
        ttl: Some(Duration::from_millis(20)),
    }));
    s.ran(short, Instant::now());
    s.drain();
    assert_eq!(retry_armed(&s), Some(Duration::from_millis(20)));
}

/// Without the local hand-off (replica sync on), a release publishes nothing, so nothing would
/// wake this process's own waiter but its sleep: the release's outcome tries it at once.
#[test]
fn a_spin_release_tries_the_local_waiter_at_once() {
    let mut s = no_hand_off();
    let t0 = Instant::now();
    let a = s.request(spin_req("a", Wait::Forever), t0);
    s.ran(acquired(), t0);
    let (key_a, epoch_a) = granted(&s.drain(), a).expect("a granted");
    let b = s.request(spin_req("b", Wait::Forever), t0);
    s.ran(busy(), t0);
    let fx = s.drain();
    assert!(!subscribes(&fx), "{fx:?}");
    s.release(key_a, epoch_a, Some(1), t0);
    let fx = s.drain();
    assert!(
        matches!(
            runs(&fx)[..],
            [Op::Release {
                kind: LockKind::Spin,
                ..
            }]
        ),
        "{fx:?}"
    );
    s.ran(Outcome::Release(Ok(HandedOff::No(Released::Unlocked))), t0);
    let fx = s.drain();
    assert!(
        matches!(runs(&fx)[..], [Op::Acquire { .. }]),
        "b tries at once: {fx:?}"
    );
    s.ran(acquired(), t0);
    assert!(granted(&s.drain(), b).is_some());
}

/// A second holder joins the local queue without a round trip, and a release hands the lock
/// to it in one script, as the reentrant lock's does: no subscription at any step.
#[test]
fn a_spin_lock_hands_off_to_a_local_waiter() {
    let mut s = state(LockKind::Spin);
    let t0 = Instant::now();
    let a = s.request(spin_req("a", Wait::Forever), t0);
    s.ran(acquired(), t0);
    let (key_a, epoch_a) = granted(&s.drain(), a).expect("a granted");
    let b = s.request(spin_req("b", Wait::Forever), t0);
    s.ran(busy(), t0);
    assert!(!subscribes(&s.drain()));
    let c = s.request(spin_req("c", Wait::Forever), t0);
    let fx = s.drain();
    assert!(runs(&fx).is_empty(), "c queues behind b: {fx:?}");
    assert!(!subscribes(&fx), "{fx:?}");
    s.release(key_a, epoch_a, None, t0);
    let fx = s.drain();
    assert!(
        matches!(runs(&fx)[..], [Op::HandOff { to, .. }] if &**to == "b"),
        "{fx:?}"
    );
    s.ran(Outcome::Release(Ok(HandedOff::To { token: None })), t0);
    let fx = s.drain();
    assert!(granted(&fx, b).is_some(), "{fx:?}");
    assert!(!subscribes(&fx), "{fx:?}");
    assert!(s.is_waiting(c));
}

/// A release that ends a streak of hand-offs holds this process's waiters back for the longest
/// sleep of the back-off more than a reentrant lock's: another process's spin waiter hears no
/// message and tries only after its sleep.
#[test]
fn a_spin_streak_ends_with_a_hold_back_as_long_as_the_longest_sleep() {
    let mut s = state(LockKind::Spin);
    let t0 = Instant::now();
    let first = s.request(spin_req("h0", Wait::Forever), t0);
    s.ran(acquired(), t0);
    let mut hold = granted(&s.drain(), first).expect("granted");
    for i in 1..=MAX_HAND_OFF_STREAK + 1 {
        let next = s.request(spin_req(&format!("h{i}"), Wait::Forever), t0);
        if !runs(&s.drain()).is_empty() {
            s.ran(busy(), t0);
            s.drain();
        }
        s.release(hold.0.clone(), hold.1, None, t0);
        let fx = s.drain();
        if i <= MAX_HAND_OFF_STREAK {
            assert!(matches!(runs(&fx)[..], [Op::HandOff { .. }]), "{i}: {fx:?}");
            s.ran(Outcome::Release(Ok(HandedOff::To { token: None })), t0);
            hold = granted(&s.drain(), next).expect("handed off");
        } else {
            assert!(matches!(runs(&fx)[..], [Op::Release { .. }]), "{i}: {fx:?}");
        }
    }
    s.ran(Outcome::Release(Ok(HandedOff::No(Released::Unlocked))), t0);
    let fx = s.drain();
    assert!(runs(&fx).is_empty(), "held back: {fx:?}");
    let turn = s.armed_in(&Timer::Turn).expect("a hold-back");
    assert!(turn >= Duration::from_millis(128 + 5), "{turn:?}");
    s.fired(Timer::Turn, t0 + turn);
    assert!(matches!(runs(&s.drain())[..], [Op::Acquire { .. }]));
}

/// Runs one streak from `hold` at `t`: [`MAX_HAND_OFF_STREAK`] hand-offs to new waiters, then
/// the release that ends it (freed in Redis), a new waiter still queued. Returns that waiter.
fn streak(s: &mut LockState, mut hold: (HoldKey, u64), t: Instant, tag: &str) -> WaiterId {
    let mut next = None;
    for i in 1..=MAX_HAND_OFF_STREAK + 1 {
        let id = s.request(spin_req(&format!("{tag}{i}"), Wait::Forever), t);
        if !runs(&s.drain()).is_empty() {
            s.ran(busy(), t);
            s.drain();
        }
        s.release(hold.0.clone(), hold.1, None, t);
        s.drain();
        if i <= MAX_HAND_OFF_STREAK {
            s.ran(Outcome::Release(Ok(HandedOff::To { token: None })), t);
            hold = granted(&s.drain(), id).expect("handed off");
        }
        next = Some(id);
    }
    s.ran(Outcome::Release(Ok(HandedOff::No(Released::Unlocked))), t);
    assert!(runs(&s.drain()).is_empty(), "held back");
    next.expect("a waiter")
}

/// The hold-back armed at `t`, fired: the head's attempt is answered `outcome`. Returns the
/// hold-back's length.
fn turn(s: &mut LockState, t: Instant, outcome: Outcome) -> Duration {
    let turn = s.armed_in(&Timer::Turn).expect("a hold-back");
    s.fired(Timer::Turn, t + turn);
    assert!(matches!(runs(&s.drain())[..], [Op::Acquire { .. }]));
    s.ran(outcome, t + turn);
    turn
}

/// A long hold-back that nobody took (the head found the lock still free at its end) is
/// followed by short ones, the reentrant lock's, for 7 of its lengths; then a long one again,
/// and one that another process took (the head found it busy) keeps the next one long: one
/// process alone pays the back-off's longest sleep once per 8 of its lengths, not after every
/// streak.
#[test]
fn an_unused_spin_hold_back_is_followed_by_short_ones_for_a_while() {
    let long = Duration::from_millis(128 + 5);
    let mut s = state(LockKind::Spin);
    let t0 = Instant::now();
    let first = s.request(spin_req("h", Wait::Forever), t0);
    s.ran(acquired(), t0);
    let hold = granted(&s.drain(), first).expect("granted");
    let head = streak(&mut s, hold, t0, "a");
    assert_eq!(turn(&mut s, t0, acquired()), long, "the first is long");
    let hold = granted(&s.drain(), head).expect("the head got in");
    let t1 = t0 + long;
    let head = streak(&mut s, hold, t1, "b");
    assert_eq!(
        turn(&mut s, t1, acquired()),
        HOLD_BACK_MIN,
        "short after an unused one"
    );
    let hold = granted(&s.drain(), head).expect("the head got in");
    // 7 long ones after the unused one's end, the next streak's hold-back is long again; this
    // time another process takes it.
    let t2 = t1 + long * UNUSED_TURN_SPACING;
    let head = streak(&mut s, hold, t2, "c");
    assert_eq!(
        turn(&mut s, t2, busy()),
        long,
        "long once the spacing passed"
    );
    assert!(s.is_waiting(head));
    // The other process's hold ends; the head spins and gets in, and its next streak's
    // hold-back is long again: the last one was used.
    let retry = t2 + long + s.armed_in(&Timer::Retry).expect("it spins");
    s.fired(Timer::Retry, retry);
    assert!(matches!(runs(&s.drain())[..], [Op::Acquire { .. }]));
    s.ran(acquired(), retry);
    let hold = granted(&s.drain(), head).expect("the head got in");
    let t3 = t2 + long * 2;
    streak(&mut s, hold, t3, "d");
    assert_eq!(turn(&mut s, t3, acquired()), long, "long after a used one");
}
