//! Sending round trips: what is queued becomes the [`Op`] to run, one at a time.

use std::sync::Arc;
use std::time::Duration;

use super::holds::Hold;
use super::trips::{Blocked, Flight, InFlight, Pending, ReleaseFlight, Sent};
use super::*;
use crate::protocol::Expect;

impl LockState {
    /// Queues an attempt for waiter `id` (unless one is queued already).
    pub(super) fn attempt(&mut self, id: WaiterId) {
        if self.holds_back(id) {
            // Its turn comes when the hold-back ends (`turn_over`) or at a later wake-up.
            self.subscribe(id);
            return;
        }
        self.trips.queue_attempt(id);
        self.pump();
    }

    /// Starts the next round trip, when none is under way.
    pub(super) fn pump(&mut self) {
        if self.phase == Phase::Stopped {
            for pending in self.trips.take_queue() {
                if let Pending::Release {
                    reply: Some(reply), ..
                } = pending
                {
                    self.out.push(Effect::Done(reply, Err(LockError::Shutdown)));
                }
            }
            return;
        }
        // One at a time; behind its holder's unresolved request a release or settling waits
        // (see `unsure`).
        while let Some(next) = self.trips.next_to_send() {
            if let Some((op, flight)) = self.op_of(next) {
                self.send(op, flight);
            }
        }
    }

    /// Sends `op`, whose reply will be for `flight`.
    pub(super) fn send(&mut self, op: Op, flight: Flight) {
        // A request is kept to be sent again as it is, should its reply never come: what it
        // carries beyond its flight (`Sent::op` makes it again).
        let sent = Sent::of(&op);
        self.trips.sent(InFlight {
            flight,
            sent,
            at: self.now,
        });
        self.out.push(Effect::Run(op));
    }

    /// The round trip that carries out `next`, and what its reply will be for; `None` when
    /// there is nothing to send for it (any follow-up is queued).
    fn op_of(&mut self, next: Pending) -> Option<(Op, Flight)> {
        match next {
            Pending::Attempt(id) => {
                let pair = self.attempt_op(id);
                if pair.is_none() && !self.waiters.contains(id) {
                    // Its waiter left: the wake-up it was given goes on with another.
                    self.pass_wake();
                }
                pair
            }
            Pending::Release { key, epoch, reply } => self.release_op(key, epoch, reply),
            Pending::Settle { key } => self.settle_op(key),
            Pending::Resend(id) => self.resend_op(id),
            Pending::Leave { holder, wait } => {
                self.fair.leaving_now(&holder);
                let op = Op::LeaveQueue {
                    holder: holder.clone(),
                    wait,
                };
                Some((op, Flight::Leave { holder, wait }))
            }
            Pending::Refresh => Some((self.refresh_op()?, Flight::Refresh)),
            Pending::Shutdown { release } => Some((self.shutdown_op(release), Flight::Shutdown)),
        }
    }

    /// Waiter `id`'s attempt, unless its holder can take nothing new now.
    fn attempt_op(&mut self, id: WaiterId) -> Option<(Op, Flight)> {
        let w = self.waiters.get(id)?;
        let key = (w.holder.clone(), w.kind);
        let (lease, once) = (w.lease, !w.may_wait());
        if let Some(blocked) = self.trips.blocked(&key) {
            // Its holder's unresolved request, or the settling of its count, goes first; its
            // end wakes this one. A single attempt cannot wait for that: it fails as that
            // request did, or finds the lock not free for its holder (its count in Redis may
            // still include a hold that ended here); but with Redis away (the settling cannot
            // run) it fails as the last round trip did: that is no holder.
            if once {
                let answer = match (blocked, self.link.outage().cause()) {
                    (Blocked::Unresolved(error), _) => Answer::Failed(error),
                    (Blocked::Settling, Some(cause)) => Answer::Failed(cause),
                    (Blocked::Settling, None) => Answer::TimedOut,
                };
                self.answer(id, answer);
            }
            return None;
        }
        Some(self.acquire_op(id, key, lease, once))
    }

    /// Waiter `id`'s attempt for `key` with `lease` (`once`: a single attempt), its holder
    /// free to take (nothing of it unresolved or being settled).
    pub(super) fn acquire_op(
        &mut self,
        id: WaiterId,
        key: HoldKey,
        lease: Option<Duration>,
        once: bool,
    ) -> (Op, Flight) {
        let hold = self.holds.get(&key);
        let ttl = self.attempt_ttl(hold, lease);
        // Exact: every hold of this holder is this actor's, none of its requests is unresolved
        // (see `attempt_op`), and a release that failed with an answer from Redis did not run.
        let expect = Expect::count(hold.map_or(0, |h| h.count));
        let seq = self.trips.next_seq();
        // A fair attempt that may wait can queue its holder, even one whose reply is lost: from
        // now on its holder has a place, left when its last waiter ends without the lock
        // (leaving when not queued changes nothing). A place being left is taken over.
        let queues = key.1.is_fair() && !once;
        let place_wait = self.place_wait();
        if queues {
            self.take_place(&key.0, place_wait);
        }
        let op = Op::Acquire {
            kind: key.1,
            holder: key.0.clone(),
            ttl,
            fair: FairArgs {
                wait: place_wait,
                once,
                cap: self.settings.fair_place_timeout,
            },
            expect,
            seq,
        };
        let flight = Flight::Attempt {
            id,
            key,
            lease,
            started: self.now,
            place: queues.then_some(place_wait),
        };
        (op, flight)
    }

    /// The TTL an attempt with `lease` sets, onto its holder's `hold` here, if any.
    fn attempt_ttl(&self, hold: Option<&Hold>, lease: Option<Duration>) -> Duration {
        let ttl_default = self.settings.watchdog_timeout;
        match lease {
            // A lease re-entry onto a hold the watchdog renews must not shorten the key's PTTL
            // below the watchdog's schedule: the hold lives as long as the renewed one anyway.
            Some(lease) if hold.is_some_and(|h| h.watchdog) => lease.max(ttl_default),
            // Nor a shorter lease re-entry the hold's own end: its outer guard was promised
            // its lease (`valid_until`), and another process would take the name sooner.
            Some(lease) => {
                let ends = hold.and_then(|h| h.ends);
                ends.map_or(lease, |e| lease.max(e.saturating_duration_since(self.now)))
            }
            None => ttl_default,
        }
    }

    /// A release, or a hand-off (see `hand_off_to`).
    pub(super) fn release_op(
        &mut self,
        key: HoldKey,
        epoch: u64,
        reply: Option<ReplyId>,
    ) -> Option<(Op, Flight)> {
        let Some(hold) = self.holds.of_mut(&key, epoch) else {
            if let Some(reply) = reply {
                let e = not_held(&self.name, &key);
                self.out.push(Effect::Done(reply, Err(e)));
            }
            return None;
        };
        if hold.unreleased > 0 {
            // Earlier releases are unconfirmed: this one joins them, settled in one go.
            hold.unreleased += 1;
            if let Some(reply) = reply {
                self.out.push(Effect::Done(reply, Ok(())));
            }
            return None;
        }
        let (count, lease) = (hold.count, hold.restored(self.now));
        if count == 1 && hold.tracked && self.settings.watch_holds {
            // The last release takes the key away: the Watchdog lets the hold go first, so the
            // invalidation this release causes costs no check (its failure tracks it again,
            // `released`).
            hold.tracked = false;
            self.out.push(Effect::Untrack {
                hold: key.clone(),
                epoch,
            });
        }
        // With nobody waiting here (an uncontended pair) there is nobody to hand it to.
        let to = if count == 1 && !self.waiters.is_empty() {
            self.hand_off_to(&key)
        } else {
            None
        };
        let seq = self.trips.next_seq();
        let op = match &to {
            Some((_, to_key, to_lease)) => Op::HandOff {
                kind: key.1,
                from: key.0.clone(),
                lease,
                to: to_key.0.clone(),
                to_lease: to_lease.unwrap_or(self.settings.watchdog_timeout),
                expect: Expect {
                    count,
                    to: self.holds.count(to_key),
                },
                seq,
            },
            None => Op::Release {
                kind: key.1,
                holder: key.0.clone(),
                lease,
                expect: Expect::count(count),
                seq,
            },
        };
        let flight = Flight::Release(ReleaseFlight {
            key,
            epoch,
            lease,
            reply,
            started: self.now,
            to,
        });
        Some((op, flight))
    }

    /// The waiter the last hold of `key` goes to in a hand-off, with its hold and lease: when
    /// the kind is exclusive and unfair and the oldest local waiter may wait for it, one script
    /// releases and grants it to that waiter. The streak is bounded so that other processes,
    /// woken only by a publish, get their chance.
    #[inline(never)]
    fn hand_off_to(&mut self, key: &HoldKey) -> Option<(WaiterId, HoldKey, Option<Duration>)> {
        let may = key.1.is_exclusive_unfair()
            && self.settings.hand_off
            && self.waiters.may_hand_off()
            && self.phase == Phase::Running;
        if !may {
            return None;
        }
        self.waiters
            .front()
            .filter(|w| w.kind == key.1 && w.may_wait() && w.holder != key.0)
            .map(|w| (w.id, (w.holder.clone(), w.kind), w.lease))
            // Nor to a holder with a hold here: beside this releasing holder's, that hold is
            // gone from Redis unnoticed (its key deleted, say), and a hand-off would count a
            // fresh hold as a re-entry of it, so its guard would never be told lost (and a
            // non-reentrant lock would grant its holder a second hold). The waiter's own
            // attempt finds it gone and asks again as a new hold.
            .filter(|(_, to, _)| self.trips.blocked(to).is_none() && !self.holds.contains(to))
    }

    #[cold]
    fn shutdown_op(&mut self, release: bool) -> Op {
        // An unresolved fair attempt may have queued its holder, whose waiter may have left
        // before: its place is left with the others.
        for (holder, wait) in self.trips.unsure_places() {
            self.take_place(&holder, wait);
        }
        let leave = self.fail_waiters();
        let lapsed: Vec<HoldKey> = self.trips.lapsed().cloned().collect();
        let unsettled = self.end_unsettled();
        let release = if release {
            self.release_all(unsettled)
        } else {
            Vec::new()
        };
        Op::Shutdown {
            leave,
            release,
            lapsed,
        }
    }

    /// Stopping: the requests still unresolved, and the holders whose count was still to be
    /// settled, end here. Returns the holders whose count Redis may hold beyond what this
    /// actor grants.
    #[cold]
    fn end_unsettled(&mut self) -> Vec<HoldKey> {
        let mut unsettled: Vec<HoldKey> = Vec::new();
        for pending in self.trips.take_held_back() {
            // Released with everything else (see `release_all`).
            match pending {
                Pending::Release {
                    reply: Some(reply), ..
                } => self.out.push(Effect::Done(reply, Ok(()))),
                Pending::Settle { key } => unsettled.push(key),
                _ => {}
            }
        }
        for (id, u) in self.trips.take_unsure() {
            self.timers.stop(&Timer::Resend(id));
            unsettled.extend(u.op.keys());
        }
        for key in self.trips.take_abandoned() {
            self.timers.stop(&Timer::Settle(key.clone()));
            unsettled.push(key);
        }
        unsettled.extend(self.trips.take_queued_settles());
        unsettled
    }

    /// Ends every hold (their guards learn it now: the holds end with this round trip) and
    /// returns what to release: every hold as often as it was taken, and the counts of the
    /// `unsettled` holders (every count of a holder is this actor's, so releasing it all is
    /// exact).
    #[cold]
    fn release_all(&mut self, unsettled: Vec<HoldKey>) -> Vec<(HoldKey, Duration)> {
        let mut all: Vec<(HoldKey, Duration)> = self
            .holds
            .iter()
            .map(|(key, h)| (key.clone(), h.lease))
            .collect();
        for (key, _) in &all {
            if let Some(epoch) = self.holds.get(key).map(|h| h.epoch) {
                self.end_hold(key, epoch, Some(Loss::Shutdown));
            }
        }
        let lease = self.settings.watchdog_timeout;
        for key in unsettled {
            if !all.iter().any(|(k, _)| *k == key) {
                all.push((key, lease));
            }
        }
        all
    }

    /// Fails every waiter with `Shutdown` and drops every subscription. Returns the fair-queue
    /// places to leave, one per holder.
    #[cold]
    pub(super) fn fail_waiters(&mut self) -> Vec<(Arc<str>, Duration)> {
        let leave = self.fair.take_all(&mut self.timers);
        for w in self.waiters.drain() {
            if let Wait::Up(_) = w.wait {
                self.out.push(Effect::Cancel(w.id));
            }
            self.out
                .push(Effect::Answer(w.id, Answer::Failed(LockError::Shutdown)));
        }
        for channel in self.link.unsubscribe_all() {
            self.out.push(Effect::Unsubscribe(channel));
        }
        leave
    }
}
