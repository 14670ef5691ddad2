//! The lock actor: one per lock name in this process, for as long as that name is busy here.
//!
//! It owns the name's local **waiters** (queued as reply senders, never as blocked handlers), the
//! **holds** this process has on it, and its unlock-channel subscription. Every Redis round trip
//! it makes runs under `ctx.wait`, so attempts and releases of one name never interleave; waiting
//! happens between round trips, so a holder's release is never stuck behind a waiter.
//!
//! It stops itself when idle: while it has a hold or a waiter it keeps a strong address to itself
//! (`keepalive`); when both are gone it drops it, and actix stops an actor once no strong address
//! is left and its mailbox is empty. Anyone still holding an address (a guard, an actix user)
//! keeps it alive, so no message is ever sent to a stopped actor by mistake; a sender that loses
//! the race with the stop gets `MailboxError::Closed` for a message that was never handled, and
//! resolves the name again.

use std::collections::{HashSet, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use actix::WeakAddr;
use actix::dev::{MessageResponse, OneshotSender};
use actix::prelude::*;
use rustc_hash::FxHashMap;
use tokio::sync::watch;

use super::messages::*;
use super::{Registry, Services};
use crate::scripts::{Attempt, FairArgs, Released};
use crate::{LockError, LockGuard, LockKind};

/// Every hold gets a number no other hold in this process had, so a stale guard can never
/// release a later hold of the same holder.
static NEXT_EPOCH: AtomicU64 = AtomicU64::new(1);

/// A hold's identity: its holder and its kind (a read-write holder may hold both sides).
pub(crate) type HoldKey = (Arc<str>, LockKind);

/// The longest lease accepted (about 285 years): PEXPIRE must not overflow.
const MAX_LEASE: Duration = Duration::from_millis(1 << 53);

/// The share of the watchdog timeout a watchdog hold lives before the Watchdog renews it. Its
/// first renewal then comes at most 1/6 + 1/3 = 1/2 of the timeout after the grant, and the next
/// at 5/6: a renewal can still fail once without losing the lock (the PTTL ends at 6/6).
const TRACK_AFTER: u32 = 6;

/// Retry delays after a retryable Redis error, for a waiter that may still wait.
const ERROR_BACKOFF_MIN: Duration = Duration::from_millis(50);
const ERROR_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// The actor of one lock name. Reach it through [`LockManager::lock_actor`](crate::LockManager::lock_actor)
/// and send it [`Acquire`] and [`Release`].
pub struct LockActor {
    /// Tells this actor apart from earlier and later actors of the same name.
    id: u64,
    /// The kinds it serves: one, or both sides of a read-write lock (they share a channel).
    family: LockKind,
    name: Arc<str>,
    svc: Services,
    registry: WeakAddr<Registry>,
    /// Holds of this process, by holder and kind: from the first grant to the final release or
    /// the loss.
    holds: FxHashMap<HoldKey, Hold>,
    /// Local callers waiting for the lock, oldest first: from a busy attempt to a grant, the end of
    /// their wait, an error, or the caller going away.
    waiters: VecDeque<Waiter>,
    /// The next attempt for the head waiter, when the holder's TTL runs out (or after an error).
    retry: Option<SpawnHandle>,
    /// Consecutive retryable errors, for the backoff; reset by any answer from Redis.
    failures: u32,
    /// The channels the PubSubActor routes here: while a waiter needs them (the lock's channel,
    /// or a fair lock's per-waiter channels).
    subscribed: HashSet<String>,
    /// A strong address to itself while busy (see the module doc).
    keepalive: Option<Addr<Self>>,
    /// The next hand-over of watchdog holds to the Watchdog, while some are not tracked yet.
    track_timer: Option<SpawnHandle>,
    /// Waiters still to try after a wake-all message, oldest first (one attempt at a time).
    pending_wakes: VecDeque<u64>,
    /// Set by `StopLock`: new requests fail with `Shutdown`.
    stopping: bool,
    next_waiter: u64,
}

struct Hold {
    count: u32,
    epoch: u64,
    /// Renewed by the watchdog (taken without a lease), or expiring by itself.
    watchdog: bool,
    /// Whether the Watchdog renews it yet: a watchdog hold is handed over once it has lived
    /// [`TRACK_AFTER`] of the timeout, so the many holds that end sooner cost it nothing.
    tracked: bool,
    /// When Redis last set its PTTL to the full lease (the latest grant, first or re-entrant).
    granted: Instant,
    /// The lease restored when one of several holds is released.
    lease: Duration,
    /// Tells this hold's guards that it is lost; dropped (also read as lost) when the actor stops.
    lost: watch::Sender<bool>,
    /// A lease hold: fires when its lease runs out.
    expiry: Option<SpawnHandle>,
    /// Releases asked for but not confirmed by Redis (an error, or a reply that never came).
    /// `count` still includes them until [`LockActor::reconcile`] learns what happened.
    unreleased: u32,
    /// The next reconciliation, while `unreleased > 0`.
    reconcile: Option<SpawnHandle>,
    /// Consecutive failed reconciliations, for the backoff.
    reconcile_failures: u32,
}

struct Waiter {
    id: u64,
    holder: Arc<str>,
    kind: LockKind,
    lease: Option<Duration>,
    wait: Wait,
    reply: OneshotSender<Result<Option<LockGuard>, LockError>>,
    deadline: Option<SpawnHandle>,
    /// When the request arrived, for the time waited.
    since: Instant,
    /// The channel it is woken on (the lock's, or a fair-lock waiter's own).
    channel: String,
    /// Fair lock: the wait its queue place is kept for; and whether it is in the Redis queue.
    fair_wait: Duration,
    queued: bool,
}

impl LockActor {
    pub(crate) fn new(
        id: u64,
        family: LockKind,
        name: Arc<str>,
        svc: Services,
        registry: WeakAddr<Registry>,
    ) -> Self {
        Self {
            id,
            family,
            name,
            svc,
            registry,
            holds: FxHashMap::default(),
            waiters: VecDeque::new(),
            retry: None,
            failures: 0,
            subscribed: HashSet::new(),
            keepalive: None,
            track_timer: None,
            stopping: false,
            next_waiter: 0,
            pending_wakes: VecDeque::new(),
        }
    }

    /// A new request: queue it as a waiter, and make one attempt at once unless it joins the
    /// queue behind local waiters (see [`Self::joins_queue`]).
    fn enqueue(
        &mut self,
        msg: Acquire,
        reply: OneshotSender<Result<Option<LockGuard>, LockError>>,
        ctx: &mut Context<Self>,
    ) {
        if self.stopping {
            let _ = reply.send(Err(LockError::Shutdown));
            return;
        }
        if let Err(e) = validate(&msg, self.family) {
            let _ = reply.send(Err(e));
            return;
        }
        let wait = match msg.wait {
            Wait::Up(d) if d.is_zero() => Wait::No,
            other => other,
        };
        self.next_waiter += 1;
        let id = self.next_waiter;
        let deadline = match wait {
            Wait::Up(d) => Some(ctx.run_later(d, move |act, ctx| act.give_up(id, ctx))),
            _ => None,
        };
        let channel = msg.kind.waiter_channel(&self.name, &msg.holder);
        self.waiters.push_back(Waiter {
            id,
            channel,
            holder: msg.holder.into(),
            kind: msg.kind,
            lease: msg.lease,
            wait,
            reply,
            deadline,
            since: Instant::now(),
            fair_wait: match wait {
                Wait::Up(d) => d,
                _ => self.svc.config.get_fair_lock_wait_timeout(),
            },
            queued: false,
        });
        self.busy(ctx);
        ctx.spawn(CallerGone { id });
        if self.joins_queue(id) {
            // Its turn comes at a wake-up, like the waiters ahead of it; the subscription is
            // theirs already (subscribing again changes nothing).
            let pos = self.waiters.len() - 1;
            self.subscribe(pos, ctx);
        } else {
            self.attempt(id, ctx);
        }
    }

    /// Whether new waiter `id` waits its turn behind the local waiters ahead of it, without an
    /// attempt of its own. Their attempts found the lock taken and the next wake-up goes to the
    /// oldest, so an attempt now could only fail (one wasted round trip per hand-off) or barge
    /// ahead of them. Only for the exclusive, unfair kinds (a fair lock queues in Redis; readers
    /// share), for a request that may wait, and never for a holder that holds the lock here
    /// already (re-entering must not wait for itself).
    fn joins_queue(&self, id: u64) -> bool {
        let Some(new) = self.waiters.back().filter(|w| w.id == id) else {
            return false;
        };
        matches!(new.kind, LockKind::Reentrant | LockKind::Fenced)
            && new.wait != Wait::No
            && !self.holds.contains_key(&(new.holder.clone(), new.kind))
            && self
                .waiters
                .iter()
                .any(|w| w.id != id && w.wait != Wait::No && w.holder != new.holder)
    }

    /// One acquire round trip for waiter `id`.
    fn attempt(&mut self, id: u64, ctx: &mut Context<Self>) {
        let Some(w) = self.waiters.iter_mut().find(|w| w.id == id) else {
            return;
        };
        // A fair attempt that may wait can enqueue it, even one whose reply is lost: from now
        // on, giving up must leave the queue (leaving when not queued changes nothing).
        w.queued |= w.kind == LockKind::Fair && w.wait != Wait::No;
        let (holder, kind, lease) = (w.holder.clone(), w.kind, w.lease);
        let fair = FairArgs {
            wait: w.fair_wait,
            once: w.wait == Wait::No,
        };
        let (cmds, name) = (self.svc.commands.clone(), self.name.clone());
        let ttl = lease.unwrap_or(self.svc.config.get_watchdog_timeout());
        let started = Instant::now();
        let call = {
            let holder = holder.clone();
            async move { cmds.acquire(kind, &name, &holder, ttl, fair).await }
        };
        ctx.wait(call.into_actor(self).map(move |res, act, ctx| {
            act.attempted(id, (holder, kind), lease, started, res, ctx);
            act.next_wake(ctx);
        }));
    }

    fn attempted(
        &mut self,
        id: u64,
        key: HoldKey,
        lease: Option<Duration>,
        started: Instant,
        res: Result<Attempt, LockError>,
        ctx: &mut Context<Self>,
    ) {
        let pos = self.waiters.iter().position(|w| w.id == id);
        match res {
            Ok(Attempt::Acquired { token }) => {
                self.failures = 0;
                if key.1 == LockKind::Read {
                    // Readers share: every other reader waiting here may enter too.
                    let readers = self
                        .waiters
                        .iter()
                        .filter(|w| w.kind == LockKind::Read && w.id != id);
                    let new: Vec<u64> = readers
                        .map(|w| w.id)
                        .filter(|id| !self.pending_wakes.contains(id))
                        .collect();
                    self.pending_wakes.extend(new);
                }
                let guard = self.grant(key.clone(), lease, started, token, ctx);
                // Without `pos` the caller left during the round trip: `guard` drops here and
                // releases.
                if let Some(pos) = pos {
                    self.settle(pos, ctx, |act, w, _| {
                        let waited = started.saturating_duration_since(w.since);
                        tracing::debug!(lock = %act.name, holder = %w.holder, ?waited, "acquired");
                        // A caller that went away meanwhile gets nothing: the guard comes back
                        // and its drop releases the hold.
                        let _ = w.reply.send(Ok(Some(guard)));
                    });
                }
                if !self.waiters.is_empty() {
                    // We hold it now: the others wake at our release, or when our lease ends.
                    let lease = lease.unwrap_or(self.svc.config.get_watchdog_timeout());
                    self.schedule_retry(lease, ctx);
                }
            }
            Ok(Attempt::Busy { ttl }) => {
                self.failures = 0;
                let Some(pos) = pos else {
                    // Its caller left meanwhile. This wake-up was the others' too: they wait for
                    // the next message, or this TTL.
                    if let (false, Some(ttl)) = (self.waiters.is_empty(), ttl) {
                        self.schedule_retry(ttl, ctx);
                    }
                    return self.maybe_idle(ctx);
                };
                if self.waiters[pos].wait == Wait::No {
                    self.settle(pos, ctx, |_, w, _| {
                        let _ = w.reply.send(Ok(None));
                    });
                    return self.maybe_idle(ctx);
                }
                self.subscribe(pos, ctx);
                // No TTL (a key without expiry): only the unlock message can wake us.
                if let Some(ttl) = ttl {
                    self.schedule_retry(ttl, ctx);
                }
            }
            Err(e) => {
                if e.outcome_unknown() && !self.holds.contains_key(&key) {
                    self.undo_acquire(key, lease, ctx);
                }
                let Some(pos) = pos else {
                    return self.maybe_idle(ctx);
                };
                if e.is_retryable() && self.waiters[pos].wait != Wait::No {
                    self.failures = self.failures.saturating_add(1);
                    let backoff = backoff(self.failures);
                    tracing::warn!(lock = %self.name, error = %e, ?backoff, "acquire failed, waiter retries");
                    self.subscribe(pos, ctx);
                    self.schedule_retry(backoff, ctx);
                } else {
                    self.settle(pos, ctx, |act, w, ctx| act.finish(w, Err(e), ctx));
                    self.maybe_idle(ctx);
                }
            }
        }
    }

    /// An acquire whose reply was lost may have gone through after all, leaving a hold nobody
    /// knows of. With no local hold of that holder, any field it has in Redis is that one: one
    /// release on the same connection, queued behind the acquire, takes it back. Runs under
    /// `ctx.wait`, so the holder's next attempt is sent after it.
    fn undo_acquire(
        &mut self,
        (holder, kind): HoldKey,
        lease: Option<Duration>,
        ctx: &mut Context<Self>,
    ) {
        let (cmds, name) = (self.svc.commands.clone(), self.name.clone());
        let lease = lease.unwrap_or(self.svc.config.get_watchdog_timeout());
        let call = async move { cmds.release(kind, &name, &holder, lease).await };
        ctx.wait(call.into_actor(self).map(|res, act, _| match res {
            Ok(Released::NotHeld) => {}
            Ok(_) => tracing::warn!(lock = %act.name, "released what an acquire of unknown outcome may have taken"),
            Err(error) => {
                tracing::warn!(lock = %act.name, %error, "could not undo an acquire of unknown outcome; it expires after its lease")
            }
        }));
    }

    /// Records a hold granted by Redis and returns its guard.
    fn grant(
        &mut self,
        key: HoldKey,
        lease: Option<Duration>,
        started: Instant,
        token: Option<u64>,
        ctx: &mut Context<Self>,
    ) -> LockGuard {
        let watchdog = lease.is_none();
        let lease = lease.unwrap_or(self.svc.config.get_watchdog_timeout());
        let epoch = match self.holds.get_mut(&key) {
            Some(hold) => {
                hold.count += 1;
                hold.granted = hold.granted.max(started);
                hold.epoch
            }
            None => {
                let epoch = NEXT_EPOCH.fetch_add(1, Ordering::Relaxed);
                let (lost, _) = watch::channel(false);
                let hold = Hold {
                    count: 1,
                    epoch,
                    watchdog: false,
                    tracked: false,
                    granted: started,
                    lease,
                    lost,
                    expiry: None,
                    unreleased: 0,
                    reconcile: None,
                    reconcile_failures: 0,
                };
                self.holds.insert(key.clone(), hold);
                epoch
            }
        };
        if watchdog {
            self.watch(&key, ctx);
        } else {
            // The script just set the PTTL to this lease (it started no earlier than `started`).
            self.expire_at(&key, lease, started + lease, ctx);
        }
        self.busy(ctx);
        let lost = self.holds.get(&key).map(|h| h.lost.subscribe());
        let lost = lost.unwrap_or_else(|| watch::channel(true).1);
        LockGuard::new(ctx.address(), self.name.clone(), key, epoch, lost, token)
    }

    /// Puts a hold under the watchdog (for good: it renews until the hold ends).
    fn watch(&mut self, key: &HoldKey, ctx: &mut Context<Self>) {
        let Some(hold) = self.holds.get_mut(key) else {
            return;
        };
        if let Some(h) = hold.expiry.take() {
            ctx.cancel_future(h);
        }
        hold.lease = self.svc.config.get_watchdog_timeout();
        hold.watchdog = true;
        if !hold.tracked && self.track_timer.is_none() {
            let after = hold.lease / TRACK_AFTER;
            self.track_timer = Some(ctx.run_later(after, |act, ctx| {
                act.track_timer = None;
                act.track_due(ctx);
            }));
        }
    }

    /// Hands the watchdog holds that have lived long enough to the Watchdog, and schedules the
    /// next hand-over while others are still too young.
    fn track_due(&mut self, ctx: &mut Context<Self>) {
        let after = self.svc.config.get_watchdog_timeout() / TRACK_AFTER;
        let mut next: Option<Duration> = None;
        for ((holder, kind), hold) in &mut self.holds {
            if !hold.watchdog || hold.tracked {
                continue;
            }
            let age = hold.granted.elapsed();
            if age < after {
                next = Some(next.map_or(after - age, |n| n.min(after - age)));
                continue;
            }
            hold.tracked = true;
            self.svc.watchdog.do_send(Track {
                name: self.name.clone(),
                holder: holder.clone(),
                kind: *kind,
                epoch: hold.epoch,
                confirmed: hold.granted,
                actor: ctx.address().downgrade(),
            });
        }
        if let Some(next) = next {
            self.track_timer = Some(ctx.run_later(next, |act, ctx| {
                act.track_timer = None;
                act.track_due(ctx);
            }));
        }
    }

    /// A lease hold is lost when its lease runs out, since nobody renews it.
    fn expire_at(&mut self, key: &HoldKey, lease: Duration, at: Instant, ctx: &mut Context<Self>) {
        let Some(hold) = self.holds.get_mut(key) else {
            return;
        };
        if hold.watchdog {
            return;
        }
        hold.lease = lease;
        if let Some(h) = hold.expiry.take() {
            ctx.cancel_future(h);
        }
        let (key, epoch) = (key.clone(), hold.epoch);
        let after = at.saturating_duration_since(Instant::now());
        hold.expiry = Some(ctx.run_later(after, move |act, ctx| {
            act.lose(&key, epoch, "its lease ran out", ctx)
        }));
    }

    /// The hold is gone from Redis: tell its guards, stop renewing it.
    fn lose(&mut self, key: &HoldKey, epoch: u64, why: &str, ctx: &mut Context<Self>) {
        if self.holds.get(key).is_none_or(|h| h.epoch != epoch) {
            return;
        }
        if let Some(hold) = self.end_hold(key, ctx) {
            let (holder, kind) = (&key.0, key.1);
            if hold.watchdog {
                tracing::warn!(lock = %self.name, %holder, ?kind, why, "lock lost");
            } else {
                tracing::debug!(lock = %self.name, %holder, ?kind, why, "lease hold ended");
            }
            hold.lost.send_replace(true);
        }
        self.maybe_idle(ctx);
    }

    /// Removes a hold (released or lost) and its schedules.
    fn end_hold(&mut self, key: &HoldKey, ctx: &mut Context<Self>) -> Option<Hold> {
        let mut hold = self.holds.remove(key)?;
        for h in [hold.expiry.take(), hold.reconcile.take()]
            .into_iter()
            .flatten()
        {
            ctx.cancel_future(h);
        }
        if hold.tracked {
            self.svc.watchdog.do_send(Untrack {
                name: self.name.clone(),
                holder: key.0.clone(),
                kind: key.1,
                epoch: hold.epoch,
            });
        }
        Some(hold)
    }

    /// One release round trip for a guard's hold.
    fn release(&mut self, key: HoldKey, epoch: u64) -> AtomicResponse<Self, Result<(), LockError>> {
        let not_held = || LockError::NotHeld {
            name: self.name.to_string(),
            holder: key.1.field(&key.0),
        };
        let Some(hold) = self.holds.get_mut(&key).filter(|h| h.epoch == epoch) else {
            return AtomicResponse::new(Box::pin(actix::fut::ready(Err(not_held()))));
        };
        if hold.unreleased > 0 {
            // Earlier releases are unconfirmed: this one joins them, reconciled in one go.
            hold.unreleased += 1;
            return AtomicResponse::new(Box::pin(actix::fut::ready(Ok(()))));
        }
        let not_held = not_held();
        let (cmds, name, lease) = (self.svc.commands.clone(), self.name.clone(), hold.lease);
        let call = {
            let (holder, kind) = key.clone();
            async move { cmds.release(kind, &name, &holder, lease).await }
        };
        let started = Instant::now();
        AtomicResponse::new(Box::pin(call.into_actor(self).map(move |res, act, ctx| {
            let res = match res {
                Ok(Released::StillHeld) => {
                    if let Some(hold) = act.holds.get_mut(&key).filter(|h| h.epoch == epoch) {
                        hold.count = hold.count.saturating_sub(1).max(1);
                    }
                    act.expire_at(&key, lease, started + lease, ctx);
                    Ok(())
                }
                Ok(Released::Unlocked) => {
                    act.end_hold(&key, ctx);
                    // A write release that leaves its holder reading publishes nothing
                    // (protocol.md): wake this process's waiters here.
                    if key.1 == LockKind::Write && act.holds.contains_key(&(key.0.clone(), LockKind::Read)) {
                        act.wake_all(ctx);
                    }
                    Ok(())
                }
                Ok(Released::NotHeld) => {
                    act.lose(&key, epoch, "release found it gone", ctx);
                    Err(not_held)
                }
                Err(e) => {
                    // Did it run? Reconciliation finds out and finishes the job either way, so
                    // a released (or dropped) guard never leaves a hold renewed forever.
                    if let Some(hold) = act.holds.get_mut(&key).filter(|h| h.epoch == epoch) {
                        hold.unreleased += 1;
                        act.schedule_reconcile(&key, ctx);
                    }
                    Err(e)
                }
            };
            tracing::debug!(lock = %act.name, holder = %key.0, kind = ?key.1, ok = res.is_ok(), "release");
            act.maybe_idle(ctx);
            res
        })))
    }

    fn schedule_reconcile(&mut self, key: &HoldKey, ctx: &mut Context<Self>) {
        let Some(hold) = self.holds.get_mut(key) else {
            return;
        };
        if hold.reconcile.is_some() {
            return;
        }
        let delay = backoff(hold.reconcile_failures);
        let (key, epoch) = (key.clone(), hold.epoch);
        hold.reconcile = Some(ctx.run_later(delay, move |act, ctx| act.reconcile(key, epoch, ctx)));
    }

    /// Settles unconfirmed releases: reads the holder's count in Redis, which only this actor
    /// changes, to learn how many of them ran, then sends the rest.
    fn reconcile(&mut self, key: HoldKey, epoch: u64, ctx: &mut Context<Self>) {
        let Some(hold) = self.holds.get_mut(&key).filter(|h| h.epoch == epoch) else {
            return;
        };
        hold.reconcile = None;
        let (count, pending, lease) = (hold.count, hold.unreleased, hold.lease);
        let (cmds, name, (who, kind)) = (self.svc.commands.clone(), self.name.clone(), key.clone());
        let work = async move {
            let in_redis = cmds.inspect(kind, &name, &who).await?.count;
            let mut done = count.saturating_sub(in_redis).min(pending);
            let mut gone = in_redis == 0;
            while done < pending && !gone {
                match cmds.release(kind, &name, &who, lease).await {
                    Ok(Released::StillHeld) => done += 1,
                    Ok(Released::Unlocked) => (done, gone) = (done + 1, true),
                    Ok(Released::NotHeld) => gone = true,
                    Err(_) => break,
                }
            }
            Ok::<_, LockError>((done, gone))
        };
        ctx.wait(work.into_actor(self).map(move |res, act, ctx| {
            let Some(hold) = act.holds.get_mut(&key).filter(|h| h.epoch == epoch) else {
                return;
            };
            let holder = &key.0;
            match res {
                Ok((done, gone)) => {
                    hold.count = hold.count.saturating_sub(done);
                    hold.unreleased -= done;
                    if gone && hold.count == hold.unreleased {
                        tracing::debug!(lock = %act.name, %holder, "unconfirmed releases settled");
                        act.end_hold(&key, ctx);
                    } else if gone {
                        act.lose(&key, epoch, "gone while releases were unconfirmed", ctx);
                    } else if hold.unreleased > 0 {
                        hold.reconcile_failures = hold.reconcile_failures.saturating_add(1);
                        act.schedule_reconcile(&key, ctx);
                    } else {
                        hold.reconcile_failures = 0;
                        tracing::debug!(lock = %act.name, %holder, "unconfirmed releases settled");
                    }
                }
                Err(error) => {
                    hold.reconcile_failures = hold.reconcile_failures.saturating_add(1);
                    tracing::warn!(lock = %act.name, %holder, %error, "cannot settle releases yet");
                    act.schedule_reconcile(&key, ctx);
                }
            }
            act.maybe_idle(ctx);
        }));
    }

    /// A waiter's wait ran out.
    fn give_up(&mut self, id: u64, ctx: &mut Context<Self>) {
        if let Some(pos) = self.waiters.iter().position(|w| w.id == id) {
            self.settle(pos, ctx, |act, w, ctx| act.finish(w, Ok(None), ctx));
        }
        self.maybe_idle(ctx);
    }

    /// Removes the waiter at `pos` (a position just found in the queue) and its deadline, has
    /// `answer` tell its caller, then unsubscribes what no waiter needs any more. The answer is
    /// what someone waits for, so it goes out before the pub/sub traffic (an UNSUBSCRIBE would
    /// otherwise run on this thread before the caller's task wakes).
    fn settle(
        &mut self,
        pos: usize,
        ctx: &mut Context<Self>,
        answer: impl FnOnce(&mut Self, Waiter, &mut Context<Self>),
    ) {
        if let Some(mut w) = self.waiters.remove(pos) {
            if let Some(h) = w.deadline.take() {
                ctx.cancel_future(h);
            }
            if self.waiters.is_empty()
                && let Some(h) = self.retry.take()
            {
                ctx.cancel_future(h);
            }
            answer(self, w, ctx);
        }
        self.unsubscribe_unneeded();
    }

    /// A waiter that ends without the lock gets `outcome`. A fair-lock waiter first leaves the
    /// Redis queue (unless another local waiter of the same holder still needs the place), so it
    /// delays nobody behind it, and its caller hears back only once it has left.
    fn finish(
        &mut self,
        w: Waiter,
        outcome: Result<Option<LockGuard>, LockError>,
        ctx: &mut Context<Self>,
    ) {
        if !w.queued || self.waiters.iter().any(|o| o.holder == w.holder) {
            let _ = w.reply.send(outcome);
            return;
        }
        let (cmds, name) = (self.svc.commands.clone(), self.name.clone());
        let (holder, wait) = (w.holder.clone(), w.fair_wait);
        let call = async move { cmds.leave_queue(&name, &holder, wait).await };
        ctx.wait(call.into_actor(self).map(move |res, act, _| {
            if let Err(error) = res {
                tracing::warn!(lock = %act.name, %error, "could not leave the fair queue; the place expires");
            }
            let _ = w.reply.send(outcome);
        }));
    }

    /// A message on `channel`: for a fair lock, the waiter whose turn it is; else one waiter.
    fn wake_channel(&mut self, channel: &str, ctx: &mut Context<Self>) {
        if self.family != LockKind::Fair {
            return self.wake_one(ctx);
        }
        if let Some(id) = self
            .waiters
            .iter()
            .find(|w| w.channel == channel)
            .map(|w| w.id)
        {
            self.attempt(id, ctx);
        }
    }

    /// One wake-up (unlock message, TTL run out, reconnection): one attempt for the head waiter.
    fn wake_one(&mut self, ctx: &mut Context<Self>) {
        if let Some(h) = self.retry.take() {
            ctx.cancel_future(h);
        }
        if let Some(id) = self.waiters.front().map(|w| w.id) {
            self.attempt(id, ctx);
        }
    }

    /// A wake-all message (a write release): every waiter gets one attempt, oldest first, one
    /// round trip at a time.
    fn wake_all(&mut self, ctx: &mut Context<Self>) {
        if let Some(h) = self.retry.take() {
            ctx.cancel_future(h);
        }
        self.pending_wakes = self.waiters.iter().map(|w| w.id).collect();
        self.next_wake(ctx);
    }

    /// The next pending wake-up, skipping waiters that have left meanwhile (an attempt for one
    /// of those would make no round trip, and nothing would call this again).
    fn next_wake(&mut self, ctx: &mut Context<Self>) {
        while let Some(id) = self.pending_wakes.pop_front() {
            if self.waiters.iter().any(|w| w.id == id) {
                return self.attempt(id, ctx);
            }
        }
    }

    fn schedule_retry(&mut self, after: Duration, ctx: &mut Context<Self>) {
        if let Some(h) = self.retry.take() {
            ctx.cancel_future(h);
        }
        self.retry = Some(ctx.run_later(after, |act, ctx| {
            act.retry = None;
            act.wake_one(ctx);
        }));
    }

    /// Subscribes the channel of the waiter at `pos`, then tries once more: a release published
    /// before the subscription took effect would otherwise go unseen.
    fn subscribe(&mut self, pos: usize, ctx: &mut Context<Self>) {
        let channel = self.waiters[pos].channel.clone();
        if !self.subscribed.insert(channel.clone()) {
            return;
        }
        let request = self.svc.pubsub.send(Subscribe {
            channel: channel.clone(),
            id: self.id,
            actor: ctx.address().downgrade(),
        });
        ctx.spawn(request.into_actor(self).map(move |res, act, ctx| {
            if let Ok(Err(e)) = res {
                tracing::warn!(lock = %act.name, error = %e, "subscribe failed; waiting on the TTL");
            }
            if act.subscribed.contains(&channel) {
                act.wake_channel(&channel, ctx);
            }
        }));
    }

    /// Unsubscribes every channel no waiter needs any more.
    fn unsubscribe_unneeded(&mut self) {
        // Only a fair lock's waiters have channels of their own; the others share the lock's.
        if self.subscribed.is_empty() || (self.family != LockKind::Fair && !self.waiters.is_empty())
        {
            return;
        }
        let needed: HashSet<&str> = self.waiters.iter().map(|w| w.channel.as_str()).collect();
        let unneeded: Vec<String> = self
            .subscribed
            .iter()
            .filter(|c| !needed.contains(c.as_str()))
            .cloned()
            .collect();
        for channel in unneeded {
            self.subscribed.remove(&channel);
            self.svc.pubsub.do_send(Unsubscribe {
                channel,
                id: self.id,
            });
        }
    }

    fn busy(&mut self, ctx: &mut Context<Self>) {
        if self.keepalive.is_none() {
            self.keepalive = Some(ctx.address());
        }
    }

    fn maybe_idle(&mut self, ctx: &mut Context<Self>) {
        if self.holds.is_empty() && self.waiters.is_empty() {
            // A pending timer would keep the actor alive.
            for h in [self.retry.take(), self.track_timer.take()]
                .into_iter()
                .flatten()
            {
                ctx.cancel_future(h);
            }
            self.unsubscribe_unneeded();
            self.keepalive = None;
        }
    }
}

/// The delay before retrying after `failures` consecutive errors: doubling, capped.
fn backoff(failures: u32) -> Duration {
    ERROR_BACKOFF_MIN
        .saturating_mul(1 << failures.min(6))
        .min(ERROR_BACKOFF_MAX)
}

fn validate(msg: &Acquire, family: LockKind) -> Result<(), LockError> {
    if msg.holder.is_empty() {
        return Err(LockError::invalid("holder", "must not be empty"));
    }
    if msg.kind.family() != family {
        let why = format!(
            "a {:?} request sent to the actor of a {family:?} lock",
            msg.kind
        );
        return Err(LockError::invalid("kind", why));
    }
    match msg.lease {
        Some(lease) if lease < Duration::from_millis(1) => Err(LockError::invalid(
            "lease",
            format!("{lease:?} is below 1 ms"),
        )),
        Some(lease) if lease > MAX_LEASE => Err(LockError::invalid(
            "lease",
            format!("{lease:?} is above {MAX_LEASE:?}"),
        )),
        _ => Ok(()),
    }
}

impl Actor for LockActor {
    type Context = Context<Self>;

    fn stopped(&mut self, _: &mut Self::Context) {
        if let Some(registry) = self.registry.upgrade() {
            registry.do_send(Forget {
                family: self.family,
                name: self.name.clone(),
                id: self.id,
            });
        }
        for w in self.waiters.drain(..) {
            let _ = w.reply.send(Err(LockError::Shutdown));
        }
        self.unsubscribe_unneeded();
        for ((holder, kind), hold) in self.holds.drain() {
            if hold.tracked {
                self.svc.watchdog.do_send(Untrack {
                    name: self.name.clone(),
                    holder,
                    kind,
                    epoch: hold.epoch,
                });
            }
        }
        tracing::trace!(lock = %self.name, id = self.id, "lock actor stopped");
    }
}

/// The reply to an [`Acquire`]: delivered when the lock is granted, the wait ends or it fails.
/// It queues the caller's reply sender as a waiter, so nothing blocks the actor meanwhile.
pub struct AcquireReply(Acquire);

impl Handler<Acquire> for LockActor {
    type Result = AcquireReply;

    fn handle(&mut self, msg: Acquire, _: &mut Context<Self>) -> AcquireReply {
        AcquireReply(msg)
    }
}

impl MessageResponse<LockActor, Acquire> for AcquireReply {
    fn handle(
        self,
        ctx: &mut Context<LockActor>,
        tx: Option<OneshotSender<Result<Option<LockGuard>, LockError>>>,
    ) {
        // `do_send` leaves nobody to hand a guard to: taking the lock would only release it again.
        let Some(tx) = tx else { return };
        // Runs before the next message, with the actor at hand.
        ctx.wait(
            actix::fut::ready(())
                .map(move |(), act: &mut LockActor, ctx| act.enqueue(self.0, tx, ctx)),
        );
    }
}

impl Handler<Release> for LockActor {
    type Result = AtomicResponse<Self, Result<(), LockError>>;

    fn handle(&mut self, Release(mut guard): Release, _: &mut Context<Self>) -> Self::Result {
        let (key, epoch) = guard.disarm();
        self.release(key, epoch)
    }
}

impl Handler<ReleaseHold> for LockActor {
    type Result = AtomicResponse<Self, Result<(), LockError>>;

    fn handle(&mut self, msg: ReleaseHold, _: &mut Context<Self>) -> Self::Result {
        self.release((msg.holder, msg.kind), msg.epoch)
    }
}

impl Handler<Unlocked> for LockActor {
    type Result = ();

    fn handle(&mut self, msg: Unlocked, ctx: &mut Context<Self>) {
        if msg.all {
            self.wake_all(ctx);
        } else {
            self.wake_channel(&msg.channel, ctx);
        }
    }
}

impl Handler<Resubscribed> for LockActor {
    type Result = ();

    fn handle(&mut self, _: Resubscribed, ctx: &mut Context<Self>) {
        // Fair-lock waiters each have their own turn, and any of their messages may be lost.
        if self.family == LockKind::Fair {
            self.wake_all(ctx);
        } else {
            self.wake_one(ctx);
        }
    }
}

impl Handler<HoldLost> for LockActor {
    type Result = ();

    fn handle(&mut self, msg: HoldLost, ctx: &mut Context<Self>) {
        self.lose(
            &(msg.holder, msg.kind),
            msg.epoch,
            "renewal found it gone or failed too long",
            ctx,
        );
    }
}

impl Handler<StopLock> for LockActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: StopLock, _: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        // Fair-lock waiters leave the Redis queue rather than block it until their place expires.
        let mut leaving: Vec<(Arc<str>, Duration)> = Vec::new();
        for w in self.waiters.drain(..) {
            if w.queued && !leaving.iter().any(|(h, _)| *h == w.holder) {
                leaving.push((w.holder.clone(), w.fair_wait));
            }
            let _ = w.reply.send(Err(LockError::Shutdown));
        }
        // Release each hold as often as it was taken (the hash has only this holder's field).
        let releases: Vec<_> = if msg.release {
            self.holds
                .iter()
                .map(|(key, h)| (key.clone(), h.count, h.lease))
                .collect()
        } else {
            Vec::new()
        };
        let (cmds, name) = (self.svc.commands.clone(), self.name.clone());
        let work = async move {
            for (holder, wait) in leaving {
                if let Err(e) = cmds.leave_queue(&name, &holder, wait).await {
                    tracing::warn!(lock = %name, %holder, error = %e, "leaving the fair queue at shutdown failed");
                }
            }
            for ((holder, kind), count, lease) in releases {
                for _ in 0..count {
                    match cmds.release(kind, &name, &holder, lease).await {
                        Ok(Released::StillHeld) => {}
                        Ok(_) => break,
                        Err(e) => {
                            tracing::warn!(lock = %name, %holder, error = %e, "release at shutdown failed");
                            break;
                        }
                    }
                }
            }
        };
        AtomicResponse::new(Box::pin(work.into_actor(self).map(|(), _, ctx| ctx.stop())))
    }
}

/// Resolves when waiter `id`'s caller drops its request (removing the waiter), or when the
/// waiter has left the queue for any other reason.
struct CallerGone {
    id: u64,
}

impl ActorFuture<LockActor> for CallerGone {
    type Output = ();

    fn poll(
        self: Pin<&mut Self>,
        act: &mut LockActor,
        ctx: &mut Context<LockActor>,
        task: &mut std::task::Context<'_>,
    ) -> Poll<()> {
        let id = self.id;
        let Some(pos) = act.waiters.iter().position(|w| w.id == id) else {
            return Poll::Ready(());
        };
        match act.waiters[pos].reply.poll_closed(task) {
            Poll::Ready(()) => {
                // Nobody listens: this only leaves the queue.
                act.settle(pos, ctx, |act, w, ctx| act.finish(w, Ok(None), ctx));
                tracing::debug!(lock = %act.name, "waiter left");
                act.maybe_idle(ctx);
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
