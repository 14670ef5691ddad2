//! The lock actor: one per lock name in this process, for as long as that name is busy here.
//!
//! It is the shell of a [`LockState`], which holds every rule of the name (waiters, holds,
//! epochs, hand-offs, retries): each message or timer becomes an event for the state, and the
//! actor carries out the effects that come back — a script on the command connection, a reply,
//! a subscription, a timer, a word to the Watchdog. Round trips run as spawned futures, so a
//! deadline or a departing caller is handled while one is under way; the state lets only one
//! run at a time.
//!
//! It stops itself when it has been idle a while: while it has a hold, a waiter or a round trip
//! it keeps a strong address to itself (`keepalive`). When all are gone it **lingers**
//! ([`Config::idle_linger`](crate::Config::idle_linger), a place among the manager's
//! [`max_lingering`](crate::Config::max_lingering)) so that a name used again soon reuses it —
//! starting an actor costs about a third of an uncontended acquire+release — and then drops the
//! address; actix stops an actor once no strong address is left, its mailbox is empty and no
//! timer is armed. Anyone still holding an address (a grant, an actix user) keeps it alive, so no
//! message is ever sent to a stopped actor by mistake; a sender that loses the race with the stop
//! gets `MailboxError::Closed` for a message that was never handled, and resolves the name
//! again.

mod effects;
mod grant;
mod pumps;
mod requests;

pub use grant::Grant;
pub use requests::{Acquire, Release};

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use actix::WeakRecipient;
use actix::dev::{MessageResponse, OneshotSender};
use actix::prelude::*;
use rustc_hash::FxHashMap;
use tokio::sync::{oneshot, watch};

use super::lock_state::{Answer, Effect, LockState, ReplyId, Request, Settings, Timer, WaiterId};
use super::messages::*;
use super::name::linger::{Linger, Lingers};
use super::name::lost::Validity;
use super::services::Services;
use crate::actors::name::crowd::{Caller, Crowd};
use crate::error::LockError;
use crate::metrics;
use crate::protocol::LockKind;

type AcquireResult = Result<Option<Grant>, LockError>;
type AcquireTx = OneshotSender<AcquireResult>;
type ReleaseTx = OneshotSender<Result<(), LockError>>;

/// The actor of one lock name. Reach it through [`LockManager::lock_actor`](crate::LockManager::lock_actor)
/// and send it [`Acquire`] and [`Release`].
pub struct LockActor {
    /// Tells this actor apart from every other lock actor of the process (earlier and later
    /// ones of the same name, other managers').
    id: u64,
    family: LockKind,
    name: Arc<str>,
    svc: Services,
    registry: WeakRecipient<Forget>,
    state: LockState,
    /// The callers of waiting requests, by waiter, with their kind and arrival (for metrics).
    waiting: FxHashMap<WaiterId, (Caller<AcquireTx>, LockKind, metrics::Since)>,
    /// The watched callers and the waiters' deadlines, served by one future (`pumps`).
    crowd: Crowd<AcquireTx>,
    /// The senders of releases under way.
    releasing: FxHashMap<ReplyId, ReleaseTx>,
    next_reply: ReplyId,
    /// Timers of the actor or of a hold (retry, renewal hand-over, lease expiry): actix timers.
    singles: FxHashMap<Timer, SpawnHandle>,
    /// Each hold's lost signal, kind and validity, by epoch; its guards hold the receivers.
    lost: FxHashMap<u64, (watch::Sender<bool>, LockKind, Validity)>,
    /// A strong address to itself while busy or lingering (see the module doc).
    keepalive: Option<Arc<Addr<Self>>>,
    /// Its lingering while idle (see the module doc).
    linger: Linger,
    /// Who waits for a requested stop.
    stop_replies: Vec<oneshot::Sender<()>>,
    /// The effects being carried out (a buffer kept between events).
    effects: Vec<Effect>,
    /// When each waiter that actually waits (a watched caller) began waiting: for the
    /// manager's [`Board`](crate::actors::board::Board). Empty while nobody waits.
    waits_began: FxHashMap<WaiterId, Instant>,
    /// Reply senders on their way in (see [`Handed`]); taken in at the actor's next step.
    handed: Rc<RefCell<Vec<Handed>>>,
    /// The request being handled, while its handler carries out its first effects: its
    /// caller's reply sender is not here yet.
    expecting: Option<Expecting>,
    /// Effects held back for the caller of `expecting` (an answer, a watch, a release's
    /// outcome), and every effect after the first of them, in order: carried out once its
    /// reply sender is here.
    held: Vec<Effect>,
}

/// A request's reply sender on its way to the actor. actix gives it to the handler's reply
/// ([`MessageResponse::handle`], run right after the handler and without the actor), not to
/// the handler: the handler takes the request in at once and the reply leaves its sender here,
/// so a request costs no second pass through the actor's context (a boxed future each).
enum Handed {
    /// Waiter `id`'s caller; `None` when it was sent with `do_send` (nobody to answer).
    Acquire(WaiterId, Option<AcquireTx>),
    /// Release `id`'s caller.
    Release(ReplyId, Option<ReleaseTx>),
}

/// Whose reply sender the handler being run waits for.
#[derive(Clone, Copy)]
enum Expecting {
    Acquire(WaiterId),
    Release(ReplyId),
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
        };
        Self {
            id,
            family,
            state: LockState::new(family, name.clone(), settings, Instant::now()),
            name,
            svc,
            registry,
            waiting: FxHashMap::default(),
            crowd: Crowd::default(),
            releasing: FxHashMap::default(),
            next_reply: 0,
            singles: FxHashMap::default(),
            lost: FxHashMap::default(),
            keepalive: None,
            linger: Linger::default(),
            stop_replies: Vec::new(),
            effects: Vec::new(),
            waits_began: FxHashMap::default(),
            handed: Rc::default(),
            expecting: None,
            held: Vec::new(),
        }
    }

    /// Carries out what the state asked for, in order (into a buffer kept between calls);
    /// first takes in the reply senders handed over since the last step.
    fn apply(&mut self, ctx: &mut Context<Self>) {
        self.adopt(ctx, true);
        let mut effects = std::mem::take(&mut self.effects);
        self.state.drain_into(&mut effects);
        for effect in effects.drain(..) {
            if self.holds_back(&effect) {
                self.held.push(effect);
            } else {
                self.effect(effect, ctx);
            }
        }
        self.effects = effects;
    }

    /// Whether `effect` waits for the reply sender of the request being handled: it is
    /// addressed to that caller, or comes after one that is (effects keep their order).
    fn holds_back(&self, effect: &Effect) -> bool {
        if !self.held.is_empty() {
            return true;
        }
        match (self.expecting, effect) {
            (Some(Expecting::Acquire(id)), Effect::Answer(to, _) | Effect::Watch(to)) => *to == id,
            (Some(Expecting::Release(id)), Effect::ReleaseDone(to, _)) => *to == id,
            _ => false,
        }
    }

    /// Takes in the reply senders handed over (see [`Handed`]); `leave`: a request sent with
    /// `do_send` leaves at once (not while stopping: the stop answers every waiter).
    fn adopt(&mut self, ctx: &mut Context<Self>, leave: bool) {
        // Popped one at a time: the buffer keeps its capacity (no allocation per request), and
        // is not borrowed while a caller's leaving is carried out.
        loop {
            let Some(sender) = self.handed.borrow_mut().pop() else {
                return;
            };
            match sender {
                Handed::Acquire(id, Some(tx)) => {
                    if let Some((caller, _, _)) = self.waiting.get_mut(&id) {
                        *caller = Caller::Unwatched(tx);
                    }
                }
                // `do_send` leaves nobody to hand a grant to: the waiter leaves (a grant
                // already on its way comes back and its drop releases the hold).
                Handed::Acquire(id, None) if leave => self.caller_gone(id, ctx),
                Handed::Acquire(_, None) => {}
                Handed::Release(id, Some(tx)) => {
                    self.releasing.insert(id, tx);
                }
                Handed::Release(_, None) => {}
            }
        }
    }

    /// The effects held back for a caller whose reply sender is now here (and any that a
    /// `do_send` request's leaving adds behind them, in order).
    fn resume(&mut self, ctx: &mut Context<Self>) {
        self.adopt(ctx, true);
        // Drained from the buffer kept between events (`effects`, empty between events), so
        // that neither buffer is allocated again per contended request.
        let mut held = std::mem::take(&mut self.effects);
        std::mem::swap(&mut held, &mut self.held);
        for effect in held.drain(..) {
            self.effect(effect, ctx);
        }
        self.effects = held;
        self.apply(ctx);
    }

    /// Answers waiter `id`'s caller. A grant that reaches nobody comes back and its drop
    /// releases the hold.
    fn answer(&mut self, id: WaiterId, answer: Answer, ctx: &mut Context<Self>) {
        self.wait_over(id);
        let caller = self.waiting.remove(&id);
        let outcome = match &answer {
            Answer::Granted { .. } => "acquired",
            Answer::TimedOut => "timed_out",
            Answer::Failed(_) => "failed",
        };
        if let Some((_, kind, since)) = &caller {
            metrics::waiters(*kind, -1.0);
            metrics::answered(*kind, outcome, *since);
        }
        let waited = matches!(&caller, Some((Caller::Watched(_), _, _)));
        let reply = match answer {
            Answer::Granted { key, epoch, token } => {
                let (lost, _, validity) = self.lost.entry(epoch).or_insert_with(|| {
                    metrics::holds(key.1, 1.0);
                    (watch::channel(false).0, key.1, Validity::new())
                });
                if let Some((sent, ttl)) = self.state.granted_at(&key, epoch) {
                    validity.confirm(sent, ttl);
                }
                let lost = crate::actors::name::lost::LostSignal::new(lost.subscribe(), validity);
                Ok(Some(Grant::new(
                    (self.link(ctx), self.id),
                    self.name.clone(),
                    key,
                    epoch,
                    lost,
                    (token, waited),
                )))
            }
            Answer::TimedOut => Ok(None),
            Answer::Failed(e) => Err(e),
        };
        if let Some((caller, _, _)) = caller {
            caller.send(reply);
        }
    }

    /// Takes request `msg` in (its caller's reply sender follows, see [`Handed`]).
    fn request(&mut self, msg: Acquire, ctx: &mut Context<Self>) -> WaiterId {
        let kind = msg.kind;
        let req = Request {
            holder: msg.holder,
            kind,
            lease: msg.lease,
            wait: msg.wait,
        };
        let id = self.state.request(req, Instant::now());
        metrics::waiters(kind, 1.0);
        self.waiting
            .insert(id, (Caller::Coming, kind, metrics::Since::now()));
        self.expecting = Some(Expecting::Acquire(id));
        self.apply(ctx);
        self.expecting = None;
        id
    }

    /// Releases a hold; `reply` gets the outcome (its reply sender follows, see [`Handed`]).
    fn release(
        &mut self,
        (key, epoch): (super::lock_state::HoldKey, u64),
        reply: Option<ReplyId>,
        ctx: &mut Context<Self>,
    ) {
        self.state.release(key, epoch, reply, Instant::now());
        self.expecting = reply.map(Expecting::Release);
        self.apply(ctx);
        self.expecting = None;
    }
}

impl Actor for LockActor {
    type Context = Context<Self>;

    fn stopped(&mut self, ctx: &mut Self::Context) {
        self.adopt(ctx, false);
        Linger::stopped(self);
        if let Some(registry) = self.registry.upgrade() {
            registry.do_send(Forget {
                family: self.family,
                name: self.name.clone(),
                id: self.id,
            });
        }
        self.state.abandon();
        // Effects still held back for a reply sender (none, normally: they are carried out
        // before anything else) come first.
        let mut effects = std::mem::take(&mut self.held);
        self.state.drain_into(&mut effects);
        for effect in effects {
            match effect {
                Effect::Answer(id, answer) => self.answer(id, answer, ctx),
                Effect::Unsubscribe(_) | Effect::Untrack { .. } | Effect::ReleaseDone(..) => {
                    self.effect(effect, ctx)
                }
                _ => {}
            }
        }
        for (_, tx) in self.releasing.drain() {
            let _ = tx.send(Err(LockError::Shutdown));
        }
        tracing::trace!(lock = %self.name, id = self.id, "lock actor stopped");
    }
}

/// The reply to an [`Acquire`]: delivered when the lock is granted, the wait ends or it fails.
/// The handler has taken the request in; this leaves the caller's reply sender for the actor,
/// so nothing blocks the actor meanwhile.
pub struct AcquireReply {
    id: WaiterId,
    handed: Rc<RefCell<Vec<Handed>>>,
    /// Effects wait for the sender (an answer at once): the actor takes it in before anything
    /// else.
    held: bool,
}

impl Handler<Acquire> for LockActor {
    type Result = AcquireReply;

    fn handle(&mut self, msg: Acquire, ctx: &mut Context<Self>) -> AcquireReply {
        let id = self.request(msg, ctx);
        AcquireReply {
            id,
            handed: self.handed.clone(),
            held: !self.held.is_empty(),
        }
    }
}

impl MessageResponse<LockActor, Acquire> for AcquireReply {
    fn handle(self, ctx: &mut Context<LockActor>, tx: Option<AcquireTx>) {
        hand_over(ctx, &self.handed, Handed::Acquire(self.id, tx), self.held);
    }
}

/// Leaves a reply sender for the actor; when effects wait for it, the actor takes it in before
/// anything else (the one case that costs a pass through its context).
fn hand_over(
    ctx: &mut Context<LockActor>,
    handed: &Rc<RefCell<Vec<Handed>>>,
    sender: Handed,
    held: bool,
) {
    handed.borrow_mut().push(sender);
    if held {
        ctx.wait(actix::fut::ready(()).map(|(), act: &mut LockActor, ctx| act.resume(ctx)));
    }
}

/// The reply to a [`Release`]: delivered once Redis answered.
pub struct ReleaseReply(Releasing);

enum Releasing {
    /// Taken in as release `id`.
    Taken {
        id: ReplyId,
        handed: Rc<RefCell<Vec<Handed>>>,
        held: bool,
    },
    /// Refused at once.
    Refused(LockError),
}

impl Handler<Release> for LockActor {
    type Result = ReleaseReply;

    fn handle(&mut self, Release(mut grant): Release, ctx: &mut Context<Self>) -> ReleaseReply {
        // A grant sent to another lock's actor is refused; still armed, it releases its hold
        // through its own actor when it is dropped here.
        if !grant.granted_by(self.id) {
            return ReleaseReply(Releasing::Refused(LockError::invalid(
                "release",
                format!(
                    "the grant of lock {:?} was sent to the actor of another lock",
                    grant.name()
                ),
            )));
        }
        self.next_reply += 1;
        let id = self.next_reply;
        self.release(grant.disarm(), Some(id), ctx);
        ReleaseReply(Releasing::Taken {
            id,
            handed: self.handed.clone(),
            held: !self.held.is_empty(),
        })
    }
}

impl MessageResponse<LockActor, Release> for ReleaseReply {
    fn handle(self, ctx: &mut Context<LockActor>, tx: Option<ReleaseTx>) {
        match self.0 {
            Releasing::Taken { id, handed, held } => {
                hand_over(ctx, &handed, Handed::Release(id, tx), held)
            }
            Releasing::Refused(refused) => {
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
        self.release(((msg.holder, msg.kind), msg.epoch), None, ctx);
    }
}

impl Handler<Unlocked> for LockActor {
    type Result = ();

    fn handle(&mut self, msg: Unlocked, ctx: &mut Context<Self>) {
        let all = crate::protocol::keys::wakes_all(msg.count);
        self.state.unlocked(all, &msg.channel, Instant::now());
        self.apply(ctx);
    }
}

impl Handler<Resubscribed> for LockActor {
    type Result = ();

    fn handle(&mut self, _: Resubscribed, ctx: &mut Context<Self>) {
        self.state.resubscribed(Instant::now());
        self.apply(ctx);
    }
}

impl Handler<HoldLost> for LockActor {
    type Result = ();

    fn handle(&mut self, msg: HoldLost, ctx: &mut Context<Self>) {
        if let Renewal::Lock(kind) = msg.kind {
            self.state
                .hold_lost(&(msg.holder, kind), msg.epoch, Instant::now());
            self.apply(ctx);
        }
    }
}

impl Handler<StopLock> for LockActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: StopLock, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        self.stop_replies.push(tx);
        self.state.stop(msg.release, Instant::now());
        self.apply(ctx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

impl LockActor {
    /// Waiter `id`'s caller dropped its request: the waiter leaves.
    fn caller_gone(&mut self, id: WaiterId, ctx: &mut Context<Self>) {
        if !self.state.is_waiting(id) {
            // Answered soon (a fair waiter leaving the queue): its answer finds nobody.
            return;
        }
        self.wait_over(id);
        if let Some((_, kind, since)) = self.waiting.remove(&id) {
            metrics::waiters(kind, -1.0);
            metrics::answered(kind, "abandoned", since);
        }
        self.state.caller_gone(id, Instant::now());
        self.apply(ctx);
    }
}

impl Lingers for LockActor {
    fn linger(&mut self) -> &mut Linger {
        &mut self.linger
    }

    fn services(&self) -> &Services {
        &self.svc
    }

    /// Cancels its last timer (the hand-over tick, through the state) and drops its own
    /// address.
    fn depart(&mut self, ctx: &mut Context<Self>) {
        self.state.retire();
        self.apply(ctx);
        self.keepalive = None;
    }
}

impl LockActor {
    /// Something arrived: stay (the strong address is still there when it lingered).
    fn busy(&mut self, ctx: &mut Context<Self>) {
        Linger::busy(self);
        self.link(ctx);
    }

    /// Its own strong address, shared: made once per stay (each actix address made or cloned
    /// allocates), kept while busy or lingering.
    fn link(&mut self, ctx: &mut Context<Self>) -> Arc<Addr<Self>> {
        self.keepalive
            .get_or_insert_with(|| Arc::new(ctx.address()))
            .clone()
    }
}
