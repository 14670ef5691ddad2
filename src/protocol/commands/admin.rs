//! The calls of the operator's tools on one lock (`lockman inspect`, `lockman doctor`,
//! `LockManager::describe`): reading it (`inspect.lua`, `describe.lua`), changing nothing, and
//! forcing it open whoever holds it (`force_unlock.lua`, `fair_force_unlock.lua`,
//! `group_force_unlock.lua`, `clear_delay.lua`).

use std::time::Duration;

use redis::Value;

use super::*;

impl Commands {
    /// Deletes the lock whoever holds it (`force_unlock.lua`); true when there was one. A side of
    /// a read-write lock deletes it only in its own mode, as Redisson's does. A fair lock's
    /// (`fair_force_unlock.lua`) drops the queue's stale heads and wakes the head on its own
    /// channel, as Redisson's does: a fair waiter listens on no other.
    pub(crate) async fn force_unlock(&self, kind: LockKind, name: &str) -> Result<bool, LockError> {
        let key = keys::lock_key(name);
        let room = 4 * name.len() + 96;
        let call = match kind {
            LockKind::Group => {
                return Err(LockError::invalid(
                    "lock kind",
                    "a group lock is force unlocked by its members: GroupLock::force_unlock",
                ));
            }
            LockKind::Fair | LockKind::NonReentrantFair => {
                let mut call = ScriptCall::new(&FAIR_FORCE_UNLOCK, 4, 3, room);
                call.key(key)
                    .key(keys::fair_queue(name))
                    .key(keys::fair_deadlines(name))
                    .key(keys::unlock_channel(name))
                    .arg(UNLOCK_MESSAGE)
                    .arg("")
                    .arg(self.publish());
                call
            }
            LockKind::Read
            | LockKind::Write
            | LockKind::Reentrant
            | LockKind::Fenced
            | LockKind::NonReentrant
            | LockKind::Spin => {
                let (message, mode) = match kind {
                    LockKind::Read => (WAKE_ALL_MESSAGE, "read"),
                    LockKind::Write => (WAKE_ALL_MESSAGE, "write"),
                    _ => (UNLOCK_MESSAGE, ""),
                };
                let mut call = ScriptCall::new(&FORCE_UNLOCK, 2, 3, room);
                call.key(key)
                    .key(kind.channel(name))
                    .arg(message)
                    .arg(mode)
                    // A spin lock's is a bare DEL, as Redisson's: nothing listens.
                    .arg(if kind.spins() { "" } else { self.publish() });
                call
            }
        };
        let reply = self.conn.eval("force unlock", key, &call, Replicas::Skip);
        match reply.await?.value {
            Value::Int(n) => Ok(n == 1),
            other => Err(unexpected("force unlock", other)),
        }
    }

    /// Reads the lock's state for `holder` (`inspect.lua`), changing nothing.
    pub(crate) async fn inspect(
        &self,
        kind: LockKind,
        name: &str,
        holder: &str,
    ) -> Result<Inspection, LockError> {
        let key = keys::lock_key(name);
        let call = if kind == LockKind::Group {
            let members = self.groups.members(holder)?;
            let bytes = members.iter().map(|m| m.len()).sum::<usize>();
            let mut call = ScriptCall::new(
                &group::GROUP_INSPECT,
                1,
                1 + members.len(),
                name.len() + holder.len() + bytes + 32,
            );
            call.key(key).arg(holder);
            for m in members.iter() {
                call.arg(m);
            }
            call
        } else {
            let mut call = ScriptCall::new(&INSPECT, 1, 1, name.len() + holder.len() + 32);
            call.key(key).arg(kind.field(holder));
            call
        };
        match self
            .conn
            .eval("inspect", key, &call, Replicas::Skip)
            .await?
            .value
        {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(exists), Value::Int(count), Value::Int(ttl)] => Ok(Inspection {
                    locked: *exists == 1,
                    count: u32::try_from(*count).unwrap_or(0),
                    ttl: if *exists == 1 { ttl_of(*ttl) } else { None },
                }),
                _ => Err(unexpected("inspect", Value::Array(items))),
            },
            other => Err(unexpected("inspect", other)),
        }
    }

    /// Deletes the delay key of the reentrant lock `name` when nobody holds it, and wakes its
    /// waiters (`clear_delay.lua`): how long the delay had to go, `None` when there was none or
    /// the lock is held (a holder's delay key is left).
    pub(crate) async fn clear_delay(&self, name: &str) -> Result<Option<Duration>, LockError> {
        let key = keys::lock_key(name);
        let mut call = ScriptCall::new(&CLEAR_DELAY, 3, 2, 3 * name.len() + 64);
        call.key(key)
            .key(keys::delay_key(name))
            .key(keys::unlock_channel(name))
            .arg(UNLOCK_MESSAGE)
            .arg(self.publish());
        let reply = self
            .conn
            .eval("clear lock-delay", key, &call, Replicas::Skip);
        match reply.await?.value {
            Value::Int(ms) => Ok(u64::try_from(ms).ok().map(Duration::from_millis)),
            other => Err(unexpected("clear lock-delay", other)),
        }
    }

    /// Reads every key of the lock `name` (`describe.lua`), changing nothing: the raw material
    /// of a [`LockInfo`](crate::LockInfo).
    pub(crate) async fn describe(&self, name: &str) -> Result<Described, LockError> {
        let key = keys::lock_key(name);
        let call = |delay: bool| {
            let mut call =
                ScriptCall::new(&DESCRIBE, 4 + usize::from(delay), 0, 5 * name.len() + 112);
            call.key(key)
                .key(keys::fair_queue(name))
                .key(keys::fair_deadlines(name))
                .key(keys::token_key(name));
            if delay {
                call.key(keys::delay_key(name));
            }
            call
        };
        // The delay key too, in the same round trip; Redis checks a script's keys against the
        // user's ACL before running it, and a user without `lockman_delay:*` (who uses no
        // lock-delay, docs/protocol.md "ACL") is asked again without it.
        let reply = match self
            .conn
            .eval("describe", key, &call(true), Replicas::Skip)
            .await
        {
            Err(LockError::NoPermission { .. }) => {
                self.conn
                    .eval("describe", key, &call(false), Replicas::Skip)
                    .await
            }
            reply => reply,
        };
        described(reply?.value)
    }

    /// Force unlocks `members` of the group lock `name`, whoever holds each
    /// (`group_force_unlock.lua`), and publishes the unlock message: how many had an owner.
    pub(crate) async fn force_unlock_group(
        &self,
        name: &str,
        members: &[String],
    ) -> Result<u64, LockError> {
        let key = keys::lock_key(name);
        let bytes = members.iter().map(|m| m.len()).sum::<usize>();
        let mut call = ScriptCall::new(
            &group::GROUP_FORCE_UNLOCK,
            2,
            2 + members.len(),
            2 * name.len() + bytes + 64,
        );
        call.key(key)
            .key(keys::unlock_channel(name))
            .arg(UNLOCK_MESSAGE)
            .arg(self.publish());
        for m in members {
            call.arg(m);
        }
        let reply = self
            .conn
            .eval("group force unlock", key, &call, Replicas::Skip);
        match reply.await?.value {
            Value::Int(n) => Ok(u64::try_from(n).unwrap_or(0)),
            other => Err(unexpected("group force unlock", other)),
        }
    }
}

/// A [`Described`] from `describe.lua`'s reply: the hash's fields, its PTTL, the fair queue and
/// its deadlines, the token, the server's clock and the delay key's PTTL.
fn described(reply: Value) -> Result<Described, LockError> {
    let bad = |v: &Value| unexpected("describe", v.clone());
    let Value::Array(parts) = &reply else {
        return Err(bad(&reply));
    };
    let [fields, pttl, queue, deadlines, token, now, delay] = parts.as_slice() else {
        return Err(bad(&reply));
    };
    // Lossily: a field anyone may have written (bytes that are not UTF-8 as U+FFFD), so
    // that such a hash can still be shown and force-unlocked.
    let strings = |v: &Value| -> Result<Vec<String>, LockError> {
        let Value::Array(items) = v else {
            return Err(bad(v));
        };
        items
            .iter()
            .map(|item| match item {
                Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
                Value::SimpleString(s) => Ok(s.clone()),
                Value::Int(n) => Ok(n.to_string()),
                _ => Err(bad(v)),
            })
            .collect()
    };
    let pairs = |list: Vec<String>| -> Vec<(String, String)> {
        list.chunks_exact(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect()
    };
    Ok(Described {
        fields: pairs(strings(fields)?),
        ttl: match pttl {
            Value::Int(ms) => ttl_of(*ms),
            other => return Err(bad(other)),
        },
        queue: strings(queue)?,
        deadlines: pairs(strings(deadlines)?),
        token: redis::from_redis_value::<Option<String>>(token.clone())
            .ok()
            .flatten()
            .and_then(|t| t.parse().ok()),
        now_ms: match now {
            Value::Int(ms) => u64::try_from(*ms).ok(),
            _ => None,
        },
        // -2: no delay key; -1 (a key without expiry, which lockman never writes) is shown
        // as none too.
        delay: match delay {
            Value::Int(ms) => u64::try_from(*ms).ok().map(Duration::from_millis),
            other => return Err(bad(other)),
        },
    })
}
