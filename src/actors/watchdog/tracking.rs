//! The Watchdog's second job, its watch on its holds: a loss known at once, not at the next
//! renewal.
//!
//! Every lock hold the Watchdog has is also checked on the tracking connection
//! (`connections/tracking.rs`, `held.lua`), which registers its key there: when anyone writes
//! that key (a foreign `DEL`, a force unlock, an eviction, an expiry, a `FLUSHALL`), the server
//! sends an invalidation, and the holds of that name are checked again at once. A hold found
//! gone or another's is lost through the renewal path's own [`Renewals::lost`]: its actor is
//! told, its guard's `lost()` resolves. A hold still in place is left as it is (the check has
//! registered its key again).
//!
//! With the watch on, lock actors hand a hold over 20 ms after its grant (`WATCHED_AFTER`; not
//! once it has lived a sixth of the timeout, as for renewal alone), and its first check goes out
//! at once: a loss is known within that and a round trip or two from the grant on. A hold
//! released while its check is under way may be found gone by its own release; its actor,
//! which knows the release is under way, lets the release's outcome decide
//! (`LockState::hold_lost`), so "found gone" here is not yet a loss. Cost: one check call per
//! hold that lives 20 ms (coalesced under load), none per renewal, none for a shorter hold.
//!
//! Lockman's own renewals write the keys too. The regular rounds of renewals of watched lock
//! holds therefore run on the tracking connection itself (`renewal.rs`, `Commands::renew`):
//! that connection has `NOLOOP`, so its own writes send it nothing, and each renewal script
//! reads the key again after writing it, so the key stays tracked. A renewal thus costs no
//! push and no check; a foreign write right after it is still heard. Retries of failed
//! renewals, renewals with replica sync (`WAIT` would block the tracking connection), and
//! renewals while the tracking connection is down go on a command connection: each is then
//! followed by an invalidation and one check call per batch. A failed renewal on the tracking
//! connection is handled as a failed check (a new connection, every hold checked). A check
//! never writes, so it causes no invalidation of its own.
//!
//! Checks are coalesced: names invalidated while a check call is under way wait for it and go
//! in the next one, so a flood of writes to held keys costs a few calls, not one per write
//! (keys never checked here are not tracked for this connection, so the server sends nothing
//! for them).
//!
//! Checks are paced when invalidations keep coming and the checks find every hold in place:
//! the first [`FREE_CHECKS`] in a row go at once, then each waits for a gap after the previous
//! one's end, doubling from [`FIRST_GAP`] up to [`MAX_GAP`]; a check that finds a loss, or one
//! due after [`QUIET`] without checks, goes at once again. A server whose
//! `tracking-table-max-keys` is below what it tracks evicts the keys each check registers,
//! with an invalidation each though nobody wrote them: unpaced, that was a check per round trip
//! for as long as the holds lived. A hold lost during such a storm is known within [`MAX_GAP`]
//! and a round trip.
//!
//! When the tracking connection closes, or a check call or the PING sent every renewal interval
//! fails or times out, invalidations may have been missed: a new connection is made (with backoff) and every hold is checked on it at once.
//! After a Sentinel failover (`RenewNow`) the connection is made again to the new primary, and
//! every hold checked there.
//!
//! A cluster is watched too (tracking is per node): one tracking connection per master, each
//! hold's check and watched renewal sent to the master of its slot, in batches of one slot. A
//! resharding or a failover in the cluster shows as a failed call (`MOVED`, `ASK`: a migrated
//! key's `DEL` on its old master is an invalidation, whose check is redirected), a closed
//! connection, or a slot map that no longer matches at the PING: as for any failed call, every
//! connection is made again, from the slot map read anew, and every hold checked on it.
//!
//! Permit grants are not watched (their permits live in a sorted set shared by every holder, so
//! each acquire or release by anyone would be an invalidation): renewal finds their loss.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures_util::StreamExt;
use futures_util::future::join_all;
use rustc_hash::FxHashSet;

use super::Watchdog;
use super::renewal::RenewKey;
use crate::actors::messages::Renewal;
use crate::actors::name::backoff;
use crate::config::Config;
use crate::connections::tracking::{self, Heard, Tracking};
use crate::error::LockError;
use crate::protocol::{RENEW_BATCH, keys};

/// Checks in a row that found no loss and go at once, before pacing starts.
const FREE_CHECKS: u32 = 4;
/// The first gap kept after a check, once pacing has started; it doubles at each check after.
const FIRST_GAP: Duration = Duration::from_millis(10);
/// The longest gap kept after a check: a loss during a storm of invalidations is known within
/// it and a round trip.
const MAX_GAP: Duration = Duration::from_millis(200);
/// A check due this long after the previous one's end goes at once, and pacing starts over.
const QUIET: Duration = Duration::from_secs(1);

/// The pace of checks: how long the next one waits (see the module's doc).
#[derive(Debug, Default)]
struct Pace {
    /// Checks in a row that found no loss, each due within [`QUIET`] of the previous one's end.
    streak: u32,
    /// When the last check ended.
    last_end: Option<Instant>,
}

impl Pace {
    /// How long a check due at `now` waits.
    fn delay(&mut self, now: Instant) -> Duration {
        let Some(end) = self.last_end else {
            return Duration::ZERO;
        };
        if now.saturating_duration_since(end) >= QUIET {
            self.streak = 0;
        }
        if self.streak < FREE_CHECKS {
            return Duration::ZERO;
        }
        let doublings = (self.streak - FREE_CHECKS).min(16);
        let gap = FIRST_GAP.saturating_mul(1 << doublings).min(MAX_GAP);
        (end + gap).saturating_duration_since(now)
    }

    /// A check ended at `now`; `calm`: it found no loss and did not fail.
    fn ended(&mut self, now: Instant, calm: bool) {
        self.last_end = Some(now);
        self.streak = if calm {
            self.streak.saturating_add(1)
        } else {
            0
        };
    }
}

/// The watch: the tracking connection and the names to check on it.
pub(super) struct Watch {
    /// The tracking connection, while one is open.
    link: Option<Tracking>,
    /// Counts the connections made: what an old connection says is ignored.
    connection: u64,
    /// Whether a connection is being made.
    connecting: bool,
    /// Connection attempts failed in a row.
    failures: u32,
    /// Tracking is not used (turned off, or a server or ACL user that refuses it).
    off: bool,
    /// Names whose holds are checked at the next call.
    dirty: FxHashSet<Arc<str>>,
    /// Every hold is checked at the next call (a new connection, a `FLUSHALL`).
    all: bool,
    /// Whether check calls are under way.
    checking: bool,
    /// Waiting out a backoff after a failure: no connection or check until it ends.
    resting: bool,
    /// The pace of checks under a storm of invalidations.
    pace: Pace,
    /// A paced check is due later (a timer is set).
    paced: bool,
    connect_timeout: Duration,
}

/// What the tracking connection of one connection number heard.
pub(super) struct FromTracking(u64, Heard);

impl Message for FromTracking {
    type Result = ();
}

impl Watch {
    pub(super) fn new(config: &Config) -> Self {
        Self {
            link: None,
            connection: 0,
            connecting: false,
            failures: 0,
            off: !config.get_watch_holds(),
            dirty: FxHashSet::default(),
            all: false,
            checking: false,
            resting: false,
            pace: Pace::default(),
            paced: false,
            connect_timeout: config.get_connect_timeout(),
        }
    }

    /// A restarted Watchdog's: its calls and stream went with the old context.
    pub(super) fn restarted(&mut self) {
        self.link = None;
        self.connecting = false;
        self.checking = false;
        self.resting = false;
        self.paced = false;
        self.all = true;
    }
}

impl Watchdog {
    /// A hold was handed over: check it (which registers its key), opening the tracking
    /// connection first if there is none.
    pub(super) fn watch_new(&mut self, name: Arc<str>, ctx: &mut Context<Self>) {
        if self.watch.off {
            return;
        }
        self.watch.dirty.insert(name);
        self.check(ctx);
    }

    /// The primary moved (or the connection is suspect): a new tracking connection, and every
    /// hold checked on it.
    pub(super) fn watch_again(&mut self, ctx: &mut Context<Self>) {
        if self.watch.off {
            return;
        }
        self.watch.link = None;
        self.watch.connection += 1;
        self.watch.all = true;
        self.check(ctx);
    }

    /// Opens the tracking connection (unless one is being made), then checks every hold.
    fn watch_connect(&mut self, ctx: &mut Context<Self>) {
        if self.halted || self.watch.off || self.watch.connecting {
            return;
        }
        self.watch.connecting = true;
        let endpoint = self.commands.endpoint().clone();
        let limit = self.watch.connect_timeout;
        let work = async move { tracking::open(&endpoint, limit).await };
        ctx.spawn(work.into_actor(self).map(|res, act, ctx| {
            act.watch.connecting = false;
            if act.halted {
                return;
            }
            match res {
                Ok((link, heard)) => {
                    // `failures` is reset by a check that succeeds, not here: a server that
                    // connects but refuses the checks (an ACL) must not be tried in a loop.
                    act.watch.connection += 1;
                    let connection = act.watch.connection;
                    act.watch.link = Some(link);
                    act.watch.all = true;
                    // Invalidations may have been missed: this check goes at once.
                    act.watch.pace = Pace::default();
                    let heard = futures_util::stream::unfold(heard, |mut rx| async move {
                        rx.recv().await.map(|heard| (heard, rx))
                    });
                    ctx.add_message_stream(heard.map(move |heard| FromTracking(connection, heard)));
                    act.check(ctx);
                }
                Err(error) if !error.is_retryable() => {
                    tracing::warn!(%error, "holds not watched (CLIENT TRACKING, or on a cluster CLUSTER SLOTS, refused): their loss is found by renewal");
                    act.watch.off = true;
                }
                Err(error) => {
                    tracing::debug!(%error, "tracking connection failed");
                    act.watch_rest(ctx);
                }
            }
        }));
    }

    /// Checks the holds of the names invalidated (or every hold), unless a check is under way
    /// (then they wait for the next one).
    pub(super) fn check(&mut self, ctx: &mut Context<Self>) {
        if self.halted
            || self.watch.off
            || self.watch.checking
            || self.watch.resting
            || self.watch.paced
        {
            return;
        }
        if self.renewals.tracked.is_empty() {
            self.watch.dirty.clear();
            self.watch.all = false;
            return;
        }
        let Some(link) = self.watch.link.clone() else {
            self.watch_connect(ctx);
            return;
        };
        if !self.watch.all && self.watch.dirty.is_empty() {
            return;
        }
        let wait = self.watch.pace.delay(Instant::now());
        if !wait.is_zero() {
            // Names invalidated meanwhile join this check.
            self.watch.paced = true;
            ctx.run_later(wait, |act, ctx| {
                act.watch.paced = false;
                act.check(ctx);
            });
            return;
        }
        let batches = self.check_batches();
        if batches.is_empty() {
            return;
        }
        self.watch.checking = true;
        let connection = self.watch.connection;
        let started = Instant::now();
        let commands = self.commands.clone();
        let work = join_all(batches.into_iter().map(move |batch| {
            let link = link.clone();
            let commands = commands.clone();
            async move {
                let Renewal::Lock(kind) = batch[0].0.what else {
                    return (batch, Ok(Vec::new()));
                };
                let pairs: Vec<(&str, &str)> = batch
                    .iter()
                    .map(|(key, _)| (&*key.name, &*key.holder))
                    .collect();
                let res = commands.held(&link, kind, &pairs).await;
                (batch, res)
            }
        }));
        ctx.spawn(work.into_actor(self).map(move |results, act, ctx| {
            act.checked(results, connection, started, ctx);
        }));
    }

    /// The lock holds to check now, in batches of one kind each (and on a cluster, of one
    /// slot each: a script's keys share one, and the call goes to its master), up to
    /// [`RENEW_BATCH`] holds a batch: those of the names invalidated, or every one (the flags
    /// are then cleared).
    fn check_batches(&mut self) -> Vec<Batch> {
        let all = std::mem::take(&mut self.watch.all);
        let dirty = std::mem::take(&mut self.watch.dirty);
        let by_slot = self.commands.by_slot();
        let mut by_kind: Vec<((crate::protocol::LockKind, u16), Batch)> = Vec::new();
        for (key, t) in &self.renewals.tracked {
            let Renewal::Lock(kind) = key.what else {
                continue;
            };
            if !all && !dirty.contains(&key.name) {
                continue;
            }
            let slot = if by_slot {
                keys::slot(key.name.as_bytes())
            } else {
                0
            };
            match by_kind.iter_mut().find(|(k, _)| *k == (kind, slot)) {
                Some((_, holds)) => holds.push((key.clone(), t.epoch)),
                None => by_kind.push(((kind, slot), vec![(key.clone(), t.epoch)])),
            }
        }
        let mut batches = Vec::new();
        for (_, holds) in by_kind {
            batches.extend(holds.chunks(RENEW_BATCH).map(<[_]>::to_vec));
        }
        batches
    }

    /// A check on tracking connection `connection`, begun at `started`, came back: each hold
    /// found gone is lost; a failed check makes a new connection and checks every hold again,
    /// after a backoff; else what was invalidated meanwhile is checked next.
    fn checked(
        &mut self,
        results: Vec<(Batch, Result<Vec<bool>, LockError>)>,
        connection: u64,
        started: Instant,
        ctx: &mut Context<Self>,
    ) {
        self.watch.checking = false;
        let (mut held, mut lost, mut failed) = (0usize, 0usize, false);
        for (batch, res) in results {
            match res {
                Ok(flags) if flags.len() == batch.len() => {
                    for ((key, epoch), ok) in batch.into_iter().zip(flags) {
                        if ok {
                            held += 1;
                        } else if self.renewals.tracked.contains_key(&key) {
                            // Its actor warns if it is a loss (not its own release).
                            lost += 1;
                            tracing::debug!(name = %key.name, "hold found gone on the tracking connection");
                            self.renewals.lost(key, epoch);
                        }
                    }
                }
                Ok(_) => failed = true,
                Err(error) => {
                    tracing::debug!(%error, "hold check failed");
                    failed = true;
                }
            }
        }
        tracing::debug!(held, lost, failed, took = ?started.elapsed(), "holds checked");
        self.watch.pace.ended(Instant::now(), lost == 0 && !failed);
        crate::metrics::watch_checked(held, lost);
        if failed && self.watch.connection == connection {
            self.watch_failed(connection, ctx);
        } else {
            if !failed {
                self.watch.failures = 0;
            }
            self.check(ctx);
        }
    }
}

/// Holds to check in one call: of one kind (and slot), each with its epoch.
type Batch = Vec<(RenewKey, u64)>;

impl Watchdog {
    /// The tracking connection and its number, for a round of renewals, while it is open and
    /// replica sync is off (renewals with replica sync wait for replicas on a command
    /// connection).
    pub(super) fn watch_link(&self) -> Option<(Tracking, u64)> {
        if self.watch.off || self.watch.resting || self.commands.conn().syncs_replicas() {
            return None;
        }
        let link = self.watch.link.clone()?;
        Some((link, self.watch.connection))
    }

    /// A call on tracking connection `connection` failed (or got no reply in time):
    /// invalidations may be missed meanwhile, so a new connection is made and every hold
    /// checked on it, after a backoff (a server that refuses the calls must not be asked in a
    /// loop). Nothing is done when that connection was already replaced.
    pub(super) fn watch_failed(&mut self, connection: u64, ctx: &mut Context<Self>) {
        if self.halted || self.watch.off || self.watch.connection != connection {
            return;
        }
        self.watch.link = None;
        self.watch.connection += 1;
        self.watch.all = true;
        self.watch_rest(ctx);
    }

    /// After a failure: nothing is tried for [`backoff`] of the failures in a row, then the
    /// names waiting are checked (on a new connection when there is none).
    fn watch_rest(&mut self, ctx: &mut Context<Self>) {
        let retry_in = backoff(self.watch.failures);
        self.watch.failures = self.watch.failures.saturating_add(1);
        self.watch.resting = true;
        ctx.run_later(retry_in, |act, ctx| {
            act.watch.resting = false;
            act.check(ctx);
        });
    }

    /// Every renewal interval, while holds are watched: a PING on the tracking connection (on a
    /// cluster, on each, and the slot map read again); no answer within the response timeout,
    /// or a slot map that changed, and new connections are made and every hold checked (a
    /// silent connection would drop every invalidation; a moved slot's keys are tracked by
    /// nobody on their new master).
    pub(super) fn watch_ping(&mut self, ctx: &mut Context<Self>) {
        let Some(link) = self.watch.link.clone() else {
            return;
        };
        if self.halted || self.renewals.tracked.is_empty() {
            return;
        }
        let connection = self.watch.connection;
        let work = async move { link.ping().await };
        ctx.spawn(work.into_actor(self).map(move |res, act, ctx| {
            if let Err(error) = res
                && act.watch.connection == connection
                && !act.halted
            {
                tracing::info!(%error, "tracking connection silent, or the cluster's slots moved: every hold is checked again");
                act.watch_again(ctx);
            }
        }));
    }
}

impl Handler<FromTracking> for Watchdog {
    type Result = ();

    fn handle(&mut self, FromTracking(connection, heard): FromTracking, ctx: &mut Context<Self>) {
        if connection != self.watch.connection || self.halted {
            return;
        }
        match heard {
            Heard::Invalidated(keys) => {
                for key in keys {
                    // Lock keys are the names themselves (`keys::lock_key`).
                    if let Ok(name) = std::str::from_utf8(&key) {
                        self.watch.dirty.insert(Arc::from(name));
                    }
                }
            }
            Heard::Flushed => self.watch.all = true,
            Heard::Closed => {
                tracing::info!("tracking connection closed: every hold is checked again");
                self.watch.link = None;
                self.watch.connection += 1;
                self.watch.all = true;
            }
        }
        self.check(ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks that all find the holds, each ending as the next falls due (a storm of
    /// invalidations): the waits they are given.
    fn storm(pace: &mut Pace, start: Instant, checks: usize) -> Vec<Duration> {
        let mut now = start;
        (0..checks)
            .map(|_| {
                let wait = pace.delay(now);
                now += wait;
                pace.ended(now, true);
                wait
            })
            .collect()
    }

    #[test]
    fn a_storm_is_paced_up_to_the_longest_gap() {
        let mut pace = Pace::default();
        let waits = storm(&mut pace, Instant::now(), 12);
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [0, 0, 0, 0, 10, 20, 40, 80, 160, 200, 200, 200]);
    }

    #[test]
    fn a_loss_or_a_quiet_spell_ends_the_pacing() {
        let start = Instant::now();
        let mut pace = Pace::default();
        storm(&mut pace, start, 10);
        let end = pace.last_end.expect("checked");
        assert!(!pace.delay(end).is_zero());
        // A check that found a loss: the next goes at once.
        pace.ended(end, false);
        assert!(pace.delay(end).is_zero());
        // A storm again, then nothing for QUIET: at once.
        storm(&mut pace, end, 10);
        let end = pace.last_end.expect("checked");
        assert!(!pace.delay(end + MAX_GAP / 2).is_zero());
        assert!(pace.delay(end + MAX_GAP).is_zero(), "the gap has passed");
        assert!(pace.delay(end + QUIET).is_zero());
        assert_eq!(pace.streak, 0, "pacing starts over after a quiet spell");
    }
}
