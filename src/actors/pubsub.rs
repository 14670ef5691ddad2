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
//!
//! A connection can also go silent without ending: a NAT, firewall or load balancer that forgot
//! the flow drops its packets without a reset, and a subscribed connection that hears no message
//! cannot tell. So the actor sends a PING every [`PING_EVERY`], and restarts the same way when
//! no answer comes within the response timeout (at least [`ANSWER_MIN`]), or when a SUBSCRIBE or
//! UNSUBSCRIBE is not confirmed within it.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use rustc_hash::FxHashMap;

use super::messages::*;
use super::name::backoff;
use crate::connections::endpoint::Endpoint;
use crate::connections::subscription::{self, Heard, Sink};
use crate::error::LockError;

/// How often the connection is checked with a PING: a silent connection is noticed within this
/// plus the answer's bound. One PING per manager per interval; it also keeps an idle flow alive
/// in a middlebox that forgets flows idle for long.
const PING_EVERY: Duration = Duration::from_secs(3);

/// The least time a PING, SUBSCRIBE or UNSUBSCRIBE is given to be answered, however short the
/// response timeout: a busy server answers late, a needless reconnection makes every waiter try
/// again, and a bound that a healthy server cannot meet would make them reconnect for good.
const ANSWER_MIN: Duration = Duration::from_secs(1);

/// The actor that owns the pub/sub connection.
pub(crate) struct PubSubActor {
    /// Where the primary is; asked again at every connection (it moves with a failover).
    endpoint: Endpoint,
    connect_timeout: Duration,
    /// Channel → the actors (lock or synchronizer) listening on it, each from its `Subscribe`
    /// to its `Unsubscribe` (or its death); never an empty list. Kept across restarts: it is
    /// what gets resubscribed. Looked up once per message heard, on the wake's path: hashed
    /// with FxHash, as the registry's actors are by the same names.
    routes: FxHashMap<Arc<str>, Vec<Route>>,
    /// The subscribing half of the connection: `Some` while connected.
    sink: Option<Sink>,
    /// Connection attempts failed in a row: the next waits [`backoff`] of it, the curve the
    /// per-name actors retry on.
    failures: u32,
    /// Whether a connection was ever made (a later one is a reconnection).
    connected_before: bool,
    /// Set by `Halt`: no more connections.
    halted: bool,
    /// Counts the connections made: a PING's answer, or its absence, is about the connection it
    /// was sent on, not a later one.
    connection: u64,
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
            routes: FxHashMap::default(),
            sink: None,
            failures: 0,
            connected_before: false,
            halted: false,
            connection: 0,
        }
    }

    /// How long a PING, SUBSCRIBE or UNSUBSCRIBE may take to be answered: the response
    /// timeout, at least [`ANSWER_MIN`].
    fn answer(&self) -> Duration {
        self.endpoint.response_timeout().max(ANSWER_MIN)
    }

    fn connect(&mut self, ctx: &mut Context<Self>) {
        if self.halted {
            return;
        }
        let (endpoint, limit, answer) =
            (self.endpoint.clone(), self.connect_timeout, self.answer());
        let channels: Vec<String> = self.routes.keys().map(|c| c.to_string()).collect();
        // Under `ctx.wait`: no Subscribe is handled while connecting, so `channels` is complete.
        // Every step is bounded: a connection accepted but silent must not hold the actor.
        let work = async move {
            let (mut sink, stream) = subscription::open(&endpoint, &[], limit).await?;
            if !channels.is_empty() {
                sink.subscribe_within(&channels, answer)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok::<_, String>((sink, stream))
        };
        ctx.wait(work.into_actor(self).map(|res, act, ctx| match res {
            Ok(_) if act.halted => {}
            Ok((sink, stream)) => {
                act.sink = Some(sink);
                act.failures = 0;
                act.connection += 1;
                act.check_later(act.connection, ctx);
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
                let retry_in = backoff(act.failures);
                tracing::warn!(%error, ?retry_in, "pub/sub connection failed");
                act.endpoint.suspect_failover();
                ctx.run_later(retry_in, |act, ctx| act.connect(ctx));
                act.failures = act.failures.saturating_add(1);
            }
        }));
    }
}

impl PubSubActor {
    /// Sends the next PING on connection `connection` after [`PING_EVERY`].
    fn check_later(&self, connection: u64, ctx: &mut Context<Self>) {
        ctx.run_later(PING_EVERY, move |act, ctx| act.check(connection, ctx));
    }

    /// Pings connection `connection` (if it is still the current one): answered (even with an
    /// error reply), the next PING follows; unanswered in time, or failed on the client's side
    /// (the connection closed), the connection is replaced (`restart`).
    fn check(&mut self, connection: u64, ctx: &mut Context<Self>) {
        let Some(mut sink) = self.sink.clone() else {
            return;
        };
        if connection != self.connection || self.halted {
            return;
        }
        let answer = self.answer();
        let work = async move { sink.ping(answer).await };
        // Spawned, not waited on: messages are handled meanwhile.
        ctx.spawn(work.into_actor(self).map(move |res, act, ctx| {
            if connection != act.connection || act.sink.is_none() {
                return;
            }
            match res {
                // Any reply is an answer, a refusal too (an ACL user without PING): the flow
                // is alive.
                Ok(()) => act.check_later(connection, ctx),
                Err(error) if error.code().is_some() => act.check_later(connection, ctx),
                Err(error) if error.is_timeout() => {
                    tracing::warn!(
                        ?answer,
                        "the pub/sub connection did not answer a PING; reconnecting"
                    );
                    act.restart("the connection went silent", ctx);
                }
                Err(error) => {
                    tracing::warn!(%error, "a PING on the pub/sub connection failed; reconnecting");
                    act.restart("PING failed", ctx);
                }
            }
        }));
    }

    /// After a SUBSCRIBE or UNSUBSCRIBE failed: one not confirmed in time means the connection
    /// went silent, so it is replaced (its waiters retry once it is back).
    fn failed(&mut self, error: &redis::RedisError, ctx: &mut Context<Self>) {
        if error.is_timeout() {
            tracing::warn!(%error, "the pub/sub connection did not confirm in time; reconnecting");
            self.restart("a subscription change was not confirmed", ctx);
        }
    }

    /// Drops the connection and stops: the supervisor restarts this actor, which connects to
    /// the endpoint's current primary (or cluster), subscribes every routed channel again and
    /// makes every waiter retry, since messages of the gap are gone.
    fn restart(&mut self, why: &'static str, ctx: &mut Context<Self>) {
        if self.halted {
            return;
        }
        tracing::info!(why, "pub/sub reconnects");
        // Until it is back no unlock message comes, and Redis may be away: every waiter is
        // told, and tries now (a waiter whose wait ends meanwhile is told it is away).
        for route in self.routes.values().flatten() {
            if let Some(actor) = route.actor.resubscribed.upgrade() {
                actor.do_send(Resubscribed { lost: Some(why) });
            }
        }
        self.sink = None;
        self.connected_before = true;
        ctx.stop();
    }

    /// Messages may have been lost: every routed actor's waiters try again.
    fn all_retry(&self) {
        for route in self.routes.values().flatten() {
            if let Some(actor) = route.actor.resubscribed.upgrade() {
                actor.do_send(Resubscribed { lost: None });
            }
        }
    }

    /// Forgets the listeners of `channel` whose actor is gone, and the channel when none is
    /// left: unsubscribed, as the last `Unsubscribe` would have (else the server would go on
    /// sending its messages to nobody until the next reconnection).
    fn forget_gone(&mut self, channel: &str, ctx: &mut Context<Self>) {
        let Some(routes) = self.routes.get_mut(channel) else {
            return;
        };
        routes.retain(|r| r.actor.alive());
        if routes.is_empty() {
            self.routes.remove(channel);
            self.unsubscribe(channel.to_owned(), ctx);
        }
    }

    /// Unsubscribes `channel`, no longer routed (a no-op while disconnected: the next
    /// connection subscribes only the routed channels).
    fn unsubscribe(&mut self, channel: String, ctx: &mut Context<Self>) {
        if let Some(mut sink) = self.sink.clone() {
            let answer = self.answer();
            let work = async move { sink.unsubscribe_within(&channel, answer).await };
            ctx.wait(work.into_actor(self).map(|res, act, ctx| {
                if let Err(error) = res {
                    tracing::debug!(%error, "unsubscribe failed");
                    act.failed(&error, ctx);
                }
            }));
        }
    }

    /// The server ended the sharded subscription of `channel` (its slot moved, as in Redisson's
    /// handling of SUNSUBSCRIBE): subscribe again, which reaches the slot's new owner, and let
    /// its waiters retry, since a message may have been lost meanwhile. A channel no longer
    /// routed was our own unsubscribe.
    fn subscribe_again(&mut self, channel: String, ctx: &mut Context<Self>) {
        let (Some(routes), Some(mut sink)) = (self.routes.get(&*channel), self.sink.clone()) else {
            return;
        };
        tracing::info!(%channel, "sharded subscription ended by the server; subscribing again");
        let actors: Vec<_> = routes
            .iter()
            .map(|r| r.actor.resubscribed.clone())
            .collect();
        let answer = self.answer();
        let work = async move {
            sink.subscribe_within(std::slice::from_ref(&channel), answer)
                .await
        };
        ctx.wait(work.into_actor(self).map(move |res, act, ctx| {
            if let Err(error) = res {
                tracing::warn!(%error, "subscribing again failed; waiters rely on the lock's TTL");
                act.failed(&error, ctx);
            }
            for actor in actors.iter().filter_map(actix::WeakRecipient::upgrade) {
                actor.do_send(Resubscribed { lost: None });
            }
        }));
    }
}

impl Actor for PubSubActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if self.connected_before {
            // A restart after a lost connection: give the server a moment.
            ctx.run_later(backoff(self.failures), |act, ctx| act.connect(ctx));
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
        let (channel, count) = match heard {
            Heard::Message { channel, count } => (channel, count),
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
        // One lookup of the channel per message: every listener with someone to wake hears
        // it (the channel's name shared with the routes, not copied per listener); the list is
        // looked up again, to forget a listener whose actor is gone, only when there is one.
        let Some((key, routes)) = self.routes.get_key_value(channel.as_str()) else {
            return;
        };
        let mut gone = false;
        for route in routes {
            if !route.actor.alive() {
                gone = true;
            } else if route.actor.hears() {
                route.actor.unlocked.do_send(Unlocked {
                    count,
                    channel: key.clone(),
                });
            }
        }
        if gone {
            self.forget_gone(channel.as_str(), ctx);
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
        let routes = match self.routes.get_mut(msg.channel.as_str()) {
            Some(routes) => routes,
            None => (self.routes)
                .entry(Arc::from(msg.channel.as_str()))
                .or_default(),
        };
        routes.retain(|r| r.id != msg.id);
        routes.push(Route {
            id: msg.id,
            actor: msg.actor,
        });
        let Some(mut sink) = self.sink.clone() else {
            // Not connected: the channel is subscribed with the others at the next connection.
            return AtomicResponse::new(Box::pin(actix::fut::ready(Ok(()))));
        };
        let answer = self.answer();
        let work = async move {
            sink.subscribe_within(std::slice::from_ref(&msg.channel), answer)
                .await
        };
        AtomicResponse::new(Box::pin(work.into_actor(self).map(|res, act, ctx| {
            res.map_err(|source| {
                act.failed(&source, ctx);
                LockError::Redis {
                    op: "subscribe",
                    source,
                }
            })
        })))
    }
}

impl Handler<Unsubscribe> for PubSubActor {
    type Result = ();

    fn handle(&mut self, msg: Unsubscribe, ctx: &mut Context<Self>) {
        let Some(routes) = self.routes.get_mut(msg.channel.as_str()) else {
            return;
        };
        routes.retain(|r| r.id != msg.id);
        if !routes.is_empty() {
            // Others still listen: the channel stays subscribed.
            return;
        }
        self.routes.remove(msg.channel.as_str());
        self.unsubscribe(msg.channel, ctx);
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

/// `forget_gone` against a real server: no lock actor dies without its `Unsubscribe`, so these
/// listeners stand for one that did (a bug, a panic), with and without an address of it left.
#[cfg(all(test, feature = "testing"))]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    use super::*;
    use crate::config::Config;
    use crate::testing::TestServer;

    /// Stands for a lock actor: counts the messages routed to it; `Die` stops it without an
    /// `Unsubscribe`.
    struct Ear {
        heard: Arc<AtomicUsize>,
        stopped: Arc<AtomicUsize>,
    }

    impl Actor for Ear {
        type Context = Context<Self>;

        fn stopped(&mut self, _: &mut Context<Self>) {
            self.stopped.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Handler<Unlocked> for Ear {
        type Result = ();

        fn handle(&mut self, _: Unlocked, _: &mut Context<Self>) {
            self.heard.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Handler<Resubscribed> for Ear {
        type Result = ();

        fn handle(&mut self, _: Resubscribed, _: &mut Context<Self>) {}
    }

    #[derive(Message)]
    #[rtype(result = "()")]
    struct Die;

    impl Handler<Die> for Ear {
        type Result = ();

        fn handle(&mut self, _: Die, ctx: &mut Context<Self>) {
            ctx.stop();
        }
    }

    /// The routes: each channel with its number of listeners, sorted.
    #[derive(Message)]
    #[rtype(result = "Vec<(String, usize)>")]
    struct Routes;

    impl Handler<Routes> for PubSubActor {
        type Result = MessageResult<Routes>;

        fn handle(&mut self, _: Routes, _: &mut Context<Self>) -> Self::Result {
            let mut routes: Vec<_> = (self.routes.iter())
                .map(|(channel, routes)| (channel.to_string(), routes.len()))
                .collect();
            routes.sort();
            MessageResult(routes)
        }
    }

    fn numsub(raw: &mut redis::Connection, channel: &str) -> u64 {
        let (_, n): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query(raw)
            .expect("PUBSUB NUMSUB");
        n
    }

    fn publish(raw: &mut redis::Connection, channel: &str) {
        let _: u64 = redis::cmd("PUBLISH")
            .arg(channel)
            .arg(0)
            .query(raw)
            .expect("PUBLISH");
    }

    /// Polls `done` every 10 ms, failing with `what` after 10 s.
    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A PubSubActor connected to `server`.
    async fn pubsub_of(server: &TestServer) -> Addr<PubSubActor> {
        let endpoint = Endpoint::open(&Config::new(server.url()))
            .await
            .expect("endpoint");
        Supervisor::start(move |_| PubSubActor::new(endpoint, Duration::from_secs(5)))
    }

    /// Starts an [`Ear`] (its stop counted in `stopped`) and subscribes it to `channel` as
    /// listener `id`, hearing what `hearing` lets through: its address and its count of
    /// messages heard.
    async fn listening_ear(
        pubsub: &Addr<PubSubActor>,
        (channel, id, hearing): (&str, u64, Option<&Hearing>),
        stopped: &Arc<AtomicUsize>,
    ) -> (Addr<Ear>, Arc<AtomicUsize>) {
        let heard = Arc::new(AtomicUsize::new(0));
        let ear = Ear {
            heard: heard.clone(),
            stopped: stopped.clone(),
        }
        .start();
        (pubsub.send(Subscribe {
            channel: channel.to_owned(),
            id,
            actor: Listener::of(&ear, hearing.cloned()),
        }))
        .await
        .expect("delivered")
        .expect("subscribed");
        (ear, heard)
    }

    #[actix_rt::test]
    async fn a_listener_dead_without_unsubscribing_is_forgotten_and_its_lone_channel_unsubscribed()
    {
        let server = TestServer::start().expect("server");
        let mut raw = server.conn().expect("connection");
        let pubsub = pubsub_of(&server).await;
        let stopped = Arc::new(AtomicUsize::new(0));
        // "shared": one listener dies with no address left, one with an address still held,
        // one lives. "alone" and "held": one listener each, dying without and with an address.
        let (dead, dead_heard) = listening_ear(&pubsub, ("shared", 1, None), &stopped).await;
        let (held, held_heard) = listening_ear(&pubsub, ("shared", 2, None), &stopped).await;
        let (live, live_heard) = listening_ear(&pubsub, ("shared", 3, None), &stopped).await;
        let (alone, _) = listening_ear(&pubsub, ("alone", 4, None), &stopped).await;
        let (held_alone, _) = listening_ear(&pubsub, ("held", 5, None), &stopped).await;
        for channel in ["shared", "alone", "held"] {
            assert_eq!(numsub(&mut raw, channel), 1, "{channel} subscribed");
        }

        for addr in [&dead, &held, &alone, &held_alone] {
            addr.do_send(Die);
        }
        drop((dead, alone));
        until("four listeners stopped", || {
            stopped.load(Ordering::SeqCst) == 4
        })
        .await;

        for channel in ["shared", "alone", "held"] {
            publish(&mut raw, channel);
        }
        until("the live listener hears its channel", || {
            live_heard.load(Ordering::SeqCst) == 1
        })
        .await;
        until("both lone channels unsubscribed", || {
            numsub(&mut raw, "alone") == 0 && numsub(&mut raw, "held") == 0
        })
        .await;
        assert_eq!(numsub(&mut raw, "shared"), 1, "the live listener's stays");
        let routes = pubsub.send(Routes).await.expect("routes");
        assert_eq!(
            routes,
            [("shared".to_owned(), 1)],
            "only the live route left"
        );
        assert_eq!(dead_heard.load(Ordering::SeqCst), 0);
        assert_eq!(held_heard.load(Ordering::SeqCst), 0);
        assert!(!held.connected(), "stopped, its address still held");

        // Forgotten, not deafened: the live listener hears the next message too, exactly once.
        publish(&mut raw, "shared");
        until("the live listener hears it again", || {
            live_heard.load(Ordering::SeqCst) == 2
        })
        .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(live_heard.load(Ordering::SeqCst), 2, "once per message");
        pubsub.do_send(Unsubscribe {
            channel: "shared".to_owned(),
            id: 3,
        });
        until("the last listener's unsubscribe is sent", || {
            numsub(&mut raw, "shared") == 0
        })
        .await;
        drop((held, held_alone, live));
        pubsub.do_send(Halt);
    }

    /// A listener whose hearing is off gets no message of its channel, while another listener
    /// of the same channel gets each; turned on, it gets the next one. (The break: messages
    /// delivered whatever the hearing says, which this sees as the deaf listener's count.)
    #[actix_rt::test]
    async fn a_listener_that_hears_nothing_gets_no_message_until_it_does() {
        let server = TestServer::start().expect("server");
        let mut raw = server.conn().expect("connection");
        let pubsub = pubsub_of(&server).await;
        let stopped = Arc::new(AtomicUsize::new(0));
        let hearing = Hearing::default();
        let (deaf, deaf_heard) =
            listening_ear(&pubsub, ("both", 1, Some(&hearing)), &stopped).await;
        let (ear, heard) = listening_ear(&pubsub, ("both", 2, None), &stopped).await;
        for _ in 0..3 {
            publish(&mut raw, "both");
        }
        until("the other listener hears all three", || {
            heard.load(Ordering::SeqCst) == 3
        })
        .await;
        // The PubSubActor routes in order: the deaf listener's copies, had they been sent,
        // were sent before the third reached the other one; its mailbox is empty once it
        // answers this.
        deaf.send(Die).await.expect("delivered");
        assert_eq!(
            deaf_heard.load(Ordering::SeqCst),
            0,
            "off: nothing delivered"
        );

        let (late, late_heard) =
            listening_ear(&pubsub, ("late", 3, Some(&hearing)), &stopped).await;
        hearing.set(true);
        publish(&mut raw, "late");
        until("turned on, the listener hears the next message", || {
            late_heard.load(Ordering::SeqCst) == 1
        })
        .await;
        drop((deaf, ear, late));
        pubsub.do_send(Halt);
    }
}
