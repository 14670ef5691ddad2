//! How a request's reply sender reaches its actor. actix gives it to the handler's reply
//! ([`MessageResponse::handle`](actix::dev::MessageResponse), run right after the handler and
//! without the actor), not to the handler: the handler takes the request in at once, and the
//! reply leaves its sender in a buffer the actor takes in at its next step ([`adopt`]). So a
//! request costs no second pass through the actor's context (a boxed future each). Effects
//! addressed to the caller of the request being handled (its answer, its watch, a release's
//! outcome), and every effect after the first of them, are held back until its sender is here.

use std::cell::RefCell;
use std::rc::Rc;

use actix::dev::OneshotSender;
use actix::prelude::*;

use super::crowd::Caller;
use super::{EffectOf, PerName, Shell, apply, caller_gone, perform};
use crate::actors::name::WaiterId;
use crate::actors::name::effect::{Effect, ReplyId};
use crate::error::LockError;

/// A request's reply sender on its way to the actor; `None` when it was sent with `do_send`
/// (nobody to answer).
pub(crate) enum Handed<A: PerName> {
    /// Waiter `id`'s caller.
    Waiter(WaiterId, Option<A::Tx>),
    /// Release (or adjustment) `id`'s caller.
    Reply(ReplyId, Option<A::Reply>),
}

/// Whose reply sender the handler being run waits for.
#[derive(Clone, Copy)]
pub(crate) enum Expecting {
    Waiter(WaiterId),
    Reply(ReplyId),
}

/// The part of a request's reply that brings its sender to the actor.
pub(crate) struct Taken<A: PerName> {
    whose: Expecting,
    handed: Rc<RefCell<Vec<Handed<A>>>>,
    /// Effects wait for the sender (an answer at once): the actor takes it in before anything
    /// else.
    held: bool,
}

impl<A: PerName> Taken<A> {
    /// Leaves the waiter's reply sender for the actor.
    pub(crate) fn hand_waiter(self, ctx: &mut Context<A>, tx: Option<A::Tx>) {
        if let Expecting::Waiter(id) = self.whose {
            self.hand_over(ctx, Handed::Waiter(id, tx));
        }
    }

    /// Leaves the release's (or adjustment's) reply sender for the actor.
    pub(crate) fn hand_reply(self, ctx: &mut Context<A>, tx: Option<A::Reply>) {
        if let Expecting::Reply(id) = self.whose {
            self.hand_over(ctx, Handed::Reply(id, tx));
        }
    }

    /// When effects wait for the sender, the actor takes it in before anything else (the one
    /// case that costs a pass through its context).
    fn hand_over(self, ctx: &mut Context<A>, sender: Handed<A>) {
        self.handed.borrow_mut().push(sender);
        if self.held {
            ctx.wait(actix::fut::ready(()).map(|(), act: &mut A, ctx| resume(act, ctx)));
        }
    }
}

/// Hands the reply sender of a request taken in to the actor (`hand`), or gives the caller of
/// a request refused at once (bad input, a stop under way, another actor's grant) its refusal.
pub(crate) fn hand_or_refuse<A: PerName, T>(
    taken: Result<Taken<A>, LockError>,
    tx: Option<OneshotSender<Result<T, LockError>>>,
    hand: impl FnOnce(Taken<A>, Option<OneshotSender<Result<T, LockError>>>),
) {
    match taken {
        Ok(taken) => hand(taken, tx),
        Err(refused) => {
            if let Some(tx) = tx {
                let _ = tx.send(Err(refused)); // the caller may have gone
            }
        }
    }
}

/// Takes a request in: `take` tells the state and says whose request it is; the effects for
/// that caller are held back until its reply sender is here.
pub(crate) fn take_in<A: PerName>(
    act: &mut A,
    take: impl FnOnce(&mut A) -> Expecting,
    ctx: &mut Context<A>,
) -> Taken<A> {
    let whose = take(act);
    act.shell().expecting = Some(whose);
    apply(act, ctx);
    let shell = act.shell();
    shell.expecting = None;
    Taken {
        whose,
        handed: shell.handed.clone(),
        held: !shell.held.is_empty(),
    }
}

/// Whether `effect` waits for the reply sender of the request being handled: it is addressed
/// to that caller, or comes after one that is (effects keep their order).
pub(super) fn holds_back<A: PerName>(shell: &Shell<A>, effect: &EffectOf<A>) -> bool {
    if !shell.held.is_empty() {
        return true;
    }
    match (shell.expecting, effect) {
        (Some(Expecting::Waiter(id)), Effect::Answer(to, _) | Effect::Watch(to)) => *to == id,
        (Some(Expecting::Reply(id)), Effect::Done(to, _)) => *to == id,
        _ => false,
    }
}

/// Takes in the reply senders handed over; `leave`: a waiter sent with `do_send` leaves at once
/// (not while stopping: the stop answers every waiter). Most steps find none: that check is
/// inlined into each step, the taking in is not.
#[inline]
pub(super) fn adopt<A: PerName>(act: &mut A, ctx: &mut Context<A>, leave: bool) {
    if !act.shell().handed.borrow().is_empty() {
        adopt_all(act, ctx, leave);
    }
}

#[inline(never)]
fn adopt_all<A: PerName>(act: &mut A, ctx: &mut Context<A>, leave: bool) {
    // Popped one at a time: the buffer keeps its capacity (no allocation per request), and is
    // not borrowed while a caller's leaving is carried out.
    loop {
        let Some(sender) = act.shell().handed.borrow_mut().pop() else {
            return;
        };
        match sender {
            Handed::Waiter(id, Some(tx)) => {
                if let Some(waiting) = act.shell().waiting.get_mut(&id) {
                    waiting.caller = Caller::Unwatched(tx);
                }
            }
            // `do_send` leaves nobody to hand a grant to: the waiter leaves (a grant already on
            // its way comes back and its drop releases the hold).
            Handed::Waiter(id, None) if leave => caller_gone(act, id, ctx),
            Handed::Waiter(_, None) | Handed::Reply(_, None) => {}
            Handed::Reply(id, Some(tx)) => {
                act.shell().replies.insert(id, tx);
            }
        }
    }
}

/// The effects held back for a caller whose reply sender is now here (and any that a
/// `do_send` request's leaving adds behind them, in order).
fn resume<A: PerName>(act: &mut A, ctx: &mut Context<A>) {
    adopt(act, ctx, true);
    // Drained from the buffer kept between events (`effects`, empty between events), so that
    // neither buffer is allocated again per contended request.
    let shell = act.shell();
    let mut held = std::mem::take(&mut shell.effects);
    std::mem::swap(&mut held, &mut shell.held);
    for effect in held.drain(..) {
        perform(act, effect, ctx);
    }
    act.shell().effects = held;
    apply(act, ctx);
}
