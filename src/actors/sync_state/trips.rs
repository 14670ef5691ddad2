//! Round trips of a synchronizer name. Unlike a lock's, they run side by side: each goes on a
//! request-latch lane of its own (a lane is reused once its trip is over), and Redis records
//! each request's outcome under its latch. A request whose reply never came (a time-out, a
//! dropped connection) is sent again as it is after a backoff, with the same latch, so Redis
//! counts it once and replies as its first run did; until `horizon` after it was first sent,
//! and then its caller gets the error. A waiter does not wait for that: past its deadline (or
//! for a single attempt) it is answered as soon as its attempt's reply is found missing, and
//! the request goes on being sent without it; a take that ran is then given back, once.
//!
//! The [`Trips`] room holds them (by number, with their lanes); the rules over it, what each
//! outcome does to the waiters and holds, are the `impl SyncState` below.

use std::time::{Duration, Instant};

use super::*;

/// One round trip under way, or waiting to be sent again.
#[derive(Debug)]
pub(super) struct Under {
    pub lane: u32,
    pub op: Op,
    pub purpose: Purpose,
    /// When it was first sent: it is sent again until `horizon` after that.
    pub started: Instant,
    /// How many times its reply went missing.
    pub failures: u32,
}

/// What a round trip's outcome is for.
#[derive(Debug)]
pub(super) enum Purpose {
    /// Waiter `id`'s attempt (a take or a latch's read).
    Attempt(WaiterId),
    /// Permits taken by waiter `id`'s attempt but refused by replica sync, given back (on the
    /// attempt's lane) before the waiter is answered.
    Unsynced {
        waiter: WaiterId,
        acked: u32,
        wanted: u32,
    },
    /// Permits given back; `was_lost`: they were known lost when given back.
    GiveBack {
        reply: Option<ReplyId>,
        permits: u32,
        was_lost: bool,
    },
    /// An adjustment, for its caller.
    Adjust(Option<ReplyId>),
}

/// The round trips under way or to be sent again, by number, and the request-latch lanes.
/// Invariant: each trip holds its lane until it is over, and a lane is free when no trip holds
/// it. One actor of a kind and name runs at a time per manager, and it stops only with no round
/// trip under way, so its successor reuses the same lanes.
#[derive(Debug, Default)]
pub(super) struct Trips {
    by_seq: FxHashMap<u64, Under>,
    /// The last round trip number given.
    seq: u64,
    /// Lanes free for the next round trip, and the last lane made.
    free_lanes: Vec<u32>,
    next_lane: u32,
}

impl Trips {
    /// A free lane: one a finished trip left, else a new one.
    pub(super) fn lane(&mut self) -> u32 {
        self.free_lanes.pop().unwrap_or_else(|| {
            self.next_lane += 1;
            self.next_lane
        })
    }

    /// `lane` is free again (its trip is over).
    pub(super) fn free(&mut self, lane: u32) {
        self.free_lanes.push(lane);
    }

    /// Starts `op` for `purpose` on `lane` (taken already) at `now`: the trip to run.
    pub(super) fn start(&mut self, lane: u32, op: Op, purpose: Purpose, now: Instant) -> Trip {
        self.seq += 1;
        let seq = self.seq;
        let trip = Trip {
            seq,
            lane,
            op: op.clone(),
        };
        let under = Under {
            lane,
            op,
            purpose,
            started: now,
            failures: 0,
        };
        self.by_seq.insert(seq, under);
        trip
    }

    /// Trip `seq` as it was first sent, to send again.
    pub(super) fn again(&self, seq: u64) -> Option<Trip> {
        self.by_seq.get(&seq).map(|under| Trip {
            seq,
            lane: under.lane,
            op: under.op.clone(),
        })
    }

    pub(super) fn get_mut(&mut self, seq: u64) -> Option<&mut Under> {
        self.by_seq.get_mut(&seq)
    }

    /// Trip `seq` is over: what it was (its lane is still taken).
    pub(super) fn finish(&mut self, seq: u64) -> Option<Under> {
        self.by_seq.remove(&seq)
    }

    pub(super) fn contains(&self, seq: u64) -> bool {
        self.by_seq.contains_key(&seq)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.by_seq.is_empty()
    }

    /// Whether the reply of waiter `id`'s attempt (or of the give-back of permits its attempt
    /// took unsynced) is known missing: its request is being sent again.
    pub(super) fn reply_missing(&self, id: WaiterId) -> bool {
        self.by_seq.values().any(|u| {
            u.failures > 0
                && matches!(u.purpose,
                    Purpose::Attempt(w) | Purpose::Unsynced { waiter: w, .. } if w == id)
        })
    }

    /// The replica-sync error of waiter `id`'s permits, when its attempt took them unsynced
    /// and they are being given back.
    pub(super) fn unsynced(&self, id: WaiterId) -> Option<LockError> {
        self.by_seq.values().find_map(|u| match u.purpose {
            Purpose::Unsynced {
                waiter,
                acked,
                wanted,
            } if waiter == id => Some(LockError::ReplicaSync { acked, wanted }),
            _ => None,
        })
    }

    /// The trips, by number.
    #[cfg(test)]
    pub(super) fn iter(&self) -> impl Iterator<Item = (&u64, &Under)> {
        self.by_seq.iter()
    }

    /// The free lanes, the next one taken last.
    #[cfg(test)]
    pub(super) fn free_lanes(&self) -> &[u32] {
        &self.free_lanes
    }
}

impl SyncState {
    /// Starts `op` for `purpose` on a free lane.
    pub(super) fn run(&mut self, op: Op, purpose: Purpose) {
        let lane = self.trips.lane();
        self.run_on(lane, op, purpose);
    }

    /// Starts `op` for `purpose` on `lane` (taken already).
    pub(super) fn run_on(&mut self, lane: u32, op: Op, purpose: Purpose) {
        let trip = self.trips.start(lane, op, purpose, self.now);
        self.effects.push(Effect::Run(trip));
    }

    /// How long a request is sent again: a third of the watchdog timeout, as a lock's acquire
    /// (what a take grants has been counting down since its first run).
    pub(super) fn horizon(&self) -> Duration {
        self.settings.watchdog_timeout / 3
    }

    /// Round trip `seq` came back with `outcome`.
    pub(crate) fn ran(&mut self, seq: u64, outcome: Outcome, now: Instant) {
        self.now = now;
        let horizon = self.horizon();
        let Some(sent) = self.trips.get_mut(seq).map(|u| u.started) else {
            return;
        };
        // Sent again, it went unanswered since it was first sent.
        self.heard(&outcome, sent);
        let Some(under) = self.trips.get_mut(seq) else {
            return;
        };
        if outcome.unknown() {
            let after = backoff(under.failures);
            if now.saturating_duration_since(under.started) + after < horizon {
                tracing::debug!(?outcome, "synchronizer request sent again");
                under.failures += 1;
                self.timers.set(Timer::Resend(seq), now, after);
                let purpose = match under.purpose {
                    Purpose::Attempt(id) => Some((id, true)),
                    Purpose::Unsynced { waiter, .. } => Some((waiter, false)),
                    Purpose::Adjust(ref mut reply) => {
                        // Its caller hears of the missing reply now, as a lock release's does,
                        // not a third of the watchdog timeout later; the request goes on being
                        // sent, so that its latch learns whether it ran.
                        if let (Some(reply), Outcome::Reply(Err(e)) | Outcome::Take(Err(e))) =
                            (reply.take(), &outcome)
                        {
                            self.effects.push(Effect::Done(reply, Err(e.clone())));
                        }
                        None
                    }
                    _ => None,
                };
                if let Some((waiter, attempt)) = purpose {
                    self.reply_lost(waiter, attempt, outcome);
                }
                return;
            }
        }
        let Some(under) = self.trips.finish(seq) else {
            return;
        };
        self.finished(under, outcome);
        self.maybe_stopped();
    }

    /// The reply of waiter `id`'s attempt (`attempt`), or of the give-back of what its attempt
    /// took unsynced, went missing, and the request is sent again. A waiter past its deadline
    /// (or making a single attempt) is answered now, not when the request is resolved: that can
    /// take until the horizon, far past its wait. The request goes on; what it took, should it
    /// have run, is given back (in `finished`: its waiter is gone).
    fn reply_lost(&mut self, id: WaiterId, attempt: bool, outcome: Outcome) {
        let Some(at) = self.position(id) else {
            return;
        };
        if !self.waiters[at].last {
            return;
        }
        match outcome {
            // A single attempt fails as a lock's does when its reply is missing.
            Outcome::Take(Err(error)) | Outcome::Reply(Err(error))
                if attempt && self.waiters[at].once =>
            {
                self.answer(at, Answer::Failed(error));
            }
            _ => self.stop_waiting(id),
        }
        self.unsubscribe_if_unused();
    }

    /// Round trip `under` is over with `outcome`: what it was for gets it.
    fn finished(&mut self, under: Under, outcome: Outcome) {
        let lane = under.lane;
        match (under.purpose, outcome, under.op) {
            (
                Purpose::Attempt(waiter),
                Outcome::Take(Ok(Take::Unsynced { acked, wanted })),
                Op::Take { permits, ids, .. },
            ) => {
                // Not on enough replicas to survive a failover: given back before the answer,
                // as the next request of the same lane.
                let op = Op::Give { permits, ids };
                let purpose = Purpose::Unsynced {
                    waiter,
                    acked,
                    wanted,
                };
                self.run_on(lane, op, purpose);
            }
            (
                Purpose::Attempt(waiter),
                Outcome::Take(Ok(Take::Taken)),
                Op::Take { permits, ids, .. },
            ) if self.position(waiter).is_none() => {
                // Its waiter failed meanwhile (a stop): what it took goes back.
                let op = Op::Give { permits, ids };
                let purpose = Purpose::GiveBack {
                    reply: None,
                    permits,
                    was_lost: false,
                };
                self.run_on(lane, op, purpose);
            }
            (Purpose::Attempt(waiter), outcome, _) => {
                self.trips.free(lane);
                self.attempt_ran(waiter, outcome);
            }
            (
                Purpose::Unsynced {
                    waiter,
                    acked,
                    wanted,
                },
                outcome,
                _,
            ) => {
                self.trips.free(lane);
                self.unsynced_given_back(waiter, LockError::ReplicaSync { acked, wanted }, outcome);
            }
            (
                Purpose::GiveBack {
                    reply,
                    permits,
                    was_lost,
                },
                outcome,
                _,
            ) => {
                self.trips.free(lane);
                self.given_back(reply, (permits, was_lost), outcome);
            }
            (Purpose::Adjust(Some(reply)), outcome, _) => {
                self.trips.free(lane);
                let res = match outcome {
                    Outcome::Reply(res) => res,
                    Outcome::Take(res) => res.map(|_| 0),
                };
                self.effects.push(Effect::Done(reply, res));
            }
            (Purpose::Adjust(None), _, _) => self.trips.free(lane),
        }
    }

    /// Waiter `id`'s attempt (a take, or a latch's read) is over with `outcome`.
    fn attempt_ran(&mut self, id: WaiterId, outcome: Outcome) {
        // Its ids may be held in Redis now, should the take have run: a take with them again
        // would take its permits twice, so it goes on waiting with new ones (what the lost take
        // may hold runs out unrenewed: fewer permits for a while, never more).
        if outcome.unknown() && self.ids_may_be_held(&outcome) && !self.reissue(id) {
            self.last_try(id);
        }
        let tried = match outcome {
            Outcome::Take(Ok(Take::Taken)) => Tried::Done,
            Outcome::Take(Ok(Take::Short { free, retry_in })) => Tried::Short { free, retry_in },
            Outcome::Take(Ok(Take::Unsynced { acked, wanted })) => {
                Tried::Failed(LockError::ReplicaSync { acked, wanted })
            }
            // A latch's read: open at 0.
            Outcome::Reply(Ok(count)) if count <= 0 => Tried::Done,
            Outcome::Reply(Ok(_)) => Tried::Short {
                free: 0,
                retry_in: None,
            },
            Outcome::Take(Err(e)) | Outcome::Reply(Err(e)) => Tried::Failed(e),
        };
        let now = self.now;
        self.tried(id, tried, now);
    }

    /// The permits waiter `id`'s attempt took unsynced were given back (or not, by `outcome`):
    /// it fails with the replica-sync `error` it got.
    fn unsynced_given_back(&mut self, id: WaiterId, error: LockError, outcome: Outcome) {
        if let Outcome::Reply(Err(error)) | Outcome::Take(Err(error)) = &outcome {
            tracing::warn!(%error, "permits refused by replica sync not given back");
        }
        if self.ids_may_be_held(&outcome) {
            self.last_try(id);
        }
        let now = self.now;
        self.tried(id, Tried::Failed(error), now);
    }

    /// Gives waiter `id` new permit ids, none ever sent by this client: the generation of its
    /// ids, in the top byte of their counter half (`Services::permit_id` numbers ids below
    /// 2^56, so that byte is 0 at first), one up. `false` after 255 generations: it is then
    /// answered with the error instead.
    fn reissue(&mut self, id: WaiterId) -> bool {
        let Some(at) = self.position(id) else {
            return false;
        };
        let waiter = &mut self.waiters[at];
        let mut ids = waiter.ids.to_vec();
        let fresh = ids
            .chunks_exact_mut(16)
            .all(|one| match one[8].checked_add(1) {
                Some(generation) => {
                    one[8] = generation;
                    true
                }
                None => false,
            });
        if fresh && !ids.is_empty() {
            waiter.ids = ids.into();
        }
        fresh && !waiter.ids.is_empty()
    }

    /// Whether a request that ended with `outcome` may leave its ids held in Redis: a permit
    /// semaphore's take whose outcome stays unknown may have run, and one whose refused permits
    /// were not given back did. Its waiter cannot try again with them (the script takes free
    /// permits for ids it adds again, so they would be taken twice, the first time for good):
    /// it goes on with new ones (`reissue`), or is answered with the error.
    fn ids_may_be_held(&self, outcome: &Outcome) -> bool {
        self.kind == SyncKind::PermitSemaphore
            && matches!(outcome, Outcome::Take(Err(_)) | Outcome::Reply(Err(_)))
    }

    /// Waiter `id` stops waiting for the outcome of its attempt under way: `TimedOut`, or, when
    /// its permits were taken unsynced and are being given back, the replica-sync error they
    /// get anyway. Its round trip goes on without it.
    pub(super) fn stop_waiting(&mut self, id: WaiterId) {
        let Some(at) = self.position(id) else {
            return;
        };
        let unsynced = self.trips.unsynced(id);
        tracing::debug!(name = %self.name, "waiter answered before its attempt's outcome");
        // No outcome within the grace after its deadline: Redis did not answer its last
        // attempt (a healthy one answers in milliseconds).
        let answer = match unsynced {
            Some(error) => Answer::Failed(error),
            None => {
                let since = self.waiters[at].since;
                Answer::Failed(self.unavailable(since, self.silence()))
            }
        };
        self.answer(at, answer);
        self.unsubscribe_if_unused();
    }

    /// Waiter `id`'s outcome coming now answers it, whatever it is.
    fn last_try(&mut self, id: WaiterId) {
        if let Some(at) = self.position(id) {
            self.waiters[at].last = true;
        }
    }

    /// The resend timer of request `seq` fired: it goes again, as it was.
    pub(super) fn resend(&mut self, seq: u64) {
        if let Some(trip) = self.trips.again(seq) {
            self.effects.push(Effect::Run(trip));
        }
    }

    /// Whether round trip `seq` is under way or to be sent again (its latch is still needed).
    pub(crate) fn is_under_way(&self, seq: u64) -> bool {
        self.trips.contains(seq)
    }

    /// Runs an adjustment (set, add, drain, release without a grant, count down…) for the
    /// caller `reply`.
    pub(crate) fn adjust(&mut self, op: Op, reply: Option<ReplyId>, now: Instant) {
        self.now = now;
        self.run(op, Purpose::Adjust(reply));
    }
}
