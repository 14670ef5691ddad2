//! The one algorithm both compositions run ([`acquire`], described in the module above):
//! rounds of concurrent attempts on every member not yet held, a quorum or every member taken
//! given back, and between rounds a wait on one busy member holding nothing, every step bounded
//! by the wait's deadline plus the members' last try's grace (`Config::last_try_grace`).

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tracing::Instrument;

use super::CompositeGuard;
use crate::actors::messages::Wait;
use crate::config::LAST_TRY_GRACE;
use crate::error::{LockError, Site};
use crate::handles::lock::{Lock, LockGuard};

/// Retry delays while members fail (no unlock message will come from a failing server).
const ERROR_BACKOFF_MIN: Duration = Duration::from_millis(50);
const ERROR_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// What one composition asks of [`acquire`].
pub(super) struct Plan<'a> {
    pub members: &'a [Lock],
    /// Holds needed: every member (MultiLock) or a majority (RedLock).
    pub quorum: usize,
    /// The bound on one member's attempt (RedLock); `None`: the member's response timeout.
    pub member_timeout: Option<Duration>,
    /// RedLock: require validity left, and report an unreachable quorum as an error.
    pub redlock: bool,
}

impl Plan<'_> {
    fn validate(&self, lease: Option<Duration>) -> Result<(), LockError> {
        if self.members.is_empty() {
            return Err(LockError::invalid("members", "at least one lock is needed"));
        }
        for (i, a) in self.members.iter().enumerate() {
            let same = |b: &&Lock| a.server() == b.server() && a.key() == b.key();
            if self.members[..i].iter().any(|b| same(&b)) {
                let why = format!("{:?} on {} appears twice", a.name(), a.server());
                return Err(LockError::invalid("members", why));
            }
        }
        if lease.is_some_and(|l| l < Duration::from_millis(1)) {
            return Err(LockError::invalid("lease", "must be at least 1 ms"));
        }
        Ok(())
    }

    /// RedLock validity: the lease, minus the time since the earliest hold began, minus the
    /// published clock-drift allowance (1 % of the lease + 2 ms).
    fn valid_until(&self, lease: Option<Duration>, earliest: Instant) -> Option<Instant> {
        if !self.redlock {
            return None;
        }
        let ttl = lease.or_else(|| self.members.iter().map(Lock::watchdog_timeout).min())?;
        let drift = ttl / 100 + Duration::from_millis(2);
        Some(earliest + ttl.saturating_sub(drift))
    }
}

/// Takes a quorum of `plan`'s members with `lease` (`None`: watchdog), waiting as `wait` says;
/// `site` is where the caller's code asked (a member's wait in a deadlock's message names it).
pub(super) async fn acquire(
    plan: &Plan<'_>,
    site: Site,
    lease: Option<Duration>,
    wait: Wait,
) -> Result<Option<CompositeGuard>, LockError> {
    let kind = if plan.redlock { "RedLock" } else { "MultiLock" };
    let span = crate::handles::trace::acquire(&MemberNames(plan.members), &kind, wait);
    let res = take(plan, &site, lease, wait)
        .instrument(span.clone())
        .await;
    // A composition waited when any member did, or when it had to wait for a member.
    crate::handles::trace::acquired(&span, &res, |g: &CompositeGuard| {
        g.guards.iter().any(|m| m.waited())
    });
    res
}

/// The members' names joined by commas, written only when a span wants them.
struct MemberNames<'a>(&'a [Lock]);

impl std::fmt::Display for MemberNames<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, lock) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(lock.name())?;
        }
        Ok(())
    }
}

/// [`acquire`], without its span: rounds of attempts on every member, a wait on a busy one
/// between rounds, until a quorum is held or the wait ends.
async fn take(
    plan: &Plan<'_>,
    site: &Site,
    lease: Option<Duration>,
    wait: Wait,
) -> Result<Option<CompositeGuard>, LockError> {
    plan.validate(lease)?;
    let n = plan.members.len();
    let bounds = Bounds::of(plan, wait);
    // Each member held, with the instant its attempt began (when its lease may have started).
    let mut held: Vec<Option<(LockGuard, Instant)>> = (0..n).map(|_| None).collect();
    let (mut failures, mut splits) = (0u32, 0u32);
    // Since when too many members have failed for a quorum (their Redis away), with no round
    // in between where a quorum was possible.
    let mut away_since: Option<Instant> = None;
    loop {
        let round = Instant::now();
        let (busy, failed, last_failure) =
            attempt_round(plan, lease, &mut held, round, bounds.until).await?;
        let acquired = held.iter().flatten().count();
        if acquired >= plan.quorum
            && let Some(guard) = complete(plan, lease, &mut held, round)
        {
            tracing::debug!(acquired, members = n, took = ?bounds.start.elapsed(), "composition acquired");
            return Ok(Some(guard));
        }
        // Released in the background past `until` (a dropped guard is released by its actor).
        within(bounds.until, release_all(&mut held)).await;

        let possible = n - failed >= plan.quorum;
        if possible {
            away_since = None;
        } else {
            away_since.get_or_insert(round);
        }
        if bounds.ended(away_since) {
            return give_up(
                plan,
                bounds.start,
                possible,
                (acquired, failed),
                last_failure,
            );
        }
        match busy.first() {
            Some(&i) if possible => {
                // Holding nothing, wait for this member through its own unlock message and TTL.
                failures = 0;
                if acquired > 0 {
                    // Some members were ours and others busy: maybe another composition took
                    // the rest. Two that ask for the same members, each waiting for the one the
                    // other had, would swap them round after round; a random pause, longer at
                    // each such round in a row, lets one of them take all.
                    splits = splits.saturating_add(1);
                    tokio::time::sleep(jitter(splits, bounds.deadline)).await;
                } else {
                    splits = 0;
                }
                let waited = wait_busy(plan, site, lease, &bounds, i, &mut held).await;
                match waited {
                    Busy::Held | Busy::Next => {}
                    Busy::Away(since) => {
                        away_since.get_or_insert(since);
                    }
                    Busy::End(end) => return end,
                }
            }
            _ => {
                // Members fail: nothing will wake us, so back off (never past the deadline).
                failures = failures.saturating_add(1);
                tokio::time::sleep(backoff(failures, bounds.deadline)).await;
            }
        }
    }
}

/// How long a composition's acquire may go on.
struct Bounds {
    start: Instant,
    /// The wait's end (`None`: no end).
    deadline: Option<Instant>,
    /// The most a bounded wait's last step may run: a single lock's last try. (A single
    /// attempt, `Wait::No`, fails as its members' own attempts do.)
    until: Option<Instant>,
    /// An unbounded wait ends once too many members have failed for a quorum this long: the
    /// members' `Config::unavailable_after` (the shortest of them), as a lock's does.
    away: Duration,
}

impl Bounds {
    fn of(plan: &Plan<'_>, wait: Wait) -> Self {
        let start = Instant::now();
        let deadline = match wait {
            Wait::Forever => None,
            Wait::Up(d) => Some(start + d),
            _ => Some(start),
        };
        // The longest of the members' last tries: with replica sync, a member's may take the
        // sync timeout more (its `WAIT`), which is no outage.
        let grace = plan
            .members
            .iter()
            .map(Lock::last_try_grace)
            .max()
            .unwrap_or(LAST_TRY_GRACE);
        let until = match wait {
            Wait::Up(_) => deadline.map(|d| d + grace),
            _ => None,
        };
        let away = plan
            .members
            .iter()
            .map(Lock::unavailable_after)
            .min()
            .unwrap_or(crate::config::DEFAULT_UNAVAILABLE_AFTER);
        Self {
            start,
            deadline,
            until,
            away,
        }
    }

    /// Whether the wait is over: its deadline passed, or the members' Redis has been away
    /// since `away_since` for the bound.
    fn ended(&self, away_since: Option<Instant>) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
            || away_since.is_some_and(|since| since.elapsed() >= self.away)
    }

    fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// A composition's acquire whose wait ended without a quorum: `QuorumNotReached` for a RedLock
/// that could not reach one, `Unavailable` for a MultiLock whose member's Redis is away (not
/// contention), else not acquired.
fn give_up(
    plan: &Plan<'_>,
    start: Instant,
    possible: bool,
    (acquired, failed): (usize, usize),
    last_failure: Option<(usize, LockError)>,
) -> Result<Option<CompositeGuard>, LockError> {
    match (possible, plan.redlock, last_failure) {
        (false, true, _) => Err(LockError::QuorumNotReached {
            acquired,
            failed,
            needed: plan.quorum,
            members: plan.members.len(),
        }),
        (false, false, Some((member, cause))) => Err(LockError::unavailable(
            plan.members[member].name(),
            start.elapsed(),
            cause,
        )),
        _ => Ok(None),
    }
}

/// What a wait on one busy member came to.
enum Busy {
    /// The member is held now.
    Held,
    /// Nothing held: the next round decides.
    Next,
    /// Its Redis went away while we waited on it, since then: the next round decides.
    Away(Instant),
    /// The acquire ends with this.
    End(Result<Option<CompositeGuard>, LockError>),
}

/// Waits for busy member `i`, holding nothing, through its own unlock message and TTL.
async fn wait_busy(
    plan: &Plan<'_>,
    site: &Site,
    lease: Option<Duration>,
    bounds: &Bounds,
    i: usize,
    held: &mut [Option<(LockGuard, Instant)>],
) -> Busy {
    let member = &plan.members[i];
    let waited = within(
        bounds.until,
        wait_member(member, site, lease, bounds.deadline),
    )
    .await;
    match waited.unwrap_or_else(|| Err(silent(member, bounds.start))) {
        Ok(Some(guard)) => {
            held[i] = Some((guard, Instant::now()));
            Busy::Held
        }
        Ok(None) => Busy::End(Ok(None)),
        Err(LockError::Unavailable { cause, .. }) if !plan.redlock && bounds.past_deadline() => {
            // Its Redis went away while we waited on it, and the wait is over: no round after
            // the deadline (its answer would come later still). A RedLock's round, bounded by
            // `until`, counts its quorum instead.
            let waited = bounds.start.elapsed();
            Busy::End(Err(LockError::unavailable(member.name(), waited, *cause)))
        }
        Err(LockError::Unavailable { waited, .. }) => {
            // Counted from when its Redis went away.
            Busy::Away(Instant::now().checked_sub(waited).unwrap_or(bounds.start))
        }
        Err(e) if e.is_retryable() => Busy::Next,
        Err(e) => Busy::End(Err(e)),
    }
}

/// `fut`, unless `until` comes first (`None`: then).
async fn within<F: std::future::Future>(until: Option<Instant>, fut: F) -> Option<F::Output> {
    match until {
        Some(until) => tokio::time::timeout_at(until.into(), fut).await.ok(),
        None => Some(fut.await),
    }
}

/// The error of a bounded wait whose `member` did not answer by the deadline plus
/// the last try's grace: Redis away, not contention.
fn silent(member: &Lock, start: Instant) -> LockError {
    let waited = start.elapsed();
    let cause = LockError::Timeout {
        op: "a member's answer",
        after: waited,
    };
    LockError::unavailable(member.name(), waited, cause)
}

/// One attempt at every member not held yet, all at once: those taken go into `held`. Returns
/// the busy members, how many failed with a retryable error, and the last of those failures
/// with its member; any other error releases what is held and ends the acquire. A member's
/// attempt ends by `until` at the latest (a time-out: Redis did not answer).
async fn attempt_round(
    plan: &Plan<'_>,
    lease: Option<Duration>,
    held: &mut [Option<(LockGuard, Instant)>],
    round: Instant,
    until: Option<Instant>,
) -> Result<(Vec<usize>, usize, Option<(usize, LockError)>), LockError> {
    let limit = until.map(|u| u.saturating_duration_since(Instant::now()));
    let limit = match (plan.member_timeout, limit) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let attempts = plan
        .members
        .iter()
        .enumerate()
        .filter(|(i, _)| held[*i].is_none())
        .map(|(i, m)| async move { (i, try_member(m, lease, limit).await) });
    let (mut busy, mut failed, mut last) = (Vec::new(), 0, None);
    for (i, result) in join_all(attempts).await {
        match result {
            Ok(Some(guard)) => held[i] = Some((guard, round)),
            Ok(None) => busy.push(i),
            Err(e) if e.is_retryable() => {
                tracing::debug!(member = plan.members[i].name(), error = %e, "member failed");
                failed += 1;
                last = Some((i, e));
            }
            Err(e) => {
                release_all(held).await;
                return Err(e);
            }
        }
    }
    Ok((busy, failed, last))
}

/// The composite guard of a quorum held, when its validity has not run out already (a lease
/// that began at the earliest member's attempt, less drift). `None` leaves `held` as it is.
fn complete(
    plan: &Plan<'_>,
    lease: Option<Duration>,
    held: &mut Vec<Option<(LockGuard, Instant)>>,
    round: Instant,
) -> Option<CompositeGuard> {
    let earliest = held
        .iter()
        .flatten()
        .map(|(_, at)| *at)
        .min()
        .unwrap_or(round);
    let valid_until = plan.valid_until(lease, earliest);
    if valid_until.is_some_and(|v| v <= Instant::now()) {
        return None;
    }
    let guards = std::mem::take(held)
        .into_iter()
        .flatten()
        .map(|(g, _)| g)
        .collect();
    Some(CompositeGuard {
        guards,
        quorum: plan.quorum,
        // In watchdog mode renewal moves the deadline on: only a lease fixes it.
        valid_until: valid_until.filter(|_| lease.is_some()),
    })
}

/// A random pause of up to 2^`splits` ms (at most 64 ms), never past the deadline.
fn jitter(splits: u32, deadline: Option<Instant>) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // A random seed per call from the standard library's hasher keys (no RNG dependency).
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(splits);
    let max = 1u64 << splits.min(6);
    let pause = Duration::from_micros(hasher.finish() % (max * 1000));
    deadline.map_or(pause, |d| {
        pause.min(d.saturating_duration_since(Instant::now()))
    })
}

/// The pause after `failures` rounds in a row where members failed: doubling, bounded, and
/// never past the deadline.
fn backoff(failures: u32, deadline: Option<Instant>) -> Duration {
    let pause = ERROR_BACKOFF_MIN
        .saturating_mul(1 << failures.min(5))
        .min(ERROR_BACKOFF_MAX);
    deadline.map_or(pause, |d| {
        pause.min(d.saturating_duration_since(Instant::now()))
    })
}

/// One attempt on one member, bounded by `limit`. A grant that comes after the bound is released
/// by the member's lock actor (the dropped request finds nobody to hand it to).
async fn try_member(
    member: &Lock,
    lease: Option<Duration>,
    limit: Option<Duration>,
) -> Result<Option<LockGuard>, LockError> {
    let attempt = async {
        match lease {
            Some(lease) => member.try_acquire_with_lease(Duration::ZERO, lease).await,
            None => member.try_acquire().await,
        }
    };
    match limit {
        Some(limit) => {
            tokio::time::timeout(limit, attempt)
                .await
                .unwrap_or(Err(LockError::Timeout {
                    op: "member acquire",
                    after: limit,
                }))
        }
        None => attempt.await,
    }
}

/// Waits for one member (its unlock message, its TTL) until `deadline` (`None`: forever).
async fn wait_member(
    member: &Lock,
    site: &Site,
    lease: Option<Duration>,
    deadline: Option<Instant>,
) -> Result<Option<LockGuard>, LockError> {
    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    let wait = left.map_or(Wait::Forever, Wait::Up);
    match member.request(site.clone(), lease, wait).await? {
        Some(guard) => Ok(Some(guard)),
        // A wait without end answers `None` only at shutdown (as `Lock::acquire`).
        None if left.is_none() => Err(LockError::Shutdown),
        None => Ok(None),
    }
}

/// Releases every held member, concurrently, and waits for it: the next attempt (or the caller)
/// must find them free.
async fn release_all(held: &mut [Option<(LockGuard, Instant)>]) {
    let releases = held
        .iter_mut()
        .filter_map(Option::take)
        .map(|(g, _)| g.release());
    for result in join_all(releases).await {
        if let Err(error) = result {
            tracing::debug!(%error, "member release after a failed attempt");
        }
    }
}
