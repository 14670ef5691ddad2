//! The FailoverWatch (Sentinel only): asks the sentinels which server is the primary every
//! [`POLL`], and at once when a command saw a sign of a failover (a replica answering, a dropped
//! or refused connection). When the primary has moved, it moves the command connections there,
//! makes the [`PubSubActor`] reconnect (every waiter then retries, since unlock messages of the
//! gap are gone) and has the [`Watchdog`] renew every hold at once: a hold whose key did not
//! reach the new primary is then reported lost through its guard.
//!
//! It runs under a `Supervisor`, and stops for good once the services it moves are gone.

use std::time::Duration;

use actix::WeakAddr;
use actix::prelude::*;

use super::messages::{Reconnect, RenewNow};
use super::pubsub::PubSubActor;
use super::watchdog::Watchdog;
use crate::config::Config;
use crate::connections::url::address;
use crate::protocol::Commands;

/// How often the sentinels are asked, as Redisson does.
const POLL: Duration = Duration::from_secs(1);

/// The actor that follows the primary.
pub(crate) struct FailoverWatch {
    commands: Commands,
    pubsub: WeakAddr<PubSubActor>,
    watchdog: WeakAddr<Watchdog>,
    /// How long asking the sentinels, or connecting to a new primary, may take.
    limit: Duration,
    /// The primary the command connections are on: `host:port`.
    commands_on: String,
    /// Whether a check is under way (a slow sentinel must not pile them up).
    checking: bool,
}

/// A command hinted at a failover.
struct Suspected;

impl FailoverWatch {
    pub(crate) fn new(
        commands: Commands,
        pubsub: Addr<PubSubActor>,
        watchdog: Addr<Watchdog>,
        config: &Config,
    ) -> Self {
        let commands_on = address(&commands.endpoint().client());
        Self {
            commands,
            pubsub: pubsub.downgrade(),
            watchdog: watchdog.downgrade(),
            limit: config.get_connect_timeout(),
            commands_on,
            checking: false,
        }
    }

    fn check(&mut self, ctx: &mut Context<Self>) {
        if self.checking {
            return;
        }
        let (Some(pubsub), Some(watchdog)) = (self.pubsub.upgrade(), self.watchdog.upgrade())
        else {
            ctx.stop(); // the manager is gone
            return;
        };
        self.checking = true;
        let (commands, limit, on) = (self.commands.clone(), self.limit, self.commands_on.clone());
        let work = async move {
            let endpoint = commands.endpoint();
            endpoint.locate(limit).await?;
            let primary = address(&endpoint.client());
            if primary == on {
                return Ok(None);
            }
            commands.switch_primary().await?;
            Ok::<_, crate::error::LockError>(Some(primary))
        };
        ctx.spawn(work.into_actor(self).map(move |res, act, _| {
            act.checking = false;
            match res {
                Ok(None) => {}
                Ok(Some(primary)) => {
                    tracing::warn!(from = %act.commands_on, to = %primary, "the primary moved");
                    act.commands_on = primary;
                    pubsub.do_send(Reconnect);
                    watchdog.do_send(RenewNow);
                }
                Err(error) => tracing::warn!(%error, "cannot follow the primary"),
            }
        }));
    }
}

impl Actor for FailoverWatch {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.checking = false;
        ctx.run_interval(POLL, |act, ctx| act.check(ctx));
        let endpoint = self.commands.endpoint().clone();
        let suspicions = futures_util::stream::unfold(endpoint, |endpoint| async move {
            endpoint.suspected().await;
            Some((Suspected, endpoint))
        });
        ctx.add_stream(suspicions);
    }
}

impl Supervised for FailoverWatch {}

impl StreamHandler<Suspected> for FailoverWatch {
    fn handle(&mut self, _: Suspected, ctx: &mut Context<Self>) {
        self.check(ctx);
    }

    fn finished(&mut self, _: &mut Context<Self>) {}
}
