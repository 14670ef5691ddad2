//! The CI-sized chaos run: the chaos runner (examples/chaos) for about 25 s with three worker
//! processes and every fault at least once; its JSON summary must show no unexplained exclusion
//! violation, no stale fenced write accepted, no stuck waiter, no lock left behind and no worker
//! that crashed or hung. The long run behind RELIABILITY.md is the same runner, run by command.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const FAULTS: [&str; 8] = [
    "kill-holder",
    "stop-holder",
    "restart-empty",
    "restart-aof",
    "client-kill",
    "stall-redis",
    "redlock-minority",
    "redlock-majority",
];

/// The runner's binary: `cargo test` builds the examples beside the tests; when only this test
/// was built (`cargo test --test chaos`), build it.
fn runner() -> PathBuf {
    let dir = std::env::current_exe()
        .expect("test binary")
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir")
        .to_path_buf();
    let exe = dir.join("examples").join("chaos");
    if !exe.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let built = Command::new(cargo)
            .args(["build", "--example", "chaos"])
            .status()
            .expect("run cargo");
        assert!(built.success(), "cargo build --example chaos");
    }
    exe
}

#[test]
fn every_fault_at_least_once_and_nothing_unexplained() {
    let out = Command::new(runner())
        .args([
            "--duration",
            "25",
            "--workers",
            "3",
            "--fault-gap",
            "600",
            "--json",
        ])
        .output()
        .expect("run the chaos runner");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("JSON summary ({e}); stderr:\n{stderr}"));
    let show = serde_json::to_string_pretty(&summary).unwrap_or_default();
    let n = |v: &Value| {
        v.as_u64()
            .unwrap_or_else(|| panic!("a count, not {v}: {show}"))
    };

    for fault in FAULTS {
        assert!(
            n(&summary["faults"][fault]) >= 1,
            "{fault} never ran: {show}"
        );
    }
    for (kind, count) in summary["acquired"].as_object().expect("by kind") {
        assert!(n(count) > 0, "no {kind} was ever acquired: {show}");
    }
    // The ways users take a lock that the two-holder defect of nested holds hid behind.
    for pattern in [
        "nested_holds",
        "clones_at_once",
        "shutdowns_while_acquiring",
    ] {
        assert!(
            n(&summary["patterns"][pattern]) > 0,
            "{pattern} never ran: {show}"
        );
    }
    assert_eq!(
        n(&summary["patterns"]["shutdown_left_a_live_guard"]),
        0,
        "{show}"
    );
    assert_eq!(n(&summary["violations"]["unexplained"]), 0, "{show}");
    assert_eq!(n(&summary["fenced_writes"]["stale_accepted"]), 0, "{show}");
    assert!(n(&summary["fenced_writes"]["accepted"]) > 0, "{show}");
    assert_eq!(n(&summary["stuck_waiters"]), 0, "{show}");
    // Every guard gone, the managers still running: Redis holds nothing.
    assert_eq!(n(&summary["held_while_alive"]), 0, "{show}");
    assert_eq!(n(&summary["leftover_locks"]), 0, "{show}");
    // Excuses, errors, time-outs and losses within what the faults injected allow (the bounds
    // are stated in examples/chaos/run.rs, `Runner::bounds`); a freeze excuses at most the
    // frozen worker's own holds.
    let bounds = summary["bounds"].as_array().expect("bounds");
    assert!(bounds.len() >= 6 + 7, "{show}");
    for b in bounds {
        assert!(
            n(&b["count"]) <= n(&b["bound"]),
            "{b} out of bounds: {show}"
        );
    }
    assert!(
        n(&summary["excused_holds"]["pause"]) <= 3 * n(&summary["faults"]["stop-holder"]),
        "{show}"
    );
    assert_eq!(n(&summary["worker_crashes"]), 0, "{show}\n{stderr}");
    assert_eq!(n(&summary["checker_errors"]), 0, "{show}");
    assert_eq!(n(&summary["workers_hung"]), 0, "{show}\n{stderr}");
    assert_eq!(summary["ok"], Value::Bool(true), "{show}");
    assert!(out.status.success(), "exit {:?}: {show}", out.status);
}
