//! Round trips: what is queued, what is under way, and the [`Op`] each becomes. One at a time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::protocol::Expect;

/// A round trip waiting its turn.
#[derive(Debug)]
pub(super) enum Pending {
    Attempt(WaiterId),
    Release {
        key: HoldKey,
        epoch: u64,
        reply: Option<ReplyId>,
    },
    /// Bring the holder's count in Redis to what this actor still grants it (0 with no hold):
    /// after requests of it were given up unresolved, or a lease hold ended here while Redis's
    /// copy of it (set a little later, when the script ran) may still count.
    Settle {
        key: HoldKey,
    },
    /// Send again a request whose reply never came (`unsure`).
    Resend(u64),
    /// Settle the count of a hold's holder, whose releases went unconfirmed, to what the hold
    /// still counts here.
    SettleHold {
        key: HoldKey,
        epoch: u64,
    },
    /// Leave the fair queue, then answer the waiter (if any) that gave up.
    Leave {
        holder: Arc<str>,
        wait: Duration,
        then: Option<(WaiterId, Answer)>,
    },
    /// Refresh the fair-queue places (`Op::FairRefresh`).
    Refresh,
    Shutdown {
        release: bool,
    },
}

/// A fair-queue place whose leave failed or went unanswered: it is sent again (a leave is
/// idempotent: a second run finds no place and takes nothing off the others) until `until`, when
/// the place would have expired anyway: its wait plus the place timeout after the first failure
/// (the most a refresh or a come-back, all sent before the leave, put its deadline ahead by at
/// the head of the queue; see `LockState::left`). A new queued attempt of the holder takes the place over
/// instead (its come-back keeps the place, with the same wait).
#[derive(Debug)]
pub(super) struct Leaving {
    pub wait: Duration,
    pub until: Instant,
    pub failures: u32,
}

/// A release under way: the hold, the lease it keeps while other holds remain, who waits for
/// its outcome, and when it was sent.
#[derive(Debug)]
pub(super) struct ReleaseFlight {
    pub key: HoldKey,
    pub epoch: u64,
    pub lease: Duration,
    pub reply: Option<ReplyId>,
    pub started: Instant,
    /// A hand-off: the waiter and its lease.
    pub to: Option<(WaiterId, HoldKey, Option<Duration>)>,
}

/// The round trip under way, with what its outcome needs.
#[derive(Debug)]
pub(super) enum Flight {
    Attempt {
        id: WaiterId,
        key: HoldKey,
        lease: Option<Duration>,
        started: Instant,
        /// A fair attempt that may queue its holder: its place's wait.
        place: Option<Duration>,
    },
    Release(ReleaseFlight),
    /// Settling a holder with no hold here (see `Pending::Settle`).
    Settle {
        key: HoldKey,
    },
    /// Settling a hold's holder (see `Pending::SettleHold`).
    SettleHold {
        key: HoldKey,
        epoch: u64,
    },
    Leave {
        holder: Arc<str>,
        wait: Duration,
        then: Option<(WaiterId, Answer)>,
    },
    Refresh,
    Shutdown,
}

impl Pending {
    /// The hold a release or a settling is for.
    pub(super) fn key(&self) -> Option<&HoldKey> {
        match self {
            Pending::Release { key, .. }
            | Pending::SettleHold { key, .. }
            | Pending::Settle { key } => Some(key),
            _ => None,
        }
    }
}

impl LockState {
    /// Queues an attempt for waiter `id` (unless one is queued already).
    pub(super) fn attempt(&mut self, id: WaiterId) {
        let queued = self
            .todo
            .iter()
            .any(|p| matches!(p, Pending::Attempt(x) if *x == id));
        if !queued {
            self.todo.push_back(Pending::Attempt(id));
        }
        self.pump();
    }

    /// Starts the next round trip, when none is under way.
    pub(super) fn pump(&mut self) {
        if self.phase == Phase::Stopped {
            for pending in std::mem::take(&mut self.todo) {
                if let Pending::Release {
                    reply: Some(reply), ..
                } = pending
                {
                    self.out
                        .push(Effect::ReleaseDone(reply, Err(LockError::Shutdown)));
                }
            }
            return;
        }
        while self.flight.is_none() {
            let Some(next) = self.todo.pop_front() else {
                return;
            };
            if next.key().is_some_and(|key| self.is_unsure(key)) {
                // Behind its holder's unresolved request (see `unsure`).
                self.held_back.push(next);
                continue;
            }
            let Some((op, flight)) = self.op_of(next) else {
                continue;
            };
            self.flight = Some(flight);
            if op.seq().is_some() {
                // Kept to be sent again as it is, should its reply never come.
                self.sent = Some(op.clone());
            }
            self.out.push(Effect::Run(op));
        }
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
            Pending::Settle { key } => match self.holds.get(&key) {
                Some(hold) => {
                    let epoch = hold.epoch;
                    self.todo.push_front(Pending::SettleHold { key, epoch });
                    None
                }
                None => Some((
                    Op::Settle {
                        kind: key.1,
                        holder: key.0.clone(),
                        target: 0,
                        lease: self.settings.watchdog_timeout,
                    },
                    Flight::Settle { key },
                )),
            },
            Pending::Resend(id) => self.resend_op(id),
            Pending::SettleHold { key, epoch } => {
                let hold = self.hold_mut(&key, epoch)?;
                let op = Op::Settle {
                    kind: key.1,
                    holder: key.0.clone(),
                    target: hold.count - hold.unreleased,
                    lease: hold.lease,
                };
                Some((op, Flight::SettleHold { key, epoch }))
            }
            Pending::Leave { holder, wait, then } => {
                self.places.remove(&holder);
                let op = Op::LeaveQueue {
                    holder: holder.clone(),
                    wait,
                };
                Some((op, Flight::Leave { holder, wait, then }))
            }
            Pending::Refresh => {
                let queued = self.todo.iter().any(|p| matches!(p, Pending::Refresh));
                if self.places.is_empty() || queued {
                    return None;
                }
                let op = Op::FairRefresh {
                    places: self.places.iter().map(|(h, w)| (h.clone(), *w)).collect(),
                    cap: self.settings.fair_place_timeout,
                };
                Some((op, Flight::Refresh))
            }
            Pending::Shutdown { release } => Some((self.shutdown_op(release), Flight::Shutdown)),
        }
    }

    fn attempt_op(&mut self, id: WaiterId) -> Option<(Op, Flight)> {
        let ttl_default = self.settings.watchdog_timeout;
        let key = (
            self.waiters.get(id)?.holder.clone(),
            self.waiters.get(id)?.kind,
        );
        let blocked = self.unsure_error(&key).or_else(|| {
            self.abandoned.contains(&key).then_some(LockError::Timeout {
                op: "settling the holder's count",
                after: Duration::ZERO,
            })
        });
        if let Some(error) = blocked {
            // Its holder's unresolved request goes first; its resolution wakes this one. A
            // single attempt cannot wait for that: it fails as that request did.
            if !self.waiters.get(id)?.may_wait() {
                self.answer(id, Answer::Failed(error));
            }
            return None;
        }
        // A lease re-entry onto a hold the watchdog renews must not shorten the key's PTTL
        // below the watchdog's schedule: the hold lives as long as the renewed one anyway.
        let renewed = self.holds.get(&key).is_some_and(|h| h.watchdog);
        let w = self.waiters.get(id)?;
        let ttl = match w.lease {
            Some(lease) if renewed => lease.max(ttl_default),
            lease => lease.unwrap_or(ttl_default),
        };
        // A lease re-entry may shorten the key's PTTL as soon as it is sent, whether or not its
        // reply comes: the hold counts as ending then at the latest.
        let shortened = self
            .holds
            .get(&key)
            .filter(|h| !h.watchdog && h.ends.is_some_and(|e| self.now + ttl < e))
            .map(|h| h.lease);
        if let Some(lease) = shortened {
            self.expire_at(&key, lease, self.now + ttl);
        }
        // Exact: every hold of this holder is this actor's, none of its requests is unresolved
        // (above), and a release that failed with an answer from Redis did not run.
        let expect = Expect::count(self.holds.get(&key).map_or(0, |h| h.count));
        let seq = self.next_seq();
        let w = self.waiters.get(id)?;
        let (holder, queues) = (w.holder.clone(), w.kind.is_fair() && w.may_wait());
        // A fair attempt that may wait can queue its holder, even one whose reply is lost: from
        // now on its holder has a place, left when its last waiter ends without the lock
        // (leaving when not queued changes nothing). A place being left is taken over.
        let place_wait = self.place_wait();
        if queues {
            self.take_place(&holder, place_wait);
        }
        let w = self.waiters.get(id)?;
        let op = Op::Acquire {
            kind: w.kind,
            holder: w.holder.clone(),
            ttl,
            fair: FairArgs {
                wait: place_wait,
                once: !w.may_wait(),
                cap: self.settings.fair_place_timeout,
            },
            expect,
            seq,
        };
        let flight = Flight::Attempt {
            id,
            key: (w.holder.clone(), w.kind),
            lease: w.lease,
            started: self.now,
            place: queues.then_some(place_wait),
        };
        Some((op, flight))
    }

    /// `holder`'s place in the fair queue, as a queued attempt of it is sent: the wait it was
    /// made with, or `wait` for a new one. A place being left is taken over: the attempt keeps
    /// it (the come-back rule), so its leave stops.
    pub(super) fn take_place(&mut self, holder: &Arc<str>, wait: Duration) -> Duration {
        // A leave made before is not sent again over a new place of the holder.
        self.recent_leaves.remove(holder);
        if let Some(leaving) = self.leaving.remove(holder) {
            self.out.push(Effect::Cancel(Timer::Leave(holder.clone())));
            self.places.insert(holder.clone(), leaving.wait);
        }
        if !self.refresh_armed {
            self.arm_refresh();
        }
        *self.places.entry(holder.clone()).or_insert(wait)
    }

    /// The wait every place of this manager is kept for after its turn,
    /// `min(fair_wait_timeout, fair_place_timeout)`: one for every waiter, never a caller's own
    /// wait (see `places`).
    pub(super) fn place_wait(&self) -> Duration {
        self.settings
            .fair_wait_timeout
            .min(self.settings.fair_place_timeout)
    }

    /// Arms the places' refresh, a third of the places' wait from now (the place timeout,
    /// or a shorter fair wait timeout: a place must be refreshed before its wait runs out).
    pub(super) fn arm_refresh(&mut self) {
        self.refresh_armed = true;
        self.out
            .push(Effect::Arm(Timer::Refresh, self.place_wait() / 3));
    }

    /// A refresh's reply: the head of a free lock, if it is a holder here, takes its turn, and
    /// the waiters whose place is gone (pruned while they could not come back, or lost in a
    /// failover) queue again. An error changes nothing: the next refresh comes.
    pub(super) fn refreshed(&mut self, res: Result<Refreshed, LockError>) {
        let refreshed = match res {
            Ok(refreshed) => refreshed,
            Err(error) => {
                tracing::warn!(lock = %self.name, %error, "could not refresh the fair-queue places");
                return;
            }
        };
        let mut turns: Vec<WaiterId> = Vec::new();
        for holder in refreshed.head.iter().chain(&refreshed.gone) {
            if let Some(w) = self
                .waiters
                .iter()
                .find(|w| w.holder == *holder && w.may_wait())
                && !turns.contains(&w.id)
            {
                turns.push(w.id);
            }
        }
        for id in turns {
            self.attempt(id);
        }
    }

    /// A fair-queue leave's outcome: done, or sent again after a backoff until the place would
    /// have expired.
    pub(super) fn left(&mut self, holder: Arc<str>, wait: Duration, res: Result<bool, LockError>) {
        let error = match res {
            Ok(queued) => {
                // A leave sent again (its first reply lost) may find the place gone because
                // its first run removed it: remembered too, so that a failover that brings the
                // place back sends it again.
                let resent = self.leaving.remove(&holder).is_some();
                if resent {
                    self.out.push(Effect::Cancel(Timer::Leave(holder.clone())));
                }
                if (queued || resent) && !self.places.contains_key(&holder) {
                    self.remember_leave(holder, wait);
                }
                return;
            }
            Err(error) => error,
        };
        if self.places.contains_key(&holder) {
            // A queued attempt of the holder took the place over meanwhile.
            return;
        }
        let now = self.now;
        // How long the place could last: its deadline was last set (by a refresh or a
        // come-back, before this leave was sent) to at most its wait after now + the lock's
        // PTTL capped at the place timeout, when at the head (`fair_refresh.lua`,
        // `fair_queue.lua`); it is not refreshed any more. A place behind others keeps its wait
        // after the one ahead: left here, it costs at most that wait once it is the head, as a
        // place of a killed waiter does.
        let lifetime = wait + self.settings.fair_place_timeout;
        let leaving = self.leaving.entry(holder.clone()).or_insert(Leaving {
            wait,
            until: now + lifetime,
            failures: 0,
        });
        leaving.failures = leaving.failures.saturating_add(1);
        if now >= leaving.until {
            tracing::warn!(lock = %self.name, %error, "could not leave the fair queue; the place expires");
            self.leaving.remove(&holder);
            return;
        }
        let after = backoff(leaving.failures);
        tracing::warn!(lock = %self.name, %error, ?after, "could not leave the fair queue; leaving again");
        self.out.push(Effect::Arm(Timer::Leave(holder), after));
    }

    /// The pub/sub connection came back, a sign of a failover, which may have brought back
    /// places whose leave ran on the old primary: the leaves that ran within the time their
    /// place could still be alive (its wait plus the place timeout, as `left` bounds a resend)
    /// are sent again, for holders with no waiter and no place here now. A leave is idempotent:
    /// one that finds no place changes nothing.
    pub(super) fn leave_again(&mut self) {
        let now = self.now;
        let horizon = self.settings.fair_place_timeout;
        let recent = std::mem::take(&mut self.recent_leaves);
        self.recent_leaves_cap = RECENT_LEAVES_MIN;
        let mut sent = false;
        for (holder, (wait, at)) in recent {
            if now >= at + wait + horizon {
                continue;
            }
            let pending = self
                .todo
                .iter()
                .any(|p| matches!(p, Pending::Leave { holder: h, .. } if *h == holder));
            if self.waiters.has_holder(&holder)
                || self.places.contains_key(&holder)
                || self.leaving.contains_key(&holder)
                || pending
            {
                continue;
            }
            self.todo.push_back(Pending::Leave {
                holder,
                wait,
                then: None,
            });
            sent = true;
        }
        if sent {
            self.set_busy();
            self.pump();
        }
    }

    /// A leave that removed `holder`'s place, kept for `leave_again` while the place could
    /// still be alive had a failover brought it back.
    fn remember_leave(&mut self, holder: Arc<str>, wait: Duration) {
        let now = self.now;
        self.recent_leaves.insert(holder, (wait, now));
        if self.recent_leaves.len() >= self.recent_leaves_cap {
            let horizon = self.settings.fair_place_timeout;
            self.recent_leaves
                .retain(|_, (wait, at)| now < *at + *wait + horizon);
            self.recent_leaves_cap = (2 * self.recent_leaves.len()).max(RECENT_LEAVES_MIN);
        }
    }

    /// `holder`'s place, when no waiter of it is left here to use it, is left (`then` answered
    /// once it has been).
    pub(super) fn leave_unused(&mut self, holder: &Arc<str>, then: Option<(WaiterId, Answer)>) {
        let pending = self
            .todo
            .iter()
            .any(|p| matches!(p, Pending::Leave { holder: h, .. } if h == holder));
        let unused = !self.waiters.has_holder(holder) && !pending;
        match self.places.get(holder) {
            Some(&wait) if unused => {
                self.todo.push_front(Pending::Leave {
                    holder: holder.clone(),
                    wait,
                    then,
                });
                self.pump();
            }
            _ => {
                if let Some((id, answer)) = then {
                    self.out.push(Effect::Answer(id, answer));
                }
            }
        }
    }

    /// A release, or a hand-off: when this release frees the lock (the last hold of its holder),
    /// the kind is exclusive and unfair, and the oldest local waiter may wait for it, one script
    /// releases and grants it to that waiter. The streak is bounded so that other processes,
    /// woken only by a publish, get their chance.
    fn release_op(
        &mut self,
        key: HoldKey,
        epoch: u64,
        reply: Option<ReplyId>,
    ) -> Option<(Op, Flight)> {
        let name = self.name.clone();
        let Some(hold) = self.holds.get_mut(&key).filter(|h| h.epoch == epoch) else {
            if let Some(reply) = reply {
                self.out
                    .push(Effect::ReleaseDone(reply, Err(not_held(&name, &key))));
            }
            return None;
        };
        if hold.unreleased > 0 {
            // Earlier releases are unconfirmed: this one joins them, settled in one go.
            hold.unreleased += 1;
            if let Some(reply) = reply {
                self.out.push(Effect::ReleaseDone(reply, Ok(())));
            }
            return None;
        }
        let (count, lease) = (hold.count, hold.lease);
        let to = if count == 1
            && matches!(
                key.1,
                LockKind::Reentrant | LockKind::Fenced | LockKind::NonReentrant
            )
            && self.settings.hand_off
            && self.streak < MAX_HAND_OFF_STREAK
            && self.phase == Phase::Running
        {
            self.waiters
                .front()
                .filter(|w| w.kind == key.1 && w.may_wait() && w.holder != key.0)
                .map(|w| (w.id, (w.holder.clone(), w.kind), w.lease))
                // Nor to a holder with a hold here: beside this releasing holder's, that hold is
                // gone from Redis unnoticed (its key deleted, say), and a hand-off would count a
                // fresh hold as a re-entry of it, so its guard would never be told lost (and a
                // non-reentrant lock would grant its holder a second hold). The waiter's own
                // attempt finds it gone and asks again as a new hold.
                .filter(|(_, to, _)| {
                    !self.is_unsure(to)
                        && !self.abandoned.contains(to)
                        && !self.holds.contains_key(to)
                })
        } else {
            None
        };
        let seq = self.next_seq();
        let op = match &to {
            Some((_, to_key, to_lease)) => Op::HandOff {
                kind: key.1,
                from: key.0.clone(),
                lease,
                to: to_key.0.clone(),
                to_lease: to_lease.unwrap_or(self.settings.watchdog_timeout),
                expect: Expect {
                    count,
                    to: self.holds.get(to_key).map_or(0, |h| h.count),
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

    /// A new request number.
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn shutdown_op(&mut self, release: bool) -> Op {
        // An unresolved fair attempt may have queued its holder, whose waiter may have left
        // before: its place is left with the others.
        let queued: Vec<(Arc<str>, Duration)> = self
            .unsure
            .values()
            .filter_map(|u| match &u.flight {
                Some(Flight::Attempt {
                    key,
                    place: Some(wait),
                    ..
                }) => Some((key.0.clone(), *wait)),
                _ => None,
            })
            .collect();
        for (holder, wait) in queued {
            self.take_place(&holder, wait);
        }
        let leave = self.fail_waiters();
        // Requests still unresolved end here; what they may have taken is released with the
        // holds (every count of a holder is this actor's, so releasing it all is exact).
        let mut unsure: Vec<HoldKey> = Vec::new();
        for pending in std::mem::take(&mut self.held_back) {
            // Released below with everything else.
            if let Pending::Release {
                reply: Some(reply), ..
            } = pending
            {
                self.out.push(Effect::ReleaseDone(reply, Ok(())));
            }
        }
        for (id, u) in std::mem::take(&mut self.unsure) {
            self.out.push(Effect::Cancel(Timer::Resend(id)));
            unsure.extend(u.op.keys());
        }
        // So do holders given up on whose count was still to be settled.
        unsure.extend(self.abandoned.drain());
        for pending in std::mem::take(&mut self.todo) {
            match pending {
                Pending::Settle { key } => unsure.push(key),
                other => self.todo.push_back(other),
            }
        }
        let release = if release {
            let mut all: Vec<(HoldKey, Duration)> = self
                .holds
                .iter()
                .map(|(key, h)| (key.clone(), h.lease))
                .collect();
            // Their guards learn it now: the holds end with this round trip.
            for (key, _) in &all {
                if let Some(epoch) = self.holds.get(key).map(|h| h.epoch) {
                    self.end_hold(key, epoch, Some(Loss::Shutdown));
                }
            }
            let lease = self.settings.watchdog_timeout;
            for key in unsure {
                if !all.iter().any(|(k, _)| *k == key) {
                    all.push((key, lease));
                }
            }
            all
        } else {
            Vec::new()
        };
        Op::Shutdown { leave, release }
    }

    /// Fails every waiter with `Shutdown` and drops every subscription. Returns the fair-queue
    /// places to leave, one per holder.
    pub(super) fn fail_waiters(&mut self) -> Vec<(Arc<str>, Duration)> {
        let mut leave: Vec<(Arc<str>, Duration)> = self.places.drain().collect();
        for (holder, leaving) in self.leaving.drain() {
            self.out.push(Effect::Cancel(Timer::Leave(holder.clone())));
            leave.push((holder, leaving.wait));
        }
        for w in self.waiters.drain() {
            if let Wait::Up(_) = w.wait {
                self.out.push(Effect::Cancel(Timer::Deadline(w.id)));
            }
            self.out
                .push(Effect::Answer(w.id, Answer::Failed(LockError::Shutdown)));
        }
        for channel in std::mem::take(&mut self.subscribed) {
            self.out.push(Effect::Unsubscribe(channel));
        }
        leave
    }
}
