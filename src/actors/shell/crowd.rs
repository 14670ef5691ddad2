//! The one future that serves all of an actor's waiters: it watches every waiting caller and
//! fires every waiter's deadline. Actix walks all of a context's spawned futures whenever the
//! actor wakes, so a future per waiter (a watch, a deadline) made N waiters cost N² (`benches/
//! waiters.rs`). A [`Crowd`] keeps both sets (a `FuturesUnordered`, a `DelayQueue`), which
//! wake the pump per entry; the pump exists only while they hold something, since a spawned
//! future keeps an actor alive. Lock actors and synchronizer actors both wait this way.

use std::cell::RefCell;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use actix::dev::OneshotSender;
use actix::prelude::*;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use rustc_hash::FxHashMap;
use tokio_util::time::{DelayQueue, delay_queue};

use super::WaiterId;
use super::driver::{Driver, Work};

/// How a waiter's caller is answered: a reply sender that tells when its caller has gone.
pub(crate) trait Sender: 'static {
    fn poll_closed(&mut self, cx: &mut std::task::Context<'_>) -> Poll<()>;
    /// Whether the caller has dropped its request already (its watch may not have seen it yet).
    fn is_closed(&self) -> bool;
}

impl<T: 'static> Sender for OneshotSender<T> {
    fn poll_closed(&mut self, cx: &mut std::task::Context<'_>) -> Poll<()> {
        OneshotSender::poll_closed(self, cx)
    }

    fn is_closed(&self) -> bool {
        OneshotSender::is_closed(self)
    }
}

/// An actor whose waiters a [`Crowd`] serves.
pub(crate) trait Crowded: Actor<Context = Context<Self>> {
    /// How its waiters' callers are answered.
    type Reply: Sender;
    fn crowd(&mut self) -> &mut Crowd<Self::Reply>;
    /// Waiter `id`'s caller dropped its request.
    fn caller_left(&mut self, id: WaiterId, ctx: &mut Context<Self>);
    /// Waiter `id`'s deadline passed.
    fn deadline(&mut self, id: WaiterId, now: Instant, ctx: &mut Context<Self>);
}

/// What serves all waiters at once: their callers' watches and their deadlines.
pub(crate) struct Crowd<R> {
    watches: FuturesUnordered<WatchCaller<R>>,
    deadlines: DelayQueue<WaiterId>,
    /// Each armed deadline's entry in `deadlines`, and when it is due.
    due: FxHashMap<WaiterId, (delay_queue::Key, Instant)>,
    /// Whether the pump runs, and its waker (a new watch or deadline wakes it).
    pumping: bool,
    waker: Option<Waker>,
}

impl<R> Default for Crowd<R> {
    fn default() -> Self {
        Self {
            watches: FuturesUnordered::new(),
            deadlines: DelayQueue::new(),
            due: FxHashMap::default(),
            pumping: false,
            waker: None,
        }
    }
}

/// The longest a timer sleeps at once: `DelayQueue` takes up to about two years; a longer timer
/// sleeps again when it wakes.
const MAX_SLEEP: Duration = Duration::from_secs(365 * 24 * 3600);

impl<R: Sender> Crowd<R> {
    fn is_empty(&self) -> bool {
        self.watches.is_empty() && self.deadlines.is_empty()
    }

    /// Makes sure the pump runs and sees what was just added.
    fn pump<A: Crowded<Reply = R>>(&mut self, ctx: &mut Context<A>) {
        if !self.pumping {
            self.pumping = true;
            Driver::<A, Pump>::spawn(ctx);
        } else if let Some(waker) = &self.waker {
            waker.wake_by_ref();
        }
    }

    /// Watches waiter `id`'s caller from now on: a caller that drops its request is reported
    /// with [`Crowded::caller_left`].
    #[inline(never)]
    pub(crate) fn watch<A: Crowded<Reply = R>>(
        &mut self,
        id: WaiterId,
        caller: Caller<R>,
        ctx: &mut Context<A>,
    ) -> Caller<R> {
        match caller {
            Caller::Unwatched(tx) => {
                let shared = Rc::new(RefCell::new(Shared {
                    tx: Some(tx),
                    waker: None,
                }));
                self.watches.push(WatchCaller {
                    id,
                    shared: shared.clone(),
                });
                self.pump(ctx);
                Caller::Watched(shared)
            }
            watched => watched,
        }
    }

    /// Arms waiter `id`'s deadline `after` from now, replacing one armed before.
    #[inline(never)]
    pub(crate) fn arm<A: Crowded<Reply = R>>(
        &mut self,
        id: WaiterId,
        after: Duration,
        ctx: &mut Context<A>,
    ) {
        let Some(at) = Instant::now().checked_add(after) else {
            // Beyond what a clock can tell (a wait of `Duration::MAX`): it never fires.
            return self.disarm(id);
        };
        let step = after.min(MAX_SLEEP);
        match self.due.get_mut(&id) {
            Some((key, due)) => {
                self.deadlines.reset(key, step);
                *due = at;
            }
            None => {
                let key = self.deadlines.insert(id, step);
                self.due.insert(id, (key, at));
            }
        }
        self.pump(ctx);
    }

    /// The waiters whose callers have already dropped their requests, now rather than at the
    /// pump's next turn: actix handles the messages in an actor's mailbox before its spawned
    /// futures, so a message sent after a caller dropped its request (a release right after a
    /// campaign's time-out) would otherwise be handled while that caller still counts as
    /// waiting. Only the watches woken since are polled (`FuturesUnordered`), with the pump's own
    /// waker, so that later wake-ups still reach the pump.
    pub(crate) fn gone_now(&mut self) -> Vec<WaiterId> {
        // No waker: the pump has not run yet, so nothing it watches has been polled, and no
        // caller can have been seen gone (every uncontended release: no allocation, no call).
        match self.waker.clone() {
            None => Vec::new(),
            Some(waker) => self.poll_gone(waker),
        }
    }

    /// [`gone_now`](Self::gone_now) once the pump runs: out of line, as only a name with
    /// waiters gets here.
    #[inline(never)]
    fn poll_gone(&mut self, waker: Waker) -> Vec<WaiterId> {
        let mut gone = Vec::new();
        let mut task = std::task::Context::from_waker(&waker);
        loop {
            match self.watches.poll_next_unpin(&mut task) {
                Poll::Ready(Some(Some(id))) => gone.push(id),
                Poll::Ready(Some(None)) => {}
                Poll::Ready(None) | Poll::Pending => break,
            }
        }
        if !gone.is_empty() {
            // The pump ends at its next turn when nothing is left to serve (an idle actor stops).
            waker.wake();
        }
        gone
    }

    /// Disarms waiter `id`'s deadline (nothing when none is armed).
    pub(crate) fn disarm(&mut self, id: WaiterId) {
        // Most answers find no deadline armed at all (a request with no wait, or a grant at
        // its first attempt): no hash of the id then.
        if self.due.is_empty() {
            return;
        }
        if let Some((key, _)) = self.due.remove(&id) {
            self.deadlines.remove(&key);
            if self.is_empty()
                && let Some(waker) = self.waker.take()
            {
                // Its sleep may still be set for the removed deadline: end the pump now, so
                // that an idle actor stops at once.
                waker.wake();
            }
        }
    }
}

/// A waiter's caller, as the actor keeps it.
pub(crate) enum Caller<R> {
    /// Its sender is on its way (an actor takes a request in before actix hands it the reply
    /// sender: `shell::reply`).
    Coming,
    /// Not watched (its first attempt is under way): the reply sender itself.
    Unwatched(R),
    /// Watched: the sender, shared with its [`WatchCaller`].
    Watched(Rc<RefCell<Shared<R>>>),
}

/// What a caller and its watch share: the sender until the answer, and the watch's waker.
pub(crate) struct Shared<R> {
    tx: Option<R>,
    waker: Option<Waker>,
}

impl<R: Sender> Caller<R> {
    /// Whether the caller has dropped its request (seen now, before its watch reports it).
    pub(crate) fn is_gone(&self) -> bool {
        match self {
            Caller::Coming => false,
            Caller::Unwatched(tx) => tx.is_closed(),
            Caller::Watched(shared) => shared.borrow().tx.as_ref().is_none_or(R::is_closed),
        }
    }
}

impl<R> Caller<R> {
    /// The reply sender, to answer with; a watched caller's watch then ends.
    pub(crate) fn take(self) -> Option<R> {
        match self {
            Caller::Coming => None,
            Caller::Unwatched(tx) => Some(tx),
            Caller::Watched(shared) => {
                let mut shared = shared.borrow_mut();
                let tx = shared.tx.take();
                if let Some(waker) = shared.waker.take() {
                    waker.wake();
                }
                tx
            }
        }
    }
}

impl<T> Caller<OneshotSender<T>> {
    /// Sends the answer, or gives it back when the caller has gone meanwhile; a watched
    /// caller's watch then ends.
    pub(crate) fn deliver(self, reply: T) -> Result<(), T> {
        match self.take() {
            Some(tx) => tx.send(reply),
            None => Err(reply),
        }
    }
}

/// Resolves with its waiter's id when the caller drops its request, or with `None` once the
/// caller has been answered.
struct WatchCaller<R> {
    id: WaiterId,
    shared: Rc<RefCell<Shared<R>>>,
}

impl<R: Sender> Future for WatchCaller<R> {
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

/// The pump ([`Driver`]): polls every watch and fires every deadline; ends when none of either
/// is left.
struct Pump;

impl<A: Crowded> Work<A> for Pump {
    fn poll(act: &mut A, ctx: &mut Context<A>, task: &mut std::task::Context<'_>) -> Poll<()> {
        pump(act, ctx, task)
    }
}

fn pump<A: Crowded>(
    act: &mut A,
    ctx: &mut Context<A>,
    task: &mut std::task::Context<'_>,
) -> Poll<()> {
    loop {
        match act.crowd().watches.poll_next_unpin(task) {
            Poll::Ready(Some(Some(id))) => {
                act.caller_left(id, ctx);
                continue;
            }
            Poll::Ready(Some(None)) => continue,
            Poll::Ready(None) | Poll::Pending => {}
        }
        let crowd = act.crowd();
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
            act.deadline(id, now, ctx);
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

/// Keeps `waker` in `slot`, cloning it only when it is another task's.
fn keep_waker(slot: &mut Option<Waker>, waker: &Waker) {
    if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
        *slot = Some(waker.clone());
    }
}
