//! The Watchdog's fourth job: which names are contended, as per-name metric series.

use std::sync::Arc;
use std::time::Instant;

use crate::actors::board::Board;

/// The top K contended names of each renewal interval, reported as
/// `lockman_contended_wait_seconds` series (`Config::contention_top_k`).
pub(super) struct Contention {
    /// How many names get a series of their own.
    top_k: usize,
    /// The names the last report showed (set to 0 once they leave the top).
    shown: Vec<Arc<str>>,
}

impl Contention {
    pub(super) fn new(top_k: usize) -> Self {
        Self {
            top_k,
            shown: Vec::new(),
        }
    }

    /// Reports the names waited on longest since the last report, and starts a new window.
    pub(super) fn report(&mut self, board: &Board, now: Instant) {
        let (top, contended) = board.take_window(self.top_k, now);
        crate::metrics::contention(&top, contended, &mut self.shown);
    }
}
