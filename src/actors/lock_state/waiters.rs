//! The local waiters of one lock name: FIFO order with O(1) insertion and removal by id, the
//! counts per holder that spare a scan of the queue, and the wake-ups still to give.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::{MAX_HAND_OFF_STREAK, Wait, WaiterId};
use crate::actors::name::few::Few;
use crate::protocol::LockKind;

/// One caller waiting for the lock: from its request to a grant, the end of its wait, an error or
/// its going away.
#[derive(Debug)]
pub(super) struct Waiter {
    pub id: WaiterId,
    pub holder: Arc<str>,
    pub kind: LockKind,
    pub lease: Option<Duration>,
    pub wait: Wait,
    /// When the request arrived, for the time waited.
    pub since: Instant,
    /// Whether its caller is watched (see `Effect::Watch`).
    pub watched: bool,
    /// Its deadline passed while what Redis says now was not known (`outage::deadline`): it
    /// waits no more, and what Redis answers next decides between a holder and an outage.
    pub last_try: bool,
    /// A spin waiter's sleeps between its attempts (`timers.rs`); `None` for other kinds.
    pub spin: Option<super::timers::SpinSleeps>,
}

impl Waiter {
    pub(super) fn may_wait(&self) -> bool {
        self.wait != Wait::No
    }
}

/// The queue. Removal leaves the id in `order` until it reaches the front, or until dead ids
/// outnumber live ones and `order` is compacted: amortized O(1) per waiter either way.
#[derive(Debug, Default)]
pub(super) struct Waiters {
    order: VecDeque<WaiterId>,
    live: Few<WaiterId, Waiter>,
    /// How many live waiters may wait.
    may_wait: usize,
    /// Per holder: how many live waiters, and how many of them may wait. Kept from the second
    /// waiter on: while at most one lives and none was ever beside it since the queue was last
    /// empty, it is empty and the counts are read off that waiter (an uncontended request then
    /// costs no hash of its holder's id and no entry).
    by_holder: FxHashMap<Arc<str>, Count>,
    /// Waiters still to try after a wake-all message, oldest first (one attempt at a time).
    pub wakes: VecDeque<WaiterId>,
    /// The last waiter id given.
    last_id: WaiterId,
    /// Local hand-offs since the last release that published.
    streak: u32,
}

#[derive(Debug, Default)]
struct Count {
    all: usize,
    may_wait: usize,
}

impl Waiters {
    // ----- the streak of hand-offs (`turns.rs`) ---------------------------------------------

    /// A release handed the lock to a local waiter.
    pub(super) fn handed_off(&mut self) {
        self.streak += 1;
    }

    /// Whether a release may hand the lock to a local waiter: fewer than
    /// [`MAX_HAND_OFF_STREAK`] in a row, so that other processes, woken only by a publish, get
    /// their chance.
    pub(super) fn may_hand_off(&self) -> bool {
        self.streak < MAX_HAND_OFF_STREAK
    }

    /// A release published: the streak starts over. Whether it was full (the release ended a
    /// streak of [`MAX_HAND_OFF_STREAK`] hand-offs).
    pub(super) fn streak_over(&mut self) -> bool {
        std::mem::take(&mut self.streak) >= MAX_HAND_OFF_STREAK
    }

    // ----- the queue ------------------------------------------------------------------------

    /// A new waiter id, never given before by this queue.
    pub(super) fn next_id(&mut self) -> WaiterId {
        self.last_id += 1;
        self.last_id
    }

    pub(super) fn push(&mut self, w: Waiter) {
        if w.may_wait() {
            self.may_wait += 1;
        }
        if !self.live.is_empty() {
            if self.by_holder.is_empty() {
                // The second waiter: the first one's counts go in now.
                let first = self
                    .live
                    .values()
                    .next()
                    .map(|f| (f.holder.clone(), f.may_wait()));
                if let Some((holder, may_wait)) = first {
                    self.count(holder, may_wait);
                }
            }
            self.count(w.holder.clone(), w.may_wait());
        }
        self.order.push_back(w.id);
        self.live.insert(w.id, w);
    }

    /// One more waiter of `holder` in the counts per holder.
    fn count(&mut self, holder: Arc<str>, may_wait: bool) {
        let count = self.by_holder.entry(holder).or_default();
        count.all += 1;
        if may_wait {
            count.may_wait += 1;
        }
    }

    /// `holder`'s count: from the counts per holder, or from the only waiter while they are
    /// not kept.
    fn count_of(&self, holder: &str) -> Count {
        if self.by_holder.is_empty() {
            let mut only = self.live.values().filter(|w| &*w.holder == holder);
            return only.next().map_or(Count::default(), |w| Count {
                all: 1,
                may_wait: usize::from(w.may_wait()),
            });
        }
        self.by_holder
            .get(holder)
            .map_or(Count::default(), |c| Count {
                all: c.all,
                may_wait: c.may_wait,
            })
    }

    /// Waiter `id` waits no more (its deadline passed): from now on it is answered as a single
    /// attempt is, and marked as at its last try.
    pub(super) fn last_try(&mut self, id: WaiterId) {
        let Some(w) = self.live.get_mut(&id) else {
            return;
        };
        if w.may_wait() {
            self.may_wait -= 1;
            if let Some(count) = self.by_holder.get_mut(&w.holder) {
                count.may_wait -= 1;
            }
        }
        w.wait = Wait::No;
        w.last_try = true;
    }

    /// Removes waiter `id`; the flag says whether it was its holder's last.
    pub(super) fn remove(&mut self, id: WaiterId) -> Option<(Waiter, bool)> {
        let w = self.live.remove(&id)?;
        if self.live.is_empty() {
            // The last waiter: every count goes to none without a lookup of its holder (the
            // uncontended request's case).
            self.by_holder.clear();
            self.may_wait = 0;
            self.order.clear();
            return Some((w, true));
        }
        let mut last = true;
        if let Some(count) = self.by_holder.get_mut(&w.holder) {
            count.all -= 1;
            if w.may_wait() {
                count.may_wait -= 1;
                self.may_wait -= 1;
            }
            last = count.all == 0;
            if last {
                self.by_holder.remove(&w.holder);
            }
        }
        if self.order.len() > 2 * self.live.len() + 32 {
            let live = &self.live;
            self.order.retain(|id| live.contains_key(id));
        }
        Some((w, last))
    }

    pub(super) fn get(&self, id: WaiterId) -> Option<&Waiter> {
        self.live.get(&id)
    }

    pub(super) fn get_mut(&mut self, id: WaiterId) -> Option<&mut Waiter> {
        self.live.get_mut(&id)
    }

    pub(super) fn contains(&self, id: WaiterId) -> bool {
        self.live.contains_key(&id)
    }

    /// The oldest waiter.
    pub(super) fn front(&mut self) -> Option<&Waiter> {
        while let Some(id) = self.order.front() {
            if self.live.contains_key(id) {
                return self.live.get(id);
            }
            self.order.pop_front();
        }
        None
    }

    /// Every waiter, oldest first.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Waiter> {
        self.order.iter().filter_map(|id| self.live.get(id))
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.live.len()
    }

    /// Whether waiter `id` is the only one.
    pub(super) fn only(&self, id: WaiterId) -> bool {
        self.live.len() == 1 && self.live.contains_key(&id)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Whether a waiter of `holder` is here.
    pub(super) fn has_holder(&self, holder: &str) -> bool {
        self.count_of(holder).all > 0
    }

    /// How many waiters that may wait belong to holders other than `holder`.
    pub(super) fn others_waiting(&self, holder: &str) -> usize {
        self.may_wait - self.count_of(holder).may_wait
    }

    /// Empties the queue (and its wake-ups), oldest first.
    pub(super) fn drain(&mut self) -> Vec<Waiter> {
        let mut out = Vec::with_capacity(self.live.len());
        for id in std::mem::take(&mut self.order) {
            if let Some(w) = self.live.remove(&id) {
                out.push(w);
            }
        }
        let last_id = self.last_id;
        *self = Self::default();
        self.last_id = last_id;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(id: WaiterId, holder: &str, wait: Wait) -> Waiter {
        Waiter {
            id,
            holder: holder.into(),
            kind: LockKind::Reentrant,
            lease: None,
            wait,
            since: Instant::now(),
            watched: false,
            last_try: false,
            spin: None,
        }
    }

    /// The counts per holder read the same whether they are kept (two waiters or more) or read
    /// off the only waiter: through a first waiter alone, a second beside it, a last try, and
    /// removals back to one and to none. (The breaks: the first waiter's counts not taken in
    /// when the second comes, so that its holder reads as gone once the second leaves; the
    /// only waiter's single attempt counted as waiting.)
    #[test]
    fn counts_per_holder_with_one_waiter_and_more() {
        let mut q = Waiters::default();
        let forever = Wait::Forever;
        q.push(waiter(1, "a", forever));
        assert!(q.has_holder("a") && !q.has_holder("b"));
        assert_eq!((q.others_waiting("a"), q.others_waiting("b")), (0, 1));
        q.push(waiter(2, "b", forever));
        assert_eq!((q.others_waiting("a"), q.others_waiting("b")), (1, 1));
        q.push(waiter(5, "b", forever));
        assert!(q.remove(5).is_some_and(|(_, last)| !last));
        assert!(q.has_holder("a") && q.has_holder("b"));
        assert_eq!((q.others_waiting("a"), q.others_waiting("b")), (1, 1));
        assert!(q.remove(2).is_some_and(|(_, last)| last));
        assert!(q.has_holder("a") && !q.has_holder("b"));
        assert_eq!(q.others_waiting("b"), 1);
        q.last_try(1);
        assert_eq!(q.others_waiting("b"), 0, "a last try waits no more");
        q.push(waiter(3, "a", Wait::No));
        assert!(q.has_holder("a"));
        assert_eq!(q.others_waiting("b"), 0);
        assert!(
            q.remove(1).is_some_and(|(_, last)| !last),
            "a's single attempt is left"
        );
        assert!(q.has_holder("a"));
        assert!(q.remove(3).is_some_and(|(_, last)| last));
        assert!(!q.has_holder("a") && q.is_empty());
        q.push(waiter(4, "c", Wait::No));
        assert!(q.has_holder("c"));
        assert_eq!(q.others_waiting("a"), 0, "a single attempt does not wait");
    }
}
