//! The synchronizer rules, without Redis: unit tests of each rule, and a property test of two
//! processes sharing one semaphore or permit semaphore through a small model of Redis (waiters
//! and wake-ups only: the seeded simulation of several managers, with holds, resends, leases
//! and kills, is `simulation.rs`). It checks that never more than its permits are held, that a
//! message of m wakes at most m waiters, that whenever nothing is under way no parked waiter
//! wants no more than is free, and that no waiter is left waiting once permits are free (no lost
//! wake-up), under random interleavings. The model publishes what each kind publishes: a
//! semaphore its new free count; a permit semaphore its new free count on a release of one id,
//! the number released on a release of several (Java's `tryRelease(List)`), and the permits
//! added on `add_permits`; so a rule that read a message as a budget of free permits strands
//! waiters in it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;

impl SyncState {
    /// How long after the last event `timer` of the table fires, if armed.
    fn armed_in(&self, timer: &Timer) -> Option<Duration> {
        (self.timers.at(timer)).map(|at| at.saturating_duration_since(self.now))
    }
}

/// The effects queued (the table's timers are read with [`SyncState::armed_in`]).
fn effects(state: &mut SyncState) -> Vec<Effect> {
    let mut out = Vec::new();
    state.drain_into(&mut out);
    out
}

/// The waiters whose attempt the effects start.
fn tries(effects: &[Effect]) -> Vec<WaiterId> {
    effects.iter().filter_map(attempt).collect()
}

fn attempt(effect: &Effect) -> Option<WaiterId> {
    match effect {
        Effect::Run(Trip {
            op: Op::Take { waiter, .. } | Op::Read { waiter },
            ..
        }) => Some(*waiter),
        _ => None,
    }
}

const SETTINGS: Settings = Settings {
    watchdog_timeout: Duration::from_secs(30),
    hand_off: true,
    unavailable_after: Duration::from_secs(15),
    last_try_grace: LAST_TRY_GRACE,
};

fn state(kind: SyncKind) -> SyncState {
    SyncState::new(kind, "s".into(), SETTINGS, Instant::now())
}

fn want(permits: u32) -> Want {
    Want {
        permits,
        lease: None,
        ids: Arc::from(vec![0u8; 16 * permits as usize]),
    }
}

/// Reports waiter `id`'s attempt as its round trip's outcome (as Redis would reply it).
fn report(s: &mut SyncState, id: WaiterId, tried: Tried, now: Instant) {
    let seq = s
        .trips
        .iter()
        .find(|(_, u)| matches!(u.purpose, Purpose::Attempt(w) if w == id))
        .map(|(seq, _)| *seq);
    let Some(seq) = seq else {
        return s.tried(id, tried, now);
    };
    let latch = s.kind == SyncKind::CountDownLatch;
    let outcome = match tried {
        Tried::Done if latch => Outcome::Reply(Ok(0)),
        Tried::Done => Outcome::Take(Ok(Take::Taken)),
        Tried::Short { .. } if latch => Outcome::Reply(Ok(1)),
        Tried::Short { free, retry_in } => Outcome::Take(Ok(Take::Short { free, retry_in })),
        Tried::Failed(e) if latch => Outcome::Reply(Err(e)),
        Tried::Failed(e) => Outcome::Take(Err(e)),
    };
    s.ran(seq, outcome, now);
}

fn short() -> Tried {
    Tried::Short {
        free: 0,
        retry_in: None,
    }
}

fn short_with(free: i64) -> Tried {
    Tried::Short {
        free,
        retry_in: None,
    }
}

#[test]
fn a_short_attempt_parks_and_subscribes_once_then_everyone_retries_when_subscribed() {
    let now = Instant::now();
    let mut s = state(SyncKind::Semaphore);
    s.request(1, want(1), Wait::Forever, Instant::now());
    s.request(2, want(1), Wait::Forever, Instant::now());
    assert_eq!(tries(&effects(&mut s)), vec![1, 2]);
    report(&mut s, 1, short(), now);
    report(&mut s, 2, short(), now);
    let e = effects(&mut s);
    assert_eq!(
        e.iter()
            .filter(|e| matches!(e, Effect::Subscribe(_)))
            .count(),
        1
    );
    s.subscribed(true, now);
    assert_eq!(tries(&effects(&mut s)), vec![1, 2]);
}

#[test]
fn a_release_of_k_permits_wakes_at_most_k_waiters_in_arrival_order() {
    let now = Instant::now();
    let mut s = state(SyncKind::Semaphore);
    for id in 1..=10 {
        s.request(id, want(1), Wait::Forever, Instant::now());
    }
    effects(&mut s);
    for id in 1..=10 {
        report(&mut s, id, short(), now);
    }
    s.subscribed(true, now);
    effects(&mut s);
    for id in 1..=10 {
        report(&mut s, id, short(), now);
    }
    effects(&mut s);
    s.unlocked(Some(3), Instant::now());
    assert_eq!(tries(&effects(&mut s)), vec![1, 2, 3]);
    s.unlocked(Some(0), Instant::now());
    assert!(
        tries(&effects(&mut s)).is_empty(),
        "a message of 0 wakes none"
    );
}

#[test]
fn a_waiter_that_does_not_fit_is_skipped_not_blocking_the_others() {
    let now = Instant::now();
    let mut s = state(SyncKind::Semaphore);
    s.request(1, want(5), Wait::Forever, Instant::now());
    s.request(2, want(1), Wait::Forever, Instant::now());
    effects(&mut s);
    report(&mut s, 1, short(), now);
    report(&mut s, 2, short(), now);
    s.subscribed(true, now);
    effects(&mut s);
    report(&mut s, 1, short(), now);
    report(&mut s, 2, short(), now);
    effects(&mut s);
    s.unlocked(Some(2), Instant::now());
    // Waiter 2 fits into 2 and goes first; waiter 1 is woken too: the number is not a budget.
    assert_eq!(tries(&effects(&mut s)), vec![2, 1]);
}

/// Waiters `ids` (wanting `wants`) have arrived, subscribed and fallen short again: all parked.
fn parked(kind: SyncKind, waiters: &[(WaiterId, u32)]) -> SyncState {
    let now = Instant::now();
    let mut s = state(kind);
    for &(id, wants) in waiters {
        s.request(id, want(wants), Wait::Forever, Instant::now());
    }
    effects(&mut s);
    for &(id, _) in waiters {
        report(&mut s, id, short(), now);
    }
    s.subscribed(true, now);
    effects(&mut s);
    for &(id, _) in waiters {
        report(&mut s, id, short(), now);
    }
    effects(&mut s);
    s
}

#[test]
fn a_message_smaller_than_a_waiters_wants_still_wakes_it() {
    // A permit semaphore's add_permits(1) publishes 1 while 2 may be free now (issue 35).
    for kind in [SyncKind::PermitSemaphore, SyncKind::Semaphore] {
        let mut s = parked(kind, &[(1, 2)]);
        s.unlocked(Some(1), Instant::now());
        assert_eq!(tries(&effects(&mut s)), vec![1], "{kind:?}");
    }
}

#[test]
fn a_message_of_m_wakes_m_waiters_whatever_they_want() {
    let waiters: Vec<_> = (1..=10).map(|id| (id, 2)).collect();
    let mut s = parked(SyncKind::PermitSemaphore, &waiters);
    s.unlocked(Some(3), Instant::now());
    assert_eq!(tries(&effects(&mut s)), vec![1, 2, 3]);
}

#[test]
fn waiters_that_fit_go_first_then_the_others_in_arrival_order() {
    let mut s = parked(SyncKind::Semaphore, &[(1, 3), (2, 1), (3, 4), (4, 1)]);
    s.unlocked(Some(1), Instant::now());
    assert_eq!(
        tries(&effects(&mut s)),
        vec![2],
        "the free count is 1: the small one"
    );
    s.unlocked(Some(3), Instant::now());
    assert_eq!(tries(&effects(&mut s)), vec![1, 4, 3]);
}

#[test]
fn a_woken_waiter_that_falls_short_passes_on_what_it_found_free() {
    let now = Instant::now();
    // 1 free, waiters for 5 and 2 parked; add_permits(1) publishes 1: none fits into 1, so the
    // first in arrival order, the waiter for 5, is woken and finds 2 free. The waiter for 2 fits.
    let mut s = parked(SyncKind::PermitSemaphore, &[(1, 5), (2, 2), (3, 1)]);
    s.unlocked(Some(1), Instant::now());
    assert_eq!(tries(&effects(&mut s)), vec![3], "waiter 3 fits into 1");
    s.unlocked(Some(1), Instant::now());
    assert_eq!(tries(&effects(&mut s)), vec![1]);
    report(&mut s, 1, short_with(2), now);
    assert_eq!(tries(&effects(&mut s)), vec![2], "2 free: waiter 2 fits");
    report(&mut s, 2, short_with(0), now);
    assert!(tries(&effects(&mut s)).is_empty(), "nothing free: nobody");
    // Waiter 3 finds 3 free: it tries again (a message came during its attempt), and waiter 2
    // fits into them; waiter 1 does not.
    report(&mut s, 3, short_with(3), now);
    assert_eq!(tries(&effects(&mut s)), vec![3, 2]);
}

#[test]
fn an_attempt_under_way_does_not_use_up_a_message() {
    let now = Instant::now();
    let mut s = parked(SyncKind::Semaphore, &[(1, 5), (2, 1)]);
    s.resubscribed(Instant::now());
    assert_eq!(tries(&effects(&mut s)), vec![1, 2]);
    report(&mut s, 2, short(), now);
    effects(&mut s);
    // Waiter 1's attempt of 5 is under way; a release of 1 still wakes waiter 2, and waiter 1
    // tries again should its attempt fall short.
    s.unlocked(Some(1), Instant::now());
    assert_eq!(tries(&effects(&mut s)), vec![2]);
    report(&mut s, 1, short(), now);
    assert_eq!(tries(&effects(&mut s)), vec![1]);
}

#[test]
fn a_message_during_an_attempt_makes_a_short_attempt_try_again() {
    let now = Instant::now();
    let mut s = state(SyncKind::Semaphore);
    s.request(1, want(1), Wait::Forever, Instant::now());
    effects(&mut s);
    s.unlocked(Some(1), Instant::now());
    assert!(tries(&effects(&mut s)).is_empty());
    report(&mut s, 1, short(), now);
    assert_eq!(tries(&effects(&mut s)), vec![1]);
}

#[test]
fn a_latch_opens_every_waiter_on_zero_and_ignores_a_new_count() {
    let now = Instant::now();
    let mut s = state(SyncKind::CountDownLatch);
    for id in 1..=3 {
        s.request(id, want(0), Wait::Forever, Instant::now());
    }
    effects(&mut s);
    for id in 1..=3 {
        report(&mut s, id, short(), now);
    }
    s.subscribed(true, now);
    effects(&mut s);
    for id in 1..=3 {
        report(&mut s, id, short(), now);
    }
    effects(&mut s);
    s.unlocked(Some(1), Instant::now());
    assert!(tries(&effects(&mut s)).is_empty());
    s.unlocked(Some(0), Instant::now());
    assert_eq!(tries(&effects(&mut s)), vec![1, 2, 3]);
    for id in 1..=3 {
        report(&mut s, id, Tried::Done, now);
    }
    let e = effects(&mut s);
    assert_eq!(
        e.iter()
            .filter(|e| matches!(e, Effect::Answer(_, Answer::Done { .. })))
            .count(),
        3
    );
    assert!(matches!(
        e.as_slice(),
        [.., Effect::Unsubscribe(_), Effect::Idle]
    ));
    assert!(s.is_idle());
}

#[test]
fn at_the_deadline_one_more_attempt_decides() {
    let now = Instant::now();
    let mut s = state(SyncKind::CountDownLatch);
    s.request(1, want(0), Wait::Forever, Instant::now());
    effects(&mut s);
    report(&mut s, 1, short(), now);
    effects(&mut s);
    s.fired(Timer::Deadline(1), Instant::now());
    assert_eq!(tries(&effects(&mut s)), vec![1]);
    report(&mut s, 1, short(), now);
    let e = effects(&mut s);
    assert!(matches!(e[0], Effect::Answer(1, Answer::TimedOut)));
}

#[test]
fn a_lease_hint_arms_the_timer_for_that_waiter() {
    let now = Instant::now();
    let mut s = state(SyncKind::PermitSemaphore);
    s.request(1, want(1), Wait::Forever, Instant::now());
    s.request(2, want(1), Wait::Forever, Instant::now());
    effects(&mut s);
    report(
        &mut s,
        1,
        Tried::Short {
            free: 0,
            retry_in: Some(Duration::from_millis(300)),
        },
        now,
    );
    report(&mut s, 2, short(), now);
    effects(&mut s);
    assert_eq!(s.armed_in(&Timer::Retry), Some(Duration::from_millis(300)));
    s.subscribed(true, now);
    effects(&mut s);
    report(&mut s, 1, short(), now);
    report(&mut s, 2, short(), now);
    effects(&mut s);
    // The hint stays with waiter 1 until the timer fires, through the retries in between.
    s.fired(Timer::Retry, now + Duration::from_millis(300));
    assert_eq!(tries(&effects(&mut s)), vec![1]);
}

/// A permit held by a crashed client, its lease ending at T: waiter 1 falls short with the hint
/// T, and waiter 2 queues behind it with no attempt of its own (so no hint). Waiter 1 leaves
/// before T (its deadline's attempt times out, or its caller leaves). The expiry publishes
/// nothing, so the timer at T must wake waiter 2: nothing else would.
#[test]
fn a_waiter_queued_behind_one_with_a_lease_hint_is_woken_when_that_one_leaves() {
    let hint = |after| Tried::Short {
        free: 0,
        retry_in: Some(after),
    };
    for leaves in ["deadline", "caller gone"] {
        let now = Instant::now();
        let t = now + Duration::from_secs(5);
        let mut s = state(SyncKind::PermitSemaphore);
        s.request(1, want(1), Wait::Up(Duration::from_secs(1)), now);
        report(&mut s, 1, hint(Duration::from_secs(5)), now);
        s.subscribed(true, now);
        report(&mut s, 1, hint(Duration::from_secs(5)), now);
        effects(&mut s);
        s.request(2, want(1), Wait::Forever, now);
        assert!(tries(&effects(&mut s)).is_empty(), "{leaves}: it queues");
        let later = now + Duration::from_secs(1);
        if leaves == "deadline" {
            s.fired(Timer::Deadline(1), later);
            assert_eq!(tries(&effects(&mut s)), vec![1]);
            report(&mut s, 1, hint(Duration::from_secs(4)), later);
            let e = effects(&mut s);
            assert!(
                e.iter()
                    .any(|e| matches!(e, Effect::Answer(1, Answer::TimedOut))),
                "{e:?}"
            );
        } else {
            s.caller_gone(1, later);
            assert!(!s.has(1));
            effects(&mut s);
        }
        s.fired(Timer::Retry, t);
        assert_eq!(tries(&effects(&mut s)), vec![2], "{leaves}");
    }
}

#[test]
fn retryable_errors_back_off_and_others_answer() {
    let now = Instant::now();
    let mut s = state(SyncKind::Semaphore);
    s.request(1, want(1), Wait::Forever, Instant::now());
    s.request(2, want(1), Wait::Forever, Instant::now());
    effects(&mut s);
    let unsynced = LockError::ReplicaSync {
        acked: 0,
        wanted: 1,
    };
    report(&mut s, 1, Tried::Failed(unsynced), now);
    report(
        &mut s,
        2,
        Tried::Failed(LockError::WrongType { key: "x".into() }),
        now,
    );
    let e = effects(&mut s);
    assert!(s.timers.is_armed(&Timer::Retry), "{e:?}");
    assert!(e.iter().any(|e| matches!(
        e,
        Effect::Answer(2, Answer::Failed(LockError::WrongType { .. }))
    )));
    s.fired(Timer::Retry, now + ERROR_BACKOFF_MAX);
    assert_eq!(tries(&effects(&mut s)), vec![1]);
}

#[test]
fn a_caller_leaving_a_parked_waiter_drops_it_and_the_subscription() {
    let now = Instant::now();
    let mut s = state(SyncKind::Semaphore);
    s.request(1, want(1), Wait::Forever, Instant::now());
    effects(&mut s);
    report(&mut s, 1, short(), now);
    effects(&mut s);
    s.caller_gone(1, Instant::now());
    assert!(matches!(
        effects(&mut s).as_slice(),
        [Effect::Unsubscribe(_), Effect::Idle]
    ));
    assert!(s.is_idle());
}

#[test]
fn a_give_back_hands_permits_to_the_first_parked_waiter_that_fits_and_the_rest_to_redis() {
    let now = Instant::now();
    let mut s = state(SyncKind::Semaphore);
    let (epoch, _) = take(&mut s, 9, want(2), now);
    s.request(1, want(3), Wait::Forever, now);
    s.request(2, want(1), Wait::Forever, now);
    s.request(3, want(1), Wait::Forever, now);
    effects(&mut s);
    report(&mut s, 1, short(), now);
    report(&mut s, 2, short(), now);
    effects(&mut s);
    // Waiter 1 wants more than is given back; waiter 3's attempt is under way: it may get its
    // permits by itself.
    s.release(epoch, Some(7), now);
    let e = effects(&mut s);
    assert!(matches!(e[0], Effect::Ended(x) if x == epoch));
    assert!(matches!(
        e[1],
        Effect::Answer(
            2,
            Answer::Done {
                waited: true,
                grant: Some(Granted { permits: 1, .. })
            }
        )
    ));
    let seq = give_sent(&e, 1);
    s.ran(seq, Outcome::Reply(Ok(1)), now);
    assert!(matches!(
        effects(&mut s).as_slice(),
        [Effect::Done(7, Ok(0))]
    ));
}

#[test]
fn a_request_whose_reply_never_came_is_sent_again_as_it_was_until_its_horizon() {
    for kind in [SyncKind::Semaphore, SyncKind::PermitSemaphore] {
        let now = Instant::now();
        let mut s = state(kind);
        s.request(1, want(1), Wait::Forever, now);
        let Some(Effect::Run(first)) = effects(&mut s).into_iter().next() else {
            panic!("no attempt");
        };
        let lost = || {
            Outcome::Take(Err(LockError::Timeout {
                op: "acquire permits",
                after: Duration::from_millis(1),
            }))
        };
        s.ran(first.seq, lost(), now);
        let e = effects(&mut s);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(s.armed_in(&Timer::Resend(first.seq)), Some(backoff(0)));
        s.fired(Timer::Resend(first.seq), now + backoff(0));
        let e = effects(&mut s);
        assert!(
            matches!(e.as_slice(), [Effect::Run(t)] if t.seq == first.seq && t.lane == first.lane),
            "the same request, on the same latch: {e:?}"
        );
        let late = now + SETTINGS.watchdog_timeout / 3;
        s.ran(first.seq, lost(), late);
        let e = effects(&mut s);
        assert!(!s.is_under_way(first.seq));
        // Past its horizon the waiter, which may wait, tries again later as a new request (it
        // is not answered: a wait ends by its deadline or `unavailable_after`, as documented).
        assert!(
            !e.iter().any(|e| matches!(e, Effect::Answer(..))),
            "{kind:?}: {e:?}"
        );
        assert!(s.timers.is_armed(&Timer::Retry), "{kind:?}: {e:?}");
        s.fired(Timer::Retry, late + ERROR_BACKOFF_MAX);
        let e = effects(&mut s);
        let [Effect::Run(again)] = e.as_slice() else {
            panic!("{kind:?}: {e:?}");
        };
        assert!(again.seq != first.seq && again.lane == first.lane);
        if let (Op::Take { ids: before, .. }, Op::Take { ids: now_ids, .. }) =
            (&first.op, &again.op)
        {
            if kind == SyncKind::PermitSemaphore {
                // The lost take may hold its ids in Redis: a take with them again would take
                // its permits twice (the break: the waiter was answered `Unavailable` a third
                // of the watchdog timeout into an outage, whatever its wait).
                assert_ne!(before, now_ids, "new ids");
                assert_eq!(before.len(), now_ids.len());
            }
        } else {
            panic!("{kind:?}: takes expected");
        }
    }
}

#[test]
fn permits_with_a_lease_are_lost_when_it_ends_and_their_give_back_says_not_held() {
    let now = Instant::now();
    let mut s = state(SyncKind::PermitSemaphore);
    let lease = Duration::from_millis(500);
    let leased = Want {
        lease: Some(lease),
        ..want(2)
    };
    let (epoch, e) = take(&mut s, 1, leased, now);
    assert_eq!(s.armed_in(&Timer::Expiry(epoch)), Some(lease));
    assert!(
        !e.iter().any(|e| matches!(e, Effect::Track { .. })),
        "a lease is not renewed"
    );
    s.fired(Timer::Expiry(epoch), now + lease);
    assert!(matches!(effects(&mut s).as_slice(), [Effect::Lost(x, Loss::Lease)] if *x == epoch));
    s.release(epoch, Some(4), now + lease);
    let e = effects(&mut s);
    let seq = give_sent(&e, 2);
    // Redis had them still (its copy of the lease began a little later): given back, and yet
    // the guard knew them lost.
    s.ran(seq, Outcome::Reply(Ok(2)), now + lease);
    let e = effects(&mut s);
    assert!(
        matches!(
            e.as_slice(),
            [
                Effect::Done(4, Err(LockError::NotHeld { .. })),
                Effect::Idle
            ]
        ),
        "{e:?}"
    );
}

#[test]
fn permits_taken_without_a_lease_are_renewed_until_given_back() {
    let now = Instant::now();
    let mut s = state(SyncKind::PermitSemaphore);
    let (epoch, e) = take(&mut s, 1, want(1), now);
    assert!(
        e.iter()
            .any(|e| matches!(e, Effect::Track { epoch: x, .. } if *x == epoch))
    );
    s.release(epoch, None, now);
    let e = effects(&mut s);
    assert!(
        e.iter()
            .any(|e| matches!(e, Effect::Untrack { epoch: x, .. } if *x == epoch))
    );
}

/// The Watchdog counts a grant's PTTL from when the take was sent, not from when its reply came
/// (as a lock's renewal counts from its acquire's send time): a slow reply must not stretch
/// how long the permits are believed held.
#[test]
fn a_grant_tells_the_watchdog_when_its_take_was_sent() {
    let sent = Instant::now();
    let replied = sent + Duration::from_secs(2);
    let mut s = state(SyncKind::PermitSemaphore);
    s.request(1, want(1), Wait::Forever, sent);
    report(&mut s, 1, Tried::Done, replied);
    let e = effects(&mut s);
    assert!(
        e.iter()
            .any(|e| matches!(e, Effect::Track { confirmed, .. } if *confirmed == sent)),
        "{e:?}"
    );
}

/// A stop without release drops the holds: their guards learn them lost at once, while a round
/// trip still under way holds back the end of the stop.
#[test]
fn a_stop_without_release_tells_the_guards_at_once() {
    let now = Instant::now();
    let mut s = state(SyncKind::PermitSemaphore);
    let (epoch, _) = take(&mut s, 1, want(1), now);
    s.adjust(Op::Adjust(Adjustment::AddPermits(1)), None, now);
    effects(&mut s);
    s.stop(false, now);
    let e = effects(&mut s);
    assert!(
        e.iter()
            .any(|e| matches!(e, Effect::Lost(x, Loss::Shutdown) if *x == epoch)),
        "{e:?}"
    );
    assert!(!e.iter().any(|e| matches!(e, Effect::Stopped)), "{e:?}");
}

/// A round trip's lane is free again once it is over, whatever its outcome: even an outcome
/// that does not fit its request (a take's, for a latch's read) must not keep it.
#[test]
fn a_lane_is_freed_whatever_the_outcome() {
    let now = Instant::now();
    let mut s = state(SyncKind::CountDownLatch);
    s.request(1, want(0), Wait::Forever, now);
    let Some(Effect::Run(read)) = effects(&mut s).into_iter().next() else {
        panic!("no read");
    };
    s.stop(true, now);
    s.ran(read.seq, Outcome::Take(Ok(Take::Taken)), now);
    assert_eq!(s.trips.free_lanes(), &[read.lane]);
}

/// Permits refused by replica sync whose give-back failed are still held in Redis under the
/// waiter's ids: it is answered, not sent to take them again (which would take them twice).
#[test]
fn a_permit_waiter_whose_refused_permits_were_not_given_back_is_answered() {
    let now = Instant::now();
    let mut s = state(SyncKind::PermitSemaphore);
    s.request(1, want(1), Wait::Forever, now);
    let Some(Effect::Run(take)) = effects(&mut s).into_iter().next() else {
        panic!("no attempt");
    };
    let unsynced = Take::Unsynced {
        acked: 0,
        wanted: 1,
    };
    s.ran(take.seq, Outcome::Take(Ok(unsynced)), now);
    let seq = give_sent(&effects(&mut s), 1);
    s.ran(seq, Outcome::Reply(Err(LockError::Shutdown)), now);
    let e = effects(&mut s);
    assert!(
        matches!(
            e.as_slice(),
            [
                Effect::Answer(1, Answer::Failed(LockError::Unavailable { cause, .. })),
                ..
            ] if matches!(**cause, LockError::ReplicaSync { .. })
        ),
        "a wait that ends on too few replicas is Redis away: {e:?}"
    );
}

#[test]
fn after_max_hand_offs_in_a_row_a_give_back_goes_through_redis() {
    let now = Instant::now();
    let mut s = state(SyncKind::Semaphore);
    let (mut epoch, _) = take(&mut s, 1, want(1), now);
    for n in 2..=u64::from(MAX_HAND_OFF_STREAK) + 2 {
        s.request(n, want(1), Wait::Forever, now);
        report(&mut s, n, short(), now);
        effects(&mut s);
        s.release(epoch, None, now);
        let e = effects(&mut s);
        if n <= u64::from(MAX_HAND_OFF_STREAK) + 1 {
            epoch = granted(&e, n);
            assert!(!e.iter().any(|e| matches!(e, Effect::Run(_))), "{e:?}");
        } else {
            assert!(
                matches!(
                    e.last(),
                    Some(Effect::Run(Trip {
                        op: Op::Give { .. },
                        ..
                    }))
                ),
                "{e:?}"
            );
        }
    }
}

#[test]
fn a_stop_fails_waiters_gives_back_every_hold_and_ends_once_they_are_back() {
    let now = Instant::now();
    let mut s = state(SyncKind::Semaphore);
    take(&mut s, 1, want(1), now);
    s.request(2, want(5), Wait::Forever, now);
    report(&mut s, 2, short(), now);
    effects(&mut s);
    s.stop(true, now);
    let e = effects(&mut s);
    assert!(
        e.iter()
            .any(|e| matches!(e, Effect::Answer(2, Answer::Failed(LockError::Shutdown))))
    );
    assert!(!e.iter().any(|e| matches!(e, Effect::Stopped)));
    let seq = give_sent(&e, 1);
    assert!(s.is_stopping());
    s.ran(seq, Outcome::Reply(Ok(1)), now);
    assert!(effects(&mut s).iter().any(|e| matches!(e, Effect::Stopped)));
}

#[test]
fn a_waiter_does_not_queue_behind_one_waiting_out_an_error_backoff() {
    // Waiter 1 fell short and waits for a message; then its retry failed and it waits out a
    // backoff, after which it may take its permits with no message for anyone. A waiter
    // arriving then tries at once: queued behind waiter 1, nothing would wake it.
    let now = Instant::now();
    let mut s = state(SyncKind::Semaphore);
    s.request(1, want(1), Wait::Forever, now);
    report(&mut s, 1, short(), now);
    s.subscribed(true, now);
    let unsynced = LockError::ReplicaSync {
        acked: 0,
        wanted: 1,
    };
    report(&mut s, 1, Tried::Failed(unsynced), now);
    effects(&mut s);
    s.request(2, want(3), Wait::Forever, now);
    assert_eq!(tries(&effects(&mut s)), vec![2]);
    // Behind a waiter that fell short, it queues.
    report(&mut s, 2, short(), now);
    s.request(3, want(3), Wait::Forever, now);
    assert!(tries(&effects(&mut s)).is_empty());
}

#[test]
fn a_stop_gives_back_what_an_attempt_already_sent_takes_and_ends_after_it() {
    let now = Instant::now();
    let mut s = state(SyncKind::Semaphore);
    s.request(1, want(2), Wait::Forever, now);
    let Some(Effect::Run(take)) = effects(&mut s).into_iter().next() else {
        panic!("no attempt");
    };
    s.stop(true, now);
    let e = effects(&mut s);
    assert!(matches!(
        e[0],
        Effect::Answer(1, Answer::Failed(LockError::Shutdown))
    ));
    assert!(!e.iter().any(|e| matches!(e, Effect::Stopped)), "{e:?}");
    s.ran(take.seq, Outcome::Take(Ok(Take::Taken)), now);
    let e = effects(&mut s);
    assert_eq!(
        e.len(),
        1,
        "the permits taken are given back, and only that: {e:?}"
    );
    let seq = give_sent(&e, 2);
    s.ran(seq, Outcome::Reply(Ok(2)), now);
    assert!(matches!(effects(&mut s).as_slice(), [Effect::Stopped, ..]));
}

/// Waiter `id` takes what it wants at once: the epoch of its grant, and the effects.
fn take(s: &mut SyncState, id: WaiterId, want: Want, now: Instant) -> (u64, Vec<Effect>) {
    s.request(id, want, Wait::Forever, now);
    report(s, id, Tried::Done, now);
    let e = effects(s);
    (granted(&e, id), e)
}

/// The number of the give-back of `permits` that ends `effects`.
fn give_sent(effects: &[Effect], permits: u32) -> u64 {
    match effects.last() {
        Some(Effect::Run(Trip {
            seq,
            op: Op::Give { permits: p, .. },
            ..
        })) if *p == permits => *seq,
        _ => panic!("no give-back of {permits}: {effects:?}"),
    }
}

/// The epoch of the permits granted to waiter `id` among `effects`.
fn granted(effects: &[Effect], id: WaiterId) -> u64 {
    effects
        .iter()
        .find_map(|e| match e {
            Effect::Answer(w, Answer::Done { grant: Some(g), .. }) if *w == id => Some(g.epoch),
            _ => None,
        })
        .expect("a grant")
}

/// One process of the simulation: its state, its attempts under way, what it has heard.
#[derive(Default)]
struct Process {
    state: Option<SyncState>,
    trying: Vec<WaiterId>,
    /// Subscribe asked, not yet in place.
    subscribing: bool,
    listening: bool,
    inbox: VecDeque<i64>,
    wants: HashMap<WaiterId, u32>,
    answered: HashSet<WaiterId>,
    /// The waiter answered last.
    last_answer: Option<WaiterId>,
}

impl Process {
    fn state(&mut self, kind: SyncKind) -> &mut SyncState {
        self.state.get_or_insert_with(|| state(kind))
    }

    /// Applies effects; returns the Trys a message caused, for the wake bound.
    fn apply(&mut self) -> Result<usize, TestCaseError> {
        let mut out = Vec::new();
        if let Some(state) = &mut self.state {
            state.drain_into(&mut out);
        }
        let mut woken = 0;
        for e in out {
            match e {
                e if attempt(&e).is_some() => {
                    let id = attempt(&e).unwrap_or_default();
                    prop_assert!(!self.trying.contains(&id), "two attempts of one waiter");
                    prop_assert!(!self.answered.contains(&id));
                    self.trying.push(id);
                    woken += 1;
                }
                Effect::Answer(id, answer) => {
                    prop_assert!(self.answered.insert(id), "answered twice");
                    self.last_answer = Some(id);
                    prop_assert!(matches!(answer, Answer::Done { .. }), "{answer:?}");
                }
                Effect::Subscribe(_) => {
                    prop_assert!(!self.subscribing && !self.listening, "subscribed twice");
                    self.subscribing = true;
                }
                Effect::Unsubscribe(_) => {
                    self.subscribing = false;
                    self.listening = false;
                }
                _ => {}
            }
        }
        Ok(woken)
    }
}

#[derive(Debug, Clone)]
enum Step {
    Arrive(usize, u32),
    RunAttempt(usize, usize),
    CompleteSubscribe(usize),
    Deliver(usize),
    Release(usize),
    /// `add_permits(d)`.
    Add(u32),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => (0..2usize, 1..3u32).prop_map(|(p, n)| Step::Arrive(p, n)),
        4 => (0..2usize, 0..8usize).prop_map(|(p, i)| Step::RunAttempt(p, i)),
        2 => (0..2usize).prop_map(Step::CompleteSubscribe),
        4 => (0..2usize).prop_map(Step::Deliver),
        2 => (0..16usize).prop_map(Step::Release),
        1 => (1..3u32).prop_map(Step::Add),
    ]
}

/// The model of Redis: the free count, the holders, and publishing to listening processes.
struct World {
    kind: SyncKind,
    permits: i64,
    free: i64,
    holders: Vec<(usize, WaiterId, u32)>,
    procs: [Process; 2],
    next_id: WaiterId,
}

impl World {
    fn run_attempt(&mut self, p: usize, i: usize) -> Result<(), TestCaseError> {
        let proc = &mut self.procs[p];
        if proc.trying.is_empty() {
            return Ok(());
        }
        let id = proc.trying.remove(i % proc.trying.len());
        let wants = proc.wants[&id];
        let tried = if self.free >= i64::from(wants) {
            self.free -= i64::from(wants);
            self.holders.push((p, id, wants));
            Tried::Done
        } else {
            Tried::Short {
                free: self.free,
                retry_in: None,
            }
        };
        let held: i64 = self.holders.iter().map(|h| i64::from(h.2)).sum();
        prop_assert!(
            held <= self.permits,
            "{held} permits held of {}",
            self.permits
        );
        report(proc.state(self.kind), id, tried, Instant::now());
        proc.apply()?;
        Ok(())
    }

    /// A holder gives its permits back. On an even `i`: a semaphore's process first tries to
    /// hand them to one of its own waiters (Redis's count unchanged), as the actor does; a
    /// permit semaphore's release is Java's release of several ids, which publishes how many
    /// it released. Otherwise the new free count is published.
    fn release(&mut self, i: usize) -> Result<(), TestCaseError> {
        if self.holders.is_empty() {
            return Ok(());
        }
        let (p, _, mut wants) = self.holders.remove(i % self.holders.len());
        let even = i.is_multiple_of(2);
        if even && self.kind == SyncKind::Semaphore {
            let proc = &mut self.procs[p];
            if let Some(got) = proc.state(self.kind).hand_off(wants) {
                proc.apply()?;
                let to = proc.last_answer.unwrap_or_default();
                prop_assert!(got <= wants);
                prop_assert!(!proc.trying.contains(&to), "handed to a waiter mid-attempt");
                self.holders.push((p, to, got));
                wants -= got;
                if wants == 0 {
                    return Ok(());
                }
            }
        }
        self.free += i64::from(wants);
        let released = even && self.kind == SyncKind::PermitSemaphore;
        self.publish(if released {
            i64::from(wants)
        } else {
            self.free
        });
        Ok(())
    }

    /// `add_permits(d)`: a semaphore publishes the new free count, a permit semaphore `d`.
    fn add(&mut self, d: u32) {
        if self.permits >= 8 {
            return;
        }
        self.permits += i64::from(d);
        self.free += i64::from(d);
        self.publish(if self.kind == SyncKind::PermitSemaphore {
            i64::from(d)
        } else {
            self.free
        });
    }

    fn publish(&mut self, m: i64) {
        for proc in &mut self.procs {
            if proc.listening {
                proc.inbox.push_back(m);
            }
        }
    }

    fn deliver(&mut self, p: usize) -> Result<(), TestCaseError> {
        let proc = &mut self.procs[p];
        let Some(m) = proc.inbox.pop_front() else {
            return Ok(());
        };
        let before = proc.trying.len();
        proc.state(self.kind).unlocked(Some(m), Instant::now());
        let woken = proc.apply()?;
        prop_assert!(
            woken as i64 <= m.max(0),
            "{woken} woken by a message of {m}"
        );
        prop_assert!(proc.trying.len() == before + woken);
        Ok(())
    }

    fn step(&mut self, step: Step) -> Result<(), TestCaseError> {
        match step {
            Step::Arrive(p, n) => {
                // More than the semaphore has would wait forever, rightly.
                let n = n.min(u32::try_from(self.permits).unwrap_or(1));
                self.next_id += 1;
                let id = self.next_id;
                let proc = &mut self.procs[p];
                proc.wants.insert(id, n);
                proc.state(self.kind)
                    .request(id, want(n), Wait::Forever, Instant::now());
                proc.apply()?;
            }
            Step::RunAttempt(p, i) => self.run_attempt(p, i)?,
            Step::CompleteSubscribe(p) => {
                let proc = &mut self.procs[p];
                if proc.subscribing {
                    proc.subscribing = false;
                    proc.listening = true;
                    proc.state(self.kind).subscribed(true, Instant::now());
                    proc.apply()?;
                }
            }
            Step::Deliver(p) => self.deliver(p)?,
            Step::Release(i) => self.release(i)?,
            Step::Add(d) => self.add(d),
        }
        Ok(())
    }

    /// With nothing under way (no attempt, subscription or message), no parked waiter wants no
    /// more than is free: it would wait for a message that is not coming.
    fn nobody_fits_what_is_free(&mut self) -> Result<(), TestCaseError> {
        for proc in &mut self.procs {
            let stranded: Vec<_> = proc
                .state(self.kind)
                .parked()
                .filter(|&(_, wants)| i64::from(wants) <= self.free)
                .collect();
            prop_assert!(
                stranded.is_empty(),
                "{stranded:?} parked with {} free and nothing coming",
                self.free
            );
        }
        Ok(())
    }

    /// Lets everything settle: attempts run, subscriptions complete, messages arrive, holders
    /// release; every waiter must then have its permits.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..100_000 {
            let busy = (0..2).find(|&p| {
                let proc = &self.procs[p];
                !proc.trying.is_empty() || proc.subscribing || !proc.inbox.is_empty()
            });
            match busy {
                Some(p) if !self.procs[p].trying.is_empty() => self.run_attempt(p, 0)?,
                Some(p) if self.procs[p].subscribing => self.step(Step::CompleteSubscribe(p))?,
                Some(p) => self.deliver(p)?,
                None => {
                    self.nobody_fits_what_is_free()?;
                    if self.holders.is_empty() {
                        break;
                    }
                    self.release(0)?;
                }
            }
        }
        for proc in &mut self.procs {
            let waiting = proc.state(self.kind).waiting();
            prop_assert_eq!(waiting, 0, "waiters left waiting with every permit free");
            prop_assert_eq!(proc.answered.len(), proc.wants.len());
        }
        prop_assert_eq!(self.free, self.permits);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn two_processes_share_a_semaphore_without_excess_herds_or_lost_wakeups(
        permit in any::<bool>(),
        permits in 1..4i64,
        steps in prop::collection::vec(step(), 1..120),
    ) {
        let kind = if permit { SyncKind::PermitSemaphore } else { SyncKind::Semaphore };
        let mut world = World {
            kind,
            permits,
            free: permits,
            holders: Vec::new(),
            procs: [Process::default(), Process::default()],
            next_id: 0,
        };
        for s in steps {
            world.step(s)?;
        }
        world.drain()?;
    }
}

/// The error of a request whose reply never came.
fn lost(kind: SyncKind) -> Outcome {
    let error = LockError::Timeout {
        op: "synchronizer",
        after: Duration::from_millis(300),
    };
    if kind == SyncKind::CountDownLatch {
        Outcome::Reply(Err(error))
    } else {
        Outcome::Take(Err(error))
    }
}

/// The first round trip among `effects`.
fn first_run(effects: Vec<Effect>) -> Trip {
    effects
        .into_iter()
        .find_map(|e| match e {
            Effect::Run(trip) => Some(trip),
            _ => None,
        })
        .expect("a round trip")
}

/// A bounded wait whose attempt's reply is missing (being sent again) ends at its deadline, not
/// when the request is resolved (up to a third of the watchdog timeout later). The request goes
/// on, as it was; when it turns out to have taken permits, they are given back, once, on its lane.
#[test]
fn a_waiter_whose_reply_is_missing_is_answered_at_its_deadline_and_what_it_took_goes_back() {
    let wait = Duration::from_millis(400);
    for kind in [
        SyncKind::Semaphore,
        SyncKind::PermitSemaphore,
        SyncKind::CountDownLatch,
    ] {
        let now = Instant::now();
        let mut s = state(kind);
        s.request(1, want(1), Wait::Up(wait), now);
        let first = first_run(effects(&mut s));
        s.ran(first.seq, lost(kind), now + Duration::from_millis(300));
        let e = effects(&mut s);
        assert!(
            e.is_empty() && s.timers.is_armed(&Timer::Resend(first.seq)),
            "{kind:?}: before its deadline the waiter waits for the request sent again: {e:?}"
        );
        s.fired(Timer::Deadline(1), now + wait);
        let e = effects(&mut s);
        assert!(
            matches!(e.as_slice(), [Effect::Answer(1, Answer::Failed(LockError::Unavailable { cause, .. })), ..]
                if matches!(**cause, LockError::Timeout { .. })),
            "{kind:?}: answered at its deadline, Redis away: {e:?}"
        );
        assert!(!s.has(1));
        assert!(
            !e.iter().any(|e| matches!(e, Effect::Run(_) | Effect::Idle)),
            "{kind:?}: no new attempt, and the request still under way: {e:?}"
        );
        assert!(s.is_under_way(first.seq));
        // The request goes on as it was, on its latch.
        let later = now + wait + backoff(0);
        s.fired(Timer::Resend(first.seq), later);
        let e = effects(&mut s);
        assert!(
            matches!(e.as_slice(), [Effect::Run(t)] if t.seq == first.seq && t.lane == first.lane),
            "{kind:?}: {e:?}"
        );
        if kind == SyncKind::CountDownLatch {
            s.ran(first.seq, Outcome::Reply(Ok(1)), later);
            let e = effects(&mut s);
            assert!(matches!(e.as_slice(), [Effect::Idle]), "{kind:?}: {e:?}");
            continue;
        }
        // It had run: what it took goes back, once, as the next request of its lane.
        s.ran(first.seq, Outcome::Take(Ok(Take::Taken)), later);
        let e = effects(&mut s);
        assert!(
            !e.iter().any(|e| matches!(e, Effect::Answer(..))),
            "{kind:?}: {e:?}"
        );
        let give = give_sent(&e, 1);
        assert!(matches!(&e[..], [Effect::Run(t)] if t.lane == first.lane));
        s.ran(give, Outcome::Reply(Ok(1)), later);
        let e = effects(&mut s);
        assert!(matches!(e.as_slice(), [Effect::Idle]), "{kind:?}: {e:?}");
        assert!(s.trips.is_empty() && s.holds.is_empty());
    }
}

/// A reply found missing after the waiter's deadline answers it at once; a single attempt's
/// (no wait) answers it with the error, as a lock's single attempt is. Either way the request
/// goes on being sent, and what it took goes back.
#[test]
fn a_reply_found_missing_past_the_deadline_or_for_a_single_attempt_answers_at_once() {
    for (wait, answer) in [
        (Wait::No, "failed"),
        (Wait::Up(Duration::from_millis(400)), "unavailable"),
    ] {
        let now = Instant::now();
        let mut s = state(SyncKind::Semaphore);
        s.request(1, want(1), wait, now);
        let first = first_run(effects(&mut s));
        let late = now + Duration::from_millis(500);
        if let Wait::Up(d) = wait {
            s.fired(Timer::Deadline(1), now + d);
            let e = effects(&mut s);
            assert!(
                matches!(e.as_slice(), [Effect::Arm(1, g)] if *g == LAST_TRY_GRACE),
                "its attempt under way gets a grace for its outcome: {e:?}"
            );
        }
        s.ran(first.seq, lost(SyncKind::Semaphore), late);
        let e = effects(&mut s);
        let answered = match &e[..] {
            [Effect::Answer(1, a)] if s.timers.is_armed(&Timer::Resend(first.seq)) => a,
            _ => panic!("{answer}: not answered at once: {e:?}"),
        };
        match answer {
            // A single attempt gets the error itself.
            "failed" => assert!(
                matches!(answered, Answer::Failed(LockError::Timeout { .. })),
                "{answered:?}"
            ),
            // A wait whose last reply never came: Redis is away.
            _ => assert!(
                matches!(answered, Answer::Failed(LockError::Unavailable { cause, .. })
                    if matches!(**cause, LockError::Timeout { .. })),
                "{answered:?}"
            ),
        }
        s.fired(Timer::Resend(first.seq), late + backoff(0));
        effects(&mut s);
        s.ran(first.seq, Outcome::Take(Ok(Take::Taken)), late + backoff(0));
        let give = give_sent(&effects(&mut s), 1);
        s.ran(give, Outcome::Reply(Ok(1)), late + backoff(0));
        assert!(matches!(effects(&mut s).as_slice(), [Effect::Idle]));
    }
}

/// An attempt under way at the deadline (Redis slow or paused, no reply yet) gets
/// `LAST_TRY_GRACE` for its outcome: an outcome within it answers the waiter (a healthy
/// Redis's last attempt still decides); past it the waiter is answered `Unavailable` (Redis did
/// not answer its last attempt), and what its attempt finds when it comes back is passed on to
/// the waiters still parked.
#[test]
fn an_attempt_under_way_at_the_deadline_gets_a_grace_then_the_waiter_is_told_redis_is_away() {
    let now = Instant::now();
    let wait = Duration::from_millis(400);
    // In time: a parked waiter's last attempt succeeds within the grace.
    let mut s = state(SyncKind::Semaphore);
    s.request(1, want(1), Wait::Up(wait), now);
    effects(&mut s);
    report(&mut s, 1, short(), now);
    effects(&mut s);
    s.fired(Timer::Deadline(1), now + wait);
    let e = effects(&mut s);
    assert_eq!(tries(&e), vec![1]);
    assert!(
        e.iter()
            .any(|e| matches!(e, Effect::Arm(1, g) if *g == LAST_TRY_GRACE))
    );
    report(
        &mut s,
        1,
        Tried::Done,
        now + wait + Duration::from_millis(5),
    );
    let e = effects(&mut s);
    assert!(
        matches!(
            e.as_slice(),
            [Effect::Answer(1, Answer::Done { grant: Some(_), .. }), ..]
        ),
        "{e:?}"
    );
    s.fired(Timer::Deadline(1), now + wait + LAST_TRY_GRACE);
    assert!(
        !effects(&mut s)
            .iter()
            .any(|e| matches!(e, Effect::Answer(..))),
        "answered once"
    );

    // Too late: waiter 2 (wanting 2) is parked; waiter 1's attempt gets no reply in time.
    let mut s = state(SyncKind::Semaphore);
    s.request(2, want(2), Wait::Forever, now);
    effects(&mut s);
    report(&mut s, 2, short(), now);
    s.subscribed(true, now);
    effects(&mut s);
    report(&mut s, 2, short(), now);
    s.request(1, want(1), Wait::Up(wait), now);
    let first = first_run(effects(&mut s));
    s.fired(Timer::Deadline(1), now + wait);
    effects(&mut s);
    s.fired(Timer::Deadline(1), now + wait + LAST_TRY_GRACE);
    let e = effects(&mut s);
    assert!(
        matches!(
            e.as_slice(),
            [Effect::Answer(
                1,
                Answer::Failed(LockError::Unavailable { .. })
            )]
        ),
        "answered when its grace ends, Redis away (no reply): {e:?}"
    );
    assert!(s.is_under_way(first.seq));
    // Its attempt comes back short with 2 free: waiter 2 fits, and tries.
    let later = now + Duration::from_secs(5);
    let found = Take::Short {
        free: 2,
        retry_in: None,
    };
    s.ran(first.seq, Outcome::Take(Ok(found)), later);
    assert_eq!(tries(&effects(&mut s)), vec![2]);
    assert!(s.has(2));
}

/// Permits taken without the replicas' acknowledgement are given back before their waiter is
/// answered; when that give-back's reply is missing at the waiter's deadline, the waiter is
/// answered then with the replica-sync error, while the give-back goes on being sent.
#[test]
fn a_waiter_whose_unsynced_permits_give_back_is_missing_is_answered_at_its_deadline() {
    let now = Instant::now();
    let wait = Duration::from_millis(400);
    let mut s = state(SyncKind::PermitSemaphore);
    s.request(1, want(1), Wait::Up(wait), now);
    let take = first_run(effects(&mut s));
    let unsynced = Take::Unsynced {
        acked: 0,
        wanted: 1,
    };
    s.ran(take.seq, Outcome::Take(Ok(unsynced)), now);
    let give = give_sent(&effects(&mut s), 1);
    s.ran(
        give,
        Outcome::Reply(Err(LockError::Timeout {
            op: "give back",
            after: Duration::from_millis(300),
        })),
        now + Duration::from_millis(300),
    );
    effects(&mut s);
    s.fired(Timer::Deadline(1), now + wait);
    let e = effects(&mut s);
    assert!(
        matches!(
            e.as_slice(),
            [Effect::Answer(
                1,
                Answer::Failed(LockError::ReplicaSync { .. })
            )]
        ),
        "{e:?}"
    );
    assert!(s.is_under_way(give));
    s.fired(Timer::Resend(give), now + wait);
    effects(&mut s);
    s.ran(give, Outcome::Reply(Ok(1)), now + wait);
    assert!(matches!(effects(&mut s).as_slice(), [Effect::Idle]));
}

/// A wait whose last attempt got no answer from Redis ends `Unavailable`; one whose last
/// attempt was answered short ends `TimedOut` (outage.rs).
#[test]
fn the_last_attempt_s_answer_tells_redis_away_from_too_few_permits() {
    let now = Instant::now();
    let wait = Duration::from_millis(400);
    let refused = || LockError::connection_refused("acquire permits");
    for (last, away) in [(Tried::Failed(refused()), true), (short(), false)] {
        let mut s = state(SyncKind::Semaphore);
        s.request(1, want(1), Wait::Up(wait), now);
        effects(&mut s);
        report(&mut s, 1, short(), now);
        effects(&mut s);
        // At its deadline it tries once more, and that attempt's outcome answers it.
        s.fired(Timer::Deadline(1), now + wait);
        effects(&mut s);
        report(&mut s, 1, last, now + wait);
        let e = effects(&mut s);
        let answer = e.iter().find_map(|e| match e {
            Effect::Answer(1, a) => Some(a),
            _ => None,
        });
        if away {
            assert!(
                matches!(answer, Some(Answer::Failed(LockError::Unavailable { .. }))),
                "{e:?}"
            );
        } else {
            assert!(matches!(answer, Some(Answer::TimedOut)), "{e:?}");
        }
    }
}

/// A wait without a deadline fails once Redis has been away for the bound, and an answer in
/// between starts the bound over.
#[test]
fn no_synchronizer_wait_outlasts_an_outage_by_more_than_the_bound() {
    let now = Instant::now();
    let bound = SETTINGS.unavailable_after;
    let mut s = state(SyncKind::PermitSemaphore);
    s.request(1, want(1), Wait::Forever, now);
    let first = first_run(effects(&mut s));
    s.ran(first.seq, lost(SyncKind::PermitSemaphore), now);
    let e = effects(&mut s);
    assert_eq!(s.armed_in(&Timer::Unavailable), Some(bound), "{e:?}");
    s.fired(Timer::Unavailable, now + bound);
    let e = effects(&mut s);
    assert!(
        matches!(
            e.as_slice(),
            [
                Effect::Answer(1, Answer::Failed(LockError::Unavailable { .. })),
                ..
            ]
        ),
        "{e:?}"
    );

    // An answer (a short take) ends the outage: the bound's timer goes, and firing finds none.
    let mut s = state(SyncKind::Semaphore);
    s.request(1, want(1), Wait::Forever, now);
    let first = first_run(effects(&mut s));
    s.ran(first.seq, lost(SyncKind::Semaphore), now);
    effects(&mut s);
    s.fired(Timer::Resend(first.seq), now + backoff(0));
    effects(&mut s);
    let found = Take::Short {
        free: 0,
        retry_in: None,
    };
    s.ran(first.seq, Outcome::Take(Ok(found)), now + backoff(0));
    let e = effects(&mut s);
    assert!(!s.timers.is_armed(&Timer::Unavailable), "{e:?}");
    s.fired(Timer::Unavailable, now + bound);
    assert!(
        !effects(&mut s)
            .iter()
            .any(|e| matches!(e, Effect::Answer(..))),
        "still waiting"
    );
}

/// The pub/sub connection lost: every parked waiter tries at once.
#[test]
fn a_lost_pubsub_connection_makes_parked_waiters_try() {
    let now = Instant::now();
    let mut s = state(SyncKind::Semaphore);
    s.request(1, want(1), Wait::Forever, now);
    effects(&mut s);
    report(&mut s, 1, short(), now);
    effects(&mut s);
    s.connection_lost(LockError::pubsub_lost("the connection was lost"), now);
    assert_eq!(tries(&effects(&mut s)), vec![1]);
}
