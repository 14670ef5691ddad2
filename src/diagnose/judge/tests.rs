//! The judgement, given facts: each check's verdicts at their edges.

use super::access::*;
use super::durability::*;
use super::*;
use crate::diagnose::facts::parse_info;

fn facts(info: &[(&str, &str)], config: &[(&'static str, &str)]) -> Facts {
    Facts {
        info_refused: None,
        info: info
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        config: config
            .iter()
            .map(|(k, v)| (*k, Ok((*v).to_owned())))
            .collect(),
        known: Ok((true, true)),
        round_trips: vec![Duration::from_micros(300); 5],
        clock_offset_ms: Some(3),
        cluster: false,
        sharded: false,
        label: "redis://127.0.0.1:6379".into(),
    }
}

#[test]
fn info_lines_parse() {
    let info = parse_info("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n\r\n");
    assert_eq!(
        info.get("redis_version").map(String::as_str),
        Some("7.0.15")
    );
    assert_eq!(info.len(), 2);
}

/// A writable replica takes the scratch locks like a primary: only its role tells.
#[test]
fn a_writable_replica_fails_the_server_check() {
    let config = Config::new("redis://127.0.0.1:6380");
    let trial = Trial::default();
    let primary = facts(&[("role", "master")], &[]);
    assert_eq!(
        started_checks(&primary, &trial, &config)[0].status,
        CheckStatus::Ok
    );
    let replica = facts(
        &[
            ("role", "slave"),
            ("master_host", "10.0.0.5"),
            ("master_port", "6379"),
        ],
        &[],
    );
    let server = &started_checks(&replica, &trial, &config)[0];
    assert_eq!(server.status, CheckStatus::Fail);
    assert!(server.seen.contains("10.0.0.5:6379"), "{}", server.seen);
}

#[test]
fn every_policy_but_noeviction_warns() {
    for (policy, status) in [
        ("noeviction", CheckStatus::Ok),
        ("volatile-lru", CheckStatus::Warn),
        ("allkeys-lfu", CheckStatus::Warn),
        ("volatile-ttl", CheckStatus::Warn),
    ] {
        let f = facts(&[("maxmemory_policy", policy)], &[]);
        assert_eq!(eviction(&f).status, status, "{policy}");
    }
}

#[test]
fn persistence_reads_aof_and_save() {
    let none = facts(&[("aof_enabled", "0")], &[("save", "")]);
    assert_eq!(persistence(&none).status, CheckStatus::Warn);
    assert!(persistence(&none).seen.starts_with("none"));
    let rdb = facts(&[("aof_enabled", "0")], &[("save", "3600 1")]);
    assert!(persistence(&rdb).seen.starts_with("RDB snapshots only"));
    let aof = facts(&[("aof_enabled", "1")], &[("appendfsync", "always")]);
    assert_eq!(persistence(&aof).status, CheckStatus::Ok);
}

#[test]
fn replicas_without_sync_warn_and_too_few_for_sync_fail() {
    let f = facts(&[("connected_slaves", "1")], &[]);
    let none = Trial::default();
    let config = Config::new("redis://127.0.0.1:6379");
    assert_eq!(replication(&f, &none, &config).status, CheckStatus::Warn);
    let synced = config.sync_replicas(2, Duration::from_millis(100));
    assert_eq!(replication(&f, &none, &synced).status, CheckStatus::Fail);
    // What WAIT acknowledged after the scratch write decides, not the replicas connected.
    let mut unsynced = Trial {
        synced: Some(Some((0, 1))),
        ..Trial::default()
    };
    let one = Config::new("redis://x").sync_replicas(1, Duration::from_millis(100));
    assert_eq!(replication(&f, &unsynced, &one).status, CheckStatus::Fail);
    unsynced.synced = Some(None);
    assert_eq!(replication(&f, &unsynced, &one).status, CheckStatus::Ok);
}

#[test]
fn without_info_replica_sync_is_judged_by_what_wait_acknowledged() {
    let mut f = facts(&[], &[]);
    f.info_refused = Some("NOPERM".into());
    let one = Config::new("redis://x").sync_replicas(1, Duration::from_millis(100));
    let unsynced = Trial {
        synced: Some(Some((0, 1))),
        ..Trial::default()
    };
    let c = replication(&f, &unsynced, &one);
    assert_eq!(c.status, CheckStatus::Fail, "{}", c.seen);
    assert!(
        c.seen.contains("0 of 1 replicas acknowledged"),
        "{}",
        c.seen
    );
    let synced = Trial {
        synced: Some(None),
        ..Trial::default()
    };
    assert_eq!(replication(&f, &synced, &one).status, CheckStatus::Ok);
    let plain = Config::new("redis://x");
    assert_eq!(replication(&f, &synced, &plain).status, CheckStatus::Warn);
}

#[test]
fn min_replicas_to_write_above_the_replicas_in_time_fails() {
    let config = Config::new("redis://x");
    let none = Trial::default();
    let alone = facts(
        &[("connected_slaves", "0")],
        &[("min-replicas-to-write", "1")],
    );
    let c = replication(&alone, &none, &config);
    assert_eq!(c.status, CheckStatus::Fail, "{}", c.seen);
    assert!(c.seen.contains("NOREPLICAS"), "{}", c.seen);
    let lagging = facts(
        &[("connected_slaves", "1"), ("min_slaves_good_slaves", "0")],
        &[("min-replicas-to-write", "1")],
    );
    assert_eq!(
        replication(&lagging, &none, &config).status,
        CheckStatus::Fail
    );
    let fine = facts(
        &[("connected_slaves", "1"), ("min_slaves_good_slaves", "1")],
        &[("min-replicas-to-write", "1")],
    );
    assert_eq!(replication(&fine, &none, &config).status, CheckStatus::Warn);
}

#[test]
fn each_appendfsync_is_described_as_the_redis_docs_say() {
    let seen = |fsync: &str| {
        let f = facts(&[("aof_enabled", "1")], &[("appendfsync", fsync)]);
        let c = persistence(&f);
        (c.status, c.seen)
    };
    let (status, always) = seen("always");
    assert_eq!(status, CheckStatus::Ok);
    assert!(always.contains("before it is answered"), "{always}");
    let (status, everysec) = seen("everysec");
    assert_eq!(status, CheckStatus::Ok);
    assert!(everysec.contains("the last second"), "{everysec}");
    let (status, no) = seen("no");
    assert_eq!(status, CheckStatus::Warn);
    assert!(no.contains("typically every 30 s"), "{no}");
    assert!(!no.contains("last second"), "{no}");
}

#[test]
fn command_refused_is_could_not_check_not_missing() {
    let mut f = facts(&[], &[]);
    f.known = Err("NOPERM".into());
    let checks = started_checks(&f, &Trial::default(), &Config::new("redis://x"));
    let lpos = checks.iter().find(|c| c.name == "lpos").expect("lpos");
    assert!(
        lpos.seen.starts_with("could not check (COMMAND refused"),
        "{}",
        lpos.seen
    );
    let sharded = checks
        .iter()
        .find(|c| c.name == "sharded_pubsub")
        .expect("sharded");
    assert!(!sharded.seen.contains("missing"), "{}", sharded.seen);
}

#[test]
fn the_acl_of_the_advice_is_the_one_of_the_docs() {
    let docs = include_str!("../../../docs/protocol.md");
    let line = docs
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("ACL SETUSER <user>"))
        .expect("the ACL line in docs/protocol.md");
    assert_eq!(least_privilege_acl("<prefix>"), line);
}

#[test]
fn insecure_tls_warns() {
    assert_eq!(tls(&Config::new("redis://x")).status, CheckStatus::Ok);
    assert_eq!(tls(&Config::new("rediss://x:6380")).status, CheckStatus::Ok);
    let c = tls(&Config::new("rediss://x:6380/#insecure"));
    assert_eq!(c.status, CheckStatus::Warn);
    assert!(c.seen.contains("OFF"), "{}", c.seen);
}

#[test]
fn clock_offsets_past_a_second_warn() {
    let mut f = facts(&[], &[]);
    f.clock_offset_ms = Some(-1500);
    let c = clock(&f);
    assert_eq!(c.status, CheckStatus::Warn);
    assert!(c.seen.contains("1500ms behind"), "{}", c.seen);
}

#[test]
fn slow_round_trips_warn_then_fail() {
    let config = Config::new("redis://x").response_timeout(Duration::from_secs(1));
    let mut f = facts(&[], &[]);
    assert_eq!(round_trip(&f, &config).status, CheckStatus::Ok);
    f.round_trips[4] = Duration::from_millis(600);
    assert_eq!(round_trip(&f, &config).status, CheckStatus::Warn);
    f.round_trips = vec![Duration::from_millis(1200); 5];
    assert_eq!(round_trip(&f, &config).status, CheckStatus::Fail);
}
