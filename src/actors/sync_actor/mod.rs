//! The synchronizer actor: one per semaphore, permit semaphore or count-down latch name in this
//! process, for as long as that name is busy here. It is the shell of a [`SyncState`], which
//! holds every rule of the name (waiters, permits held by epoch, leases, give-backs, hand-offs,
//! resends, the stop), as a lock actor is of its `LockState`: each message, round trip's
//! outcome, timer or channel message becomes an event, and the actor carries out the effects
//! that come back — a script on the command connection (each behind its request latch), a
//! reply, a subscription, a timer, a word to the Watchdog, a lost signal. It stops itself when
//! it has been idle a while, as a lock actor does (see its module doc).

mod effects;
mod permits;

pub use permits::{AcquirePermits, Permits, ReleasePermits};

use std::sync::Arc;
use std::time::Instant;

use actix::WeakRecipient;
use actix::dev::{MessageResponse, OneshotSender};
use actix::prelude::*;
use rustc_hash::FxHashMap;
use tokio::sync::{oneshot, watch};

use crate::actors::messages::*;
use crate::actors::name::WaiterId;
use crate::actors::name::crowd::{Caller, Crowd, Crowded, Sender};
use crate::actors::name::linger::{Linger, Lingers};
use crate::actors::name::lost::{LostSignal, Validity};
use crate::actors::services::Services;
use crate::actors::sync_state::Op;
use crate::actors::sync_state::{Answer, Effect, ReplyId, Settings, SyncState, Timer, Want};
use crate::error::LockError;
use crate::metrics;
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
}

/// Where the replies of give-backs and adjustments go, by number.
enum Replying {
    Done(DoneTx),
    Adjust(AdjustTx),
}

/// The actor of one synchronizer name. Reach it through
/// [`LockManager::sync_actor`](crate::LockManager::sync_actor) and send it [`AcquirePermits`],
/// [`ReleasePermits`], [`AwaitLatch`] and [`Adjust`].
pub struct SyncActor {
    /// Tells this actor apart from every other of the process.
    id: u64,
    kind: SyncKind,
    name: Arc<str>,
    svc: Services,
    registry: WeakRecipient<ForgetSync>,
    /// The first part of this actor's latch keys: its manager's id and its kind.
    latch_prefix: String,
    /// The request latch of each round trip under way, by number: made at its first run, reused
    /// when it is sent again.
    latches: FxHashMap<u64, SyncLatch>,
    state: SyncState,
    /// The callers of waiting requests, by waiter, with their arrival (for metrics).
    waiting: FxHashMap<WaiterId, (Caller<SyncTx>, metrics::Since)>,
    next_waiter: WaiterId,
    /// The watched callers and the waiters' deadlines, served by one future.
    crowd: Crowd<SyncTx>,
    /// The senders of give-backs and adjustments under way.
    replying: FxHashMap<ReplyId, Replying>,
    next_reply: ReplyId,
    /// The state's timers, as actix timers.
    timers: FxHashMap<Timer, SpawnHandle>,
    /// Each grant's lost signal, permits and validity, by epoch; its guard holds the receiver.
    signals: FxHashMap<u64, (watch::Sender<bool>, u32, Validity)>,
    /// A strong address to itself while busy or lingering (see the lock actor's module doc).
    keepalive: Option<Addr<Self>>,
    /// Its lingering while idle.
    linger: Linger,
    /// Who waits for a requested stop.
    stop_replies: Vec<oneshot::Sender<()>>,
    effects: Vec<Effect>,
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
        };
        Self {
            latch_prefix: format!("{}:{}", svc.client_id.simple(), kind.letter()),
            latches: FxHashMap::default(),
            state: SyncState::new(kind, name.clone(), settings, Instant::now()),
            id,
            kind,
            name,
            svc,
            registry,
            waiting: FxHashMap::default(),
            next_waiter: 0,
            crowd: Crowd::default(),
            replying: FxHashMap::default(),
            next_reply: 0,
            timers: FxHashMap::default(),
            signals: FxHashMap::default(),
            keepalive: None,
            linger: Linger::default(),
            stop_replies: Vec::new(),
            effects: Vec::new(),
        }
    }

    /// Carries out what the state asked for, in order (into a buffer kept between calls).
    fn apply(&mut self, ctx: &mut Context<Self>) {
        let mut effects = std::mem::take(&mut self.effects);
        self.state.drain_into(&mut effects);
        for effect in effects.drain(..) {
            self.effect(effect, ctx);
        }
        self.effects = effects;
    }

    /// Answers waiter `id`'s caller. Permits that reach nobody come back and their drop gives
    /// them back.
    fn answer(&mut self, id: WaiterId, answer: Answer, ctx: &mut Context<Self>) {
        let Some((caller, since)) = self.waiting.remove(&id) else {
            return;
        };
        self.crowd.disarm(id);
        let label = self.kind.label();
        metrics::sync_waiters(label, -1.0);
        let outcome = match (&answer, self.kind) {
            (Answer::Done { .. }, SyncKind::CountDownLatch) => "opened",
            (Answer::Done { .. }, _) => "acquired",
            (Answer::TimedOut, _) => "timed_out",
            (Answer::Failed(_), _) => "failed",
        };
        metrics::sync_answered(label, outcome, since);
        // A grant's signal is made even when its caller is gone: the permits' drop gives them
        // back.
        let reply = match answer {
            Answer::Done {
                waited,
                grant: Some(grant),
            } => {
                let (lost, rx) = watch::channel(false);
                // A plain semaphore's permits never expire: their validity stays unconfirmed.
                let validity = Validity::new();
                if let Some((sent, ttl)) = grant.confirmed {
                    validity.confirm(sent, ttl);
                }
                metrics::permits(label, f64::from(grant.permits));
                let signal = LostSignal::new(rx, &validity);
                self.signals
                    .insert(grant.epoch, (lost, grant.permits, validity));
                Ok(Some(Permits {
                    actor: ctx.address(),
                    actor_id: self.id,
                    name: self.name.clone(),
                    kind: self.kind,
                    permits: grant.permits,
                    ids: grant.ids.to_vec(),
                    epoch: grant.epoch,
                    lost: signal,
                    waited,
                    armed: true,
                }))
            }
            Answer::Done { grant: None, .. } => Ok(None),
            Answer::TimedOut => Ok(None),
            Answer::Failed(e) => Err(e),
        };
        let Some(tx) = caller.take() else {
            return;
        };
        match tx {
            SyncTx::Latch(tx) => {
                let _ = tx.send(reply.map(|_| matches!(outcome, "opened")));
            }
            SyncTx::Permits(tx) => {
                let _ = tx.send(reply); // a grant nobody receives is dropped: given back
            }
        }
    }

    fn request(
        &mut self,
        tx: SyncTx,
        (permits, lease): (u32, Option<std::time::Duration>),
        wait: Wait,
        ctx: &mut Context<Self>,
    ) {
        if self.state.is_stopping() {
            match tx {
                SyncTx::Permits(tx) => drop(tx.send(Err(LockError::Shutdown))),
                SyncTx::Latch(tx) => drop(tx.send(Err(LockError::Shutdown))),
            }
            return;
        }
        self.next_waiter += 1;
        let id = self.next_waiter;
        let ids: Arc<[u8]> = if self.kind == SyncKind::PermitSemaphore {
            (0..permits).flat_map(|_| self.svc.permit_id()).collect()
        } else {
            Arc::from([])
        };
        let wait = wait.normalized();
        let caller = Caller::Unwatched(tx);
        let caller = if matches!(wait, Wait::No) {
            caller
        } else {
            self.crowd.watch(id, caller, ctx)
        };
        self.waiting.insert(id, (caller, metrics::Since::now()));
        metrics::sync_waiters(self.kind.label(), 1.0);
        let want = Want {
            permits,
            lease,
            ids,
        };
        self.state.request(id, want, wait, Instant::now());
        self.apply(ctx);
    }

    /// Gives back the permits of `epoch`, answering `tx` with the outcome.
    fn release(&mut self, epoch: u64, tx: Option<Replying>, ctx: &mut Context<Self>) {
        let reply = tx.map(|tx| self.reply_to(tx));
        self.state.release(epoch, reply, Instant::now());
        self.apply(ctx);
    }

    fn reply_to(&mut self, tx: Replying) -> ReplyId {
        self.next_reply += 1;
        self.replying.insert(self.next_reply, tx);
        self.next_reply
    }
}

/// Permit ids as the Watchdog carries them: hex, one per 16 bytes, joined by commas.
fn hex_ids(ids: &[u8]) -> String {
    ids.chunks(16).map(hex).collect::<Vec<_>>().join(",")
}

impl Actor for SyncActor {
    type Context = Context<Self>;

    fn stopped(&mut self, ctx: &mut Self::Context) {
        Linger::stopped(self);
        if let Some(registry) = self.registry.upgrade() {
            registry.do_send(ForgetSync {
                kind: self.kind,
                name: self.name.clone(),
                id: self.id,
            });
        }
        self.state.abandon();
        let mut effects = Vec::new();
        self.state.drain_into(&mut effects);
        for effect in effects {
            match effect {
                Effect::Answer(id, answer) => self.answer(id, answer, ctx),
                Effect::Unsubscribe => self.effect(effect, ctx),
                _ => {}
            }
        }
        for (_, tx) in self.replying.drain() {
            match tx {
                Replying::Done(tx) => drop(tx.send(Err(LockError::Shutdown))),
                Replying::Adjust(tx) => drop(tx.send(Err(LockError::Shutdown))),
            }
        }
        tracing::trace!(name = %self.name, id = self.id, "synchronizer actor stopped");
    }
}

impl Lingers for SyncActor {
    fn linger(&mut self) -> &mut Linger {
        &mut self.linger
    }

    fn services(&self) -> &Services {
        &self.svc
    }

    fn depart(&mut self, _: &mut Context<Self>) {
        self.keepalive = None;
    }
}

impl Crowded for SyncActor {
    type Reply = SyncTx;

    fn crowd(&mut self) -> &mut Crowd<SyncTx> {
        &mut self.crowd
    }

    fn caller_left(&mut self, id: WaiterId, ctx: &mut Context<Self>) {
        self.state.caller_gone(id, Instant::now());
        if !self.state.has(id)
            && let Some((_, since)) = self.waiting.remove(&id)
        {
            self.crowd.disarm(id);
            metrics::sync_waiters(self.kind.label(), -1.0);
            metrics::sync_answered(self.kind.label(), "abandoned", since);
        }
        self.apply(ctx);
    }

    fn deadline(&mut self, id: WaiterId, now: Instant, ctx: &mut Context<Self>) {
        self.state.fired(Timer::Deadline(id), now);
        self.apply(ctx);
    }
}

/// The reply to an [`AcquirePermits`] or an [`AwaitLatch`]: delivered when it is done, the wait
/// ends or it fails. It queues the caller's reply sender, so nothing blocks the actor meanwhile.
pub struct SyncReply<M>(M);

impl Handler<AcquirePermits> for SyncActor {
    type Result = SyncReply<AcquirePermits>;

    fn handle(&mut self, msg: AcquirePermits, _: &mut Context<Self>) -> Self::Result {
        SyncReply(msg)
    }
}

impl MessageResponse<SyncActor, AcquirePermits> for SyncReply<AcquirePermits> {
    fn handle(self, ctx: &mut Context<SyncActor>, tx: Option<PermitsTx>) {
        // `do_send` leaves nobody to hand permits to.
        let Some(tx) = tx else { return };
        let msg = self.0;
        if let Err(e) = msg.check(ctx) {
            let _ = tx.send(Err(e));
            return;
        }
        ctx.wait(
            actix::fut::ready(()).map(move |(), act: &mut SyncActor, ctx| {
                act.request(SyncTx::Permits(tx), (msg.permits, msg.lease), msg.wait, ctx);
            }),
        );
    }
}

impl AcquirePermits {
    fn check(&self, _: &Context<SyncActor>) -> Result<(), LockError> {
        if self.permits == 0 {
            return Err(LockError::invalid("permits", "must be at least 1"));
        }
        if self.lease.is_some_and(|l| l.is_zero()) {
            return Err(LockError::invalid("lease", "must be at least 1 ms"));
        }
        Ok(())
    }
}

impl Handler<AwaitLatch> for SyncActor {
    type Result = SyncReply<AwaitLatch>;

    fn handle(&mut self, msg: AwaitLatch, _: &mut Context<Self>) -> Self::Result {
        SyncReply(msg)
    }
}

impl MessageResponse<SyncActor, AwaitLatch> for SyncReply<AwaitLatch> {
    fn handle(self, ctx: &mut Context<SyncActor>, tx: Option<LatchTx>) {
        let Some(tx) = tx else { return };
        let wait = self.0.wait;
        ctx.wait(
            actix::fut::ready(()).map(move |(), act: &mut SyncActor, ctx| {
                act.request(SyncTx::Latch(tx), (0, None), wait, ctx);
            }),
        );
    }
}

/// The reply to a [`ReleasePermits`] or an [`Adjust`]: delivered once Redis answered.
pub struct SyncDone<T>(Result<T, LockError>);

impl Handler<ReleasePermits> for SyncActor {
    type Result = SyncDone<u64>;

    fn handle(
        &mut self,
        ReleasePermits(mut permits): ReleasePermits,
        _: &mut Context<Self>,
    ) -> Self::Result {
        if permits.actor_id != self.id {
            // Still armed: dropped here, it gives its permits back through its own actor.
            return SyncDone(Err(LockError::invalid(
                "release",
                format!(
                    "permits of {:?} were sent to another synchronizer's actor",
                    permits.name
                ),
            )));
        }
        permits.armed = false;
        SyncDone(Ok(permits.epoch))
    }
}

impl Handler<GiveBack> for SyncActor {
    type Result = SyncDone<u64>;

    fn handle(&mut self, msg: GiveBack, _: &mut Context<Self>) -> Self::Result {
        SyncDone(Ok(msg.epoch))
    }
}

impl<M> MessageResponse<SyncActor, M> for SyncDone<u64>
where
    M: Message<Result = Result<(), LockError>>,
{
    fn handle(
        self,
        ctx: &mut Context<SyncActor>,
        tx: Option<OneshotSender<Result<(), LockError>>>,
    ) {
        match self.0 {
            Ok(epoch) => ctx.wait(actix::fut::ready(()).map(
                move |(), act: &mut SyncActor, ctx| {
                    act.release(epoch, tx.map(Replying::Done), ctx);
                },
            )),
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

impl Handler<Adjust> for SyncActor {
    type Result = SyncDone<Op>;

    fn handle(&mut self, Adjust(op): Adjust, _: &mut Context<Self>) -> Self::Result {
        if self.state.is_stopping() {
            return SyncDone(Err(LockError::Shutdown));
        }
        SyncDone(op.check(self.kind).map(|()| Op::Adjust(op)))
    }
}

impl Handler<ReleaseIds> for SyncActor {
    type Result = SyncDone<Op>;

    fn handle(&mut self, ReleaseIds(ids): ReleaseIds, _: &mut Context<Self>) -> Self::Result {
        if self.state.is_stopping() {
            return SyncDone(Err(LockError::Shutdown));
        }
        if self.kind != SyncKind::PermitSemaphore {
            return SyncDone(Err(LockError::invalid(
                "operation",
                format!("a release of ids does not apply to a {}", self.kind.label()),
            )));
        }
        if ids.is_empty() || ids.len() % 16 != 0 {
            return SyncDone(Err(LockError::invalid(
                "ids",
                "at least one id of 16 bytes",
            )));
        }
        SyncDone(Ok(Op::ReleaseIds(ids)))
    }
}

impl<M> MessageResponse<SyncActor, M> for SyncDone<Op>
where
    M: Message<Result = Result<i64, LockError>>,
{
    fn handle(
        self,
        ctx: &mut Context<SyncActor>,
        tx: Option<OneshotSender<Result<i64, LockError>>>,
    ) {
        match self.0 {
            Ok(op) => ctx.wait(
                actix::fut::ready(()).map(move |(), act: &mut SyncActor, ctx| {
                    let reply = tx.map(|tx| act.reply_to(Replying::Adjust(tx)));
                    act.state.adjust(op, reply, Instant::now());
                    act.apply(ctx);
                }),
            ),
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
        self.state.unlocked(msg.count, Instant::now());
        self.apply(ctx);
    }
}

impl Handler<Resubscribed> for SyncActor {
    type Result = ();

    fn handle(&mut self, _: Resubscribed, ctx: &mut Context<Self>) {
        self.state.resubscribed(Instant::now());
        self.apply(ctx);
    }
}

impl Handler<HoldLost> for SyncActor {
    type Result = ();

    fn handle(&mut self, msg: HoldLost, ctx: &mut Context<Self>) {
        if msg.kind == Renewal::Permits {
            self.state.hold_lost(msg.epoch, Instant::now());
            self.apply(ctx);
        }
    }
}

impl Handler<StopSync> for SyncActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: StopSync, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        self.stop_replies.push(tx);
        self.state.stop(msg.release, Instant::now());
        self.apply(ctx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}
