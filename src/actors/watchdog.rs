//! The Watchdog: renews every hold this manager has without a lease, on one schedule every
//! third of the watchdog timeout, up to [`RENEW_BATCH`] holds per script call. Lock actors hand
//! it a hold (`Track`) once the hold has lived a sixth of the timeout, so short holds cost
//! nothing here.
//!
//! A hold is lost when a renewal finds its field gone, or when no renewal has succeeded for a
//! whole watchdog timeout (Redis unreachable): its lock actor is told, and renewal for it stops.
//! A renewal call that failed (an error, or no reply within the response timeout) is retried
//! soon, not at the next tick: the holds it carried, in one batched call again, after
//! [`FIRST_RETRY`], then twice as long each time up to [`MAX_RETRY`] (and a quarter of the
//! interval), until they are renewed or their timeout has passed (then they are lost). A hold
//! whose Redis comes back within its validity is thus confirmed again within about a retry
//! gap (at most [`MAX_RETRY`] and a round trip), so a scope whose margin is longer than that
//! goes on working.
//! It runs under a `Supervisor`: if it ever stops it is restarted with its holds and schedule.
//!
//! Each tick it also refreshes the manager's client record (docs/protocol.md, "Client
//! records"): who the manager is, the holds it tracks (holds old enough to be renewed) and the
//! names its callers wait on (the [`Board`]); and it reports the top K contended names to the
//! metrics. Short holds and uncontended acquires never reach it, so they cost nothing here.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::WeakRecipient;
use actix::prelude::*;
use futures_util::future::join_all;
use rustc_hash::FxHashMap;

use super::board::Board;
use super::messages::*;
use super::shell::lost::Validity;
use crate::config::Config;
use crate::protocol::keys;
use crate::protocol::{Commands, RENEW_BATCH};

/// How soon a failed renewal is first tried again.
const FIRST_RETRY: Duration = Duration::from_millis(25);
/// The longest gap between two retries of a failed renewal: once Redis answers again, a
/// failing hold is confirmed within about this much (plus a round trip).
const MAX_RETRY: Duration = Duration::from_millis(500);
/// Nor more than the renewal interval divided by this apart (short watchdog timeouts).
const RETRIES_PER_INTERVAL: u32 = 4;

/// The actor that owns renewal.
pub(crate) struct Watchdog {
    commands: Commands,
    timeout: Duration,
    interval: Duration,
    /// Holds to renew, by (name, holder, kind): from `Track` to `Untrack` or loss.
    tracked: FxHashMap<RenewKey, Tracked>,
    /// Whether a tick's renewals are still under way (a slow Redis must not pile them up).
    ticking: bool,
    /// A regular tick came while renewals were under way: it runs once they are done.
    tick_due: bool,
    /// The retry of failed renewals, when one is scheduled.
    retry: Option<SpawnHandle>,
    /// How long the next retry waits: [`FIRST_RETRY`], doubled by each retry that fails.
    backoff: Duration,
    /// Set by `Halt`: no more renewals.
    halted: bool,
    /// What the client record says of this manager, and whether it is still written.
    record: Record,
    /// Who waits on which names here.
    board: Arc<Board>,
    /// How many names get per-name contention series ([`Config::contention_top_k`]).
    top_k: usize,
    /// The names the last tick reported as contended.
    shown: Vec<Arc<str>>,
}

/// The client record's fixed part, and its state.
struct Record {
    id: String,
    fixed: Vec<(String, String)>,
    /// A write under way (a slow Redis must not pile them up).
    writing: bool,
    /// Whether one was written (there is one to delete at shutdown).
    written: bool,
    /// The user may not write it (no permission for `lockman_client:*`): skipped for good,
    /// after one warning.
    off: bool,
}

/// The most holds, and the most waited names, one record lists (the longest held, the most
/// waited on); the record counts them all.
const MAX_LISTED: usize = 1000;

/// What one tracked renewal is: (name, holder or permit ids, what is renewed).
type RenewKey = (Arc<str>, Arc<str>, Renewal);

/// One renewal script call: holds of one kind (and, in a cluster, of one slot), with the epoch
/// each was tracked under.
type Batch = Vec<(RenewKey, u64)>;

struct Tracked {
    epoch: u64,
    /// When Redis last confirmed the hold (the grant, or a renewal).
    confirmed: Instant,
    /// When the hold was granted (for the client record).
    granted: Instant,
    /// Where a renewal is published for the hold's guards.
    validity: Option<Validity>,
    actor: WeakRecipient<HoldLost>,
    /// The last renewal call that carried it failed: it is retried until renewed or lost.
    failing: bool,
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
enum Round {
    /// Every tracked hold: the regular tick.
    Every,
    /// The holds whose last renewal failed: a retry.
    Failing,
}

impl Watchdog {
    pub(crate) fn new(
        commands: Commands,
        config: &Config,
        client_id: uuid::Uuid,
        board: Arc<Board>,
    ) -> Self {
        let (timeout, interval) = (config.get_watchdog_timeout(), config.renewal_interval());
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let fixed = vec![
            ("service".to_owned(), config.get_client_name()),
            ("host".to_owned(), host_name()),
            ("pid".to_owned(), std::process::id().to_string()),
            ("version".to_owned(), env!("CARGO_PKG_VERSION").to_owned()),
            ("started".to_owned(), started.to_string()),
        ];
        Self {
            commands,
            timeout,
            interval,
            tracked: FxHashMap::default(),
            ticking: false,
            tick_due: false,
            retry: None,
            backoff: FIRST_RETRY,
            halted: false,
            record: Record {
                id: client_id.hyphenated().to_string(),
                fixed,
                writing: false,
                written: false,
                off: false,
            },
            board,
            top_k: config.get_contention_top_k(),
            shown: Vec::new(),
        }
    }

    /// Refreshes the client record and reports the contended names, every renewal interval.
    fn publish(&mut self, ctx: &mut Context<Self>) {
        if self.halted {
            return;
        }
        let now = Instant::now();
        let (top, contended) = self.board.take_window(self.top_k, now);
        crate::metrics::contention(&top, contended, &mut self.shown);
        if self.record.off || self.record.writing {
            return;
        }
        let fields = self.record_fields(now);
        self.record.writing = true;
        self.record.written = true;
        let (commands, id, ttl) = (self.commands.clone(), self.record.id.clone(), self.timeout);
        let write = async move { commands.write_client_record(&id, ttl, &fields).await };
        ctx.spawn(write.into_actor(self).map(|res, act, _| {
            act.record.writing = false;
            match res {
                Ok(()) => {}
                Err(error @ crate::error::LockError::NoPermission { .. }) => {
                    act.record.off = true;
                    tracing::warn!(%error, "no permission for lockman_client:* keys: this manager's client record is skipped (locking is not affected)");
                }
                Err(error) => tracing::debug!(%error, "client record not written"),
            }
        }));
    }

    /// The record's fields: the fixed ones, how many holds and waited names there are, then
    /// the oldest holds (`hold:<name>` = `<held ms> <kind> <holder>`, the oldest per name) and
    /// the most waited names (`wait:<name>` = `<waiters> <waited ms>`).
    fn record_fields(&self, now: Instant) -> Vec<(String, String)> {
        let mut fields = self.record.fixed.clone();
        let mut oldest: FxHashMap<&str, (&Tracked, &RenewKey)> = FxHashMap::default();
        for (key, t) in &self.tracked {
            let e = oldest.entry(&*key.0).or_insert((t, key));
            if t.granted < e.0.granted {
                *e = (t, key);
            }
        }
        let mut holds: Vec<_> = oldest.into_iter().collect();
        holds.sort_unstable_by_key(|(_, (t, _))| t.granted);
        fields.push(("holds".into(), holds.len().to_string()));
        for (name, (t, key)) in holds.into_iter().take(MAX_LISTED) {
            let kind = match key.2 {
                Renewal::Lock(kind) => crate::metrics::kind_label(kind),
                Renewal::Permits => "permits",
            };
            let held = now.saturating_duration_since(t.granted).as_millis();
            fields.push((format!("hold:{name}"), format!("{held} {kind} {}", key.1)));
        }
        let (waits, total) = self.board.waiting(MAX_LISTED);
        fields.push(("waits".into(), total.to_string()));
        for w in waits {
            let waited = now.saturating_duration_since(w.since).as_millis();
            fields.push((
                format!("wait:{}", w.name),
                format!("{} {waited}", w.waiters),
            ));
        }
        fields
    }

    /// One round of renewal calls: every hold (the regular tick), or those whose last renewal
    /// failed (a retry). A round never starts while another is under way; a regular tick that
    /// finds one under way runs once it is done.
    fn tick(&mut self, ctx: &mut Context<Self>, round: Round) {
        if self.halted || self.tracked.is_empty() {
            return;
        }
        if self.ticking {
            self.tick_due |= round == Round::Every;
            return;
        }
        if let Some(retry) = self.retry.take() {
            // This round carries every failing hold the retry would have.
            ctx.cancel_future(retry);
        }
        let batches = self.batches(round);
        if batches.is_empty() {
            return;
        }
        self.ticking = true;
        let (commands, timeout) = (self.commands.clone(), self.timeout);
        let calls = batches.len();
        let started = Instant::now();
        let work = join_all(batches.into_iter().map(move |batch| {
            let commands = commands.clone();
            async move {
                let kind = batch[0].0.2;
                let pairs: Vec<(&str, &str)> =
                    batch.iter().map(|((n, h, _), _)| (&**n, &**h)).collect();
                let res = match kind {
                    Renewal::Lock(kind) => commands.renew(kind, &pairs, timeout).await,
                    Renewal::Permits => commands.renew_permits(&pairs, timeout).await,
                };
                (batch, res)
            }
        }));
        ctx.spawn(work.into_actor(self).map(move |results, act, ctx| {
            act.ticking = false;
            let mut count = Counts::default();
            for (batch, res) in results {
                act.renewed(batch, res, started, &mut count);
            }
            let Counts {
                renewed,
                lost,
                failed,
            } = count;
            let retry = round == Round::Failing;
            tracing::debug!(renewed, lost, failed, retry, took = ?started.elapsed(), "renewal tick");
            crate::metrics::renewals(calls, renewed, failed);
            if std::mem::take(&mut act.tick_due) {
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
        if self.halted || self.retry.is_some() {
            return;
        }
        let timeout = self.timeout;
        let Some(deadline) = self
            .tracked
            .values()
            .filter(|t| t.failing)
            .map(|t| t.deadline(timeout))
            .min()
        else {
            self.backoff = FIRST_RETRY;
            return;
        };
        let delay = self
            .backoff
            .min(deadline.saturating_duration_since(Instant::now()))
            .max(Duration::from_millis(1));
        let most = MAX_RETRY.min(self.interval / RETRIES_PER_INTERVAL);
        self.backoff = (self.backoff * 2).min(most).max(FIRST_RETRY);
        self.retry = Some(ctx.run_later(delay, |act, ctx| {
            act.retry = None;
            act.tick(ctx, Round::Failing);
        }));
    }

    /// The round's holds in script calls: one list per kind (each kind has its renewal
    /// script), 100 holds a call; in a cluster also per slot, since one script call may only
    /// touch keys of one slot. The calls run concurrently: in a cluster each goes to the node
    /// of its slot.
    fn batches(&self, round: Round) -> Vec<Batch> {
        let by_slot = self.commands.by_slot();
        let mut by_kind: HashMap<(Renewal, u16), Batch> = HashMap::new();
        let held = self
            .tracked
            .iter()
            .filter(|(_, t)| round == Round::Every || t.failing);
        for (key, t) in held {
            let slot = if by_slot {
                keys::slot(key.0.as_bytes())
            } else {
                0
            };
            by_kind
                .entry((key.2, slot))
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
        res: Result<Vec<bool>, crate::error::LockError>,
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
                    Err(crate::error::LockError::UnexpectedReply {
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

    fn lost(&mut self, key: RenewKey, epoch: u64) {
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

/// What one tick did.
#[derive(Default)]
struct Counts {
    renewed: usize,
    lost: usize,
    failed: usize,
}

/// This machine's name: `$HOSTNAME`, else the kernel's (Linux), else `/etc/hostname`.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

impl Actor for Watchdog {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if !self.halted {
            // The first record after one interval, not at start: a manager that lives less
            // (a `lockman inspect`) leaves none.
            ctx.run_interval(self.interval, |act, ctx| {
                act.publish(ctx);
                act.tick(ctx, Round::Every)
            });
        }
    }
}

impl Supervised for Watchdog {
    fn restarting(&mut self, _: &mut Context<Self>) {
        self.ticking = false;
        self.tick_due = false;
        // The old context's timers are gone with it; the first tick retries what failed.
        self.retry = None;
        self.backoff = FIRST_RETRY;
        self.record.writing = false;
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
            granted: msg.confirmed,
            validity: msg.validity,
            actor: msg.actor,
            failing: false,
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
        self.tick(ctx, Round::Every);
    }
}

impl Handler<Halt> for Watchdog {
    type Result = ResponseActFuture<Self, ()>;

    /// Stops renewing, deletes the client record (a dead manager's would expire within a
    /// watchdog timeout; a live one says goodbye), then stops.
    fn handle(&mut self, _: Halt, _: &mut Context<Self>) -> Self::Result {
        self.halted = true;
        self.tracked.clear();
        let forget = (self.record.written && !self.record.off)
            .then(|| (self.commands.clone(), self.record.id.clone()));
        let forget = async move {
            if let Some((commands, id)) = forget
                && let Err(error) = commands.forget_client_record(&id).await
            {
                tracing::debug!(%error, "client record not deleted; it expires on its own");
            }
        };
        Box::pin(forget.into_actor(self).map(|(), _, ctx| ctx.stop()))
    }
}
