//! Deadlocks found, not waited out. When callers of one manager take locks in opposite orders
//! (task A holds `x` and waits for `y`, task B holds `y` and waits for `x`), neither would ever
//! proceed: each waits until its timeout or a lease ends it, and nothing says why. lockman keeps
//! a **waits-for graph** of its manager's lock waits and finds the cycle when the wait that
//! closes it begins, with no Redis round trip. By default ([`Deadlocks::Break`]) the youngest
//! wait of the cycle fails with [`LockError::Deadlock`], naming the [`Cycle`], and leaves its
//! queue, so the others go on; [`Config::deadlocks`] can choose to only report it.
//!
//! A group multi-lock's wait ([`LockManager::group_lock`](crate::LockManager::group_lock))
//! waits for the owners of the members it shares with other holds of that group, and only
//! for them: a holder of the group's other members blocks it in no cycle. A group lock and a
//! lock of another kind on one key are in no edge.
//!
//! ```no_run
//! # async fn demo(manager: lockman::LockManager) -> Result<(), lockman::LockError> {
//! use lockman::LockError;
//!
//! let (orders, stock) = (manager.lock("orders"), manager.lock("stock"));
//! let _orders = orders.acquire().await?;
//! match stock.acquire().await {
//!     Ok(_stock) => { /* both held */ }
//!     // Another task holds "stock" and waits for "orders": this wait was the youngest.
//!     Err(LockError::Deadlock { cycle }) => eprintln!("{cycle}; retrying"),
//!     Err(e) => return Err(e),
//! }
//! # Ok(()) }
//! ```
//!
//! **What the message says.** Each wait of the cycle is named by where the code asked for it,
//! the place of its `acquire` call (`file:line:column`: every handle's acquire verb is
//! `#[track_caller]`), and by whom: the label of the [`scope_labeled`] it runs in, else its
//! [`Owner`] (`task 17`: a tokio task id, which only a log of task ids would tell). The error
//! then says what to do: take the locks in one order everywhere, or retry. A wait in another
//! process shows its place and label too when that process runs this version of lockman.
//!
//! ```no_run
//! # async fn demo(manager: lockman::LockManager) -> Result<(), lockman::LockError> {
//! use lockman::deadlock::{self, Owner};
//!
//! let orders = manager.lock("orders");
//! // Its waits show as `"checkout" (scope 1 of <service>) at src/…:line:column`.
//! deadlock::scope_labeled(Owner::new(), "checkout", async {
//!     let _orders = orders.acquire().await?;
//!     Ok(())
//! })
//! .await
//! # }
//! ```
//!
//! **Whom a wait belongs to.** A wait and a hold belong to an [`Owner`]: by default the tokio
//! task that called `acquire` (inside actix, each actor and each spawned future is one). That is
//! right for the usual shape, one task that takes its locks one after the other. It is wrong
//! when a guard moves to another task (sent to a spawned task, which releases it) or when one
//! task waits in several branches at once (`join!`, `select!`): then make an [`Owner`] and run
//! each party's code in [`scope`], so that holds and waits are attributed as they really are.
//!
//! **What counts.** Every lock kind of the manager: a reader waiting behind a writer waits for
//! the writer's owner, a writer for every holder's, a [`MultiLock`](crate::MultiLock)'s member
//! for that member's holders. A fair lock's waiter waits for the holder; a waiter queued behind
//! another waits for the same holder, so any cycle through the queue's order also runs through
//! the holder and is found. Not counted: synchronizers (any one release ends a semaphore wait,
//! so a holder is no one waiter's blocker), a [`Wait::No`](crate::actix::Wait) attempt (it never
//! waits), a hold re-entered by another owner (clones of one handle in two tasks), a wait for a
//! lock its own owner holds through another handle (it may be another branch of the same task,
//! which will let go: no cycle of one is reported), and holds taken with the message API
//! without an owner. Holds of other managers and processes count through Redis: a wait that
//! has lasted a second is followed through them (docs/protocol.md, "Waits for deadlock
//! detection"); a process that cannot say what it waits for now (cut off from Redis, frozen)
//! closes no cycle with what it said before. One limit: each manager publishes the holds of
//! the owners that wait in it, so an owner that holds through one manager and waits through
//! another of the same process is not followed; share one manager per process (it is cheap to
//! clone), as is usual anyway.

use std::future::Future;
use std::sync::Arc;

pub use crate::config::Deadlocks;
pub use crate::error::{Cycle, Owner, Site, Step};
#[allow(unused_imports)] // for the docs
use crate::{Config, LockError};

/// What [`scope`] or [`scope_labeled`] entered: the owner, and the label its waits show.
struct Entered {
    owner: Owner,
    label: Option<Arc<str>>,
}

tokio::task_local! {
    /// The owner entered with [`scope`], in place of the task.
    static SCOPE: Entered;
}

/// The owner of a wait or hold begun here: the [`scope`]'s, else the tokio task's, else (in a
/// future run by `block_on`, which has no task) the thread's. The handles' requests carry it;
/// a message API caller may send `None` instead, to keep a request out of deadlock detection.
pub fn current() -> Owner {
    let owner = SCOPE.try_with(|entered| entered.owner).ok();
    owner.unwrap_or_else(|| match tokio::task::try_id() {
        Some(id) => Owner::Task(unhash(&id)),
        None => Owner::Thread(unhash(&std::thread::current().id())),
    })
}

/// Where a wait is asked for, for a deadlock's message: the caller's place in the code (the
/// caller of a `#[track_caller]` function calling this, such as every handle's `acquire`) and
/// the label of the [`scope_labeled`] it runs in. The handles send it with each request; a
/// message API caller may send it too (or `None`: the place is then unknown).
#[track_caller]
pub fn site() -> Site {
    Site {
        place: std::panic::Location::caller(),
        // A clone of the scope's `Arc`: no allocation on the acquire's path.
        label: SCOPE
            .try_with(|entered| entered.label.clone())
            .ok()
            .flatten(),
    }
}

/// Runs `work` with every wait and hold begun in it belonging to `owner` instead of the task
/// that polls it. Enter the same owner in every task that acts for it (a task that receives its
/// guards, say).
pub async fn scope<F: Future>(owner: Owner, work: F) -> F::Output {
    let entered = Entered { owner, label: None };
    SCOPE.scope(entered, work).await
}

/// As [`scope`], and a deadlock's message ([`Step::label`]) names the waits begun in `work`
/// by `label` (a `&'static str` or a `String`: what the code does, such as `"checkout"`),
/// beside their place in the code. To label a task's waits without a new owner, pass
/// [`current()`] as the owner, in the task that runs `work`.
pub async fn scope_labeled<F: Future>(
    owner: Owner,
    label: impl Into<Arc<str>>,
    work: F,
) -> F::Output {
    let entered = Entered {
        owner,
        label: Some(label.into()),
    };
    SCOPE.scope(entered, work).await
}

/// The number of a tokio task id or a thread id (the number each shows). Both are opaque, but
/// each hashes as one `u64`, and FxHash of one `u64` (on 64-bit targets) is that number times an
/// odd constant, rotated: undone here, with no allocation. A test checks it against the ids'
/// `Display` and `Debug`, should any of these crates change.
fn unhash(id: &impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    id.hash(&mut h);
    h.finish()
        .rotate_right(FX_ROTATE)
        .wrapping_mul(inverse(FX_K))
}

/// FxHash's multiplier and final rotation (rustc-hash 2, 64-bit).
const FX_K: u64 = 0xf1357aea2e62a9c5;
const FX_ROTATE: u32 = 26;

/// The inverse of odd `k` modulo 2^64 (Newton's iteration doubles the correct bits each step).
const fn inverse(k: u64) -> u64 {
    let mut x = k;
    let mut i = 0;
    while i < 6 {
        x = x.wrapping_mul(2u64.wrapping_sub(k.wrapping_mul(x)));
        i += 1;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tasks_have_their_own_owner_and_a_scope_overrides_it() {
        let here = tokio::spawn(async { (current(), current()) })
            .await
            .unwrap();
        assert_eq!(here.0, here.1);
        let there = tokio::spawn(async { current() }).await.unwrap();
        assert_ne!(here.0, there);
        let owner = Owner::new();
        assert_eq!(scope(owner, async { current() }).await, owner);
        let spawned = tokio::spawn(scope(owner, async { current() }));
        assert_eq!(spawned.await.unwrap(), owner);
    }

    #[tokio::test]
    async fn a_task_owner_is_the_task_id_tokio_shows() {
        for _ in 0..3 {
            let (owner, id) = tokio::spawn(async { (current(), tokio::task::id()) })
                .await
                .unwrap();
            assert_eq!(owner, Owner::Task(id.to_string().parse().unwrap()));
        }
        assert_eq!(FX_K.wrapping_mul(inverse(FX_K)), 1);
    }

    #[test]
    fn outside_a_task_the_owner_is_the_thread() {
        let id = format!("{:?}", std::thread::current().id());
        let n = id.trim_start_matches("ThreadId(").trim_end_matches(')');
        assert_eq!(current(), Owner::Thread(n.parse().unwrap()));
        let other = std::thread::spawn(current).join().unwrap();
        assert_ne!(current(), other);
    }
}
