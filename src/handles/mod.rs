//! The handles: what users hold. Every acquire and release is a message to the name's actor
//! (they hold its address, and a command connection only for reads: `describe`, `inspect`,
//! counts, and `force_unlock`): the [`LockManager`](manager::LockManager) façade and the manager
//! state the handles share (`state`), where a name becomes a key (`name`), the locks (`lock`),
//! the compositions (`compose`), the synchronizers (`sync`), elections (`election`), a hold's
//! deadline (`scope`), whom a wait belongs to (`deadlock`), client records (`clients`), how a
//! handle reaches its name's actor (`reach`), where the actors run (`runtime`), their spans
//! (`trace`), the actix-web extractors (`web`) and the tower layers (`tower`), and how both of
//! those turn a request into a lock name (`admission`).

#[cfg(any(feature = "tower", feature = "actix-web"))]
pub(crate) mod admission;
pub(crate) mod clients;
pub(crate) mod compose;
pub mod deadlock;
pub(crate) mod election;
pub(crate) mod lock;
pub(crate) mod manager;
pub(crate) mod name;
pub(crate) mod reach;
pub(crate) mod runtime;
pub(crate) mod scope;
pub(crate) mod state;
pub(crate) mod sync;
#[cfg(feature = "tower")]
pub mod tower;
pub(crate) mod trace;
#[cfg(feature = "actix-web")]
pub mod web;
