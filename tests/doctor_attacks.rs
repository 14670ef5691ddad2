//! `LockManager::diagnose` against servers configured to break what it checks, where the break
//! needs a second server or a signal at the right moment: a replica frozen (SIGSTOP) under
//! replica sync, and the primary killed or frozen while the diagnosis waits on it. Each test
//! asserts what the diagnosis tried (its scratch lock's acquire, and the `WAIT` after it), not
//! what the settings say.

mod support;

use std::time::{Duration, Instant};

use lockman::{CheckStatus, Config, Diagnosis, LockError, LockManager};
use support::primary_and_replica;

fn check<'d>(diagnosis: &'d Diagnosis, name: &str) -> &'d lockman::Check {
    diagnosis
        .check(name)
        .unwrap_or_else(|| panic!("no {name} check: {diagnosis:?}"))
}

/// A replica that is connected but acknowledges nothing (SIGSTOP) under `sync_replicas(1, …)`:
/// every acquire fails `ReplicaSync`, and the diagnosis says so (✘ replication with what WAIT
/// acknowledged after its scratch lock's acquire, ✘ scratch_lock), although INFO still counts
/// the replica as connected. Once the replica runs again, the same diagnosis is ✔. Catches a
/// replication check judged by `connected_slaves`, or a WAIT with no write before it (which
/// returns at once with the replica's old acknowledgement: defect 3 of the attack report).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_under_replica_sync_fails_replication() {
    let (primary, replica) = primary_and_replica();
    let config = Config::new(primary.url())
        .sync_replicas(1, Duration::from_millis(300))
        .response_timeout(Duration::from_secs(2));
    let manager = LockManager::start(config).await.unwrap();
    replica.pause(support::FROZEN).expect("pause the server");
    let diagnosis = manager.diagnose().await.expect("a diagnosis");
    replica.resume().expect("resume the server");
    let replication = check(&diagnosis, "replication");
    assert_eq!(replication.status, CheckStatus::Fail, "{replication:?}");
    assert!(
        replication.seen.starts_with("1 replica connected")
            && replication
                .seen
                .contains("WAIT after the scratch lock's acquire: 0 of 1 replicas acknowledged"),
        "{}",
        replication.seen
    );
    let scratch = check(&diagnosis, "scratch_lock");
    assert_eq!(scratch.status, CheckStatus::Fail, "{scratch:?}");
    assert!(
        scratch.seen.contains("only 0 of 1 replicas acknowledged"),
        "{}",
        scratch.seen
    );
    // Nothing of the scratch lock is left: the unsynced grant was given back.
    let mut raw = primary.conn();
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("*lockman-doctor*")
        .query(&mut raw)
        .unwrap();
    assert_eq!(left, Vec::<String>::new());

    // The control: once the replica has acknowledged everything again (it acknowledges on its
    // own every second), the same checks pass.
    let caught_up = support::wait::eventually_blocking(Duration::from_secs(10), || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut raw)
            .unwrap();
        let field = |key: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(str::to_owned)
        };
        let offset = field("master_repl_offset:");
        let acked = field("slave0:").and_then(|s| {
            s.split(',')
                .find_map(|kv| kv.strip_prefix("offset="))
                .map(str::to_owned)
        });
        offset.is_some() && offset == acked
    });
    assert!(caught_up, "the replica never acknowledged again");
    let diagnosis = manager.diagnose().await.expect("a diagnosis");
    let replication = check(&diagnosis, "replication");
    assert_eq!(replication.status, CheckStatus::Ok, "{replication:?}");
    assert_eq!(
        check(&diagnosis, "scratch_lock").status,
        CheckStatus::Ok,
        "{diagnosis:?}"
    );
    manager.shutdown().await;
}

/// A writable replica (`replica-read-only no`) takes the scratch locks as a primary does, so
/// only its role tells: a manager pointed at it locks names its primary's clients never see (two
/// holders: one there, one on the primary). The diagnosis fails the server check and names the
/// primary; the same manager on the primary is ✔. Catches a server check that reads only the
/// mode (`standalone`), as it did: "✔ server Redis 7.0.15 (standalone)".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writable_replica_fails_the_server_check() {
    let (primary, replica) = primary_and_replica();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("replica-read-only")
        .arg("no")
        .query(&mut replica.conn())
        .unwrap();
    let manager = LockManager::start(Config::new(replica.url()))
        .await
        .unwrap();
    let diagnosis = manager.diagnose().await.expect("a diagnosis");
    let server = check(&diagnosis, "server");
    assert_eq!(server.status, CheckStatus::Fail, "{server:?}");
    assert!(
        server.seen.contains("writable replica")
            && server
                .seen
                .contains(&format!("127.0.0.1:{}", primary.port())),
        "{}",
        server.seen
    );
    manager.shutdown().await;
    let manager = LockManager::start(Config::new(primary.url()))
        .await
        .unwrap();
    let diagnosis = manager.diagnose().await.expect("a diagnosis");
    assert_eq!(check(&diagnosis, "server").status, CheckStatus::Ok);
    manager.shutdown().await;
}

/// The primary killed (SIGKILL) and, in a second run, frozen (SIGSTOP) while the diagnosis's
/// scratch lock waits in `WAIT` for a frozen replica: the diagnosis ends in an `Err` (one line),
/// within the response timeout of the moment, never an `Ok(Diagnosis)` made of the broken
/// connection's errors, and nothing panics. Catches a diagnosis that records a reply that never
/// came as the server's answer (defect 5 of the attack report: "✔ replication … WAIT failed:
/// broken pipe").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_or_frozen_mid_diagnosis_is_an_error_in_time() {
    for kill in [true, false] {
        let (mut primary, replica) = primary_and_replica();
        let response = Duration::from_secs(3);
        let config = Config::new(primary.url())
            .sync_replicas(1, Duration::from_millis(2500))
            .response_timeout(response)
            .connect_timeout(Duration::from_secs(2));
        let manager = LockManager::start(config).await.unwrap();
        replica.pause(support::FROZEN).expect("pause the server");
        let diagnosing = tokio::spawn({
            let manager = manager.clone();
            async move { manager.diagnose().await }
        });
        // The scratch lock's WAIT is under way when the primary counts a blocked client.
        let mut raw = primary.conn();
        let waiting = support::wait::eventually_blocking(Duration::from_secs(10), || {
            let info: String = redis::cmd("INFO").arg("clients").query(&mut raw).unwrap();
            info.contains("blocked_clients:1")
        });
        assert!(waiting, "the diagnosis never waited for the replica");
        let broke = Instant::now();
        if kill {
            primary.stop();
        } else {
            primary.pause(support::FROZEN).expect("pause the server");
        }
        let outcome = tokio::time::timeout(response + Duration::from_secs(2), diagnosing)
            .await
            .expect("the diagnosis ended")
            .expect("no panic");
        let took = broke.elapsed();
        let err = match outcome {
            Ok(diagnosis) => panic!("kill={kill}: a diagnosis of a broken server: {diagnosis:?}"),
            Err(e) => e,
        };
        let line = err.to_string();
        assert!(!line.contains('\n'), "{line}");
        if kill {
            assert!(
                matches!(err, LockError::Redis { .. } | LockError::Connect { .. }),
                "{err:?}"
            );
            assert!(took < Duration::from_secs(2), "{took:?}: {line}");
        } else {
            assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
            assert!(took <= response + Duration::from_millis(500), "{took:?}");
        }
        // As `lockman doctor` does next: the shutdown ends too, the server still away.
        let shut = Instant::now();
        tokio::time::timeout(response + Duration::from_secs(2), manager.shutdown())
            .await
            .expect("the shutdown ended");
        let shut = shut.elapsed();
        assert!(shut <= response + Duration::from_millis(500), "{shut:?}");
        if !kill {
            primary.resume().expect("resume the server");
        }
        replica.resume().expect("resume the server");
    }
}
