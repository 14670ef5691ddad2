//! Lock requests whose reply never came are sent again and counted once, with no key written to
//! remember them (docs/protocol.md, "Sent again"): each carries the count its holder had before
//! it, and a resend finds the count its first run left. The server is paused (`CLIENT PAUSE`)
//! past the response time-out, so the first request runs late, after its reply was given up, and
//! the resend runs right behind it.

mod support;

use std::time::Duration;

use lockman::{Config, LockManager};
use redis::Commands;
use support::{RedisServer, commands::command_calls, commands::reset_stats, wait};

const RESPONSE: Duration = Duration::from_millis(500);
/// Longer than the response time-out, shorter than two.
const STALL: f64 = 0.9;

async fn manager(server: &RedisServer) -> LockManager {
    // The default 30 s watchdog: no renewal runs during a test.
    LockManager::start(Config::new(server.url()).response_timeout(RESPONSE))
        .await
        .unwrap()
}

/// The count of `field` in the hash `key` (`None`: no field).
fn count(raw: &mut redis::Connection, key: &str, field: &str) -> Option<String> {
    raw.hget(key, field).unwrap()
}

#[tokio::test]
async fn a_reentrant_acquire_sent_again_counts_once() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let lock = mgr.lock("again:acquire");
    let first = lock.acquire().await.unwrap();
    reset_stats(&mut raw);
    let stall = server.stall(STALL);
    // Its reply times out; the waiter waits for the resend's answer.
    let second = lock.acquire().await.unwrap();
    stall.join().unwrap();
    assert!(
        command_calls(&mut raw, "evalsha") >= 2,
        "the acquire was sent again"
    );
    let id = lock.holder_id();
    assert_eq!(count(&mut raw, "again:acquire", &id).as_deref(), Some("2"));
    second.release().await.unwrap();
    assert_eq!(count(&mut raw, "again:acquire", &id).as_deref(), Some("1"));
    first.release().await.unwrap();
    let exists: bool = raw.exists("again:acquire").unwrap();
    assert!(!exists, "two releases free two holds");
}

#[tokio::test]
async fn a_reentrant_release_sent_again_counts_once() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let lock = mgr.lock("again:release");
    let first = lock.acquire().await.unwrap();
    let second = lock.acquire().await.unwrap();
    reset_stats(&mut raw);
    let stall = server.stall(STALL);
    let err = first.release().await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    stall.join().unwrap();
    // The resend is answered once the stall is over.
    let resent = support::wait::eventually(Duration::from_secs(3), || {
        command_calls(&mut raw, "evalsha") >= 2
    })
    .await;
    assert!(resent, "the release was sent again");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let id = lock.holder_id();
    assert_eq!(
        count(&mut raw, "again:release", &id).as_deref(),
        Some("1"),
        "one release applied"
    );
    assert!(!second.is_lost());
    second.release().await.unwrap();
    let exists: bool = raw.exists("again:release").unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn a_fenced_acquire_sent_again_takes_one_token() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let lock = mgr.fenced_lock("again:fenced");
    reset_stats(&mut raw);
    let stall = server.stall(STALL);
    let guard = lock.acquire().await.unwrap();
    stall.join().unwrap();
    assert!(
        command_calls(&mut raw, "evalsha") >= 2,
        "the acquire was sent again"
    );
    let id = lock.holder_id();
    assert_eq!(count(&mut raw, "again:fenced", &id).as_deref(), Some("1"));
    // The guard's token is the counter's: the resend took none of its own.
    let counter: u64 = raw.get("redisson_lock_token:{again:fenced}").unwrap();
    assert_eq!(guard.token(), counter);
    guard.release().await.unwrap();
    let exists: bool = raw.exists("again:fenced").unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn a_read_acquire_sent_again_counts_once() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let rw = mgr.read_write_lock("again:rw");
    let read = rw.read();
    let first = read.acquire().await.unwrap();
    reset_stats(&mut raw);
    let stall = server.stall(STALL);
    let second = read.acquire().await.unwrap();
    stall.join().unwrap();
    assert!(
        command_calls(&mut raw, "evalsha") >= 2,
        "the acquire was sent again"
    );
    let id = rw.holder_id();
    assert_eq!(count(&mut raw, "again:rw", &id).as_deref(), Some("2"));
    // One timeout key per read hold, indexed by the count.
    let timeout = |i: u32| format!("{{again:rw}}:{id}:rwlock_timeout:{i}");
    let (one, two, three): (bool, bool, bool) = (
        raw.exists(timeout(1)).unwrap(),
        raw.exists(timeout(2)).unwrap(),
        raw.exists(timeout(3)).unwrap(),
    );
    assert_eq!((one, two, three), (true, true, false));
    second.release().await.unwrap();
    first.release().await.unwrap();
    let exists: bool = raw.exists("again:rw").unwrap();
    assert!(!exists);
}

/// Every key on the server.
fn keyspace(raw: &mut redis::Connection) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(raw).unwrap();
    keys.sort();
    keys
}

fn no_latch(raw: &mut redis::Connection, when: &str) {
    let keys = keyspace(raw);
    let latches: Vec<&String> = keys
        .iter()
        .filter(|k| k.starts_with("redisson_unlock_latch:"))
        .collect();
    assert!(latches.is_empty(), "{when}: {latches:?} in {keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lock_operation_writes_a_latch_key() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;

    // Reentrant: acquire, re-entry, releases.
    let lock = mgr.lock("mix:reentrant");
    let g1 = lock.acquire().await.unwrap();
    let g2 = lock.acquire().await.unwrap();
    no_latch(&mut raw, "reentrant held twice");
    g2.release().await.unwrap();
    g1.release().await.unwrap();

    // A local hand-off: the release grants the lock to the waiter in the same script.
    let (a, b) = (mgr.lock("mix:hand-off"), mgr.lock("mix:hand-off"));
    let held = a.acquire().await.unwrap();
    reset_stats(&mut raw);
    let waiting = tokio::spawn(async move { b.acquire().await });
    // b has made both its attempts (the first, and the one once subscribed) and is parked.
    wait::calls_reach(&mut raw, "evalsha", 2).await;
    wait::quiet(&mut raw).await;
    held.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(command_calls(&mut raw, "publish"), 0, "handed off");
    no_latch(&mut raw, "after a hand-off");
    got.release().await.unwrap();

    // Fair: a holder, a queued waiter, the turn passed on.
    let fair = mgr.fair_lock("mix:fair");
    let f1 = fair.acquire().await.unwrap();
    let next = mgr.fair_lock("mix:fair");
    let queued = tokio::spawn(async move { next.acquire().await });
    wait::queued(&mut raw, "mix:fair", 1).await;
    no_latch(&mut raw, "fair held, a waiter queued");
    f1.release().await.unwrap();
    let f2 = tokio::time::timeout(Duration::from_secs(5), queued)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    f2.release().await.unwrap();

    // Read-write: two readers (one re-entering), then a writer.
    let rw = mgr.read_write_lock("mix:rw");
    let other = mgr.read_write_lock("mix:rw");
    let r1 = rw.read().acquire().await.unwrap();
    let r2 = rw.read().acquire().await.unwrap();
    let r3 = other.read().acquire().await.unwrap();
    no_latch(&mut raw, "three read holds");
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    r3.release().await.unwrap();
    let w = rw.write().acquire().await.unwrap();
    let w2 = rw.write().acquire().await.unwrap();
    no_latch(&mut raw, "write held twice");
    w2.release().await.unwrap();
    w.release().await.unwrap();

    // Fenced.
    let fenced = mgr.fenced_lock("mix:fenced");
    let t1 = fenced.acquire().await.unwrap();
    let t2 = fenced.acquire().await.unwrap();
    assert!(t2.token() > t1.token());
    no_latch(&mut raw, "fenced held twice");
    t2.release().await.unwrap();
    t1.release().await.unwrap();

    // A single attempt on a busy lock.
    let busy = mgr.lock("mix:busy");
    let holder = busy.acquire().await.unwrap();
    assert!(mgr.lock("mix:busy").try_acquire().await.unwrap().is_none());
    holder.release().await.unwrap();

    no_latch(&mut raw, "after every kind");
    // Only the fenced lock's counter is left (and the manager's client record, written at
    // its first hold).
    let left: Vec<String> = keyspace(&mut raw)
        .into_iter()
        .filter(|k| !k.starts_with("lockman_client:{lockman}"))
        .collect();
    assert_eq!(left, vec!["redisson_lock_token:{mix:fenced}"]);
}

#[tokio::test]
async fn an_acl_user_without_the_latch_keys_takes_every_kind_of_lock() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    // The lock names and their derived keys, not `~redisson_unlock_latch:*`.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("locks")
        .arg("on")
        .arg(">pw")
        .arg("~acl:*")
        .arg("~redisson_lock*")
        .arg("~redisson_rwlock:*")
        .arg("~{acl:rw}*")
        .arg("&*")
        .arg("+@all")
        .query(&mut raw)
        .unwrap();
    let url = format!("redis://locks:pw@127.0.0.1:{}/", server.port());
    let mgr = LockManager::start(Config::new(url).response_timeout(RESPONSE))
        .await
        .unwrap();
    let lock = mgr.lock("acl:reentrant");
    let g1 = lock.acquire().await.unwrap();
    let g2 = lock.acquire().await.unwrap();
    g2.release().await.unwrap();
    g1.release().await.unwrap();
    let fenced = mgr.fenced_lock("acl:fenced").acquire().await.unwrap();
    fenced.release().await.unwrap();
    let fair = mgr.fair_lock("acl:fair").acquire().await.unwrap();
    fair.release().await.unwrap();
    let rw = mgr.read_write_lock("acl:rw");
    let read = rw.read().acquire().await.unwrap();
    read.release().await.unwrap();
    let write = rw.write().acquire().await.unwrap();
    write.release().await.unwrap();
    no_latch(&mut raw, "after every kind");
}
