//! The synchronizer actor: one per semaphore, permit semaphore or count-down latch name in this
//! process, for as long as that name is busy here. Its [`SyncState`] holds every rule of the
//! name (waiters, permits held by epoch, leases, give-backs, hand-offs, resends, the stop); the
//! per-name shell (`actors::shell`) owns it, feeds it the events both families share and
//! carries out its effects. What is a synchronizer's own is here: taking its requests in
//! (permits, a latch's opening, give-backs, adjustments), running its round trips
//! (`round_trips`: each behind its request latch) and answering with [`Permits`]. It stops
//! when it has been idle a while, as every per-name actor does (`shell::linger`).

mod permits;
mod round_trips;

pub use permits::{AcquirePermits, Permits, ReleasePermits};

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::WeakRecipient;
use actix::dev::{MessageResponse, OneshotSender};
use actix::prelude::*;
use rustc_hash::FxHashMap;

use crate::actors::messages::*;
use crate::actors::name::WaiterId;
use crate::actors::name::effect::ReplyId;
use crate::actors::services::Services;
use crate::actors::shell::crowd::{Caller, Sender};
use crate::actors::shell::reply::{Expecting, Taken, hand_or_refuse, take_in};
use crate::actors::shell::{self, PerName, Shell};
use crate::actors::sync_state::{Answer, Op, Settings, SyncState, Trip, Want};
use crate::error::{LockError, Owner};
use crate::metrics::Series;
use crate::protocol::{SyncKind, SyncLatch};

type PermitsTx = OneshotSender<Result<Option<Permits>, LockError>>;
type LatchTx = OneshotSender<Result<bool, LockError>>;
type DoneTx = OneshotSender<Result<(), LockError>>;
type AdjustTx = OneshotSender<Result<i64, LockError>>;

/// How a waiter is answered: with permits, or with whether a latch opened.
pub(crate) enum SyncTx {
    Permits(PermitsTx),
    Latch(LatchTx),
}

impl Sender for SyncTx {
    fn poll_closed(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        match self {
            SyncTx::Permits(tx) => tx.poll_closed(cx),
            SyncTx::Latch(tx) => tx.poll_closed(cx),
        }
    }

    fn is_closed(&self) -> bool {
        match self {
            SyncTx::Permits(tx) => tx.is_closed(),
            SyncTx::Latch(tx) => tx.is_closed(),
        }
    }
}

/// Where the replies of give-backs and adjustments go, by number.
pub(crate) enum Replying {
    Done(DoneTx),
    Adjust(AdjustTx),
}

/// The actor of one synchronizer name. Reach it through
/// [`LockManager::sync_actor`](crate::LockManager::sync_actor) and send it [`AcquirePermits`],
/// [`ReleasePermits`], [`AwaitLatch`] and [`Adjust`].
pub struct SyncActor {
    kind: SyncKind,
    /// The first part of this actor's latch keys: its manager's id and its kind.
    latch_prefix: String,
    /// The request latch of each round trip under way, by number: made at its first run, reused
    /// when it is sent again.
    latches: FxHashMap<u64, SyncLatch>,
    shell: Shell<Self>,
}

impl SyncActor {
    pub(crate) fn new(
        id: u64,
        kind: SyncKind,
        name: Arc<str>,
        svc: Services,
        registry: WeakRecipient<Forget>,
    ) -> Self {
        let settings = Settings::of(&svc.config);
        let state = SyncState::new(kind, name.clone(), settings, Instant::now());
        Self {
            latch_prefix: format!("{}:{}", svc.client_id.simple(), kind.letter()),
            latches: FxHashMap::default(),
            kind,
            shell: Shell::new((id, NameKind::Sync(kind), name), svc, registry, state),
        }
    }

    /// Takes a waiter's request in: `permits` (none for a latch), for `lease`, waiting `wait`.
    fn request(&mut self, permits: u32, lease: Option<Duration>, wait: Wait) -> Expecting {
        let id = self.shell.state.next_waiter();
        let ids: Arc<[u8]> = if self.kind == SyncKind::PermitSemaphore {
            (0..permits)
                .flat_map(|_| self.shell.svc.permit_id())
                .collect()
        } else {
            Arc::from([])
        };
        self.shell.coming(id, self.kind.label());
        let want = Want {
            permits,
            lease,
            ids,
        };
        self.shell.state.request(id, want, wait, Instant::now());
        Expecting::Waiter(id)
    }
}

shell::per_name_handlers!(SyncActor);

impl PerName for SyncActor {
    type State = SyncState;
    type Tx = SyncTx;
    type Reply = Replying;
    /// No record: a synchronizer's waits are not in the waits-for graph, since any one release
    /// of permits (or a count down) ends its wait, so no holder alone is what it waits for.
    type Witness = ();
    const SERIES: Series = Series::Syncs;

    fn shell(&mut self) -> &mut Shell<Self> {
        &mut self.shell
    }

    fn run(&mut self, trip: Trip, ctx: &mut Context<Self>) {
        self.run_trip(trip, ctx);
    }

    /// Permits that reach nobody come back and their drop gives them back: a grant's signal is
    /// made even when its caller is gone.
    fn answer(
        &mut self,
        _: WaiterId,
        answer: Answer,
        caller: Option<Caller<SyncTx>>,
        _: Option<Owner>,
        ctx: &mut Context<Self>,
    ) -> bool {
        let opened = matches!(answer, Answer::Done { .. });
        let reply = match answer {
            Answer::Done {
                waited,
                grant: Some(grant),
            } => {
                let counted = (self.kind.label(), f64::from(grant.permits));
                let hold = (self.shell).receipt(grant.epoch, counted, grant.confirmed, waited, ctx);
                Ok(Some(Permits {
                    hold,
                    kind: self.kind,
                    permits: grant.permits,
                    ids: grant.ids.to_vec(),
                }))
            }
            Answer::Done { grant: None, .. } | Answer::TimedOut => Ok(None),
            Answer::Failed(e) => Err(e),
        };
        match caller.and_then(Caller::take) {
            Some(SyncTx::Latch(tx)) => drop(tx.send(reply.map(|_| opened))),
            // Permits nobody receives are dropped: given back.
            Some(SyncTx::Permits(tx)) => drop(tx.send(reply)),
            None => {}
        }
        // Permits or a latch nobody took tell the state nothing here (dropped permits are
        // given back by a message).
        false
    }

    fn reply(tx: Replying, res: Result<i64, LockError>) {
        match tx {
            // Numbers are one sequence: an adjustment's number never goes to a give-back's
            // caller, nor a give-back's 0 to an adjustment's.
            Replying::Done(tx) => drop(tx.send(res.map(drop))),
            Replying::Adjust(tx) => drop(tx.send(res)),
        }
    }
}

/// The reply to an [`AcquirePermits`] or an [`AwaitLatch`]: delivered when it is done, the wait
/// ends or it fails. The handler has taken the request in (or refused it); this leaves the
/// caller's reply sender for the actor, so nothing blocks the actor meanwhile.
pub struct SyncReply<M>(Result<Taken<SyncActor>, LockError>, PhantomData<M>);

impl Handler<AcquirePermits> for SyncActor {
    type Result = SyncReply<AcquirePermits>;

    fn handle(&mut self, msg: AcquirePermits, ctx: &mut Context<Self>) -> Self::Result {
        let taken = (self.shell.state.admit_take(msg.permits, msg.lease)).map(|()| {
            let take = |act: &mut Self| act.request(msg.permits, msg.lease, msg.wait);
            take_in(self, take, ctx)
        });
        SyncReply(taken, PhantomData)
    }
}

impl MessageResponse<SyncActor, AcquirePermits> for SyncReply<AcquirePermits> {
    fn handle(self, ctx: &mut Context<SyncActor>, tx: Option<PermitsTx>) {
        hand_or_refuse(self.0, tx, |t, tx| {
            t.hand_waiter(ctx, tx.map(SyncTx::Permits))
        });
    }
}

impl Handler<AwaitLatch> for SyncActor {
    type Result = SyncReply<AwaitLatch>;

    fn handle(&mut self, msg: AwaitLatch, ctx: &mut Context<Self>) -> Self::Result {
        let taken = (self.shell.state.serving())
            .map(|()| take_in(self, |act| act.request(0, None, msg.wait), ctx));
        SyncReply(taken, PhantomData)
    }
}

impl MessageResponse<SyncActor, AwaitLatch> for SyncReply<AwaitLatch> {
    fn handle(self, ctx: &mut Context<SyncActor>, tx: Option<LatchTx>) {
        hand_or_refuse(self.0, tx, |t, tx| {
            t.hand_waiter(ctx, tx.map(SyncTx::Latch))
        });
    }
}

/// The reply to a [`ReleasePermits`] (`T`: `()`) or an [`Adjust`] (`T`: `i64`): delivered once
/// Redis answered.
pub struct SyncDone<T>(Result<Taken<SyncActor>, LockError>, PhantomData<T>);

impl SyncActor {
    /// Takes a give-back or an adjustment in: `take` tells the state, with its reply's number.
    fn take_reply(
        &mut self,
        take: impl FnOnce(&mut SyncState, ReplyId),
        ctx: &mut Context<Self>,
    ) -> Taken<Self> {
        let take = |act: &mut Self| {
            let id = act.shell.next_reply();
            take(&mut act.shell.state, id);
            Expecting::Reply(id)
        };
        take_in(self, take, ctx)
    }

    /// Gives back the permits of `epoch`. Waiters whose callers left just before go first, as
    /// before a lock's release: the permits may be handed to a waiter at once.
    fn give_back(&mut self, epoch: u64, ctx: &mut Context<Self>) -> SyncDone<()> {
        shell::gone_first(self, ctx);
        let taken = self.take_reply(|s, id| s.release(epoch, Some(id), Instant::now()), ctx);
        SyncDone(Ok(taken), PhantomData)
    }

    /// Runs an adjustment (or a release of ids) once the state admitted it.
    fn adjust(&mut self, op: Op, ctx: &mut Context<Self>) -> SyncDone<i64> {
        let taken = (self.shell.state.admit_op(&op))
            .map(|()| self.take_reply(|s, id| s.adjust(op, Some(id), Instant::now()), ctx));
        SyncDone(taken, PhantomData)
    }
}

impl Handler<ReleasePermits> for SyncActor {
    type Result = SyncDone<()>;

    fn handle(&mut self, msg: ReleasePermits, ctx: &mut Context<Self>) -> Self::Result {
        let ReleasePermits(mut permits) = msg;
        // Still armed: dropped here, it gives its permits back through its own actor.
        let why =
            |name: &str| format!("permits of {name:?} were sent to another synchronizer's actor");
        if let Err(e) = permits.hold.sent_back_to(self.shell.id, why) {
            return SyncDone(Err(e), PhantomData);
        }
        permits.hold.armed = false;
        self.give_back(permits.hold.epoch, ctx)
    }
}

impl Handler<GiveBack> for SyncActor {
    type Result = SyncDone<()>;

    /// Dropped permits' give-back: nobody waits for its outcome.
    fn handle(&mut self, msg: GiveBack, ctx: &mut Context<Self>) -> Self::Result {
        self.give_back(msg.epoch, ctx)
    }
}

impl<M> MessageResponse<SyncActor, M> for SyncDone<()>
where
    M: Message<Result = Result<(), LockError>>,
{
    fn handle(self, ctx: &mut Context<SyncActor>, tx: Option<DoneTx>) {
        hand_or_refuse(self.0, tx, |t, tx| {
            t.hand_reply(ctx, tx.map(Replying::Done))
        });
    }
}

impl Handler<Adjust> for SyncActor {
    type Result = SyncDone<i64>;

    fn handle(&mut self, Adjust(op): Adjust, ctx: &mut Context<Self>) -> Self::Result {
        self.adjust(Op::Adjust(op), ctx)
    }
}

impl Handler<ReleaseIds> for SyncActor {
    type Result = SyncDone<i64>;

    fn handle(&mut self, ReleaseIds(ids): ReleaseIds, ctx: &mut Context<Self>) -> Self::Result {
        self.adjust(Op::ReleaseIds(ids), ctx)
    }
}

impl<M> MessageResponse<SyncActor, M> for SyncDone<i64>
where
    M: Message<Result = Result<i64, LockError>>,
{
    fn handle(self, ctx: &mut Context<SyncActor>, tx: Option<AdjustTx>) {
        hand_or_refuse(self.0, tx, |t, tx| {
            t.hand_reply(ctx, tx.map(Replying::Adjust))
        });
    }
}
