//! The tracking connection: a RESP3 connection of its own to the primary with client-side
//! tracking on (`CLIENT TRACKING ON NOLOOP`, default mode), on which lockman checks and renews
//! its holds, so that the server tells it at once (an `invalidate` push) when a key it checked
//! is written by anyone else: a foreign `DEL`, a force unlock, an eviction, an expiry, a
//! `FLUSHALL`.
//!
//! Why this shape (measured on Redis 7.0.15 and Valkey 9.1.2, docs/protocol.md "Watched holds"):
//! - keys read inside `EVALSHA` are tracked for the calling connection, so one read-only script
//!   call both checks a batch of holds and registers their keys;
//! - in default mode a key leaves the tracking table at its first invalidation, even when the
//!   write came from the tracking connection itself with `NOLOOP` (then nothing is sent to it):
//!   so the only writes made here are renewals whose scripts read the key again after writing
//!   it, which tracks it again with no push and no check; every other write (anyone's, or
//!   lockman's own on a command connection) is an invalidation, followed by a check, which
//!   registers the key again;
//! - RESP3 pushes arrive on the connection that tracks; RESP2 would need the invalidations
//!   redirected to a subscribed connection, which redis-rs's pub/sub connection cannot name
//!   (no `CLIENT ID` on it), so RESP3 it is: Redis 6+ and every Valkey.
//!
//! On a cluster, one such connection per master, each reached directly (tracking is per node):
//! a call goes to the master serving its slot, as `CLUSTER SLOTS` said when the connections
//! were made, and the pushes of every master are heard together. A reply that says the
//! topology moved (`MOVED`, `ASK`, `CLUSTERDOWN`), a closed connection or a changed slot map
//! (read again at each [`Tracking::ping`]) is an error here: the watch then makes them all
//! again, from a slot map read anew, and checks every hold.
//! Nothing here knows the protocol or the actors.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{join_all, try_join_all};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, ProtocolVersion, PushKind, Script, Value};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use crate::connections::cluster::{SlotRanges, slot_ranges, topology_error};
use crate::connections::command::ScriptCall;
use crate::connections::endpoint::Endpoint;
use crate::connections::failure::connect_error;
use crate::error::LockError;

/// At most this many pushes waiting are joined into one [`Heard`].
const PUSHES_JOINED: usize = 1024;

/// What the tracking connection hears.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Heard {
    /// These keys were written (or deleted, expired, evicted) since this connection read them.
    Invalidated(Vec<Vec<u8>>),
    /// Every key was (a `FLUSHALL` or `FLUSHDB`).
    Flushed,
    /// The connection closed: invalidations sent meanwhile are gone.
    Closed,
}

/// The tracking connections (one, or one per master of a cluster): cheap to clone; clones
/// share them.
#[derive(Clone)]
pub(crate) struct Tracking {
    /// One connection per master; a single server's is the only one.
    nodes: Arc<[MultiplexedConnection]>,
    /// On a cluster, the slot map the connections were made from, and for each of its ranges
    /// the index of its master's connection in `nodes`. `None` for one server.
    slots: Option<Arc<(SlotRanges, Vec<usize>)>>,
    response_timeout: Duration,
    label: Arc<str>,
}

/// Opens the tracking connection to the endpoint's current primary (on a cluster, one to each
/// master) and turns tracking on, within `limit`; the receiver hears what they are told.
pub(crate) async fn open(
    endpoint: &Endpoint,
    limit: Duration,
) -> Result<(Tracking, UnboundedReceiver<Heard>), LockError> {
    let (heard_tx, heard) = tokio::sync::mpsc::unbounded_channel();
    let label = endpoint.label();
    let (nodes, slots) = match endpoint.cluster() {
        None => {
            let conn = open_node(&endpoint.client(), label, limit, heard_tx).await?;
            (vec![conn], None)
        }
        Some(cluster) => {
            let ranges = cluster.slot_ranges(label).await?;
            let mut masters: Vec<(&str, u16)> = Vec::new();
            let mut index = Vec::with_capacity(ranges.len());
            for (_, _, host, port) in &ranges {
                let at = match masters.iter().position(|m| *m == (host.as_str(), *port)) {
                    Some(at) => at,
                    None => {
                        masters.push((host, *port));
                        masters.len() - 1
                    }
                };
                index.push(at);
            }
            let opening = masters.iter().map(|(host, port)| {
                let heard_tx = heard_tx.clone();
                async move {
                    let client = cluster.master_client(host, *port)?;
                    open_node(&client, label, limit, heard_tx).await
                }
            });
            let nodes = try_join_all(opening).await?;
            (nodes, Some(Arc::new((ranges, index))))
        }
    };
    let tracking = Tracking {
        nodes: nodes.into(),
        slots,
        response_timeout: endpoint.response_timeout(),
        label: label.into(),
    };
    Ok((tracking, heard))
}

/// One tracking connection, to the server of `client`, its pushes sent to `heard_tx`.
async fn open_node(
    client: &Client,
    label: &str,
    limit: Duration,
    heard_tx: UnboundedSender<Heard>,
) -> Result<MultiplexedConnection, LockError> {
    let client = resp3(client, label)?;
    let (tx, mut pushes) = tokio::sync::mpsc::unbounded_channel::<redis::PushInfo>();
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(limit))
        .set_response_timeout(None)
        .set_push_sender(tx);
    let made = client.get_multiplexed_async_connection_with_config(&config);
    let mut conn = match tokio::time::timeout(limit, made).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(source)) => return Err(connect_error(label, source)),
        Err(_) => {
            return Err(LockError::Timeout {
                op: "connect",
                after: limit,
            });
        }
    };
    let mut on = Cmd::new();
    on.arg("CLIENT").arg("TRACKING").arg("ON").arg("NOLOOP");
    let mut name = Cmd::new();
    name.arg("CLIENT").arg("SETNAME").arg("lockman-tracking");
    for cmd in [&name, &on] {
        let reply = tokio::time::timeout(limit, cmd.query_async::<Value>(&mut conn)).await;
        match reply {
            Ok(Ok(_)) => {}
            Ok(Err(source)) => return Err(LockError::redis("tracking", "", source)),
            Err(_) => {
                return Err(LockError::Timeout {
                    op: "tracking",
                    after: limit,
                });
            }
        }
    }
    // Pushes become `Heard` on a task of their own: it ends with the connection. The
    // server sends one push per key (a renewal of 100 holds: 100 pushes, read together): the
    // invalidations waiting are joined into one `Heard`, one message to the watch, not one each.
    tokio::spawn(async move {
        while let Some(push) = pushes.recv().await {
            let mut keys = Vec::new();
            let mut others = Vec::new();
            let mut next = Some(push);
            let mut taken = 0;
            while let Some(push) = next.take() {
                match heard_of(push.kind, push.data) {
                    Some(Heard::Invalidated(more)) => keys.extend(more),
                    Some(other) => others.push(other),
                    None => {}
                }
                taken += 1;
                if taken < PUSHES_JOINED {
                    next = pushes.try_recv().ok();
                }
            }
            let keys = (!keys.is_empty()).then_some(Heard::Invalidated(keys));
            for heard in keys.into_iter().chain(others) {
                let closed = heard == Heard::Closed;
                if heard_tx.send(heard).is_err() || closed {
                    return;
                }
            }
        }
    });
    Ok(conn)
}

/// The same server and credentials, speaking RESP3 (pushes).
fn resp3(client: &Client, label: &str) -> Result<Client, LockError> {
    let info = client.get_connection_info().clone();
    let redis = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    Client::open(info.set_redis_settings(redis)).map_err(|source| connect_error(label, source))
}

/// A push as heard: invalidations and the connection's end; anything else is dropped.
fn heard_of(kind: PushKind, data: Vec<Value>) -> Option<Heard> {
    match kind {
        PushKind::Disconnection => Some(Heard::Closed),
        PushKind::Invalidate => match data.into_iter().next() {
            Some(Value::Array(keys)) => Some(Heard::Invalidated(
                keys.into_iter()
                    .filter_map(|key| match key {
                        Value::BulkString(bytes) => Some(bytes),
                        Value::SimpleString(text) => Some(text.into_bytes()),
                        _ => None,
                    })
                    .collect(),
            )),
            // A null key list: every key (FLUSHALL, FLUSHDB).
            _ => Some(Heard::Flushed),
        },
        _ => None,
    }
}

impl Tracking {
    /// Runs one script call on the tracking connection of the master serving `slot` (the slot
    /// of the call's keys; ignored on one server), which registers the keys it reads, bounded
    /// by the response timeout; a server that does not know the script is given it first. A
    /// script that writes a key must read it after, or the key is no longer tracked.
    pub(crate) async fn eval(
        &self,
        op: &'static str,
        slot: u16,
        call: &ScriptCall<'_>,
    ) -> Result<Value, LockError> {
        let mut conn = self.node(slot)?;
        let reply = self
            .bounded(op, call.cmd().query_async::<Value>(&mut conn))
            .await?;
        let reply = match reply {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                let script: &Script = call.script();
                self.bounded(op, script.load_async(&mut conn))
                    .await?
                    .map_err(|e| LockError::redis(op, "", e))?;
                self.bounded(op, call.cmd().query_async::<Value>(&mut conn))
                    .await?
            }
            reply => reply,
        };
        reply.map_err(|e| LockError::redis(op, "", e))
    }

    /// The connection to the master of `slot`, as the slot map said at their opening.
    fn node(&self, slot: u16) -> Result<MultiplexedConnection, LockError> {
        let at = match &self.slots {
            None => Some(0),
            Some(map) => {
                let (ranges, index) = &**map;
                ranges
                    .iter()
                    .position(|(first, last, ..)| (*first..=*last).contains(&slot))
                    .and_then(|range| index.get(range).copied())
            }
        };
        // A slot no master served then: the topology is to be read again.
        at.and_then(|at| self.nodes.get(at).cloned())
            .ok_or_else(|| topology_error(&self.label))
    }

    /// A PING on each connection, bounded by the response timeout: a connection that a NAT or
    /// firewall forgot stays open and silent, and would drop every invalidation unnoticed. On
    /// a cluster, the slot map is read again too (on the first master's connection): one that
    /// differs from the one the connections were made from is an error (a resharding or a
    /// failover moved slots, maybe without a write to a held key).
    pub(crate) async fn ping(&self) -> Result<(), LockError> {
        let pings = self.nodes.iter().map(|conn| {
            let mut conn = conn.clone();
            async move {
                let mut ping = Cmd::new();
                ping.arg("PING");
                self.bounded("ping", ping.query_async::<Value>(&mut conn))
                    .await?
                    .map(drop)
                    .map_err(|e| LockError::redis("ping", "", e))
            }
        });
        join_all(pings)
            .await
            .into_iter()
            .collect::<Result<(), _>>()?;
        let (Some(map), Some(conn)) = (&self.slots, self.nodes.first()) else {
            return Ok(());
        };
        let mut conn = conn.clone();
        let mut slots = Cmd::new();
        slots.arg("CLUSTER").arg("SLOTS");
        let reply = self
            .bounded("cluster slots", slots.query_async::<Value>(&mut conn))
            .await?
            .map_err(|e| LockError::redis("cluster slots", "", e))?;
        match slot_ranges(reply) {
            Some(now) if now == map.0 => Ok(()),
            _ => Err(topology_error(&self.label)),
        }
    }

    async fn bounded<T>(
        &self,
        op: &'static str,
        work: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<redis::RedisResult<T>, LockError> {
        let limit = self.response_timeout;
        tokio::time::timeout(limit, work)
            .await
            .map_err(|_| LockError::Timeout { op, after: limit })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushes_heard() {
        let keys = vec![Value::Array(vec![Value::BulkString(b"a".to_vec())])];
        assert_eq!(
            heard_of(PushKind::Invalidate, keys),
            Some(Heard::Invalidated(vec![b"a".to_vec()]))
        );
        assert_eq!(
            heard_of(PushKind::Invalidate, vec![Value::Nil]),
            Some(Heard::Flushed)
        );
        assert_eq!(
            heard_of(PushKind::Disconnection, vec![]),
            Some(Heard::Closed)
        );
        assert_eq!(heard_of(PushKind::Message, vec![]), None);
    }
}
