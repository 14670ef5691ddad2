//! The one future that serves all of a lock actor's waiters: it watches every waiting caller and
//! fires every waiter's deadline. Actix walks all of a context's spawned futures whenever the
//! actor wakes, so a future per waiter (a watch, a deadline) made N waiters cost N² (`benches/
//! waiters.rs`). The [`Crowd`] keeps both sets (a `FuturesUnordered`, a `DelayQueue`), which
//! wake the pump per entry; the pump exists only while they hold something, since a spawned
//! future keeps an actor alive.

use std::cell::RefCell;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use rustc_hash::FxHashMap;
use tokio_util::time::{DelayQueue, delay_queue};

use super::{AcquireTx, LockActor};
use crate::actors::lock_state::{Timer, WaiterId};

/// What serves all waiters at once: their callers' watches and their deadlines.
#[derive(Default)]
pub(super) struct Crowd {
    watches: FuturesUnordered<WatchCaller>,
    deadlines: DelayQueue<WaiterId>,
    /// Each armed deadline's entry in `deadlines`, and when it is due.
    due: FxHashMap<WaiterId, (delay_queue::Key, Instant)>,
    /// Whether the [`Pump`] runs, and its waker (a new watch or deadline wakes it).
    pumping: bool,
    waker: Option<Waker>,
}

impl Crowd {
    fn is_empty(&self) -> bool {
        self.watches.is_empty() && self.deadlines.is_empty()
    }

    /// Makes sure the pump runs and sees what was just added.
    fn pump(&mut self, ctx: &mut Context<LockActor>) {
        if !self.pumping {
            self.pumping = true;
            ctx.spawn(Pump);
        } else if let Some(waker) = &self.waker {
            waker.wake_by_ref();
        }
    }
}

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
struct WatchCaller {
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
                self.crowd.watches.push(WatchCaller {
                    id,
                    shared: shared.clone(),
                });
                self.crowd.pump(ctx);
                Caller::Watched(shared)
            }
            watched => watched,
        };
        self.waiting.insert(id, (caller, kind, since));
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
        let Some(at) = Instant::now().checked_add(after) else {
            // Beyond what a clock can tell (a wait of `Duration::MAX`): it never fires.
            return self.disarm(&timer, ctx);
        };
        let crowd = &mut self.crowd;
        let step = after.min(MAX_SLEEP);
        match crowd.due.get_mut(&id) {
            Some((key, due)) => {
                crowd.deadlines.reset(key, step);
                *due = at;
            }
            None => {
                let key = crowd.deadlines.insert(id, step);
                crowd.due.insert(id, (key, at));
            }
        }
        crowd.pump(ctx);
    }

    /// Disarms `timer` (nothing when it is not armed).
    pub(super) fn disarm(&mut self, timer: &Timer, ctx: &mut Context<Self>) {
        if let Some(handle) = self.singles.remove(timer) {
            ctx.cancel_future(handle);
        }
        let crowd = &mut self.crowd;
        if let Timer::Deadline(id) = timer
            && let Some((key, _)) = crowd.due.remove(id)
        {
            crowd.deadlines.remove(&key);
            if crowd.is_empty()
                && let Some(waker) = crowd.waker.take()
            {
                // Its sleep may still be set for the removed deadline: end the pump now, so
                // that an idle actor stops at once.
                waker.wake();
            }
        }
    }
}

/// Polls every watch and fires every deadline; ends when none of either is left.
struct Pump;

impl ActorFuture<LockActor> for Pump {
    type Output = ();

    fn poll(
        self: Pin<&mut Self>,
        act: &mut LockActor,
        ctx: &mut Context<LockActor>,
        task: &mut std::task::Context<'_>,
    ) -> Poll<()> {
        loop {
            match act.crowd.watches.poll_next_unpin(task) {
                Poll::Ready(Some(Some(id))) => {
                    act.caller_left(id, ctx);
                    continue;
                }
                Poll::Ready(Some(None)) => continue,
                Poll::Ready(None) | Poll::Pending => {}
            }
            let crowd = &mut act.crowd;
            if !crowd.deadlines.is_empty()
                && let Poll::Ready(Some(expired)) = crowd.deadlines.poll_expired(task)
            {
                let id = expired.into_inner();
                let now = Instant::now();
                if let Some((key, due)) = crowd.due.get_mut(&id)
                    && *due > now
                {
                    // Longer than one sleep: sleep on.
                    *key = crowd.deadlines.insert(id, (*due - now).min(MAX_SLEEP));
                    continue;
                }
                crowd.due.remove(&id);
                act.state.fired(Timer::Deadline(id), now);
                act.apply(ctx);
                continue;
            }
            if crowd.is_empty() {
                crowd.pumping = false;
                crowd.waker = None;
                return Poll::Ready(());
            }
            keep_waker(&mut crowd.waker, task.waker());
            return Poll::Pending;
        }
    }
}

/// Keeps `waker` in `slot`, cloning it only when it is another task's.
fn keep_waker(slot: &mut Option<Waker>, waker: &Waker) {
    if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
        *slot = Some(waker.clone());
    }
}
