//! The progress line: every few seconds, on stderr (stdout keeps the summary alone, which
//! `tests/chaos.rs` parses), how long the run has gone, and the acquisitions, faults and
//! violations so far, read from the checker by a thread of its own, so that a failover that
//! takes the runner's thread for half a minute does not silence it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Faults injected and failed so far, counted by the runner's thread.
#[derive(Default)]
pub struct Tally {
    pub injected: AtomicU64,
    pub failed: AtomicU64,
}

/// The thread printing the line, until [`Progress::stop`].
pub struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Prints a line every `every` (none when it is zero) of the run begun at `started`, planned
    /// to last `planned`, whose checker is at `checker`.
    pub fn start(
        checker: redis::Client,
        every: Duration,
        started: Instant,
        planned: Duration,
        tally: Arc<Tally>,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        if every.is_zero() {
            return Self { stop, thread: None };
        }
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut next = started + every;
            while !stopped.load(Ordering::SeqCst) {
                if Instant::now() < next {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
                next += every;
                eprintln!("{}", line(&checker, started, planned, &tally));
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// `chaos: 35s of 75s: 12345 acquisitions, 7 faults (1 failed), violations: 0 unexplained, 2
/// explained`.
fn line(checker: &redis::Client, started: Instant, planned: Duration, tally: &Tally) -> String {
    let faults = format!(
        "{} faults ({} failed)",
        tally.injected.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed)
    );
    let head = format!(
        "chaos: {}s of {}s",
        started.elapsed().as_secs(),
        planned.as_secs()
    );
    let counts = checker
        .get_connection_with_timeout(Duration::from_secs(1))
        .and_then(|mut conn| {
            conn.set_read_timeout(Some(Duration::from_secs(1)))?;
            redis::cmd("HGETALL")
                .arg("counts")
                .query::<BTreeMap<String, u64>>(&mut conn)
        });
    let Ok(counts) = counts else {
        return format!("{head}: {faults}; the checker did not answer");
    };
    let sum = |pick: &dyn Fn(&str) -> bool| -> u64 {
        counts.iter().filter(|(k, _)| pick(k)).map(|(_, n)| n).sum()
    };
    let acquired = sum(&|k| k.starts_with("acquired:") && k != "acquired:leader");
    let unexplained = sum(&|k| k.starts_with("violation:") && k.ends_with(":unexplained"));
    let explained = sum(&|k| k.starts_with("violation:")) - unexplained;
    let found = sum(&|k| k.starts_with("deadlock:found:"));
    let get = |k: &str| counts.get(k).copied().unwrap_or(0);
    // With --deadlocks: the cycles found so far, and what must stay 0.
    let deadlocks = match counts.keys().any(|k| k.starts_with("deadlock:")) {
        true => format!(
            "; deadlocks: {found} found, {} missed, {} false reports",
            get("deadlock:missed"),
            get("deadlock:false_report")
        ),
        false => String::new(),
    };
    format!(
        "{head}: {acquired} acquisitions, {faults}, violations: {unexplained} unexplained, \
         {explained} explained by a fault{deadlocks}"
    )
}
