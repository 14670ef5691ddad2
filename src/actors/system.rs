//! Starting a manager's actor system: connect, check permissions, start the supervised
//! services and the registry on the current arbiter.

use std::sync::Arc;

use actix::{Actor, Addr, Supervisor};
use actix_rt::ArbiterHandle;

use super::deadlock::Detector;
use super::deadlock::probe::Probe;
use super::failover::FailoverWatch;
use super::pubsub::PubSubActor;
use super::registry::{Directory, Home, Registry};
use super::services::Services;
use super::watchdog::Watchdog;
use crate::config::Config;
use crate::connections::command::Spawner;
use crate::connections::endpoint::Endpoint;
use crate::error::LockError;
use crate::protocol::Commands;

/// What a manager keeps of its actor system.
pub(crate) struct Started {
    pub registry: Addr<Registry>,
    /// The live lock actors, which handles look up before asking the registry.
    pub directory: Directory,
    pub commands: Commands,
    pub client_id: uuid::Uuid,
}

/// Connects and starts the actors on the current arbiter; lock actors are spread over it and
/// `more`, each with command connections of its own.
pub(crate) async fn start(
    config: Arc<Config>,
    more: Vec<ArbiterHandle>,
) -> Result<Started, LockError> {
    let endpoint = Endpoint::open(&config).await?;
    let client_id = uuid::Uuid::new_v4();
    let commands = Commands::open(endpoint.clone(), &config).await?;
    let connect_timeout = config.get_connect_timeout();
    let pubsub_endpoint = endpoint.clone();
    let pubsub = Supervisor::start(move |_| PubSubActor::new(pubsub_endpoint, connect_timeout));
    let board = Arc::new(super::board::Board::default());
    let deadlocks = Arc::new(Detector::new(&config, client_id, commands.groups().clone()));
    let directory = Directory::default();
    let watchdog = Watchdog::new(
        commands.clone(),
        &config,
        client_id,
        board.clone(),
        deadlocks.clone(),
    );
    let watchdog = Supervisor::start(move |_| watchdog);
    // Deadlocks across processes, on a schedule of their own.
    let probe = deadlocks.is_on().then(|| {
        let probe = Probe::new(
            commands.clone(),
            deadlocks.clone(),
            Arc::new(directory.clone()),
            client_id,
        );
        Supervisor::start(move |_| probe)
    });
    if endpoint.follows_failover() {
        let watch = FailoverWatch::new(commands.clone(), pubsub.clone(), watchdog.clone(), &config);
        // Lives as long as the services it moves: it stops when their addresses are gone.
        Supervisor::start(move |_| watch);
    }
    let svc = Services {
        commands: commands.clone(),
        deadlocks,
        config,
        pubsub,
        watchdog,
        client_id,
        board,
        lingering: Arc::default(),
    };
    let mut homes = vec![Home { arbiter: None, svc }];
    for arbiter in more {
        let there = arbiter.clone();
        let spawner: Spawner = Arc::new(move |work| {
            there.spawn(work);
        });
        let svc = Services {
            commands: commands.add_lane(spawner).await?,
            ..homes[0].svc.clone()
        };
        homes.push(Home {
            arbiter: Some(arbiter),
            svc,
        });
    }
    Ok(Started {
        registry: Registry::new(homes, directory.clone(), probe).start(),
        directory,
        commands,
        client_id,
    })
}
