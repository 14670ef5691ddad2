//! The Watchdog: renews every hold this manager has without a lease, on one schedule every
//! third of the watchdog timeout, up to [`RENEW_BATCH`] holds per script call. Lock actors hand
//! it a hold (`Track`) once the hold has lived a sixth of the timeout, so short holds cost
//! nothing here.
//!
//! A hold is lost when a renewal finds its field gone, or when no renewal has succeeded for a
//! whole watchdog timeout (Redis unreachable): its lock actor is told, and renewal for it stops.
//! A tick that failed is tried again after a quarter of the interval, not a whole one.
//! It runs under a `Supervisor`: if it ever stops it is restarted with its holds and schedule.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::WeakAddr;
use actix::prelude::*;
use futures_util::future::join_all;
use rustc_hash::FxHashMap;

use super::LockActor;
use super::direct::{DirectHold, Renewals};
use super::lock_state::TRACK_AFTER;
use super::messages::*;
use crate::config::Config;
use crate::keys;
use crate::scripts::LockKind;
use crate::scripts::{Commands, RENEW_BATCH};

/// After a renewal tick with failures, how many retries fit into one renewal interval.
const RETRIES_PER_INTERVAL: u32 = 4;

/// The actor that owns renewal.
pub struct Watchdog {
    commands: Commands,
    timeout: Duration,
    interval: Duration,
    /// Holds to renew, by (name, holder, kind): from `Track` to `Untrack` or loss.
    tracked: FxHashMap<HoldKey, Tracked>,
    /// Whether a tick's renewals are still under way (a slow Redis must not pile them up).
    ticking: bool,
    /// Set by `Halt`: no more renewals.
    halted: bool,
    /// Holds taken on the direct path (`direct`), queued by handles, drained here.
    renewals: Renewals,
    direct: Vec<Arc<DirectHold>>,
}

type HoldKey = (Arc<str>, Arc<str>, LockKind);

/// Whose hold one renewal entry is: a lock actor's (by epoch), or a direct one.
#[derive(Clone)]
enum Who {
    Actor(u64),
    Direct(Arc<DirectHold>),
}

struct Tracked {
    epoch: u64,
    /// When Redis last confirmed the hold (the grant, or a renewal).
    confirmed: Instant,
    actor: WeakAddr<LockActor>,
}

impl Watchdog {
    pub(crate) fn new(commands: Commands, config: &Config, renewals: Renewals) -> Self {
        let (timeout, interval) = (config.get_watchdog_timeout(), config.renewal_interval());
        Self {
            commands,
            timeout,
            interval,
            tracked: FxHashMap::default(),
            ticking: false,
            halted: false,
            renewals,
            direct: Vec::new(),
        }
    }

    /// Takes in the direct holds queued since, and forgets the ended ones.
    fn drain_direct(&mut self) {
        self.direct.append(&mut self.renewals.drain());
        self.direct.retain(|h| !h.is_ended());
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        if self.ticking || self.halted {
            return;
        }
        self.drain_direct();
        if self.tracked.is_empty() && self.direct.is_empty() {
            return;
        }
        self.ticking = true;
        // One batch list per kind (each kind has its renewal script), 100 holds a batch; in a
        // cluster also per slot, since one script call may only touch keys of one slot. The
        // batches run concurrently: in a cluster each goes to the node of its slot.
        let by_slot = self.commands.by_slot();
        let mut by_kind: HashMap<(LockKind, u16), Vec<(HoldKey, Who)>> = HashMap::new();
        let slot = |name: &str| {
            if by_slot {
                keys::slot(name.as_bytes())
            } else {
                0
            }
        };
        for (key, t) in &self.tracked {
            by_kind
                .entry((key.2, slot(&key.0)))
                .or_default()
                .push((key.clone(), Who::Actor(t.epoch)));
        }
        // A direct hold is renewed from when a lock actor's would be tracked (`TRACK_AFTER`).
        let young = Instant::now().checked_sub(self.timeout / TRACK_AFTER);
        for h in &self.direct {
            if young.is_some_and(|young| h.taken <= young) {
                let key = (h.name().clone(), h.holder().clone(), LockKind::Reentrant);
                by_kind
                    .entry((LockKind::Reentrant, slot(h.name())))
                    .or_default()
                    .push((key, Who::Direct(h.clone())));
            }
        }
        if by_kind.is_empty() {
            self.ticking = false;
            return;
        }
        let batches: Vec<Vec<(HoldKey, Who)>> = by_kind
            .into_values()
            .flat_map(|holds| {
                holds
                    .chunks(RENEW_BATCH)
                    .map(<[_]>::to_vec)
                    .collect::<Vec<_>>()
            })
            .collect();
        let (commands, timeout) = (self.commands.clone(), self.timeout);
        let calls = batches.len();
        let started = Instant::now();
        let work = join_all(batches.into_iter().map(move |batch| {
            let commands = commands.clone();
            async move {
                let kind = batch[0].0.2;
                let pairs: Vec<(&str, &str)> =
                    batch.iter().map(|((n, h, _), _)| (&**n, &**h)).collect();
                let res = commands.renew(kind, &pairs, timeout).await;
                (batch, res)
            }
        }));
        ctx.spawn(work.into_actor(self).map(move |results, act, ctx| {
            act.ticking = false;
            let (mut renewed, mut lost, mut failed) = (0usize, 0usize, 0usize);
            for (batch, res) in results {
                match res {
                    Ok(flags) => {
                        for ((key, who), ok) in batch.into_iter().zip(flags) {
                            if !ok {
                                lost += 1;
                                act.lost(key, who);
                                continue;
                            }
                            renewed += 1;
                            match who {
                                Who::Actor(_) => {
                                    if let Some(t) = act.tracked.get_mut(&key) {
                                        t.confirmed = started.max(t.confirmed);
                                    }
                                }
                                Who::Direct(h) => {
                                    if let Ok(mut confirmed) = h.confirmed.lock() {
                                        *confirmed = started.max(*confirmed);
                                    }
                                }
                            }
                        }
                    }
                    Err(error) => {
                        failed += batch.len();
                        tracing::warn!(%error, holds = batch.len(), "renewal failed");
                        let now = Instant::now();
                        for (key, who) in batch {
                            let confirmed = match &who {
                                Who::Actor(_) => act.tracked.get(&key).map(|t| t.confirmed),
                                Who::Direct(h) => h.confirmed.lock().ok().map(|c| *c),
                            };
                            let expired =
                                confirmed.is_some_and(|c| now.duration_since(c) >= act.timeout);
                            if expired {
                                lost += 1;
                                act.lost(key, who);
                            }
                        }
                    }
                }
            }
            tracing::debug!(renewed, lost, failed, took = ?started.elapsed(), "renewal tick");
            crate::metrics::renewals(calls, renewed, failed);
            if failed > 0 && !act.halted {
                // Redis away, or a failover under way: try again soon rather than a whole
                // interval later, so that a hold survives an outage of up to about two
                // thirds of the watchdog timeout instead of one third.
                ctx.run_later(act.interval / RETRIES_PER_INTERVAL, |act, ctx| {
                    act.tick(ctx)
                });
            }
        }));
    }

    fn lost(&mut self, key: HoldKey, who: Who) {
        let epoch = match who {
            Who::Actor(epoch) => epoch,
            Who::Direct(h) => return h.lose(),
        };
        if self.tracked.get(&key).is_none_or(|t| t.epoch != epoch) {
            return;
        }
        let actor = self.tracked.remove(&key).and_then(|t| t.actor.upgrade());
        if let Some(actor) = actor {
            actor.do_send(HoldLost {
                holder: key.1,
                kind: key.2,
                epoch,
            });
        }
    }
}

impl Actor for Watchdog {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if !self.halted {
            ctx.run_interval(self.interval, |act, ctx| act.tick(ctx));
        }
    }
}

impl Supervised for Watchdog {
    fn restarting(&mut self, _: &mut Context<Self>) {
        self.ticking = false;
    }
}

impl Handler<Track> for Watchdog {
    type Result = ();

    fn handle(&mut self, msg: Track, _: &mut Context<Self>) {
        if self.halted {
            return;
        }
        let key = (msg.name, msg.holder, msg.kind);
        let tracked = Tracked {
            epoch: msg.epoch,
            confirmed: msg.confirmed,
            actor: msg.actor,
        };
        self.tracked.insert(key, tracked);
    }
}

impl Handler<Untrack> for Watchdog {
    type Result = ();

    fn handle(&mut self, msg: Untrack, _: &mut Context<Self>) {
        let key = (msg.name, msg.holder, msg.kind);
        if self.tracked.get(&key).is_some_and(|t| t.epoch == msg.epoch) {
            self.tracked.remove(&key);
        }
    }
}

impl Handler<RenewNow> for Watchdog {
    type Result = ();

    fn handle(&mut self, _: RenewNow, ctx: &mut Context<Self>) {
        self.tick(ctx);
    }
}

impl Handler<DrainDirect> for Watchdog {
    type Result = ();

    fn handle(&mut self, _: DrainDirect, _: &mut Context<Self>) {
        self.drain_direct();
    }
}

impl Handler<ReleaseDirect> for Watchdog {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: ReleaseDirect, _: &mut Context<Self>) -> Self::Result {
        self.drain_direct();
        let holds = std::mem::take(&mut self.direct);
        Box::pin(async move {
            join_all(holds.into_iter().map(DirectHold::release_at_shutdown)).await;
        })
    }
}

impl Handler<Halt> for Watchdog {
    type Result = ();

    fn handle(&mut self, _: Halt, ctx: &mut Context<Self>) {
        self.halted = true;
        self.tracked.clear();
        ctx.stop();
    }
}
