//! Compositions of several [`Lock`]s, each possibly from another [`LockManager`](crate::LockManager)
//! (another Redis server): [`MultiLock`] needs every member, [`RedLock`] a majority.
//!
//! Both run one algorithm, [`acquire`]: attempt every member not yet held **concurrently** (so an
//! attempt costs about the slowest member's round trip, not the sum); succeed with a quorum of
//! holds (and, for RedLock, validity left); otherwise release every member taken and, if there is
//! wait time left, wait on one busy member through that member's own unlock message and TTL —
//! holding nothing while waiting, so two compositions can never deadlock each other.
//!
//! A bounded wait keeps a single lock's last-try rule as a whole, not member by member: every
//! step (an attempt round, the releases after it, the wait on a member) ends by the deadline
//! plus the members' last-try grace (`Config::last_try_grace`: 250 ms, plus the sync timeout
//! with replica sync), and a member that has not answered by then is Redis away
//! ([`LockError::Unavailable`], naming it). Members' waits never add up.
//!
//! Cancel safety comes from the members: a member whose reply arrives after its attempt was
//! dropped (per-member timeout, caller gone) is released by its lock actor, and one whose reply
//! was lost is undone, so a failed composition leaves nothing held anywhere.

mod multi;
mod redlock;
mod take;

use std::time::{Duration, Instant};

use futures_util::future::{join_all, select_all};

pub use multi::MultiLock;
pub use redlock::{DEFAULT_MEMBER_TIMEOUT, RedLock};
use take::{Plan, acquire};

use crate::error::LockError;

#[cfg(doc)]
use crate::handles::lock::Lock;
use crate::handles::lock::LockGuard;
use crate::handles::scope::Watched;

/// The guard of a [`MultiLock`].
pub type MultiLockGuard = CompositeGuard;
/// The guard of a [`RedLock`].
pub type RedLockGuard = CompositeGuard;

/// A hold on a composition: one [`LockGuard`] per member held. Dropping it releases every member
/// in the background; [`release`](Self::release) reports the outcome.
#[must_use = "dropping a guard releases every member at once"]
#[derive(Debug)]
pub struct CompositeGuard {
    guards: Vec<LockGuard>,
    quorum: usize,
    valid_until: Option<Instant>,
}

impl CompositeGuard {
    /// How many members are held (at least the quorum when acquired).
    pub fn members_held(&self) -> usize {
        self.guards.len()
    }

    /// For a RedLock taken with a lease: the instant its validity ends (the lease, minus the time
    /// acquiring took, minus a clock-drift allowance). `None` in watchdog mode, and for MultiLock.
    pub fn validity_deadline(&self) -> Option<Instant> {
        self.valid_until
    }

    /// Whether the composition is known to be lost: its validity passed, or fewer than the quorum
    /// of its members are still held (for a MultiLock: any member lost).
    pub fn is_lost(&self) -> bool {
        let expired = self.valid_until.is_some_and(|v| Instant::now() >= v);
        expired || self.guards.iter().filter(|g| !g.is_lost()).count() < self.quorum
    }

    /// Resolves once the composition is known to be lost; never, while it is held.
    pub async fn lost(&self) {
        while !self.is_lost() {
            // Not lost: at least `quorum` (≥ 1) members are still held, so this is not empty.
            let member_lost = select_all(
                self.guards
                    .iter()
                    .filter(|g| !g.is_lost())
                    .map(|g| Box::pin(g.lost())),
            );
            match self.valid_until {
                Some(v) => {
                    tokio::select! {
                        _ = member_lost => {}
                        _ = tokio::time::sleep_until(v.into()) => {}
                    }
                }
                None => {
                    member_lost.await;
                }
            }
        }
    }

    /// The latest instant (monotonic clock) at which the composition is still guaranteed:
    /// the instant by which fewer than its quorum of members would still be valid (each
    /// member's [`Grant::valid_until`](crate::actix::Grant::valid_until); for a MultiLock the
    /// earliest), and no later than [`validity_deadline`](Self::validity_deadline). Once
    /// fewer than a quorum are held, it stays in the past: the earlier of the members' own last
    /// validity (as above, lost members included) and the moment it is read.
    pub fn valid_until(&self) -> Instant {
        let quorum = self.quorum.max(1);
        let nth_latest = |mut each: Vec<Instant>| {
            each.sort_unstable_by(|a, b| b.cmp(a));
            each.get(quorum - 1).copied()
        };
        let held = nth_latest(
            self.guards
                .iter()
                .filter(|g| !g.is_lost())
                .map(|g| g.valid_until())
                .collect(),
        );
        // Fewer than a quorum held: the guarantee ended by the time that was known (now at the
        // latest), and by the members' own last validity where that came first. A member cut
        // off from its server is lost by its failed renewals after its key expired there, not
        // before: "now" alone would put the end after another client's majority.
        let members = held.unwrap_or_else(|| {
            let now = Instant::now();
            nth_latest(self.guards.iter().map(|g| g.valid_until()).collect())
                .map_or(now, |last| last.min(now))
        });
        self.valid_until.map_or(members, |v| v.min(members))
    }

    /// Runs `fut` while the hold is held and guaranteed, and drops it (so its work stops at
    /// its next await) as soon as the composition is known lost (fewer than its quorum of members held) or its [`valid_until`](Self::valid_until) comes
    /// within a margin — a tenth of each member's TTL — with no renewal confirmed since.
    ///
    /// # Errors
    /// [`LockError::HoldLost`] or [`LockError::HoldExpiring`], saying which stopped the work.
    /// Either way the guard is still there to release (or drop).
    pub async fn scope<F: std::future::Future>(&self, fut: F) -> Result<F::Output, LockError> {
        self.watched(None).run(fut).await
    }

    /// As [`scope`](Self::scope), stopping the work `margin` before [`valid_until`](Self::valid_until)
    /// instead of a tenth of the TTL before.
    ///
    /// # Errors
    /// As [`scope`](Self::scope).
    pub async fn scope_with_margin<F: std::future::Future>(
        &self,
        margin: std::time::Duration,
        fut: F,
    ) -> Result<F::Output, LockError> {
        self.watched(Some(margin)).run(fut).await
    }

    fn watched(&self, margin: Option<Duration>) -> Watched<'_> {
        Watched {
            name: self.guards.first().map_or("", |g| g.name()),
            holds: self.guards.iter().map(|g| g.signal()).collect(),
            quorum: self.quorum,
            deadline: self.valid_until,
            margin,
        }
    }

    /// Releases every member, concurrently.
    ///
    /// # Errors
    /// The first member's error when fewer than the quorum were released cleanly (for a MultiLock:
    /// when any member failed). Members whose release failed are sent again in the background, as for
    /// [`LockGuard::release`].
    pub async fn release(self) -> Result<(), LockError> {
        let results = join_all(self.guards.into_iter().map(LockGuard::release)).await;
        let released = results.iter().filter(|r| r.is_ok()).count();
        match results.into_iter().find_map(Result::err) {
            Some(error) if released < self.quorum => Err(error),
            _ => Ok(()),
        }
    }
}

/// The five verbs of a composition, shared by [`MultiLock`] and [`RedLock`].
macro_rules! composite_verbs {
    () => {
        /// Takes the lock, waiting as long as it takes; members are renewed by their watchdogs.
        ///
        /// # Errors
        /// [`LockError::InvalidArgument`] for an empty or duplicated member list, any member's
        /// error that retrying cannot mend (wrong type, shutdown). Retryable errors are retried;
        /// once too many members have failed for a quorum for
        /// [`Config::unavailable_after`](crate::Config::unavailable_after), or at the end of a
        /// bounded wait, a MultiLock fails with [`LockError::Unavailable`] (naming a member) and
        /// a RedLock with [`LockError::QuorumNotReached`]: see [When Redis is away](crate#when-redis-is-away).
        ///
        /// # Cancel safety
        /// Dropping the future leaves nothing held: members granted afterwards are released.
        #[track_caller]
        pub fn acquire(
            &self,
        ) -> impl std::future::Future<Output = Result<CompositeGuard, LockError>> + '_ {
            let site = crate::handles::deadlock::site();
            async move {
                let got = super::acquire(&self.plan(), site, None, Wait::Forever).await?;
                got.ok_or(LockError::Shutdown)
            }
        }

        /// Takes the lock with every member leased for `lease`, waiting as long as it takes.
        ///
        /// # Errors
        /// As [`acquire`](Self::acquire), and [`LockError::InvalidArgument`] for a lease under 1 ms.
        ///
        /// # Cancel safety
        /// As [`acquire`](Self::acquire).
        #[track_caller]
        pub fn acquire_with_lease(
            &self,
            lease: Duration,
        ) -> impl std::future::Future<Output = Result<CompositeGuard, LockError>> + '_ {
            let site = crate::handles::deadlock::site();
            async move {
                let got = super::acquire(&self.plan(), site, Some(lease), Wait::Forever).await?;
                got.ok_or(LockError::Shutdown)
            }
        }

        /// One attempt on every member: the guard, or `None` (nothing left held).
        ///
        /// # Errors
        /// As [`acquire`](Self::acquire).
        #[track_caller]
        pub fn try_acquire(
            &self,
        ) -> impl std::future::Future<Output = Result<Option<CompositeGuard>, LockError>> + '_ {
            let site = crate::handles::deadlock::site();
            async move { super::acquire(&self.plan(), site, None, Wait::No).await }
        }

        /// Tries for up to `wait`; `None` afterwards when a member was held by someone else,
        /// with nothing left held (an error when members' Redis was away: see
        /// [When Redis is away](crate#when-redis-is-away)).
        ///
        /// # Errors
        /// As [`acquire`](Self::acquire).
        ///
        /// # Cancel safety
        /// As [`acquire`](Self::acquire).
        #[track_caller]
        pub fn try_acquire_for(
            &self,
            wait: Duration,
        ) -> impl std::future::Future<Output = Result<Option<CompositeGuard>, LockError>> + '_ {
            let site = crate::handles::deadlock::site();
            async move { super::acquire(&self.plan(), site, None, Wait::Up(wait)).await }
        }

        /// Tries for up to `wait`, members leased for `lease`; `None` afterwards.
        ///
        /// # Errors
        /// As [`acquire_with_lease`](Self::acquire_with_lease).
        ///
        /// # Cancel safety
        /// As [`acquire`](Self::acquire).
        #[track_caller]
        pub fn try_acquire_with_lease(
            &self,
            wait: Duration,
            lease: Duration,
        ) -> impl std::future::Future<Output = Result<Option<CompositeGuard>, LockError>> + '_ {
            let site = crate::handles::deadlock::site();
            async move { super::acquire(&self.plan(), site, Some(lease), Wait::Up(wait)).await }
        }
    };
}
use composite_verbs;
