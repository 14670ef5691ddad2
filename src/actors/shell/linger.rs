//! Lingering, shared by lock and synchronizer actors: an actor whose name fell idle (no hold,
//! no waiter, nothing under way) keeps its own strong address a while
//! ([`Config::idle_linger`](crate::Config::idle_linger)), holding one of the manager's
//! [`max_lingering`](crate::Config::max_lingering) places, so that a name used again soon (a
//! request handler's lock) reuses it instead of starting a new actor — starting one costs about
//! a third of an uncontended acquire+release. One timer on the actor's alarm, set to fire by a
//! linger's end when the actor falls idle, is all it costs: one set earlier stays (it finds the
//! actor busy, or idle since later and is set again then), so that a name used again and again
//! touches no timer per request.
//!
//! While it has a hold, a waiter or a round trip an actor keeps a strong address to itself;
//! when all are gone it lingers, then drops the address, and actix stops an actor once no
//! strong address is left, its mailbox is empty and no timer is armed. Anyone still holding an
//! address (a grant, an actix user) keeps it alive, so no message is ever sent to a stopped
//! actor by mistake; a sender that loses the race with the stop gets `MailboxError::Closed` for
//! a message that was never handled, and resolves the name again.

use std::time::Instant;

use actix::prelude::*;

use super::alarm::{Alarm, Alarmed};
use super::{PerName, apply};
use crate::actors::name::state::NameState;
use crate::actors::services::Services;

/// An actor's lingering: where it is in its stay (its timer is on the actor's [`Alarm`]).
#[derive(Default)]
pub(crate) struct Linger {
    phase: Phase,
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

    /// Whether it lingers: idle, holding a place.
    fn is_idle(&self) -> bool {
        matches!(self.phase, Phase::Idle(_))
    }

    /// The actor fell idle: linger, or depart at once when no place is free.
    pub(crate) fn idle<A: Lingers + Alarmed>(act: &mut A, ctx: &mut Context<A>) {
        if !matches!(act.linger().phase, Phase::Busy) {
            return;
        }
        if !act.services().start_lingering() {
            Self::leave(act, ctx);
            return;
        }
        let every = act.services().config.get_idle_linger();
        let now = Instant::now();
        act.linger().phase = Phase::Idle(now);
        if let Some(end) = now.checked_add(every) {
            Alarm::linger_by(act, end, ctx);
        }
    }

    /// Something arrived: it stays, and gives its place back while busy (its timer finds it
    /// busy and is left unset).
    pub(crate) fn busy<A: Lingers>(act: &mut A) {
        Self::give_back(act);
        act.linger().phase = Phase::Busy;
    }

    /// The actor stopped (asked to, or it departed): its place is free again.
    pub(crate) fn stopped<A: Lingers>(act: &mut A) {
        Self::give_back(act);
    }

    /// Its timer fired: it leaves when idle a whole linger, or waits for the rest of it.
    pub(crate) fn tick<A: Lingers + Alarmed>(act: &mut A, ctx: &mut Context<A>) {
        let linger = act.services().config.get_idle_linger();
        if let Phase::Idle(since) = act.linger().phase {
            match since.checked_add(linger) {
                Some(end) if end > Instant::now() => Alarm::linger_by(act, end, ctx),
                _ => Self::leave(act, ctx),
            }
        }
    }

    fn leave<A: Lingers>(act: &mut A, ctx: &mut Context<A>) {
        Self::give_back(act);
        act.linger().phase = Phase::Gone;
        act.depart(ctx);
    }

    fn give_back<A: Lingers>(act: &mut A) {
        if let Phase::Idle(_) = act.linger().phase {
            act.linger().phase = Phase::Gone;
            act.services().stop_lingering();
        }
    }
}

impl<A: PerName> Lingers for A {
    fn linger(&mut self) -> &mut Linger {
        &mut self.shell().linger
    }

    fn services(&mut self) -> &Services {
        &self.shell().svc
    }

    /// Cancels its last timers (through the state) and drops its own address.
    fn depart(&mut self, ctx: &mut Context<Self>) {
        self.shell().state.retire();
        apply(self, ctx);
        self.shell().keepalive = None;
        Alarm::end_if_unset(self);
    }
}

/// A per-name actor's alarm, here beside the linger it ticks (the alarm does not import the
/// linger: tests/layers.rs forbids import circles).
impl<A: PerName> Alarmed for A {
    fn alarm(&mut self) -> &mut Alarm {
        &mut self.shell().alarm
    }

    fn rang(&mut self, now: Instant, ctx: &mut Context<Self>) {
        self.shell().state.timeout(now);
        apply(self, ctx);
    }

    fn stays(&mut self) -> bool {
        self.shell().keepalive.is_some()
    }

    fn travel(&mut self, ctx: &mut Context<Self>, task: &mut std::task::Context<'_>) -> bool {
        PerName::travel(self, ctx, task)
    }

    fn lingered(&mut self, ctx: &mut Context<Self>) {
        Linger::tick(self, ctx);
    }

    /// Its linger's timer acts only while it is idle ([`Linger::tick`]): while busy (the most
    /// of a used name's life) the ringer does not look at it.
    fn lingers(&mut self) -> bool {
        self.shell().linger.is_idle()
    }
}
