//! `lockman doctor`, end to end: the binary run against servers started here, its text and JSON
//! read line by line and field by field, and its exit codes (0 all well, 1 a warning, 78 a
//! failed check, 69 unreachable). Run with `cargo test --features cli --test doctor`.
#![cfg(feature = "cli")]

mod support;

use std::process::{Command, Output};

use serde_json::Value;
use support::{Options, RedisServer, server_with};

const LOCKMAN: &str = env!("CARGO_BIN_EXE_lockman");

fn doctor(url: &str, args: &[&str]) -> Output {
    Command::new(LOCKMAN)
        .arg("--url")
        .arg(url)
        .arg("doctor")
        .args(args)
        .env_remove("LOCKMAN_URL")
        .env_remove("REDIS_URL")
        .env_remove("LOCKMAN_PREFIX")
        .output()
        .expect("run lockman")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// Each check's name and status, from `--json`.
fn statuses(json: &Value) -> Vec<(String, String)> {
    json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, s)| ((*n).to_owned(), (*s).to_owned()))
        .collect()
}

#[test]
fn an_evicting_server_without_persistence_warns_and_exits_1() {
    let server = server_with(&["--maxmemory-policy", "volatile-lru"]);
    let out = doctor(&server.url(), &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    // One line per check, its advice under it when it is not ✔, and the count.
    let marks: Vec<String> = lines
        .iter()
        .filter(|l| !l.starts_with("  "))
        .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        marks,
        [
            "✔ server",
            "✔ tls",
            "✔ scripting",
            "✔ lpos",
            "✔ sharded_pubsub",
            "✔ acl",
            "✔ scratch_lock",
            "⚠ eviction",
            "⚠ persistence",
            "✔ replication",
            "✔ keyspace_events",
            "✔ clock",
            "✔ round_trip",
            "11 ok,",
        ],
        "{text}"
    );
    assert!(
        lines.contains(
            &"⚠ eviction         maxmemory-policy volatile-lru (maxmemory 0: no limit is set yet): \
               under memory pressure it evicts keys with a TTL, and every lock key has one: a \
               lock can vanish while held, and a second holder take it"
        ),
        "{text}"
    );
    assert!(
        lines.contains(
            &"                   → CONFIG SET maxmemory-policy noeviction (or keep locks on a \
               server of their own); Config::refuse_evicting_server(true) refuses to start here"
        ),
        "{text}"
    );
    assert_eq!(lines.last(), Some(&"11 ok, 2 warnings, 0 failures"));

    let out = doctor(&server.url(), &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["status"], "warn");
    assert_eq!(
        statuses(&json),
        pairs(&[
            ("server", "ok"),
            ("tls", "ok"),
            ("scripting", "ok"),
            ("lpos", "ok"),
            ("sharded_pubsub", "ok"),
            ("acl", "ok"),
            ("scratch_lock", "ok"),
            ("eviction", "warn"),
            ("persistence", "warn"),
            ("replication", "ok"),
            ("keyspace_events", "ok"),
            ("clock", "ok"),
            ("round_trip", "ok"),
        ])
    );
    let persistence = &json["checks"][8];
    assert!(
        persistence["seen"]
            .as_str()
            .unwrap()
            .starts_with("none (no AOF, no RDB snapshots)"),
        "{persistence}"
    );
    assert_eq!(
        persistence["advice"],
        "appendonly yes (appendfsync everysec or always), or run a replica and fail over to it"
    );
}

#[test]
fn a_server_as_lockman_needs_it_exits_0() {
    let server = server_with(&["--appendonly", "yes", "--notify-keyspace-events", "Kghx"]);
    let out = doctor(&server.url(), &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["status"], "ok");
    assert!(statuses(&json).iter().all(|(_, s)| s == "ok"), "{json}");
    assert_eq!(
        json["checks"][10]["seen"],
        "notify-keyspace-events \"ghxK\": lockman watch shows acquires, renewals and expiries"
    );
    let out = doctor(&server.url(), &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).ends_with("13 ok, 0 warnings, 0 failures\n"));
    // The scratch locks are gone; what the scratch synchronizers leave (their counters and
    // request latches) expires within a minute: nothing stays for good.
    let mut conn = server.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    assert!(!keys.is_empty(), "the scratch synchronizers' keys");
    for key in keys {
        assert!(key.contains("lockman-doctor:"), "{key}");
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut conn).unwrap();
        assert!((1..=60_000).contains(&ttl), "{key}: {ttl}");
    }
}

#[test]
fn an_unreachable_server_exits_69_with_one_failed_check() {
    let url = format!("redis://127.0.0.1:{}", support::closed_port());
    let out = doctor(&url, &["--connect-timeout", "2s"]);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.starts_with("✘ server           cannot connect to redis://127.0.0.1:"),
        "{text}"
    );
    assert!(text.ends_with("0 ok, 0 warnings, 1 failures\n"), "{text}");
    let out = doctor(&url, &["--json", "--connect-timeout", "2s"]);
    assert_eq!(out.status.code(), Some(69));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(statuses(&json), pairs(&[("server", "fail")]));
}

#[test]
fn no_scripting_and_missing_key_patterns_fail_with_78() {
    let bare = server_with(&[
        "--rename-command",
        "SCRIPT",
        "",
        "--rename-command",
        "EVALSHA",
        "",
    ]);
    let out = doctor(&bare.url(), &["--json"]);
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["status"], "fail");
    assert_eq!(statuses(&json), pairs(&[("scripting", "fail")]));
    let seen = json["checks"][0]["seen"].as_str().unwrap();
    assert!(
        seen.contains("cannot run Lua scripts, which every lock needs"),
        "{seen}"
    );

    let acl = server_with(&["--user", "appkeys", "on", ">pw", "~app:*", "&*", "+@all"]);
    let url = format!("redis://appkeys:pw@127.0.0.1:{}/0", acl.port());
    let out = Command::new(LOCKMAN)
        .args(["--url", &url, "--prefix", "app:", "doctor"])
        .env_remove("LOCKMAN_URL")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.lines().any(|l| l.starts_with(
            "✘ acl              the redis user may not release on \"app:lockman-doctor:"
        )),
        "{text}"
    );
}

/// The clock check at its edge: `lockman doctor` run under libfaketime 30 s ahead of the server
/// (its monotonic clock left true) reports the offset, a warning, and exits 1; the same server
/// read from an unskewed process is ✔. Catches an offset computed from the monotonic clock, or
/// with its sign lost, or a skew that never reaches the report.
#[test]
fn a_client_clock_30s_ahead_is_a_clock_warning() {
    let server = server_with(&["--appendonly", "yes"]);
    let skewed = support::fair::skewed(LOCKMAN, "+30s")
        .arg("--url")
        .arg(server.url())
        .args(["doctor", "--json"])
        .env_remove("LOCKMAN_URL")
        .env_remove("REDIS_URL")
        .env_remove("LOCKMAN_PREFIX")
        .output()
        .expect("run lockman under libfaketime");
    let json: Value = serde_json::from_slice(&skewed.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", stdout(&skewed)));
    let clock = json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "clock")
        .unwrap_or_else(|| panic!("no clock check: {json}"));
    assert_eq!(clock["status"], "warn", "{clock}");
    let seen = clock["seen"].as_str().unwrap();
    let ms: i64 = seen
        .trim_start_matches("the server's clock is ")
        .split("ms")
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{seen}"));
    assert!((29_000..=31_000).contains(&ms), "{seen}");
    assert!(
        seen.contains("behind"),
        "the server is behind this client: {seen}"
    );
    assert_eq!(skewed.status.code(), Some(1), "{}", stdout(&skewed));

    let plain = doctor(&server.url(), &["--json"]);
    let json: Value = serde_json::from_slice(&plain.stdout).unwrap();
    let status = statuses(&json)
        .into_iter()
        .find(|(n, _)| n == "clock")
        .map(|(_, s)| s);
    assert_eq!(status.as_deref(), Some("ok"), "{json}");
}

/// The check named `name` of a `--json` report.
fn check_of(json: &Value, name: &str) -> Value {
    json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} check: {json}"))
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// `min-replicas-to-write 1` and no replica: the server refuses every write (`NOREPLICAS`),
/// so every acquire fails. The doctor is ✘ replication (the setting against the replicas) and ✘
/// scratch_lock in the server's own words, and exits 78. Catches a replication check that says
/// "nothing to fail over to" whenever there are no replicas, and a doctor that never writes
/// (defect 2 of the attack report: all ✔, exit 0).
#[test]
fn min_replicas_to_write_without_a_replica_fails_with_78() {
    let server = server_with(&["--appendonly", "yes", "--min-replicas-to-write", "1"]);
    let out = doctor(&server.url(), &["--json"]);
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    let json = json_of(&out);
    let replication = check_of(&json, "replication");
    assert_eq!(replication["status"], "fail", "{replication}");
    let seen = replication["seen"].as_str().unwrap();
    assert!(
        seen.starts_with("0 replicas connected, min-replicas-to-write 1, 0 of them in time")
            && seen.contains("NOREPLICAS"),
        "{seen}"
    );
    let scratch = check_of(&json, "scratch_lock");
    assert_eq!(scratch["status"], "fail", "{scratch}");
    let seen = scratch["seen"].as_str().unwrap();
    assert!(
        seen.starts_with("the scratch lock \"lockman-doctor:") && seen.contains("NOREPLICAS"),
        "{seen}"
    );
}

/// Only `EVALSHA` renamed away (`SCRIPT` left): no lock can run, and the doctor says
/// `scripting` ✘ with the server's words and exits 78, as for `SCRIPT` renamed. Catches the
/// start-time probe's EVALSHA error read as a generic Redis error (defect 6: exit 69).
#[test]
fn evalsha_renamed_away_is_no_scripting_with_78() {
    let bare = server_with(&["--rename-command", "EVALSHA", ""]);
    let out = doctor(&bare.url(), &["--json"]);
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    let json = json_of(&out);
    assert_eq!(statuses(&json), pairs(&[("scripting", "fail")]));
    let seen = json["checks"][0]["seen"].as_str().unwrap();
    assert!(
        seen.contains("cannot run Lua scripts") && seen.contains("EVALSHA"),
        "{seen}"
    );
}

/// The least-privilege rule of docs/protocol.md ("ACL"), for `user`, `password` and `prefix`,
/// as the arguments of one `ACL SETUSER`, less the patterns in `without`.
pub fn acl_rule(user: &str, password: &str, prefix: &str, without: &[&str]) -> Vec<String> {
    let docs = include_str!("../docs/protocol.md");
    let line = docs
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("ACL SETUSER <user>"))
        .expect("the ACL line of docs/protocol.md");
    line.replace("<user>", user)
        .replace("<password>", password)
        .replace("<prefix>", prefix)
        .split_whitespace()
        .skip(2)
        .filter(|part| !without.contains(part))
        .map(str::to_owned)
        .collect()
}

fn set_user(server: &RedisServer, rule: &[String]) {
    let mut conn = server.conn();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(rule)
        .query(&mut conn)
        .expect("ACL SETUSER");
}

/// A user given every pattern of the least-privilege rule but one: the read-write lock's
/// `{name}:…` keys, the semaphore channel declared as a key (`~redisson_sc:*`), or `RPUSH` (a
/// fair lock's queue, written only when someone waits). Each is ✘
/// acl naming the kind that failed, exit 78, with the whole rule as advice. Catches a key check
/// that tries only a plain lock's keys (defect 4: ✔, then every read-write lock `NOPERM`).
#[test]
fn a_user_missing_the_rwlock_or_semaphore_patterns_fails_acl() {
    let server = server_with(&["--appendonly", "yes"]);
    for (without, kind, what) in [
        ("~{app:*", "read lock", "{app:lockman-doctor:"),
        (
            "~redisson_sc:*",
            "semaphore",
            "redisson_sc:{app:lockman-doctor:",
        ),
        // Only a fair lock that someone waits for queues (RPUSH): the doctor waits for its
        // scratch fair lock too (it said ✔, and every contended fair lock then failed).
        (
            "+rpush",
            "fair lock, waited for",
            // Redis 7.0's words; Valkey's name the command.
            if support::server().version.starts_with("Valkey") {
                "'rpush'"
            } else {
                "can't run this command"
            },
        ),
    ] {
        set_user(&server, &acl_rule("lm", "lmpw", "app:", &[without]));
        let url = format!("redis://lm:lmpw@127.0.0.1:{}/0", server.port());
        let out = Command::new(LOCKMAN)
            .args(["--url", &url, "--prefix", "app:", "doctor", "--json"])
            .env_remove("LOCKMAN_URL")
            .env_remove("REDIS_URL")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(78), "{without}: {out:?}");
        let json = json_of(&out);
        let acl = check_of(&json, "acl");
        assert_eq!(acl["status"], "fail", "{without}: {acl}");
        let seen = acl["seen"].as_str().unwrap();
        assert!(
            (seen.contains("NoPerm") || seen.contains("may not acquire"))
                && seen.contains(&format!("(the scratch {kind} \"app:lockman-doctor:"))
                && seen.contains(what),
            "{without}: {seen}"
        );
        let advice = acl["advice"].as_str().unwrap();
        assert!(
            advice.contains("ACL SETUSER <user> reset on ><password> ~app:* ~{app:* "),
            "{advice}"
        );
    }
}

/// `COMMAND` refused to the user: `lpos` says "could not check (COMMAND refused …)", never
/// "LPOS is missing", and `sharded_pubsub` never "missing" (finding L4 of the security review).
#[test]
fn command_refused_is_could_not_check() {
    let server = server_with(&["--appendonly", "yes"]);
    set_user(
        &server,
        &["lm", "on", ">lmpw", "~*", "&*", "+@all", "-command"].map(String::from),
    );
    let url = format!("redis://lm:lmpw@127.0.0.1:{}/0", server.port());
    let out = doctor(&url, &["--json"]);
    let json = json_of(&out);
    let lpos = check_of(&json, "lpos");
    assert_eq!(lpos["status"], "warn", "{lpos}");
    assert!(
        lpos["seen"]
            .as_str()
            .unwrap()
            .starts_with("could not check (COMMAND refused"),
        "{lpos}"
    );
    let sharded = check_of(&json, "sharded_pubsub");
    assert_eq!(sharded["status"], "ok", "{sharded}");
    assert!(
        !sharded["seen"].as_str().unwrap().contains("missing"),
        "{sharded}"
    );
    assert_eq!(check_of(&json, "scratch_lock")["status"], "ok", "{json}");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

/// AOF with `appendfsync no`: ⚠ persistence saying that the OS flushes (typically every 30 s
/// on Linux), not "the last second of writes" (defect 7); everysec is ✔ with the last second.
#[test]
fn appendfsync_no_warns_that_the_os_flushes() {
    let server = server_with(&["--appendonly", "yes", "--appendfsync", "no"]);
    let json = json_of(&doctor(&server.url(), &["--json"]));
    let persistence = check_of(&json, "persistence");
    assert_eq!(persistence["status"], "warn", "{persistence}");
    let seen = persistence["seen"].as_str().unwrap();
    assert!(
        seen.starts_with("AOF on (appendfsync no): Redis never flushes the file; the OS does")
            && seen.contains("typically every 30 s on Linux")
            && !seen.contains("last second"),
        "{seen}"
    );
    assert_eq!(persistence["advice"], "appendfsync everysec (or always)");
}

/// `#insecure` on a `rediss://` URL turns certificate and host checks off: ⚠ tls (finding L3);
/// the same server with its CA trusted is ✔ tls.
#[test]
fn insecure_tls_is_a_tls_warning() {
    let certs = std::sync::Arc::new(support::certs::TestCerts::generate());
    let server = RedisServer::start_with(Options {
        tls: Some(certs.clone()),
        args: vec!["--appendonly".into(), "yes".into()],
        ..Options::default()
    });
    let insecure = format!("{}#insecure", server.url());
    let json = json_of(&doctor(&insecure, &["--json"]));
    let tls = check_of(&json, "tls");
    assert_eq!(tls["status"], "warn", "{tls}");
    assert!(
        tls["seen"]
            .as_str()
            .unwrap()
            .starts_with("TLS with certificate and host name checks OFF (#insecure"),
        "{tls}"
    );
    let ca = certs.file("ca.pem");
    let json = json_of(&doctor(
        &server.url(),
        &["--json", "--tls-ca", ca.to_str().unwrap()],
    ));
    assert_eq!(check_of(&json, "tls")["status"], "ok", "{json}");
}

/// A user refused at start (the least-privilege rule less the read-write lock's channel): ✘ acl
/// naming the channel, exit 78, and the whole rule for the prefix as advice.
#[test]
fn a_user_refused_at_start_gets_the_rule_as_advice() {
    let server = server_with(&["--appendonly", "yes"]);
    set_user(
        &server,
        &acl_rule("lm", "lmpw", "app:", &["&redisson_rwlock:*"]),
    );
    let url = format!("redis://lm:lmpw@127.0.0.1:{}/0", server.port());
    let out = Command::new(LOCKMAN)
        .args(["--url", &url, "--prefix", "app:", "doctor", "--json"])
        .env_remove("LOCKMAN_URL")
        .env_remove("REDIS_URL")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    let json = json_of(&out);
    assert_eq!(statuses(&json), pairs(&[("acl", "fail")]));
    let acl = check_of(&json, "acl");
    assert!(
        acl["seen"]
            .as_str()
            .unwrap()
            .contains("redisson_rwlock:{lockman:acl-check}"),
        "{acl}"
    );
    let advice = acl["advice"].as_str().unwrap();
    assert!(
        advice.contains("ACL SETUSER <user> reset on ><password> ~app:* ~{app:* ")
            && advice.contains(" &redisson_rwlock:* "),
        "{advice}"
    );
}

/// A server at `maxmemory` under `noeviction` refuses every write (`OOM`): ✘ scratch_lock with
/// the refusal, exit 78, although every setting read is as lockman needs it. Catches a doctor
/// that reads the eviction policy and never writes.
#[test]
fn a_server_out_of_memory_fails_the_scratch_lock_with_78() {
    let server = server_with(&["--appendonly", "yes", "--maxmemory", "1"]);
    let out = doctor(&server.url(), &["--json"]);
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    let json = json_of(&out);
    let scratch = check_of(&json, "scratch_lock");
    assert_eq!(scratch["status"], "fail", "{scratch}");
    assert!(
        scratch["seen"].as_str().unwrap().contains("out of memory"),
        "{scratch}"
    );
    assert_eq!(
        scratch["advice"],
        "the server is at maxmemory: free memory or raise maxmemory"
    );
    assert_eq!(check_of(&json, "eviction")["status"], "ok", "{json}");
}

/// `lockman --sync-replicas 1 doctor` with its one replica frozen (SIGSTOP, still connected):
/// ✘ replication with what WAIT acknowledged after the scratch lock's acquire (0 of 1), ✘
/// scratch_lock, exit 78; with the replica running again, exit 0 on the same server. Catches
/// the replica count read from INFO (connected_slaves: 1) standing for an acknowledgement
/// (issue 57, "Done when").
#[test]
fn a_frozen_replica_under_sync_replicas_exits_78() {
    let primary = server_with(&["--appendonly", "yes"]);
    let replica = server_with(&["--replicaof", "127.0.0.1", &primary.port().to_string()]);
    let mut raw = primary.conn();
    let online = |raw: &mut redis::Connection| {
        let info: String = redis::cmd("INFO").arg("replication").query(raw).unwrap();
        info.contains("connected_slaves:1") && info.contains("state=online")
    };
    assert!(
        support::wait::eventually_blocking(std::time::Duration::from_secs(10), || online(&mut raw)),
        "the replica never came online"
    );
    let synced = ["--sync-replicas", "1", "--sync-timeout", "300ms", "--json"];
    replica.pause(support::FROZEN).expect("pause the server");
    let out = doctor(&primary.url(), &synced);
    replica.resume().expect("resume the server");
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    let json = json_of(&out);
    let replication = check_of(&json, "replication");
    assert_eq!(replication["status"], "fail", "{replication}");
    assert!(
        replication["seen"]
            .as_str()
            .unwrap()
            .contains("WAIT after the scratch lock's acquire: 0 of 1 replicas acknowledged"),
        "{replication}"
    );
    assert_eq!(check_of(&json, "scratch_lock")["status"], "fail", "{json}");

    // The replica acknowledges again (on its own, every second): the same command passes.
    let caught_up = support::wait::eventually_blocking(std::time::Duration::from_secs(10), || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut raw)
            .unwrap();
        let offset = info
            .lines()
            .find_map(|l| l.strip_prefix("master_repl_offset:"))
            .map(str::to_owned);
        offset.is_some_and(|o| info.contains(&format!(",offset={o},")))
    });
    assert!(caught_up, "the replica never acknowledged again");
    let out = doctor(&primary.url(), &synced);
    let json = json_of(&out);
    assert_eq!(check_of(&json, "replication")["status"], "ok", "{json}");
    assert_eq!(out.status.code(), Some(0), "{json}");
}
