//! The round trips of one name, as data: what is queued, the one under way (one at a time),
//! the requests whose reply never came, what waits behind them, and the holders whose count is
//! to be settled. What each trip does to the rest of the state is in `round_trips.rs` (sending)
//! and `outcomes.rs` (its outcome).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::{FxHashMap, FxHashSet};

use super::{HoldKey, Op, ReplyId, WaiterId};
use crate::error::LockError;
use crate::protocol::{Expect, FairArgs};

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
    /// after requests of it were given up unresolved, after a lease hold ended here while
    /// Redis's copy of it (set a little later, when the script ran) may still count, or after
    /// releases of its hold went unconfirmed (`Hold::unreleased`). The one door: see `settle.rs`.
    Settle {
        key: HoldKey,
    },
    /// Send again a request whose reply never came (`unsure`).
    Resend(u64),
    /// Leave the fair queue.
    Leave {
        holder: Arc<str>,
        wait: Duration,
    },
    /// Refresh the fair-queue places (`Op::FairRefresh`).
    Refresh,
    Shutdown {
        release: bool,
    },
}

impl Pending {
    /// The hold a release or a settling is for.
    pub(super) fn key(&self) -> Option<&HoldKey> {
        match self {
            Pending::Release { key, .. } | Pending::Settle { key } => Some(key),
            _ => None,
        }
    }
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

/// What a round trip's outcome needs.
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
    /// Settling a holder's count (see `Pending::Settle`): `epoch` is its hold's when it was
    /// sent, `None` when it had none here.
    Settle {
        key: HoldKey,
        epoch: Option<u64>,
    },
    Leave {
        holder: Arc<str>,
        wait: Duration,
    },
    Refresh,
    Shutdown,
}

/// The round trip under way: what its outcome needs, and for a request (an acquire, release or
/// hand-off, see [`Op::seq`]) what its [`Op`] carries beyond its flight, to send it again as it
/// was should its reply never come.
#[derive(Debug)]
pub(super) struct InFlight {
    pub flight: Flight,
    pub sent: Option<Sent>,
    /// When it was sent (a reply long in coming is Redis away: `outage.rs`).
    pub at: Instant,
}

/// What a request's [`Op`] carries beyond its [`Flight`]: kept while it is under way instead of a
/// copy of the request (its holders' ids counted again, every round trip), which
/// [`op`](Self::op) makes again from the flight in the rare case that its reply never came or
/// resolves an earlier request.
#[derive(Clone, Copy, Debug)]
pub(super) enum Sent {
    Acquire {
        ttl: Duration,
        fair: FairArgs,
        expect: Expect,
        seq: u64,
    },
    Release {
        expect: Expect,
        seq: u64,
    },
    HandOff {
        to_lease: Duration,
        expect: Expect,
        seq: u64,
    },
}

impl Sent {
    /// What `op` carries beyond its flight, when it is a request.
    pub(super) fn of(op: &Op) -> Option<Self> {
        match *op {
            Op::Acquire {
                ttl,
                fair,
                expect,
                seq,
                ..
            } => Some(Sent::Acquire {
                ttl,
                fair,
                expect,
                seq,
            }),
            Op::Release { expect, seq, .. } => Some(Sent::Release { expect, seq }),
            Op::HandOff {
                to_lease,
                expect,
                seq,
                ..
            } => Some(Sent::HandOff {
                to_lease,
                expect,
                seq,
            }),
            _ => None,
        }
    }

    /// The request's number ([`Op::seq`]).
    pub(super) fn seq(&self) -> u64 {
        match *self {
            Sent::Acquire { seq, .. } | Sent::Release { seq, .. } | Sent::HandOff { seq, .. } => {
                seq
            }
        }
    }

    /// The request as it was sent for `flight` (the flight it was sent with: an attempt's for
    /// an acquire, a release's for a release or a hand-off).
    pub(super) fn op(self, flight: &Flight) -> Option<Op> {
        match (self, flight) {
            (
                Sent::Acquire {
                    ttl,
                    fair,
                    expect,
                    seq,
                },
                Flight::Attempt { key, .. },
            ) => Some(Op::Acquire {
                kind: key.1,
                holder: key.0.clone(),
                ttl,
                fair,
                expect,
                seq,
            }),
            (Sent::Release { expect, seq }, Flight::Release(r)) => Some(Op::Release {
                kind: r.key.1,
                holder: r.key.0.clone(),
                lease: r.lease,
                expect,
                seq,
            }),
            (
                Sent::HandOff {
                    to_lease,
                    expect,
                    seq,
                },
                Flight::Release(ReleaseFlight {
                    key,
                    lease,
                    to: Some((_, to, _)),
                    ..
                }),
            ) => Some(Op::HandOff {
                kind: key.1,
                from: key.0.clone(),
                lease: *lease,
                to: to.0.clone(),
                to_lease,
                expect,
                seq,
            }),
            _ => None,
        }
    }
}

/// The round trips of the name. Invariant: one under way at most; no release or settling of a
/// holder is sent while a request of that holder is unresolved (`pump` moves it to `held_back`,
/// and it is queued again once none is).
#[derive(Debug, Default)]
pub(super) struct Trips {
    /// Round trips waiting their turn, in order.
    todo: VecDeque<Pending>,
    under_way: Option<InFlight>,
    /// Requests whose reply never came, by number ([`Op::seq`]), until Redis answers one of
    /// their resends.
    unsure: FxHashMap<u64, Unsure>,
    /// Releases and settlings held back behind an unresolved request of their holder.
    held_back: Vec<Pending>,
    /// Holders whose count in Redis may be above what this actor grants (a request given up
    /// unresolved, a lease ended here a little before Redis's copy): settled by count once none
    /// of their requests is unresolved; they take nothing new until then.
    abandoned: FxHashSet<HoldKey>,
    /// Those of `abandoned` whose lease ran out here: the hold ended without a release, so the
    /// name's lock-delay ([`Config::lock_delay`](crate::Config::lock_delay)) stays when its
    /// settling releases Redis's copy (which outlives the lease here by a few milliseconds).
    lapsed: FxHashSet<HoldKey>,
    /// Consecutive failed settlings of a holder's count, for the backoff of the next.
    settle_failures: FxHashMap<HoldKey, u32>,
    /// The last request number given.
    seq: u64,
}

impl Trips {
    /// Queues `pending` last.
    pub(super) fn queue(&mut self, pending: Pending) {
        self.todo.push_back(pending);
    }

    /// Queues `pending` first: it is sent next.
    pub(super) fn queue_first(&mut self, pending: Pending) {
        self.todo.push_front(pending);
    }

    /// The next round trip to send, when none is under way. A release or settling of a holder
    /// with an unresolved request is held back behind it (see [`Trips::release_held_back`]).
    pub(super) fn next_to_send(&mut self) -> Option<Pending> {
        if self.under_way.is_some() {
            return None;
        }
        while let Some(next) = self.todo.pop_front() {
            if next.key().is_some_and(|key| self.is_unsure(key)) {
                self.held_back.push(next);
                continue;
            }
            return Some(next);
        }
        None
    }

    /// `flight` was sent.
    pub(super) fn sent(&mut self, flight: InFlight) {
        self.under_way = Some(flight);
    }

    /// The round trip under way, if one is.
    pub(super) fn under_way(&self) -> Option<&InFlight> {
        self.under_way.as_ref()
    }

    /// The round trip under way finished: what its outcome needs.
    pub(super) fn landed(&mut self) -> Option<InFlight> {
        self.under_way.take()
    }

    /// Empties the queue, returning what it held.
    pub(super) fn take_queue(&mut self) -> VecDeque<Pending> {
        std::mem::take(&mut self.todo)
    }

    /// Stopping: takes the queued settlings out of the queue, returning their holders.
    pub(super) fn take_queued_settles(&mut self) -> Vec<HoldKey> {
        let mut keys = Vec::new();
        self.todo.retain(|p| match p {
            Pending::Settle { key } => {
                keys.push(key.clone());
                false
            }
            _ => true,
        });
        keys
    }

    /// Empties what was held back, returning it.
    pub(super) fn take_held_back(&mut self) -> Vec<Pending> {
        std::mem::take(&mut self.held_back)
    }

    /// Request `seq`, if its reply never came and it is not resolved yet.
    pub(super) fn unsure(&self, seq: u64) -> Option<&Unsure> {
        self.unsure.get(&seq)
    }

    /// Request `seq`, to take its flight for a resend.
    pub(super) fn unsure_mut(&mut self, seq: u64) -> Option<&mut Unsure> {
        self.unsure.get_mut(&seq)
    }

    /// The holders an unresolved fair attempt may have queued, with their places' waits.
    pub(super) fn unsure_places(&self) -> Vec<(Arc<str>, Duration)> {
        self.unsure
            .values()
            .filter_map(|u| match &u.flight {
                Some(Flight::Attempt {
                    key,
                    place: Some(wait),
                    ..
                }) => Some((key.0.clone(), *wait)),
                _ => None,
            })
            .collect()
    }

    /// Records request `seq` as unsure (again).
    pub(super) fn record_unsure(&mut self, seq: u64, unsure: Unsure) {
        self.unsure.insert(seq, unsure);
    }

    /// Request `seq` is resolved or given up: no longer unsure. Returns it, if it was.
    pub(super) fn end_unsure(&mut self, seq: u64) -> Option<Unsure> {
        self.unsure.remove(&seq)
    }

    /// Empties the unsure requests, returning them by number.
    pub(super) fn take_unsure(&mut self) -> FxHashMap<u64, Unsure> {
        std::mem::take(&mut self.unsure)
    }

    /// `key`'s count in Redis may be above what this actor grants: it is to be settled.
    pub(super) fn abandon(&mut self, key: &HoldKey) {
        self.abandoned.insert(key.clone());
    }

    /// `key`'s lease ran out here: its count is to be settled, keeping the lock-delay.
    pub(super) fn lapse(&mut self, key: &HoldKey) {
        self.abandoned.insert(key.clone());
        self.lapsed.insert(key.clone());
    }

    /// Whether `key`'s count is to be settled.
    pub(super) fn is_abandoned(&self, key: &HoldKey) -> bool {
        self.abandoned.contains(key)
    }

    /// Whether `key`'s lease ran out here (see [`Trips::lapse`]).
    pub(super) fn is_lapsed(&self, key: &HoldKey) -> bool {
        self.lapsed.contains(key)
    }

    /// The holders whose lease ran out here and whose count is still to be settled.
    pub(super) fn lapsed(&self) -> impl Iterator<Item = &HoldKey> {
        self.lapsed.iter()
    }

    /// `key`'s count is what this actor grants again. Returns whether it was to be settled.
    pub(super) fn settled(&mut self, key: &HoldKey) -> bool {
        self.lapsed.remove(key);
        self.settle_over(key);
        self.abandoned.remove(key)
    }

    /// A new request number.
    pub(super) fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Whether a round trip matching `which` is queued.
    pub(super) fn is_queued(&self, which: impl Fn(&Pending) -> bool) -> bool {
        self.todo.iter().any(which)
    }

    /// Whether a release of one of `key`'s holds is queued (or held back behind an unresolved
    /// request of its holder).
    pub(super) fn releasing(&self, key: &HoldKey) -> bool {
        let release = |p: &Pending| matches!(p, Pending::Release { key: k, .. } if k == key);
        self.is_queued(release) || self.held_back.iter().any(release)
    }

    /// Queues an attempt for waiter `id`, unless one is queued already.
    pub(super) fn queue_attempt(&mut self, id: WaiterId) {
        if !self.is_queued(|p| matches!(p, Pending::Attempt(x) if *x == id)) {
            self.todo.push_back(Pending::Attempt(id));
        }
    }

    /// Whether a settling of `key`'s count is queued.
    pub(super) fn settle_queued(&self, key: &HoldKey) -> bool {
        self.is_queued(|p| matches!(p, Pending::Settle { key: k } if k == key))
    }

    /// Whether waiter `id`'s attempt is queued (not yet under way).
    pub(super) fn attempt_queued(&self, id: WaiterId) -> bool {
        self.is_queued(|p| matches!(p, Pending::Attempt(x) if *x == id))
    }

    /// The waiter whose attempt is under way.
    pub(super) fn attempting(&self) -> Option<WaiterId> {
        match self.under_way {
            Some(InFlight {
                flight: Flight::Attempt { id, .. },
                ..
            }) => Some(id),
            _ => None,
        }
    }

    /// Whether a release of `key`'s hold of `epoch` is under way or unresolved: Redis may have
    /// run it, so the hold found gone meanwhile may be this release's own doing.
    pub(super) fn release_sent(&self, key: &HoldKey, epoch: u64) -> bool {
        let this = |flight: &Flight| matches!(flight, Flight::Release(r) if r.key == *key && r.epoch == epoch);
        self.under_way.as_ref().is_some_and(|f| this(&f.flight))
            || self
                .unsure
                .values()
                .any(|u| u.flight.as_ref().is_some_and(this))
    }

    /// Whether a request of `key` is unresolved. Until none is, no other request of that holder
    /// runs: each carries the holder's count before it, and only a count Redis confirmed is
    /// exact (a request sent again recognises whether it ran from the count it finds, and that
    /// count is all that tells the two apart).
    pub(super) fn is_unsure(&self, key: &HoldKey) -> bool {
        // Mostly empty: no walk of the table then (every release asks).
        !self.unsure.is_empty() && self.unsure.values().any(|u| u.op.keys().any(|k| k == *key))
    }

    /// Why `key`'s holder can take nothing new now, if it cannot.
    pub(super) fn blocked(&self, key: &HoldKey) -> Option<Blocked> {
        let unresolved = self
            .unsure
            .values()
            .find(|u| u.op.keys().any(|k| k == *key))
            .map(|u| Blocked::Unresolved(u.error.clone()));
        unresolved.or_else(|| self.abandoned.contains(key).then_some(Blocked::Settling))
    }

    /// Moves what was held back behind `key`'s unresolved requests to the queue.
    pub(super) fn release_held_back(&mut self, key: &HoldKey) {
        let (back, keep): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut self.held_back)
            .into_iter()
            .partition(|p| p.key() == Some(key));
        self.held_back = keep;
        self.todo.extend(back);
    }

    /// How many settlings of `key`'s count failed in a row.
    pub(super) fn settle_failures(&self, key: &HoldKey) -> u32 {
        self.settle_failures.get(key).copied().unwrap_or(0)
    }

    /// One more settling of `key`'s count failed.
    pub(super) fn settle_failed(&mut self, key: &HoldKey) {
        let failures = self.settle_failures.entry(key.clone()).or_default();
        *failures = failures.saturating_add(1);
    }

    /// `key`'s count needs no settling any more.
    pub(super) fn settle_over(&mut self, key: &HoldKey) {
        // Mostly empty: no hash of the holder's id then.
        if !self.settle_failures.is_empty() {
            self.settle_failures.remove(key);
        }
    }

    /// Stopping: the holders whose count was to be settled, which none is any more.
    pub(super) fn take_abandoned(&mut self) -> FxHashSet<HoldKey> {
        self.settle_failures.clear();
        self.lapsed.clear();
        std::mem::take(&mut self.abandoned)
    }

    /// Nothing queued, under way, unresolved, held back or to be settled.
    pub(super) fn is_empty(&self) -> bool {
        self.is_idle() && self.held_back.is_empty()
    }

    /// Nothing queued, under way, unresolved or to be settled.
    pub(super) fn is_idle(&self) -> bool {
        self.todo.is_empty()
            && self.under_way.is_none()
            && self.unsure.is_empty()
            && self.abandoned.is_empty()
    }
}

/// One request under resolution.
#[derive(Debug)]
pub(super) struct Unsure {
    /// The request, sent again as it is.
    pub op: Op,
    /// What its outcome needs; `None` while it is under way again.
    pub flight: Option<Flight>,
    /// When its first reply went missing: the resolution gives up `horizon` later.
    pub since: Instant,
    pub failures: u32,
    /// Why its reply is missing: what a single attempt of the same holder fails with meanwhile.
    pub error: LockError,
}

/// Why a holder can take nothing new for now.
#[derive(Debug)]
pub(super) enum Blocked {
    /// A request of it went unanswered and is being sent again: it failed with this.
    Unresolved(LockError),
    /// Its count in Redis is being settled (see [`Trips::abandoned`]).
    Settling,
}
