//! The run's history: every operation of every worker, one JSON object per line, written to a
//! file at the end of the run and checked by `linear.rs`. The format is the crate's
//! `docs/histories.md`.
//!
//! Times are the checker server's clock (µs): an operation's `invoke` is read before its call
//! is made and its `complete` after it returned (the grant's entry on the checker, or the
//! record's arrival there), so that the interval contains the call whatever the workers'
//! clocks say. A late completion only widens the interval: it can hide a violation that lies
//! within a few round trips, never invent one.

use redis::aio::MultiplexedConnection;
use serde_json::{Value, json};

use crate::checker;
use crate::worker::must;

/// One operation of a worker, without its completion time.
pub struct Record<'a> {
    /// `lock`, `fair`, `read`, `write`, `fenced`, `multi`, `redlock`, `sem`, `nonreentrant`,
    /// `nonreentrant_fair`, `leader`, `latch`.
    pub kind: &'a str,
    /// The lock, semaphore, latch or election (a MultiLock's hold is one record per member
    /// name).
    pub name: &'a str,
    pub worker: u64,
    pub task: u64,
    /// The hold (`worker:task:attempt`): the holder the model knows; its release has the same.
    pub hold: &'a str,
    /// `acquire` (unbounded, cancelled at the wait's end), `try` (one attempt), `timed_try`,
    /// `release`, `fenced_write`; a latch's `set_count`, `count_down`, `await`.
    pub op: &'a str,
    /// `granted`, `busy` (a try refused), `timed_out`, `stuck`, `error` (then `error`);
    /// a release: `ok`, `lost` (the hold was gone), `error`, `stuck`; a fenced write:
    /// `accepted`, `refused`; a latch's `set_count`: `set`, `busy` (a count was there), `error`;
    /// its `count_down`: `ok`, `error`; its `await`: `opened`, `timed_out`, `error`.
    pub outcome: &'a str,
    pub invoke_us: u64,
    /// A fenced lock's token, an election's term, the token of a fenced write.
    pub token: Option<u64>,
    pub error: Option<String>,
}

impl Record<'_> {
    fn object(&self) -> Value {
        let mut v = json!({
            "kind": self.kind,
            "name": self.name,
            "worker": self.worker,
            "task": self.task,
            "hold": self.hold,
            "op": self.op,
            "outcome": self.outcome,
            "invoke": self.invoke_us,
        });
        if let Some(token) = self.token {
            v["token"] = token.into();
        }
        if let Some(error) = &self.error {
            v["error"] = error.as_str().into();
        }
        v
    }

    /// Appends it to the history on the checker, completed at `complete` (µs, as text) or at
    /// the checker's clock now. Returns the completion time.
    pub async fn send(
        &self,
        checker: &mut MultiplexedConnection,
        complete: Option<&str>,
    ) -> String {
        self.send_with(checker, complete, &[]).await
    }

    /// As [`send`](Self::send), with fields of the kind's own (a latch's `count`, `left`).
    pub async fn send_with(
        &self,
        checker: &mut MultiplexedConnection,
        complete: Option<&str>,
        extra: &[(&str, i64)],
    ) -> String {
        let mut object = self.object();
        for (field, value) in extra {
            object[*field] = (*value).into();
        }
        must(
            "history",
            checker::RECORD_SCRIPT
                .arg(object.to_string())
                .arg(complete.unwrap_or(""))
                .invoke_async(checker)
                .await,
        )
    }
}

/// The runner's own records: a worker it killed (`op` `kill`, at the checker's clock `at_us`):
/// the holds of that worker that have no release end there (see `linear.rs`).
pub fn kill_line(worker: u64, at_us: u64) -> String {
    json!({
        "kind": "process",
        "name": "",
        "worker": worker,
        "task": 0,
        "hold": "",
        "op": "kill",
        "outcome": "ok",
        "invoke": at_us,
        "complete": at_us,
    })
    .to_string()
}

/// A fault the runner tried (or a process stall it saw), as a record: `op` `fault`, `outcome`
/// the fault's name, from `invoke` to `complete`.
pub fn fault_line(f: &crate::linear::FaultWindow) -> String {
    json!({
        "kind": "process",
        "name": "",
        "worker": f.worker.unwrap_or(0),
        "task": 0,
        "hold": "",
        "op": "fault",
        "outcome": f.fault,
        "invoke": f.from,
        "complete": f.to,
    })
    .to_string()
}
