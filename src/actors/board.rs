//! The [`Board`]: which names this manager's callers wait on now, and how long waits on each
//! name took since the Watchdog last looked. Per-name actors, lock and synchronizer alike
//! (`shell`), write it only when a caller actually waits (its first attempt found the lock
//! taken, or too few permits, or the latch closed), never for an uncontended request; the
//! Watchdog reads it once a tick, for the client record (docs/protocol.md, "Client records")
//! and for the per-name contention series (the top K names by wait time).
//!
//! Lock actors run on several threads (`Config::arbiters`), hence one mutex: held for a map
//! update, only on the contended path.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

/// Shared by the manager's per-name actors and its Watchdog.
#[derive(Default)]
pub(crate) struct Board {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Names with waiting callers now.
    waiting: FxHashMap<Arc<str>, Waiting>,
    /// Wait time of waits that ended since the last [`Board::take_window`], by name.
    window: FxHashMap<Arc<str>, Duration>,
    /// When the window began.
    window_start: Option<Instant>,
}

/// The callers waiting on one name.
struct Waiting {
    count: u32,
    /// When the oldest wait still under way began (approximately: when the count last rose
    /// from zero).
    since: Instant,
}

/// One name's waiters, as the Watchdog reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NameWaits {
    pub name: Arc<str>,
    pub waiters: u32,
    pub since: Instant,
}

impl Board {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while holding it leaves plain counters: still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A caller began waiting on `name` at `at`.
    pub(crate) fn wait_began(&self, name: &Arc<str>, at: Instant) {
        let mut inner = self.lock();
        let w = inner.waiting.entry(name.clone()).or_insert(Waiting {
            count: 0,
            since: at,
        });
        if w.count == 0 {
            w.since = at;
        }
        w.count += 1;
    }

    /// A wait on `name` that began at `began` ended now (granted, timed out, failed or left).
    pub(crate) fn wait_ended(&self, name: &Arc<str>, began: Instant) {
        let now = Instant::now();
        let mut inner = self.lock();
        let inner = &mut *inner;
        if let Some(w) = inner.waiting.get_mut(name) {
            w.count = w.count.saturating_sub(1);
            if w.count == 0 {
                inner.waiting.remove(name);
            }
        }
        // Only the part of the wait inside the current window counts for it.
        let from = inner.window_start.map_or(began, |s| s.max(began));
        *inner.window.entry(name.clone()).or_default() += now.saturating_duration_since(from);
    }

    /// The names waited on now, most waiters first, at most `limit`; and how many there are.
    pub(crate) fn waiting(&self, limit: usize) -> (Vec<NameWaits>, usize) {
        let inner = self.lock();
        let mut all: Vec<NameWaits> = inner
            .waiting
            .iter()
            .map(|(name, w)| NameWaits {
                name: name.clone(),
                waiters: w.count,
                since: w.since,
            })
            .collect();
        let total = all.len();
        all.sort_unstable_by(|a, b| b.waiters.cmp(&a.waiters).then(a.since.cmp(&b.since)));
        all.truncate(limit);
        (all, total)
    }

    /// Ends the window: the `k` names whose waits took longest in it (waits still under way
    /// count up to now), longest first, with that time; and how many names were waited on.
    pub(crate) fn take_window(&self, k: usize, now: Instant) -> (Vec<(Arc<str>, Duration)>, usize) {
        let mut inner = self.lock();
        let start = inner.window_start.replace(now);
        let mut window = std::mem::take(&mut inner.window);
        for (name, w) in &inner.waiting {
            let from = start.map_or(w.since, |s| s.max(w.since));
            *window.entry(name.clone()).or_default() +=
                now.saturating_duration_since(from) * w.count;
        }
        drop(inner);
        let contended = window.len();
        let mut top: Vec<(Arc<str>, Duration)> = window.into_iter().collect();
        if top.len() > k {
            top.select_nth_unstable_by(k, |a, b| b.1.cmp(&a.1));
            top.truncate(k);
        }
        top.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        (top, contended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_of_ten_thousand_names_is_k_names_longest_first() {
        let board = Board::default();
        let t0 = Instant::now();
        board.take_window(0, t0);
        for i in 0..10_000u32 {
            let name: Arc<str> = format!("n{i}").into();
            // Name i waited i µs: the longest are the highest numbers.
            board.wait_began(&name, t0);
            let mut inner = board.lock();
            inner.waiting.remove(&name);
            inner
                .window
                .insert(name, Duration::from_micros(u64::from(i)));
        }
        let (top, contended) = board.take_window(20, Instant::now());
        assert_eq!(contended, 10_000);
        let names: Vec<&str> = top.iter().map(|(n, _)| &**n).collect();
        let want: Vec<String> = (9_980..10_000).rev().map(|i| format!("n{i}")).collect();
        assert_eq!(names, want);
        // The window was emptied.
        assert_eq!(board.take_window(20, Instant::now()), (vec![], 0));
    }

    #[test]
    fn waiting_counts_rise_and_fall_and_ongoing_waits_count_in_the_window() {
        let board = Board::default();
        let name: Arc<str> = "orders:42".into();
        let t0 = Instant::now();
        board.take_window(5, t0);
        board.wait_began(&name, t0);
        board.wait_began(&name, t0);
        let (w, total) = board.waiting(10);
        assert_eq!((w.len(), total, w[0].waiters), (1, 1, 2));
        board.wait_ended(&name, t0);
        assert_eq!(board.waiting(10).0[0].waiters, 1);
        board.wait_ended(&name, t0);
        assert_eq!(board.waiting(10), (vec![], 0));
        let (top, contended) = board.take_window(5, t0 + Duration::from_secs(1));
        assert_eq!((top.len(), contended), (1, 1));
    }
}
