//! The pub/sub connection, whatever the deployment: one server's (redis-rs's RESP2 pub/sub,
//! split into a sink that subscribes and a stream of messages), or a cluster's (a RESP3 cluster
//! connection whose pushes arrive on a channel; `SSUBSCRIBE` or `SUBSCRIBE` as the endpoint
//! decided). The PubSubActor owns it; this module only speaks to redis-rs. No actix here.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use redis::aio::PubSubSink;
use redis::cluster_async::ClusterConnection;
use redis::{PushKind, Value};

use crate::connections::endpoint::Endpoint;

/// What the connection hears.
pub(crate) enum Heard {
    /// A message on a channel, with its payload read as a decimal number when it is one (a
    /// lock's `0` or `1`, a semaphore's permits): what the listeners are told, read once here
    /// rather than copied.
    Message {
        channel: Channel,
        count: Option<i64>,
    },
    /// A cluster node's connection dropped: messages sent meanwhile are gone, and the node's
    /// slots may be moving to a replica.
    Gap,
    /// The server ended a sharded subscription: its slot moved to another shard (or it is the
    /// confirmation of our own SUNSUBSCRIBE: the PubSubActor tells them apart by its routes).
    Ended { channel: String },
}

/// The channel a message came on, read where it arrived rather than copied out of it (one
/// allocation and copy per message saved).
pub(crate) enum Channel {
    /// A single server's message, as redis-rs parsed it.
    Msg(redis::Msg),
    /// A cluster push's channel, moved out of it.
    Owned(String),
}

impl Channel {
    /// The channel's name (`?` when it is not UTF-8, as redis-rs reads it: no route has it).
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Channel::Msg(msg) => msg.get_channel_name(),
            Channel::Owned(name) => name,
        }
    }
}

/// The subscribing half.
#[derive(Clone)]
pub(crate) enum Sink {
    Server(PubSubSink),
    Cluster {
        conn: ClusterConnection,
        sharded: bool,
    },
}

impl Sink {
    pub(crate) async fn subscribe(&mut self, channels: &[String]) -> redis::RedisResult<()> {
        match self {
            Sink::Server(sink) => sink.subscribe(channels).await,
            Sink::Cluster {
                conn,
                sharded: true,
            } => {
                // One call per channel: each is routed to the shard of its slot.
                for channel in channels {
                    conn.ssubscribe(channel).await?;
                }
                Ok(())
            }
            Sink::Cluster { conn, .. } => conn.subscribe(channels).await,
        }
    }

    /// [`subscribe`](Self::subscribe), failing with a timeout error when no confirmation comes
    /// within `answer` (for each call made: one per channel with sharded pub/sub; the single
    /// call of many channels is given `answer` for every thousand of them).
    pub(crate) async fn subscribe_within(
        &mut self,
        channels: &[String],
        answer: Duration,
    ) -> redis::RedisResult<()> {
        match self {
            Sink::Cluster {
                conn,
                sharded: true,
            } => {
                for channel in channels {
                    within(answer, conn.ssubscribe(channel)).await?;
                }
                Ok(())
            }
            _ => {
                let thousands = u32::try_from(channels.len() / 1000).unwrap_or(u32::MAX);
                let limit = answer.saturating_mul(thousands.saturating_add(1));
                within(limit, self.subscribe(channels)).await
            }
        }
    }

    /// [`unsubscribe`](Self::unsubscribe), failing with a timeout error when no confirmation
    /// comes within `answer`.
    pub(crate) async fn unsubscribe_within(
        &mut self,
        channel: &str,
        answer: Duration,
    ) -> redis::RedisResult<()> {
        within(answer, self.unsubscribe(channel)).await
    }

    /// Whether the connection still answers: a PING, answered within `answer` (by every
    /// primary of a cluster, since subscriptions are spread over them). A RESP2 subscribed
    /// connection answers it with a pong message, which redis-rs's sink takes as the reply.
    pub(crate) async fn ping(&mut self, answer: Duration) -> redis::RedisResult<()> {
        match self {
            Sink::Server(sink) => within(answer, sink.ping::<Value>()).await.map(drop),
            Sink::Cluster { conn, .. } => {
                use redis::cluster_routing::{
                    MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo,
                };
                let all = RoutingInfo::MultiNode((
                    MultipleNodeRoutingInfo::AllMasters,
                    Some(ResponsePolicy::AllSucceeded),
                ));
                within(answer, conn.route_command(redis::cmd("PING"), all))
                    .await
                    .map(drop)
            }
        }
    }

    pub(crate) async fn unsubscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match self {
            Sink::Server(sink) => sink.unsubscribe(channel).await,
            Sink::Cluster {
                conn,
                sharded: true,
            } => conn.sunsubscribe(channel).await,
            Sink::Cluster { conn, .. } => conn.unsubscribe(channel).await,
        }
    }
}

/// Connects the pub/sub side to the endpoint's primary (or cluster) and subscribes `channels`.
pub(crate) async fn open(
    endpoint: &Endpoint,
    channels: &[String],
    limit: Duration,
) -> Result<(Sink, BoxStream<'static, Heard>), String> {
    let (mut sink, stream) = match endpoint.cluster() {
        None => {
            let pubsub = tokio::time::timeout(limit, endpoint.client().get_async_pubsub())
                .await
                .map_err(|_| "connect timed out".to_owned())?
                .map_err(|e| e.to_string())?;
            let (sink, stream) = pubsub.split();
            let stream = stream.map(|msg| Heard::Message {
                count: count(msg.get_payload_bytes()),
                channel: Channel::Msg(msg),
            });
            (Sink::Server(sink), stream.boxed())
        }
        Some(cluster) => {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let conn = cluster
                .connect(Some(tx), endpoint.label())
                .await
                .map_err(|e| e.to_string())?;
            let pushes = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|push| (push, rx))
            });
            let stream = pushes.filter_map(|push| async move { heard(push.kind, push.data) });
            let sharded = cluster.sharded();
            (Sink::Cluster { conn, sharded }, stream.boxed())
        }
    };
    if !channels.is_empty() {
        sink.subscribe(channels).await.map_err(|e| e.to_string())?;
    }
    Ok((sink, stream))
}

/// A cluster push, as heard: messages and disconnections; confirmations are dropped.
fn heard(kind: PushKind, data: Vec<Value>) -> Option<Heard> {
    match kind {
        PushKind::Message | PushKind::SMessage => match <[Value; 2]>::try_from(data) {
            Ok([Value::BulkString(channel), Value::BulkString(payload)]) => Some(Heard::Message {
                channel: Channel::Owned(
                    String::from_utf8(channel)
                        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
                ),
                count: count(&payload),
            }),
            _ => None,
        },
        PushKind::Disconnection => Some(Heard::Gap),
        PushKind::SUnsubscribe => match data.first() {
            Some(Value::BulkString(channel)) => Some(Heard::Ended {
                channel: String::from_utf8_lossy(channel).into_owned(),
            }),
            _ => None,
        },
        _ => None,
    }
}

/// A message's payload as a decimal number, when it is one.
fn count(payload: &[u8]) -> Option<i64> {
    std::str::from_utf8(payload).ok()?.parse().ok()
}

/// `work`, or a timeout error (as redis-rs reports its own: `is_timeout()`) after `limit`.
async fn within<T>(
    limit: Duration,
    work: impl Future<Output = redis::RedisResult<T>>,
) -> redis::RedisResult<T> {
    match tokio::time::timeout(limit, work).await {
        Ok(done) => done,
        Err(_) => Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()),
    }
}
