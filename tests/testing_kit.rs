//! `lockman::testing`, used as an application would (no `tests/support`): every fault against a
//! real server, each test failing if the fault did not happen or the signal it should give did
//! not come. From `#[tokio::test]` and `#[actix_rt::test]`, in parallel (no fixed port).

use std::error::Error;
use std::time::{Duration, Instant};

use lockman::testing::{Cluster, Options, SentinelGroup, ServerError, TestServer};
use lockman::{LockError, LockManager};

type Outcome = Result<(), Box<dyn Error>>;

/// How long a signal may take on a loaded machine: far more than it needs (about a second).
const SIGNAL: Duration = Duration::from_secs(10);

/// Polls `check` every 10 ms until it holds or `SIGNAL` passes.
async fn eventually(mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + SIGNAL;
    while !check() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

#[test]
fn a_missing_binary_is_an_error_naming_it() {
    let err = TestServer::start_with(Options::default().bin("/nonexistent/redis-server-x"))
        .expect_err("no such binary");
    assert!(matches!(err, ServerError::Missing { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("/nonexistent/redis-server-x"), "{text}");
    assert!(text.contains("REDIS_SERVER_BIN"), "{text}");
}

#[test]
fn a_server_refusing_its_arguments_says_why() {
    let err = TestServer::start_with(Options::default().arg("--bogus-option").arg("1"))
        .expect_err("the server refuses the option");
    assert!(matches!(err, ServerError::NotStarted { .. }), "{err:?}");
    // What the server printed on its stdout (before its log was open) is in the error.
    let text = err.to_string();
    assert!(text.contains("bogus-option"), "{text}");
    println!("{text}");
}

/// Set in the child process of `a_server_dies_with_its_test_process`.
const CHILD: &str = "LOCKMAN_KIT_CHILD";

#[test]
#[ignore = "the child half of a_server_dies_with_its_test_process"]
fn child_holds_a_server_until_killed() -> Outcome {
    if std::env::var_os(CHILD).is_none() {
        return Ok(());
    }
    // Started from a thread that ends at once: the server must outlive that thread.
    let server = std::thread::spawn(TestServer::start)
        .join()
        .map_err(|_| "the starting thread panicked")??;
    std::thread::sleep(Duration::from_millis(100));
    let pong: String = redis::cmd("PING").query(&mut server.conn()?)?;
    assert_eq!(pong, "PONG");
    let pid = server.pid().ok_or("not running")?;
    println!("SERVER {pid} {} {}", server.port(), server.dir().display());
    std::thread::sleep(Duration::from_secs(120));
    Ok(())
}

/// Whether process `pid` is gone (or dead, not yet reaped by its new parent).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "pid (comm) S …": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => true,
    }
}

#[test]
#[cfg(target_os = "linux")]
fn a_server_dies_with_its_test_process() -> Outcome {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--ignored", "--exact", "child_holds_a_server_until_killed"])
        .args(["--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut line = None;
    for text in BufReader::new(stdout).lines() {
        // libtest prints the test's name first, on the same line.
        if let Some((_, rest)) = text?.split_once("SERVER ") {
            line = Some(rest.to_owned());
            break;
        }
    }
    let Some(line) = line else {
        let _ = child.kill();
        let _ = child.wait();
        return Err("the child started no server".into());
    };
    let mut words = line.splitn(3, ' ');
    let pid: u32 = words.next().ok_or("pid")?.parse()?;
    let port: u16 = words.next().ok_or("port")?.parse()?;
    let dir = std::path::PathBuf::from(words.next().ok_or("dir")?);
    assert!(!process_gone(pid) && dir.exists());
    // SIGKILL: nothing in the child runs, no drop, no unwinding.
    child.kill()?;
    child.wait()?;
    let killed = Instant::now();
    let deadline = killed + SIGNAL;
    while !(process_gone(pid) && std::net::TcpStream::connect(("127.0.0.1", port)).is_err()) {
        assert!(
            Instant::now() < deadline,
            "server {pid} outlived its test process"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("server gone {:?} after its test process", killed.elapsed());
    // The next server of the kit removes the dead process's folder.
    let _next = TestServer::start()?;
    assert!(!dir.exists(), "{} left", dir.display());
    Ok(())
}

#[test]
fn a_server_is_its_own_and_gone_when_dropped() -> Outcome {
    let (a, b) = (TestServer::start()?, TestServer::start()?);
    assert_ne!(a.port(), b.port());
    let port = a.port();
    drop(a);
    // Nothing answers on its port any more.
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    let mut conn = b.conn()?;
    let pong: String = redis::cmd("PING").query(&mut conn)?;
    assert_eq!(pong, "PONG");
    Ok(())
}

#[tokio::test]
async fn lose_tells_the_holder_and_frees_the_name() -> Outcome {
    let server = TestServer::start()?;
    let manager = LockManager::start(server.config()?).await?;
    let guard = manager.lock("kit:lose").acquire().await?;
    let holder = server.holder("kit:lose")?.expect("held");
    assert!(
        holder.starts_with(&manager.client_id().to_string()),
        "{holder}"
    );
    assert!(server.lose("kit:lose")?);
    assert_eq!(server.holder("kit:lose")?, None);
    tokio::time::timeout(SIGNAL, guard.lost()).await?;
    assert!(guard.is_lost());
    manager.shutdown().await;
    Ok(())
}

#[actix_rt::test]
async fn expire_tells_the_holder_from_an_actix_test() -> Outcome {
    let server = TestServer::start()?;
    let manager = LockManager::start(server.config()?).await?;
    let guard = manager.lock("kit:expire").acquire().await?;
    assert!(server.expire("kit:expire")?);
    assert!(
        eventually(|| server
            .keys_left()
            .is_ok_and(|k| !k.contains(&"kit:expire".into())))
        .await
    );
    tokio::time::timeout(SIGNAL, guard.lost()).await?;
    // A name nobody holds has nothing to expire.
    assert!(!server.expire("kit:nobody")?);
    manager.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn pause_freezes_the_server_and_resume_ends_it() -> Outcome {
    let server = TestServer::start()?;
    let manager = LockManager::start(server.config()?).await?;
    let lock = manager.lock("kit:pause");
    lock.try_acquire().await?.expect("free").release().await?;
    server.pause(Duration::from_secs(60))?;
    let frozen = lock.try_acquire_for(Duration::from_millis(300)).await;
    assert!(
        matches!(frozen, Err(LockError::Unavailable { .. })),
        "{frozen:?}"
    );
    let resumed = Instant::now();
    server.resume()?;
    let guard = lock
        .try_acquire_for(SIGNAL)
        .await?
        .expect("free once resumed");
    // Long before the 60 s pause would have ended by itself.
    assert!(resumed.elapsed() < SIGNAL, "{:?}", resumed.elapsed());
    guard.release().await?;
    manager.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_pause_ends_by_itself() -> Outcome {
    let server = TestServer::start()?;
    let mut conn = server.conn()?;
    // The clock is read before the pause starts its timer: read after `pause` returned, a
    // loaded machine's stall between the two ate into the 500 ms and the bound below failed.
    let paused = Instant::now();
    server.pause(Duration::from_millis(500))?;
    // Answered once the server runs again, not before: never sooner than the pause's 500 ms
    // after the clock above was read.
    let pong: String = redis::cmd("PING").query(&mut conn)?;
    assert_eq!(pong, "PONG");
    assert!(
        paused.elapsed() >= Duration::from_millis(500),
        "{:?}",
        paused.elapsed()
    );
    Ok(())
}

#[tokio::test]
async fn cut_cuts_this_client_alone_until_healed() -> Outcome {
    let server = TestServer::start()?;
    let link = server.link()?;
    let cut_off = LockManager::start(link.config()).await?;
    let other = LockManager::start(server.config()?).await?;
    let guard = cut_off.lock("kit:cut").acquire().await?;
    link.cut();
    // Its scoped work is stopped before the hold's guarantee ends, and the hold is reported lost.
    let stopped = tokio::time::timeout(SIGNAL, guard.scope(std::future::pending::<()>())).await?;
    let told = Instant::now();
    assert!(
        matches!(
            stopped,
            Err(LockError::HoldExpiring { .. } | LockError::HoldLost { .. })
        ),
        "{stopped:?}"
    );
    let valid_until = guard.valid_until();
    assert!(
        told <= valid_until,
        "told {:?} after valid_until",
        told - valid_until
    );
    tokio::time::timeout(SIGNAL, guard.lost()).await?;
    // The other client goes on meanwhile, and gets the name once the lease runs out.
    let taken = other
        .lock("kit:cut")
        .try_acquire_for(SIGNAL)
        .await?
        .expect("free once the cut-off hold expired");
    let unreachable = cut_off
        .lock("kit:cut:2")
        .try_acquire_for(Duration::from_millis(300))
        .await;
    assert!(
        matches!(unreachable, Err(LockError::Unavailable { .. })),
        "{unreachable:?}"
    );
    taken.release().await?;
    link.heal();
    let back = cut_off
        .lock("kit:cut:2")
        .try_acquire_for(SIGNAL)
        .await?
        .expect("reachable once healed");
    back.release().await?;
    cut_off.shutdown().await;
    other.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn drop_replies_runs_requests_but_answers_nothing() -> Outcome {
    let server = TestServer::start()?;
    let link = server.link()?;
    let manager = LockManager::start(link.config()).await?;
    let lock = manager.lock("kit:replies");
    lock.try_acquire().await?.expect("free").release().await?;
    link.drop_replies();
    let unanswered = lock.try_acquire().await;
    assert!(unanswered.is_err(), "{unanswered:?}");
    // Not contention: an error that says Redis did not answer (docs/testing.md: a fault between
    // the key's write and its reply fails the acquire itself): a single try's time-out, and a
    // wait's `Unavailable` (caused by that time-out), while the key was written both times.
    assert!(
        matches!(unanswered, Err(LockError::Timeout { .. })),
        "{unanswered:?}"
    );
    let waited = manager.lock("kit:replies:wait").acquire().await;
    assert!(
        matches!(
            &waited,
            Err(LockError::Unavailable { cause, .. }) if matches!(**cause, LockError::Timeout { .. })
        ),
        "{waited:?}"
    );
    assert!(
        server.holder("kit:replies:wait")?.is_some(),
        "the wait's acquire ran"
    );
    // It ran: the lock is held in Redis, by this client.
    let holder = server.holder("kit:replies")?.expect("the acquire ran");
    assert!(
        holder.starts_with(&manager.client_id().to_string()),
        "{holder}"
    );
    link.heal();
    manager.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn restart_empty_loses_every_hold() -> Outcome {
    // A server that persists every write: a plain restart would bring the hold back.
    let persisting = Options::default().args(["--appendonly", "yes", "--appendfsync", "always"]);
    let mut server = TestServer::start_with(persisting)?;
    let manager = LockManager::start(server.config()?).await?;
    let guard = manager.lock("kit:restart").acquire().await?;
    assert!(server.keys_left()?.contains(&"kit:restart".to_owned()));
    server.restart_empty()?;
    assert_eq!(server.keys_left()?, Vec::<String>::new());
    tokio::time::timeout(SIGNAL, guard.lost()).await?;
    // The manager reconnects to the new, empty server.
    let again = manager
        .lock("kit:restart")
        .try_acquire_for(SIGNAL)
        .await?
        .expect("free on the empty server");
    again.release().await?;
    manager.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn waiters_counts_a_waiting_client_on_a_lock_and_a_fair_lock() -> Outcome {
    let server = TestServer::start()?;
    let holder = LockManager::start(server.config()?).await?;
    let waiter = LockManager::start(server.config()?).await?;
    for (name, fair) in [("kit:waiters", false), ("kit:waiters:fair", true)] {
        let guard = match fair {
            true => holder.fair_lock(name).acquire().await?,
            false => holder.lock(name).acquire().await?,
        };
        assert_eq!(server.waiters(name)?, 0);
        let lock = waiter.clone();
        let name_owned = name.to_owned();
        let waiting = tokio::spawn(async move {
            match fair {
                true => lock.fair_lock(&name_owned).acquire().await,
                false => lock.lock(&name_owned).acquire().await,
            }
        });
        assert!(
            eventually(|| server.waiters(name).is_ok_and(|n| n == 1)).await,
            "{name}"
        );
        guard.release().await?;
        let got = tokio::time::timeout(SIGNAL, waiting).await???;
        got.release().await?;
    }
    holder.shutdown().await;
    waiter.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn keys_left_sees_what_lockman_left_and_nothing_after_a_clean_shutdown() -> Outcome {
    let server = TestServer::start()?;
    let manager = LockManager::start(server.config()?).await?;
    let guard = manager.lock("kit:keys").acquire().await?;
    assert!(server.keys_left()?.contains(&"kit:keys".to_owned()));
    guard.release().await?;
    manager.shutdown().await;
    assert_eq!(server.keys_left()?, Vec::<String>::new());
    Ok(())
}

/// Takes `name` as soon as the manager reaches a primary that takes writes: right after a
/// failover its first tries may fail with a retryable error (the old primary gone or demoted).
/// One handle for every try: a try that failed may still have taken the name for its handle.
async fn acquire_soon(
    manager: &LockManager,
    name: &str,
) -> Result<lockman::LockGuard, Box<dyn Error>> {
    let deadline = Instant::now() + SIGNAL;
    let mut seen = Vec::new();
    let lock = manager.lock(name);
    loop {
        match lock.try_acquire().await {
            Ok(Some(guard)) => return Ok(guard),
            Ok(None) => return Err(format!("{name} is held by someone, after {seen:?}").into()),
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                seen.push(e.to_string());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Takes a lock after a failover ([`acquire_soon`]), checks that the server on `port` holds
/// it for `manager`, releases it and checks that it is free there.
async fn held_on(group: &mut SentinelGroup, port: u16, manager: &LockManager) -> Outcome {
    let guard = acquire_soon(manager, "kit:after").await?;
    let server = group.server(port).ok_or("a server of the group")?;
    let holder = server
        .holder("kit:after")?
        .ok_or("held on the new primary")?;
    assert!(
        holder.starts_with(&manager.client_id().to_string()),
        "{holder}"
    );
    guard.release().await?;
    assert_eq!(server.holder("kit:after")?, None);
    Ok(())
}

#[tokio::test]
async fn kill_primary_moves_a_manager_to_the_new_primary() -> Outcome {
    let mut group = SentinelGroup::start()?;
    let manager = LockManager::start(group.config()).await?;
    let first = group.primary_port()?;
    manager
        .lock("kit:before")
        .acquire()
        .await?
        .release()
        .await?;

    let second = group.kill_primary()?;
    assert_ne!(second, first);
    // The old primary is gone: nothing answers on its port.
    assert!(std::net::TcpStream::connect(("127.0.0.1", first)).is_err());

    // A lock taken after the failover is held on the new primary.
    held_on(&mut group, second, &manager).await?;
    manager.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn failover_switches_the_primary_and_a_manager_follows() -> Outcome {
    let mut group = SentinelGroup::start()?;
    let manager = LockManager::start(group.config()).await?;
    let first = group.primary_port()?;

    let second = group.failover()?;
    assert_ne!(second, first);
    assert_eq!(group.primary_port()?, second);
    // The old primary was demoted: it refuses writes.
    let old = group
        .server(first)
        .ok_or("the old primary is one of the group")?;
    let refused = redis::cmd("SET")
        .arg("kit:x")
        .arg(1)
        .query::<()>(&mut old.conn()?)
        .expect_err("a replica refuses writes");
    assert!(refused.to_string().contains("read only"), "{refused}");

    held_on(&mut group, second, &manager).await?;
    manager.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_cluster_serves_a_lock_from_the_node_of_its_slot() -> Outcome {
    let cluster = Cluster::start()?;
    let manager = LockManager::start(cluster.config()).await?;
    // Two names whose slots are on different nodes: the cluster really is three.
    let (a, b) = ("kit:a", "kit:b");
    assert_ne!(cluster.node_for(a)?.port(), cluster.node_for(b)?.port());
    for name in [a, b] {
        let guard = manager.lock(name).acquire().await?;
        let owner = cluster.node_for(name)?;
        let holder = owner.holder(name)?.ok_or("held on the node of its slot")?;
        assert!(
            holder.starts_with(&manager.client_id().to_string()),
            "{holder}"
        );
        for node in cluster.nodes().iter().filter(|n| n.port() != owner.port()) {
            assert!(
                !node.keys_left()?.contains(&name.to_owned()),
                "{name} elsewhere"
            );
        }
        guard.release().await?;
        assert_eq!(owner.holder(name)?, None);
    }
    manager.shutdown().await;
    Ok(())
}

/// A blocking connection through `link`, whose reads give up after 300 ms.
fn through(link: &lockman::testing::Link) -> Result<redis::Connection, Box<dyn Error>> {
    let conn = redis::Client::open(link.url())?.get_connection()?;
    conn.set_read_timeout(Some(Duration::from_millis(300)))?;
    Ok(conn)
}

/// Polls `check` every 10 ms, blocking, until it holds or `SIGNAL` passes.
fn eventually_blocking(mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + SIGNAL;
    while !check() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[test]
fn hold_delivers_late_what_was_sent_during_it() -> Outcome {
    let server = TestServer::start()?;
    let link = server.link()?;
    let mut conn = through(&link)?;
    redis::cmd("PING").query::<String>(&mut conn)?;
    link.hold();
    let unanswered = redis::cmd("SET")
        .arg("kit:held")
        .arg(1)
        .query::<()>(&mut conn);
    assert!(unanswered.is_err(), "{unanswered:?}");
    // Held, not lost: it has not reached Redis yet, and does once released.
    assert_eq!(server.keys_left()?, Vec::<String>::new());
    link.release();
    assert!(eventually_blocking(|| server
        .keys_left()
        .is_ok_and(|k| k == ["kit:held"])));
    Ok(())
}

#[test]
fn heal_new_only_leaves_the_old_connections_silent() -> Outcome {
    let server = TestServer::start()?;
    let link = server.link()?;
    let mut old = through(&link)?;
    redis::cmd("PING").query::<String>(&mut old)?;
    link.cut();
    link.heal_new_only();
    // Silent, not closed: the old connection's request times out (a heal would close it).
    let silent = redis::cmd("PING").query::<String>(&mut old);
    assert!(silent.as_ref().is_err_and(|e| e.is_timeout()), "{silent:?}");
    let mut new = through(&link)?;
    assert_eq!(redis::cmd("PING").query::<String>(&mut new)?, "PONG");
    Ok(())
}

#[test]
fn forget_pubsub_silences_the_subscribed_connections_alone() -> Outcome {
    let server = TestServer::start()?;
    let link = server.link()?;
    let mut sub = through(&link)?;
    redis::cmd("SUBSCRIBE").arg("kit:channel").exec(&mut sub)?;
    let mut commands = through(&link)?;
    redis::cmd("PING").query::<String>(&mut commands)?;
    link.forget_pubsub();
    let publish = || -> Result<u32, ServerError> {
        Ok(redis::cmd("PUBLISH")
            .arg("kit:channel")
            .arg("hello")
            .query(&mut server.conn()?)?)
    };
    // Redis still counts the subscriber; nothing reaches it.
    assert_eq!(publish()?, 1);
    let heard = sub.recv_response();
    assert!(heard.as_ref().is_err_and(|e| e.is_timeout()), "{heard:?}");
    assert_eq!(redis::cmd("PING").query::<String>(&mut commands)?, "PONG");
    // A new subscription is heard.
    let mut again = through(&link)?;
    redis::cmd("SUBSCRIBE")
        .arg("kit:channel")
        .exec(&mut again)?;
    assert_eq!(publish()?, 2);
    let message: Vec<String> = redis::from_redis_value(again.recv_response()?)?;
    assert_eq!(message, ["message", "kit:channel", "hello"]);
    Ok(())
}

#[tokio::test]
async fn a_cluster_of_one_master_and_its_replica() -> Outcome {
    let cluster = Cluster::start_with(1, 1, Options::default())?;
    let [master, replica] = cluster.nodes() else {
        panic!("two nodes: {cluster:?}");
    };
    assert_eq!(cluster.node_for("kit:replicated")?.port(), master.port());
    let manager = LockManager::start(cluster.config()).await?;
    let guard = manager.lock("kit:replicated").acquire().await?;
    // The replica replicates the master: the hold reaches it.
    let acked: u32 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut master.conn()?)?;
    assert_eq!(acked, 1);
    assert!(replica.keys_left()?.contains(&"kit:replicated".to_owned()));
    guard.release().await?;
    manager.shutdown().await;
    Ok(())
}
