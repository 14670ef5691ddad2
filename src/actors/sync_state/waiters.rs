//! The waiters of one synchronizer name, in arrival order, and the rules that choose among
//! them: who queues behind a parked waiter, who a message, an attempt's free count, the retry
//! timer or a hand-off wakes. What each chosen waiter then does (an attempt, a grant) is the
//! state's (`mod.rs`, `held.rs`).

use std::ops::{Index, IndexMut};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::actors::name::{MAX_HAND_OFF_STREAK, WaiterId};

/// One waiter: a request for permits (or a latch's opening) not answered yet.
#[derive(Debug)]
pub(super) struct Waiter {
    pub id: WaiterId,
    /// Permits it wants (0 for a latch).
    pub wants: u32,
    /// Its attempt is under way.
    pub trying: bool,
    /// A wake came while it was trying: try again if that attempt falls short.
    pub again: bool,
    /// Its deadline passed (or it never waits): the next outcome answers it.
    pub last: bool,
    /// A single attempt (no wait): a reply found missing answers it with the error.
    pub once: bool,
    /// The timer should make it try.
    pub due: bool,
    /// Retryable failures in a row.
    pub failures: u32,
    /// It was left waiting: queued at arrival, or an attempt fell short.
    pub waited: bool,
    /// Its caller is watched (`Effect::Watch`): it waits, after an attempt fell short or
    /// failed, or queued at arrival.
    pub watched: bool,
    pub lease: Option<Duration>,
    pub ids: Arc<[u8]>,
    /// When its latest take was first sent: a grant's TTL runs from no earlier.
    pub sent: Instant,
    /// When it arrived, for the time waited.
    pub since: Instant,
}

/// The waiters, in arrival order, and their numbering. Invariant: ids are unique within the
/// state, and a waiter is here until it is answered or its caller is gone.
#[derive(Debug, Default)]
pub(super) struct Waiters {
    list: Vec<Waiter>,
    /// The last waiter number given ([`Waiters::next_id`]).
    last_id: WaiterId,
    /// Hand-offs in a row since the last give-back through Redis.
    streak: u32,
}

impl Index<usize> for Waiters {
    type Output = Waiter;

    fn index(&self, at: usize) -> &Waiter {
        &self.list[at]
    }
}

impl IndexMut<usize> for Waiters {
    fn index_mut(&mut self, at: usize) -> &mut Waiter {
        &mut self.list[at]
    }
}

impl Waiters {
    /// Permits given back here went to a local waiter.
    pub(super) fn handed_off(&mut self) {
        self.streak += 1;
    }

    /// Whether given-back permits may go to a local waiter: fewer than
    /// [`MAX_HAND_OFF_STREAK`] hand-offs in a row, so that an ordinary release (and its
    /// message) lets other processes' waiters in.
    pub(super) fn may_hand_off(&self) -> bool {
        self.streak < MAX_HAND_OFF_STREAK
    }

    /// Permits were given back through Redis: the streak starts over.
    pub(super) fn streak_over(&mut self) {
        self.streak = 0;
    }

    /// A number for the next waiter, unique within this state.
    pub(super) fn next_id(&mut self) -> WaiterId {
        self.last_id += 1;
        self.last_id
    }

    pub(super) fn position(&self, id: WaiterId) -> Option<usize> {
        self.list.iter().position(|w| w.id == id)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Waiter> {
        self.list.iter()
    }

    pub(super) fn push(&mut self, waiter: Waiter) {
        self.list.push(waiter);
    }

    /// Waiter `at` leaves. A permit semaphore's retry timer may have been armed for it alone
    /// (`retry_armed`): then the first parked waiter becomes due in its place (see
    /// `SyncState::leave`).
    pub(super) fn remove(&mut self, at: usize, hand_on_due: bool) -> Waiter {
        let waiter = self.list.remove(at);
        if waiter.due
            && hand_on_due
            && !self.list.iter().any(|w| w.due)
            && let Some(next) = self.first_parked()
        {
            next.due = true;
        }
        waiter
    }

    /// Every waiter leaves, in arrival order.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = Waiter> + '_ {
        self.list.drain(..)
    }

    /// The first waiter whose attempt is not under way.
    pub(super) fn first_parked(&mut self) -> Option<&mut Waiter> {
        self.list.iter_mut().find(|w| !w.trying)
    }

    /// Whether a new waiter wanting `wants` queues behind a parked one: a waiter wanting no
    /// more parks already, whose last attempt fell short (not one waiting out an error's
    /// backoff, whose retry may succeed with nobody told).
    pub(super) fn parked_wanting_at_most(&self, wants: u32) -> bool {
        self.list
            .iter()
            .any(|w| !w.trying && w.failures == 0 && w.wants <= wants)
    }

    /// Everyone tries again: the parked waiters, returned in arrival order, now; those whose
    /// attempt is under way when it falls short.
    pub(super) fn wake_all(&mut self) -> Vec<WaiterId> {
        let mut woken = Vec::new();
        for w in &mut self.list {
            if w.trying {
                w.again = true;
            } else {
                woken.push(w.id);
            }
        }
        woken
    }

    /// A message of `count` (> 0): up to `count` parked waiters, whatever each wants, those
    /// whose wants fit into it first, each group in arrival order; a waiter whose attempt is
    /// under way tries again if it falls short (it may have run before the release).
    pub(super) fn woken_by(&mut self, count: i64) -> Vec<WaiterId> {
        for w in &mut self.list {
            if w.trying {
                w.again = true;
            }
        }
        let mut woken = Vec::new();
        for fits in [true, false] {
            for w in &self.list {
                if woken.len() as i64 >= count {
                    break;
                }
                if !w.trying && !woken.contains(&w.id) && (i64::from(w.wants) <= count) == fits {
                    woken.push(w.id);
                }
            }
        }
        woken
    }

    /// `free` permits found free by an attempt: the parked waiters whose wants fit into them,
    /// in arrival order, each taking its share of that budget.
    pub(super) fn fitting(&self, free: i64) -> Vec<WaiterId> {
        let mut budget = free;
        let mut woken = Vec::new();
        for w in &self.list {
            if budget <= 0 {
                break;
            }
            if !w.trying && i64::from(w.wants) <= budget {
                budget -= i64::from(w.wants);
                woken.push(w.id);
            }
        }
        woken
    }

    /// The retry timer fired: the parked waiters it was armed for, no longer due.
    pub(super) fn take_due(&mut self) -> Vec<WaiterId> {
        let mut woken = Vec::new();
        for w in &mut self.list {
            if std::mem::take(&mut w.due) && !w.trying {
                woken.push(w.id);
            }
        }
        woken
    }

    /// Every waiter is due the next retry.
    pub(super) fn all_due(&mut self) {
        for w in &mut self.list {
            w.due = true;
        }
    }

    /// Where the first parked waiter is that `permits` handed off would serve: not one whose
    /// attempt is under way (it may get its permits by itself), nor one at its deadline (its
    /// last attempt answers it).
    pub(super) fn hand_off_to(&self, permits: u32) -> Option<usize> {
        self.list
            .iter()
            .position(|w| !w.trying && !w.last && w.wants <= permits)
    }
}
