//! The synchronizer actor: one per semaphore, permit semaphore or count-down latch name in this
//! process, for as long as that name is busy here. It is the shell of a [`SyncState`], which
//! holds every rule of the name (waiters, permits held by epoch, leases, give-backs, hand-offs,
//! resends, the stop), as a lock actor is of its `LockState`: each message, round trip's
//! outcome, timer or channel message becomes an event, and the effects that come back are
//! carried out by the per-name shell (`actors::shell`), shared with the lock actor. What is a
//! synchronizer's own is here: taking its requests in (permits, a latch's opening, give-backs,
//! adjustments), running its round trips (`round_trips`: each behind its request latch) and
//! answering with [`Permits`]. It stops when it has been idle a while, as every per-name actor
//! does (`shell::linger`).

mod permits;
mod round_trips;

pub use permits::{AcquirePermits, Permits, ReleasePermits};

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Instant;

use actix::WeakRecipient;
use actix::dev::{MessageResponse, OneshotSender};
use actix::prelude::*;
use rustc_hash::FxHashMap;

use crate::actors::lost::LostSignal;
use crate::actors::messages::*;
use crate::actors::name::WaiterId;
use crate::actors::name::effect::ReplyId;
use crate::actors::services::Services;
use crate::actors::shell::crowd::{Caller, Sender};
use crate::actors::shell::reply::{Expecting, Taken, take_in};
use crate::actors::shell::{self, PerName, Shell};
use crate::actors::sync_state::{
    Answer, Effect, Op, Own, Settings, SyncState, Syncs, Timer, Trip, Want,
};
use crate::error::{LockError, Owner};
use crate::metrics::Series;
use crate::protocol::{SyncKind, SyncLatch, hex};

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
    registry: WeakRecipient<ForgetSync>,
    /// The first part of this actor's latch keys: its manager's id and its kind.
    latch_prefix: String,
    /// The request latch of each round trip under way, by number: made at its first run, reused
    /// when it is sent again.
    latches: FxHashMap<u64, SyncLatch>,
    next_waiter: WaiterId,
    state: SyncState,
    shell: Shell<Self>,
}

impl SyncActor {
    pub(crate) fn new(
        id: u64,
        kind: SyncKind,
        name: Arc<str>,
        svc: Services,
        registry: WeakRecipient<ForgetSync>,
    ) -> Self {
        let settings = Settings {
            watchdog_timeout: svc.config.get_watchdog_timeout(),
            // A hand-off grants without a take, so without the take's replica sync.
            hand_off: svc.config.get_sync_replicas().is_none(),
            unavailable_after: svc.config.get_unavailable_after(),
        };
        Self {
            latch_prefix: format!("{}:{}", svc.client_id.simple(), kind.letter()),
            latches: FxHashMap::default(),
            state: SyncState::new(kind, name.clone(), settings, Instant::now()),
            kind,
            registry,
            next_waiter: 0,
            shell: Shell::new(id, name, svc),
        }
    }

    /// Takes a waiter's request in: `permits` (none for a latch), for `lease`, waiting `wait`.
    fn request(
        &mut self,
        permits: u32,
        lease: Option<std::time::Duration>,
        wait: Wait,
    ) -> Expecting {
        self.next_waiter += 1;
        let id = self.next_waiter;
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
        self.state.request(id, want, wait, Instant::now());
        Expecting::Waiter(id)
    }
}

/// Permit ids as the Watchdog carries them: hex, one per 16 bytes, joined by commas.
fn hex_ids(ids: &[u8]) -> String {
    ids.chunks(16).map(hex).collect::<Vec<_>>().join(",")
}

impl PerName for SyncActor {
    type Family = Syncs;
    type Tx = SyncTx;
    type Reply = Replying;
    const SERIES: Series = Series::Syncs;

    fn shell(&mut self) -> &mut Shell<Self> {
        &mut self.shell
    }

    fn shell_ref(&self) -> &Shell<Self> {
        &self.shell
    }

    fn drain(&mut self, out: &mut Vec<Effect>) {
        self.state.drain_into(out);
    }

    fn fired(&mut self, timer: Timer, now: Instant) {
        self.state.fired(timer, now);
    }

    fn subscribed(&mut self, _: &str, ok: bool, now: Instant) {
        self.state.subscribed(ok, now);
    }

    fn caller_gone(&mut self, id: WaiterId, now: Instant) -> bool {
        self.state.caller_gone(id, now);
        !self.state.has(id)
    }

    fn retire(&mut self) {}

    fn abandon(&mut self) {
        self.state.abandon();
    }

    fn forget(&self) {
        if let Some(registry) = self.registry.upgrade() {
            registry.do_send(ForgetSync {
                kind: self.kind,
                name: self.shell.name.clone(),
                id: self.shell.id,
            });
        }
        tracing::trace!(name = %self.shell.name, id = self.shell.id, "synchronizer actor stopped");
    }

    fn run(&mut self, trip: Trip, ctx: &mut Context<Self>) {
        self.run_trip(trip, ctx);
    }

    fn outcome(&self, answer: &Answer) -> &'static str {
        match (answer, self.kind) {
            (Answer::Done { .. }, SyncKind::CountDownLatch) => "opened",
            (Answer::Done { .. }, _) => "acquired",
            (Answer::TimedOut, _) => "timed_out",
            (Answer::Failed(crate::error::LockError::Unavailable { .. }), _) => "unavailable",
            (Answer::Failed(_), _) => "failed",
        }
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
    ) {
        let opened = matches!(answer, Answer::Done { .. });
        let reply = match answer {
            Answer::Done {
                waited,
                grant: Some(grant),
            } => {
                let signal =
                    self.shell
                        .signal(grant.epoch, self.kind.label(), f64::from(grant.permits));
                // A plain semaphore's permits never expire: their validity stays unconfirmed.
                if let Some((sent, ttl)) = grant.confirmed {
                    signal.validity.confirm(sent, ttl);
                }
                let lost = LostSignal::new(signal.lost.subscribe(), &signal.validity);
                Ok(Some(Permits {
                    actor: self.shell.link(ctx),
                    actor_id: self.shell.id,
                    name: self.shell.name.clone(),
                    kind: self.kind,
                    permits: grant.permits,
                    ids: grant.ids.to_vec(),
                    epoch: grant.epoch,
                    lost,
                    waited,
                    armed: true,
                }))
            }
            Answer::Done { grant: None, .. } | Answer::TimedOut => Ok(None),
            Answer::Failed(e) => Err(e),
        };
        match caller.and_then(Caller::take) {
            Some(SyncTx::Latch(tx)) => {
                let _ = tx.send(reply.map(|_| opened));
            }
            Some(SyncTx::Permits(tx)) => {
                let _ = tx.send(reply); // a grant nobody receives is dropped: given back
            }
            None => {}
        }
    }

    /// Not in the waits-for graph: any one release of permits (or a count down) ends a
    /// synchronizer's wait, so no holder alone is what it waits for.
    fn asks(_: &mut Context<Self>) -> Option<crate::actors::deadlock::Asks> {
        None
    }

    fn own(&mut self, Own::AdjustDone(id, res): Own, _: &mut Context<Self>) {
        if let Some(Replying::Adjust(tx)) = self.shell.replies.remove(&id) {
            let _ = tx.send(res);
        }
    }

    fn own_reply(Own::AdjustDone(id, _): &Own) -> Option<ReplyId> {
        Some(*id)
    }

    fn renewal(&self, ids: &Arc<[u8]>) -> (Arc<str>, Renewal) {
        (hex_ids(ids).into(), Renewal::Permits)
    }

    fn reply(tx: Replying, res: Result<(), LockError>) {
        match tx {
            Replying::Done(tx) => drop(tx.send(res)),
            // Numbers are one sequence: a give-back's outcome never goes to an adjustment's
            // caller; only a stop's refusal does.
            Replying::Adjust(tx) => drop(tx.send(res.map(|()| 0))),
        }
    }
}

impl Actor for SyncActor {
    type Context = Context<Self>;

    fn stopped(&mut self, ctx: &mut Self::Context) {
        shell::stopped(self, ctx);
    }
}

/// The reply to an [`AcquirePermits`] or an [`AwaitLatch`]: delivered when it is done, the wait
/// ends or it fails. The handler has taken the request in; this leaves the caller's reply
/// sender for the actor, so nothing blocks the actor meanwhile.
pub struct SyncReply<M>(Result<Taken<SyncActor>, LockError>, PhantomData<M>);

impl Handler<AcquirePermits> for SyncActor {
    type Result = SyncReply<AcquirePermits>;

    fn handle(&mut self, msg: AcquirePermits, ctx: &mut Context<Self>) -> Self::Result {
        let taken = msg
            .check()
            .and_then(|()| self.refuse_when_stopping())
            .map(|()| {
                take_in(
                    self,
                    |act| act.request(msg.permits, msg.lease, msg.wait),
                    ctx,
                )
            });
        SyncReply(taken, PhantomData)
    }
}

impl MessageResponse<SyncActor, AcquirePermits> for SyncReply<AcquirePermits> {
    fn handle(self, ctx: &mut Context<SyncActor>, tx: Option<PermitsTx>) {
        match self.0 {
            Ok(taken) => taken.hand_waiter(ctx, tx.map(SyncTx::Permits)),
            Err(refused) => {
                if let Some(tx) = tx {
                    let _ = tx.send(Err(refused));
                }
            }
        }
    }
}

impl AcquirePermits {
    fn check(&self) -> Result<(), LockError> {
        if self.permits == 0 {
            return Err(LockError::invalid("permits", "must be at least 1"));
        }
        if self.lease.is_some_and(|l| l.is_zero()) {
            return Err(LockError::invalid("lease", "must be at least 1 ms"));
        }
        Ok(())
    }
}

impl SyncActor {
    /// Nothing new is served once a stop was asked for.
    fn refuse_when_stopping(&self) -> Result<(), LockError> {
        if self.state.is_stopping() {
            return Err(LockError::Shutdown);
        }
        Ok(())
    }

    /// Takes a give-back or an adjustment in: `take` tells the state, with its reply's number.
    fn take_reply(
        &mut self,
        take: impl FnOnce(&mut Self, ReplyId),
        ctx: &mut Context<Self>,
    ) -> Taken<Self> {
        take_in(
            self,
            |act| {
                let id = act.shell.next_reply();
                take(act, id);
                Expecting::Reply(id)
            },
            ctx,
        )
    }
}

impl Handler<AwaitLatch> for SyncActor {
    type Result = SyncReply<AwaitLatch>;

    fn handle(&mut self, msg: AwaitLatch, ctx: &mut Context<Self>) -> Self::Result {
        let taken = self
            .refuse_when_stopping()
            .map(|()| take_in(self, |act| act.request(0, None, msg.wait), ctx));
        SyncReply(taken, PhantomData)
    }
}

impl MessageResponse<SyncActor, AwaitLatch> for SyncReply<AwaitLatch> {
    fn handle(self, ctx: &mut Context<SyncActor>, tx: Option<LatchTx>) {
        match self.0 {
            Ok(taken) => taken.hand_waiter(ctx, tx.map(SyncTx::Latch)),
            Err(refused) => {
                if let Some(tx) = tx {
                    let _ = tx.send(Err(refused));
                }
            }
        }
    }
}

/// The reply to a [`ReleasePermits`] (`T`: `()`) or an [`Adjust`] (`T`: `i64`): delivered once
/// Redis answered.
pub struct SyncDone<T>(Result<Taken<SyncActor>, LockError>, PhantomData<T>);

impl Handler<ReleasePermits> for SyncActor {
    type Result = SyncDone<()>;

    fn handle(
        &mut self,
        ReleasePermits(mut permits): ReleasePermits,
        ctx: &mut Context<Self>,
    ) -> Self::Result {
        if permits.actor_id != self.shell.id {
            // Still armed: dropped here, it gives its permits back through its own actor.
            return SyncDone(
                Err(LockError::invalid(
                    "release",
                    format!(
                        "permits of {:?} were sent to another synchronizer's actor",
                        permits.name
                    ),
                )),
                PhantomData,
            );
        }
        permits.armed = false;
        let epoch = permits.epoch;
        let taken = self.take_reply(
            |act, id| act.state.release(epoch, Some(id), Instant::now()),
            ctx,
        );
        SyncDone(Ok(taken), PhantomData)
    }
}

impl Handler<GiveBack> for SyncActor {
    type Result = SyncDone<()>;

    fn handle(&mut self, msg: GiveBack, ctx: &mut Context<Self>) -> Self::Result {
        let taken = self.take_reply(
            |act, id| act.state.release(msg.epoch, Some(id), Instant::now()),
            ctx,
        );
        SyncDone(Ok(taken), PhantomData)
    }
}

impl<M> MessageResponse<SyncActor, M> for SyncDone<()>
where
    M: Message<Result = Result<(), LockError>>,
{
    fn handle(self, ctx: &mut Context<SyncActor>, tx: Option<DoneTx>) {
        match self.0 {
            Ok(taken) => taken.hand_reply(ctx, tx.map(Replying::Done)),
            Err(refused) => {
                if let Some(tx) = tx {
                    let _ = tx.send(Err(refused));
                }
            }
        }
    }
}

/// Permit semaphore: give back these permits (16-byte ids, concatenated) all at once, or none
/// when one is not held. Replies how many were given back (0: none).
#[derive(Clone, Debug, Message)]
#[rtype(result = "Result<i64, LockError>")]
pub struct ReleaseIds(pub Arc<[u8]>);

impl SyncActor {
    /// Runs an adjustment (or a release of ids) once it passed its checks.
    fn adjust(&mut self, op: Result<Op, LockError>, ctx: &mut Context<Self>) -> SyncDone<i64> {
        let taken = op.and_then(|op| {
            self.refuse_when_stopping()?;
            Ok(self.take_reply(
                |act, id| act.state.adjust(op, Some(id), Instant::now()),
                ctx,
            ))
        });
        SyncDone(taken, PhantomData)
    }
}

impl Handler<Adjust> for SyncActor {
    type Result = SyncDone<i64>;

    fn handle(&mut self, Adjust(op): Adjust, ctx: &mut Context<Self>) -> Self::Result {
        let op = op.check(self.kind).map(|()| Op::Adjust(op));
        self.adjust(op, ctx)
    }
}

impl Handler<ReleaseIds> for SyncActor {
    type Result = SyncDone<i64>;

    fn handle(&mut self, ReleaseIds(ids): ReleaseIds, ctx: &mut Context<Self>) -> Self::Result {
        let op = if self.kind != SyncKind::PermitSemaphore {
            Err(LockError::invalid(
                "operation",
                format!("a release of ids does not apply to a {}", self.kind.label()),
            ))
        } else if ids.is_empty() || ids.len() % 16 != 0 {
            Err(LockError::invalid("ids", "at least one id of 16 bytes"))
        } else {
            Ok(Op::ReleaseIds(ids))
        };
        self.adjust(op, ctx)
    }
}

impl<M> MessageResponse<SyncActor, M> for SyncDone<i64>
where
    M: Message<Result = Result<i64, LockError>>,
{
    fn handle(self, ctx: &mut Context<SyncActor>, tx: Option<AdjustTx>) {
        match self.0 {
            Ok(taken) => taken.hand_reply(ctx, tx.map(Replying::Adjust)),
            Err(refused) => {
                if let Some(tx) = tx {
                    let _ = tx.send(Err(refused));
                }
            }
        }
    }
}

impl Handler<Unlocked> for SyncActor {
    type Result = ();

    fn handle(&mut self, msg: Unlocked, ctx: &mut Context<Self>) {
        // Unlike the lock actor's, no `shell::gone_first` here: permits granted to a caller
        // already gone are given back when their grant is dropped undelivered (`Permits`'
        // `Drop`), and they carry no term or token for it to spend, so serving the gone
        // callers first costs at most that give-back's round trip.
        self.state.unlocked(msg.count, Instant::now());
        shell::apply(self, ctx);
    }
}

impl Handler<Resubscribed> for SyncActor {
    type Result = ();

    fn handle(&mut self, msg: Resubscribed, ctx: &mut Context<Self>) {
        match msg.lost {
            Some(why) => self
                .state
                .connection_lost(crate::error::LockError::pubsub_lost(why), Instant::now()),
            None => self.state.resubscribed(Instant::now()),
        }
        shell::apply(self, ctx);
    }
}

impl Handler<HoldLost> for SyncActor {
    type Result = ();

    fn handle(&mut self, msg: HoldLost, ctx: &mut Context<Self>) {
        if msg.kind == Renewal::Permits {
            self.state.hold_lost(msg.epoch, Instant::now());
            shell::apply(self, ctx);
        }
    }
}

impl Handler<StopSync> for SyncActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: StopSync, ctx: &mut Context<Self>) -> Self::Result {
        shell::stop(self, |act| act.state.stop(msg.release, Instant::now()), ctx)
    }
}
