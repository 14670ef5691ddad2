//! The PubSubActor: owns the one pub/sub connection of a manager and routes each message to
//! every [`Listener`] of its channel: each lock or synchronizer actor waiting on it. Several
//! actors of one manager can listen on one channel: the kinds that share a name's unlock
//! channel (the reentrant, fenced and non-reentrant locks and elections of one name, or a
//! semaphore and a permit semaphore) each have an actor of their own. The channel is
//! unsubscribed when its last listener leaves.
//!
//! It runs under an actix `Supervisor`. When the connection drops, the message stream ends, the
//! actor stops and is restarted; it reconnects with backoff, subscribes every routed channel again
//! and tells each routed actor to retry, since messages sent in the gap are gone.

use std::collections::HashMap;
use std::time::Duration;

use actix::prelude::*;

use super::messages::*;
use crate::connections::endpoint::Endpoint;
use crate::connections::subscription::{self, Heard, Sink};
use crate::error::LockError;

const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// The actor that owns the pub/sub connection.
pub struct PubSubActor {
    /// Where the primary is; asked again at every connection (it moves with a failover).
    endpoint: Endpoint,
    connect_timeout: Duration,
    /// Channel → the actors (lock or synchronizer) listening on it, each from its `Subscribe`
    /// to its `Unsubscribe` (or its death); never an empty list. Kept across restarts: it is
    /// what gets resubscribed.
    routes: HashMap<String, Vec<Route>>,
    /// The subscribing half of the connection: `Some` while connected.
    sink: Option<Sink>,
    /// The delay before the next connection attempt.
    backoff: Duration,
    /// Whether a connection was ever made (a later one is a reconnection).
    connected_before: bool,
    /// Set by `Halt`: no more connections.
    halted: bool,
}

struct Route {
    id: u64,
    actor: Listener,
}

impl PubSubActor {
    pub(crate) fn new(endpoint: Endpoint, connect_timeout: Duration) -> Self {
        Self {
            endpoint,
            connect_timeout,
            routes: HashMap::new(),
            sink: None,
            backoff: BACKOFF_MIN,
            connected_before: false,
            halted: false,
        }
    }

    fn connect(&mut self, ctx: &mut Context<Self>) {
        if self.halted {
            return;
        }
        let (endpoint, limit) = (self.endpoint.clone(), self.connect_timeout);
        let channels: Vec<String> = self.routes.keys().cloned().collect();
        // Under `ctx.wait`: no Subscribe is handled while connecting, so `channels` is complete.
        let work = async move { subscription::open(&endpoint, &channels, limit).await };
        ctx.wait(work.into_actor(self).map(|res, act, ctx| match res {
            Ok(_) if act.halted => {}
            Ok((sink, stream)) => {
                act.sink = Some(sink);
                act.backoff = BACKOFF_MIN;
                ctx.add_stream(stream);
                if std::mem::replace(&mut act.connected_before, true) {
                    tracing::info!(
                        channels = act.routes.len(),
                        "pub/sub reconnected, waiters retry"
                    );
                    crate::metrics::reconnected("pubsub");
                    act.all_retry();
                }
            }
            Err(error) => {
                tracing::warn!(%error, retry_in = ?act.backoff, "pub/sub connection failed");
                act.endpoint.suspect_failover();
                ctx.run_later(act.backoff, |act, ctx| act.connect(ctx));
                act.backoff = (act.backoff * 2).min(BACKOFF_MAX);
            }
        }));
    }
}

impl PubSubActor {
    /// Drops the connection and stops: the supervisor restarts this actor, which connects to
    /// the endpoint's current primary (or cluster), subscribes every routed channel again and
    /// makes every waiter retry, since messages of the gap are gone.
    fn restart(&mut self, why: &str, ctx: &mut Context<Self>) {
        if self.halted {
            return;
        }
        tracing::info!(why, "pub/sub reconnects");
        self.sink = None;
        self.connected_before = true;
        ctx.stop();
    }

    /// Messages may have been lost: every routed actor's waiters try again.
    fn all_retry(&self) {
        for route in self.routes.values().flatten() {
            if let Some(actor) = route.actor.resubscribed.upgrade() {
                actor.do_send(Resubscribed);
            }
        }
    }

    /// The server ended the sharded subscription of `channel` (its slot moved, as in Redisson's
    /// handling of SUNSUBSCRIBE): subscribe again, which reaches the slot's new owner, and let
    /// its waiters retry, since a message may have been lost meanwhile. A channel no longer
    /// routed was our own unsubscribe.
    fn subscribe_again(&mut self, channel: String, ctx: &mut Context<Self>) {
        let (Some(routes), Some(mut sink)) = (self.routes.get(&channel), self.sink.clone()) else {
            return;
        };
        tracing::info!(%channel, "sharded subscription ended by the server; subscribing again");
        let actors: Vec<_> = routes
            .iter()
            .map(|r| r.actor.resubscribed.clone())
            .collect();
        let work = async move { sink.subscribe(std::slice::from_ref(&channel)).await };
        ctx.wait(work.into_actor(self).map(move |res, _, _| {
            if let Err(error) = res {
                tracing::warn!(%error, "subscribing again failed; waiters rely on the lock's TTL");
            }
            for actor in actors.iter().filter_map(actix::WeakRecipient::upgrade) {
                actor.do_send(Resubscribed);
            }
        }));
    }
}

impl Actor for PubSubActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if self.connected_before {
            // A restart after a lost connection: give the server a moment.
            ctx.run_later(self.backoff, |act, ctx| act.connect(ctx));
        } else {
            self.connect(ctx);
        }
    }
}

impl Supervised for PubSubActor {
    fn restarting(&mut self, _: &mut Context<Self>) {
        self.sink = None;
        // Drop routes whose actor is gone.
        self.routes.retain(|_, routes| {
            routes.retain(|r| r.actor.alive());
            !routes.is_empty()
        });
    }
}

impl StreamHandler<Heard> for PubSubActor {
    fn handle(&mut self, heard: Heard, ctx: &mut Context<Self>) {
        let (channel, payload) = match heard {
            Heard::Message { channel, payload } => (channel, payload),
            Heard::Gap => {
                // redis-rs would subscribe again on the same node, but its slots may have
                // failed over to a replica: connect anew, subscribing each channel where its
                // slot is now (with backoff until the cluster agrees).
                self.restart("a cluster node's connection dropped", ctx);
                return;
            }
            Heard::Ended { channel } => {
                self.subscribe_again(channel, ctx);
                return;
            }
        };
        let Some(routes) = self.routes.get_mut(&channel) else {
            return;
        };
        let count = std::str::from_utf8(&payload)
            .ok()
            .and_then(|p| p.parse().ok());
        // Every listener hears it; one whose actor is gone is forgotten.
        routes.retain(|r| match r.actor.unlocked.upgrade() {
            Some(actor) => {
                actor.do_send(Unlocked {
                    count,
                    channel: channel.clone(),
                });
                true
            }
            None => false,
        });
        if routes.is_empty() {
            self.routes.remove(&channel);
        }
    }

    fn finished(&mut self, ctx: &mut Context<Self>) {
        self.restart("the connection was lost", ctx);
    }
}

// SUBSCRIBE and UNSUBSCRIBE run one at a time (`ctx.wait`), in the order the actors asked:
// an unsubscribe overtaken by the next subscribe of the same channel would leave it deaf.

impl Handler<Subscribe> for PubSubActor {
    type Result = AtomicResponse<Self, Result<(), LockError>>;

    fn handle(&mut self, msg: Subscribe, _: &mut Context<Self>) -> Self::Result {
        if self.halted {
            return AtomicResponse::new(Box::pin(actix::fut::ready(Err(LockError::Shutdown))));
        }
        let routes = self.routes.entry(msg.channel.clone()).or_default();
        routes.retain(|r| r.id != msg.id);
        routes.push(Route {
            id: msg.id,
            actor: msg.actor,
        });
        let Some(mut sink) = self.sink.clone() else {
            // Not connected: the channel is subscribed with the others at the next connection.
            return AtomicResponse::new(Box::pin(actix::fut::ready(Ok(()))));
        };
        let work = async move {
            sink.subscribe(std::slice::from_ref(&msg.channel))
                .await
                .map_err(|source| LockError::Redis {
                    op: "subscribe",
                    source,
                })
        };
        AtomicResponse::new(Box::pin(work.into_actor(self)))
    }
}

impl Handler<Unsubscribe> for PubSubActor {
    type Result = ();

    fn handle(&mut self, msg: Unsubscribe, ctx: &mut Context<Self>) {
        let Some(routes) = self.routes.get_mut(&msg.channel) else {
            return;
        };
        routes.retain(|r| r.id != msg.id);
        if !routes.is_empty() {
            // Others still listen: the channel stays subscribed.
            return;
        }
        self.routes.remove(&msg.channel);
        if let Some(mut sink) = self.sink.clone() {
            let work = async move { sink.unsubscribe(&msg.channel).await };
            ctx.wait(work.into_actor(self).map(|res, _, _| {
                if let Err(error) = res {
                    tracing::debug!(%error, "unsubscribe failed");
                }
            }));
        }
    }
}

impl Handler<Reconnect> for PubSubActor {
    type Result = ();

    fn handle(&mut self, _: Reconnect, ctx: &mut Context<Self>) {
        self.restart("the primary moved", ctx);
    }
}

impl Handler<Halt> for PubSubActor {
    type Result = ();

    fn handle(&mut self, _: Halt, ctx: &mut Context<Self>) {
        self.halted = true;
        self.routes.clear();
        self.sink = None;
        // Drops the stream (and so the connection); the supervisor restarts an inert actor.
        ctx.stop();
    }
}
