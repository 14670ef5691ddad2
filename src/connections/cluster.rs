//! Redis Cluster: the seed nodes, how clients for them are built (with the config's TLS, RESP3
//! and a push sender for pub/sub), and whether unlock messages use sharded pub/sub, decided
//! once at start as Redisson decides it. No actix here.

use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionInfo, PushInfo};

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
