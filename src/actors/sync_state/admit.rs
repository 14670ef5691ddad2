//! Which requests the state takes in: the checks a request passes before it becomes a waiter
//! or a round trip. A request refused here costs nothing and leaves the state as it was; its
//! caller gets the refusal at once.

use std::time::Duration;

use super::{Op, SyncState};
use crate::error::LockError;
use crate::protocol::SyncKind;

impl SyncState {
    /// A request for `permits` permits, with `lease` (`None`: the watchdog's): at least one
    /// permit, a lease of at least 1 ms, and no stop asked for.
    pub(crate) fn admit_take(
        &self,
        permits: u32,
        lease: Option<Duration>,
    ) -> Result<(), LockError> {
        if permits == 0 {
            return Err(LockError::invalid("permits", "must be at least 1"));
        }
        if lease.is_some_and(|l| l.is_zero()) {
            return Err(LockError::invalid("lease", "must be at least 1 ms"));
        }
        self.serving()
    }

    /// An adjustment or a release of ids: one this kind of synchronizer does, with whole ids,
    /// and no stop asked for.
    pub(crate) fn admit_op(&self, op: &Op) -> Result<(), LockError> {
        match op {
            Op::Adjust(adjustment) => adjustment.check(self.kind)?,
            Op::ReleaseIds(_) if self.kind != SyncKind::PermitSemaphore => {
                return Err(LockError::invalid(
                    "operation",
                    format!("a release of ids does not apply to a {}", self.kind.label()),
                ));
            }
            Op::ReleaseIds(ids) if ids.is_empty() || ids.len() % 16 != 0 => {
                return Err(LockError::invalid("ids", "at least one id of 16 bytes"));
            }
            _ => {}
        }
        self.serving()
    }

    /// Nothing new is served once a stop was asked for.
    pub(crate) fn serving(&self) -> Result<(), LockError> {
        if self.is_stopping() {
            return Err(LockError::Shutdown);
        }
        Ok(())
    }
}
