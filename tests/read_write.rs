//! The read-write lock: layout and messages, sharing, downgrade, no upgrade, per-hold read
//! leases, write re-entry, wake-all on write release, exclusion counted exactly.

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockManager};
use redis::{AsyncCommands, Commands};
use support::{RedisServer, commands::command_calls, commands::reset_stats, wait::eventually};

async fn manager(server: &RedisServer) -> LockManager {
    LockManager::start(Config::new(server.url()))
        .await
        .expect("manager starts")
}

fn hash(raw: &mut redis::Connection, key: &str) -> HashMap<String, String> {
    raw.hgetall(key).unwrap()
}

#[tokio::test]
async fn layout_downgrade_and_messages() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let mut sub = server.client().get_connection().unwrap();
    let mut messages = sub.as_pubsub();
    messages.subscribe("redisson_rwlock:{doc}").unwrap();
    messages
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();

    let rw = mgr.read_write_lock("doc");
    let h = rw.holder_id();
    let w = rw.write().acquire().await.unwrap();
    assert_eq!(
        hash(&mut raw, "doc"),
        HashMap::from([
            ("mode".into(), "write".into()),
            (format!("{h}:write"), "1".into())
        ])
    );
    // Downgrade: the writer also reads.
    let r = rw.read().acquire().await.unwrap();
    assert_eq!(hash(&mut raw, "doc").get(&h).map(String::as_str), Some("1"));
    let timeout_key = format!("{{doc}}:{h}:rwlock_timeout:1");
    let ttl: i64 = raw.pttl(&timeout_key).unwrap();
    assert!(
        ttl > 29_000 && ttl <= 30_000,
        "read hold's timeout key {ttl}"
    );
    assert_eq!(rw.write().hold_count().await.unwrap(), 1);
    assert_eq!(rw.read().hold_count().await.unwrap(), 1);

    // Releasing the write side keeps the read side: mode becomes read, nothing is published.
    w.release().await.unwrap();
    assert_eq!(
        hash(&mut raw, "doc"),
        HashMap::from([("mode".into(), "read".into()), (h.clone(), "1".into())])
    );
    // Another reader may enter now; a writer may not.
    let other = mgr.read_write_lock("doc");
    let r2 = other
        .read()
        .try_acquire()
        .await
        .unwrap()
        .expect("readers share");
    assert!(other.write().try_acquire().await.unwrap().is_none());
    r2.release().await.unwrap();
    r.release().await.unwrap();
    assert!(!raw.exists::<_, bool>("doc").unwrap());
    assert!(!raw.exists::<_, bool>(&timeout_key).unwrap());
    let msg = messages.get_message().unwrap();
    assert_eq!(
        msg.get_payload::<String>().unwrap(),
        "0",
        "a reader's final release: wake one"
    );

    let w = rw.write().acquire().await.unwrap();
    w.release().await.unwrap();
    let msg = messages.get_message().unwrap();
    assert_eq!(
        msg.get_payload::<String>().unwrap(),
        "1",
        "a writer's final release: wake all"
    );
}

#[tokio::test]
async fn a_reader_cannot_upgrade_and_does_not_deadlock() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let rw = mgr.read_write_lock("up");
    let r = rw.read().acquire().await.unwrap();
    let started = Instant::now();
    let w = rw
        .write()
        .try_acquire_for(Duration::from_millis(200))
        .await
        .unwrap();
    assert!(w.is_none(), "no upgrade");
    // A deadlock would never return; 2 s leaves a loaded machine room past the 200 ms wait.
    assert!(started.elapsed() < Duration::from_secs(2));
    r.release().await.unwrap();
    let w = rw
        .write()
        .try_acquire()
        .await
        .unwrap()
        .expect("free for the writer now");
    w.release().await.unwrap();
}

#[tokio::test]
async fn the_ttl_follows_the_longest_remaining_read_lease() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let (a, b) = (mgr.read_write_lock("leases"), mgr.read_write_lock("leases"));
    let ra = a
        .read()
        .acquire_with_lease(Duration::from_millis(3_000))
        .await
        .unwrap();
    let rb = b
        .read()
        .acquire_with_lease(Duration::from_millis(10_000))
        .await
        .unwrap();
    let ttl: i64 = raw.pttl("leases").unwrap();
    assert!(
        ttl > 9_000,
        "the hash lives as long as the longest read hold: {ttl}"
    );
    rb.release().await.unwrap();
    let ttl: i64 = raw.pttl("leases").unwrap();
    assert!(
        ttl > 2_000 && ttl <= 3_000,
        "now the remaining reader's lease: {ttl}"
    );
    drop(ra);
}

#[tokio::test]
async fn a_waiting_writer_enters_when_the_last_read_lease_runs_out() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let other = manager(&server).await;
    let started = Instant::now();
    let _r1 = other
        .read_write_lock("expiring")
        .read()
        .acquire_with_lease(Duration::from_millis(300))
        .await
        .unwrap();
    let _r2 = other
        .read_write_lock("expiring")
        .read()
        .acquire_with_lease(Duration::from_millis(500))
        .await
        .unwrap();
    reset_stats(&mut raw);
    // Bounded: without its TTL retry the writer would wait for an unlock message that never
    // comes.
    let w = tokio::time::timeout(
        Duration::from_secs(10),
        mgr.read_write_lock("expiring").write().acquire(),
    )
    .await
    .expect("the writer never got in: no retry at the readers' TTL")
    .unwrap();
    let took = started.elapsed();
    // Not before 500 ms: the first reader's lease (300 ms) running out leaves the second's,
    // and a writer let in then (the hash expiring with the first lease) fails here; timers
    // never fire early, so no load breaks this side. Within 3 s: woken by its retry at the
    // readers' TTL (about 500 ms on an idle machine); one that waited for a message or a
    // fallback of the watchdog timeout (30 s) fails here, and 2.5 s is room for a loaded
    // machine (650 ms failed once at load 16).
    assert!(
        took >= Duration::from_millis(500) && took <= Duration::from_secs(3),
        "{took:?}"
    );
    // Nobody released: the TTL woke the writer. A reader's hold is settled when its lease ends,
    // counted from its request; on a loaded machine that settle can reach Redis just before
    // Redis's own expiry and free the lock with one message, so one is allowed (the timing above
    // is what shows the writer did not wait for a release).
    assert!(
        command_calls(&mut raw, "publish") <= 1,
        "no release published: the TTL woke the writer"
    );
    w.release().await.unwrap();
}

#[tokio::test]
async fn write_reentry_adds_the_lease() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let w = mgr.read_write_lock("re").write();
    let g1 = w
        .acquire_with_lease(Duration::from_millis(2_000))
        .await
        .unwrap();
    let g2 = w
        .acquire_with_lease(Duration::from_millis(3_000))
        .await
        .unwrap();
    let ttl: i64 = raw.pttl("re").unwrap();
    assert!(ttl > 4_800 && ttl <= 5_000, "2 s + 3 s: {ttl}");
    assert_eq!(w.hold_count().await.unwrap(), 2);
    g2.release().await.unwrap();
    g1.release().await.unwrap();
    assert!(!raw.exists::<_, bool>("re").unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_readers_enter_together_when_the_writer_releases() {
    let server = RedisServer::start();
    let (writer_mgr, readers_mgr) = (manager(&server).await, manager(&server).await);
    let w = writer_mgr
        .read_write_lock("crowd")
        .write()
        .acquire()
        .await
        .unwrap();
    let (inside, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    // Each reader stays inside until told to leave: all 20 inside at once is the sharing,
    // whatever the load (a reader's time inside cannot run out before the last one enters).
    let leave = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut raw = server.conn();
    reset_stats(&mut raw);
    let mut readers = Vec::new();
    for _ in 0..20 {
        let lock = readers_mgr.read_write_lock("crowd").read();
        let (inside, most, leave) = (inside.clone(), most.clone(), leave.clone());
        readers.push(tokio::spawn(async move {
            let g = lock.acquire().await.unwrap();
            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            while !leave.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            inside.fetch_sub(1, Ordering::SeqCst);
            g.release().await.unwrap();
        }));
    }
    // Every reader has tried (readers do not queue behind each other: 20 attempts) and is
    // parked.
    support::wait::calls_reach(&mut raw, "evalsha", 20).await;
    support::wait::quiet(&mut raw).await;
    assert_eq!(
        most.load(Ordering::SeqCst),
        0,
        "no reader while the writer holds"
    );
    let released = Instant::now();
    w.release().await.unwrap();
    support::wait::until("all 20 readers inside at once", || {
        inside.load(Ordering::SeqCst) == 20
    })
    .await;
    let took = released.elapsed();
    // One wake per message would let in one reader: the others would wait for their retry at
    // the writer's 30 s lease (readers entering publish nothing).
    assert!(took < Duration::from_secs(5), "{took:?}");
    leave.store(true, Ordering::SeqCst);
    for r in readers {
        r.await.unwrap();
    }
    assert_eq!(most.load(Ordering::SeqCst), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_readers_and_writers_keep_the_counter_exact() {
    let server = RedisServer::start();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let conn = server.async_conn().await;
    let writes = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..16u64 {
        let rw = if t % 2 == 0 { &a } else { &b }.read_write_lock("mixed");
        let (mut conn, writes) = (conn.clone(), writes.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..100u64 {
                if (t * 31 + round * 17) % 5 == 0 {
                    let g = rw.write().acquire().await.unwrap();
                    let n: u64 = conn
                        .get::<_, Option<u64>>("counter")
                        .await
                        .unwrap()
                        .unwrap_or(0);
                    tokio::task::yield_now().await;
                    let _: () = conn.set("counter", n + 1).await.unwrap();
                    writes.fetch_add(1, Ordering::SeqCst);
                    g.release().await.unwrap();
                } else {
                    let g = rw.read().acquire().await.unwrap();
                    let before: Option<u64> = conn.get("counter").await.unwrap();
                    tokio::task::yield_now().await;
                    let after: Option<u64> = conn.get("counter").await.unwrap();
                    assert_eq!(before, after, "a writer wrote while a reader held the lock");
                    g.release().await.unwrap();
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total: u64 = conn.clone().get("counter").await.unwrap();
    assert_eq!(total, writes.load(Ordering::SeqCst) as u64);
    assert!(total >= 200, "{total} writes");
    let exists: bool = conn.clone().exists("mixed").await.unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn the_watchdog_renews_read_holds_and_their_timeout_keys() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let config = Config::new(server.url()).watchdog_timeout(Duration::from_millis(600));
    let mgr = LockManager::start(config).await.unwrap();
    let rw = mgr.read_write_lock("renewed");
    let r = rw.read().acquire().await.unwrap();
    let w = mgr
        .read_write_lock("renewed-w")
        .write()
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    let key = format!("{{renewed}}:{}:rwlock_timeout:1", rw.holder_id());
    let ttl: i64 = raw.pttl(&key).unwrap();
    assert!(ttl > 0 && ttl <= 600, "read timeout key renewed: {ttl}");
    assert!(raw.exists::<_, bool>("renewed").unwrap());
    assert!(
        raw.exists::<_, bool>("renewed-w").unwrap(),
        "write holds are renewed too"
    );
    assert!(!r.is_lost() && !w.is_lost());
    r.release().await.unwrap();
    w.release().await.unwrap();
    assert!(
        eventually(Duration::from_secs(1), || !raw
            .exists::<_, bool>(&key)
            .unwrap())
        .await
    );
}

#[tokio::test]
async fn a_request_of_another_kind_is_refused_by_an_actor() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let actor = mgr.lock_actor("k").await.unwrap(); // the reentrant lock's actor
    let acquire = lockman::actix::Acquire {
        holder: mgr.lock("k").holder_id().into(),
        lease: None,
        wait: lockman::actix::Wait::No,
        kind: lockman::LockKind::Write,
        owner: Some(lockman::deadlock::current()),
        site: Some(lockman::deadlock::site()),
    };
    let err = actor.send(acquire).await.unwrap().unwrap_err();
    assert!(matches!(err, LockError::InvalidArgument { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_lets_local_waiting_readers_in_at_once() {
    // A write release that leaves its holder reading publishes nothing (protocol.md); the lock
    // actor wakes its own waiters, and a reader let in brings the other readers with it.
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let editor = mgr.read_write_lock("down");
    let w = editor.write().acquire().await.unwrap();
    let mut readers = Vec::new();
    for _ in 0..3 {
        let lock = mgr.read_write_lock("down").read();
        readers.push(tokio::spawn(async move {
            let g = lock.acquire().await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            g.release().await.unwrap();
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = editor.read().acquire().await.unwrap();
    let downgraded = Instant::now();
    w.release().await.unwrap();
    for reader in readers {
        tokio::time::timeout(Duration::from_secs(2), reader)
            .await
            .expect("not left to the 30 s TTL")
            .unwrap();
    }
    // Left to the 30 s TTL otherwise: 3 s leaves a loaded machine room.
    assert!(
        downgraded.elapsed() < Duration::from_secs(3),
        "{:?}",
        downgraded.elapsed()
    );
    r.release().await.unwrap();
}

#[tokio::test]
async fn force_unlock_of_one_side_leaves_the_other_mode_alone() {
    // As Redisson's: a read lock's force unlock deletes the lock only in read mode, a write
    // lock's only in write mode.
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let rw = mgr.read_write_lock("fm");
    let w = rw.write().acquire().await.unwrap();
    assert!(!rw.read().force_unlock().await.unwrap());
    let mode: String = raw.hget("fm", "mode").unwrap();
    assert_eq!(mode, "write");
    assert!(rw.write().force_unlock().await.unwrap());
    assert!(!raw.exists::<_, bool>("fm").unwrap());
    drop(w);
    let r = mgr.read_write_lock("fm").read().acquire().await.unwrap();
    assert!(!rw.write().force_unlock().await.unwrap());
    assert!(raw.exists::<_, bool>("fm").unwrap());
    assert!(rw.read().force_unlock().await.unwrap());
    assert!(!raw.exists::<_, bool>("fm").unwrap());
    drop(r);
}

#[tokio::test]
async fn a_readers_last_release_ends_its_hold_while_others_still_read() {
    // The read release script leaves the lock to the other readers; the releasing reader's hold
    // must end here at once, so that its next acquire and release run at once too.
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let (ra, rb) = (a.read_write_lock("share"), b.read_write_lock("share"));
    let held_b = rb.read().acquire().await.unwrap();
    for _ in 0..3 {
        ra.read().acquire().await.unwrap().release().await.unwrap();
        let field: bool = raw.hexists("share", ra.read().holder_id()).unwrap();
        assert!(!field, "the reader's field outlived its release");
        assert!(!ra.read().is_held().await.unwrap());
    }
    assert!(rb.read().is_held().await.unwrap());
    held_b.release().await.unwrap();
    assert!(!raw.exists::<_, bool>("share").unwrap());
}

/// Readers and writers of one manager wait on one name while another manager holds its write
/// side; after that release, a writer of theirs that gets in drops the others' pending wake-ups
/// (`writer_in`): they must still all get in, at the writers' later releases, with exclusion
/// counted exactly (a writer alone inside; a counter a reader reads twice unchanged, written
/// once per write hold), and no reader waits behind more write holds than there are writers
/// queued with it (each writer's next round queues behind every waiting reader). All within
/// 20 s: a wake-up lost for good would leave a waiter to the 30 s lease retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_local_waiters_all_get_in_after_a_foreign_write_release() {
    const WRITERS: usize = 4;
    const ROUNDS: usize = 5;
    const READERS: usize = 6;
    let server = RedisServer::start();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let mut raw = server.conn();
    let held = a.read_write_lock("mix").write().acquire().await.unwrap();
    // (readers inside, writers inside), checked at every entry.
    let inside = Arc::new(std::sync::Mutex::new((0usize, 0usize)));
    let writes = Arc::new(AtomicUsize::new(0));
    let conn = server.async_conn().await;
    let mut writers = Vec::new();
    let mut readers = Vec::new();
    // Arrivals (each one's attempt done before the next is spawned): writer, reader, writer,
    // reader, writer, then the rest of the readers and the last writer, so that a writer is
    // both the oldest and the newest waiter.
    let order = "WRWRWRRRRW";
    assert_eq!(order.matches('W').count(), WRITERS);
    assert_eq!(order.matches('R').count(), READERS);
    for arrival in order.chars() {
        let rw = b.read_write_lock("mix");
        let (inside, writes, mut conn) = (inside.clone(), writes.clone(), conn.clone());
        if arrival == 'W' {
            writers.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let g = rw.write().acquire().await.unwrap();
                    {
                        let mut now = inside.lock().unwrap();
                        assert_eq!(*now, (0, 0), "a writer got in beside others");
                        now.1 = 1;
                    }
                    let n: u64 = conn.get::<_, Option<u64>>("n").await.unwrap().unwrap_or(0);
                    tokio::task::yield_now().await;
                    let _: () = conn.set("n", n + 1).await.unwrap();
                    writes.fetch_add(1, Ordering::SeqCst);
                    inside.lock().unwrap().1 = 0;
                    g.release().await.unwrap();
                }
            }));
        } else {
            readers.push(tokio::spawn(async move {
                let g = rw.read().acquire().await.unwrap();
                {
                    let mut now = inside.lock().unwrap();
                    assert_eq!(now.1, 0, "a reader got in beside a writer");
                    now.0 += 1;
                }
                let ahead = writes.load(Ordering::SeqCst);
                let before: Option<u64> = conn.get("n").await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                let after: Option<u64> = conn.get("n").await.unwrap();
                assert_eq!(before, after, "written while a reader held the lock");
                inside.lock().unwrap().0 -= 1;
                g.release().await.unwrap();
                ahead
            }));
        }
        // Every waiter so far has tried and is parked behind the foreign writer.
        support::wait::quiet(&mut raw).await;
    }
    assert_eq!(writes.load(Ordering::SeqCst), 0);
    held.release().await.unwrap();
    let all = async {
        let mut ahead = Vec::new();
        for r in readers {
            ahead.push(r.await.unwrap());
        }
        for w in writers {
            w.await.unwrap();
        }
        ahead
    };
    let ahead = tokio::time::timeout(Duration::from_secs(20), all)
        .await
        .expect("every waiter got in within 20 s");
    assert!(
        ahead.iter().all(|&n| n <= WRITERS),
        "write holds before each reader: {ahead:?}"
    );
    let total: u64 = raw.get("n").unwrap();
    assert_eq!(total, (WRITERS * ROUNDS) as u64);
    assert_eq!(writes.load(Ordering::SeqCst), WRITERS * ROUNDS);
    assert!(!raw.exists::<_, bool>("mix").unwrap(), "nothing left held");
}
