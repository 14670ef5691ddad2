//! The local waiters' side of the rules: who waits its turn, who is woken, how a waiter ends.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::error::Cycle;

impl LockState {
    /// Whether new waiter `id` waits its turn behind the local waiters ahead of it, without an
    /// attempt of its own. Their attempts found the lock taken and the next wake-up goes to the
    /// oldest, so an attempt now could only fail (one wasted round trip per hand-off) or barge
    /// ahead of them. Only for the exclusive, unfair kinds and a read-write lock's writer (a
    /// fair lock queues in Redis; readers share): a writer that asks again right after its own
    /// release would otherwise get in before that release's message wakes the older waiters,
    /// round after round (`tests/read_write.rs`). For a request that may wait, and never for a
    /// holder that holds the lock here already (re-entering, or a reader's refused upgrade,
    /// must not wait for itself).
    pub(super) fn joins_queue(&self, id: WaiterId) -> bool {
        let Some(new) = self.waiters.get(id) else {
            return false;
        };
        let write = new.kind == LockKind::Write;
        (new.kind.is_exclusive_unfair() || write)
            && new.may_wait()
            && !self.holds.contains(&(new.holder.clone(), new.kind))
            && !(write && self.holds.contains(&(new.holder.clone(), LockKind::Read)))
            && self.waiters.others_waiting(&new.holder) > 0
    }

    pub(super) fn give_up(&mut self, id: WaiterId, why: &str) {
        if self.waiters.contains(id) {
            tracing::debug!(lock = %self.name, why, "waiter left");
            self.answer(id, Answer::TimedOut);
        }
    }

    /// The waits-for graph chose waiter `id` to break a cycle of waits: it fails with
    /// [`LockError::Deadlock`] naming the `cycle` and leaves, as a waiter whose wait ran out
    /// does.
    pub(crate) fn deadlocked(&mut self, id: WaiterId, cycle: Cycle, now: Instant) {
        self.now = now;
        if self.waiters.contains(id) {
            tracing::debug!(lock = %self.name, "waiter left: a deadlock");
            self.answer(id, Answer::Failed(LockError::Deadlock { cycle }));
        }
    }

    /// Removes waiter `id` with its deadline and answers it, then unsubscribes its channel when
    /// no other waiter needs it, unless it is granted the lock of an unfair kind: the lock's
    /// channel is then kept (until the actor departs, or a waiter leaves without the lock), so
    /// that no UNSUBSCRIBE runs between the grant and its caller, and the name's next wait (a
    /// hot name's) needs no SUBSCRIBE and no attempt after it. A fair waiter
    /// that ends without the lock first leaves its holder's place in the Redis queue (unless
    /// another local waiter of the same holder still needs it), so it delays nobody behind it:
    /// that round trip is sent next, and its caller does not wait for it (a frozen server would
    /// hold the answer a response timeout past the wait; issue 57).
    pub(super) fn answer(&mut self, id: WaiterId, answer: Answer) {
        let Some((w, last_of_holder)) = self.waiters.remove(id) else {
            return;
        };
        // A fair waiter has a channel of its own holder's; the others share the lock's.
        let unused = if self.family.is_fair() {
            last_of_holder
        } else {
            self.waiters.is_empty()
        };
        if let Wait::Up(_) = w.wait {
            self.out.push(Effect::Cancel(id));
        }
        if self.waiters.is_empty() {
            self.timers.stop(&Timer::Retry);
            self.timers.stop(&Timer::Unavailable);
        }
        let granted = matches!(answer, Answer::Granted { .. });
        let leave = self.family.is_fair() && !granted;
        self.out.push(Effect::Answer(id, answer));
        if leave {
            self.leave_unused(&w.holder);
        }
        if unused && self.link.has_subscriptions() {
            let channel = self.channel_of(&w.holder);
            if granted && !self.family.is_fair() {
                self.link.keep(channel);
            } else if self.link.unsubscribe(&channel) {
                self.out.push(Effect::Unsubscribe(channel));
            }
        }
    }

    /// A message on `channel`: for a fair lock, the waiter whose turn it is; for a group lock,
    /// every waiter (each waits for its own members: the one at the head may still find one of
    /// its members taken where the next one's are all free); else one waiter.
    pub(super) fn wake_channel(&mut self, channel: &str) {
        if self.family == LockKind::Group {
            return self.wake_all();
        }
        if !self.family.is_fair() {
            return self.wake_one();
        }
        let id = self
            .waiters
            .iter()
            .find(|w| &*self.channel_of(&w.holder) == channel)
            .map(|w| w.id);
        if let Some(id) = id {
            self.attempt(id);
        }
    }

    /// One wake-up (unlock message, TTL run out, reconnection): one attempt for the head waiter.
    pub(super) fn wake_one(&mut self) {
        self.timers.stop(&Timer::Retry);
        if let Some(id) = self.waiters.front().map(|w| w.id) {
            self.attempt(id);
        }
    }

    /// A wake-all message (a write release): every waiter gets one attempt, oldest first, one
    /// round trip at a time.
    pub(super) fn wake_all(&mut self) {
        self.timers.stop(&Timer::Retry);
        self.waiters.wakes = self.waiters.iter().map(|w| w.id).collect();
        self.next_wake();
    }

    /// A writer of `holder` got in: the wake-ups still pending from the same message for
    /// waiters of other holders are dropped. None of them can get in beside a writer (a read or
    /// a write of another holder is refused while it holds), so each would be one attempt that
    /// fails: N round trips per hand-off for N local waiters, since a write release wakes every
    /// waiter. They wait for this hold's release, whose message wakes them all, or for its lease
    /// to run out (the retry `granted` arms), as their failed attempts would have had them do.
    /// The same holder's waiters keep theirs (a re-entry, or a read beside its own write).
    pub(super) fn writer_in(&mut self, holder: &str) {
        let waiters = &self.waiters;
        let keep: VecDeque<WaiterId> = waiters
            .wakes
            .iter()
            .copied()
            .filter(|id| waiters.get(*id).is_some_and(|w| &*w.holder == holder))
            .collect();
        self.waiters.wakes = keep;
    }

    /// The next pending wake-up, skipping waiters that have left meanwhile. Whether there was
    /// one.
    pub(super) fn next_wake(&mut self) -> bool {
        while let Some(id) = self.waiters.wakes.pop_front() {
            if self.waiters.contains(id) {
                self.attempt(id);
                return true;
            }
        }
        false
    }

    /// A wake-up whose waiter left before its attempt went goes on with the next pending one,
    /// else with the first waiter: the message (or retry) that caused it comes only once, and
    /// a waiter left without it could wait for good on a free lock.
    pub(super) fn pass_wake(&mut self) {
        if !self.next_wake()
            && let Some(id) = self.waiters.front().map(|w| w.id)
        {
            self.attempt(id);
        }
    }

    pub(super) fn schedule_retry(&mut self, after: Duration) {
        self.timers.set(Timer::Retry, self.now, after);
    }

    /// Subscribes waiter `id`'s channel (then `subscribed` tries once more); a spin lock's
    /// waiters listen on none (their retries are timers, `found_busy`).
    pub(super) fn subscribe(&mut self, id: WaiterId) {
        self.watch_caller(id);
        let Some(w) = self.waiters.get(id) else {
            return;
        };
        if w.kind.spins() {
            return;
        }
        let channel = self.channel_of(&w.holder);
        if self.link.subscribe(channel.clone()) {
            self.out.push(Effect::Subscribe(channel));
        }
    }

    /// Has waiter `id`'s caller watched, once (`Effect::Watch`).
    pub(super) fn watch_caller(&mut self, id: WaiterId) {
        if let Some(w) = self.waiters.get_mut(id)
            && !w.watched
        {
            w.watched = true;
            self.out.push(Effect::Watch(id));
        }
    }

    /// The channel `holder`'s waiter is woken on: the lock's, or a fair waiter's own.
    pub(super) fn channel_of(&self, holder: &str) -> Arc<str> {
        if self.family.is_fair() {
            self.family.waiter_channel(&self.name, holder).into()
        } else {
            self.channel.clone()
        }
    }

    pub(super) fn set_busy(&mut self) {
        if !self.busy {
            self.busy = true;
            self.out.push(Effect::Busy);
        }
    }

    /// Something held, waited for, under way or being left: the actor is busy; without any,
    /// it may linger and stop (`update_busy`).
    pub(super) fn has_work(&self) -> bool {
        !self.holds.is_empty()
            || !self.waiters.is_empty()
            || !self.trips.is_idle()
            || self.fair.is_leaving()
    }

    /// Tells the actor whether it is busy, once per event, as its effects are taken
    /// (`drain_into`): whatever the event did, an actor with nothing left falls idle (it may
    /// linger and stop) and one with something left is busy. Decided here rather than where
    /// each thing ends, which once missed an attempt dropped from the queue after its waiter
    /// left (the actor never stopped) and a lease settled after the hold ended (it could
    /// stop with the settling under way).
    pub(super) fn update_busy(&mut self) {
        if self.has_work() {
            self.set_busy();
            return;
        }
        if !self.busy {
            return;
        }
        // The hand-over tick stays armed: a name used again soon (the actor lingers, see
        // `retire`) then arms no timer per hold; it fires once, finds nothing, and is not
        // armed again.
        self.timers.stop(&Timer::Retry);
        self.timers.stop(&Timer::Refresh);
        // The kept channel stays while the actor lingers (`retire` drops it). An uncontended
        // name subscribed to nothing: no call, no list of channels, at its every fall idle.
        if self.link.has_subscriptions() {
            for channel in self.link.unsubscribe_unkept() {
                self.out.push(Effect::Unsubscribe(channel));
            }
        }
        self.busy = false;
        self.out.push(Effect::Idle);
    }

    /// The actor is about to leave after lingering idle: cancels the hand-over tick and a
    /// hold-back (`turns`), the timers an idle state may still have armed, so that nothing
    /// keeps the actor alive, and unsubscribes the channel it kept.
    pub(crate) fn retire(&mut self) {
        if !self.busy {
            self.timers.stop(&Timer::Track);
            self.timers.stop(&Timer::Turn);
            for channel in self.link.unsubscribe_all() {
                self.out.push(Effect::Unsubscribe(channel));
            }
        }
    }
}
