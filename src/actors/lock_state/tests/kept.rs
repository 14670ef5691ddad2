//! The lock's channel kept after a grant: no UNSUBSCRIBE between the grant and its caller, and
//! no SUBSCRIBE (nor the attempt after one) for the name's next wait; given up when a waiter
//! leaves without the lock, or when the actor departs.

use super::*;

fn subscribes(fx: &[Effect]) -> usize {
    fx.iter()
        .filter(|e| matches!(e, Effect::Subscribe(_)))
        .count()
}

fn unsubscribes(fx: &[Effect]) -> usize {
    fx.iter()
        .filter(|e| matches!(e, Effect::Unsubscribe(_)))
        .count()
}

/// Waiter `holder` finds the lock taken, waits, and is woken by the unlock message: returns the
/// effects of its request and failed attempt, and those of its wake-up and grant.
fn wait_and_get(s: &mut LockState, holder: &str, t: Instant) -> (Vec<Effect>, Vec<Effect>) {
    let channel = s.channel.clone();
    let id = s.request(req(holder, Wait::Forever), t);
    s.ran(busy(), t);
    let mut waited = s.drain();
    if subscribes(&waited) > 0 {
        // A first wait: subscribed, then the attempt that closes the race, taken too.
        s.subscribed(&channel, true, t);
        let fx = s.drain();
        assert!(matches!(runs(&fx)[..], [Op::Acquire { .. }]), "{fx:?}");
        s.ran(busy(), t);
        waited.extend(fx);
        waited.extend(s.drain());
    }
    s.unlocked(false, &channel, t);
    let fx = s.drain();
    assert!(matches!(runs(&fx)[..], [Op::Acquire { .. }]), "{fx:?}");
    s.ran(acquired(), t);
    let mut woken = fx;
    woken.extend(s.drain());
    assert!(granted(&woken, id).is_some(), "{woken:?}");
    (waited, woken)
}

fn release_all(s: &mut LockState, woken: &[Effect], t: Instant) -> Vec<Effect> {
    let (key, epoch) = woken
        .iter()
        .find_map(|e| match e {
            Effect::Answer(_, Answer::Granted { key, epoch, .. }) => Some((key.clone(), *epoch)),
            _ => None,
        })
        .expect("a grant");
    s.release(key, epoch, Some(1), t);
    s.drain();
    s.ran(Outcome::Release(Ok(HandedOff::No(Released::Unlocked))), t);
    s.drain()
}

#[test]
fn a_granted_waiters_channel_is_kept_and_the_next_wait_subscribes_nothing() {
    let t = Instant::now();
    let mut s = state(LockKind::Reentrant);
    let (waited, woken) = wait_and_get(&mut s, "a", t);
    assert_eq!(subscribes(&waited), 1, "{waited:?}");
    assert_eq!(
        unsubscribes(&woken),
        0,
        "no UNSUBSCRIBE at the grant: {woken:?}"
    );
    let released = release_all(&mut s, &woken, t);
    assert!(
        matches!(released.last(), Some(Effect::Idle)),
        "{released:?}"
    );
    assert_eq!(unsubscribes(&released), 0, "kept while idle: {released:?}");
    // The next wait: its failed attempt, then nothing until the message (one attempt, no
    // SUBSCRIBE, no attempt after one).
    let (waited, woken) = wait_and_get(&mut s, "b", t);
    assert_eq!(subscribes(&waited), 0, "{waited:?}");
    assert_eq!(runs(&waited).len(), 1, "{waited:?}");
    release_all(&mut s, &woken, t);
    // The actor departs: the kept channel goes with it.
    s.retire();
    let fx = s.drain();
    assert_eq!(unsubscribes(&fx), 1, "{fx:?}");
}

#[test]
fn a_waiter_that_leaves_without_the_lock_gives_the_kept_channel_up() {
    let t = Instant::now();
    let mut s = state(LockKind::Reentrant);
    let (_, woken) = wait_and_get(&mut s, "a", t);
    release_all(&mut s, &woken, t);
    let id = s.request(req("b", Wait::Up(SECOND)), t);
    s.ran(busy(), t);
    s.drain();
    s.fired(Timer::Deadline(id), t + SECOND);
    let mut fx = s.drain();
    if !runs(&fx).is_empty() {
        // Its last try (`outage::deadline`), found taken.
        s.ran(busy(), t + SECOND);
        fx.extend(s.drain());
    }
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Answer(i, Answer::TimedOut) if *i == id)),
        "{fx:?}"
    );
    assert_eq!(unsubscribes(&fx), 1, "{fx:?}");
    assert!(!s.link.has_subscriptions());
}

#[test]
fn a_fair_waiters_own_channel_is_not_kept() {
    let t = Instant::now();
    let mut s = state(LockKind::Fair);
    let id = s.request(
        Request {
            kind: LockKind::Fair,
            ..req("a", Wait::Forever)
        },
        t,
    );
    s.ran(busy(), t);
    s.drain();
    let channel = s.channel_of("a");
    s.subscribed(&channel, true, t);
    s.drain();
    s.ran(busy(), t);
    s.drain();
    s.unlocked(false, &channel, t);
    s.drain();
    s.ran(acquired(), t);
    let fx = s.drain();
    assert!(granted(&fx, id).is_some(), "{fx:?}");
    assert_eq!(unsubscribes(&fx), 1, "{fx:?}");
}
