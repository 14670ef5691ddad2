//! Other processes' turn after a full streak of local hand-offs (`turns.rs`).

use super::*;
use crate::actors::lock_state::turns::{HOLD_BACK_MAX, HOLD_BACK_MIN, hold_back};

const CHANNEL: &str = "redisson_lock__channel:{name}";
const MS: Duration = Duration::from_millis(1);

/// A lock handed off `MAX_HAND_OFF_STREAK` times in a row among local holders `h0`, `h1`, …:
/// returns the last holder's hold and the waiter parked behind it (the next release cannot
/// hand off).
fn full_streak(s: &mut LockState, t: Instant) -> ((HoldKey, u64), WaiterId) {
    let first = s.request(req("h0", Wait::Forever), t);
    s.ran(acquired(), t);
    let mut hold = granted(&s.drain(), first).expect("granted");
    let mut next = s.request(req("h1", Wait::Forever), t);
    s.ran(busy(), t);
    s.drain();
    for i in 1..=MAX_HAND_OFF_STREAK {
        s.release(hold.0.clone(), hold.1, None, t);
        assert!(matches!(runs(&s.drain())[..], [Op::HandOff { .. }]), "{i}");
        s.ran(Outcome::Release(Ok(HandedOff::To { token: None })), t);
        hold = granted(&s.drain(), next).expect("handed off");
        // The next waiter, alone: its attempt finds the lock busy.
        next = s.request(req(&format!("h{}", i + 1), Wait::Forever), t);
        assert!(matches!(runs(&s.drain())[..], [Op::Acquire { .. }]), "{i}");
        s.ran(busy(), t);
        s.drain();
    }
    (hold, next)
}

/// The release after a full streak, sent at `t` and answered (the lock freed, published) at
/// `t + round_trip`: its effects.
fn streak_ending_release(
    s: &mut LockState,
    hold: (HoldKey, u64),
    t: Instant,
    round_trip: Duration,
) -> Vec<Effect> {
    s.release(hold.0, hold.1, None, t);
    assert!(matches!(runs(&s.drain())[..], [Op::Release { .. }]));
    s.ran(
        Outcome::Release(Ok(HandedOff::No(Released::Unlocked))),
        t + round_trip,
    );
    s.drain()
}

fn armed_turn(s: &LockState) -> Option<Duration> {
    s.armed_in(&Timer::Turn)
}

fn attempt_of(fx: &[Effect]) -> Option<Arc<str>> {
    match runs(fx)[..] {
        [Op::Acquire { holder, .. }] => Some(holder.clone()),
        _ => None,
    }
}

#[test]
fn after_a_full_streak_local_waiters_hold_back_then_the_head_tries() {
    let t = Instant::now();
    let mut s = state(LockKind::Reentrant);
    let (hold, next) = full_streak(&mut s, t);
    let fx = streak_ending_release(&mut s, hold, t, MS);
    assert_eq!(armed_turn(&s), Some(HOLD_BACK_MIN), "{fx:?}");
    assert!(runs(&fx).is_empty(), "{fx:?}");
    // The release's own message comes back: this process's waiter does not try yet.
    s.unlocked(false, CHANNEL, t + 2 * MS);
    assert!(runs(&s.drain()).is_empty());
    assert!(s.is_waiting(next));
    // The hold-back ends: the head waiter tries, once. Another process's waiter took the lock
    // meanwhile: it finds it busy and is parked again, to be woken by that holder's release.
    s.fired(Timer::Turn, t + MS + HOLD_BACK_MIN);
    let fx = s.drain();
    assert_eq!(attempt_of(&fx).as_deref(), Some("h9"), "{fx:?}");
    s.ran(busy(), t + 7 * MS);
    assert!(runs(&s.drain()).is_empty());
    // That holder's release publishes: the head tries at once (no hold-back: no streak ended
    // here).
    s.unlocked(false, CHANNEL, t + 20 * MS);
    assert_eq!(attempt_of(&s.drain()).as_deref(), Some("h9"));
}

#[test]
fn when_nobody_else_took_it_the_head_takes_it_after_the_hold_back() {
    let t = Instant::now();
    let mut s = state(LockKind::Reentrant);
    let (hold, next) = full_streak(&mut s, t);
    streak_ending_release(&mut s, hold, t, MS);
    s.fired(Timer::Turn, t + MS + HOLD_BACK_MIN);
    assert!(attempt_of(&s.drain()).is_some());
    s.ran(acquired(), t + 7 * MS);
    let (key, epoch) = granted(&s.drain(), next).expect("granted after the hold-back");
    // A new streak: its releases hand off again.
    s.request(req("h10", Wait::Forever), t + 8 * MS);
    s.ran(busy(), t + 8 * MS);
    s.drain();
    s.release(key, epoch, None, t + 9 * MS);
    assert!(matches!(runs(&s.drain())[..], [Op::HandOff { .. }]));
}

#[test]
fn the_hold_back_is_twice_the_release_s_round_trip_within_bounds() {
    assert_eq!(hold_back(Duration::ZERO), HOLD_BACK_MIN);
    assert_eq!(hold_back(20 * MS), 40 * MS);
    assert_eq!(hold_back(SECOND), HOLD_BACK_MAX);
    let t = Instant::now();
    let mut s = state(LockKind::Reentrant);
    let (hold, _) = full_streak(&mut s, t);
    let fx = streak_ending_release(&mut s, hold, t, 20 * MS);
    assert_eq!(armed_turn(&s), Some(40 * MS), "{fx:?}");
}

#[test]
fn a_release_that_ends_no_streak_holds_nobody_back() {
    let t = Instant::now();
    let mut s = state(LockKind::Reentrant);
    let a = s.request(req("a", Wait::Forever), t);
    s.ran(acquired(), t);
    let (key, epoch) = granted(&s.drain(), a).expect("granted");
    s.release(key, epoch, None, t);
    assert!(matches!(runs(&s.drain())[..], [Op::Release { .. }]));
    s.ran(Outcome::Release(Ok(HandedOff::No(Released::Unlocked))), t);
    let fx = s.drain();
    assert_eq!(armed_turn(&s), None, "{fx:?}");
    // The next request tries at once.
    s.request(req("b", Wait::Forever), t);
    assert_eq!(attempt_of(&s.drain()).as_deref(), Some("b"));
}

#[test]
fn a_new_request_during_the_hold_back_waits_for_its_end() {
    let t = Instant::now();
    let mut s = state(LockKind::Reentrant);
    let (hold, next) = full_streak(&mut s, t);
    s.caller_gone(next, t);
    s.drain();
    streak_ending_release(&mut s, hold, t, MS);
    let new = s.request(req("new", Wait::Up(SECOND)), t + 2 * MS);
    let fx = s.drain();
    assert!(runs(&fx).is_empty(), "{fx:?}");
    // Parked like any waiter: subscribed, so that a later release wakes it.
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Subscribe(c) if &**c == CHANNEL)),
        "{fx:?}"
    );
    assert!(s.is_waiting(new));
    s.fired(Timer::Turn, t + MS + HOLD_BACK_MIN);
    assert_eq!(attempt_of(&s.drain()).as_deref(), Some("new"));
}

#[test]
fn a_single_attempt_is_not_held_back() {
    let t = Instant::now();
    let mut s = state(LockKind::Reentrant);
    let (hold, _) = full_streak(&mut s, t);
    streak_ending_release(&mut s, hold, t, MS);
    s.request(req("once", Wait::No), t + 2 * MS);
    assert_eq!(attempt_of(&s.drain()).as_deref(), Some("once"));
}

#[test]
fn an_idle_actor_retires_with_no_hold_back_armed() {
    let t = Instant::now();
    let mut s = state(LockKind::Reentrant);
    let (hold, next) = full_streak(&mut s, t);
    s.caller_gone(next, t);
    s.drain();
    let fx = streak_ending_release(&mut s, hold, t, MS);
    assert!(armed_turn(&s).is_some(), "{fx:?}");
    assert!(matches!(fx.last(), Some(Effect::Idle)), "{fx:?}");
    s.retire();
    assert!(!s.timers.is_armed(&Timer::Turn));
    assert!(s.timers.iter().next().is_none(), "{:?}", s.timers);
}

#[test]
fn a_re_entry_during_the_hold_back_goes_at_once() {
    let t = Instant::now();
    let mut s = state(LockKind::Reentrant);
    let (hold, _) = full_streak(&mut s, t);
    streak_ending_release(&mut s, hold, t, MS);
    // A single attempt took the lock during the hold-back; its holder enters again, waiting:
    // it must not wait for the hold-back (nor for its own hold).
    let once = s.request(req("once", Wait::No), t + 2 * MS);
    s.ran(acquired(), t + 2 * MS);
    assert!(granted(&s.drain(), once).is_some());
    s.request(req("once", Wait::Forever), t + 3 * MS);
    assert_eq!(attempt_of(&s.drain()).as_deref(), Some("once"));
}
