//! A request whose reply never came is sent again exactly as it was first sent: while it is under
//! way the state keeps only what the request carries beyond its flight (`trips::Sent`), and makes
//! the request again from the two when its reply is missing.

use super::*;

/// The one request among `effects`, as its shell runs it, and its number.
fn the_request(effects: &[Effect]) -> (String, u64) {
    match runs(effects)[..] {
        [op] => (format!("{op:?}"), op.seq().expect("a request")),
        _ => panic!("one round trip expected: {effects:?}"),
    }
}

/// The request under way, number `seq`, gets no reply (`lost`): its resend, once its timer
/// fires, is the one request run.
fn resent(s: &mut LockState, lost: Outcome, seq: u64, now: Instant) -> (String, u64) {
    s.ran(lost, now);
    s.drain();
    assert!(s.timers.is_armed(&Timer::Resend(seq)), "no resend armed");
    s.fired(Timer::Resend(seq), now);
    the_request(&s.drain())
}

/// An acquire with a lease, of a fair lock with a wait (its queue arguments) and of a plain one:
/// sent again with the same TTL, queue arguments, count and number. (The break: an acquire made
/// again with its lease or the watchdog's timeout as its TTL, or without its queue arguments.)
#[test]
fn an_acquire_is_sent_again_as_it_was() {
    let now = Instant::now();
    for (kind, lease, wait) in [
        (LockKind::Reentrant, Some(7 * SECOND), Wait::Forever),
        (LockKind::Fair, None, Wait::Up(3 * SECOND)),
        (LockKind::Reentrant, None, Wait::No),
    ] {
        let mut s = state(kind);
        let request = Request {
            holder: "a".into(),
            kind,
            lease,
            wait,
        };
        s.request(request, now);
        let (first, seq) = the_request(&s.drain());
        let again = resent(&mut s, Outcome::Acquire(Err(timeout())), seq, now);
        assert_eq!(again, (first, seq), "{kind:?}");
    }
}

/// The release of a re-entered lease hold (the lease it restores, the count it expects) and a
/// hand-off (both holders, both leases): sent again as they were. (The break: a release made again
/// with another lease, or a hand-off with its releasing holder's lease as the next holder's.)
#[test]
fn a_release_and_a_hand_off_are_sent_again_as_they_were() {
    let now = Instant::now();
    let leased = |holder: &str, lease| Request {
        holder: holder.into(),
        kind: LockKind::Reentrant,
        lease: Some(lease),
        wait: Wait::Forever,
    };
    // A re-entered hold's release.
    let mut s = state(LockKind::Reentrant);
    let a = s.request(leased("a", 9 * SECOND), now);
    s.ran(acquired(), now);
    let (key, _) = granted(&s.drain(), a).expect("a granted");
    let again = s.request(leased("a", 4 * SECOND), now);
    s.ran(reentered(), now);
    let (_, epoch) = granted(&s.drain(), again).expect("a granted again");
    s.release(key, epoch, Some(1), now);
    let (first, seq) = the_request(&s.drain());
    assert!(first.starts_with("Release"), "{first}");
    let lost = Outcome::Release(Err(timeout()));
    assert_eq!(resent(&mut s, lost, seq, now), (first, seq));

    // A hand-off to a waiter with a lease of its own.
    let mut s = state(LockKind::Reentrant);
    let a = s.request(leased("a", 9 * SECOND), now);
    s.ran(acquired(), now);
    let (key, epoch) = granted(&s.drain(), a).expect("a granted");
    s.request(leased("b", 5 * SECOND), now);
    s.ran(busy(), now);
    s.drain();
    s.release(key, epoch, Some(1), now);
    let (first, seq) = the_request(&s.drain());
    assert!(first.starts_with("HandOff"), "{first}");
    let lost = Outcome::Release(Err(timeout()));
    assert_eq!(resent(&mut s, lost, seq, now), (first, seq));
}
