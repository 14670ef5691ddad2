//! [`SyncInfo`]: what Redis holds about one synchronizer, for diagnostics (`lockman inspect`).

use std::time::Duration;

use crate::protocol::{NO_LEASE_SCORE, SyncDescribed};

/// Everything Redis holds about a semaphore, permit semaphore or count-down latch named `name`,
/// read in one round trip, changing nothing (expired permits are shown, not reclaimed).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncInfo {
    /// The name: the main key.
    pub name: String,
    /// The main key's number: a semaphore's free permits, a latch's count; `None` when the key
    /// is missing (a semaphore never set, an open latch).
    pub count: Option<i64>,
    /// The main key's Redis type when it is not a counter (`None` for a counter or no key).
    pub other_type: Option<String>,
    /// The main key's TTL, when it has one.
    pub ttl: Option<Duration>,
    /// A permit semaphore's held permits, soonest expiry first.
    pub held: Vec<HeldPermit>,
}

/// One held permit of a permit semaphore.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldPermit {
    /// Its id, as Java shows it (32 lowercase hex characters). A lockman permit's first 16
    /// characters are those of its manager's client id.
    pub id: String,
    /// How long until it expires by the server's clock (zero: expired, not yet reclaimed);
    /// `None` for Redisson's permits without a lease, which never expire.
    pub expires_in: Option<Duration>,
}

impl HeldPermit {
    /// The client id prefix of a lockman permit (the first 16 hex characters of its manager's
    /// [`client_id`](crate::LockManager::client_id)); Java's ids are random, so theirs says
    /// nothing.
    pub fn client_prefix(&self) -> &str {
        self.id.get(..16).unwrap_or(&self.id)
    }
}

impl SyncInfo {
    pub(crate) fn new(name: &str, described: SyncDescribed) -> Self {
        let counter = described.key_type == "string";
        let count = described
            .value
            .as_deref()
            .and_then(|v| v.parse().ok())
            .filter(|_| counter);
        let other_type = match described.key_type.as_str() {
            "none" => None,
            "string" if count.is_some() => None,
            other => Some(other.to_owned()),
        };
        let mut held: Vec<HeldPermit> = described
            .held
            .into_iter()
            .map(|(id, score)| HeldPermit {
                id,
                expires_in: (score != NO_LEASE_SCORE).then(|| {
                    Duration::from_millis(score.saturating_sub(described.now).max(0).unsigned_abs())
                }),
            })
            .collect();
        held.sort_by_key(|p| p.expires_in.unwrap_or(Duration::MAX));
        Self {
            name: name.to_owned(),
            count,
            other_type,
            ttl: described.ttl,
            held,
        }
    }
}
