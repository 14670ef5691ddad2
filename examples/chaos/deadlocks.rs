//! The deadlock mode (`--deadlocks random|ordered`): beside its other tasks, every worker runs
//! [`TASKS`] deadlock tasks that take two of [`NAMES`] plain locks (`chaos:dl:<i>`), one after
//! the other, each with `acquire()` (no timeout: a wait ends when the lock is granted or the
//! cycle it is part of is broken), hold them a moment and release both. In `random` mode the
//! two are taken in a random order, so cycles of waits form, inside one worker and across
//! workers; lockman must find every one (the youngest wait fails with `LockError::Deadlock`).
//! In `ordered` mode they are always taken in ascending order, so no cycle can form, and any
//! `Deadlock` is a false report.
//!
//! Counted (on the checker, `counts`, fields `deadlock:*`):
//! - `found`: second acquires that failed with `Deadlock`, split by whether every step of the
//!   cycle is in this worker (found by its waits-for graph at once) or not (found by following
//!   waits published in Redis, once they lasted 1 s), with how long each wait lasted;
//! - `missed`: second acquires still waiting after [`missed_after`] (20 s on one server): a
//!   cycle that formed and was not found. The wait is then given up (counted), which ends the
//!   cycle, so the run goes on. With no other bound on any wait, a cycle ends only by being
//!   found or by this one, so `formed = found + missed`;
//! - `false_reports`: any `Deadlock` in `ordered` mode, and in either mode a `Deadlock` on a
//!   first acquire (the task holds nothing then, so it cannot be in a cycle);
//! - `bad_cycles`: a `Deadlock` whose cycle does not start with this wait (this task's owner,
//!   this manager, the name it waits for) or names a lock no deadlock task takes;
//! - waits that lasted more than 1 s (the threshold past which waits are followed across
//!   processes; one hold in [`LONG_HOLD_ONE_IN`] lasts up to 1.5 s so that `ordered` mode has
//!   such waits too), and first acquires still waiting after [`FIRST_STUCK`] (a wait that no
//!   cycle explains, since every second wait ends within [`missed_after`]).
//!
//! The run fails on any missed cycle, false report, bad cycle, stuck first acquire or stuck
//! release. In every mode the summary also shows the other tasks' acquires that failed with
//! `Deadlock` (`deadlock:elsewhere:<kind>`, counted by `worker.rs`), which are not judged.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lockman::deadlock::Cycle;
use lockman::{LockError, LockGuard, LockManager};
use redis::aio::MultiplexedConnection;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::Rng;
use crate::deployment::{self, Shape};

/// Deadlock tasks per worker (beside its lock tasks and candidates).
pub const TASKS: u64 = 2;
/// Lock names the deadlock tasks share: few, so that cycles form often.
const NAMES: u64 = 3;
/// How long a second acquire may wait before its cycle is counted missed, on one server: well
/// past every bound of the runner's own faults (a freeze lasts a lease and 1 s, 3 s; a dead
/// holder's lock expires within the lease, 2 s; the stuck bound of the other tasks is 11.5 s),
/// and past the 1 s threshold and 0.5 s period of the cross-process probe many times over.
const MISSED_AFTER: Duration = Duration::from_secs(20);
/// How long a first acquire may wait before it is counted stuck: a first wait waits for
/// holders that are in their second wait (bounded by [`missed_after`]) or holding a moment.
const FIRST_STUCK: Duration = Duration::from_secs(60);
/// The threshold past which a wait is published and followed across processes.
const LONG_WAIT: Duration = Duration::from_secs(1);
/// One hold in this many lasts 200 ms to 1.5 s (the others under 5 ms): waits behind it pass
/// [`LONG_WAIT`], so that they are published and followed in `ordered` mode too.
const LONG_HOLD_ONE_IN: u64 = 20;
/// The list of how long each wait found lasted (ms), by where the cycle was: `in_process` or
/// `across`; a round's counters carry them under this prefix.
const FOUND_MS: &str = "deadlock:found_ms:";
/// The longest pause between two rounds of a task (a random share of it), in ms.
const BETWEEN_ROUNDS_MS: u64 = 20;
/// How often a task's stop is looked for on the checker.
const STOP_POLL: Duration = Duration::from_millis(250);

/// `--deadlocks`: whether the workers run deadlock tasks, and in which order they take names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Off,
    /// Two names in a random order: cycles form.
    Random,
    /// Two names in ascending order: no cycle can form.
    Ordered,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Random => "random",
            Mode::Ordered => "ordered",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Mode::Off, Mode::Random, Mode::Ordered]
            .into_iter()
            .find(|m| m.name() == s)
    }
}

/// How long a second acquire may wait before its cycle is counted missed: [`MISSED_AFTER`],
/// and on a replicated deployment also the longest a failover or slot move may take before
/// the runner gives it up (`deployment::LIMIT`, 30 s), during which a cycle's locks may be out
/// of reach.
pub fn missed_after(shape: Shape) -> Duration {
    match shape {
        Shape::Single => MISSED_AFTER,
        Shape::Sentinel | Shape::Cluster => MISSED_AFTER + deployment::LIMIT,
    }
}

/// The deadlock tasks' names.
fn name(i: u64) -> String {
    format!("chaos:dl:{i}")
}

/// One deadlock task's world.
pub struct Task {
    pub worker: u64,
    pub mode: Mode,
    pub lock: LockManager,
    pub checker: MultiplexedConnection,
    /// The worker's deadline: no new round begins after it, and a first wait is given up.
    pub deadline: Instant,
    /// Turns true when the runner says stop: as the deadline.
    pub stop: watch::Receiver<bool>,
    pub missed_after: Duration,
    /// How long a release may take before it is counted stuck.
    pub release_within: Duration,
}

/// Watches the checker's `stop` until it is set, then tells every deadlock task.
pub fn watch_stop(mut checker: MultiplexedConnection) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        loop {
            let stop: redis::RedisResult<bool> = redis::cmd("EXISTS")
                .arg("stop")
                .query_async(&mut checker)
                .await;
            if stop.unwrap_or(false) {
                let _ = tx.send(true);
                return;
            }
            tokio::time::sleep(STOP_POLL).await;
        }
    });
    rx
}

impl Task {
    /// Rounds until the deadline or the runner's stop.
    pub async fn run(mut self, mut rng: Rng) {
        while Instant::now() < self.deadline && !*self.stop.borrow() {
            let counts = self.round(&mut rng).await;
            if counts.is_empty() {
                continue;
            }
            // One transaction: a worker killed meanwhile leaves none of it, so the waits found
            // and their durations agree.
            let mut pipe = redis::pipe();
            pipe.atomic();
            for (field, n) in &counts {
                match field.strip_prefix(FOUND_MS) {
                    Some(found) => pipe.rpush(format!("{FOUND_MS}{found}"), *n).ignore(),
                    None => pipe.hincr("counts", field, *n).ignore(),
                };
            }
            let _: () = crate::worker::must("counts", pipe.query_async(&mut self.checker).await);
            // A moment between rounds, so that not every task is inside a round at once.
            tokio::time::sleep(Duration::from_millis(rng.below(BETWEEN_ROUNDS_MS))).await;
        }
    }

    /// One round: two names, the first taken, then the second; both held a moment and
    /// released. Returns the counters it moved.
    async fn round(&mut self, rng: &mut Rng) -> Vec<(String, i64)> {
        let mut counts: Vec<(String, i64)> = Vec::new();
        macro_rules! count {
            ($field:expr) => {
                counts.push((format!("deadlock:{}", $field), 1))
            };
        }
        let a = rng.below(NAMES);
        let b = (a + 1 + rng.below(NAMES - 1)) % NAMES;
        let (a, b) = match self.mode {
            Mode::Ordered => (a.min(b), a.max(b)),
            _ => (a, b),
        };
        let (first, second) = (name(a), name(b));
        let first_lock = self.lock.lock(first.as_str());
        let second_lock = self.lock.lock(second.as_str());

        // The first: given up at the deadline or the runner's stop (not counted), counted stuck
        // past FIRST_STUCK.
        let asked = Instant::now();
        let mut stop = self.stop.clone();
        let held = tokio::select! {
            r = tokio::time::timeout(FIRST_STUCK, first_lock.acquire()) => r,
            _ = tokio::time::sleep_until(self.deadline.into()) => return counts,
            _ = stop.wait_for(|s| *s) => return counts,
        };
        if asked.elapsed() > LONG_WAIT {
            count!("long_wait:first");
        }
        let first_guard = match held {
            Err(_) => {
                count!("first_stuck");
                self.note(format!("first acquire of {first} waited {FIRST_STUCK:?}"))
                    .await;
                return counts;
            }
            Ok(Ok(g)) => g,
            Ok(Err(LockError::Deadlock { cycle })) => {
                // It held nothing: no cycle can run through it.
                count!("false_report");
                count!("false_report:first");
                self.note(format!("deadlock on a first acquire of {first}: {cycle}"))
                    .await;
                return counts;
            }
            Ok(Err(e)) => {
                count!("acquire_error");
                self.note(format!("first acquire of {first}: {e}")).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                return counts;
            }
        };

        // The second: no deadline (a cycle must end by being found), counted missed past the
        // bound.
        let asked = Instant::now();
        let held = tokio::time::timeout(self.missed_after, second_lock.acquire()).await;
        let waited = asked.elapsed();
        if waited > LONG_WAIT {
            count!("long_wait:second");
        }
        let second_guard = match held {
            Err(_) => {
                count!("missed");
                self.note(format!(
                    "missed: worker {} held {first} and waited {:?} for {second}",
                    self.worker, self.missed_after
                ))
                .await;
                None
            }
            Ok(Ok(g)) => Some(g),
            Ok(Err(LockError::Deadlock { cycle })) => {
                let across = cycle
                    .steps
                    .iter()
                    .any(|s| s.client != self.lock.client_id());
                let found = if across { "across" } else { "in_process" };
                count!(&format!("found:{found}"));
                counts.push((format!("{FOUND_MS}{found}"), waited.as_millis() as i64));
                if self.mode == Mode::Ordered {
                    count!("false_report");
                    self.note(format!("deadlock in ordered mode: {cycle}"))
                        .await;
                }
                if let Some(why) = self.bad(&cycle, &second) {
                    count!("bad_cycle");
                    self.note(format!("bad cycle ({why}): {cycle}")).await;
                }
                None
            }
            Ok(Err(e)) => {
                count!("acquire_error");
                self.note(format!("second acquire of {second}: {e}")).await;
                None
            }
        };
        let work = match rng.below(LONG_HOLD_ONE_IN) {
            0 if second_guard.is_some() => Duration::from_millis(200 + rng.below(1300)),
            _ => Duration::from_millis(rng.below(5)),
        };
        if second_guard.is_some() {
            count!("rounds");
            tokio::time::sleep(work).await;
        }
        for guard in second_guard.into_iter().chain([first_guard]) {
            self.release(guard, &mut counts).await;
        }
        counts
    }

    /// Why `cycle`, reported to this wait for `waited_for`, is not one it can be in, if it is
    /// not: it must start with this wait, and every step must wait for a deadlock task's lock.
    fn bad(&self, cycle: &Cycle, waited_for: &str) -> Option<&'static str> {
        let Some(first) = cycle.steps.first() else {
            return Some("empty");
        };
        if cycle.steps.len() < 2 {
            return Some("one step: a wait for a lock its own task holds, which no round asks for");
        }
        if first.owner != lockman::deadlock::current() || first.client != self.lock.client_id() {
            return Some("the first step is another wait");
        }
        if first.name != waited_for {
            return Some("the first step waits for another name");
        }
        if cycle.steps.iter().any(|s| !s.name.starts_with("chaos:dl:")) {
            return Some("a step waits for a lock no deadlock task takes");
        }
        None
    }

    async fn release(&mut self, guard: LockGuard, counts: &mut Vec<(String, i64)>) {
        let lost = guard.is_lost();
        match tokio::time::timeout(self.release_within, guard.release()).await {
            Err(_) => counts.push(("deadlock:stuck_release".into(), 1)),
            Ok(Ok(())) => {}
            // A fault took the hold (a restart, a kill of the server's clients, a freeze past
            // the lease): not the detection's business, counted apart.
            Ok(Err(_)) if lost => counts.push(("deadlock:lost".into(), 1)),
            Ok(Err(LockError::NotHeld { .. })) => counts.push(("deadlock:lost".into(), 1)),
            Ok(Err(e)) => {
                counts.push(("deadlock:release_error".into(), 1));
                self.note(format!("release: {e}")).await;
            }
        }
    }

    async fn note(&mut self, line: String) {
        let _: () = crate::worker::must(
            "deadlock note",
            redis::pipe()
                .rpush("deadlock:notes", line)
                .ignore()
                .ltrim("deadlock:notes", -50, -1)
                .ignore()
                .query_async(&mut self.checker)
                .await,
        );
    }
}

/// The summary's `deadlocks` section from the checker's counts, and whether it is ok.
pub fn summary(
    mode: Mode,
    shape: Shape,
    counts: &BTreeMap<String, u64>,
    conn: &mut redis::Connection,
) -> (Value, bool) {
    let get = |k: &str| counts.get(&format!("deadlock:{k}")).copied().unwrap_or(0);
    let percentiles = |conn: &mut redis::Connection, found: &str| -> Value {
        let mut ms: Vec<u64> = redis::cmd("LRANGE")
            .arg(format!("{FOUND_MS}{found}"))
            .arg(0)
            .arg(-1)
            .query(conn)
            .unwrap_or_default();
        ms.sort_unstable();
        let at = |q: f64| {
            ms.get(((ms.len() as f64 - 1.0) * q).round() as usize)
                .copied()
        };
        json!({ "n": ms.len(), "p50": at(0.5), "p99": at(0.99), "max": ms.last().copied() })
    };
    let found_after = json!({
        "in_process": percentiles(conn, "in_process"),
        "across_processes": percentiles(conn, "across"),
    });
    let (in_process, across) = (get("found:in_process"), get("found:across"));
    let found = in_process + across;
    let (missed, false_reports) = (get("missed"), get("false_report"));
    let (bad_cycles, first_stuck) = (get("bad_cycle"), get("first_stuck"));
    // The other tasks' acquires that failed with `Deadlock`, by kind: each waits holding
    // nothing (a MultiLock releases its members before it waits for one), so none is expected.
    let elsewhere: BTreeMap<&str, u64> = counts
        .iter()
        .filter_map(|(k, n)| Some((k.strip_prefix("deadlock:elsewhere:")?, *n)))
        .collect();
    let notes: Vec<String> = redis::cmd("LRANGE")
        .arg("deadlock:notes")
        .arg(-20)
        .arg(-1)
        .query(conn)
        .unwrap_or_default();
    let ok = mode == Mode::Off
        || (missed == 0
            && false_reports == 0
            && bad_cycles == 0
            && first_stuck == 0
            && get("stuck_release") == 0);
    let value = json!({
        "mode": mode.name(),
        "tasks_per_worker": if mode == Mode::Off { 0 } else { TASKS },
        "names": NAMES,
        "rounds": get("rounds"),
        "formed": found + missed,
        "found": found,
        "found_in_process": in_process,
        "found_across_processes": across,
        "found_after_ms": found_after,
        "missed": missed,
        "missed_after_s": missed_after(shape).as_secs(),
        "false_reports": false_reports,
        "false_reports_on_a_first_acquire": get("false_report:first"),
        "bad_cycles": bad_cycles,
        "waits_over_1s": {
            "first": get("long_wait:first"),
            "second": get("long_wait:second"),
        },
        "first_waits_stuck": first_stuck,
        "first_stuck_after_s": FIRST_STUCK.as_secs(),
        "acquire_errors": get("acquire_error"),
        "holds_lost": get("lost"),
        "release_errors": get("release_error"),
        "stuck_releases": get("stuck_release"),
        "reported_to_other_tasks": elsewhere,
        "notes": notes,
        "ok": ok,
    });
    (value, ok)
}
