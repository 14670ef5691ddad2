//! [`Election`]: leader election on a fenced lock. A candidate campaigns by acquiring the lock
//! (waiting like any lock waiter: woken by the unlock message or the holder's TTL), and leads
//! for as long as it holds it; its **term** is the lock's token, so terms only grow, across
//! failovers and data loss (`docs/protocol.md`, "Fenced lock", "Elections").

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

mod leadership;

pub use leadership::Leadership;

use crate::actors::messages::Wait;
use crate::error::LockError;
use crate::handles::lock::{FencedGuard, FencedLock, Lock, LockInfo};
use crate::handles::name::Name;
use crate::handles::state::Inner;
use crate::handles::trace;
use crate::protocol::LockKind;

/// How often an [`Observer`] reads the leader by default.
pub const DEFAULT_OBSERVE_EVERY: Duration = Duration::from_millis(500);

/// A handle on the election `name`: the fenced lock `name` and its token counter
/// `redisson_lock_token:{name}`, nothing else in Redis (with the
/// [name prefix](crate::Config::name_prefix), as every lock: under `app1:` the election
/// `leader` is the fenced lock `app1:leader`). Cheap to clone.
///
/// ```no_run
/// # async fn demo(manager: lockman::LockManager) -> Result<(), lockman::LockError> {
/// let election = manager.election("outbox-relay");
/// loop {
///     let leader = election.campaign().await?;       // waits to lead
///     let term = leader.term();
///     // Runs only while leading: dropped once the lead is lost or about to expire.
///     let _ = leader.scope(async move { /* relay the outbox, fencing writes with `term` */ }).await;
///     let _ = leader.resign().await;                  // the next candidate is woken at once
/// #   break;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    manager: Arc<Inner>,
    name: Name,
    observe_every: Duration,
}

/// Who leads an election, as Redis shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The leader's holder id, `<client uuid>:<n>` (the fenced lock's hash field); its client
    /// uuid is the leading manager's [`client_id`](crate::LockManager::client_id).
    pub holder: String,
    /// The leader's term: the lock's token, greater than every earlier term of the name.
    pub term: u64,
}

impl Election {
    pub(crate) fn new(manager: Arc<Inner>, name: Name) -> Self {
        Self {
            manager,
            name,
            observe_every: DEFAULT_OBSERVE_EVERY,
        }
    }

    /// The election's name as given, without the [name prefix](crate::Config::name_prefix).
    pub fn name(&self) -> &str {
        self.name.given()
    }

    /// The key of its fenced lock: the name with the [name prefix](crate::Config::name_prefix).
    pub fn key(&self) -> &str {
        self.name.key()
    }

    /// How often [`observe`](Self::observe)'s observers read the leader (default
    /// [`DEFAULT_OBSERVE_EVERY`]). A new leader is not announced on the wire (Redisson's
    /// acquire publishes nothing), so observers read it: one script call per interval each.
    pub fn observe_every(mut self, every: Duration) -> Self {
        self.observe_every = every.max(Duration::from_millis(1));
        self
    }

    /// A new candidate: a fenced lock handle with a holder of its own, so two campaigns (even
    /// of clones of one election) never re-enter each other's lead.
    fn candidate(&self) -> FencedLock {
        let holder = self.manager.new_holder();
        let lock = Lock::new(
            self.manager.clone(),
            self.name.clone(),
            holder,
            LockKind::Fenced,
        );
        FencedLock::new(lock)
    }

    /// Waits to become leader, for as long as it takes; the lead is renewed by the watchdog
    /// while the [`Leadership`] lives.
    ///
    /// # Errors
    /// As [`Lock::acquire`](crate::Lock::acquire).
    ///
    /// # Cancel safety
    /// As [`Lock::acquire`](crate::Lock::acquire): dropping the future leaves the queue of
    /// candidates, and a lead granted after that is resigned at once.
    pub async fn campaign(&self) -> Result<Leadership, LockError> {
        let lead = self.traced(Wait::Forever, async {
            self.candidate().acquire().await.map(Some)
        });
        // `acquire` answers with a guard or an error, so this is always a lead.
        lead.await?.ok_or(LockError::Shutdown)
    }

    /// Waits up to `wait` to become leader; `None` when another candidate still leads then
    /// ([`LockError::Unavailable`] when Redis was away instead: see
    /// [When Redis is away](crate#when-redis-is-away)).
    ///
    /// # Errors
    /// As [`Lock::try_acquire_for`](crate::Lock::try_acquire_for).
    ///
    /// # Cancel safety
    /// As [`campaign`](Self::campaign).
    pub async fn try_campaign_for(&self, wait: Duration) -> Result<Option<Leadership>, LockError> {
        self.traced(Wait::Up(wait), self.candidate().try_acquire_for(wait))
            .await
    }

    /// Runs a campaign in its `lockman.campaign` span; a lead won opens its `lockman.term`.
    async fn traced(
        &self,
        wait: Wait,
        campaign: impl Future<Output = Result<Option<FencedGuard>, LockError>>,
    ) -> Result<Option<Leadership>, LockError> {
        let span = trace::campaign(self.name.key(), wait);
        let res = campaign.instrument(span.clone()).await;
        trace::campaigned(&span, &res, FencedGuard::token);
        Ok(res?.map(|guard| Leadership::won(guard, &span)))
    }

    /// The leader now, read in one round trip; `None` when nobody leads.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for an empty name, [`LockError::WrongType`] when the key
    /// is not a lock, Redis errors.
    pub async fn leader(&self) -> Result<Option<Leader>, LockError> {
        let commands = &self.manager.commands;
        self.manager.check(&self.name)?;
        let info = LockInfo::new(self.name.given(), commands.describe(self.name.key()).await?);
        // While the lock is held its counter's value is its holder's token: only an acquire
        // moves the counter, and none but the holder's can succeed while it holds.
        Ok(info.holders.first().map(|h| Leader {
            holder: h.holder.clone(),
            term: info.token.unwrap_or_default(),
        }))
    }

    /// An observer of the leader: its first [`next`](Observer::next) gives the leader now, and
    /// each further one the next change (a new leader or term, or nobody leading).
    pub fn observe(&self) -> Observer {
        Observer {
            election: self.clone(),
            last: None,
        }
    }
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .field("observe_every", &self.observe_every)
            .finish()
    }
}

/// The changes of an election's leader, from [`Election::observe`].
#[derive(Debug)]
pub struct Observer {
    election: Election,
    /// What the last `next` returned (`None` before the first).
    last: Option<Option<Leader>>,
}

impl Observer {
    /// The leader (`None`: nobody leads) once it differs from what the last call returned;
    /// the first call returns at once. Reads every [`Election::observe_every`].
    ///
    /// # Errors
    /// As [`Election::leader`]; the observer stays usable (the next call reads again).
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call changes nothing.
    pub async fn next(&mut self) -> Result<Option<Leader>, LockError> {
        loop {
            let now = self.election.leader().await?;
            if self.last.as_ref() != Some(&now) {
                self.last = Some(now.clone());
                return Ok(now);
            }
            tokio::time::sleep(self.election.observe_every).await;
        }
    }
}
