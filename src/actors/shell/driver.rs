//! [`Driver`]: the one kind of future a per-name actor spawns on itself for what wakes it
//! besides its messages: its [`Alarm`](super::alarm::Alarm)'s ringer (which also drives its
//! round [`Trips`](super::trips::Trips) and its linger's timer) and its
//! [`Crowd`](super::crowd::Crowd) of waiters. Each is a [`Work`] of the actor, polled with the
//! actor's context until it says it is done; a spawned future keeps its actor alive, so each
//! ends once it has nothing to wait for (the ringer waits while the actor stays: spawning costs
//! the actor's context a second pass). A driver is of size zero (its work is its type): actix
//! boxes every spawned future, and boxing a zero-size one allocates nothing.

use std::marker::PhantomData;
use std::pin::Pin;
use std::task::Poll;

use actix::prelude::*;

/// What a driver polls: with the actor, its context, and the task to wake.
pub(crate) trait Work<A: Actor<Context = Context<A>>> {
    fn poll(act: &mut A, ctx: &mut Context<A>, task: &mut std::task::Context<'_>) -> Poll<()>;
}

/// A future spawned on an actor that polls `W` until it is ready.
pub(crate) struct Driver<A, W>(PhantomData<fn() -> (A, W)>);

impl<A: Actor<Context = Context<A>>, W: Work<A>> Driver<A, W> {
    /// Spawns `W`'s driver on `ctx`.
    pub(crate) fn spawn(ctx: &mut Context<A>) -> SpawnHandle
    where
        A: 'static,
        W: 'static,
    {
        ctx.spawn(Self(PhantomData))
    }
}

impl<A: Actor<Context = Context<A>>, W: Work<A>> ActorFuture<A> for Driver<A, W> {
    type Output = ();

    fn poll(
        self: Pin<&mut Self>,
        act: &mut A,
        ctx: &mut Context<A>,
        task: &mut std::task::Context<'_>,
    ) -> Poll<()> {
        W::poll(act, ctx, task)
    }
}
