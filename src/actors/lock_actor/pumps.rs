//! A lock actor's timers: its waiters' deadlines in its [`Crowd`](crate::actors::name::crowd::Crowd),
//! which also watches their callers; timers of the actor or of a hold as actix timers.

use std::time::{Duration, Instant};

use actix::prelude::*;

use super::{AcquireTx, LockActor};
use crate::actors::lock_state::Timer;
use crate::actors::name::WaiterId;
use crate::actors::name::crowd::{Caller, Crowd, Crowded};

impl Crowded for LockActor {
    type Reply = AcquireTx;

    fn crowd(&mut self) -> &mut Crowd<AcquireTx> {
        &mut self.crowd
    }

    fn caller_left(&mut self, id: WaiterId, ctx: &mut Context<Self>) {
        self.caller_gone(id, ctx);
    }

    fn deadline(&mut self, id: WaiterId, now: Instant, ctx: &mut Context<Self>) {
        self.state.fired(Timer::Deadline(id), now);
        self.apply(ctx);
    }
}

impl LockActor {
    /// Watches waiter `id`'s caller from now on (`Effect::Watch`).
    pub(super) fn watch(&mut self, id: WaiterId, ctx: &mut Context<Self>) {
        let Some((caller, kind, since)) = self.waiting.remove(&id) else {
            return;
        };
        // A watch for a caller whose reply sender is still on its way is held back until it
        // is here (see `Handed`).
        debug_assert!(
            !matches!(caller, Caller::Coming),
            "watch before the sender came"
        );
        let caller = self.crowd.watch(id, caller, ctx);
        self.waiting.insert(id, (caller, kind, since));
        // A watched caller is one that waits: its first attempt found the lock taken.
        let now = Instant::now();
        if self.waits_began.insert(id, now).is_none() {
            self.svc.board.wait_began(&self.name, now);
        }
    }

    /// Waiter `id`'s wait is over (answered, or its caller left): off the board.
    pub(super) fn wait_over(&mut self, id: WaiterId) {
        if self.waits_began.is_empty() {
            return;
        }
        if let Some(began) = self.waits_began.remove(&id) {
            self.svc.board.wait_ended(&self.name, began);
        }
    }

    /// Fires `timer` after `after`, replacing the same timer if armed.
    pub(super) fn arm(&mut self, timer: Timer, after: Duration, ctx: &mut Context<Self>) {
        let Timer::Deadline(id) = timer else {
            // One per actor or per hold, not per waiter: an actix timer of its own, which fires
            // to the millisecond (a lease's expiry must not come after Redis's).
            let t = timer.clone();
            let handle = ctx.run_later(after, move |act, ctx| {
                act.singles.remove(&t);
                act.state.fired(t, Instant::now());
                act.apply(ctx);
            });
            if let Some(old) = self.singles.insert(timer, handle) {
                ctx.cancel_future(old);
            }
            return;
        };
        self.crowd.arm(id, after, ctx);
    }

    /// Disarms `timer` (nothing when it is not armed).
    pub(super) fn disarm(&mut self, timer: &Timer, ctx: &mut Context<Self>) {
        if let Some(handle) = self.singles.remove(timer) {
            ctx.cancel_future(handle);
        }
        if let Timer::Deadline(id) = timer {
            self.crowd.disarm(*id);
        }
    }
}
