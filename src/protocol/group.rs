//! The group multi-lock (Redisson's `RedissonFasterMultiLock`): many members, each a field of one
//! hash, taken and released in one script (docs/protocol.md, "Group multi-lock").
//!
//! A group lock's calls need its members, which a lock actor's requests (a holder on a name)
//! do not carry: each group handle registers its holder's members here when it is made, and
//! the calls of that holder append them ([`Groups::members`]).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use redis::Script;

use crate::error::LockError;

pub(super) static GROUP_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("group_acquire.lua")));
pub(super) static GROUP_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("group_release.lua")));
pub(super) static GROUP_RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("group_renew.lua")));
pub(super) static GROUP_HELD: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("group_held.lua")));
pub(super) static GROUP_INSPECT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("group_inspect.lua")));
pub(super) static GROUP_FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("group_force_unlock.lua")));

/// The group scripts, loaded at start with every other.
pub(super) fn group_scripts() -> [&'static Script; 6] {
    [
        &GROUP_ACQUIRE,
        &GROUP_RELEASE,
        &GROUP_RENEW,
        &GROUP_HELD,
        &GROUP_INSPECT,
        &GROUP_FORCE_UNLOCK,
    ]
}

/// The most members one group lock takes: each is three hash fields written in one script, which
/// blocks the server while it runs.
pub const MAX_GROUP_MEMBERS: usize = 10_000;

/// The members of a group lock, checked: at least one, at most [`MAX_GROUP_MEMBERS`], none empty
/// or containing `:` (the hash's `<member>:<owner>:expire_time` fields are split on it: a member
/// `m:<owner>:expire_time` would be another member's expiry), none twice.
pub(crate) fn check_members<I, S>(members: I) -> Result<Arc<[String]>, LockError>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let members: Vec<String> = members.into_iter().map(Into::into).collect();
    if members.is_empty() {
        return Err(LockError::invalid(
            "group members",
            "a group lock needs at least one member",
        ));
    }
    if members.len() > MAX_GROUP_MEMBERS {
        return Err(LockError::invalid(
            "group members",
            format!(
                "{} members, more than the {MAX_GROUP_MEMBERS} one group lock takes",
                members.len()
            ),
        ));
    }
    let mut seen = std::collections::HashSet::with_capacity(members.len());
    for m in &members {
        if m.is_empty() {
            return Err(LockError::invalid("group member", "must not be empty"));
        }
        if m.contains(':') {
            return Err(LockError::invalid(
                "group member",
                format!("{m:?} contains ':', which the group hash's field names are split on"),
            ));
        }
        if !seen.insert(m.as_str()) {
            return Err(LockError::invalid(
                "group members",
                format!("{m:?} is given twice"),
            ));
        }
    }
    Ok(members.into())
}

/// How long a holder's members stay known after its last handle and guard are gone: a release
/// of its last hold may still be sent again in the background meanwhile.
const RETIRED_FOR: Duration = Duration::from_secs(600);

#[derive(Debug)]
struct Entry {
    members: Arc<[String]>,
    /// The members sorted, made at the first ask (deadlock detection's: a group lock that
    /// never waits never sorts).
    sorted: Option<Arc<[String]>>,
    /// Live registrations (a handle and its clones and guards share one).
    live: usize,
    /// When the last registration went.
    retired: Option<Instant>,
}

/// Each group holder's members, shared by the clones of a [`Commands`](super::Commands).
#[derive(Clone, Debug, Default)]
pub(crate) struct Groups {
    by_holder: Arc<Mutex<HashMap<Arc<str>, Entry>>>,
}

impl Groups {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Entry>> {
        // A panic while the map is locked leaves no half-made entry: every change is one insert
        // or one field write.
        self.by_holder
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers `holder`'s members for as long as the registration lives (and
    /// [`RETIRED_FOR`] after), sweeping entries retired longer than that.
    pub(crate) fn register(&self, holder: Arc<str>, members: Arc<[String]>) -> Registration {
        let mut map = self.lock();
        let now = Instant::now();
        map.retain(|_, e| {
            e.retired
                .is_none_or(|t| now.duration_since(t) < RETIRED_FOR)
        });
        let entry = map.entry(holder.clone()).or_insert(Entry {
            members,
            sorted: None,
            live: 0,
            retired: None,
        });
        entry.live += 1;
        entry.retired = None;
        Registration {
            groups: self.clone(),
            holder,
            members: entry.members.clone(),
        }
    }

    /// The members registered for `holder`.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] when none are (a group lock's request sent to its actor
    /// by hand, not through a [`GroupLock`](crate::GroupLock)).
    pub(crate) fn members(&self, holder: &str) -> Result<Arc<[String]>, LockError> {
        self.lock()
            .get(holder)
            .map(|e| e.members.clone())
            .ok_or_else(|| {
                LockError::invalid(
                    "group holder",
                    format!("{holder} has no group members: make group locks with LockManager::group_lock"),
                )
            })
    }
}

impl Groups {
    /// The members registered for `holder`, sorted (`None` when none are).
    pub(crate) fn sorted_members(&self, holder: &str) -> Option<Arc<[String]>> {
        let mut map = self.lock();
        let entry = map.get_mut(holder)?;
        let sorted = entry.sorted.get_or_insert_with(|| {
            let mut sorted = entry.members.to_vec();
            sorted.sort_unstable();
            sorted.into()
        });
        Some(sorted.clone())
    }
}

/// Keeps a holder's members known ([`Groups::register`]).
#[derive(Debug)]
pub(crate) struct Registration {
    groups: Groups,
    holder: Arc<str>,
    members: Arc<[String]>,
}

impl Registration {
    /// The members registered.
    pub(crate) fn members(&self) -> &Arc<[String]> {
        &self.members
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut map = self.groups.lock();
        if let Some(e) = map.get_mut(&self.holder) {
            e.live = e.live.saturating_sub(1);
            if e.live == 0 {
                e.retired = Some(Instant::now());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_checked() {
        assert!(check_members(["a", "b"]).is_ok());
        assert!(check_members(Vec::<String>::new()).is_err());
        assert!(check_members(["a", "a"]).is_err());
        assert!(check_members(["a:b"]).is_err());
        assert!(check_members([""]).is_err());
        let many: Vec<String> = (0..=MAX_GROUP_MEMBERS).map(|i| i.to_string()).collect();
        assert!(check_members(many).is_err());
    }

    #[test]
    fn members_outlive_their_registration_then_go() {
        let groups = Groups::default();
        let holder: Arc<str> = "h:1".into();
        let reg = groups.register(holder.clone(), vec!["a".to_owned()].into());
        assert_eq!(&*groups.members("h:1").unwrap(), ["a".to_owned()]);
        drop(reg);
        // Retired, still known: a release sent again finds them.
        assert!(groups.members("h:1").is_ok());
        groups.lock().get_mut("h:1").unwrap().retired =
            Instant::now().checked_sub(RETIRED_FOR + Duration::from_secs(1));
        let _other = groups.register("h:2".into(), vec!["b".to_owned()].into());
        assert!(groups.members("h:1").is_err());
    }
}
