//! The Redis that users run: TLS (certificates made at test time), ACL users, unix sockets and
//! replica sync, each against real servers; every way of failing to connect as a typed error
//! within the connect timeout; passwords never printed.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockManager, TlsFailure};
use redis::AsyncCommands;
use support::certs::TestCerts;
use support::{Options, RedisServer, locks::count_rounds, primary_and_replica};

const CONNECT: Duration = Duration::from_secs(2);
/// How much later than the connect timeout a failed start may end (two connection attempts,
/// scheduling on a busy 2-core machine).
const SLACK: Duration = Duration::from_millis(2500);

/// Every tracing event of this test binary, at every level, in one buffer: what lockman logs
/// anywhere in these tests must never show a password.
fn logs() -> Arc<Mutex<Vec<u8>>> {
    support::logs::global(tracing::Level::TRACE)
}

/// ACL users: `app` may do everything; each other one lacks one thing lockman needs.
fn acl_users() -> Vec<String> {
    let users = [
        "app on >app-pw ~* &* +@all",
        "noevalsha on >pw ~* &* +@all -evalsha",
        "noscript on >pw ~* &* +@all -script",
        "nochannels on >pw ~* resetchannels +@all",
        "nopublish on >pw ~* &* +@all -publish",
        "appkeys on >pw ~app:* ~redisson_lock* ~redisson_unlock_latch:* &* +@all",
    ];
    users
        .iter()
        .flat_map(|u| std::iter::once("--user".to_owned()).chain(u.split(' ').map(str::to_owned)))
        .collect()
}

fn tls_server(certs: &Arc<TestCerts>, auth_clients: bool) -> RedisServer {
    RedisServer::start_with(Options {
        tls: Some(certs.clone()),
        tls_auth_clients: auth_clients,
        args: acl_users(),
        ..Options::default()
    })
}

/// `rediss://user:password@localhost:<port>/0`
fn tls_url(server: &RedisServer, user: &str, password: &str) -> String {
    format!("rediss://{user}:{password}@localhost:{}/0", server.port())
}

fn tls_config(url: String, certs: &TestCerts) -> Config {
    Config::new(url)
        .tls_ca_pem(certs.ca_pem.clone())
        .connect_timeout(CONNECT)
}

/// Starts a manager expecting failure; returns the error and how long it took.
async fn failed_start(config: Config) -> (LockError, Duration) {
    let started = Instant::now();
    let err = LockManager::start(config)
        .await
        .expect_err("start should fail");
    (err, started.elapsed())
}

/// Starting with `config` fails with a [`LockError::Tls`] of `expected`, within the connect
/// timeout.
async fn fails_with(config: Config, expected: TlsFailure) {
    let (err, took) = failed_start(config).await;
    match &err {
        LockError::Tls { failure, .. } => assert_eq!(*failure, expected, "{err:?}"),
        other => panic!("expected {expected:?}: {other:?}"),
    }
    assert!(took < CONNECT + SLACK, "{expected:?} took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_an_acl_user_excludes_and_wakes_across_two_managers() {
    logs();
    let certs = Arc::new(TestCerts::generate());
    let server = tls_server(&certs, false);
    let url = tls_url(&server, "app", "app-pw");
    let a = LockManager::start(tls_config(url.clone(), &certs))
        .await
        .unwrap();
    let b = LockManager::start(tls_config(url, &certs)).await.unwrap();
    let conn = server.async_conn().await;

    // Exclusion, counted: read-yield-write rounds lose updates unless the lock excludes.
    let mut tasks = Vec::new();
    for mgr in [&a, &b] {
        for _ in 0..3 {
            let lock = mgr.lock("tls:counted");
            tasks.push(tokio::spawn(count_rounds(
                lock,
                conn.clone(),
                "tls:counter",
                40,
            )));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total: u64 = conn.clone().get("tls:counter").await.unwrap();
    assert_eq!(total, 240);
    assert!(!conn.clone().exists::<_, bool>("tls:counted").await.unwrap());

    // Wake-up across managers: B waits on A's lock and gets it as soon as A releases.
    let held = a.lock("tls:wake").acquire().await.unwrap();
    let waiter = b.lock("tls:wake");
    let waiting = tokio::spawn(async move {
        let guard = waiter.acquire().await.expect("wait over tls");
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let (woke, guard) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter woke")
        .unwrap();
    // Woken by the unlock message, not by the 30 s lease running out.
    assert!(
        woke - released < Duration::from_secs(2),
        "{:?}",
        woke - released
    );
    let fields: Vec<String> = conn.clone().hkeys("tls:wake").await.unwrap();
    assert_eq!(fields.len(), 1);
    assert!(fields[0].starts_with(&b.client_id().to_string()));
    guard.release().await.unwrap();

    // A permit semaphore and a latch over TLS with the ACL user: a release on A wakes B.
    let sem = a.permit_semaphore("tls:sem");
    assert!(sem.try_set_permits(1).await.unwrap());
    let permit = sem.acquire(1).await.unwrap();
    let other = b.permit_semaphore("tls:sem");
    let waiting = tokio::spawn(async move { other.acquire(1).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    permit.release().await.unwrap();
    let taken = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the permit waiter woke")
        .unwrap()
        .unwrap();
    assert!(released.elapsed() < Duration::from_secs(2));
    taken.release().await.unwrap();
    let latch = b.count_down_latch("tls:latch");
    assert!(latch.try_set_count(1).await.unwrap());
    let opened = {
        let latch = a.count_down_latch("tls:latch");
        tokio::spawn(async move { latch.wait_for(Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    latch.count_down().await.unwrap();
    assert!(opened.await.unwrap().unwrap());
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn mutual_tls_needs_the_client_identity() {
    logs();
    let certs = Arc::new(TestCerts::generate());
    let server = tls_server(&certs, true);
    let url = tls_url(&server, "app", "app-pw");

    // Without a client certificate.
    fails_with(
        tls_config(url.clone(), &certs),
        TlsFailure::RejectedByServer,
    )
    .await;

    let config = tls_config(url, &certs)
        .tls_client_identity(certs.client_cert_pem.clone(), certs.client_key_pem.clone());
    let mgr = LockManager::start(config).await.expect("mutual tls");
    let guard = mgr.lock("mtls").acquire().await.unwrap();
    let count: u32 = server
        .async_conn()
        .await
        .hget("mtls", guard.holder_id())
        .await
        .unwrap();
    assert_eq!(count, 1);
    guard.release().await.unwrap();
    mgr.shutdown().await;
}

#[tokio::test]
async fn tls_failures_say_which_within_the_connect_timeout() {
    logs();
    let certs = Arc::new(TestCerts::generate());
    let server = tls_server(&certs, false);

    // No CA given: the webpki roots do not know the test CA.
    let no_ca = Config::new(tls_url(&server, "app", "app-pw")).connect_timeout(CONNECT);
    fails_with(no_ca, TlsFailure::UntrustedCertificate).await;

    // The certificate is for `localhost`, not for `127.0.0.1`.
    let by_ip = format!("rediss://app:app-pw@127.0.0.1:{}/0", server.port());
    fails_with(
        tls_config(by_ip.clone(), &certs),
        TlsFailure::HostnameMismatch,
    )
    .await;

    // redis-rs's `#insecure` skips both checks (encrypted, unauthenticated: tests only).
    let insecure = Config::new(format!("{by_ip}#insecure")).connect_timeout(CONNECT);
    let insecure = LockManager::start(insecure)
        .await
        .expect("#insecure connects");
    let guard = insecure.lock("insecure").acquire().await.unwrap();
    guard.release().await.unwrap();
    insecure.shutdown().await;

    // A plain-TCP server behind a rediss:// URL.
    let plain = RedisServer::start();
    let url = format!("rediss://localhost:{}/0", plain.port());
    fails_with(tls_config(url, &certs), TlsFailure::NotTls).await;

    // And a TLS server behind a redis:// URL.
    let url = format!("redis://localhost:{}/0", server.port());
    let (err, took) = failed_start(tls_config(url, &certs)).await;
    assert!(err.is_retryable(), "{err:?}");
    assert!(took < CONNECT + SLACK, "{took:?}");
}

#[tokio::test]
async fn a_wrong_password_fails_at_start_without_showing_it() {
    let logs = logs();
    let server = RedisServer::start_with(Options {
        args: acl_users(),
        ..Options::default()
    });
    let url = format!("redis://app:not-the-pw-xyzzy@127.0.0.1:{}/0", server.port());
    let (err, took) = failed_start(Config::new(url).connect_timeout(CONNECT)).await;
    assert!(matches!(err, LockError::Auth { .. }), "{err:?}");
    assert!(took < CONNECT + SLACK, "{took:?}");
    let shown = format!("{err} | {err:?}");
    assert!(!shown.contains("xyzzy"), "{shown}");
    assert!(shown.contains("app:***@127.0.0.1"), "{shown}");
    let logged = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(!logged.contains("xyzzy"), "a password reached the logs");
}

#[tokio::test]
async fn a_user_lacking_a_permission_fails_at_start_naming_it() {
    logs();
    let server = RedisServer::start_with(Options {
        args: acl_users(),
        ..Options::default()
    });
    let cases = [
        ("noevalsha", "EVALSHA"),
        ("noscript", "SCRIPT LOAD"),
        ("nochannels", "redisson_lock__channel"),
        ("nopublish", "publish"),
    ];
    for (user, named) in cases {
        let url = format!("redis://{user}:pw@127.0.0.1:{}/0", server.port());
        let (err, took) = failed_start(Config::new(url).connect_timeout(CONNECT)).await;
        match &err {
            LockError::NoPermission { what, .. } => {
                assert!(what.contains(named), "{user}: {what:?} should name {named}")
            }
            other => panic!("{user}: {other:?}"),
        }
        assert!(took < CONNECT + SLACK, "{user}: {took:?}");
        assert!(!err.is_retryable());
    }
    // Key permissions depend on the names used: they show at the first call on a name.
    let url = format!("redis://appkeys:pw@127.0.0.1:{}/0", server.port());
    let mgr = LockManager::start(Config::new(url))
        .await
        .expect("channels and scripts allowed");
    mgr.lock("app:ok")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let err = mgr
        .lock("other:denied")
        .try_acquire()
        .await
        .expect_err("key outside ~app:*");
    assert!(matches!(err, LockError::NoPermission { .. }), "{err:?}");
    let keys: Vec<String> = server.async_conn().await.keys("*").await.unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    mgr.shutdown().await;
}

#[tokio::test]
async fn a_unix_socket_works_like_tcp() {
    logs();
    let server = RedisServer::start_with(Options {
        unix_socket: true,
        ..Options::default()
    });
    let a = LockManager::connect(&server.unix_url()).await.unwrap();
    let b = LockManager::connect(&server.unix_url()).await.unwrap();
    let held = a.lock("unix").acquire().await.unwrap();
    assert!(b.lock("unix").try_acquire().await.unwrap().is_none());
    let waiter = b.lock("unix");
    let waiting = tokio::spawn(async move { waiter.acquire().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.unwrap();
    let guard = support::wait::woken(waiting, Duration::from_secs(3)).await;
    let count: u32 = server
        .async_conn()
        .await
        .hget("unix", guard.holder_id())
        .await
        .unwrap();
    assert_eq!(count, 1);
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_replicas_waits_for_the_replica_and_undoes_without_it() {
    let logs = logs();
    let (primary, mut replica) = primary_and_replica();

    let config = Config::new(primary.url())
        .sync_replicas(1, Duration::from_millis(300))
        .response_timeout(Duration::from_secs(2));
    let mgr = LockManager::start(config).await.unwrap();
    let lock = mgr.lock("synced");
    let guard = lock.acquire().await.expect("acquired with the replica up");
    // The replica has it as soon as the acquire returns.
    let on_replica: Vec<String> = replica.async_conn().await.hkeys("synced").await.unwrap();
    assert_eq!(on_replica, vec![guard.holder_id().to_owned()]);
    guard.release().await.unwrap();
    // A primary that forgot its scripts (SCRIPT FLUSH, a restart) is given them again on the
    // synced path as well: acquired, and on the replica, all the same.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut primary.async_conn().await)
        .await
        .unwrap();
    let guard = lock.acquire().await.expect("acquired after SCRIPT FLUSH");
    let on_replica: Vec<String> = replica.async_conn().await.hkeys("synced").await.unwrap();
    assert_eq!(on_replica, vec![guard.holder_id().to_owned()]);
    guard.release().await.unwrap();
    // A fenced write is synced too: on the replica, with its fence, once it returns.
    let fenced = mgr.fenced_lock("doc").acquire().await.unwrap();
    assert!(fenced.fenced_set("{doc}:body", "v1").await.unwrap());
    let mut on_replica = replica.async_conn().await;
    let body: String = on_replica.get("{doc}:body").await.unwrap();
    let fence: u64 = on_replica
        .hget("lockman_fence:{doc}", "{doc}:body")
        .await
        .unwrap();
    assert_eq!((body.as_str(), fence), ("v1", fenced.token()));

    replica.stop();
    let started = Instant::now();
    let err = fenced
        .fenced_set("{doc}:body", "v2")
        .await
        .expect_err("no replica to acknowledge the fenced write");
    support::locks::assert_unacknowledged(&err, started);
    drop(fenced);
    let started = Instant::now();
    let err = lock
        .try_acquire()
        .await
        .expect_err("no replica to acknowledge");
    support::locks::assert_unacknowledged(&err, started);
    // The undo is a release queued as the error goes back (src/actors/lock_state/outcomes.rs):
    // it reaches Redis a moment later, later still on a loaded machine. Left held, the key
    // would live its 30 s watchdog lease.
    let mut raw = primary.conn();
    support::wait::until(
        "an acquire the replicas did not acknowledge was undone",
        || redis::Commands::exists::<_, bool>(&mut raw, "synced") == Ok(false),
    )
    .await;
    drop(logs);
    mgr.shutdown().await;
}

/// Asking more replicas to acknowledge than the primary has: every acquire is refused with
/// the typed error, retryable (a replica may come back), within the sync timeout, and the
/// grant Redis made is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_replicas_beyond_the_replicas_there_are_is_refused_and_undone() {
    let (primary, _replica) = primary_and_replica();
    let mut raw = primary.conn();
    let config = Config::new(primary.url())
        .sync_replicas(3, Duration::from_millis(300))
        .response_timeout(Duration::from_secs(2));
    let mgr = LockManager::start(config).await.unwrap();
    for name in ["three", "three-fenced"] {
        let started = Instant::now();
        let err = match name {
            "three" => mgr.lock(name).try_acquire().await.err(),
            _ => mgr.fenced_lock(name).try_acquire().await.err(),
        }
        .expect("one replica cannot acknowledge for three");
        // The one replica acknowledges, unless the machine is too busy for 300 ms.
        assert!(
            matches!(
                err,
                lockman::LockError::ReplicaSync {
                    acked: 0 | 1,
                    wanted: 3
                }
            ),
            "{err:?}"
        );
        assert!(err.is_retryable());
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        // The grant is given back right after the caller is answered.
        let undone = support::wait::eventually_blocking(Duration::from_secs(2), || {
            !redis::cmd("EXISTS")
                .arg(name)
                .query::<bool>(&mut raw)
                .unwrap()
        });
        assert!(undone, "{name}: the refused acquire was left held");
    }
    mgr.shutdown().await;
}

/// Permits that fewer replicas acknowledged than asked are given back before the caller is
/// answered: the free count and the held set are as before when the error arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_replicas_gives_refused_permits_back_before_answering() {
    let (primary, _replica) = primary_and_replica();
    let mut raw = primary.conn();
    let good = LockManager::start(
        Config::new(primary.url()).sync_replicas(1, Duration::from_millis(1000)),
    )
    .await
    .unwrap();
    let sem = good.permit_semaphore("synced-permits");
    assert!(sem.try_set_permits(2).await.unwrap());
    let held = sem.acquire(1).await.expect("one replica acknowledges");
    held.release().await.unwrap();
    let config = Config::new(primary.url())
        .sync_replicas(3, Duration::from_millis(300))
        .response_timeout(Duration::from_secs(2));
    let mgr = LockManager::start(config).await.unwrap();
    for kind in ["plain", "permit"] {
        let err = match kind {
            "plain" => {
                let _: () = redis::cmd("SET")
                    .arg("synced-plain")
                    .arg(2)
                    .query(&mut raw)
                    .unwrap();
                mgr.semaphore("synced-plain").try_acquire(1).await.err()
            }
            _ => mgr
                .permit_semaphore("synced-permits")
                .try_acquire(1)
                .await
                .err(),
        }
        .expect("one replica cannot acknowledge for three");
        assert!(
            matches!(err, LockError::ReplicaSync { wanted: 3, .. }),
            "{err:?}"
        );
        let key = if kind == "plain" {
            "synced-plain"
        } else {
            "synced-permits"
        };
        let free: String = redis::cmd("GET").arg(key).query(&mut raw).unwrap();
        assert_eq!(free, "2", "{kind}: given back before the answer");
    }
    let held: i64 = redis::cmd("ZCARD")
        .arg("{synced-permits}:timeout")
        .query(&mut raw)
        .unwrap();
    assert_eq!(held, 0);
    mgr.shutdown().await;
    good.shutdown().await;
}

#[tokio::test]
async fn passwords_never_reach_debug_display_or_logs() {
    let logs = logs();
    let certs = Arc::new(TestCerts::generate());
    let server = tls_server(&certs, false);
    let url = tls_url(&server, "app", "app-pw");
    let config = tls_config(url.clone(), &certs);
    let shown = format!("{config:?}");
    assert!(
        !shown.contains("app-pw") && shown.contains("app:***@localhost"),
        "{shown}"
    );

    // A manager that starts, locks and stops logs its deployment, redacted.
    let mgr = LockManager::start(config).await.unwrap();
    mgr.lock("quiet")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    mgr.shutdown().await;
    // Errors of every connection step, shown every way.
    let wrong = format!("rediss://app:bad-pw-plugh@localhost:{}/0", server.port());
    let (err, _) = failed_start(tls_config(wrong, &certs)).await;
    let shown = format!("{err} | {err:?}");
    assert!(!shown.contains("plugh"), "{shown}");
    let (err, _) = failed_start(Config::new("redis://u:pw-xyz@[not a host/0")).await;
    assert!(!format!("{err} | {err:?}").contains("pw-xyz"), "{err:?}");

    let logged = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(
        logged.contains("app:***@localhost"),
        "the deployment is logged"
    );
    for secret in ["app-pw", "bad-pw-plugh", "pw-xyz"] {
        assert!(!logged.contains(secret), "{secret} reached the logs");
    }
}

/// Replica sync with a replica slow to acknowledge (frozen here through the whole wait, so
/// every attempt's `WAIT` takes the whole sync timeout): a fair waiter queued behind a holder
/// ends its bounded wait `Ok(None)` at its deadline, as for any holder. Redis answered every
/// attempt (the lock is held); what took the time was the replicas' acknowledgement, within
/// the sync timeout the config allows it, which is no outage. Breaks it: the last try judged by
/// the 250 ms margin alone, while its `WAIT` takes the 800 ms sync timeout (`Unavailable`,
/// cause a round trip's time-out, seen before the fix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_behind_a_holder_with_a_slow_replica_times_out_as_contention() {
    let (primary, replica) = primary_and_replica();
    let holder = LockManager::start(Config::new(primary.url()))
        .await
        .unwrap();
    let held = holder.fair_lock("q").acquire().await.unwrap();
    let sync = Duration::from_millis(800);
    let waiter = LockManager::start(Config::new(primary.url()).sync_replicas(1, sync))
        .await
        .unwrap();
    replica.pause(Duration::from_secs(8)).unwrap();
    let wait = Duration::from_secs(2);
    let started = Instant::now();
    let res = waiter.fair_lock("q").try_acquire_for(wait).await;
    let took = started.elapsed();
    replica.resume().unwrap();
    assert!(matches!(res, Ok(None)), "a holder, not an outage: {res:?}");
    // At the deadline, plus at most the last try's round trip (its WAIT: the sync timeout),
    // plus the 250 ms margin, plus room for a loaded machine.
    assert!(took >= wait, "{took:?}");
    assert!(
        took < wait + sync + Duration::from_millis(2_250),
        "{took:?}"
    );
    drop(held);
    let _ = tokio::time::timeout(Duration::from_secs(5), waiter.shutdown()).await;
    holder.shutdown().await;
}

/// The same for a semaphore: a waiter with replica sync, all permits taken by another client
/// and the replica frozen, ends its bounded wait with `Ok(None)` (the permits are taken: that is
/// contention), not an error. Breaks it: the synchronizer's last attempt given only its 250 ms
/// grace while its `WAIT` may take the 800 ms sync timeout (a `Timeout` or `Unavailable`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_wait_with_a_slow_replica_times_out_as_contention() {
    let (primary, replica) = primary_and_replica();
    let holder = LockManager::start(Config::new(primary.url()))
        .await
        .unwrap();
    let sem = holder.semaphore("s");
    assert!(sem.try_set_permits(1).await.unwrap());
    let taken = sem.acquire(1).await.unwrap();
    let sync = Duration::from_millis(800);
    let waiter = LockManager::start(Config::new(primary.url()).sync_replicas(1, sync))
        .await
        .unwrap();
    replica.pause(Duration::from_secs(8)).unwrap();
    let wait = Duration::from_secs(2);
    let started = Instant::now();
    let res = waiter.semaphore("s").try_acquire_for(1, wait).await;
    let took = started.elapsed();
    replica.resume().unwrap();
    assert!(matches!(res, Ok(None)), "a holder, not an outage: {res:?}");
    assert!(took >= wait, "{took:?}");
    assert!(
        took < wait + sync + Duration::from_millis(2_250),
        "{took:?}"
    );
    drop(taken);
    let _ = tokio::time::timeout(Duration::from_secs(5), waiter.shutdown()).await;
    holder.shutdown().await;
}

/// The same for a MultiLock: both members held by another client, each member on a manager of
/// its own with replica sync (each its own `WAIT` connection: on one manager the members'
/// `WAIT`s queue behind each other) and the replica frozen; the bounded wait ends `Ok(None)`
/// (the members are held: contention), not an error. Breaks it: the composition's steps
/// bounded by its deadline plus the 250 ms margin alone, while a member's last try's `WAIT` may
/// take the 800 ms sync timeout (`Unavailable`, a member's answer timed out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multilock_wait_with_a_slow_replica_times_out_as_contention() {
    let (primary, replica) = primary_and_replica();
    let holder = LockManager::start(Config::new(primary.url()))
        .await
        .unwrap();
    let held = [
        holder.lock("m1").acquire().await.unwrap(),
        holder.lock("m2").acquire().await.unwrap(),
    ];
    let sync = Duration::from_millis(800);
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let config = Config::new(primary.url()).sync_replicas(1, sync);
        waiters.push(LockManager::start(config).await.unwrap());
    }
    replica.pause(Duration::from_secs(8)).unwrap();
    let wait = Duration::from_secs(2);
    let multi = lockman::MultiLock::new(vec![waiters[0].lock("m1"), waiters[1].lock("m2")]);
    let started = Instant::now();
    let res = multi.try_acquire_for(wait).await;
    let took = started.elapsed();
    replica.resume().unwrap();
    assert!(matches!(res, Ok(None)), "a holder, not an outage: {res:?}");
    assert!(took >= wait, "{took:?}");
    assert!(
        took < wait + sync + Duration::from_millis(2_250),
        "{took:?}"
    );
    drop(held);
    for waiter in waiters {
        let _ = tokio::time::timeout(Duration::from_secs(5), waiter.shutdown()).await;
    }
    holder.shutdown().await;
}
