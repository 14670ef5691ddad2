//! [`Services`]: what every lock and synchronizer actor needs — the command connection, the
//! settings, the pub/sub actor, the Watchdog, the client id, the board, the deadlock detector
//! and the lingering count — and the permit ids made from the client id.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use actix::Addr;

use super::pubsub::PubSubActor;
use super::watchdog::Watchdog;
use crate::config::Config;
use crate::protocol::Commands;

/// What every per-name actor (lock or synchronizer) needs: the command connection, the
/// settings, the pub/sub actor, the Watchdog, the client id, the board, the deadlock detector and
/// the lingering count.
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
    /// Who waits on which names here, for the client record and the contention series.
    pub board: Arc<super::board::Board>,
    /// Who waits for whom among the manager's lock waits, for deadlock detection.
    pub deadlocks: Arc<super::deadlock::Detector>,
    /// How many of the manager's actors linger idle now ([`Config::max_lingering`] bounds it).
    pub lingering: Arc<std::sync::atomic::AtomicUsize>,
}

/// Permit ids, for every manager of the process.
static NEXT_PERMIT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Services {
    /// Takes a place among the lingering actors; false when all [`Config::max_lingering`] are
    /// taken (or lingering is off), and the actor should stop at once.
    pub(crate) fn start_lingering(&self) -> bool {
        let max = self.config.get_max_lingering();
        if self.config.get_idle_linger().is_zero() {
            return false;
        }
        self.lingering
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives back a place taken by [`start_lingering`](Self::start_lingering).
    pub(crate) fn stop_lingering(&self) {
        self.lingering.fetch_sub(1, Ordering::Relaxed);
    }

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
