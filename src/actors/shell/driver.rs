//! [`Driver`]: the one kind of future a per-name actor spawns on itself for what wakes it
//! besides its messages: its [`Alarm`](super::alarm::Alarm) and its
//! [`Crowd`](super::crowd::Crowd) of waiters. Each is a function of the actor, polled with the
//! actor's context until it says it is done; a spawned future keeps its actor alive, so each
//! ends as soon as it has nothing to wait for.

use std::pin::Pin;
use std::task::Poll;

use actix::prelude::*;

/// How a driver's work is polled: with the actor, its context, and the task to wake.
type Work<A> = fn(&mut A, &mut Context<A>, &mut std::task::Context<'_>) -> Poll<()>;

/// A future spawned on an actor that polls `poll` until it is ready.
pub(crate) struct Driver<A: Actor<Context = Context<A>>>(pub(crate) Work<A>);

impl<A: Actor<Context = Context<A>>> ActorFuture<A> for Driver<A> {
    type Output = ();

    fn poll(
        self: Pin<&mut Self>,
        act: &mut A,
        ctx: &mut Context<A>,
        task: &mut std::task::Context<'_>,
    ) -> Poll<()> {
        (self.0)(act, ctx, task)
    }
}
