//! The outage rules (`outage.rs`): a wait's end tells Redis away from a holder by what Redis
//! last said, and no wait outlasts an outage by more than `Settings::unavailable_after`.

use super::*;

const BOUND: Duration = Duration::from_secs(15);

/// A connection that failed: no answer from Redis (its outcome unknown: sent again).
fn refused() -> Outcome {
    Outcome::Acquire(Err(LockError::connection_refused("acquire")))
}

fn answer_of(effects: &[Effect], id: WaiterId) -> Option<&Answer> {
    effects.iter().find_map(|e| match e {
        Effect::Answer(i, a) if *i == id => Some(a),
        _ => None,
    })
}

fn unavailable(answer: Option<&Answer>) -> bool {
    matches!(answer, Some(Answer::Failed(LockError::Unavailable { name, cause, .. }))
        if name == "name" && cause.is_retryable())
}

#[test]
fn a_wait_that_ends_with_redis_away_is_unavailable_and_one_that_ends_on_a_holder_times_out() {
    let t0 = Instant::now();
    let mut s = state(LockKind::Reentrant);
    let id = s.request(req("a", Wait::Up(SECOND)), t0);
    s.drain();
    s.ran(refused(), t0);
    let fx = s.drain();
    assert!(answer_of(&fx, id).is_none(), "it retries: {fx:?}");
    s.fired(Timer::Deadline(id), t0 + SECOND);
    let fx = s.drain();
    assert!(unavailable(answer_of(&fx, id)), "{fx:?}");

    // Busy a second ago: at the deadline one last attempt asks, and a holder's answer is a
    // time-out.
    let mut s = state(LockKind::Reentrant);
    let id = s.request(req("a", Wait::Up(SECOND)), t0);
    s.drain();
    s.ran(busy(), t0);
    s.fired(Timer::Deadline(id), t0 + SECOND);
    let fx = s.drain();
    assert!(answer_of(&fx, id).is_none(), "{fx:?}");
    assert!(matches!(runs(&fx)[..], [Op::Acquire { .. }]), "{fx:?}");
    s.ran(busy(), t0 + SECOND);
    let fx = s.drain();
    assert!(
        matches!(answer_of(&fx, id), Some(Answer::TimedOut)),
        "{fx:?}"
    );
}

/// Busy, then the pub/sub connection is lost (the server died): the waiter tries at once, and
/// its wait ending before any answer is Redis away. Away, then an answer that the lock is held:
/// its end is a holder's.
#[test]
fn the_last_word_of_redis_decides() {
    let t0 = Instant::now();
    let mut s = state(LockKind::Reentrant);
    let id = s.request(req("a", Wait::Up(SECOND)), t0);
    s.drain();
    s.ran(busy(), t0);
    s.drain();
    s.connection_lost(
        LockError::pubsub_lost("the connection was lost"),
        t0 + SECOND / 2,
    );
    let fx = s.drain();
    assert!(
        matches!(runs(&fx)[..], [Op::Acquire { .. }]),
        "the waiter tries at once: {fx:?}"
    );
    s.fired(Timer::Deadline(id), t0 + SECOND);
    assert!(unavailable(answer_of(&s.drain(), id)));

    let mut s = state(LockKind::Reentrant);
    let id = s.request(req("a", Wait::Up(3 * SECOND)), t0);
    s.drain();
    s.ran(refused(), t0);
    // Its outcome unknown, the request is sent again.
    s.fired(Timer::Resend(1), t0 + SECOND);
    let fx = s.drain();
    assert!(matches!(runs(&fx)[..], [Op::Acquire { .. }]), "{fx:?}");
    assert!(s.timers.is_armed(&Timer::Unavailable));
    s.ran(busy(), t0 + SECOND);
    let mut fx = s.drain();
    assert!(
        !s.timers.is_armed(&Timer::Unavailable),
        "an answer ends the outage: {fx:?}"
    );
    // The resolution wakes the waiter again: Redis answers that attempt too.
    while !runs(&fx).is_empty() {
        s.ran(busy(), t0 + SECOND);
        fx = s.drain();
    }
    // Its last try asks once more; the holder's answer is a time-out.
    s.fired(Timer::Deadline(id), t0 + 3 * SECOND);
    let fx = s.drain();
    assert!(matches!(runs(&fx)[..], [Op::Acquire { .. }]), "{fx:?}");
    s.ran(busy(), t0 + 3 * SECOND);
    let fx = s.drain();
    assert!(
        matches!(answer_of(&fx, id), Some(Answer::TimedOut)),
        "{fx:?}"
    );
}

/// A round trip under way past `LAST_TRY_GRACE` at the deadline is Redis not answering; one sent
/// just before it decides: its answer if it comes within `LAST_TRY_GRACE` of its sending, Redis
/// away if it does not.
#[test]
fn a_reply_long_in_coming_at_the_deadline_is_redis_away() {
    use crate::config::LAST_TRY_GRACE;
    let t0 = Instant::now();
    let mut s = state(LockKind::Reentrant);
    let id = s.request(req("a", Wait::Up(SECOND)), t0);
    s.drain();
    s.fired(Timer::Deadline(id), t0 + SECOND);
    let fx = s.drain();
    assert!(
        matches!(answer_of(&fx, id), Some(Answer::Failed(LockError::Unavailable { cause, .. }))
            if matches!(**cause, LockError::Timeout { .. })),
        "{fx:?}"
    );

    let mut s = state(LockKind::Reentrant);
    let id = s.request(req("a", Wait::Up(SECOND)), t0);
    s.drain();
    s.ran(busy(), t0);
    // The retry at the TTL's end, sent a moment before the deadline.
    let sent = t0 + SECOND - LAST_TRY_GRACE / 2;
    s.fired(Timer::Retry, sent);
    s.drain();
    s.fired(Timer::Deadline(id), t0 + SECOND);
    let fx = s.drain();
    assert!(answer_of(&fx, id).is_none(), "{fx:?}");
    assert_eq!(
        s.armed_in(&Timer::Verdict),
        Some(LAST_TRY_GRACE / 2),
        "{fx:?}"
    );
    s.ran(busy(), t0 + SECOND + LAST_TRY_GRACE / 4);
    let fx = s.drain();
    assert!(
        matches!(answer_of(&fx, id), Some(Answer::TimedOut)),
        "{fx:?}"
    );

    // The same, and the reply does not come.
    let mut s = state(LockKind::Reentrant);
    let id = s.request(req("a", Wait::Up(SECOND)), t0);
    s.drain();
    s.ran(busy(), t0);
    s.fired(Timer::Retry, sent);
    s.drain();
    s.fired(Timer::Deadline(id), t0 + SECOND);
    s.drain();
    s.fired(Timer::Verdict, sent + LAST_TRY_GRACE);
    let fx = s.drain();
    assert!(
        matches!(answer_of(&fx, id), Some(Answer::Failed(LockError::Unavailable { cause, .. }))
            if matches!(**cause, LockError::Timeout { .. })),
        "{fx:?}"
    );
}

/// A wait without a deadline fails once Redis has been away for the bound, counted from the
/// later of its arrival and the first unanswered request; a waiter that came later gets its
/// whole bound.
#[test]
fn no_wait_outlasts_an_outage_by_more_than_the_bound() {
    let t0 = Instant::now();
    let mut s = state(LockKind::Reentrant);
    let first = s.request(req("a", Wait::Forever), t0);
    s.drain();
    s.ran(refused(), t0);
    let fx = s.drain();
    assert_eq!(s.armed_in(&Timer::Unavailable), Some(BOUND), "{fx:?}");
    let later = s.request(req("b", Wait::Forever), t0 + 10 * SECOND);
    s.drain();
    s.fired(Timer::Unavailable, t0 + BOUND);
    let fx = s.drain();
    assert!(unavailable(answer_of(&fx, first)), "{fx:?}");
    assert!(answer_of(&fx, later).is_none(), "{fx:?}");
    assert_eq!(
        s.armed_in(&Timer::Unavailable),
        Some(10 * SECOND),
        "armed again for the later waiter: {fx:?}"
    );
    s.fired(Timer::Unavailable, t0 + 10 * SECOND + BOUND);
    let fx = s.drain();
    assert!(unavailable(answer_of(&fx, later)), "{fx:?}");
}
