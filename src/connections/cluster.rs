//! Redis Cluster: the seed nodes, how clients for them are built (with the config's TLS, RESP3
//! and a push sender for pub/sub), whether unlock messages use sharded pub/sub, decided
//! once at start as Redisson decides it, and which master serves which slots (`CLUSTER SLOTS`,
//! for the tracking connections, one per master). No actix here.

use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{Client, ConnectionAddr, ConnectionInfo, PushInfo, Value};

use crate::config::{Config, ShardedSubscription};
use crate::connections::failure::connect_error;
use crate::error::LockError;

/// A cluster, as lockman reaches it.
pub(crate) struct ClusterTarget {
    nodes: Vec<ConnectionInfo>,
    #[cfg(feature = "tls")]
    certificates: Option<redis::TlsCertificates>,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// Whether unlock messages go by SSUBSCRIBE/SPUBLISH (else SUBSCRIBE/PUBLISH).
    sharded: bool,
}

impl ClusterTarget {
    /// Checks the seed URLs, connects once (so that an unreachable cluster fails at start) and
    /// decides the pub/sub mode: `Auto` is sharded when `PUBSUB SHARDNUMSUB` succeeds.
    pub(crate) async fn open(
        nodes: &[String],
        mode: ShardedSubscription,
        config: &Config,
        label: &str,
    ) -> Result<Self, LockError> {
        if nodes.is_empty() {
            return Err(LockError::invalid(
                "cluster nodes",
                "at least one seed node is needed",
            ));
        }
        let nodes = nodes
            .iter()
            .map(|url| crate::connections::url::connection_info(url, config))
            .collect::<Result<Vec<_>, _>>()?;
        let mut target = Self {
            nodes,
            #[cfg(feature = "tls")]
            certificates: crate::connections::url::certificates(config),
            connect_timeout: config.get_connect_timeout(),
            response_timeout: config.get_response_timeout(),
            sharded: false,
        };
        let mut conn = target.connect(None, label).await?;
        target.sharded = match mode {
            ShardedSubscription::On => true,
            ShardedSubscription::Off => false,
            ShardedSubscription::Auto => {
                let mut probe = redis::cmd("PUBSUB");
                probe.arg("SHARDNUMSUB");
                let reply = probe.query_async::<redis::Value>(&mut conn);
                matches!(
                    tokio::time::timeout(target.response_timeout, reply).await,
                    Ok(Ok(_))
                )
            }
        };
        Ok(target)
    }

    /// Whether unlock messages use sharded pub/sub.
    pub(crate) fn sharded(&self) -> bool {
        self.sharded
    }

    /// A connection to the cluster; with `push`, a RESP3 one whose pub/sub messages go there.
    pub(crate) async fn connect(
        &self,
        push: Option<tokio::sync::mpsc::UnboundedSender<PushInfo>>,
        label: &str,
    ) -> Result<ClusterConnection, LockError> {
        let client = self.client(push)?;
        let limit = self.connect_timeout;
        match tokio::time::timeout(limit, client.get_async_connection()).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(source)) => Err(connect_error(label, source)),
            Err(_) => Err(LockError::Timeout {
                op: "connect to the cluster",
                after: limit,
            }),
        }
    }

    /// Which master serves which slots, as a node of the cluster says now (`CLUSTER SLOTS`,
    /// asked on a new cluster connection, which finds a node that answers).
    pub(crate) async fn slot_ranges(&self, label: &str) -> Result<SlotRanges, LockError> {
        let mut conn = self.connect(None, label).await?;
        let mut slots = redis::cmd("CLUSTER");
        slots.arg("SLOTS");
        let limit = self.response_timeout;
        match tokio::time::timeout(limit, slots.query_async::<Value>(&mut conn)).await {
            Ok(Ok(reply)) => slot_ranges(reply).ok_or_else(|| topology_error(label)),
            Ok(Err(source)) => Err(LockError::redis("cluster slots", "", source)),
            Err(_) => Err(LockError::Timeout {
                op: "cluster slots",
                after: limit,
            }),
        }
    }

    /// A client of one master (named by `CLUSTER SLOTS`), with the seeds' credentials and TLS.
    pub(crate) fn master_client(&self, host: &str, port: u16) -> Result<Client, LockError> {
        let seed = self.nodes.first().ok_or_else(|| {
            LockError::invalid("cluster nodes", "at least one seed node is needed")
        })?;
        // A node that does not know its own address says "" or "?": the seed's host then.
        let host = match (host, seed.addr()) {
            (
                "" | "?",
                ConnectionAddr::Tcp(seed, _) | ConnectionAddr::TcpTls { host: seed, .. },
            ) => seed.clone(),
            (host, _) => host.to_owned(),
        };
        let addr = match seed.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: None,
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        let info = seed.clone().set_addr(addr);
        let bad = |e: redis::RedisError| LockError::invalid("cluster nodes", e.to_string());
        #[cfg(feature = "tls")]
        if let (ConnectionAddr::TcpTls { .. }, Some(certs)) = (info.addr(), &self.certificates) {
            return Client::build_with_tls(info, certs.clone()).map_err(bad);
        }
        Client::open(info).map_err(bad)
    }

    fn client(
        &self,
        push: Option<tokio::sync::mpsc::UnboundedSender<PushInfo>>,
    ) -> Result<ClusterClient, LockError> {
        let mut builder = ClusterClientBuilder::new(self.nodes.clone())
            .connection_timeout(self.connect_timeout)
            .response_timeout(self.response_timeout)
            .tcp_settings(crate::connections::url::keepalive(Default::default()))
            .retries(3);
        if let Some(push) = push {
            builder = builder
                .use_protocol(redis::ProtocolVersion::RESP3)
                .push_sender(push);
        }
        #[cfg(feature = "tls")]
        if let Some(certs) = &self.certificates {
            builder = builder.certs(certs.clone());
        }
        builder
            .build()
            .map_err(|e| LockError::invalid("cluster nodes", e.to_string()))
    }
}

/// Slot ranges, each with the address (host, port) of the master serving it: first slot, last
/// slot, host, port.
pub(crate) type SlotRanges = Vec<(u16, u16, String, u16)>;

/// A `CLUSTER SLOTS` reply read: each range, its master's address (the first node listed).
/// `None` for a reply of another shape.
pub(crate) fn slot_ranges(reply: Value) -> Option<SlotRanges> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    let mut read = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(items) = range else {
            return None;
        };
        let [
            Value::Int(first),
            Value::Int(last),
            Value::Array(master),
            ..,
        ] = items.as_slice()
        else {
            return None;
        };
        let [host, Value::Int(port), ..] = master.as_slice() else {
            return None;
        };
        let host = match host {
            Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok()?,
            Value::SimpleString(text) => text.clone(),
            Value::Nil => String::new(),
            _ => return None,
        };
        let slot = |n: i64| u16::try_from(n).ok().filter(|s| *s < 16384);
        read.push((
            slot(*first)?,
            slot(*last)?,
            host,
            u16::try_from(*port).ok()?,
        ));
    }
    read.sort_unstable();
    Some(read)
}

/// The cluster's topology could not be read: a connection problem (retried), not a refusal.
pub(crate) fn topology_error(label: &str) -> LockError {
    LockError::Connect {
        url: label.to_owned(),
        source: redis::RedisError::from(std::io::Error::other(
            "the cluster's slots could not be read (CLUSTER SLOTS)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn cluster_slots_read() {
        let range = |a, b, port| {
            Value::Array(vec![
                Value::Int(a),
                Value::Int(b),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(port), bulk("id")]),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(port + 1), bulk("r")]),
            ])
        };
        let reply = Value::Array(vec![range(5461, 16383, 7001), range(0, 5460, 7000)]);
        assert_eq!(
            slot_ranges(reply),
            Some(vec![
                (0, 5460, "127.0.0.1".to_owned(), 7000),
                (5461, 16383, "127.0.0.1".to_owned(), 7001),
            ])
        );
        let beyond = Value::Array(vec![range(0, 16384, 7000)]);
        assert_eq!(slot_ranges(beyond), None, "no slot 16384");
        assert_eq!(slot_ranges(Value::Int(1)), None);
        assert_eq!(slot_ranges(Value::Array(vec![Value::Int(1)])), None);
    }
}
