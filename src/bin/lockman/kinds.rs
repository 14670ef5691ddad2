//! What a name holds, for the error that says it is not the kind a subcommand asked for.

use lockman::{LockError, LockManager, LockShape};

use crate::{Failure, code};

/// What `name` holds now, in words ("a read-write lock", "a redis list"); `None` when it
/// holds nothing, or Redis could not say.
pub async fn what_it_holds(manager: &LockManager, name: &str) -> Option<String> {
    match manager.describe(name).await {
        Ok(info) if info.is_held() => Some(lock_kind(info.shape).to_owned()),
        Ok(_) => None,
        Err(LockError::WrongType { .. }) => {
            let sync = manager.describe_synchronizer(name).await.ok()?;
            match (&sync.other_type, sync.held.is_empty(), sync.count) {
                (Some(kind), _, _) => Some(format!("a redis {kind}")),
                (None, false, _) => Some("a permit semaphore".to_owned()),
                // A semaphore's permits and a latch's count are the same string key.
                (None, true, Some(_)) => Some("a semaphore's or a latch's count".to_owned()),
                (None, true, None) => None,
            }
        }
        Err(_) => None,
    }
}

fn lock_kind(shape: LockShape) -> &'static str {
    match shape {
        LockShape::Plain => "a lock",
        LockShape::Fair => "a fair lock",
        LockShape::ReadWrite => "a read-write lock",
        LockShape::Fenced => "a fenced lock",
        LockShape::Group => "a group lock",
        _ => "a lock",
    }
}

/// `e` as a one-line failure; a [`LockError::WrongType`] names what the name holds instead
/// of the library's generic "not a lock" (`latch set` on a lock: "holds a lock, not a latch").
pub async fn failure(manager: &LockManager, name: &str, wanted: &str, e: LockError) -> Failure {
    if !matches!(e, LockError::WrongType { .. }) {
        return Failure::redis(e);
    }
    match what_it_holds(manager, name).await {
        Some(what) => Failure::new(code::REDIS, format!("{name:?} holds {what}, not {wanted}")),
        None => Failure::redis(e),
    }
}
