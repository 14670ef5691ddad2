//! The Watchdog's first job: renewing every hold taken without a lease, in batched script
//! calls, and telling a hold's actor when it is lost.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::WeakRecipient;
use actix::prelude::*;
use futures_util::future::join_all;
use rustc_hash::FxHashMap;

use super::Watchdog;
use crate::actors::lock_state::TRACK_AFTER;
use crate::actors::lost::Validity;
use crate::actors::messages::{HoldLost, Renewal};
use crate::config::Config;
use crate::error::LockError;
use crate::protocol::RENEW_BATCH;
use crate::protocol::keys;

/// How soon a failed renewal is first tried again.
const FIRST_RETRY: Duration = Duration::from_millis(25);
/// The longest gap between two retries of a failed renewal: once Redis answers again, a
/// failing hold is confirmed within about this much (plus a round trip).
const MAX_RETRY: Duration = Duration::from_millis(500);
/// Nor more than the renewal interval divided by this apart (short watchdog timeouts).
const RETRIES_PER_INTERVAL: u32 = 4;

/// The holds to renew, and the schedule of their renewal calls.
pub(super) struct Renewals {
    pub(super) timeout: Duration,
    pub(super) interval: Duration,
    /// Holds to renew: from `Track` to `Untrack` or loss.
    pub(super) tracked: FxHashMap<RenewKey, Tracked>,
    /// Whether a round's calls are still under way (a slow Redis must not pile them up).
    ticking: bool,
    /// A regular tick came while calls were under way: it runs once they are done.
    tick_due: bool,
    /// The retry of failed renewals, when one is scheduled.
    retry: Option<SpawnHandle>,
    /// How long the next retry waits: [`FIRST_RETRY`], doubled by each retry that fails.
    backoff: Duration,
}

/// What one tracked renewal is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct RenewKey {
    pub(super) name: Arc<str>,
    /// The holder id; for permits, the permit ids (hex, joined by commas).
    pub(super) holder: Arc<str>,
    pub(super) what: Renewal,
}

/// One renewal script call: holds of one kind (and, in a cluster, of one slot), with the epoch
/// each was tracked under.
type Batch = Vec<(RenewKey, u64)>;

pub(super) struct Tracked {
    pub(super) epoch: u64,
    /// When Redis last confirmed the hold (the grant, or a renewal).
    pub(super) confirmed: Instant,
    /// When the hold was granted (for the client record).
    pub(super) granted: Instant,
    /// Where a renewal is published for the hold's guards.
    pub(super) validity: Option<Validity>,
    pub(super) actor: WeakRecipient<HoldLost>,
    /// The last renewal call that carried it failed: it is retried until renewed or lost.
    pub(super) failing: bool,
}

impl Tracked {
    /// When the hold is lost unless a renewal confirms it first: a whole watchdog timeout
    /// after its last confirmation.
    fn deadline(&self, timeout: Duration) -> Instant {
        self.confirmed + timeout
    }
}

/// Which holds a round of renewal calls carries.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Round {
    /// Every tracked hold: the regular tick.
    Every,
    /// The holds whose last renewal failed: a retry.
    Failing,
}

/// What one round did.
#[derive(Default)]
struct Counts {
    renewed: usize,
    lost: usize,
    failed: usize,
}

impl Renewals {
    pub(super) fn new(config: &Config) -> Self {
        Self {
            timeout: config.get_watchdog_timeout(),
            interval: config.renewal_interval(),
            tracked: FxHashMap::default(),
            ticking: false,
            tick_due: false,
            retry: None,
            backoff: FIRST_RETRY,
        }
    }

    /// A restarted Watchdog's: the old context's calls and timers are gone with it, so the
    /// first tick retries what failed.
    pub(super) fn restarted(&mut self) {
        self.ticking = false;
        self.tick_due = false;
        self.retry = None;
        self.backoff = FIRST_RETRY;
    }

    /// The round's holds in script calls: one list per kind (each kind has its renewal
    /// script), 100 holds a call; in a cluster also per slot, since one script call may only
    /// touch keys of one slot. The calls run concurrently: in a cluster each goes to the node
    /// of its slot.
    fn batches(&self, round: Round, by_slot: bool) -> Vec<Batch> {
        let mut by_kind: HashMap<(Renewal, u16), Batch> = HashMap::new();
        let young = young_before(Instant::now(), self.timeout);
        let held = self
            .tracked
            .iter()
            .filter(|(_, t)| round == Round::Every || t.failing)
            .filter(|(key, t)| !(matches!(key.what, Renewal::Lock(_)) && t.granted > young));
        for (key, t) in held {
            let slot = if by_slot {
                keys::slot(key.name.as_bytes())
            } else {
                0
            };
            by_kind
                .entry((key.what, slot))
                .or_default()
                .push((key.clone(), t.epoch));
        }
        by_kind
            .into_values()
            .flat_map(|holds| {
                holds
                    .chunks(RENEW_BATCH)
                    .map(<[_]>::to_vec)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// One call's outcome: renewed holds are confirmed, missing ones lost; after a failed
    /// call, a hold no renewal confirmed for a whole watchdog timeout is lost too.
    fn renewed(
        &mut self,
        batch: Batch,
        res: Result<Vec<bool>, LockError>,
        started: Instant,
        count: &mut Counts,
    ) {
        let res = match res {
            // A reply with fewer flags than holds sent (Redis does not send one) leaves the
            // holds it does not name unconfirmed: they count as a failed call.
            Ok(flags) if flags.len() < batch.len() => {
                let mut batch = batch;
                let rest = batch.split_off(flags.len());
                self.renewed(batch, Ok(flags), started, count);
                return self.renewed(
                    rest,
                    Err(LockError::UnexpectedReply {
                        op: "renew",
                        detail: "fewer renewal flags than holds sent".to_owned(),
                    }),
                    started,
                    count,
                );
            }
            res => res,
        };
        match res {
            Ok(flags) => {
                for ((key, epoch), ok) in batch.into_iter().zip(flags) {
                    if !ok {
                        count.lost += 1;
                        self.lost(key, epoch);
                    } else if let Some(t) = self.tracked.get_mut(&key) {
                        count.renewed += 1;
                        t.failing = false;
                        t.confirmed = started.max(t.confirmed);
                        // The renewal script set the TTL to the timeout, no earlier than the
                        // call was sent.
                        if let Some(v) = &t.validity {
                            v.confirm(started, self.timeout);
                        }
                    }
                }
            }
            Err(error) => {
                count.failed += batch.len();
                // Warned once as holds start failing; their retries, every few hundred ms
                // while Redis is away, only at debug level.
                let newly = batch
                    .iter()
                    .any(|(key, _)| self.tracked.get(key).is_some_and(|t| !t.failing));
                if newly {
                    tracing::warn!(%error, holds = batch.len(), "renewal failed");
                } else {
                    tracing::debug!(%error, holds = batch.len(), "renewal retry failed");
                }
                let now = Instant::now();
                for (key, epoch) in batch {
                    let Some(t) = self.tracked.get_mut(&key) else {
                        continue;
                    };
                    if now >= t.deadline(self.timeout) {
                        count.lost += 1;
                        self.lost(key, epoch);
                    } else if t.epoch == epoch {
                        t.failing = true;
                    }
                }
            }
        }
    }

    /// The hold `key` of `epoch` is lost: renewal for it stops, and its actor is told.
    pub(super) fn lost(&mut self, key: RenewKey, epoch: u64) {
        if self.tracked.get(&key).is_none_or(|t| t.epoch != epoch) {
            return;
        }
        let actor = self.tracked.remove(&key).and_then(|t| t.actor.upgrade());
        if let Some(actor) = actor {
            actor.do_send(HoldLost {
                holder: key.holder,
                kind: key.what,
                epoch,
            });
        }
    }
}

/// Lock holds granted after the instant returned are too young to renew: they came at their
/// grant to be watched (`tracking.rs`), and are renewed, as before, once they have lived
/// [`TRACK_AFTER`] of the timeout (the first renewal then comes at most half the timeout after
/// the grant, the PTTL being the whole timeout), so the many short holds cost no renewal.
fn young_before(now: Instant, timeout: Duration) -> Instant {
    now.checked_sub(timeout / TRACK_AFTER).unwrap_or(now)
}

impl Watchdog {
    /// One round of renewal calls: every hold (the regular tick), or those whose last renewal
    /// failed (a retry). A round never starts while another is under way; a regular tick that
    /// finds one under way runs once it is done.
    pub(super) fn tick(&mut self, ctx: &mut Context<Self>, round: Round) {
        if self.halted || self.renewals.tracked.is_empty() {
            return;
        }
        if self.renewals.ticking {
            self.renewals.tick_due |= round == Round::Every;
            return;
        }
        if let Some(retry) = self.renewals.retry.take() {
            // This round carries every failing hold the retry would have.
            ctx.cancel_future(retry);
        }
        let batches = self.renewals.batches(round, self.commands.by_slot());
        if batches.is_empty() {
            return;
        }
        self.renewals.ticking = true;
        let (commands, timeout) = (self.commands.clone(), self.renewals.timeout);
        // A regular round of watched lock holds runs on the tracking connection, so that
        // lockman's own renewals cause no invalidation and no check (`tracking.rs`); a retry
        // goes on the command connection, whose errors tell a failover.
        let tracking = match round {
            Round::Every => self.watch_link(),
            Round::Failing => None,
        };
        let connection = tracking.as_ref().map(|(_, connection)| *connection);
        let calls = batches.len();
        let started = Instant::now();
        let work = join_all(batches.into_iter().map(move |batch| {
            let commands = commands.clone();
            let tracking = tracking.clone();
            async move {
                let what = batch[0].0.what;
                let pairs: Vec<(&str, &str)> = batch
                    .iter()
                    .map(|(key, _)| (&*key.name, &*key.holder))
                    .collect();
                let link = tracking.as_ref().map(|(link, _)| link);
                let res = match what {
                    Renewal::Lock(kind) => commands.renew(kind, &pairs, timeout, link).await,
                    Renewal::Permits => commands.renew_permits(&pairs, timeout).await,
                };
                (batch, res)
            }
        }));
        ctx.spawn(work.into_actor(self).map(move |results, act, ctx| {
            act.renewals.ticking = false;
            let mut count = Counts::default();
            let mut link_failed = false;
            for (batch, res) in results {
                link_failed |= res.is_err() && matches!(batch[0].0.what, Renewal::Lock(_));
                act.renewals.renewed(batch, res, started, &mut count);
            }
            if let Some(connection) = connection
                && link_failed
            {
                act.watch_failed(connection, ctx);
            }
            let Counts {
                renewed,
                lost,
                failed,
            } = count;
            let retry = round == Round::Failing;
            tracing::debug!(renewed, lost, failed, retry, took = ?started.elapsed(), "renewal tick");
            crate::metrics::renewals(calls, renewed, failed);
            if std::mem::take(&mut act.renewals.tick_due) {
                act.tick(ctx, Round::Every);
            } else {
                act.retry_later(ctx);
            }
        }));
    }

    /// Schedules the retry of the failing holds, if any: after the backoff, which doubles up
    /// to [`MAX_RETRY`] (and a quarter of the interval), and no later than the earliest
    /// failing hold's deadline, so that a hold Redis does not confirm by then is found lost
    /// at once. With no hold failing the backoff starts again from [`FIRST_RETRY`].
    fn retry_later(&mut self, ctx: &mut Context<Self>) {
        let renewals = &mut self.renewals;
        if self.halted || renewals.retry.is_some() {
            return;
        }
        let timeout = renewals.timeout;
        let Some(deadline) = renewals
            .tracked
            .values()
            .filter(|t| t.failing)
            .map(|t| t.deadline(timeout))
            .min()
        else {
            renewals.backoff = FIRST_RETRY;
            return;
        };
        let delay = renewals
            .backoff
            .min(deadline.saturating_duration_since(Instant::now()))
            .max(Duration::from_millis(1));
        let most = MAX_RETRY.min(renewals.interval / RETRIES_PER_INTERVAL);
        renewals.backoff = (renewals.backoff * 2).min(most).max(FIRST_RETRY);
        renewals.retry = Some(ctx.run_later(delay, |act, ctx| {
            act.renewals.retry = None;
            act.tick(ctx, Round::Failing);
        }));
    }
}
