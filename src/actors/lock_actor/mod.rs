//! The lock actor: one per lock name in this process, for as long as that name is busy here.
//!
//! Its [`LockState`] holds every rule of the name (waiters, holds, epochs, hand-offs, retries);
//! the per-name shell (`actors::shell`) owns it, feeds it the events both families share and
//! carries out its effects, for the synchronizer actor as well. What is a lock's own is here:
//! taking [`Acquire`] and [`Release`] in, running its round trips (`round_trips`: futures its
//! ringer polls, so that a deadline or a departing caller is handled meanwhile; the state lets
//! one run at a time), answering with a [`Grant`]. It stops when idle a while (`shell::linger`).

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

use super::deadlock::seat::{Seat, Whose};
use super::lock_state::{Answer, HoldKey, LockState, Op, Outcome, Request, Settings};
use super::messages::*;
use super::name::WaiterId;
use super::name::effect::ReplyId;
use super::services::Services;
use super::shell::crowd::Caller;
use super::shell::reply::{Expecting, Taken, hand_or_refuse, take_in};
use super::shell::{self, PerName, Shell, trips::Trips};
use crate::error::{LockError, Owner};
use crate::metrics::Series;
use crate::protocol::LockKind;

type AcquireResult = Result<Option<Grant>, LockError>;
type AcquireTx = OneshotSender<AcquireResult>;
type ReleaseTx = OneshotSender<Result<(), LockError>>;

/// The actor of one lock name. Reach it through [`LockManager::lock_actor`](crate::LockManager::lock_actor)
/// and send it [`Acquire`] and [`Release`].
pub struct LockActor {
    shell: Shell<Self>,
    /// Its round trips in flight.
    trips: Trips<Op, Outcome>,
    /// Its place in the waits-for graph, while deadlocks are looked for.
    seat: Option<Seat>,
}

impl LockActor {
    /// The actor of lock `name`, serving the kinds of `family` (the family's first kind: both
    /// sides of a read-write lock go to one actor).
    pub(crate) fn new(
        id: u64,
        family: LockKind,
        name: Arc<str>,
        svc: Services,
        registry: WeakRecipient<Forget>,
    ) -> Self {
        let settings = Settings::of(&svc.config);
        let state = LockState::new(family, name.clone(), settings, Instant::now());
        let seat = Seat::new(&svc.deadlocks);
        let (cmds, key) = (svc.commands.for_one_task(), name.clone()); // `Trips` polls them all
        let trips = Trips::new(move |op| round_trips::trip(cmds.clone(), key.clone(), op));
        let shell = Shell::new((id, NameKind::Lock(family), name), svc, registry, state);
        Self { shell, trips, seat }
    }

    /// Releases the hold of `key` of this `epoch`; `reply` gets the outcome.
    fn release(&mut self, key: HoldKey, epoch: u64, reply: Option<ReplyId>) {
        self.shell.state.release(key, epoch, reply, Instant::now());
    }
}

shell::per_name_handlers!(LockActor);

impl PerName for LockActor {
    type State = LockState;
    type Tx = AcquireTx;
    type Reply = ReleaseTx;
    type Witness = Seat;
    const SERIES: Series = Series::Locks;
    const HEARS_WAITERS_ONLY: bool = true;

    fn shell(&mut self) -> &mut Shell<Self> {
        &mut self.shell
    }

    fn parts(&mut self) -> (&mut Shell<Self>, Option<&mut Seat>) {
        (&mut self.shell, self.seat.as_mut())
    }

    fn run(&mut self, op: Op, ctx: &mut Context<Self>) {
        Trips::start(self, op, ctx);
    }

    fn travel(&mut self, ctx: &mut Context<Self>, task: &mut std::task::Context<'_>) -> bool {
        Trips::drive(self, ctx, task)
    }

    /// A grant that reaches nobody comes back and its drop releases the hold.
    fn answer(
        &mut self,
        _: WaiterId,
        answer: Answer,
        caller: Option<Caller<AcquireTx>>,
        owner: Option<Owner>,
        ctx: &mut Context<Self>,
    ) -> bool {
        let reply = match answer {
            Answer::Granted {
                key,
                epoch,
                token,
                confirmed,
            } => {
                let waited = matches!(caller, Some(Caller::Watched(_)));
                let counted = (key.1.label(), 1.0);
                let hold = self.shell.receipt(epoch, counted, confirmed, waited, ctx);
                hold.lost.claim();
                if let Some(seat) = &mut self.seat {
                    seat.granted(epoch, owner, (&key.0, key.1), || hold.lost.claims());
                }
                let (holder, kind) = key;
                Ok(Some(Grant {
                    hold,
                    holder,
                    kind,
                    token,
                }))
            }
            Answer::TimedOut => Ok(None),
            Answer::Failed(e) => Err(e),
        };
        let Some(Err(Ok(Some(mut grant)))) = caller.map(|caller| caller.deliver(reply)) else {
            return false;
        };
        // The caller went as its grant came. Released now: dropped, the grant would send its
        // release behind the messages already queued, and an attempt of the same holder among
        // them would find the hold counted with no release of it known (a non-reentrant holder
        // is then refused as holding it already).
        let (key, epoch) = grant.disarm();
        self.release(key, epoch, None);
        true
    }

    fn reply(tx: ReleaseTx, res: Result<(), LockError>) {
        let _ = tx.send(res); // the caller may have gone
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
        let whose = Whose::of(msg.owner, msg.wait, &msg.holder, kind, msg.site);
        let req = Request {
            holder: msg.holder,
            kind,
            lease: msg.lease,
            wait: msg.wait,
        };
        AcquireReply(take_in(
            self,
            |act| {
                let id = act.shell.state.request(req, Instant::now());
                act.shell.coming(id, kind.label());
                if let (Some(seat), Some(whose)) = (&mut act.seat, whose) {
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
        let why = |name: &str| {
            format!("the grant of lock {name:?} was sent to the actor of another lock")
        };
        if let Err(e) = grant.hold.sent_back_to(self.shell.id, why) {
            return ReleaseReply(Err(e));
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
        hand_or_refuse(self.0, tx, |taken, tx| taken.hand_reply(ctx, tx));
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

impl Handler<HoldsOf> for LockActor {
    type Result = MessageResult<HoldsOf>;

    fn handle(&mut self, msg: HoldsOf, _: &mut Context<Self>) -> Self::Result {
        let holds = self
            .seat
            .as_ref()
            .map(|s| s.holds_of(&msg.owners, &self.shell.name));
        MessageResult(holds.unwrap_or_default())
    }
}

impl Handler<StillWaiting> for LockActor {
    type Result = bool;

    fn handle(&mut self, msg: StillWaiting, _: &mut Context<Self>) -> bool {
        shell::still_waiting(self, msg.waiter) && self.shell.state.is_waiting(msg.waiter)
    }
}

impl Handler<Deadlocked> for LockActor {
    type Result = ();

    /// The waits-for graph chose this waiter to break a cycle of waits.
    fn handle(&mut self, msg: Deadlocked, ctx: &mut Context<Self>) {
        (self.shell.state).deadlocked(msg.waiter, msg.cycle, Instant::now());
        shell::apply(self, ctx);
    }
}
