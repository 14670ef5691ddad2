//! The actor system of one [`LockManager`](crate::LockManager):
//!
//! - [`Registry`]: lock name → its [`LockActor`], started on demand;
//! - [`LockActor`]: one per busy name, the shell of its `LockState` (`lock_state`: the rules of
//!   one name, pure); stops itself when idle;
//! - [`PubSubActor`]: the pub/sub connection, routing unlock messages (supervised);
//! - [`Watchdog`]: batched renewal of holds taken without a lease (supervised);
//! - `FailoverWatch`: with Sentinel, follows the primary and moves the others with it
//!   (supervised).
//!
//! [`messages`] lists everything they say to each other.

mod failover;
mod grant;
mod lock_actor;
mod lock_state;
pub(crate) mod messages;
mod pubsub;
mod registry;
mod watchdog;

use std::sync::Arc;

use actix::{Actor, Addr, Supervisor};

pub use grant::Grant;
pub use lock_actor::{AcquireReply, LockActor, ReleaseReply};
pub use lock_state::MAX_HAND_OFF_STREAK;
pub use pubsub::PubSubActor;
pub use registry::Registry;
pub use watchdog::Watchdog;

use crate::config::Config;
use crate::connect::Endpoint;
use crate::error::LockError;
use crate::scripts::Commands;
use failover::FailoverWatch;

/// What every lock actor needs: the command connection, the settings, and the two services.
#[derive(Clone)]
pub(crate) struct Services {
    pub commands: Commands,
    pub config: Arc<Config>,
    pub pubsub: Addr<PubSubActor>,
    pub watchdog: Addr<Watchdog>,
}

/// What a manager keeps of its actor system.
pub(crate) struct Started {
    pub registry: Addr<Registry>,
    pub commands: Commands,
}

/// Connects and starts the actors on the current arbiter.
pub(crate) async fn start(config: Arc<Config>) -> Result<Started, LockError> {
    let endpoint = Endpoint::open(&config).await?;
    let commands = Commands::open(endpoint.clone(), &config).await?;
    let connect_timeout = config.get_connect_timeout();
    let pubsub_endpoint = endpoint.clone();
    let pubsub = Supervisor::start(move |_| PubSubActor::new(pubsub_endpoint, connect_timeout));
    let watchdog = Watchdog::new(commands.clone(), &config);
    let watchdog = Supervisor::start(move |_| watchdog);
    if endpoint.follows_failover() {
        let watch = FailoverWatch::new(commands.clone(), pubsub.clone(), watchdog.clone(), &config);
        // Lives as long as the services it moves: it stops when their addresses are gone.
        Supervisor::start(move |_| watch);
    }
    let svc = Services {
        commands: commands.clone(),
        config,
        pubsub,
        watchdog,
    };
    Ok(Started {
        registry: Registry::new(svc).start(),
        commands,
    })
}
