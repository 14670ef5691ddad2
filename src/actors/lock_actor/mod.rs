//! The lock actor: one per lock name in this process, for as long as that name is busy here.
//!
//! It is the shell of a [`LockState`], which holds every rule of the name (waiters, holds,
//! epochs, hand-offs, retries): each message or timer becomes an event for the state, and the
//! effects that come back are carried out by the per-name shell (`actors::shell`), shared with
//! the synchronizer actor. What is a lock's own is here: taking [`Acquire`] and [`Release`] in,
//! running its round trips (`round_trips`: each a future of its own, spawned on the actor's context,
//! so that a deadline or a departing caller is handled while one is under way; the state lets
//! only one run at a time), and answering with a [`Grant`].
//!
//! It stops when it has been idle a while, as every per-name actor does (the shell's, for both
//! families: `shell::linger`): while it has a hold, a waiter or a round trip it keeps a strong
//! address to itself; when all are gone it **lingers**, then drops the address, and actix stops
//! an actor once no strong address is left, its mailbox is empty and no timer is armed. Anyone
//! still holding an address (a grant, an actix user) keeps it alive, so no message is ever sent
//! to a stopped actor by mistake; a sender that loses the race with the stop gets
//! `MailboxError::Closed` for a message that was never handled, and resolves the name again.

mod grant;
mod requests;
mod round_trips;

pub use grant::Grant;
pub use requests::{Acquire, Release};

use std::sync::Arc;
use std::time::Instant;

use actix::WeakRecipient;
use actix::dev::{MessageResponse, OneshotSender};
use actix::prelude::*;

use super::deadlock::Asks;
use super::deadlock::seat::{Seat, Whose};
use super::lock_state::{Answer, Effect, HoldKey, LockState, Locks, Request, Settings, Timer};
use super::lost::LostSignal;
use super::messages::*;
use super::name::WaiterId;
use super::name::effect::{Never, ReplyId};
use super::services::Services;
use super::shell::crowd::Caller;
use super::shell::reply::{Expecting, Taken, take_in};
use super::shell::{self, PerName, Shell};
use crate::error::{LockError, Owner};
use crate::metrics::Series;
use crate::protocol::LockKind;

type AcquireResult = Result<Option<Grant>, LockError>;
type AcquireTx = OneshotSender<AcquireResult>;
type ReleaseTx = OneshotSender<Result<(), LockError>>;

/// The actor of one lock name. Reach it through [`LockManager::lock_actor`](crate::LockManager::lock_actor)
/// and send it [`Acquire`] and [`Release`].
pub struct LockActor {
    /// The kinds it serves (the family's first kind: both sides of a read-write lock go to one
    /// actor).
    family: LockKind,
    registry: WeakRecipient<Forget>,
    state: LockState,
    shell: Shell<Self>,
}

impl LockActor {
    pub(crate) fn new(
        id: u64,
        family: LockKind,
        name: Arc<str>,
        svc: Services,
        registry: WeakRecipient<Forget>,
    ) -> Self {
        let settings = Settings {
            watchdog_timeout: svc.config.get_watchdog_timeout(),
            fair_wait_timeout: svc.config.get_fair_lock_wait_timeout(),
            fair_place_timeout: svc.config.get_fair_lock_place_timeout(),
            // A hand-off grants without an acquire, so without the acquire's replica sync.
            hand_off: svc.config.get_sync_replicas().is_none(),
            unavailable_after: svc.config.get_unavailable_after(),
            watch_holds: svc.config.get_watch_holds(),
        };
        let mut shell = Shell::new(id, name.clone(), svc);
        shell.seat = Seat::new(&shell.svc.deadlocks);
        Self {
            family,
            state: LockState::new(family, name, settings, Instant::now()),
            registry,
            shell,
        }
    }

    /// Releases the hold of `key` of this `epoch`; `reply` gets the outcome.
    fn release(&mut self, key: HoldKey, epoch: u64, reply: Option<ReplyId>) {
        self.state.release(key, epoch, reply, Instant::now());
    }
}

impl PerName for LockActor {
    type Family = Locks;
    type Tx = AcquireTx;
    type Reply = ReleaseTx;
    const SERIES: Series = Series::Locks;

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

    fn subscribed(&mut self, channel: &str, ok: bool, now: Instant) {
        self.state.subscribed(channel, ok, now);
    }

    fn caller_gone(&mut self, id: WaiterId, now: Instant) -> bool {
        if !self.state.is_waiting(id) {
            // Answered soon (a fair waiter leaving the queue): its answer finds nobody.
            return false;
        }
        self.state.caller_gone(id, now);
        true
    }

    fn retire(&mut self) {
        self.state.retire();
    }

    fn abandon(&mut self) {
        self.state.abandon();
    }

    fn forget(&self) {
        if let Some(registry) = self.registry.upgrade() {
            registry.do_send(Forget {
                family: self.family,
                name: self.shell.name.clone(),
                id: self.shell.id,
            });
        }
        tracing::trace!(lock = %self.shell.name, id = self.shell.id, "lock actor stopped");
    }

    fn run(&mut self, op: super::lock_state::Op, ctx: &mut Context<Self>) {
        self.run_op(op, ctx);
    }

    fn outcome(&self, answer: &Answer) -> &'static str {
        match answer {
            Answer::Granted { .. } => "acquired",
            Answer::TimedOut => "timed_out",
            Answer::Failed(crate::error::LockError::Unavailable { .. }) => "unavailable",
            Answer::Failed(_) => "failed",
        }
    }

    /// A grant that reaches nobody comes back and its drop releases the hold.
    fn answer(
        &mut self,
        _: WaiterId,
        answer: Answer,
        caller: Option<Caller<AcquireTx>>,
        owner: Option<Owner>,
        ctx: &mut Context<Self>,
    ) {
        let reply = match answer {
            Answer::Granted {
                key,
                epoch,
                token,
                confirmed,
            } => {
                let signal = self.shell.signal(epoch, key.1.label(), 1.0);
                if let Some((sent, ttl)) = confirmed {
                    signal.validity.confirm(sent, ttl);
                }
                let lost = LostSignal::new(signal.lost.subscribe(), &signal.validity);
                let claim = signal.validity.clone();
                claim.claim();
                if let Some(seat) = &mut self.shell.seat {
                    seat.granted(epoch, owner, (&key.0, key.1), || claim.claims());
                }
                Ok(Some(Grant {
                    actor: self.shell.link(ctx),
                    actor_id: self.shell.id,
                    name: self.shell.name.clone(),
                    holder: key.0,
                    kind: key.1,
                    epoch,
                    token,
                    lost,
                    waited: matches!(caller, Some(Caller::Watched(_))),
                    armed: true,
                    claim,
                }))
            }
            Answer::TimedOut => Ok(None),
            Answer::Failed(e) => Err(e),
        };
        if let Some(caller) = caller
            && let Err(Ok(Some(mut grant))) = caller.deliver(reply)
        {
            // The caller went as its grant came. Released now: dropped, the grant would send
            // its release behind the messages already queued, and an attempt of the same
            // holder among them would find the hold counted with no release of it known (a
            // non-reentrant holder is then refused as holding it already).
            let (key, epoch) = grant.disarm();
            self.state.release(key, epoch, None, Instant::now());
        }
    }

    fn asks(ctx: &mut Context<Self>) -> Option<Asks> {
        let me = ctx.address();
        Some(Asks {
            still: me.clone().recipient().downgrade(),
            broken: me.recipient().downgrade(),
        })
    }

    fn own(&mut self, never: Never, _: &mut Context<Self>) {
        match never {}
    }

    fn own_reply(never: &Never) -> Option<ReplyId> {
        match *never {}
    }

    fn renewal(&self, (holder, kind): &HoldKey) -> (Arc<str>, Renewal) {
        (holder.clone(), Renewal::Lock(*kind))
    }

    fn reply(tx: ReleaseTx, res: Result<(), LockError>) {
        let _ = tx.send(res); // the caller may have gone
    }
}

impl Actor for LockActor {
    type Context = Context<Self>;

    fn stopped(&mut self, ctx: &mut Self::Context) {
        shell::stopped(self, ctx);
    }
}

/// The reply to an [`Acquire`]: delivered when the lock is granted, the wait ends or it fails.
/// The handler has taken the request in; this leaves the caller's reply sender for the actor,
/// so nothing blocks the actor meanwhile.
pub struct AcquireReply(Taken<LockActor>);

impl Handler<Acquire> for LockActor {
    type Result = AcquireReply;

    fn handle(&mut self, msg: Acquire, ctx: &mut Context<Self>) -> AcquireReply {
        let kind = msg.kind;
        // A single attempt never waits for a holder (queued behind a round trip, it is watched,
        // but it answers `None` rather than wait): it is no wait of the waits-for graph.
        let whose = msg
            .owner
            .filter(|_| msg.wait.normalized() != Wait::No)
            .map(|owner| Whose {
                owner,
                holder: msg.holder.clone(),
                kind,
                site: msg.site,
            });
        let req = Request {
            holder: msg.holder,
            kind,
            lease: msg.lease,
            wait: msg.wait,
        };
        AcquireReply(take_in(
            self,
            |act| {
                let id = act.state.request(req, Instant::now());
                act.shell.coming(id, kind.label());
                if let (Some(seat), Some(whose)) = (&mut act.shell.seat, whose) {
                    seat.coming(id, whose);
                }
                Expecting::Waiter(id)
            },
            ctx,
        ))
    }
}

impl MessageResponse<LockActor, Acquire> for AcquireReply {
    fn handle(self, ctx: &mut Context<LockActor>, tx: Option<AcquireTx>) {
        self.0.hand_waiter(ctx, tx);
    }
}

/// The reply to a [`Release`]: delivered once Redis answered.
pub struct ReleaseReply(Result<Taken<LockActor>, LockError>);

impl Handler<Release> for LockActor {
    type Result = ReleaseReply;

    fn handle(&mut self, Release(mut grant): Release, ctx: &mut Context<Self>) -> ReleaseReply {
        // A grant sent to another lock's actor is refused; still armed, it releases its hold
        // through its own actor when it is dropped here.
        if !grant.granted_by(self.shell.id) {
            return ReleaseReply(Err(LockError::invalid(
                "release",
                format!(
                    "the grant of lock {:?} was sent to the actor of another lock",
                    grant.name()
                ),
            )));
        }
        // A waiter whose caller left just before must not be handed the lock.
        shell::gone_first(self, ctx);
        ReleaseReply(Ok(take_in(
            self,
            |act| {
                let id = act.shell.next_reply();
                let (key, epoch) = grant.disarm();
                act.release(key, epoch, Some(id));
                Expecting::Reply(id)
            },
            ctx,
        )))
    }
}

impl MessageResponse<LockActor, Release> for ReleaseReply {
    fn handle(self, ctx: &mut Context<LockActor>, tx: Option<ReleaseTx>) {
        match self.0 {
            Ok(taken) => taken.hand_reply(ctx, tx),
            Err(refused) => {
                if let Some(tx) = tx {
                    let _ = tx.send(Err(refused)); // the caller may have gone
                }
            }
        }
    }
}

impl Handler<ReleaseHold> for LockActor {
    type Result = ();

    /// A dropped grant's release: nobody waits for its outcome.
    fn handle(&mut self, msg: ReleaseHold, ctx: &mut Context<Self>) {
        shell::gone_first(self, ctx);
        self.release((msg.holder, msg.kind), msg.epoch, None);
        shell::apply(self, ctx);
    }
}

impl Handler<Unlocked> for LockActor {
    type Result = ();

    fn handle(&mut self, msg: Unlocked, ctx: &mut Context<Self>) {
        // A waiter whose caller left just before must not be woken to take the lock.
        shell::gone_first(self, ctx);
        let all = crate::protocol::keys::wakes_all(msg.count);
        self.state.unlocked(all, &msg.channel, Instant::now());
        shell::apply(self, ctx);
    }
}

impl Handler<HoldsOf> for LockActor {
    type Result = MessageResult<HoldsOf>;

    fn handle(&mut self, msg: HoldsOf, _: &mut Context<Self>) -> Self::Result {
        let name = self.shell.name.clone();
        let holds = (self.shell.seat.as_ref()).map_or_else(Vec::new, |s| s.holds_of(&msg.owners));
        MessageResult(
            holds
                .into_iter()
                .map(|(o, h)| (o, name.clone(), h))
                .collect(),
        )
    }
}

impl Handler<StillWaiting> for LockActor {
    type Result = bool;

    fn handle(&mut self, msg: StillWaiting, _: &mut Context<Self>) -> bool {
        shell::still_waiting(self, msg.waiter) && self.state.is_waiting(msg.waiter)
    }
}

impl Handler<Deadlocked> for LockActor {
    type Result = ();

    /// The waits-for graph chose this waiter to break a cycle of waits.
    fn handle(&mut self, msg: Deadlocked, ctx: &mut Context<Self>) {
        let error = crate::error::LockError::Deadlock { cycle: msg.cycle };
        self.state.deadlocked(msg.waiter, error, Instant::now());
        shell::apply(self, ctx);
    }
}

impl Handler<Resubscribed> for LockActor {
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

impl Handler<HoldLost> for LockActor {
    type Result = ();

    fn handle(&mut self, msg: HoldLost, ctx: &mut Context<Self>) {
        if let Renewal::Lock(kind) = msg.kind {
            self.state
                .hold_lost(&(msg.holder, kind), msg.epoch, Instant::now());
            shell::apply(self, ctx);
        }
    }
}

impl Handler<StopLock> for LockActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: StopLock, ctx: &mut Context<Self>) -> Self::Result {
        shell::stop(self, |act| act.state.stop(msg.release, Instant::now()), ctx)
    }
}
