//! Client records (docs/protocol.md, "Client records"): each manager's hash saying who it is
//! (service, host, pid, version) and which names it has held long or waits on, refreshed by its
//! Watchdog; and the read of every live one, for `lockman inspect`, `ls` and `top`. Redisson
//! never reads these keys; a user without permission for them still locks.
//!
//! Every record and the index share the hash tag `{lockman}`: on a cluster they live in one
//! slot, so one call on one master finds every client without scanning the keyspace.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use super::commands::Commands;
use super::{millis, unexpected};
use crate::connections::command::{Replicas, ScriptCall};
use crate::error::LockError;

static RECORD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("clients/record.lua")));
static READ: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("clients/read.lua")));
static SERVICE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("clients/service.lua")));
static FORGET: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("clients/forget.lua")));

/// The index of live clients: a sorted set of client ids scored by when their record expires
/// (epoch ms, the server's clock).
pub(crate) const CLIENT_INDEX: &str = "lockman_client:{lockman}";

/// The key of client `id`'s record.
pub(crate) fn client_key(id: &str) -> String {
    format!("{CLIENT_INDEX}:{id}")
}

/// One live record as read: the client id and the hash's fields.
pub(crate) type RawRecord = (String, Vec<(String, String)>);

impl Commands {
    /// Writes this manager's record (`clients/record.lua`), to expire after `ttl`.
    pub(crate) async fn write_client_record(
        &self,
        id: &str,
        ttl: Duration,
        fields: &[(String, String)],
    ) -> Result<(), LockError> {
        let key = client_key(id);
        let bytes: usize = fields.iter().map(|(f, v)| f.len() + v.len() + 8).sum();
        let mut call = ScriptCall::new(&RECORD, 2, 2 + 2 * fields.len(), 2 * key.len() + bytes);
        call.key(&key).key(CLIENT_INDEX).arg(millis(ttl)).arg(id);
        for (f, v) in fields {
            call.arg(f).arg(v);
        }
        self.conn()
            .eval("client record", &key, &call, Replicas::Skip)
            .await?;
        Ok(())
    }

    /// Deletes this manager's record (`clients/forget.lua`).
    pub(crate) async fn forget_client_record(&self, id: &str) -> Result<(), LockError> {
        let key = client_key(id);
        let mut call = ScriptCall::new(&FORGET, 2, 1, 2 * key.len());
        call.key(&key).key(CLIENT_INDEX).arg(id);
        self.conn()
            .eval("client record", &key, &call, Replicas::Skip)
            .await?;
        Ok(())
    }

    /// The service name in client `id`'s record (`clients/service.lua`), if it has one.
    pub(crate) async fn client_service(&self, id: &str) -> Result<Option<String>, LockError> {
        let key = client_key(id);
        let mut call = ScriptCall::new(&SERVICE, 1, 0, key.len());
        call.key(&key);
        let reply = self
            .conn()
            .eval("read clients", &key, &call, Replicas::Skip)
            .await?;
        Ok(redis::from_redis_value(reply.value).ok().flatten())
    }

    /// Every live record (`clients/read.lua`) and the server's time (epoch ms).
    pub(crate) async fn read_client_records(&self) -> Result<(u64, Vec<RawRecord>), LockError> {
        let mut call = ScriptCall::new(&READ, 1, 1, 2 * CLIENT_INDEX.len() + 1);
        call.key(CLIENT_INDEX).arg(format!("{CLIENT_INDEX}:"));
        let reply = self
            .conn()
            .eval("read clients", CLIENT_INDEX, &call, Replicas::Skip);
        let reply = reply.await?.value;
        let bad = || unexpected("read clients", reply.clone());
        let Value::Array(items) = &reply else {
            return Err(bad());
        };
        let Some((Value::Int(now), rest)) = items.split_first() else {
            return Err(bad());
        };
        let mut records = Vec::with_capacity(rest.len() / 2);
        for pair in rest.chunks_exact(2) {
            let id: String = redis::from_redis_value(pair[0].clone()).map_err(|_| bad())?;
            let flat: Vec<String> = redis::from_redis_value(pair[1].clone()).map_err(|_| bad())?;
            let fields = flat
                .chunks_exact(2)
                .map(|p| (p[0].clone(), p[1].clone()))
                .collect();
            records.push((id, fields));
        }
        Ok((u64::try_from(*now).unwrap_or(0), records))
    }
}
