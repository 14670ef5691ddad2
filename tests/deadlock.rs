//! Deadlocks found, not waited out (`lockman::deadlock`): callers of one manager that take locks
//! in opposite orders form a cycle of waits; the youngest wait of it fails with
//! `LockError::Deadlock`, naming the cycle, and the others go on. Never a report without a
//! cycle: a workload that takes its names in one order, with guards dropped (released in the
//! background) and acquires given up mid-wait, sees none.

mod support;

#[cfg(feature = "metrics")]
use support::recorder;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lockman::deadlock::{self, Deadlocks, Owner};
use lockman::{Config, LockError, LockManager};
use redis::Commands;
use support::party::{close_cycle, deadlock_of, goes_on, party};
use support::{RedisServer, wait};
use tokio::sync::oneshot;

/// The bound on finding a cycle once it closed: no Redis round trip is needed, only a message
/// to each waiting actor; generous for a loaded machine.
const FOUND_WITHIN: Duration = Duration::from_secs(2);

async fn manager(server: &RedisServer, config: impl FnOnce(Config) -> Config) -> LockManager {
    let config = config(Config::new(server.url()).client_name("deadlock-test"));
    LockManager::start(config).await.expect("manager starts")
}

/// Step `i`'s place, checked to be an acquire call of this file on `line` (`file:line:column`).
fn place(cycle: &lockman::deadlock::Cycle, i: usize, line: u32) -> String {
    let place = cycle.steps[i].place.clone().expect("a place");
    let (at, column) = place.rsplit_once(':').expect("file:line:column");
    assert_eq!(at, format!("{}:{line}", file!()), "{place}");
    assert!(column.parse::<u32>().is_ok(), "{place}");
    place
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tasks_in_opposite_orders_the_younger_wait_fails_naming_the_cycle() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    // Under a prefix: the keys carry it, the cycle shows the names as given.
    let mgr = manager(&server, |c| c.name_prefix("app:")).await;
    let (x, y) = (mgr.lock("x"), mgr.lock("y"));
    let (x2, y2) = (mgr.lock("x"), mgr.lock("y"));
    let (a_me, a_go, a) = party(async move { x.acquire().await }, async move {
        (line!(), y.acquire().await.map(|g| g.holder_id().to_owned()))
    });
    let (b_me, b_go, b) = party(async move { y2.acquire().await }, async move {
        let (line, got) = (line!(), x2.acquire().await);
        (line, got.map(|g| g.holder_id().to_owned()))
    });
    let (a_me, b_me) = (a_me.await.unwrap(), b_me.await.unwrap());
    assert_ne!(a_me, b_me);
    // A waits for y first (it subscribed y's channel: its wait is in the graph), then B for x:
    // B's wait closes the cycle and is the younger.
    a_go.send(()).unwrap();
    wait::subscribers(&mut raw, "redisson_lock__channel:{app:y}", 1).await;
    let closed = Instant::now();
    b_go.send(()).unwrap();
    let ((b_line, b_res), b_done) = tokio::time::timeout(FOUND_WITHIN * 5, b)
        .await
        .expect("the cycle is broken")
        .unwrap();
    assert!(
        b_done - closed < FOUND_WITHIN,
        "found after {:?}",
        b_done - closed
    );
    let cycle = deadlock_of(b_res);
    let steps: Vec<(Owner, &str, &str)> = cycle
        .steps
        .iter()
        .map(|s| (s.owner, s.name.as_str(), s.kind.as_str()))
        .collect();
    assert_eq!(steps, vec![(b_me, "x", "lock"), (a_me, "y", "lock")]);
    assert!(
        cycle
            .steps
            .iter()
            .all(|s| s.client == mgr.client_id() && s.service == "deadlock-test")
    );
    // B's hold of y went with its task: A gets y and goes on.
    let ((a_line, a_res), _) = tokio::time::timeout(Duration::from_secs(10), a)
        .await
        .expect("A goes on")
        .unwrap();
    // Each wait's place is its acquire call in this file.
    let (b_at, a_at) = (place(&cycle, 0, b_line), place(&cycle, 1, a_line));
    assert_eq!(
        cycle.to_string(),
        format!(
            "{b_me} of deadlock-test at {b_at} waits for lock \"x\" held by {a_me} of \
             deadlock-test, which at {a_at} waits for lock \"y\" held by {b_me} of deadlock-test"
        )
    );
    let a_holder = a_res.expect("A takes y");
    // Exact Redis state: both released, nothing of B's wait left behind.
    wait::until("both locks released", || {
        let keys: Vec<String> = raw.keys("*").unwrap();
        keys.iter().all(|k| k.starts_with("lockman_client"))
    })
    .await;
    assert!(a_holder.starts_with(&mgr.client_id().to_string()));
    mgr.shutdown().await;
}

/// The message names the user's code: each wait's acquire call (here a fenced lock's and a
/// MultiLock's, whose member waits) and the label of the scope it runs in, and says what to do.
/// Catches: a place lost on the way (a wrapper's `acquire` not `#[track_caller]`, the
/// MultiLock's member wait naming lockman's own source), the label not carried, the advice gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_names_each_wait_s_call_site_and_scope_label_and_what_to_do() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, |c| c).await;
    // A, in a scope labeled "checkout", holds x and waits for the fenced y; B holds y and
    // takes the MultiLock [z, x] (z at once, then waits for x), closing the cycle.
    let (x, y) = (mgr.lock("x"), mgr.fenced_lock("y"));
    let checkout = Owner::new();
    let (_a_me, a_go, a) = party(
        deadlock::scope_labeled(checkout, "checkout", async move { x.acquire().await }),
        deadlock::scope_labeled(checkout, "checkout", async move {
            (line!(), y.acquire().await.map(drop))
        }),
    );
    let held_y = mgr.fenced_lock("y").acquire().await.unwrap();
    let b_me = deadlock::current();
    a_go.send(()).unwrap();
    wait::subscribers(&mut raw, "redisson_lock__channel:{y}", 1).await;
    wait::quiet(&mut raw).await;
    let multi = lockman::MultiLock::new(vec![mgr.lock("z"), mgr.lock("x")]);
    let (b_line, res) = (line!(), multi.acquire().await);
    let error = res.as_ref().map(drop).unwrap_err().to_string();
    let cycle = deadlock_of(res);
    drop(held_y);
    let ((a_line, a_res), _) = tokio::time::timeout(Duration::from_secs(10), a)
        .await
        .expect("A goes on")
        .unwrap();
    a_res.expect("A takes y");
    let (b_at, a_at) = (place(&cycle, 0, b_line), place(&cycle, 1, a_line));
    assert_eq!(
        error,
        format!(
            "deadlock: {b_me} of deadlock-test at {b_at} waits for lock \"x\" held by \
             \"checkout\" ({checkout} of deadlock-test), which at {a_at} waits for fenced \"y\" \
             held by {b_me} of deadlock-test. Take these locks in one order everywhere, or \
             retry: this wait was broken so that the others go on, and the caller's other holds \
             are still held (release them, usually by returning this error, before trying again)"
        )
    );
    mgr.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_of_three_through_a_fair_lock_and_a_reader_behind_a_writer() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, |c| c).await;
    let (a, b_fair, c_rw) = (mgr.lock("a"), mgr.fair_lock("b"), mgr.read_write_lock("c"));
    let (a2, b2, c2) = (mgr.lock("a"), mgr.fair_lock("b"), mgr.read_write_lock("c"));
    // T1 holds a and waits for the fair lock b; T2 holds b and waits to read c; T3 holds c
    // for writing and waits for a.
    let (t1_me, t1_go, t1) = party(async move { a.acquire().await }, async move {
        b_fair.acquire().await.map(drop)
    });
    let (t2_me, t2_go, t2) = party(async move { b2.acquire().await }, async move {
        c_rw.read().acquire().await.map(drop)
    });
    let (t3_me, t3_go, t3) = party(async move { c2.write().acquire().await }, async move {
        a2.acquire().await.map(drop)
    });
    let (t1_me, t2_me, t3_me) = (
        t1_me.await.unwrap(),
        t2_me.await.unwrap(),
        t3_me.await.unwrap(),
    );
    t1_go.send(()).unwrap();
    // T1 is in b's queue (behind T2's hold), then T2 waits on c's channel.
    wait::queued(&mut raw, "b", 1).await;
    wait::quiet(&mut raw).await;
    t2_go.send(()).unwrap();
    wait::subscribers(&mut raw, "redisson_rwlock:{c}", 1).await;
    wait::quiet(&mut raw).await;
    let (cycle, _) = close_cycle(t3_go, t3, FOUND_WITHIN, FOUND_WITHIN * 5).await;
    let steps: Vec<(Owner, &str, &str)> = cycle
        .steps
        .iter()
        .map(|s| (s.owner, s.name.as_str(), s.kind.as_str()))
        .collect();
    assert_eq!(
        steps,
        vec![
            (t3_me, "a", "lock"),
            (t1_me, "b", "fair"),
            (t2_me, "c", "read")
        ]
    );
    // T3's write hold went with it: T2 reads c, then T1 takes b.
    let ((t2_res, _), (t1_res, _)) = tokio::time::timeout(Duration::from_secs(10), async {
        (t2.await.unwrap(), t1.await.unwrap())
    })
    .await
    .expect("the others go on");
    t2_res.expect("T2 reads c");
    t1_res.expect("T1 takes b");
    mgr.shutdown().await;
}

/// Two branches of one task (`join!`), one holding a lock, the other waiting for it through
/// another handle: one owner waits for itself, and that is no deadlock (the first branch lets
/// go). The waiting branch gets the lock; nothing is reported. (A wait for itself with no other
/// branch would never end: not reported either, as a cycle of one cannot be told from this.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_branches_of_one_task_on_one_lock_are_no_deadlock() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, |c| c).await;
    let (first, second) = (mgr.lock("self"), mgr.lock("self"));
    let (held_tx, held_rx) = oneshot::channel::<()>();
    let holder = async {
        let guard = first.acquire().await.expect("first branch");
        held_tx.send(()).unwrap();
        // Until the other branch waits (its wait is in the graph), then a while more.
        wait::subscribers(&mut raw, "redisson_lock__channel:{self}", 1).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        guard.release().await
    };
    let waiter = async {
        held_rx.await.unwrap();
        second.acquire().await.map(|g| g.holder_id().to_owned())
    };
    let (released, got) = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(holder, waiter)
    })
    .await
    .expect("both branches end");
    released.expect("released");
    assert_eq!(
        got.expect("no deadlock: the waiting branch gets it"),
        second.holder_id()
    );
    mgr.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_moved_to_another_task_is_its_scope_s_not_the_task_s_that_took_it() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, |c| c).await;
    // This task takes m inside a scope and hands the guard to a keeper task that acts for the
    // same scope; then it waits for n, held by a task that waits for m. The hold of m is the
    // scope's, which waits for nothing: no cycle. Without the scope the hold would count as
    // this task's, and its wait for n would close a cycle that is not there: it would fail
    // with a (false) deadlock.
    let owner = Owner::new();
    let m = mgr.lock("m");
    let guard = deadlock::scope(owner, async { m.acquire().await })
        .await
        .unwrap();
    let (release_tx, release_rx) = oneshot::channel::<()>();
    let keeper = tokio::spawn(deadlock::scope(owner, async move {
        release_rx.await.unwrap();
        drop(guard);
    }));
    let (n, m2, n2) = (mgr.lock("n"), mgr.lock("m"), mgr.lock("n"));
    let (c_me, c_go, c) = party(async move { n2.acquire().await }, async move {
        m2.acquire().await.map(drop)
    });
    c_me.await.unwrap();
    c_go.send(()).unwrap();
    wait::subscribers(&mut raw, "redisson_lock__channel:{m}", 1).await;
    // Once this task waits for n, the keeper lets m go: c takes m, then lets n go.
    let releaser = tokio::spawn(async move {
        wait::subscribers(&mut raw, "redisson_lock__channel:{n}", 1).await;
        wait::quiet(&mut raw).await;
        release_tx.send(()).unwrap();
    });
    let mine = tokio::time::timeout(Duration::from_secs(10), n.acquire())
        .await
        .expect("n is let go");
    let mine = mine.expect("this task takes n: no deadlock");
    assert!(!mine.is_lost());
    releaser.await.unwrap();
    keeper.await.unwrap();
    let (c_res, _) = c.await.unwrap();
    c_res.expect("c takes m");
    mgr.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_only_leaves_both_waits_to_their_timeouts() {
    #[cfg(feature = "metrics")]
    recorder::recorded();
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, |c| c.deadlocks(Deadlocks::Report)).await;
    let (x, y, x2, y2) = (mgr.lock("x"), mgr.lock("y"), mgr.lock("x"), mgr.lock("y"));
    let wait_for = Duration::from_millis(1500);
    let (_a_me, a_go, a) = party(async move { x.acquire().await }, async move {
        y.try_acquire_for(wait_for).await.map(|g| g.is_some())
    });
    // B waits longer: it is still waiting when A's wait runs out and A lets x go.
    let (_b_me, b_go, b) = party(async move { y2.acquire().await }, async move {
        x2.try_acquire_for(wait_for * 10).await.map(|g| g.is_some())
    });
    _a_me.await.unwrap();
    _b_me.await.unwrap();
    let began = Instant::now();
    a_go.send(()).unwrap();
    wait::subscribers(&mut raw, "redisson_lock__channel:{y}", 1).await;
    b_go.send(()).unwrap();
    let (a_res, a_done) = a.await.unwrap();
    let (b_res, _) = b.await.unwrap();
    // The cycle was not broken: A, the older wait, waited its whole time and got nothing;
    // then it let x go, and B took it.
    assert!(matches!(a_res, Ok(false)), "{a_res:?}");
    assert!(a_done - began >= wait_for);
    assert!(matches!(b_res, Ok(true)), "{b_res:?}");
    // It was reported, once (the other tests of this binary only break cycles).
    #[cfg(feature = "metrics")]
    assert_eq!(
        recorder::recorded()
            .values
            .lock()
            .unwrap()
            .get("lockman_deadlocks_total{action=reported}"),
        Some(&1.0)
    );
    mgr.shutdown().await;
}

/// `Deadlocks::Off` keeps no graph: a cycle in the process is neither broken nor reported (both
/// waits run to their own time-outs), and waits past a second publish nothing to Redis for
/// other processes to follow (no `lockman_waits:*` key, no client record naming a cycle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_keeps_no_graph_breaks_nothing_and_publishes_no_wait() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, |c| {
        c.deadlocks(Deadlocks::Off)
            .watchdog_timeout(Duration::from_millis(900))
    })
    .await;
    let (x, y, x2, y2) = (mgr.lock("x"), mgr.lock("y"), mgr.lock("x"), mgr.lock("y"));
    // Both waits outlast the second after which a wait is published when detection is on.
    let wait_for = Duration::from_millis(1800);
    let (a_me, a_go, a) = party(async move { x.acquire().await }, async move {
        y.try_acquire_for(wait_for).await.map(|g| g.is_some())
    });
    let (b_me, b_go, b) = party(async move { y2.acquire().await }, async move {
        x2.try_acquire_for(wait_for * 3).await.map(|g| g.is_some())
    });
    a_me.await.unwrap();
    b_me.await.unwrap();
    let began = Instant::now();
    a_go.send(()).unwrap();
    wait::subscribers(&mut raw, "redisson_lock__channel:{y}", 1).await;
    b_go.send(()).unwrap();
    let (a_res, a_done) = a.await.unwrap();
    // A waited its whole time: nobody broke the cycle.
    assert!(matches!(a_res, Ok(false)), "{a_res:?}");
    assert!(a_done - began >= wait_for);
    let waits: Vec<String> = raw.keys("lockman_waits:*").unwrap();
    assert!(waits.is_empty(), "published waits: {waits:?}");
    let clients = mgr.clients().await.unwrap();
    assert!(clients.iter().all(|c| c.deadlocks.is_empty()));
    // A let x go when its wait ended: B takes it.
    let (b_res, _) = b.await.unwrap();
    assert!(matches!(b_res, Ok(true)), "{b_res:?}");
    mgr.shutdown().await;
}

/// Many tasks, few names, every kind: each task takes a random set of names in one global
/// order (a reader or a writer of the read-write one, the fair one, plain ones), holds them a
/// moment and lets them go, by release or by drop (released in the background), and now and
/// then gives up a wait mid-way (a timeout around the acquire). There is no cycle, so there
/// must be no report: every `Deadlock` here would be a false one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cycle_no_report_under_a_random_ordered_workload() {
    let server = RedisServer::start();
    let mgr = manager(&server, |c| c).await;
    let tasks = 8;
    let rounds = 60;
    let false_reports = Arc::new(AtomicU32::new(0));
    let taken = Arc::new(AtomicU32::new(0));
    let mut all = Vec::new();
    for t in 0..tasks {
        let (mgr, false_reports, taken) = (mgr.clone(), false_reports.clone(), taken.clone());
        all.push(tokio::spawn(async move {
            let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1);
            let mut next = move || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            for _ in 0..rounds {
                let mut guards: Vec<lockman::LockGuard> = Vec::new();
                let report = |e: &LockError| {
                    if matches!(e, LockError::Deadlock { .. }) {
                        false_reports.fetch_add(1, Ordering::Relaxed);
                    }
                };
                // The global order: p0 < p1 < fair < rw < p2.
                for step in 0..5 {
                    if next() % 2 == 0 {
                        continue;
                    }
                    let patience = Duration::from_millis(if next() % 5 == 0 { 5 } else { 5_000 });
                    let got = match step {
                        0 | 1 | 4 => {
                            let lock = mgr.lock(format!("p{step}"));
                            tokio::time::timeout(patience, lock.acquire()).await
                        }
                        2 => {
                            let lock = mgr.fair_lock("fair");
                            tokio::time::timeout(patience, lock.acquire()).await
                        }
                        _ => {
                            let rw = mgr.read_write_lock("rw");
                            if next() % 3 == 0 {
                                tokio::time::timeout(patience, rw.write().acquire()).await
                            } else {
                                tokio::time::timeout(patience, rw.read().acquire()).await
                            }
                        }
                    };
                    match got {
                        Ok(Ok(g)) => {
                            taken.fetch_add(1, Ordering::Relaxed);
                            guards.push(g);
                        }
                        Ok(Err(e)) => report(&e),
                        Err(_) => {} // given up mid-wait
                    }
                }
                if next() % 4 == 0 {
                    tokio::task::yield_now().await;
                }
                while let Some(g) = guards.pop() {
                    if next() % 2 == 0 {
                        drop(g);
                    } else if let Err(e) = g.release().await {
                        report(&e);
                    }
                }
            }
        }));
    }
    for task in all {
        task.await.unwrap();
    }
    assert_eq!(false_reports.load(Ordering::Relaxed), 0);
    // The workload contended: plenty was taken.
    assert!(taken.load(Ordering::Relaxed) > (tasks * rounds) as u32);
    mgr.shutdown().await;
}

/// The bound on finding a cycle through two processes: a wait is followed once it has lasted a
/// second (`LONG_WAIT`), on a half-second schedule, with a few Redis round trips; generous for
/// a loaded machine.
const FOUND_ACROSS_WITHIN: Duration = Duration::from_secs(8);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_in_opposite_orders_the_younger_wait_fails_naming_both() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    // Two managers: two client ids, two waits-for graphs; only Redis joins them.
    let east = manager(&server, |c| c.client_name("east")).await;
    let west = manager(&server, |c| c.client_name("west")).await;
    let (x, y) = (east.lock("x"), east.lock("y"));
    let (x2, y2) = (west.lock("x"), west.lock("y"));
    // A's waits in a labeled scope: its label and place reach west through east's waits hash.
    let a_owner = Owner::new();
    let (_a_me, a_go, a) = party(
        deadlock::scope_labeled(a_owner, "east-worker", async move { x.acquire().await }),
        deadlock::scope_labeled(a_owner, String::from("east-worker"), async move {
            (line!(), y.acquire().await.map(drop))
        }),
    );
    let (b_me, b_go, b) = party(async move { y2.acquire().await }, async move {
        (line!(), x2.acquire().await.map(drop))
    });
    let (a_me, b_me) = (a_owner, b_me.await.unwrap());
    a_go.send(()).unwrap();
    wait::subscribers(&mut raw, "redisson_lock__channel:{y}", 1).await;
    // Not an ordering (A waits already) but a margin: across processes the youngest wait is
    // told by when each began on the server's clock, which each process's stamp gets to
    // within a one-way trip; 200 ms keeps the two waits' order clear of that.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let closed = Instant::now();
    b_go.send(()).unwrap();
    let ((b_line, b_res), b_done) = tokio::time::timeout(FOUND_ACROSS_WITHIN * 3, b)
        .await
        .expect("the cycle is broken")
        .unwrap();
    let took = b_done - closed;
    assert!(took < FOUND_ACROSS_WITHIN, "found after {took:?}");
    // Not before it had lasted the threshold: only the graph of one process is immediate.
    assert!(took >= Duration::from_secs(1), "found after {took:?}");
    let cycle = deadlock_of(b_res);
    let steps: Vec<(Owner, uuid::Uuid, &str, &str, &str)> = cycle
        .steps
        .iter()
        .map(|s| {
            (
                s.owner,
                s.client,
                s.service.as_str(),
                s.name.as_str(),
                s.kind.as_str(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        vec![
            (b_me, west.client_id(), "west", "x", "lock"),
            (a_me, east.client_id(), "east", "y", "lock"),
        ]
    );
    // A goes on; both waits hashes are gone once nobody waits long.
    let ((a_line, a_res), _) = tokio::time::timeout(Duration::from_secs(10), a)
        .await
        .expect("A goes on")
        .unwrap();
    a_res.expect("A takes y");
    // The place and label of east's wait came through its waits hash.
    let (b_at, a_at) = (place(&cycle, 0, b_line), place(&cycle, 1, a_line));
    assert_eq!(cycle.steps[0].label, None);
    assert_eq!(cycle.steps[1].label.as_deref(), Some("east-worker"));
    assert_eq!(
        cycle.to_string(),
        format!(
            "{b_me} of west at {b_at} waits for lock \"x\" held by \"east-worker\" ({a_me} of \
             east), which at {a_at} waits for lock \"y\" held by {b_me} of west"
        )
    );
    wait::until("no waits hash left", || {
        let keys: Vec<String> = raw.keys("lockman_waits:*").unwrap();
        keys.is_empty()
    })
    .await;
    east.shutdown().await;
    west.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_a_cycle_of_three_through_fair_and_read_write_locks() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let m1 = manager(&server, |c| c.client_name("one")).await;
    let m2 = manager(&server, |c| c.client_name("two")).await;
    let m3 = manager(&server, |c| c.client_name("three")).await;
    let (a, b_fair) = (m1.lock("a"), m1.fair_lock("b"));
    let (b2, c_rw) = (m2.fair_lock("b"), m2.read_write_lock("c"));
    let (c3, a3) = (m3.read_write_lock("c"), m3.lock("a"));
    let (t1_me, t1_go, t1) = party(async move { a.acquire().await }, async move {
        b_fair.acquire().await.map(drop)
    });
    let (t2_me, t2_go, t2) = party(async move { b2.acquire().await }, async move {
        c_rw.read().acquire().await.map(drop)
    });
    let (t3_me, t3_go, t3) = party(async move { c3.write().acquire().await }, async move {
        a3.acquire().await.map(drop)
    });
    let (t1_me, t2_me, t3_me) = (
        t1_me.await.unwrap(),
        t2_me.await.unwrap(),
        t3_me.await.unwrap(),
    );
    t1_go.send(()).unwrap();
    wait::queued(&mut raw, "b", 1).await;
    // Margins, not orderings: see the two-process test.
    tokio::time::sleep(Duration::from_millis(200)).await;
    t2_go.send(()).unwrap();
    wait::subscribers(&mut raw, "redisson_rwlock:{c}", 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (cycle, _) = close_cycle(t3_go, t3, FOUND_ACROSS_WITHIN, FOUND_ACROSS_WITHIN * 3).await;
    let steps: Vec<(Owner, &str, &str, &str)> = cycle
        .steps
        .iter()
        .map(|s| {
            (
                s.owner,
                s.service.as_str(),
                s.name.as_str(),
                s.kind.as_str(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        vec![
            (t3_me, "three", "a", "lock"),
            (t1_me, "one", "b", "fair"),
            (t2_me, "two", "c", "read"),
        ]
    );
    let ((t2_res, _), (t1_res, _)) = tokio::time::timeout(Duration::from_secs(10), async {
        (t2.await.unwrap(), t1.await.unwrap())
    })
    .await
    .expect("the others go on");
    t2_res.expect("T2 reads c");
    t1_res.expect("T1 takes b");
    for m in [m1, m2, m3] {
        m.shutdown().await;
    }
}

/// Two processes, tasks that take names in one global order and sometimes hold them past the
/// threshold, so that long waits are published and followed through both: no cycle, no report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cycle_no_report_across_processes_with_long_waits() {
    let server = RedisServer::start();
    let managers = [
        manager(&server, |c| c.client_name("p1")).await,
        manager(&server, |c| c.client_name("p2")).await,
    ];
    let false_reports = Arc::new(AtomicU32::new(0));
    let long_waits = Arc::new(AtomicU32::new(0));
    let mut all = Vec::new();
    for t in 0..6u64 {
        let mgr = managers[(t % 2) as usize].clone();
        let (false_reports, long_waits) = (false_reports.clone(), long_waits.clone());
        all.push(tokio::spawn(async move {
            let mut seed = 0x2545_F491_4F6C_DD1Du64 ^ (t + 1);
            let mut next = move || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(6) {
                let mut guards = Vec::new();
                for name in ["n0", "n1", "n2"] {
                    if next() % 3 == 0 {
                        continue;
                    }
                    let asked = Instant::now();
                    match mgr.lock(name).acquire().await {
                        Ok(g) => guards.push(g),
                        Err(LockError::Deadlock { .. }) => {
                            false_reports.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("{e}"),
                    }
                    if asked.elapsed() >= Duration::from_secs(1) {
                        long_waits.fetch_add(1, Ordering::Relaxed);
                    }
                }
                // Held up to 1.5 s: others' waits pass the threshold and are followed.
                tokio::time::sleep(Duration::from_millis(next() % 1500)).await;
                while let Some(g) = guards.pop() {
                    drop(g);
                }
            }
        }));
    }
    for task in all {
        task.await.unwrap();
    }
    assert_eq!(false_reports.load(Ordering::Relaxed), 0);
    // Waits did last past the threshold: the probe published and followed them.
    assert!(long_waits.load(Ordering::Relaxed) > 0);
    for m in managers {
        m.shutdown().await;
    }
}

/// A cycle left in place (report only) shows in its finder's client record: `clients()`, and
/// with the `cli` feature `lockman ls`, `lockman inspect` on a name of it and `lockman top`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reported_cycle_shows_in_the_client_record_ls_and_inspect() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    // A short watchdog timeout: the record is written every third of it.
    let mgr = manager(&server, |c| {
        c.deadlocks(Deadlocks::Report)
            .watchdog_timeout(Duration::from_millis(900))
    })
    .await;
    let (x, y, x2, y2) = (mgr.lock("x"), mgr.lock("y"), mgr.lock("x"), mgr.lock("y"));
    let (a_me, a_go, a) = party(async move { x.acquire().await }, async move {
        y.acquire().await.map(drop)
    });
    let b_line = line!() + 2;
    let (b_me, b_go, b) = party(async move { y2.acquire().await }, async move {
        x2.acquire().await.map(drop)
    });
    let (a_me, b_me) = (a_me.await.unwrap(), b_me.await.unwrap());
    a_go.send(()).unwrap();
    wait::subscribers(&mut raw, "redisson_lock__channel:{y}", 1).await;
    b_go.send(()).unwrap();
    let (at, a_line) = (file!(), b_line - 4);
    let want = format!("{b_me} of deadlock-test at {at}:{b_line}:");
    let want_too =
        format!(" waits for lock \"x\" held by {a_me} of deadlock-test, which at {at}:{a_line}:");
    let mut seen = None;
    for _ in 0..100 {
        let clients = mgr.clients().await.unwrap();
        let mine = clients.iter().find(|c| c.id == mgr.client_id().to_string());
        if let Some(d) = mine.and_then(|c| c.deadlocks.first()) {
            seen = Some(d.cycle.clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = seen.expect("a cycle in the record");
    assert!(
        seen.starts_with(&want) && seen.contains(&want_too),
        "{seen}"
    );
    assert!(
        seen.ends_with(&format!(
            " waits for lock \"y\" held by {b_me} of deadlock-test"
        )),
        "{seen}"
    );
    #[cfg(feature = "cli")]
    {
        let lockman = |args: &[&str]| {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_lockman"))
                .arg("--url")
                .arg(server.url())
                .args(args)
                .env_remove("LOCKMAN_URL")
                .env_remove("REDIS_URL")
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let ls = lockman(&["ls"]);
        assert!(ls.contains("  deadlock  ") && ls.contains(&seen), "{ls}");
        let inspect = lockman(&["inspect", "y"]);
        assert!(
            inspect.contains("deadlock: ") && inspect.contains(&seen),
            "{inspect}"
        );
        assert!(!lockman(&["inspect", "z"]).contains("deadlock"));
        // `top`'s frame has a row per recent cycle: its finder, then the cycle, cut to the
        // frame's width (its first holder id's start stays in).
        let top = lockman(&["top", "--once"]);
        let row = top
            .split("DEADLOCKS (last 10 min)\n")
            .nth(1)
            .and_then(|rows| rows.lines().next())
            .unwrap_or_default();
        let start: String = seen.chars().take(8).collect();
        assert!(
            row.contains("deadlock-test@") && row.contains(&format!(": {start}")),
            "{top}"
        );
    }
    // Both still wait (reported, not broken): end them.
    a.abort();
    b.abort();
    mgr.shutdown().await;
}

/// On a Redis Cluster the locks of a cycle live on different masters, the waits hashes on the
/// records' one: followed all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_cycle_through_two_processes_is_found() {
    let cluster = support::cluster::Cluster::start(3, 0);
    let start =
        |name: &'static str| LockManager::start(Config::cluster(cluster.urls()).client_name(name));
    let (east, west) = (start("east").await.unwrap(), start("west").await.unwrap());
    let (x, y) = ("cx", "cy");
    assert_ne!(cluster.owner_of(x), cluster.owner_of(y), "two masters");
    let (x1, y1, x2, y2) = (east.lock(x), east.lock(y), west.lock(x), west.lock(y));
    let (a_me, a_go, a) = party(async move { x1.acquire().await }, async move {
        y1.acquire().await.map(drop)
    });
    let (b_me, b_go, b) = party(async move { y2.acquire().await }, async move {
        x2.acquire().await.map(drop)
    });
    let (a_me, b_me) = (a_me.await.unwrap(), b_me.await.unwrap());
    // Both close the cycle at once: which wait is the younger is not set here, so either may be
    // broken; exactly one is, its cycle names it first, and the other goes on.
    a_go.send(()).unwrap();
    b_go.send(()).unwrap();
    let both = tokio::time::timeout(FOUND_ACROSS_WITHIN * 3, async {
        (a.await.unwrap().0, b.await.unwrap().0)
    });
    let (a_res, b_res) = both.await.expect("the cycle is broken");
    let (cycle, broken, other) = match (a_res, b_res) {
        (Err(LockError::Deadlock { cycle }), Ok(())) => {
            (cycle, (a_me, "east", y), (b_me, "west", x))
        }
        (Ok(()), Err(LockError::Deadlock { cycle })) => {
            (cycle, (b_me, "west", x), (a_me, "east", y))
        }
        other => panic!("one deadlock and one grant, not {other:?}"),
    };
    let steps: Vec<(Owner, &str, &str)> = cycle
        .steps
        .iter()
        .map(|s| (s.owner, s.service.as_str(), s.name.as_str()))
        .collect();
    assert_eq!(steps, vec![broken, other]);
    east.shutdown().await;
    west.shutdown().await;
}

/// An ACL user without `~lockman_waits:*` still has its manager's own cycles broken; cycles
/// through other processes are not looked for (one warning), and locking goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_permission_for_waits_hashes_only_cycles_within_a_manager_are_found() {
    let user = "app on >pw ~app:* ~redisson_* ~lockman_client:* &* +@all";
    let server = RedisServer::start_with(support::Options {
        args: std::iter::once("--user".to_owned())
            .chain(user.split(' ').map(str::to_owned))
            .collect(),
        ..support::Options::default()
    });
    let url = format!("redis://app:pw@127.0.0.1:{}/0", server.port());
    let mut raw = server.conn();
    let start = |name: &'static str| LockManager::start(Config::new(url.clone()).client_name(name));
    let (east, west) = (start("east").await.unwrap(), start("west").await.unwrap());
    // Within one manager: broken as ever.
    let (x, y, x2, y2) = (
        east.lock("app:x"),
        east.lock("app:y"),
        east.lock("app:x"),
        east.lock("app:y"),
    );
    let (_a_me, a_go, a) = party(async move { x.acquire().await }, async move {
        y.acquire().await.map(drop)
    });
    let (_b_me, b_go, b) = party(async move { y2.acquire().await }, async move {
        x2.acquire().await.map(drop)
    });
    let (_, _) = (_a_me.await.unwrap(), _b_me.await.unwrap());
    a_go.send(()).unwrap();
    wait::subscribers(&mut raw, "redisson_lock__channel:{app:y}", 1).await;
    b_go.send(()).unwrap();
    let (b_res, _) = tokio::time::timeout(FOUND_WITHIN * 5, b)
        .await
        .unwrap()
        .unwrap();
    deadlock_of(b_res);
    a.await.unwrap().0.expect("A goes on");
    // Through two managers: not found; both waits run out, the first then lets go.
    let (x, y) = (east.lock("app:x"), west.lock("app:y"));
    let (x2, y2) = (west.lock("app:x"), east.lock("app:y"));
    let patience = Duration::from_millis(2500);
    let (_a_me, a_go, a) = party(async move { x.acquire().await }, async move {
        y2.try_acquire_for(patience).await.map(|g| g.is_some())
    });
    let (_b_me, b_go, b) = party(async move { y.acquire().await }, async move {
        x2.try_acquire_for(patience * 4).await.map(|g| g.is_some())
    });
    let (_, _) = (_a_me.await.unwrap(), _b_me.await.unwrap());
    a_go.send(()).unwrap();
    b_go.send(()).unwrap();
    let (a_res, _) = a.await.unwrap();
    let (b_res, _) = b.await.unwrap();
    assert!(matches!(a_res, Ok(false)), "{a_res:?}");
    assert!(matches!(b_res, Ok(true)), "{b_res:?}");
    let waits: Vec<String> = redis::cmd("KEYS")
        .arg("lockman_waits:*")
        .query(&mut raw)
        .unwrap();
    assert!(waits.is_empty(), "{waits:?}");
    east.shutdown().await;
    west.shutdown().await;
}

/// The steps of a cycle: owner, name and kind.
fn steps(cycle: &lockman::deadlock::Cycle) -> Vec<(Owner, &str, &str)> {
    cycle
        .steps
        .iter()
        .map(|s| (s.owner, s.name.as_str(), s.kind.as_str()))
        .collect()
}

/// A group lock's wait is a wait for each of its members' owners: A holds the group `ga` over
/// {m1, m2} and waits for `gb` over {n1}; B holds `gb` over {n1, n2} and waits for `ga` over
/// {m2, m3}, sharing m2 with A's hold. B's wait closes the cycle and fails, naming both group
/// waits; A goes on. Catches: group holds or waits left out of the graph (no edge: both wait
/// forever), an edge for a shared member missed by the intersection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tasks_through_two_group_locks_sharing_members_the_younger_wait_fails() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, |c| c).await;
    let (a_holds, a_wants) = (
        mgr.group_lock("ga", ["m1", "m2"]).unwrap(),
        mgr.group_lock("gb", ["n1"]).unwrap(),
    );
    let (b_holds, b_wants) = (
        mgr.group_lock("gb", ["n2", "n1"]).unwrap(),
        mgr.group_lock("ga", ["m3", "m2"]).unwrap(),
    );
    let (a_me, a_go, a) = party(async move { a_holds.acquire().await }, async move {
        a_wants.acquire().await.map(drop)
    });
    let (b_me, b_go, b) = party(async move { b_holds.acquire().await }, async move {
        b_wants.acquire().await.map(drop)
    });
    let (a_me, b_me) = (a_me.await.unwrap(), b_me.await.unwrap());
    a_go.send(()).unwrap();
    wait::subscribers(&mut raw, "redisson_lock__channel:{gb}", 1).await;
    let (cycle, _) = close_cycle(b_go, b, FOUND_WITHIN, FOUND_WITHIN * 5).await;
    assert_eq!(
        steps(&cycle),
        vec![(b_me, "ga", "group"), (a_me, "gb", "group")]
    );
    let a_res = goes_on("A", a, Duration::from_secs(10)).await;
    a_res.expect("A takes gb");
    mgr.shutdown().await;
}

/// A cycle through a group lock and a plain lock: A holds the group `g` over {m1} and waits
/// for the lock `x`; B holds `x` and waits for `g` over {m1, m9}. Found as a cycle of plain
/// locks is, the younger wait (B's, for the group) failing. Catches: a group hold in no edge
/// of a group wait, or a plain wait's edge to a group hold on another key confused with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_through_a_group_lock_and_a_plain_lock_is_found() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, |c| c).await;
    let (g, x) = (mgr.group_lock("g", ["m1"]).unwrap(), mgr.lock("x"));
    let (x2, g2) = (mgr.lock("x"), mgr.group_lock("g", ["m1", "m9"]).unwrap());
    let (a_me, a_go, a) = party(async move { g.acquire().await }, async move {
        x.acquire().await.map(drop)
    });
    let (b_me, b_go, b) = party(async move { x2.acquire().await }, async move {
        g2.acquire().await.map(drop)
    });
    let (a_me, b_me) = (a_me.await.unwrap(), b_me.await.unwrap());
    a_go.send(()).unwrap();
    wait::subscribers(&mut raw, "redisson_lock__channel:{x}", 1).await;
    let (cycle, _) = close_cycle(b_go, b, FOUND_WITHIN, FOUND_WITHIN * 5).await;
    assert_eq!(
        steps(&cycle),
        vec![(b_me, "g", "group"), (a_me, "x", "lock")]
    );
    let a_res = goes_on("A", a, Duration::from_secs(10)).await;
    a_res.expect("A takes x");
    mgr.shutdown().await;
}

/// The same cycle across two processes: east's A holds the group `g` over {m1, m2} and waits
/// for `x`; west's B holds `x` and waits for `g` over {m2}. West's probe follows B's group
/// wait through the group hash's member fields to east's A, whose waits hash says it waits for
/// `x`: the younger wait (B's) fails, after the long-wait threshold. Catches: a group wait not
/// published or not read (its kind unknown to the reader), its members not carried, the group
/// hash's fields not read as holders per member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_a_cycle_through_a_group_lock_is_found() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let east = manager(&server, |c| c.client_name("east")).await;
    let west = manager(&server, |c| c.client_name("west")).await;
    let (g, x) = (east.group_lock("g", ["m1", "m2"]).unwrap(), east.lock("x"));
    let (x2, g2) = (west.lock("x"), west.group_lock("g", ["m2"]).unwrap());
    let (a_me, a_go, a) = party(async move { g.acquire().await }, async move {
        x.acquire().await.map(drop)
    });
    let (b_me, b_go, b) = party(async move { x2.acquire().await }, async move {
        g2.acquire().await.map(drop)
    });
    let (a_me, b_me) = (a_me.await.unwrap(), b_me.await.unwrap());
    a_go.send(()).unwrap();
    wait::subscribers(&mut raw, "redisson_lock__channel:{x}", 1).await;
    // A margin for the server-clock order of the two waits, as in the test above.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (cycle, took) = close_cycle(b_go, b, FOUND_ACROSS_WITHIN, FOUND_ACROSS_WITHIN * 3).await;
    assert!(took >= Duration::from_secs(1), "found after {took:?}");
    let steps: Vec<(Owner, uuid::Uuid, &str, &str)> = cycle
        .steps
        .iter()
        .map(|s| (s.owner, s.client, s.name.as_str(), s.kind.as_str()))
        .collect();
    assert_eq!(
        steps,
        vec![
            (b_me, west.client_id(), "g", "group"),
            (a_me, east.client_id(), "x", "lock"),
        ]
    );
    let a_res = goes_on("A", a, Duration::from_secs(10)).await;
    a_res.expect("A takes x");
    east.shutdown().await;
    west.shutdown().await;
}

/// Across processes, a group wait behind a member it does not share is no cycle: east's A
/// holds `g` over {m1} and waits for `x`; west's B holds `x` and waits for `g` over {m2},
/// which west's C holds. Nothing is reported; once C lets go, all finish. Catches: the probe
/// taking every holder of the group hash for a blocker of B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_processes_a_group_wait_behind_an_unshared_member_is_no_cycle() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let east = manager(&server, |c| c.client_name("east")).await;
    let west = manager(&server, |c| c.client_name("west")).await;
    let c_guard = west
        .group_lock("g", ["m2"])
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let (g, x) = (east.group_lock("g", ["m1"]).unwrap(), east.lock("x"));
    let (x2, g2) = (west.lock("x"), west.group_lock("g", ["m2"]).unwrap());
    let (_a_me, a_go, a) = party(async move { g.acquire().await }, async move {
        x.acquire().await.map(drop)
    });
    let (_b_me, b_go, b) = party(async move { x2.acquire().await }, async move {
        g2.acquire().await.map(drop)
    });
    let _ = (_a_me.await.unwrap(), _b_me.await.unwrap());
    b_go.send(()).unwrap();
    wait::subscribers(&mut raw, "redisson_lock__channel:{g}", 1).await;
    a_go.send(()).unwrap();
    wait::subscribers(&mut raw, "redisson_lock__channel:{x}", 1).await;
    // Both waits long past the threshold: several probes of each side follow them.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!a.is_finished() && !b.is_finished(), "a wait ended");
    c_guard.release().await.unwrap();
    for t in [b, a] {
        let (res, _) = tokio::time::timeout(Duration::from_secs(10), t)
            .await
            .expect("every task finishes")
            .unwrap();
        res.expect("no deadlock reported");
    }
    east.shutdown().await;
    west.shutdown().await;
}
