//! The per-name shell: what every per-name actor does, whatever its family. It owns the
//! actor's state and drives it through the events both families take ([`NameState`]): timers,
//! subscriptions, channel messages, the pub/sub connection's losses, lost holds, callers
//! leaving, the stop (one set of handlers for both, [`per_name_handlers`]). A lock actor
//! (`lock_actor/`) and a synchronizer actor (`sync_actor/`) are adapters: they take requests
//! in, run their family's round trips and build its answers ([`PerName`]); everything else
//! their state asks for ([`Effect`]) is carried out here, once for both:
//!
//! - timers: a waiter's deadline in the actor's [`Crowd`], which also watches its caller; the
//!   next timer of the state's table, which holds every other ([`NameState::next_timeout`]), on
//!   the actor's one [`Alarm`];
//! - the channel subscriptions, through the [`PubSubActor`](crate::actors::pubsub::PubSubActor);
//! - holds handed to the Watchdog and taken back, their lost signals and validity (`actors::lost`),
//!   and the metric series of waiters, holds and losses;
//! - who waits on the name, on the manager's [`Board`](crate::actors::board::Board) (client
//!   records, `lockman top`), for every waiter left waiting; and, to the actor's [`Witness`]
//!   when its family keeps one ([`PerName::parts`]), when a wait begins and ends, a hold ends,
//!   an event is settled and the actor stops;
//! - what a grant keeps of its hold, alike for both families (`receipt`);
//! - the reply senders of requests (`reply`), lingering while idle (`linger`) and the stop;
//!   the effects an uncontended request never sees are carried out of line (`rare`).
//!
//! It is code generic over [`PerName`], not a generic actor: `LockActor` and `SyncActor` stay
//! concrete types, as [`Crowded`] and [`Lingers`](linger::Lingers) already were.

pub(crate) mod alarm;
pub(crate) mod crowd;
mod driver;
pub(crate) mod linger;
mod rare;
pub(crate) mod receipt;
pub(crate) mod reply;
pub(crate) mod trips;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use actix::WeakRecipient;
use actix::prelude::*;
use tokio::sync::oneshot;

use crate::actors::lost::{Raiser, Spare};
use crate::actors::messages::{
    Forget, Hearing, HoldLost, Listener, NameKind, Resubscribed, Subscribe, Track, Unlocked,
    Untrack,
};
use crate::actors::name::effect::{Effect, Family, ReplyId};
use crate::actors::name::few::Few;
use crate::actors::name::state::NameState;
use crate::actors::name::witness::Witness;
use crate::actors::name::{Loss, WaiterId};
use crate::actors::services::Services;
use crate::error::{LockError, Owner};
use crate::metrics::{Series, Since};
use alarm::Alarm;
use crowd::{Caller, Crowd, Crowded, Sender};
use linger::Linger;
use reply::{Expecting, Handed};

/// The family of an actor of type `A`.
pub(crate) type FamilyOf<A> = <<A as PerName>::State as NameState>::Family;
/// An effect, as an actor of type `A`'s state emits it.
pub(crate) type EffectOf<A> = Effect<FamilyOf<A>>;

/// A per-name actor: the shell of one per-name state, with what its family does its own way.
/// The handlers of the messages every per-name actor takes are the shell's
/// ([`per_name_handlers`]).
pub(crate) trait PerName:
    Actor<Context = Context<Self>> + Handler<Unlocked> + Handler<Resubscribed> + Handler<HoldLost>
{
    /// Its state, which the shell owns and drives.
    type State: NameState;
    /// How a waiter's caller is answered.
    type Tx: Sender;
    /// How a release's (or an adjustment's) caller is answered.
    type Reply: 'static;
    /// What its family keeps of its waits and holds beside the shell.
    type Witness: Witness<Context<Self>>;
    /// The metric series it reports to.
    const SERIES: Series;
    /// Whether its channels' messages reach it only while a caller waits ([`Shell::hearing`]):
    /// a lock's (nothing but a waiter acts on one); a synchronizer hears each.
    const HEARS_WAITERS_ONLY: bool = false;

    /// Its shell, which owns its state.
    fn shell(&mut self) -> &mut Shell<Self>;
    /// Its shell, and its witness when it keeps one (`None` by default).
    fn parts(&mut self) -> (&mut Shell<Self>, Option<&mut Self::Witness>) {
        (self.shell(), None)
    }

    /// Starts one round trip; its outcome goes back to the state.
    fn run(&mut self, op: <FamilyOf<Self> as Family>::Op, ctx: &mut Context<Self>);
    /// Polls its round trips in flight when the actor's ringer runs them (`trips`), and takes
    /// in their outcomes: whether any is still in flight.
    fn travel(&mut self, _: &mut Context<Self>, _: &mut std::task::Context<'_>) -> bool {
        false
    }
    /// Answers waiter `id`'s caller (`None` when it is gone), whose waits and holds belong to
    /// `owner`: the shell has taken the waiter off its books already. True when it told the
    /// state more (a grant its caller did not take, released at once): the shell then takes
    /// the state's effects again.
    fn answer(
        &mut self,
        id: WaiterId,
        answer: <FamilyOf<Self> as Family>::Answer,
        caller: Option<Caller<Self::Tx>>,
        owner: Option<Owner>,
        ctx: &mut Context<Self>,
    ) -> bool;
    /// Tells a release's (or an adjustment's) caller how it went.
    fn reply(tx: Self::Reply, res: Result<<FamilyOf<Self> as Family>::Done, LockError>);
}

/// A waiting request's caller, and its kind's label and its arrival (for the metrics).
pub(crate) struct Waiting<T> {
    pub caller: Caller<T>,
    pub kind: &'static str,
    pub since: Since,
}

/// A hold's lost signal, by epoch: its guards hold the receivers. Dropped (the hold ended), it
/// raises the loss: a released hold reads as lost.
pub(crate) struct Signal {
    /// Also the hold's validity, made from it when the Watchdog needs it.
    pub lost: Raiser,
    /// Its kind's label, and how much it counts in the held series (a hold, or its permits).
    kind: &'static str,
    amount: f64,
}

/// What the shell keeps of one per-name actor.
pub(crate) struct Shell<A: PerName> {
    /// The name's rules.
    pub state: A::State,
    /// Tells this actor apart from every other per-name actor of the process (earlier and later
    /// ones of the same name, other managers').
    pub id: u64,
    /// Which actor it is, and the name's key in Redis: what the registry knows it by.
    kind: NameKind,
    pub name: Arc<str>,
    pub svc: Services,
    /// Told when the actor stopped.
    registry: WeakRecipient<Forget>,
    /// The callers of waiting requests, by waiter.
    pub waiting: Few<WaiterId, Waiting<A::Tx>>,
    /// On while `waiting` has a caller: when the family hears its channels only then
    /// ([`PerName::HEARS_WAITERS_ONLY`]), the PubSubActor drops their messages while it is off.
    /// A lock's actor that keeps its channel with nobody waiting would hear every release of
    /// the name, its own among them; and one taken in after a new request (the message of the
    /// caller's own last release, read late) would wake its waiter to a second attempt.
    hearing: Hearing,
    /// The watched callers and the waiters' deadlines, served by one future.
    crowd: Crowd<A::Tx>,
    /// The senders of releases (and adjustments) under way.
    pub replies: Few<ReplyId, A::Reply>,
    next_reply: ReplyId,
    /// The state's timer table's next instant, on one timer.
    alarm: Alarm,
    /// Each hold's lost signal, by epoch.
    pub signals: Few<u64, Signal>,
    /// The cells of the last hold released that nobody held any more, for the next hold.
    pub spare: Spare,
    /// A strong address to itself while busy or lingering: actix stops an actor once no strong
    /// address is left, its mailbox is empty and no timer is armed. Shared with its grants
    /// (each actix address made or cloned allocates).
    keepalive: Option<Arc<Addr<A>>>,
    /// Its lingering while idle.
    linger: Linger,
    /// Who waits for a requested stop.
    stop_replies: Vec<oneshot::Sender<()>>,
    /// The effects being carried out (a buffer kept between events).
    effects: Vec<EffectOf<A>>,
    /// When each waiter that actually waits (a watched caller) began waiting: for the board.
    /// Empty while nobody waits.
    waits_began: Few<WaiterId, Instant>,
    /// Reply senders on their way in, and the effects held back for them (`reply`).
    handed: Rc<RefCell<Vec<Handed<A>>>>,
    expecting: Option<Expecting>,
    held: Vec<EffectOf<A>>,
}

impl<A: PerName> Shell<A> {
    pub(crate) fn new(
        (id, kind, name): (u64, NameKind, Arc<str>),
        svc: Services,
        registry: WeakRecipient<Forget>,
        state: A::State,
    ) -> Self {
        Self {
            state,
            id,
            kind,
            name,
            svc,
            registry,
            waiting: Few::default(),
            hearing: Hearing::default(),
            crowd: Crowd::default(),
            replies: Few::default(),
            next_reply: 0,
            alarm: Alarm::default(),
            signals: Few::default(),
            spare: Spare::default(),
            keepalive: None,
            linger: Linger::default(),
            stop_replies: Vec::new(),
            effects: Vec::new(),
            waits_began: Few::default(),
            handed: Rc::default(),
            expecting: None,
            held: Vec::new(),
        }
    }

    /// A new waiter's caller, whose reply sender is on its way (`reply`).
    pub(crate) fn coming(&mut self, id: WaiterId, kind: &'static str) {
        A::SERIES.waiters(kind, 1.0);
        // On before its first attempt is sent (the actor's ringer sends it after the handler).
        self.hearing.set(true);
        self.waiting.insert(
            id,
            Waiting {
                caller: Caller::Coming,
                kind,
                since: Since::now(),
            },
        );
    }

    /// A waiter left: hearing goes off once no caller waits.
    fn heard_out(&mut self) {
        if self.waiting.is_empty() {
            self.hearing.set(false);
        }
    }

    /// A number for a release's (or an adjustment's) reply.
    pub(crate) fn next_reply(&mut self) -> ReplyId {
        self.next_reply += 1;
        self.next_reply
    }

    /// Its own strong address, shared: made once per stay, kept while busy or lingering.
    pub(crate) fn link(&mut self, ctx: &mut Context<A>) -> Arc<Addr<A>> {
        self.keep(ctx).clone()
    }

    /// Keeps its own strong address (made once per stay), with no share of it taken.
    fn keep(&mut self, ctx: &mut Context<A>) -> &Arc<Addr<A>> {
        self.keepalive
            .get_or_insert_with(|| Arc::new(ctx.address()))
    }
}

/// Waiter `id`'s wait is over (answered, or its caller left): off the board, and the witness
/// told. Returns whose request it was, when the witness knows.
fn wait_over<A: PerName>(act: &mut A, id: WaiterId) -> Option<Owner> {
    let (shell, witness) = act.parts();
    if let Some(began) = shell.waits_began.remove(&id) {
        shell.svc.board.wait_ended(&shell.name, began);
    }
    witness?.wait_over(shell.id, id)
}

/// The hold of `epoch` ended: its signal's series, and the witness told.
fn ended<A: PerName>(act: &mut A, epoch: u64) -> Option<Signal> {
    let (shell, witness) = act.parts();
    if let Some(witness) = witness {
        witness.hold_ended(epoch);
    }
    let signal = shell.signals.remove(&epoch)?;
    A::SERIES.held(signal.kind, -signal.amount);
    Some(signal)
}

/// The hold of `epoch` is gone without its release: its guards learn it.
#[cold]
fn lose<A: PerName>(act: &mut A, epoch: u64, loss: Loss) {
    // Counted before the guard is told: whoever the guard wakes reads the counters
    // already moved.
    if let Some(signal) = ended(act, epoch) {
        A::SERIES.lost(signal.kind, loss.label());
        signal.lost.raise();
    }
}

/// Carries out what the state asked for, in order (into a buffer kept between calls); first
/// takes in the reply senders handed over since the last step. An effect addressed to the
/// caller of the request being handled waits for its reply sender (`reply`).
pub(crate) fn apply<A: PerName>(act: &mut A, ctx: &mut Context<A>) {
    reply::adopt(act, ctx, true);
    let mut effects = std::mem::take(&mut act.shell().effects);
    // Drained again only when an answer may have told the state more (a gone caller's grant).
    loop {
        act.shell().state.drain_into(&mut effects);
        let mut told = false;
        for effect in effects.drain(..) {
            if reply::holds_back(act.shell(), &effect) {
                act.shell().held.push(effect);
            } else {
                told |= perform(act, effect, ctx);
            }
        }
        if !told {
            break;
        }
    }
    act.shell().effects = effects;
    let next = act.shell().state.next_timeout();
    Alarm::set(act, next, ctx);
    let (shell, witness) = act.parts();
    if let Some(witness) = witness {
        witness.settled(&shell.name, shell.id);
    }
}

/// Carries out one effect; true when it told the state more, unapplied (only an answer: a grant
/// whose caller is gone is released at once), so that [`apply`] drains it again.
/// Inlined where the effects are taken: an effect is then not copied again to be handed over
/// (it is about a hundred bytes), nor a call made per effect.
#[inline(always)]
pub(crate) fn perform<A: PerName>(act: &mut A, effect: EffectOf<A>, ctx: &mut Context<A>) -> bool {
    match effect {
        Effect::Run(op) => act.run(op, ctx),
        Effect::Answer(id, answer) => return answer_waiter(act, id, answer, ctx),
        Effect::Done(id, res) => {
            if let Some(tx) = act.shell().replies.remove(&id) {
                A::reply(tx, res);
            }
        }
        // Its signal ended: a released hold reads as lost (its cells kept for the next hold
        // when nobody else holds them).
        Effect::Ended(epoch) => {
            if let Some(signal) = ended(act, epoch) {
                signal.lost.end(&mut act.shell().spare);
            }
        }
        Effect::Busy => {
            Linger::busy(act);
            act.shell().keep(ctx);
        }
        Effect::Idle => {
            // Kept alive by its own address while it lingers (round trips may have kept it so
            // far, with no hold or waiter that took the address).
            if act.shell().linger.is_busy() {
                act.shell().keep(ctx);
            }
            Linger::idle(act, ctx);
        }
        // Every watched hold's (the default): out of line already.
        Effect::Track {
            hold,
            epoch,
            confirmed,
        } => track(act, &hold, epoch, Some(confirmed), ctx),
        Effect::Untrack { hold, epoch } => track(act, &hold, epoch, None, ctx),
        rare => rare::perform_rare(act, rare, ctx),
    }
    false
}

/// Hands the hold of `epoch` to the Watchdog for renewal (`confirmed`: when Redis last set its
/// PTTL), or takes it back (`None`).
#[inline(never)]
fn track<A: PerName>(
    act: &mut A,
    hold: &<FamilyOf<A> as Family>::Hold,
    epoch: u64,
    confirmed: Option<Instant>,
    ctx: &mut Context<A>,
) {
    let shell = act.shell();
    let (holder, kind) = shell.state.renewal(hold);
    let name = shell.name.clone();
    let Some(confirmed) = confirmed else {
        shell.svc.watchdog.do_send(Untrack {
            name,
            holder,
            kind,
            epoch,
        });
        return;
    };
    shell.svc.watchdog.do_send(Track {
        name,
        holder,
        kind,
        epoch,
        confirmed,
        validity: shell.signals.get(&epoch).map(|s| s.lost.validity()),
        actor: ctx.address().recipient::<HoldLost>().downgrade(),
    });
}

/// Answers waiter `id`: off the books (metrics, board, deadline), then its family's answer.
/// True when that told the state more ([`PerName::answer`]).
fn answer_waiter<A: PerName>(
    act: &mut A,
    id: WaiterId,
    answer: <FamilyOf<A> as Family>::Answer,
    ctx: &mut Context<A>,
) -> bool {
    let outcome = act.shell().state.outcome(&answer);
    let owner = wait_over(act, id);
    let shell = act.shell();
    shell.crowd.disarm(id);
    let caller = shell.waiting.remove(&id).map(|w| {
        A::SERIES.waiters(w.kind, -1.0);
        A::SERIES.answered(w.kind, outcome, w.since);
        w.caller
    });
    shell.heard_out();
    act.answer(id, answer, caller, owner, ctx)
}

/// Watches waiter `id`'s caller from now on (`Effect::Watch`): a watched caller is one that
/// waits, so it goes on the board.
#[inline(never)]
fn watch<A: PerName>(act: &mut A, id: WaiterId, ctx: &mut Context<A>) {
    let shell = act.shell();
    let Some(mut waiting) = shell.waiting.remove(&id) else {
        return;
    };
    // A watch for a caller whose reply sender is still on its way is held back until it is
    // here (`reply`).
    debug_assert!(
        !matches!(waiting.caller, Caller::Coming),
        "watch before the sender came"
    );
    waiting.caller = shell.crowd.watch(id, waiting.caller, ctx);
    shell.waiting.insert(id, waiting);
    let now = Instant::now();
    if shell.waits_began.contains_key(&id) {
        return;
    }
    shell.waits_began.insert(id, now);
    shell.svc.board.wait_began(&shell.name, now);
    let (shell, witness) = act.parts();
    if let Some(witness) = witness {
        witness.wait_began(&shell.name, shell.id, id, now, ctx);
    }
}

/// Whether waiter `id` still waits, with its caller there (a caller that dropped its request
/// may not have been reported yet: asked before a wait is broken).
pub(crate) fn still_waiting<A: PerName>(act: &mut A, id: WaiterId) -> bool {
    let shell = act.shell();
    shell.waits_began.contains_key(&id)
        && shell.waiting.get(&id).is_some_and(|w| !w.caller.is_gone())
}

/// Waiter `id`'s caller dropped its request: the waiter leaves.
#[cold]
pub(crate) fn caller_gone<A: PerName>(act: &mut A, id: WaiterId, ctx: &mut Context<A>) {
    if act.shell().state.caller_left(id, Instant::now()) {
        wait_over(act, id);
        let shell = act.shell();
        shell.crowd.disarm(id);
        if let Some(w) = shell.waiting.remove(&id) {
            A::SERIES.waiters(w.kind, -1.0);
            A::SERIES.answered(w.kind, "abandoned", w.since);
        }
        shell.heard_out();
    }
    apply(act, ctx);
}

/// Waiters whose callers dropped their requests before this message leave first: called before
/// an event that may hand the lock to a waiter (a release, a wake), so that the lock (and, for
/// a fenced lock, a term) never goes to a caller already gone (`Crowd::gone_now`).
pub(crate) fn gone_first<A: PerName>(act: &mut A, ctx: &mut Context<A>) {
    for id in act.shell().crowd.gone_now() {
        caller_gone(act, id, ctx);
    }
}

/// Routes `channel` here and subscribes it; the state learns how it went.
#[inline(never)]
fn subscribe<A: PerName>(act: &mut A, channel: Arc<str>, ctx: &mut Context<A>) {
    let shell = act.shell();
    let hearing = A::HEARS_WAITERS_ONLY.then(|| shell.hearing.clone());
    let actor = Listener::of(&ctx.address(), hearing);
    let request = shell.svc.pubsub.send(Subscribe {
        channel: channel.to_string(),
        id: shell.id,
        actor,
    });
    ctx.spawn(request.into_actor(act).map(move |res, act, ctx| {
        let ok = matches!(res, Ok(Ok(())));
        act.shell().state.subscribed(&channel, ok, Instant::now());
        apply(act, ctx);
    }));
}

/// Asks the actor to stop (releasing its holds when `release`); the reply comes once it has
/// stopped.
#[cold]
pub(crate) fn stop<A: PerName>(
    act: &mut A,
    release: bool,
    ctx: &mut Context<A>,
) -> ResponseFuture<()> {
    let (tx, rx) = oneshot::channel();
    let shell = act.shell();
    shell.stop_replies.push(tx);
    shell.state.stop(release, Instant::now());
    apply(act, ctx);
    Box::pin(async move {
        let _ = rx.await;
    })
}

/// A message on one of the name's channels: waiters whose callers left go first, since it may
/// wake one to take what was released (`gone_first`).
pub(crate) fn unlocked<A: PerName>(act: &mut A, msg: Unlocked, ctx: &mut Context<A>) {
    gone_first(act, ctx);
    (act.shell().state).message(&msg.channel, msg.count, Instant::now());
    apply(act, ctx);
}

/// The pub/sub connection was lost, or came back.
#[cold]
pub(crate) fn resubscribed<A: PerName>(act: &mut A, msg: Resubscribed, ctx: &mut Context<A>) {
    let lost = msg.lost.map(LockError::pubsub_lost);
    act.shell().state.pubsub(lost, Instant::now());
    apply(act, ctx);
}

/// The Watchdog found a hold gone, or could not renew it in time.
#[cold]
pub(crate) fn hold_lost<A: PerName>(act: &mut A, msg: HoldLost, ctx: &mut Context<A>) {
    let now = Instant::now();
    (act.shell().state).renewal_lost(msg.holder, msg.kind, msg.epoch, now);
    apply(act, ctx);
}

/// Implements, for a per-name actor type, what every per-name actor does the same way, each
/// through the shell function of its name: the messages on its channels ([`unlocked`]), the
/// pub/sub connection's losses ([`resubscribed`]), the Watchdog's lost holds ([`hold_lost`]),
/// the stop ([`stop`]) and its end ([`stopped`]).
macro_rules! per_name_handlers {
    ($actor:ty) => {
        impl ::actix::Actor for $actor {
            type Context = ::actix::Context<Self>;

            fn stopped(&mut self, ctx: &mut Self::Context) {
                $crate::actors::shell::stopped(self, ctx);
            }
        }

        impl ::actix::Handler<$crate::actors::messages::Unlocked> for $actor {
            type Result = ();

            fn handle(
                &mut self,
                msg: $crate::actors::messages::Unlocked,
                ctx: &mut ::actix::Context<Self>,
            ) {
                $crate::actors::shell::unlocked(self, msg, ctx);
            }
        }

        impl ::actix::Handler<$crate::actors::messages::Resubscribed> for $actor {
            type Result = ();

            fn handle(
                &mut self,
                msg: $crate::actors::messages::Resubscribed,
                ctx: &mut ::actix::Context<Self>,
            ) {
                $crate::actors::shell::resubscribed(self, msg, ctx);
            }
        }

        impl ::actix::Handler<$crate::actors::messages::HoldLost> for $actor {
            type Result = ();

            fn handle(
                &mut self,
                msg: $crate::actors::messages::HoldLost,
                ctx: &mut ::actix::Context<Self>,
            ) {
                $crate::actors::shell::hold_lost(self, msg, ctx);
            }
        }

        impl ::actix::Handler<$crate::actors::messages::Stop> for $actor {
            type Result = ::actix::ResponseFuture<()>;

            fn handle(
                &mut self,
                msg: $crate::actors::messages::Stop,
                ctx: &mut ::actix::Context<Self>,
            ) -> Self::Result {
                $crate::actors::shell::stop(self, msg.release, ctx)
            }
        }
    };
}
pub(crate) use per_name_handlers;

/// The actor stopped (asked to, or it departed): its waiters are answered, its channels and
/// renewals given up, its callers told.
#[cold]
pub(crate) fn stopped<A: PerName>(act: &mut A, ctx: &mut Context<A>) {
    reply::adopt(act, ctx, false);
    Linger::stopped(act);
    let shell = act.shell();
    if let Some(registry) = shell.registry.upgrade() {
        registry.do_send(Forget {
            kind: shell.kind,
            name: shell.name.clone(),
            id: shell.id,
        });
    }
    tracing::trace!(name = %shell.name, id = shell.id, kind = ?shell.kind, "per-name actor stopped");
    act.shell().state.abandon();
    // Effects still held back for a reply sender (none, normally: they are carried out before
    // anything else) come first.
    let mut effects = std::mem::take(&mut act.shell().held);
    act.shell().state.drain_into(&mut effects);
    for effect in effects {
        match effect {
            Effect::Answer(id, answer) => drop(answer_waiter(act, id, answer, ctx)),
            Effect::Unsubscribe(_) | Effect::Untrack { .. } | Effect::Done(..) => {
                perform(act, effect, ctx);
            }
            _ => {}
        }
    }
    let (shell, witness) = act.parts();
    for (_, tx) in shell.replies.drain() {
        A::reply(tx, Err(LockError::Shutdown));
    }
    if let Some(witness) = witness {
        witness.left(&shell.name, shell.id);
    }
}

impl<A: PerName> Crowded for A {
    type Reply = A::Tx;

    fn crowd(&mut self) -> &mut Crowd<A::Tx> {
        &mut self.shell().crowd
    }

    fn caller_left(&mut self, id: WaiterId, ctx: &mut Context<Self>) {
        caller_gone(self, id, ctx);
    }

    fn deadline(&mut self, id: WaiterId, now: Instant, ctx: &mut Context<Self>) {
        self.shell().state.deadline(id, now);
        apply(self, ctx);
    }
}
