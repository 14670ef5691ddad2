//! The fair lock's places in the Redis queue, against the model: none left behind with no local
//! waiter to use or leave it, one wait per holder, and every local waiter able to take the
//! head's turn.

use super::model::Redis;
use super::*;
use crate::protocol::{Expect, FairArgs};

fn fair_req(holder: &str, wait: Wait) -> Request {
    Request {
        kind: LockKind::Fair,
        ..req(holder, wait)
    }
}

fn only_run(fx: &[Effect]) -> Op {
    match runs(fx)[..] {
        [op] => op.clone(),
        _ => panic!("one round trip expected: {fx:?}"),
    }
}

/// A fair acquire of another process's holder (Redisson's rule: the PTTL counts in full).
fn elsewhere(holder: &str, ttl: Duration, wait: Duration) -> Op {
    Op::Acquire {
        kind: LockKind::Fair,
        holder: holder.into(),
        ttl,
        fair: FairArgs {
            wait,
            once: false,
            cap: Duration::MAX,
        },
        expect: Expect::count(0),
        seq: 0,
    }
}

/// A fair state, and the model where someone else ("x", another process) holds the lock for
/// 30 s.
fn held_by_x(t0: Instant) -> (LockState, Redis) {
    let mut redis = Redis::new(false);
    let op = elsewhere("x", Duration::from_secs(30), Duration::from_secs(300));
    assert!(matches!(
        redis.run(&op, t0),
        Outcome::Acquire(Ok(Attempt::Acquired { .. }))
    ));
    (state(LockKind::Fair), redis)
}

/// As `held_by_x`, with a waiter of holder "a" (waiting `wait`) queued behind x.
fn a_queued(t0: Instant, wait: Wait) -> (LockState, Redis, WaiterId) {
    let (mut s, mut redis) = held_by_x(t0);
    let id = s.request(fair_req("a", wait), t0);
    run_all(&mut s, &mut redis, t0);
    assert!(redis.queued("a"));
    (s, redis, id)
}

/// Waiter `id`'s wait runs out at `now` with nothing heard lately: its last try (one attempt
/// that never queues) is answered by the model, and the effects after it (the waiter's answer,
/// then its leave of the queue, when it was its holder's last) are returned.
fn last_try(s: &mut LockState, redis: &mut Redis, id: WaiterId, now: Instant) -> Vec<Effect> {
    s.fired(Timer::Deadline(id), now);
    let op = only_run(&s.drain());
    assert!(
        matches!(&op, Op::Acquire { fair, .. } if fair.once),
        "{op:?}"
    );
    let out = redis.run(&op, now);
    s.ran(out, now);
    s.drain()
}

/// Runs the round trips the state asks for, one after the other, until none is asked; returns
/// every effect on the way.
fn run_all(s: &mut LockState, redis: &mut Redis, now: Instant) -> Vec<Effect> {
    let mut all = Vec::new();
    for _ in 0..8 {
        let fx = s.drain();
        let op = match runs(&fx)[..] {
            [op] => Some(op.clone()),
            _ => None,
        };
        all.extend(fx);
        let Some(op) = op else {
            break;
        };
        let out = redis.run(&op, now);
        s.ran(out, now);
    }
    all
}

/// Leak 1: a fair attempt whose reply never came (it ran: the holder is queued) is sent again
/// after its waiter gave up and left the queue. The resend queues the holder anew; its busy
/// reply finds no waiter of the holder, and leaves again.
#[test]
fn a_resend_after_the_leave_leaves_again() {
    let t0 = Instant::now();
    let (mut s, mut redis) = held_by_x(t0);
    let id = s.request(fair_req("a", Wait::Up(SECOND)), t0);
    let op = only_run(&s.drain());
    let seq = op.seq().unwrap();
    let _ = redis.run(&op, t0);
    assert!(redis.queued("a"));
    s.ran(
        Outcome::Acquire(Err(timeout())),
        t0 + Duration::from_millis(500),
    );
    let fx = s.drain();
    assert!(runs(&fx).is_empty(), "{fx:?}");
    // The wait runs out before the resend: the waiter leaves the queue.
    let t1 = t0 + SECOND;
    s.fired(Timer::Deadline(id), t1);
    let fx = run_all(&mut s, &mut redis, t1);
    assert!(answered(&fx, id));
    assert!(!redis.queued("a"));
    // Then the resend runs the script again: queued anew, and left again.
    let t2 = t1 + Duration::from_millis(50);
    s.fired(Timer::Resend(seq), t2);
    run_all(&mut s, &mut redis, t2);
    assert!(s.waiters.is_empty());
    assert!(
        !redis.queued("a"),
        "a place nobody leaves: {:?}",
        redis.queue
    );
}

/// Leak 2: clones of one handle, one waiting (queued), one a single try. The waiting one gives
/// up while the single try is under way (another waiter of the holder remains: no leave yet);
/// the single try then finds the lock busy and ends, the holder's last waiter: it leaves the
/// place, though it queued nothing itself.
#[test]
fn a_single_try_twin_leaves_its_holders_place() {
    let t0 = Instant::now();
    let (mut s, mut redis, waiting) = a_queued(t0, Wait::Up(SECOND));
    let once = s.request(fair_req("a", Wait::No), t0 + Duration::from_millis(900));
    let op = only_run(&s.drain());
    let t1 = t0 + SECOND;
    // At its deadline, the single try under way (sent 100 ms before) is the waiting one's last
    // try too: both are answered by it.
    s.fired(Timer::Deadline(waiting), t1);
    let fx = s.drain();
    assert!(!answered(&fx, waiting), "{fx:?}");
    let out = redis.run(&op, t1);
    s.ran(out, t1);
    let fx = run_all(&mut s, &mut redis, t1);
    assert!(answered(&fx, waiting), "{fx:?}");
    assert!(answered(&fx, once), "{fx:?}");
    assert!(s.waiters.is_empty());
    assert!(
        !redis.queued("a"),
        "a place nobody leaves: {:?}",
        redis.queue
    );
}

/// Drives the state against the model in virtual time: round trips run at once, timers fire in
/// order, a fair release's message reaches the waiter it is for. Returns when a waiter was
/// granted (if within `limit`).
fn drive_until_granted(
    s: &mut LockState,
    redis: &mut Redis,
    mut now: Instant,
    limit: Duration,
    timers: &mut Vec<(Instant, Timer)>,
) -> Option<Instant> {
    let end = now + limit;
    loop {
        let fx = s.drain();
        let mut ran = false;
        for e in &fx {
            match e {
                Effect::Answer(_, Answer::Granted { .. }) => return Some(now),
                Effect::Arm(id, after) => {
                    let t = Timer::Deadline(*id);
                    timers.retain(|(_, x)| *x != t);
                    timers.push((now + *after, t));
                }
                Effect::Cancel(id) => timers.retain(|(_, x)| *x != Timer::Deadline(*id)),
                Effect::Run(op) => {
                    let out = redis.run(op, now);
                    s.ran(out, now);
                    ran = true;
                }
                Effect::Subscribe(c) => {
                    s.subscribed(c, true, now);
                    ran = true;
                }
                _ => {}
            }
        }
        for holder in std::mem::take(&mut redis.woken) {
            let channel = s.channel_of(&holder);
            s.unlocked(false, &channel, now);
            ran = true;
        }
        if ran {
            continue;
        }
        // The waiters' deadlines (armed by effects) and the state's table (its next instant).
        timers.sort_by_key(|(at, _)| *at);
        let deadline = timers.first().map(|(at, _)| *at);
        let table = s.next_timeout();
        let at = match (deadline, table) {
            (Some(d), Some(t)) => d.min(t),
            (d, t) => d.or(t)?,
        };
        if at > end {
            return None;
        }
        now = now.max(at);
        redis.tick(now);
        if table == Some(at) {
            s.timeout(now);
        } else {
            let (_, t) = timers.remove(0);
            s.fired(t, now);
        }
    }
}

/// Leak 3: two local fair waiters of different holders, a (older) and b, queued behind x. a's
/// place is lost and a queues again, behind b. x's key then expires (no release, no message).
/// The retry must reach b, the live head, though it is not the oldest local waiter: the lock is
/// taken as soon as it is free, not when b's place expires.
#[test]
fn the_live_head_is_tried_when_it_is_not_the_oldest_local_waiter() {
    let t0 = Instant::now();
    let (mut s, mut redis) = held_by_x(t0); // 30 s, nobody renews it
    let mut timers = Vec::new();
    s.request(fair_req("a", Wait::Forever), t0);
    assert!(drive_until_granted(&mut s, &mut redis, t0, Duration::ZERO, &mut timers).is_none());
    s.request(fair_req("b", Wait::Forever), t0);
    assert!(drive_until_granted(&mut s, &mut redis, t0, Duration::ZERO, &mut timers).is_none());
    assert_eq!(redis.queue.len(), 2);
    redis.drop_place("a");
    let t1 = t0 + SECOND;
    s.fired(Timer::Retry, t1);
    assert!(drive_until_granted(&mut s, &mut redis, t1, Duration::ZERO, &mut timers).is_none());
    assert_eq!(
        redis.queue,
        vec!["b".into(), "a".into()] as Vec<std::sync::Arc<str>>
    );
    let got = drive_until_granted(
        &mut s,
        &mut redis,
        t1,
        Duration::from_secs(1_000),
        &mut timers,
    );
    let free_at = t0 + Duration::from_secs(30);
    let waited = got.map(|g| g.saturating_duration_since(free_at));
    assert!(
        waited.is_some_and(|w| w < SECOND),
        "the free lock (b, alive, at the head) was taken {waited:?} after it became free"
    );
}

/// Leak 4: clones of one handle with different waits use one place wait, the manager's
/// (min(fair wait timeout, K) = 5 s), never a caller's own, in every request (come-back, grant,
/// leave): the deadlines behind the place get back exactly what it added.
#[test]
fn clones_with_different_waits_share_one_place_wait() {
    let t0 = Instant::now();
    let (mut s, mut redis, first) = a_queued(t0, Wait::Up(2 * SECOND));
    let other = s.request(fair_req("a", Wait::Forever), t0);
    let op = only_run(&s.drain());
    assert!(
        matches!(&op, Op::Acquire { fair, .. } if fair.wait == 5 * SECOND),
        "{op:?}"
    );
    let out = redis.run(&op, t0);
    s.ran(out, t0);
    s.drain();
    // y queues behind a: due a's deadline plus its own wait.
    let y = elsewhere("y", SECOND, SECOND);
    redis.run(&y, t0);
    let y_due = redis.deadline("y").unwrap();
    s.fired(Timer::Deadline(first), t0 + 2 * SECOND);
    s.caller_gone(other, t0 + 2 * SECOND);
    // The first's last try: the lock is still x's.
    let op = only_run(&s.drain());
    let out = redis.run(&op, t0 + 2 * SECOND);
    s.ran(out, t0 + 2 * SECOND);
    let fx = s.drain();
    assert!(answered(&fx, first), "{fx:?}");
    let leave = only_run(&fx);
    assert!(
        matches!(&leave, Op::LeaveQueue { wait, .. } if *wait == 5 * SECOND),
        "{leave:?}"
    );
    redis.run(&leave, t0 + 2 * SECOND);
    assert_eq!(redis.deadline("y"), Some(y_due - 5 * SECOND));
}

/// Leak 6: a leave that fails is sent again after a backoff (the actor stays busy meanwhile),
/// until it runs; a new queued attempt of the holder takes the place over instead.
#[test]
fn a_failed_leave_is_sent_again_until_it_runs() {
    let t0 = Instant::now();
    let (mut s, mut redis, id) = a_queued(t0, Wait::Up(SECOND));
    let t1 = t0 + SECOND;
    let fx = last_try(&mut s, &mut redis, id, t1);
    assert!(answered(&fx, id), "the caller does not wait for its leave");
    let leave = only_run(&fx);
    assert!(matches!(leave, Op::LeaveQueue { .. }));
    s.ran(Outcome::LeaveQueue(Err(timeout())), t1);
    let fx = s.drain();
    assert!(s.timers.is_armed(&Timer::Leave("a".into())), "{fx:?}");
    assert!(!fx.iter().any(|e| matches!(e, Effect::Idle)), "{fx:?}");
    s.fired(Timer::Leave("a".into()), t1 + SECOND);
    let fx = run_all(&mut s, &mut redis, t1 + SECOND);
    assert!(!redis.queued("a"));
    assert!(fx.iter().any(|e| matches!(e, Effect::Idle)), "{fx:?}");
    // Failed again, then a new waiter of the holder comes: it takes the place over.
    let id = s.request(fair_req("a", Wait::Up(SECOND)), t1 + SECOND);
    run_all(&mut s, &mut redis, t1 + SECOND);
    let t2 = t1 + 2 * SECOND;
    let fx = last_try(&mut s, &mut redis, id, t2);
    only_run(&fx);
    s.ran(Outcome::LeaveQueue(Err(timeout())), t2);
    s.drain();
    assert!(s.timers.is_armed(&Timer::Leave("a".into())));
    s.request(fair_req("a", Wait::Forever), t2);
    let fx = run_all(&mut s, &mut redis, t2);
    assert!(!s.timers.is_armed(&Timer::Leave("a".into())), "{fx:?}");
    assert!(redis.queued("a"));
    assert_eq!(s.fair.counts(), (1, 0), "one place, none being left");
}

/// A stop leaves the places being left too.
#[test]
fn a_stop_leaves_the_places_being_left() {
    let t0 = Instant::now();
    let (mut s, mut redis, id) = a_queued(t0, Wait::Up(SECOND));
    let fx = last_try(&mut s, &mut redis, id, t0 + SECOND);
    only_run(&fx);
    s.ran(Outcome::LeaveQueue(Err(timeout())), t0 + SECOND);
    s.drain();
    s.stop(false, t0 + SECOND);
    let op = only_run(&s.drain());
    assert!(
        matches!(&op, Op::Shutdown { leave, .. } if leave.len() == 1 && &*leave[0].0 == "a"),
        "{op:?}"
    );
    redis.run(&op, t0 + SECOND);
    assert!(!redis.queued("a"));
}

/// A queued place arms the refresh (a third of the place timeout); the refresh carries every
/// place with its wait; its reply's head, when local, takes its turn, and a waiter whose place is
/// gone queues again. With no place left, the refresh is not armed again.
#[test]
fn the_refresh_keeps_every_place_and_answers_for_the_head_and_the_gone() {
    let t0 = Instant::now();
    let (mut s, mut redis) = held_by_x(t0);
    let a = s.request(fair_req("a", Wait::Forever), t0);
    run_all(&mut s, &mut redis, t0);
    let third = settings().fair_place_timeout / 3;
    assert_eq!(s.armed_in(&Timer::Refresh), Some(third));
    let b = s.request(fair_req("b", Wait::Up(SECOND)), t0);
    run_all(&mut s, &mut redis, t0);
    // a's place is lost; x's key goes (no message): b is the head of a free lock.
    redis.drop_place("a");
    redis.delete();
    redis.published = 0;
    let t1 = t0 + Duration::from_millis(100);
    s.fired(Timer::Refresh, t1);
    let fx = s.drain();
    assert_eq!(s.armed_in(&Timer::Refresh), Some(third));
    let op = only_run(&fx);
    let Op::FairRefresh { places, cap } = &op else {
        panic!("{op:?}");
    };
    let mut places = places.clone();
    places.sort();
    assert_eq!(
        places,
        vec![("a".into(), 5 * SECOND), ("b".into(), 5 * SECOND)] as Vec<(std::sync::Arc<str>, _)>
    );
    assert_eq!(*cap, 5 * SECOND);
    let out = redis.run(&op, t1);
    assert!(
        matches!(&out, Outcome::FairRefresh(Ok(r)) if r.head.as_deref() == Some("b") && r.gone == vec!["a".into()] as Vec<std::sync::Arc<str>>),
        "{out:?}"
    );
    s.ran(out, t1);
    let fx = run_all(&mut s, &mut redis, t1);
    assert!(granted(&fx, b).is_some(), "{fx:?}");
    assert!(!answered(&fx, a));
    assert_eq!(
        redis.queue,
        vec!["a".into()] as Vec<std::sync::Arc<str>>,
        "a queued again"
    );
    // a ends: no place left, the refresh is not armed again.
    s.caller_gone(a, t1);
    run_all(&mut s, &mut redis, t1);
    s.fired(Timer::Refresh, t1 + third);
    let fx = s.drain();
    assert!(runs(&fx).is_empty(), "{fx:?}");
    assert!(!s.timers.is_armed(&Timer::Refresh));
}

/// A prune that drops the dead head of a free lock wakes the new head when it is another
/// client's (it would otherwise wait for its own timer, or give up): the refresh's prune, and an
/// acquire's whose caller is not the new head. Exactly one message each; none when the new head
/// is the refresher's own (its reply names it) or the caller itself (it takes the lock).
#[test]
fn a_prune_that_frees_the_head_wakes_the_next_one() {
    let t0 = Instant::now();
    let mut redis = Redis::new(false);
    // d (dead) at the head of a free lock, y (another client) behind it.
    redis.run(&elsewhere("x", SECOND, SECOND), t0);
    redis.run(&elsewhere("d", SECOND, SECOND), t0);
    redis.run(&elsewhere("y", SECOND, 60 * SECOND), t0);
    let mut s = state(LockKind::Fair);
    s.request(fair_req("a", Wait::Forever), t0);
    run_all(&mut s, &mut redis, t0);
    let t1 = t0 + SECOND; // x's lease ends: free
    redis.tick(t1);
    assert!(redis.woken.is_empty());
    // d's deadline (2 s) passes: the refresh prunes it and wakes y, once.
    let t2 = t0 + 2 * SECOND + Duration::from_millis(1);
    s.fired(Timer::Refresh, t2);
    run_all(&mut s, &mut redis, t2);
    assert_eq!(redis.woken, vec!["y".into()] as Vec<std::sync::Arc<str>>);
    // A refresh with nothing pruned wakes nobody.
    redis.woken.clear();
    s.fired(Timer::Refresh, t2 + SECOND);
    run_all(&mut s, &mut redis, t2 + SECOND);
    assert!(redis.woken.is_empty(), "{:?}", redis.woken);
    // The acquire path: z's try prunes a dead head e of a free lock; f, behind it, is woken.
    let mut redis = Redis::new(false);
    redis.run(&elsewhere("x", SECOND, SECOND), t0);
    redis.run(&elsewhere("e", SECOND, SECOND), t0);
    redis.run(&elsewhere("f", SECOND, 60 * SECOND), t0);
    redis.run(&elsewhere("z", SECOND, SECOND), t2);
    assert_eq!(redis.woken, vec!["f".into()] as Vec<std::sync::Arc<str>>);
    // ... but the new head itself, pruning its way to the head, takes the lock: no message.
    let mut redis = Redis::new(false);
    redis.run(&elsewhere("x", SECOND, SECOND), t0);
    redis.run(&elsewhere("e", SECOND, SECOND), t0);
    redis.run(&elsewhere("f", SECOND, 60 * SECOND), t0);
    assert!(matches!(
        redis.run(&elsewhere("f", SECOND, 60 * SECOND), t2),
        Outcome::Acquire(Ok(Attempt::Acquired { .. }))
    ));
    assert!(redis.woken.is_empty(), "{:?}", redis.woken);
}

/// A failed leave is sent again only while the place could still be there: its deadline was
/// last set, at the head, at most its wait (5 s) plus the place timeout (5 s) ahead, and it is
/// refreshed no more. Past that, a failure ends the resends (the watchdog timeout, 30 s here,
/// has nothing to do with it).
#[test]
fn a_failed_leave_is_sent_again_until_the_place_would_have_expired() {
    let t0 = Instant::now();
    let (mut s, mut redis, id) = a_queued(t0, Wait::Up(SECOND));
    let t1 = t0 + SECOND;
    let fx = last_try(&mut s, &mut redis, id, t1);
    only_run(&fx);
    s.ran(Outcome::LeaveQueue(Err(timeout())), t1);
    let leave_armed = |s: &LockState| s.timers.is_armed(&Timer::Leave("a".into()));
    s.drain();
    assert!(leave_armed(&s));
    // Still within 10 s of the first failure: sent again.
    let t2 = t1 + 9 * SECOND;
    s.fired(Timer::Leave("a".into()), t2);
    only_run(&s.drain());
    s.ran(Outcome::LeaveQueue(Err(timeout())), t2);
    s.drain();
    assert!(leave_armed(&s));
    // Past it: the place has expired; no more resends, nothing left to leave.
    let t3 = t1 + 10 * SECOND + Duration::from_millis(1);
    s.fired(Timer::Leave("a".into()), t3);
    only_run(&s.drain());
    s.ran(Outcome::LeaveQueue(Err(timeout())), t3);
    let fx = s.drain();
    assert!(!leave_armed(&s), "{fx:?}");
    assert!(!s.fair.is_leaving());
}

/// The model's refresh and come-back move every place behind a place that moved on by as much,
/// as `fair_refresh.lua` and `fair_queue.lua` do: a Redisson waiter j behind a's lockman place
/// keeps `D = D_ahead + wait`.
#[test]
fn the_models_refresh_and_come_back_move_the_places_behind_on() {
    let t0 = Instant::now();
    let (mut s, mut redis, _a) = a_queued(t0, Wait::Forever);
    redis.run(&elsewhere("j", SECOND, 60 * SECOND), t0);
    let gap = |redis: &Redis| redis.deadline("j").unwrap() - redis.deadline("a").unwrap();
    assert_eq!(gap(&redis), 60 * SECOND);
    let a_before = redis.deadline("a").unwrap();
    // The refresh: a's base is now + min(PTTL, K), 2 s later than at its join.
    let t1 = t0 + 2 * SECOND;
    s.fired(Timer::Refresh, t1);
    run_all(&mut s, &mut redis, t1);
    assert_eq!(redis.deadline("a"), Some(a_before + 2 * SECOND));
    assert_eq!(gap(&redis), 60 * SECOND);
    // A come-back of a, a second later.
    let t2 = t1 + SECOND;
    let come_back = Op::Acquire {
        kind: LockKind::Fair,
        holder: "a".into(),
        ttl: SECOND,
        fair: FairArgs {
            wait: 5 * SECOND,
            once: false,
            cap: 5 * SECOND,
        },
        expect: Expect::count(0),
        seq: 0,
    };
    redis.run(&come_back, t2);
    assert_eq!(redis.deadline("a"), Some(a_before + 3 * SECOND));
    assert_eq!(gap(&redis), 60 * SECOND);
}

/// A holder's first queued waiter (waiting 1 s) gives up while a clone that waits for ever stays
/// queued. The place must serve the clone as well as it would have served a clone queued first:
/// its wait is the manager's (min(fair wait timeout, K) = 5 s), never a caller's own. With the
/// first waiter's 1 s, the place, 1 s behind a dead Redisson place d, expired within a refresh
/// period of d's: both were pruned at once, and the clone queued again behind y, who came later.
#[test]
fn a_clone_keeps_its_place_when_the_first_waiter_of_its_holder_leaves() {
    let t0 = Instant::now();
    let mut redis = Redis::new(false);
    // x (dead) holds for 60 s; d (dead) is queued with its deadline at t0 + 10 s.
    redis.run(&elsewhere("x", 5 * SECOND, 5 * SECOND), t0);
    redis.run(&elsewhere("d", 5 * SECOND, 5 * SECOND), t0);
    assert!(redis.renew("x", t0, 60 * SECOND));
    assert_eq!(redis.deadline("d"), Some(t0 + 10 * SECOND));
    let mut s = state(LockKind::Fair);
    let mut timers = Vec::new();
    let first = s.request(fair_req("a", Wait::Up(SECOND)), t0);
    let fx = s.drain();
    let op = only_run(&fx);
    assert!(
        matches!(&op, Op::Acquire { fair, .. } if fair.wait == 5 * SECOND),
        "a caller's own wait makes no place wait: {op:?}"
    );
    for e in &fx {
        if let Effect::Arm(id, after) = e {
            timers.push((t0 + *after, Timer::Deadline(*id)));
        }
    }
    let out = redis.run(&op, t0);
    s.ran(out, t0);
    s.request(fair_req("a", Wait::Forever), t0);
    assert!(drive_until_granted(&mut s, &mut redis, t0, Duration::ZERO, &mut timers).is_none());
    redis.run(&elsewhere("y", 5 * SECOND, 60 * SECOND), t0);
    assert_eq!(
        redis.queue,
        vec!["d".into(), "a".into(), "y".into()] as Vec<std::sync::Arc<str>>
    );
    // The first waiter gives up at 1 s (the clone stays: no leave); refreshes go on.
    let got = drive_until_granted(&mut s, &mut redis, t0, 13 * SECOND, &mut timers);
    assert!(got.is_none());
    assert!(!s.is_waiting(first));
    assert_eq!(
        redis.queue,
        vec!["a".into(), "y".into()] as Vec<std::sync::Arc<str>>,
        "the clone keeps its turn"
    );
}

/// A failover brings back a place whose leave ran on the old primary. The pub/sub connection
/// coming back (`resubscribed`) sends again the leaves that ran within the time their place could
/// still be alive (wait + K), for holders with no waiter or place here now: the place goes. Past
/// that time, or for a holder that queued again, nothing is sent.
#[test]
fn a_leave_lost_in_a_failover_is_sent_again_when_pub_sub_comes_back() {
    let t0 = Instant::now();
    let (mut s, mut redis, id) = a_queued(t0, Wait::Up(SECOND));
    let other = s.request(fair_req("b", Wait::Forever), t0);
    run_all(&mut s, &mut redis, t0);
    let t1 = t0 + SECOND;
    s.fired(Timer::Deadline(id), t1);
    run_all(&mut s, &mut redis, t1);
    assert!(!redis.queued("a"));
    // The failover: the replica had a's place, not its leave.
    let restored = redis.clone_place_of("a", t0);
    assert!(redis.queued("a") && restored);
    let t2 = t1 + 2 * SECOND;
    s.resubscribed(t2);
    let fx = s.drain();
    let leaves: Vec<&Op> = runs(&fx)
        .into_iter()
        .filter(|op| matches!(op, Op::LeaveQueue { .. }))
        .collect();
    assert!(
        matches!(leaves[..], [Op::LeaveQueue { holder, wait }] if &**holder == "a" && *wait == 5 * SECOND),
        "{fx:?}"
    );
    let out = redis.run(leaves[0], t2);
    s.ran(out, t2);
    run_all(&mut s, &mut redis, t2);
    assert!(!redis.queued("a"));
    assert!(redis.queued("b"), "b, live, keeps its place");
    // It found the place: remembered again (a failover back could restore it once more), and
    // sent at the next come-back, which finds nothing; after that it is forgotten.
    let t3 = t2 + SECOND;
    s.resubscribed(t3);
    let fx = run_all(&mut s, &mut redis, t3);
    let leaves_in = |fx: &[Effect]| {
        runs(fx)
            .iter()
            .filter(|op| matches!(op, Op::LeaveQueue { .. }))
            .count()
    };
    assert_eq!(leaves_in(&fx), 1, "{fx:?}");
    s.resubscribed(t3);
    let fx = run_all(&mut s, &mut redis, t3);
    assert_eq!(leaves_in(&fx), 0, "{fx:?}");
    // Past wait + K after its leave, a place would have expired: nothing is sent.
    let c = s.request(fair_req("c", Wait::Up(SECOND)), t3);
    run_all(&mut s, &mut redis, t3);
    let t4 = t3 + SECOND;
    s.fired(Timer::Deadline(c), t4);
    run_all(&mut s, &mut redis, t4);
    assert!(!redis.queued("c"));
    let t5 = t4 + 10 * SECOND + Duration::from_millis(1);
    s.resubscribed(t5);
    let fx = s.drain();
    assert!(
        !runs(&fx)
            .iter()
            .any(|op| matches!(op, Op::LeaveQueue { .. })),
        "{fx:?}"
    );
    assert!(s.is_waiting(other));
}

/// A fair wait timeout shorter than the place timeout makes every place that short: the refresh
/// comes a third of it after, so a live place is refreshed before it runs out.
#[test]
fn a_short_fair_wait_timeout_refreshes_the_places_that_much_sooner() {
    let t0 = Instant::now();
    let mut redis = Redis::new(false);
    let op = elsewhere("x", Duration::from_secs(30), Duration::from_secs(300));
    redis.run(&op, t0);
    let short = Settings {
        fair_wait_timeout: Duration::from_millis(300),
        ..settings()
    };
    let mut s = LockState::new(LockKind::Fair, "n".into(), short, t0);
    s.request(fair_req("a", Wait::Forever), t0);
    run_all(&mut s, &mut redis, t0);
    assert_eq!(
        s.armed_in(&Timer::Refresh),
        Some(Duration::from_millis(100))
    );
}
