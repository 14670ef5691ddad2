//! What a deployment guarantees, read by `LockManager::diagnose` from real servers started
//! the way deployments run them: an evicting `maxmemory-policy`, no persistence, AOF, RDB, a
//! replica, a Valkey, an ACL user without the lock keys' patterns; and the start-time checks:
//! a server without scripting refused with its own error, an evicting one warned about once
//! (or refused under `Config::refuse_evicting_server`).

mod support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lockman::{CheckStatus, Config, Diagnosis, LockError, LockManager};
use support::logs::logged;
use support::{RedisServer, primary_and_replica, server_with};

/// Every check `diagnose` makes on a manager that started, in its order.
const CHECKS: [&str; 13] = [
    "server",
    "tls",
    "scripting",
    "lpos",
    "sharded_pubsub",
    "acl",
    "scratch_lock",
    "eviction",
    "persistence",
    "replication",
    "keyspace_events",
    "clock",
    "round_trip",
];

async fn diagnose(config: Config) -> Diagnosis {
    let manager = LockManager::start(config).await.expect("started");
    let diagnosis = manager.diagnose().await.expect("diagnosed");
    manager.shutdown().await;
    let names: Vec<&str> = diagnosis.checks.iter().map(|c| c.name).collect();
    assert_eq!(names, CHECKS);
    diagnosis
}

fn check<'d>(diagnosis: &'d Diagnosis, name: &str) -> &'d lockman::Check {
    diagnosis.check(name).expect("the check is there")
}

/// What this test server says it is: `Redis 7.0.15` or `Valkey 9.1.2` (the suite also runs
/// with `REDIS_SERVER_BIN` naming a Valkey).
fn identity(server: &RedisServer) -> String {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut server.conn())
        .unwrap();
    let field = |k: &str| {
        info.lines()
            .find_map(|l| l.trim_end().strip_prefix(&format!("{k}:")))
            .map(str::to_owned)
    };
    match field("valkey_version") {
        Some(v) => format!("Valkey {v}"),
        None => format!("Redis {}", field("redis_version").unwrap()),
    }
}

#[tokio::test]
async fn an_evicting_policy_is_warned_once_at_start_refused_when_strict_and_diagnosed() {
    let server = server_with(&["--maxmemory-policy", "volatile-lru"]);
    let (manager, logs) = logged(LockManager::start(Config::new(server.url()))).await;
    let manager = manager.expect("a warning, not an error, by default");
    let warnings: Vec<&str> = logs.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{logs}");
    assert!(
        warnings[0].contains("may evict lock keys") && warnings[0].contains("policy=volatile-lru"),
        "{logs}"
    );
    let diagnosis = manager.diagnose().await.unwrap();
    manager.shutdown().await;
    let eviction = check(&diagnosis, "eviction");
    assert_eq!(eviction.status, CheckStatus::Warn);
    assert_eq!(
        eviction.seen,
        "maxmemory-policy volatile-lru (maxmemory 0: no limit is set yet): under memory \
         pressure it evicts keys with a TTL, and every lock key has one: a lock can vanish \
         while held, and a second holder take it"
    );
    assert!(
        eviction
            .advice
            .starts_with("CONFIG SET maxmemory-policy noeviction")
    );

    let strict = Config::new(server.url()).refuse_evicting_server(true);
    match LockManager::start(strict).await {
        Err(LockError::EvictingServer { policy, url }) => {
            assert_eq!(policy, "volatile-lru");
            assert!(url.contains(&server.port().to_string()), "{url}");
        }
        other => panic!("{other:?}"),
    }
    // An allkeys policy evicts lock keys too.
    let allkeys = server_with(&["--maxmemory-policy", "allkeys-lru", "--maxmemory", "64mb"]);
    let diagnosis = diagnose(Config::new(allkeys.url())).await;
    let eviction = check(&diagnosis, "eviction");
    assert_eq!(eviction.status, CheckStatus::Warn);
    assert!(
        eviction.seen.starts_with(
            "maxmemory-policy allkeys-lru: under memory pressure it may evict any key"
        ),
        "{}",
        eviction.seen
    );
}

#[tokio::test]
async fn noeviction_starts_strict_without_a_warning() {
    let server = RedisServer::start();
    let strict = Config::new(server.url()).refuse_evicting_server(true);
    let (manager, logs) = logged(LockManager::start(strict)).await;
    let manager = manager.expect("noeviction is what lockman needs");
    assert!(!logs.contains("WARN"), "{logs}");
    manager.shutdown().await;
}

#[tokio::test]
async fn persistence_none_rdb_and_aof_are_told_apart() {
    let none = RedisServer::start();
    let diagnosis = diagnose(Config::new(none.url())).await;
    let persistence = check(&diagnosis, "persistence");
    assert_eq!(persistence.status, CheckStatus::Warn);
    assert!(
        persistence
            .seen
            .starts_with("none (no AOF, no RDB snapshots): a restart empties the server"),
        "{}",
        persistence.seen
    );
    assert_eq!(diagnosis.worst(), CheckStatus::Warn);

    let rdb = server_with(&["--save", "3600 1"]);
    let persistence = check(&diagnose(Config::new(rdb.url())).await, "persistence").clone();
    assert_eq!(persistence.status, CheckStatus::Warn);
    assert!(
        persistence
            .seen
            .starts_with("RDB snapshots only (save \"3600 1\"): a restart loses every write"),
        "{}",
        persistence.seen
    );

    let aof = server_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let diagnosis = diagnose(Config::new(aof.url())).await;
    assert_eq!(
        check(&diagnosis, "persistence").seen,
        "AOF on (appendfsync always): every write is flushed to disk before it is answered: \
         a restart keeps holds and fenced tokens, even after the machine crashed"
    );
    // Everything else of a plain local server with AOF is as lockman needs it.
    for c in &diagnosis.checks {
        assert_eq!(c.status, CheckStatus::Ok, "{c:?}");
    }
    assert_eq!(diagnosis.worst(), CheckStatus::Ok);
    let server = check(&diagnosis, "server");
    assert_eq!(
        server.seen,
        format!("{} (standalone) at {}", identity(&aof), aof.url())
    );
    let clock = check(&diagnosis, "clock");
    assert!(
        clock.seen.starts_with("the server's clock is "),
        "{clock:?}"
    );
    let round_trip = check(&diagnosis, "round_trip");
    assert!(
        round_trip.seen.contains(
            "of 5 PINGs; response timeout 3.00s, watchdog timeout 30.00s (renewed every 10.00s)"
        ),
        "{round_trip:?}"
    );
}

#[tokio::test]
async fn a_replica_without_replica_sync_warns_and_with_it_passes() {
    let (primary, _replica) = primary_and_replica();
    let diagnosis = diagnose(Config::new(primary.url())).await;
    let replication = check(&diagnosis, "replication");
    assert_eq!(replication.status, CheckStatus::Warn);
    // Without replica sync no WAIT is run, nor reported.
    assert_eq!(
        replication.seen,
        "1 replica connected, min-replicas-to-write 0: replication is asynchronous: a failover \
         can lose a lock granted just before it, and a second holder take it",
        "{replication:?}"
    );
    assert!(
        replication
            .advice
            .starts_with("Config::sync_replicas(1, 250ms)"),
        "{replication:?}"
    );

    // A live replica acknowledges within milliseconds; 2 s leaves room for a loaded machine
    // (the replica process may wait for a core), and a frozen one is `doctor_attacks.rs`'s.
    let synced = Config::new(primary.url()).sync_replicas(1, Duration::from_secs(2));
    let replication = check(&diagnose(synced).await, "replication").clone();
    assert_eq!(replication.status, CheckStatus::Ok, "{replication:?}");
    assert!(
        replication.seen.starts_with(
            "1 replica connected, min-replicas-to-write 0: WAIT after the scratch lock's \
                 acquire: 1 or more acknowledged within 2.00s: sync_replicas(1, …) holds"
        ),
        "{replication:?}"
    );

    let too_many = Config::new(primary.url()).sync_replicas(2, Duration::from_millis(300));
    let replication = check(&diagnose(too_many).await, "replication").clone();
    assert_eq!(replication.status, CheckStatus::Fail, "{replication:?}");

    // min-replicas-to-write is read from the server.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg("1")
        .query(&mut primary.conn())
        .unwrap();
    let replication = check(&diagnose(Config::new(primary.url())).await, "replication").clone();
    assert!(
        replication.seen.starts_with(
            "1 replica connected, min-replicas-to-write 1: replication is asynchronous"
        ),
        "{replication:?}"
    );
}

/// The server binary that runs without scripting commands: `rename-command` to nothing is how
/// a Redis or a Valkey disables them (as some managed offerings do).
const NO_SCRIPTING: [&str; 6] = [
    "--rename-command",
    "SCRIPT",
    "",
    "--rename-command",
    "EVALSHA",
    "",
];

#[tokio::test]
async fn a_server_without_scripting_is_refused_with_an_error_that_says_so() {
    let server = server_with(&NO_SCRIPTING);
    let err = LockManager::start(Config::new(server.url()))
        .await
        .expect_err("no scripts, no locks");
    match &err {
        LockError::NoScripting { url, detail } => {
            assert!(url.contains(&server.port().to_string()), "{url}");
            assert!(detail.contains("unknown command"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string()
            .contains("cannot run Lua scripts, which every lock needs"),
        "{err}"
    );
    assert!(!err.is_retryable());
    // A user whose ACL refuses SCRIPT is a permission problem, and still said as one.
    let acl = server_with(&[
        "--user", "noscript", "on", ">pw", "~*", "&*", "+@all", "-script",
    ]);
    let url = format!("redis://noscript:pw@127.0.0.1:{}/0", acl.port());
    let err = LockManager::start(Config::new(url))
        .await
        .expect_err("NOPERM");
    assert!(matches!(err, LockError::NoPermission { .. }), "{err:?}");
}

#[tokio::test]
async fn a_user_without_the_lock_keys_patterns_fails_the_acl_check() {
    let server = server_with(&[
        "--user",
        "appkeys",
        "on",
        ">pw",
        "~app:*",
        "&*",
        "+@all",
        "--user",
        "applocks",
        "on",
        ">pw",
        "~app:*",
        "~redisson_lock*",
        "&*",
        "+@all",
    ]);
    let url = |user: &str| format!("redis://{user}:pw@127.0.0.1:{}/0", server.port());
    let without = diagnose(Config::new(url("appkeys")).name_prefix("app:")).await;
    let acl = check(&without, "acl");
    assert_eq!(acl.status, CheckStatus::Fail, "{acl:?}");
    assert!(
        acl.seen
            .starts_with("the redis user may not release on \"app:lockman-doctor:"),
        "{acl:?}"
    );
    // Redis: "this user has no permissions to access one of the keys"; Valkey 9.1: "No
    // permissions to access a key".
    assert!(
        acl.seen.to_lowercase().contains("no permissions to access"),
        "{acl:?}"
    );
    assert_eq!(without.worst(), CheckStatus::Fail);

    // The names and ~redisson_lock* (what the docs once listed): plain and fair locks work, a
    // read lock's `{app:…}:<holder>:rwlock_timeout` key does not (tests/least_privilege.rs has
    // the rule every kind runs with).
    let with = diagnose(Config::new(url("applocks")).name_prefix("app:")).await;
    let acl = check(&with, "acl");
    assert_eq!(acl.status, CheckStatus::Fail, "{acl:?}");
    assert!(
        acl.seen
            .contains("(the scratch read lock \"app:lockman-doctor:"),
        "{acl:?}"
    );
    // Without the prefix the name is outside ~app:*.
    let unprefixed = diagnose(Config::new(url("applocks"))).await;
    assert_eq!(check(&unprefixed, "acl").status, CheckStatus::Fail);
}

/// The Valkey binary for the tests that need one beside `REDIS_SERVER_BIN`'s server:
/// `$LOCKMAN_VALKEY_SERVER`, else `.ci/servers`' install path. Missing: `None`, which fails the
/// test under CI and skips it elsewhere.
fn valkey_server() -> Option<std::path::PathBuf> {
    let path = match std::env::var_os("LOCKMAN_VALKEY_SERVER") {
        Some(path) => std::path::PathBuf::from(path),
        None => {
            let root = std::env::var_os("LOCKMAN_SERVERS")
                .map(std::path::PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME")
                        .map(|h| std::path::PathBuf::from(h).join(".cache/lockman-servers"))
                })?;
            root.join("valkey-9.1.2/valkey-server")
        }
    };
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "no Valkey at {} (set LOCKMAN_VALKEY_SERVER, or run .ci/servers)",
        path.display()
    );
    eprintln!("skipped: no Valkey at {}", path.display());
    None
}

/// A Valkey process on a free port, killed when dropped.
struct Valkey(Child, u16);

impl Valkey {
    fn start(bin: &std::path::Path, args: &[&str]) -> Self {
        let port = support::free_port();
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new(bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let url = format!("redis://127.0.0.1:{port}/0");
        let client = redis::Client::open(url).unwrap();
        let up = support::wait::eventually_blocking(Duration::from_secs(10), || {
            client
                .get_connection()
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
                .is_ok()
        });
        assert!(up, "valkey never answered");
        // The folder outlives the process only as long as this test needs it.
        std::mem::forget(dir);
        Self(child, port)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.1)
    }
}

impl Drop for Valkey {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn valkey_is_named_and_diagnosed_and_refused_without_scripting() {
    let Some(bin) = valkey_server() else {
        return;
    };
    let valkey = Valkey::start(&bin, &["--maxmemory-policy", "volatile-ttl"]);
    let diagnosis = diagnose(Config::new(valkey.url())).await;
    let server = check(&diagnosis, "server");
    assert_eq!(
        server.seen,
        format!("Valkey 9.1.2 (standalone) at {}", valkey.url())
    );
    assert_eq!(check(&diagnosis, "lpos").status, CheckStatus::Ok);
    assert_eq!(check(&diagnosis, "scripting").status, CheckStatus::Ok);
    let eviction = check(&diagnosis, "eviction");
    assert_eq!(eviction.status, CheckStatus::Warn);
    assert!(eviction.seen.starts_with("maxmemory-policy volatile-ttl"));
    // Valkey 9.1's binary here has its Lua engine built in (it cannot be unloaded); without
    // the scripting commands it is refused as a Redis is.
    let bare = Valkey::start(&bin, &NO_SCRIPTING);
    let err = LockManager::start(Config::new(bare.url()))
        .await
        .expect_err("no scripts");
    assert!(matches!(err, LockError::NoScripting { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_diagnosed_through_one_master() {
    let cluster = support::cluster::Cluster::start(3, 1);
    let diagnosis = diagnose(Config::cluster(cluster.urls())).await;
    let server = check(&diagnosis, "server");
    assert!(
        server.seen.contains(" (cluster, the master of slot 0) at "),
        "{server:?}"
    );
    let sharded = check(&diagnosis, "sharded_pubsub");
    assert_eq!(sharded.status, CheckStatus::Ok);
    assert_eq!(
        sharded.seen,
        "SPUBLISH is there; unlock messages are sharded"
    );
    // Asynchronous replicas behind every master, no WAIT asked (it would block a master's
    // connection that locks use).
    let replication = check(&diagnosis, "replication");
    assert_eq!(replication.status, CheckStatus::Warn, "{replication:?}");
    assert!(
        replication.seen.starts_with(
            "1 replica connected, min-replicas-to-write 0: replication is asynchronous"
        ),
        "{replication:?}"
    );
    assert_eq!(check(&diagnosis, "acl").status, CheckStatus::Ok);
    // The scratch locks and synchronizers ran on the master of their own slot.
    let scratch = check(&diagnosis, "scratch_lock");
    assert_eq!(scratch.status, CheckStatus::Ok, "{scratch:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_deployment_is_diagnosed_on_its_primary() {
    use support::sentinel::{DATA_PASSWORD, MASTER, SentinelGroup};
    let group = SentinelGroup::start();
    let config = Config::sentinel(MASTER, group.sentinel_urls()).master_auth(None, DATA_PASSWORD);
    let diagnosis = diagnose(config).await;
    let server = check(&diagnosis, "server");
    assert!(server.seen.contains(" (standalone) at "), "{server:?}");
    let replication = check(&diagnosis, "replication");
    assert_eq!(replication.status, CheckStatus::Warn, "{replication:?}");
    let seen = replication.seen.as_str();
    assert!(
        seen.starts_with(
            "1 replica connected, min-replicas-to-write 0: replication is asynchronous"
        ),
        "{replication:?}"
    );
}

#[tokio::test]
async fn a_user_without_info_and_config_gets_unknowns_not_guesses() {
    let server = server_with(&[
        "--user", "app", "on", ">pw", "~*", "&*", "+@all", "-info", "-config",
    ]);
    let url = format!("redis://app:pw@127.0.0.1:{}/0", server.port());
    let diagnosis = diagnose(Config::new(url)).await;
    let server_check = check(&diagnosis, "server");
    assert_eq!(server_check.status, CheckStatus::Warn);
    assert!(
        server_check.seen.starts_with("INFO refused ("),
        "{server_check:?}"
    );
    for (name, seen) in [
        ("eviction", "maxmemory-policy could not be read"),
        ("persistence", "unknown: INFO could not be read"),
        ("replication", "replicas unknown: INFO could not be read"),
    ] {
        let c = check(&diagnosis, name);
        assert_eq!((c.status, c.seen.as_str()), (CheckStatus::Warn, seen));
    }
    // What needs neither still reads.
    assert_eq!(check(&diagnosis, "clock").status, CheckStatus::Ok);
    assert_eq!(check(&diagnosis, "acl").status, CheckStatus::Ok);
}
