//! The two futures that serve all of a lock actor's waiters: one watches every waiting caller,
//! one fires every waiter's deadline. Actix walks all of a context's spawned futures whenever the actor
//! wakes, so a future per waiter (a watch, a deadline) made N waiters cost N² (`benches/
//! waiters.rs`). These two keep their own sets (a `FuturesUnordered`, a `DelayQueue`) that wake
//! them per entry, and exist only while they have work: a spawned future keeps an actor alive.

use std::cell::RefCell;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures_util::StreamExt;

use super::{AcquireTx, LockActor};
use crate::actors::lock_state::{Timer, WaiterId};

/// The longest a timer sleeps at once: `DelayQueue` takes up to about two years; a longer timer
/// sleeps again when it wakes.
const MAX_SLEEP: Duration = Duration::from_secs(365 * 24 * 3600);

/// A waiter's caller, as the actor keeps it.
pub(super) enum Caller {
    /// Not watched (its first attempt is under way): the reply sender itself.
    Unwatched(AcquireTx),
    /// Watched: the sender, shared with its [`WatchCaller`].
    Watched(Rc<RefCell<Shared>>),
}

/// What a caller and its watch share: the sender until the answer, and the watch's waker.
pub(super) struct Shared {
    tx: Option<AcquireTx>,
    waker: Option<Waker>,
}

impl Caller {
    /// Sends the answer; a watched caller's watch then ends.
    pub(super) fn send(self, reply: super::AcquireResult) {
        match self {
            Caller::Unwatched(tx) => {
                let _ = tx.send(reply);
            }
            Caller::Watched(shared) => {
                let mut shared = shared.borrow_mut();
                if let Some(tx) = shared.tx.take() {
                    let _ = tx.send(reply);
                }
                if let Some(waker) = shared.waker.take() {
                    waker.wake();
                }
            }
        }
    }
}

/// Resolves with its waiter's id when the caller drops its request, or with `None` once the
/// caller has been answered.
pub(super) struct WatchCaller {
    id: WaiterId,
    shared: Rc<RefCell<Shared>>,
}

impl Future for WatchCaller {
    type Output = Option<WaiterId>;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let mut guard = self.shared.borrow_mut();
        let shared = &mut *guard;
        let Some(tx) = shared.tx.as_mut() else {
            return Poll::Ready(None);
        };
        if tx.poll_closed(cx).is_ready() {
            return Poll::Ready(Some(self.id));
        }
        keep_waker(&mut shared.waker, cx.waker());
        Poll::Pending
    }
}

impl LockActor {
    /// Watches waiter `id`'s caller from now on (`Effect::Watch`).
    pub(super) fn watch(&mut self, id: WaiterId, ctx: &mut Context<Self>) {
        let Some((caller, kind, since)) = self.waiting.remove(&id) else {
            return;
        };
        let caller = match caller {
            Caller::Unwatched(tx) => {
                let shared = Rc::new(RefCell::new(Shared {
                    tx: Some(tx),
                    waker: None,
                }));
                self.watchers.push(WatchCaller {
                    id,
                    shared: shared.clone(),
                });
                if !self.watching {
                    self.watching = true;
                    ctx.spawn(WatchPump);
                } else if let Some(waker) = &self.watch_waker {
                    // The pump polls the new watch at its next turn.
                    waker.wake_by_ref();
                }
                Caller::Watched(shared)
            }
            watched => watched,
        };
        self.waiting.insert(id, (caller, kind, since));
    }

    /// Fires `timer` after `after`, replacing the same timer if armed.
    pub(super) fn arm(&mut self, timer: Timer, after: Duration, ctx: &mut Context<Self>) {
        if !matches!(timer, Timer::Deadline(_)) {
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
        }
        let Some(due) = Instant::now().checked_add(after) else {
            // Beyond what a clock can tell (a wait of `Duration::MAX`): it never fires.
            return self.disarm(&timer, ctx);
        };
        let step = after.min(MAX_SLEEP);
        match self.timers.get_mut(&timer) {
            Some((key, at)) => {
                self.delays.reset(key, step);
                *at = due;
            }
            None => {
                let key = self.delays.insert(timer.clone(), step);
                self.timers.insert(timer, (key, due));
            }
        }
        if !self.ticking {
            self.ticking = true;
            ctx.spawn(TimerPump);
        }
    }

    /// Disarms `timer` (nothing when it is not armed).
    pub(super) fn disarm(&mut self, timer: &Timer, ctx: &mut Context<Self>) {
        if let Some(handle) = self.singles.remove(timer) {
            ctx.cancel_future(handle);
        }
        if let Some((key, _)) = self.timers.remove(timer) {
            self.delays.remove(&key);
            if self.delays.is_empty()
                && let Some(waker) = self.timer_waker.take()
            {
                // Its sleep may still be set for the removed timer: end it now, so that an idle
                // actor stops at once.
                waker.wake();
            }
        }
    }
}

/// Polls every watch; ends when none is left.
struct WatchPump;

impl ActorFuture<LockActor> for WatchPump {
    type Output = ();

    fn poll(
        self: Pin<&mut Self>,
        act: &mut LockActor,
        ctx: &mut Context<LockActor>,
        task: &mut std::task::Context<'_>,
    ) -> Poll<()> {
        loop {
            match act.watchers.poll_next_unpin(task) {
                Poll::Ready(Some(Some(id))) => act.caller_left(id, ctx),
                Poll::Ready(Some(None)) => {}
                Poll::Ready(None) => {
                    act.watching = false;
                    act.watch_waker = None;
                    return Poll::Ready(());
                }
                Poll::Pending => {
                    keep_waker(&mut act.watch_waker, task.waker());
                    return Poll::Pending;
                }
            }
        }
    }
}

/// Fires every timer when it is due; ends when none is armed.
struct TimerPump;

impl ActorFuture<LockActor> for TimerPump {
    type Output = ();

    fn poll(
        self: Pin<&mut Self>,
        act: &mut LockActor,
        ctx: &mut Context<LockActor>,
        task: &mut std::task::Context<'_>,
    ) -> Poll<()> {
        loop {
            if act.delays.is_empty() {
                act.ticking = false;
                act.timer_waker = None;
                return Poll::Ready(());
            }
            match act.delays.poll_expired(task) {
                Poll::Ready(Some(expired)) => {
                    let timer = expired.into_inner();
                    let now = Instant::now();
                    if let Some((key, due)) = act.timers.get_mut(&timer)
                        && *due > now
                    {
                        // Longer than one sleep: sleep on.
                        *key = act.delays.insert(timer, (*due - now).min(MAX_SLEEP));
                        continue;
                    }
                    act.timers.remove(&timer);
                    act.state.fired(timer, now);
                    act.apply(ctx);
                }
                Poll::Ready(None) => {
                    act.ticking = false;
                    act.timer_waker = None;
                    return Poll::Ready(());
                }
                Poll::Pending => {
                    keep_waker(&mut act.timer_waker, task.waker());
                    return Poll::Pending;
                }
            }
        }
    }
}

/// Keeps `waker` in `slot`, cloning it only when it is another task's.
fn keep_waker(slot: &mut Option<Waker>, waker: &Waker) {
    if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
        *slot = Some(waker.clone());
    }
}
