//! The summary as a table.

use serde_json::{Value, json};

pub fn print_table(s: &Value) {
    let row = |label: &str, v: &Value| {
        let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
        println!("| {label:<44} | {v:>16} |")
    };
    println!("| {:<44} | {:>16} |", "chaos run", "");
    println!("|{:-<46}|{:->18}|", "", "");
    row("deployment", &s["deployment"]);
    row("sync_replicas", &s["sync_replicas"]);
    row("seed", &s["seed"]);
    row("workers (× 3 tasks)", &s["workers"]);
    row(
        "seconds",
        &json!((s["seconds"].as_f64().unwrap_or(0.0) * 10.0).round() / 10.0),
    );
    row("acquisitions", &s["acquired_total"]);
    for (k, v) in s["acquired"].as_object().into_iter().flatten() {
        row(&format!("  {k}"), v);
    }
    // Beside the fair lock's acquisitions: its free locks with a live head not served.
    let heads = &s["fair_heads"];
    row(
        "  fair heads: samples/live/free with live",
        &json!(format!(
            "{}/{}/{}",
            heads["samples"], heads["samples_live_head"], heads["samples_free_with_live_head"]
        )),
    );
    row(
        "  fair heads: longest free with live head ms",
        &heads["longest_free_with_live_head_ms"],
    );
    row(
        &format!(
            "  fair live head unserved > {} ms: fault",
            heads["bound_ms"]
        ),
        &heads["not_served_explained"],
    );
    row(
        "  fair live head unserved: unexplained",
        &heads["not_served_unexplained"],
    );
    for (k, v) in s["faults"].as_object().into_iter().flatten() {
        row(&format!("fault {k}"), v);
    }
    for (k, v) in s["faults_failed"].as_object().into_iter().flatten() {
        row(&format!("fault {k}: could not inject"), v);
    }
    for (k, v) in s["violations"].as_object().into_iter().flatten() {
        row(&format!("violations: {k}"), v);
    }
    for (k, v) in s["violations_by_fault"].as_object().into_iter().flatten() {
        row(&format!("violations explained by {k}"), v);
    }
    row("failovers", &s["failovers"]);
    row(
        "failover stall ms, median",
        &s["failover_stall_ms"]["median"],
    );
    row("failover stall ms, max", &s["failover_stall_ms"]["max"]);
    for (k, v) in s["acquires_refused_by_replica_sync"]
        .as_object()
        .into_iter()
        .flatten()
    {
        row(&format!("refused by replica sync: {k}"), v);
    }
    row("fenced writes accepted", &s["fenced_writes"]["accepted"]);
    row(
        "fenced writes refused: frozen holder",
        &s["fenced_writes"]["refused_frozen_holder"],
    );
    row(
        "fenced writes refused: stale holder",
        &s["fenced_writes"]["refused_stale_holder"],
    );
    row(
        "fenced writes refused: split brain",
        &s["fenced_writes"]["refused_split_brain"],
    );
    row(
        "fenced writes refused: token went back",
        &s["fenced_writes"]["refused_token_went_backwards"],
    );
    row(
        "stale fenced writes accepted",
        &s["fenced_writes"]["stale_accepted"],
    );
    let leaders = &s["leaders"];
    row("leader terms", &leaders["terms"]);
    for (k, v) in leaders["ended"].as_object().into_iter().flatten() {
        row(&format!("  terms ended: {k}"), v);
    }
    row("campaigns timed out", &leaders["campaigns_timed_out"]);
    let two = &leaders["two_at_once"];
    row(
        "two leaders at once: a freeze",
        &two["explained_by_a_freeze"],
    );
    row(
        "two leaders at once: data loss, failover",
        &two["explained_by_a_data_loss_or_failover"],
    );
    row("two leaders at once: unexplained", &two["unexplained"]);
    let writes = &leaders["fenced_writes"];
    row("leader fenced writes accepted", &writes["accepted"]);
    row("leader fenced writes refused", &writes["refused"]);
    row("leader fenced writes failed", &writes["errors"]);
    row("leader stale writes accepted", &writes["stale_accepted"]);
    row(
        "  … after a data loss or failover",
        &writes["stale_accepted_after_a_data_loss_or_failover"],
    );
    let vacancy = |label: &str, v: &Value| {
        row(
            label,
            &json!(format!("{}/{}/{}", v["count"], v["p50"], v["max"])),
        )
    };
    vacancy(
        "no leader after a resign: n/p50/max ms",
        &leaders["without_leader"]["handover_ms"],
    );
    for (k, v) in leaders["without_leader"]["after_fault_ms"]
        .as_object()
        .into_iter()
        .flatten()
    {
        vacancy(&format!("no leader after {k}: n/p50/max ms"), v);
    }
    row(
        "holds lost, guard said so first",
        &s["lost"]["reported_by_guard"],
    );
    row(
        "holds lost, found at release",
        &s["lost"]["found_at_release"],
    );
    row(
        "lost signal, yet release worked",
        &s["lost"]["reported_but_released"],
    );
    for (k, v) in s["patterns"].as_object().into_iter().flatten() {
        row(&format!("pattern {k}"), v);
    }
    for (k, v) in s["excused_holds"].as_object().into_iter().flatten() {
        row(&format!("holds excused: {k}"), v);
    }
    row("process stalls (not injected)", &s["process_stalls"]);
    for b in s["bounds"].as_array().into_iter().flatten() {
        let what = b["what"].as_str().unwrap_or("?");
        row(&format!("{what} (bound {})", b["bound"]), &b["count"]);
    }
    row("stuck waiters", &s["stuck_waiters"]);
    let dl = &s["deadlocks"];
    if dl["mode"] != "off" {
        row("deadlock tasks: mode", &dl["mode"]);
        row("  rounds (both locks held)", &dl["rounds"]);
        row("  cycles formed (found + missed)", &dl["formed"]);
        row("  found in one process", &dl["found_in_process"]);
        row("  found across processes", &dl["found_across_processes"]);
        let after = |v: &Value| json!(format!("{}/{}/{}", v["p50"], v["p99"], v["max"]));
        row(
            "  found after ms, in process: p50/p99/max",
            &after(&dl["found_after_ms"]["in_process"]),
        );
        row(
            "  found after ms, across: p50/p99/max",
            &after(&dl["found_after_ms"]["across_processes"]),
        );
        row(
            &format!("  missed (still waiting after {} s)", dl["missed_after_s"]),
            &dl["missed"],
        );
        row("  false reports", &dl["false_reports"]);
        row("  bad cycles", &dl["bad_cycles"]);
        row("  first waits over 1 s", &dl["waits_over_1s"]["first"]);
        row("  second waits over 1 s", &dl["waits_over_1s"]["second"]);
        row(
            &format!("  first waits stuck ({} s)", dl["first_stuck_after_s"]),
            &dl["first_waits_stuck"],
        );
        row("  acquire errors", &dl["acquire_errors"]);
        row("  holds lost (a fault)", &dl["holds_lost"]);
        row("  release errors", &dl["release_errors"]);
        row("  stuck releases", &dl["stuck_releases"]);
        row("  ok", &dl["ok"]);
    }
    // Whatever the mode: `Deadlock` errors of the other tasks' acquires, by kind.
    for (k, v) in dl["reported_to_other_tasks"]
        .as_object()
        .into_iter()
        .flatten()
    {
        row(&format!("deadlock reported to a {k} acquire"), v);
    }
    row("held while every guard was gone", &s["held_while_alive"]);
    row("locks left behind", &s["leftover_locks"]);
    row("worker crashes", &s["worker_crashes"]);
    row("runner's checker calls that failed", &s["checker_errors"]);
    row("workers hung", &s["workers_hung"]);
    // The runner's failures, not lockman's: shown, but not part of `ok` (unless no fault at
    // all could be injected).
    for line in s["fault_failures"].as_array().into_iter().flatten() {
        println!("could not inject: {line}");
    }
    row("faults tried, none injected", &s["no_fault_injected"]);
    row("ok", &s["ok"]);
    for line in s["unexplained_sample"].as_array().into_iter().flatten() {
        println!("unexplained: {line}");
    }
    for line in s["deadlocks"]["notes"].as_array().into_iter().flatten() {
        println!("deadlock: {line}");
    }
    for line in heads["unexplained_sample"].as_array().into_iter().flatten() {
        println!("fair live head not served: {line}");
    }
}
