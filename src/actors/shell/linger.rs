//! Lingering, shared by lock and synchronizer actors: an actor whose name fell idle (no hold,
//! no waiter, nothing under way) keeps its own strong address a while
//! ([`Config::idle_linger`](crate::Config::idle_linger)), holding one of the manager's
//! [`max_lingering`](crate::Config::max_lingering) places, so that a name used again soon (a
//! request handler's lock) reuses it instead of starting a new actor — starting one costs about
//! a third of an uncontended acquire+release. One interval timer, armed when the actor falls
//! idle and cancelled when it leaves or finds the actor busy, is all it costs: nothing per
//! request.
//!
//! While it has a hold, a waiter or a round trip an actor keeps a strong address to itself;
//! when all are gone it lingers, then drops the address, and actix stops an actor once no
//! strong address is left, its mailbox is empty and no timer is armed. Anyone still holding an
//! address (a grant, an actix user) keeps it alive, so no message is ever sent to a stopped
//! actor by mistake; a sender that loses the race with the stop gets `MailboxError::Closed` for
//! a message that was never handled, and resolves the name again.

use std::time::Instant;

use actix::prelude::*;

use crate::actors::services::Services;

/// An actor's lingering: where it is in its stay, and its tick.
#[derive(Default)]
pub(crate) struct Linger {
    phase: Phase,
    tick: Option<SpawnHandle>,
}

#[derive(Default, Clone, Copy)]
enum Phase {
    /// Busy, or just started: no place taken.
    #[default]
    Busy,
    /// Idle since then, holding a place among the manager's lingering actors.
    Idle(Instant),
    /// Departed: it stops once nobody else holds an address, unless something arrives first.
    Gone,
}

/// An actor that lingers when idle.
pub(crate) trait Lingers: Actor<Context = Context<Self>> {
    fn linger(&mut self) -> &mut Linger;
    fn services(&mut self) -> &Services;
    /// The linger is over (or no place was free): drop what keeps the actor alive (its own
    /// address, its last timers), so that actix stops it once nobody else holds an address.
    fn depart(&mut self, ctx: &mut Context<Self>);
}

impl Linger {
    /// Whether it is busy (or just started): not lingering, not departed.
    pub(crate) fn is_busy(&self) -> bool {
        matches!(self.phase, Phase::Busy)
    }

    /// The actor fell idle: linger, or depart at once when no place is free.
    pub(crate) fn idle<A: Lingers>(act: &mut A, ctx: &mut Context<A>) {
        if !matches!(act.linger().phase, Phase::Busy) {
            return;
        }
        if !act.services().start_lingering() {
            Self::leave(act, ctx);
            return;
        }
        let every = act.services().config.get_idle_linger();
        let linger = act.linger();
        linger.phase = Phase::Idle(Instant::now());
        if linger.tick.is_none() {
            linger.tick = Some(ctx.run_interval(every, Self::tick::<A>));
        }
    }

    /// Something arrived: it stays, and gives its place back while busy.
    pub(crate) fn busy<A: Lingers>(act: &mut A) {
        Self::give_back(act);
        act.linger().phase = Phase::Busy;
    }

    /// The actor stopped (asked to, or it departed): its place is free again.
    pub(crate) fn stopped<A: Lingers>(act: &mut A) {
        Self::give_back(act);
    }

    fn tick<A: Lingers>(act: &mut A, ctx: &mut Context<A>) {
        let linger = act.services().config.get_idle_linger();
        match act.linger().phase {
            Phase::Idle(since) if since.elapsed() >= linger => Self::leave(act, ctx),
            Phase::Idle(_) => {}
            // Busy again: no tick while busy; the next idle arms it again.
            Phase::Busy | Phase::Gone => {
                if let Some(tick) = act.linger().tick.take() {
                    ctx.cancel_future(tick);
                }
            }
        }
    }

    fn leave<A: Lingers>(act: &mut A, ctx: &mut Context<A>) {
        Self::give_back(act);
        act.linger().phase = Phase::Gone;
        if let Some(tick) = act.linger().tick.take() {
            ctx.cancel_future(tick);
        }
        act.depart(ctx);
    }

    fn give_back<A: Lingers>(act: &mut A) {
        if let Phase::Idle(_) = act.linger().phase {
            act.linger().phase = Phase::Gone;
            act.services().stop_lingering();
        }
    }
}
