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

mod crowd;
mod failover;
mod grant;
mod lock_actor;
mod lock_state;
pub(crate) mod messages;
mod permits;
mod pubsub;
mod registry;
mod sync_actor;
mod sync_state;
mod watchdog;

use std::sync::Arc;

use actix::{Actor, Addr, Supervisor};

pub use grant::Grant;
pub use lock_actor::{AcquireReply, LockActor, ReleaseReply};
pub use lock_state::MAX_HAND_OFF_STREAK;
pub use permits::Permits;
pub use pubsub::PubSubActor;
pub use registry::Registry;
pub use sync_actor::{SyncActor, SyncDone, SyncReply};
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
    /// The manager's client id, unique across processes: the first part of its synchronizers'
    /// request latch keys (so that the keys one manager leaves are bounded by its concurrency)
    /// and of its permit ids (so that `lockman inspect` tells whose permits they are).
    pub client_id: uuid::Uuid,
}

/// What a manager keeps of its actor system.
pub(crate) struct Started {
    pub registry: Addr<Registry>,
    pub commands: Commands,
    pub client_id: uuid::Uuid,
}

/// Connects and starts the actors on the current arbiter.
pub(crate) async fn start(config: Arc<Config>) -> Result<Started, LockError> {
    let endpoint = Endpoint::open(&config).await?;
    let client_id = uuid::Uuid::new_v4();
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
        client_id,
    };
    Ok(Started {
        registry: Registry::new(svc).start(),
        commands,
        client_id,
    })
}

/// Permit ids, for every manager of the process.
static NEXT_PERMIT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Services {
    /// A new permit id: the first 8 bytes of the client id, then a number unique in the
    /// process. Unique across clients, and it shows whose permit it is.
    pub(crate) fn permit_id(&self) -> [u8; 16] {
        let n = NEXT_PERMIT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.client_id.as_bytes()[..8]);
        id[8..].copy_from_slice(&n.to_be_bytes());
        id
    }
}
