//! Round trips: what is queued, what is under way, and the [`Op`] each becomes. One at a time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

/// A round trip waiting its turn.
#[derive(Debug)]
pub(super) enum Pending {
    Attempt(WaiterId),
    Release {
        key: HoldKey,
        epoch: u64,
        reply: Option<ReplyId>,
    },
    /// Take back what an acquire of unknown outcome may have taken.
    Undo {
        key: HoldKey,
        lease: Duration,
    },
    Reconcile {
        key: HoldKey,
        epoch: u64,
    },
    /// Leave the fair queue, then answer the waiter (if any) that gave up.
    Leave {
        holder: Arc<str>,
        wait: Duration,
        then: Option<(WaiterId, Answer)>,
    },
    Shutdown {
        release: bool,
    },
}

/// The round trip under way, with what its outcome needs.
#[derive(Debug)]
pub(super) enum Flight {
    Attempt {
        id: WaiterId,
        key: HoldKey,
        lease: Option<Duration>,
        started: Instant,
    },
    Release {
        key: HoldKey,
        epoch: u64,
        lease: Duration,
        reply: Option<ReplyId>,
        started: Instant,
        /// A hand-off: the waiter and its lease.
        to: Option<(WaiterId, HoldKey, Option<Duration>)>,
    },
    Undo,
    Reconcile {
        key: HoldKey,
        epoch: u64,
    },
    Leave {
        then: Option<(WaiterId, Answer)>,
    },
    Shutdown,
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
        while self.flight.is_none() {
            let Some(next) = self.todo.pop_front() else {
                return;
            };
            let (op, flight) = match next {
                Pending::Attempt(id) => match self.attempt_op(id) {
                    Some(pair) => pair,
                    None => {
                        // Its waiter left: a wake-up it was part of goes on with the next one.
                        self.next_wake();
                        continue;
                    }
                },
                Pending::Release { key, epoch, reply } => {
                    match self.release_op(key, epoch, reply) {
                        Some(pair) => pair,
                        None => continue,
                    }
                }
                Pending::Undo { key, lease } => (
                    Op::Release {
                        kind: key.1,
                        holder: key.0,
                        lease,
                    },
                    Flight::Undo,
                ),
                Pending::Reconcile { key, epoch } => {
                    let Some(hold) = self.hold_mut(&key, epoch) else {
                        continue;
                    };
                    let op = Op::Settle {
                        kind: key.1,
                        holder: key.0.clone(),
                        target: hold.count - hold.unreleased,
                        lease: hold.lease,
                    };
                    (op, Flight::Reconcile { key, epoch })
                }
                Pending::Leave { holder, wait, then } => {
                    (Op::LeaveQueue { holder, wait }, Flight::Leave { then })
                }
                Pending::Shutdown { release } => (self.shutdown_op(release), Flight::Shutdown),
            };
            self.flight = Some(flight);
            self.out.push(Effect::Run(op));
        }
    }

    fn attempt_op(&mut self, id: WaiterId) -> Option<(Op, Flight)> {
        let ttl_default = self.settings.watchdog_timeout;
        let w = self.waiters.get_mut(id)?;
        // A fair attempt that may wait can enqueue it, even one whose reply is lost: from now
        // on, giving up must leave the queue (leaving when not queued changes nothing).
        w.queued |= w.kind == LockKind::Fair && w.may_wait();
        let op = Op::Acquire {
            kind: w.kind,
            holder: w.holder.clone(),
            ttl: w.lease.unwrap_or(ttl_default),
            fair: FairArgs {
                wait: w.fair_wait,
                once: !w.may_wait(),
            },
        };
        let flight = Flight::Attempt {
            id,
            key: (w.holder.clone(), w.kind),
            lease: w.lease,
            started: self.now,
        };
        Some((op, flight))
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
            // Earlier releases are unconfirmed: this one joins them, reconciled in one go.
            hold.unreleased += 1;
            if let Some(reply) = reply {
                self.out.push(Effect::ReleaseDone(reply, Ok(())));
            }
            return None;
        }
        let (count, lease) = (hold.count, hold.lease);
        let to = if count == 1
            && matches!(key.1, LockKind::Reentrant | LockKind::Fenced)
            && self.settings.hand_off
            && self.streak < MAX_HAND_OFF_STREAK
            && !self.stopping
        {
            self.waiters
                .front()
                .filter(|w| w.kind == key.1 && w.may_wait() && w.holder != key.0)
                .map(|w| (w.id, (w.holder.clone(), w.kind), w.lease))
        } else {
            None
        };
        let op = match &to {
            Some((_, (to, _), to_lease)) => Op::HandOff {
                kind: key.1,
                from: key.0.clone(),
                lease,
                to: to.clone(),
                to_lease: to_lease.unwrap_or(self.settings.watchdog_timeout),
            },
            None => Op::Release {
                kind: key.1,
                holder: key.0.clone(),
                lease,
            },
        };
        let flight = Flight::Release {
            key,
            epoch,
            lease,
            reply,
            started: self.now,
            to,
        };
        Some((op, flight))
    }

    fn shutdown_op(&mut self, release: bool) -> Op {
        let leave = self.fail_waiters();
        let release = if release {
            self.holds
                .iter()
                .map(|(key, h)| (key.clone(), h.lease))
                .collect()
        } else {
            Vec::new()
        };
        Op::Shutdown { leave, release }
    }

    /// Fails every waiter with `Shutdown` and drops every subscription. Returns the fair-queue
    /// places to leave, one per holder.
    pub(super) fn fail_waiters(&mut self) -> Vec<(Arc<str>, Duration)> {
        let mut leave: Vec<(Arc<str>, Duration)> = Vec::new();
        for w in self.waiters.drain() {
            if w.queued && !leave.iter().any(|(h, _)| *h == w.holder) {
                leave.push((w.holder.clone(), w.fair_wait));
            }
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
