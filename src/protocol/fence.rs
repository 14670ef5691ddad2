//! Fenced writes (`fenced_set.lua`, docs/protocol.md "Fenced writes"): what a fenced lock's
//! token, or an election's term, is for.

use std::sync::LazyLock;

use redis::{Script, Value};

use super::Commands;
use super::keys;
use crate::connections::command::{Replicas, ScriptCall};
use crate::error::LockError;

static FENCED_SET: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("fenced_set.lua")));

/// The fence scripts, loaded at start with the others (see `all_scripts`).
pub(super) fn fence_scripts() -> [&'static Script; 1] {
    [&FENCED_SET]
}

/// The hash of the newest token seen per protected key of the lock `name`:
/// `lockman_fence:{name}`, in the lock's slot.
fn fence_key(name: &str) -> String {
    keys::prefixed("lockman_fence", name)
}

impl Commands {
    /// Sets `key` to `value` unless a token newer than `token` was seen there (through the
    /// fence of the lock `name`); whether it was written.
    pub(crate) async fn fenced_set(
        &self,
        name: &str,
        key: &str,
        value: &[u8],
        token: u64,
    ) -> Result<bool, LockError> {
        let fence = fence_key(name);
        let bytes = fence.len() + key.len() + value.len() + 20;
        let mut call = ScriptCall::new(&FENCED_SET, 2, 2, bytes);
        call.key(&fence).key(key).arg(token.to_string()).arg(value);
        // Synced like acquires when replica sync is on: a write the primary acknowledged but
        // no replica has could be lost in a failover with its fence, letting the old term's
        // writes through again.
        let reply = self
            .conn()
            .eval("fenced set", &fence, &call, Replicas::Wait);
        match reply.await?.synced()? {
            Value::Int(n) => Ok(n == 1),
            other => Err(super::unexpected("fenced set", other)),
        }
    }
}
