//! The synchronizer actor: one per semaphore, permit semaphore or count-down latch name in this
//! process, for as long as that name is busy here. The shell of a [`SyncState`] (the waiting
//! rules, pure), as a lock actor is of its `LockState`: each message, attempt outcome, timer or
//! channel message becomes an event, and the actor carries out the effects that come back.
//!
//! It owns what a lock actor owns for its name: the local waiters (served by one [`Crowd`]),
//! the subscription (through the `PubSubActor`), and the permits granted here, which the
//! `Watchdog` renews when they were taken without a lease. Every script it runs goes behind a
//! request latch and is sent again with the same latch while its outcome is unknown, so Redis
//! counts each request once. It stops itself when it has no waiter, no permit and no request
//! under way.

mod permits;

pub use permits::{AcquirePermits, Permits, ReleasePermits};

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::WeakRecipient;
use actix::dev::{MessageResponse, OneshotSender};
use actix::prelude::*;
use rustc_hash::FxHashMap;
use tokio::sync::{oneshot, watch};

use crate::actors::messages::*;
use crate::actors::name::crowd::{Caller, Crowd, Crowded, Sender};
use crate::actors::name::linger::{Linger, Lingers};
use crate::actors::name::lost::Validity;
use crate::actors::name::{Loss, MAX_HAND_OFF_STREAK, WaiterId, backoff};
use crate::actors::services::Services;
use crate::actors::sync_state::{Answer, Effect, SyncState, Tried};
use crate::error::LockError;
use crate::metrics;
use crate::protocol::{SyncKind, SyncLatch, Take, hex};

/// The longest a request whose reply never came is sent again: a third of the watchdog timeout,
/// as for locks (`Commands::resend_limit`).
fn resend_limit(svc: &Services) -> Duration {
    svc.config.get_watchdog_timeout() / 3
}

type PermitsTx = OneshotSender<Result<Option<Permits>, LockError>>;
type LatchTx = OneshotSender<Result<bool, LockError>>;

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

/// A waiter's request, as the actor keeps it.
struct Waiting {
    caller: Caller<SyncTx>,
    permits: u32,
    lease: Option<Duration>,
    /// A permit semaphore's ids for this request, 16 bytes each: made once, sent with every
    /// attempt.
    ids: Vec<u8>,
    since: metrics::Since,
    /// When the latest attempt to take them was sent: a grant's TTL runs from no earlier.
    sent: Instant,
}

/// Permits granted here and not yet given back.
struct Held {
    permits: u32,
    ids: Vec<u8>,
    lost: watch::Sender<bool>,
    /// Renewed by the Watchdog (taken without a lease).
    tracked: bool,
    /// Its lease's end, when it has one.
    expiry: Option<SpawnHandle>,
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
    /// The first part of this actor's latch keys: its manager's id and its kind. One actor of a
    /// kind and name runs at a time per manager, and it stops only with no request under way,
    /// so its successor reuses the same lanes.
    latch_prefix: String,
    free_lanes: Vec<u32>,
    next_lane: u32,
    state: SyncState,
    waiting: FxHashMap<WaiterId, Waiting>,
    next_waiter: WaiterId,
    crowd: Crowd<SyncTx>,
    held: FxHashMap<u64, Held>,
    next_epoch: u64,
    /// Requests under way other than attempts (releases, adjustments).
    busy: usize,
    /// Hand-offs in a row since the last release through Redis.
    hand_offs: u32,
    /// The one timer of the state.
    timer: Option<SpawnHandle>,
    /// A strong address to itself while busy or lingering (see the lock actor's module doc).
    keepalive: Option<Addr<Self>>,
    /// Its lingering while idle.
    linger: Linger,
    /// Set by `StopSync`: nothing new is served.
    stopping: bool,
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
        Self {
            latch_prefix: format!("{}:{}", svc.client_id.simple(), kind.letter()),
            free_lanes: Vec::new(),
            next_lane: 0,
            id,
            kind,
            name,
            svc,
            registry,
            state: SyncState::new(kind),
            waiting: FxHashMap::default(),
            next_waiter: 0,
            crowd: Crowd::default(),
            held: FxHashMap::default(),
            next_epoch: 0,
            busy: 0,
            hand_offs: 0,
            timer: None,
            keepalive: None,
            linger: Linger::default(),
            stopping: false,
            effects: Vec::new(),
        }
    }

    /// A latch on a free lane for one request; [`Self::lane_done`] frees the lane.
    fn latch(&mut self) -> (u32, SyncLatch) {
        let lane = self.free_lanes.pop().unwrap_or_else(|| {
            self.next_lane += 1;
            self.next_lane
        });
        let latch = SyncLatch {
            lane: format!("{}:{lane}", self.latch_prefix),
            id: crate::protocol::Latch::new().id,
        };
        (lane, latch)
    }

    fn lane_done(&mut self, lane: u32) {
        self.free_lanes.push(lane);
    }

    /// Carries out what the state asked for, then stays alive only while busy.
    fn apply(&mut self, ctx: &mut Context<Self>) {
        let mut effects = std::mem::take(&mut self.effects);
        self.state.drain_into(&mut effects);
        for effect in effects.drain(..) {
            self.effect(effect, ctx);
        }
        self.effects = effects;
        self.keep_alive_while_busy(ctx);
    }

    fn keep_alive_while_busy(&mut self, ctx: &mut Context<Self>) {
        let busy = !self.state.is_idle() || !self.held.is_empty() || self.busy > 0;
        if busy {
            Linger::busy(self);
            if self.keepalive.is_none() {
                self.keepalive = Some(ctx.address());
            }
        } else {
            // Kept alive by its own address while it lingers (its round trips kept it so far).
            if self.keepalive.is_none() && self.linger.is_busy() {
                self.keepalive = Some(ctx.address());
            }
            Linger::idle(self, ctx);
        }
    }

    fn effect(&mut self, effect: Effect, ctx: &mut Context<Self>) {
        match effect {
            Effect::Try(id) => self.attempt(id, ctx),
            Effect::Answer(id, answer) => self.answer(id, answer, ctx),
            Effect::Subscribe => {
                let request = self.svc.pubsub.send(Subscribe {
                    channel: self.kind.channel(&self.name),
                    id: self.id,
                    actor: Listener::of(&ctx.address()),
                });
                ctx.spawn(request.into_actor(self).map(|res, act, ctx| {
                    let ok = matches!(res, Ok(Ok(())));
                    act.state.subscribed(ok, Instant::now());
                    act.apply(ctx);
                }));
            }
            Effect::Unsubscribe => self.svc.pubsub.do_send(Unsubscribe {
                channel: self.kind.channel(&self.name),
                id: self.id,
            }),
            Effect::Arm(after) => {
                if let Some(old) = self.timer.take() {
                    ctx.cancel_future(old);
                }
                self.timer = Some(ctx.run_later(after, |act, ctx| {
                    act.timer = None;
                    act.state.timer(Instant::now());
                    act.apply(ctx);
                }));
            }
        }
    }

    /// Runs waiter `id`'s attempt: take its permits, or read the latch's count.
    fn attempt(&mut self, id: WaiterId, ctx: &mut Context<Self>) {
        let Some(waiting) = self.waiting.get(&id) else {
            return;
        };
        let (commands, kind, name) = (self.svc.commands.clone(), self.kind, self.name.clone());
        let limit = resend_limit(&self.svc);
        if kind == SyncKind::CountDownLatch {
            let work = async move { resend(limit, || commands.read_counter(&name)).await };
            ctx.spawn(work.into_actor(self).map(move |res, act, ctx| {
                let tried = match res {
                    Ok(count) if count <= 0 => Tried::Done,
                    Ok(_) => Tried::Short {
                        free: 0,
                        retry_in: None,
                    },
                    Err(e) => Tried::Failed(e),
                };
                act.state.tried(id, tried, Instant::now());
                act.apply(ctx);
            }));
            return;
        }
        let (permits, ids) = (waiting.permits, waiting.ids.clone());
        if let Some(w) = self.waiting.get_mut(&id) {
            w.sent = Instant::now();
        }
        let Some(waiting) = self.waiting.get(&id) else {
            return;
        };
        let lease = waiting
            .lease
            .unwrap_or(self.svc.config.get_watchdog_timeout());
        let (lane, latch) = self.latch();
        let work = async move {
            let taken = resend(limit, || {
                commands.take_permits(kind, &name, (permits, &ids, lease), &latch)
            })
            .await;
            if let Ok(Take::Unsynced { acked, wanted }) = taken {
                // Not on enough replicas to survive a failover: given back before the answer,
                // as the next request of the same lane (its acquire is answered).
                let give_back = SyncLatch {
                    lane: latch.lane.clone(),
                    id: crate::protocol::Latch::new().id,
                };
                let back = resend(limit, || {
                    commands.give_permits(kind, &name, (permits, &ids), &give_back)
                })
                .await;
                if let Err(error) = back {
                    tracing::warn!(%error, "permits refused by replica sync not given back");
                }
                return Err(LockError::ReplicaSync { acked, wanted });
            }
            taken
        };
        ctx.spawn(work.into_actor(self).map(move |res, act, ctx| {
            act.lane_done(lane);
            let tried = match res {
                Ok(Take::Taken) => Tried::Done,
                Ok(Take::Short { free, retry_in }) => Tried::Short { free, retry_in },
                Ok(Take::Unsynced { acked, wanted }) => {
                    Tried::Failed(LockError::ReplicaSync { acked, wanted })
                }
                Err(e) => Tried::Failed(e),
            };
            act.state.tried(id, tried, Instant::now());
            act.apply(ctx);
        }));
    }

    /// Answers waiter `id`'s caller. Permits that reach nobody come back and their drop gives
    /// them back.
    fn answer(&mut self, id: WaiterId, answer: Answer, ctx: &mut Context<Self>) {
        let Some(waiting) = self.waiting.remove(&id) else {
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
        metrics::sync_answered(label, outcome, waiting.since);
        let Some(tx) = waiting.caller.take() else {
            return;
        };
        match tx {
            SyncTx::Latch(tx) => {
                let _ = tx.send(match answer {
                    Answer::Done { .. } => Ok(true),
                    Answer::TimedOut => Ok(false),
                    Answer::Failed(e) => Err(e),
                });
            }
            SyncTx::Permits(tx) => {
                let reply = match answer {
                    Answer::Done { waited } => {
                        let mut permits = self.grant(
                            waiting.permits,
                            waiting.ids,
                            (waiting.lease, waiting.sent),
                            ctx,
                        );
                        permits.waited = waited;
                        Ok(Some(permits))
                    }
                    Answer::TimedOut => Ok(None),
                    Answer::Failed(e) => Err(e),
                };
                let _ = tx.send(reply); // a grant nobody receives is dropped: given back
            }
        }
    }

    /// Records permits just taken and makes their grant: renewed by the Watchdog when taken
    /// without a lease (permit semaphore), or lost when their lease ends.
    fn grant(
        &mut self,
        permits: u32,
        ids: Vec<u8>,
        (lease, sent): (Option<Duration>, Instant),
        ctx: &mut Context<Self>,
    ) -> Permits {
        self.next_epoch += 1;
        let epoch = self.next_epoch;
        let (lost, rx) = watch::channel(false);
        let renewed = self.kind == SyncKind::PermitSemaphore && lease.is_none();
        // A plain semaphore's permits never expire: their validity stays unconfirmed (none).
        let validity = Validity::new();
        if self.kind == SyncKind::PermitSemaphore {
            let ttl = lease.unwrap_or(self.svc.config.get_watchdog_timeout());
            validity.confirm(sent, ttl);
        }
        if renewed {
            self.svc.watchdog.do_send(Track {
                name: self.name.clone(),
                holder: hex_ids(&ids).into(),
                kind: Renewal::Permits,
                epoch,
                confirmed: Instant::now(),
                validity: Some(validity.clone()),
                actor: ctx.address().recipient::<HoldLost>().downgrade(),
            });
        }
        let expiry = match (self.kind, lease) {
            (SyncKind::PermitSemaphore, Some(lease)) => {
                Some(ctx.run_later(lease, move |act, ctx| {
                    act.lose(epoch, Loss::Lease, ctx);
                }))
            }
            _ => None,
        };
        metrics::permits(self.kind.label(), f64::from(permits));
        self.held.insert(
            epoch,
            Held {
                permits,
                ids: ids.clone(),
                lost,
                tracked: renewed,
                expiry,
            },
        );
        Permits {
            actor: ctx.address(),
            actor_id: self.id,
            name: self.name.clone(),
            kind: self.kind,
            permits,
            ids,
            epoch,
            lost: crate::actors::name::lost::LostSignal::new(rx, &validity),
            waited: false,
            armed: true,
        }
    }

    /// The permits of `epoch` are gone from Redis (renewal found them gone, or their lease
    /// ended): their grant learns it; a later release of them replies `NotHeld`.
    fn lose(&mut self, epoch: u64, why: Loss, ctx: &mut Context<Self>) {
        if let Some(held) = self.held.get_mut(&epoch)
            && !*held.lost.borrow()
        {
            // Counted before the guard is told: whoever the guard wakes reads the counter
            // already moved.
            tracing::warn!(name = %self.name, kind = self.kind.label(), reason = why.describe(), "permits lost");
            metrics::permits_lost(self.kind.label(), why.label());
            held.lost.send_replace(true);
            if let Some(expiry) = held.expiry.take() {
                ctx.cancel_future(expiry);
            }
        }
    }

    /// Gives back the permits of `epoch`, answering `tx` with the outcome.
    fn give_back(
        &mut self,
        epoch: u64,
        tx: Option<OneshotSender<Result<(), LockError>>>,
        ctx: &mut Context<Self>,
    ) {
        let Some(held) = self.held.remove(&epoch) else {
            if let Some(tx) = tx {
                let _ = tx.send(Err(self.not_held()));
            }
            return;
        };
        metrics::permits(self.kind.label(), -f64::from(held.permits));
        if held.tracked {
            self.svc.watchdog.do_send(Untrack {
                name: self.name.clone(),
                holder: hex_ids(&held.ids).into(),
                kind: Renewal::Permits,
                epoch,
            });
        }
        if let Some(expiry) = held.expiry {
            ctx.cancel_future(expiry);
        }
        let was_lost = *held.lost.borrow();
        let (mut permits, ids) = (held.permits, held.ids);
        if !was_lost && let Some(handed) = self.hand_off(permits, ctx) {
            permits -= handed;
            if permits == 0 {
                if let Some(tx) = tx {
                    let _ = tx.send(Ok(()));
                }
                return;
            }
        } else {
            self.hand_offs = 0;
        }
        let (commands, kind, name) = (self.svc.commands.clone(), self.kind, self.name.clone());
        let limit = resend_limit(&self.svc);
        let (lane, latch) = self.latch();
        self.busy += 1;
        let work = async move {
            resend(limit, || {
                commands.give_permits(kind, &name, (permits, &ids), &latch)
            })
            .await
        };
        ctx.spawn(work.into_actor(self).map(move |res, act, ctx| {
            act.lane_done(lane);
            act.busy -= 1;
            let reply = match res {
                // A permit semaphore replies how many ids were still held.
                Ok(released)
                    if kind == SyncKind::PermitSemaphore
                        && (was_lost || released < i64::from(permits)) =>
                {
                    Err(act.not_held())
                }
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(error) = &reply {
                tracing::debug!(%error, name = %act.name, "give back");
            }
            if let Some(tx) = tx {
                let _ = tx.send(reply);
            }
            act.keep_alive_while_busy(ctx);
        }));
    }

    /// Hands up to `permits` permits of a plain semaphore that are being given back to a
    /// waiting local waiter, without a round trip: Redis's free count stays as it is, and the
    /// permits change hands here. Returns how many were handed. At most
    /// [`MAX_HAND_OFF_STREAK`] in a row, so that an ordinary release (and its message) lets
    /// other processes' waiters in; never with replica sync (a hand-off is a grant without the
    /// acquire's replica wait). A permit semaphore's permits carry leases and renewals of their
    /// own, and are always given back through Redis.
    fn hand_off(&mut self, permits: u32, ctx: &mut Context<Self>) -> Option<u32> {
        if self.kind != SyncKind::Semaphore
            || self.hand_offs >= MAX_HAND_OFF_STREAK
            || self.svc.config.get_sync_replicas().is_some()
        {
            return None;
        }
        let (_, wants) = self.state.hand_off(permits, |_| true)?;
        self.hand_offs += 1;
        tracing::trace!(name = %self.name, permits = wants, "permits handed off");
        self.apply(ctx);
        Some(wants)
    }

    fn not_held(&self) -> LockError {
        LockError::NotHeld {
            name: self.name.to_string(),
            holder: "these permits".into(),
        }
    }

    /// Runs one adjustment (set, add, drain, release without a grant, count down…).
    fn adjust(
        &mut self,
        op: Op,
        tx: Option<OneshotSender<Result<i64, LockError>>>,
        ctx: &mut Context<Self>,
    ) {
        let (commands, kind, name) = (self.svc.commands.clone(), self.kind, self.name.clone());
        let limit = resend_limit(&self.svc);
        let (lane, latch) = self.latch();
        self.busy += 1;
        let work = async move {
            resend(limit, || async {
                let op = match &op {
                    Op::Adjust(op) => *op,
                    Op::ReleaseIds(ids) => {
                        return commands.release_all_permits(&name, ids, &latch).await;
                    }
                };
                match op {
                    Adjustment::SetPermits(n) => commands
                        .set_permits(kind, &name, (n, None), &latch)
                        .await
                        .map(i64::from),
                    Adjustment::SetPermitsWithTtl(n, ttl) => commands
                        .set_permits(kind, &name, (n, Some(ttl)), &latch)
                        .await
                        .map(i64::from),
                    Adjustment::ReleaseIfExists(n) => commands
                        .release_if_exists(&name, n, &latch)
                        .await
                        .map(i64::from),
                    Adjustment::AddPermits(d) => commands.add_permits(kind, &name, d, &latch).await,
                    Adjustment::Drain => commands.drain_permits(&name, &latch).await,
                    Adjustment::Release(n) => {
                        commands.give_permits(kind, &name, (n, &[]), &latch).await
                    }
                    Adjustment::Available => commands
                        .count_permits(kind, &name)
                        .await
                        .map(|(free, _)| free),
                    Adjustment::Acquired => commands
                        .count_permits(kind, &name)
                        .await
                        .map(|(_, held)| held),
                    Adjustment::SetCount(c) => {
                        commands.set_count(&name, c, &latch).await.map(i64::from)
                    }
                    Adjustment::CountDown => commands.count_down(&name, &latch).await,
                }
            })
            .await
        };
        ctx.spawn(work.into_actor(self).map(move |res, act, ctx| {
            act.lane_done(lane);
            act.busy -= 1;
            if let Some(tx) = tx {
                let _ = tx.send(res);
            }
            act.keep_alive_while_busy(ctx);
        }));
    }

    fn arrive(
        &mut self,
        tx: SyncTx,
        (permits, lease): (u32, Option<Duration>),
        wait: Wait,
        ctx: &mut Context<Self>,
    ) {
        if self.stopping {
            match tx {
                SyncTx::Permits(tx) => drop(tx.send(Err(LockError::Shutdown))),
                SyncTx::Latch(tx) => drop(tx.send(Err(LockError::Shutdown))),
            }
            return;
        }
        self.next_waiter += 1;
        let id = self.next_waiter;
        let ids = if self.kind == SyncKind::PermitSemaphore {
            (0..permits).flat_map(|_| self.svc.permit_id()).collect()
        } else {
            Vec::new()
        };
        let wait = wait.normalized();
        let caller = Caller::Unwatched(tx);
        let caller = if matches!(wait, Wait::No) {
            caller
        } else {
            self.crowd.watch(id, caller, ctx)
        };
        if let Wait::Up(limit) = wait {
            self.crowd.arm(id, limit, ctx);
        }
        self.waiting.insert(
            id,
            Waiting {
                caller,
                permits,
                lease,
                ids,
                since: metrics::Since::now(),
                sent: Instant::now(),
            },
        );
        metrics::sync_waiters(self.kind.label(), 1.0);
        self.state.arrive(id, permits, matches!(wait, Wait::No));
        self.apply(ctx);
    }
}

/// Sends `call` again while its outcome is unknown (a time-out, a dropped connection), with the
/// same request latch, for up to `limit`; then returns what it last got.
async fn resend<T, F, Fut>(limit: Duration, mut call: F) -> Result<T, LockError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LockError>>,
{
    let started = Instant::now();
    let mut failures = 0;
    loop {
        let after = backoff(failures);
        match call().await {
            Err(e) if e.outcome_unknown() && started.elapsed() + after < limit => {
                tracing::debug!(error = %e, "synchronizer request sent again");
                tokio::time::sleep(after).await;
                failures += 1;
            }
            other => return other,
        }
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
        self.state.fail_all(&LockError::Shutdown);
        let mut effects = Vec::new();
        self.state.drain_into(&mut effects);
        for effect in effects {
            match effect {
                Effect::Answer(id, answer) => self.answer(id, answer, ctx),
                Effect::Unsubscribe => self.effect(effect, ctx),
                _ => {}
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
        self.state.gone(id);
        if !self.state.has(id)
            && let Some(waiting) = self.waiting.remove(&id)
        {
            self.crowd.disarm(id);
            metrics::sync_waiters(self.kind.label(), -1.0);
            metrics::sync_answered(self.kind.label(), "abandoned", waiting.since);
        }
        self.apply(ctx);
    }

    fn deadline(&mut self, id: WaiterId, _: Instant, ctx: &mut Context<Self>) {
        self.state.deadline(id);
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
                act.arrive(SyncTx::Permits(tx), (msg.permits, msg.lease), msg.wait, ctx);
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
                act.arrive(SyncTx::Latch(tx), (0, None), wait, ctx);
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
                    act.give_back(epoch, tx, ctx);
                    act.keep_alive_while_busy(ctx);
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

/// What [`SyncActor::adjust`] runs: a public [`Adjustment`], or a permit semaphore's release of a
/// list of ids, all or nothing ([`ReleaseIds`]; ids are not `Copy`, as `Adjustment` is).
#[derive(Clone, Debug)]
pub enum Op {
    /// A public adjustment.
    Adjust(Adjustment),
    /// A permit semaphore's release of these ids, all or nothing.
    ReleaseIds(Arc<[u8]>),
}

/// Permit semaphore: give back these permits (16-byte ids, concatenated) all at once, or none
/// when one is not held. Replies how many were given back (0: none).
#[derive(Clone, Debug, Message)]
#[rtype(result = "Result<i64, LockError>")]
pub struct ReleaseIds(pub Arc<[u8]>);

impl Handler<Adjust> for SyncActor {
    type Result = SyncDone<Op>;

    fn handle(&mut self, Adjust(op): Adjust, _: &mut Context<Self>) -> Self::Result {
        if self.stopping {
            return SyncDone(Err(LockError::Shutdown));
        }
        SyncDone(op.check(self.kind).map(|()| Op::Adjust(op)))
    }
}

impl Handler<ReleaseIds> for SyncActor {
    type Result = SyncDone<Op>;

    fn handle(&mut self, ReleaseIds(ids): ReleaseIds, _: &mut Context<Self>) -> Self::Result {
        if self.stopping {
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
                    act.adjust(op, tx, ctx);
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
        self.state.message(msg.count);
        self.apply(ctx);
    }
}

impl Handler<Resubscribed> for SyncActor {
    type Result = ();

    fn handle(&mut self, _: Resubscribed, ctx: &mut Context<Self>) {
        self.state.resubscribed();
        self.apply(ctx);
    }
}

impl Handler<HoldLost> for SyncActor {
    type Result = ();

    fn handle(&mut self, msg: HoldLost, ctx: &mut Context<Self>) {
        if msg.kind == Renewal::Permits {
            if let Some(held) = self.held.get_mut(&msg.epoch) {
                held.tracked = false;
            }
            self.lose(msg.epoch, Loss::Watchdog, ctx);
        }
    }
}

impl Handler<StopSync> for SyncActor {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, msg: StopSync, ctx: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        self.state.fail_all(&LockError::Shutdown);
        self.apply(ctx);
        let epochs: Vec<u64> = self.held.keys().copied().collect();
        let (tx_all, rxs): (Vec<_>, Vec<_>) = epochs
            .iter()
            .map(|_| oneshot::channel::<Result<(), LockError>>())
            .unzip();
        if msg.release {
            for (epoch, tx) in epochs.into_iter().zip(tx_all) {
                self.give_back(epoch, Some(tx), ctx);
            }
        } else {
            for epoch in epochs {
                if let Some(held) = self.held.remove(&epoch) {
                    held.lost.send_replace(true);
                }
            }
        }
        Box::pin(
            futures_util::future::join_all(rxs)
                .into_actor(self)
                .map(|_, act, ctx| {
                    for held in act.held.values() {
                        held.lost.send_replace(true);
                    }
                    act.keepalive = None;
                    ctx.stop();
                }),
        )
    }
}
