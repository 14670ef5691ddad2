//! The Watchdog: renews every hold this manager has without a lease, on one schedule every
//! third of the watchdog timeout, up to [`RENEW_BATCH`] holds per script call. Lock actors hand
//! it a hold (`Track`) once the hold has lived a sixth of the timeout, so short holds cost
//! nothing here; with holds watched (`Config::watch_holds`) 20 ms after its grant instead, to
//! be watched almost from the start, and it renews a lock hold only once the hold has lived
//! that sixth. A permit semaphore's actor hands it the permits taken without a lease at their
//! grant, and they are renewed at every tick.
//!
//! A hold is lost when a renewal finds it gone (a lock's field, a permit's id), or when no
//! renewal has succeeded for a whole watchdog timeout (Redis unreachable): the actor it came
//! from, a lock's or a synchronizer's, is told, and renewal for it stops.
//! A renewal call that failed (an error, or no reply within the response timeout) is retried
//! soon, not at the next tick: the holds it carried, in one batched call again, after
//! `FIRST_RETRY`, then twice as long each time up to `MAX_RETRY` (and a quarter of the
//! interval), until they are renewed or their timeout has passed (then they are lost). A hold
//! whose Redis comes back within its validity is thus confirmed again within about a retry
//! gap (at most `MAX_RETRY` and a round trip), so a scope whose margin is longer than that
//! goes on working.
//! It runs under a `Supervisor`: if it ever stops it is restarted with its holds and schedule.
//!
//! It has four jobs, one file each, on the one schedule:
//! - **renewal** (`renewal.rs`): the holds, their batched calls and retries, their losses;
//! - **the watch** (`tracking.rs`): each lock hold it renews is checked on the tracking
//!   connection, whose server tells it at once when the hold's key is written; a hold found
//!   gone then is lost at once, not at the next renewal;
//! - **the client record** (`record.rs`, docs/protocol.md "Client records"): who the manager is,
//!   the holds it tracks (holds old enough to be renewed) and the names its callers wait on
//!   (the [`Board`]), written each tick in the format of `protocol/clients.rs`;
//! - **contention series** (`contention.rs`): the top K contended names, to the metrics.
//!
//! (Deadlocks across processes are the probe's, `deadlock/probe.rs`, an actor of its own.)
//!
//! Short holds and uncontended acquires never reach it, so they cost nothing here: holds shorter
//! than a sixth of the timeout without the watch, than 20 ms with it (such a hold then costs a
//! message at its hand-over and its end, and one check call).

mod contention;
mod record;
mod renewal;
mod tracking;

use std::sync::Arc;

use actix::prelude::*;

use super::board::Board;
use super::deadlock::Detector;
use super::messages::*;
use crate::config::Config;
use crate::protocol::Commands;
use contention::Contention;
pub(crate) use record::FirstUse;
use record::RecordWriter;
use renewal::{RenewKey, Renewals, Round, Tracked};
use tracking::Watch;

/// The actor that owns renewal, the client record and the contention series.
pub(crate) struct Watchdog {
    commands: Commands,
    /// Renewal: the holds and their schedule.
    renewals: Renewals,
    /// The watch on the holds' keys: a loss known at once (`tracking.rs`).
    watch: Watch,
    /// The client record: what it says of this manager, and whether it is still written.
    record: RecordWriter,
    /// The contention series.
    contention: Contention,
    /// The deadlock detector, for the cycles it found lately (the client record says them).
    detector: Arc<Detector>,
    /// Who waits on which names here.
    board: Arc<Board>,
    /// Set by `Halt`: no more renewals or records.
    halted: bool,
}

impl Watchdog {
    pub(crate) fn new(
        commands: Commands,
        config: &Config,
        client_id: uuid::Uuid,
        board: Arc<Board>,
        detector: Arc<Detector>,
    ) -> Self {
        Self {
            commands,
            renewals: Renewals::new(config),
            watch: Watch::new(config),
            record: RecordWriter::new(config, client_id),
            contention: Contention::new(config.get_contention_top_k()),
            detector,
            board,
            halted: false,
        }
    }

    /// Refreshes the client record and reports the contended names, every renewal interval.
    fn publish(&mut self, ctx: &mut Context<Self>) {
        if self.halted {
            return;
        }
        let now = std::time::Instant::now();
        self.contention.report(&self.board, now);
        self.write_record(ctx, now);
    }
}

impl Actor for Watchdog {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if !self.halted {
            // The first record when the manager is first used (`FirstUse`), else after one
            // interval; not at start: a manager that never locks (a `lockman inspect`) leaves
            // none.
            ctx.run_interval(self.renewals.interval, |act, ctx| {
                act.publish(ctx);
                act.tick(ctx, Round::Every);
                act.watch_ping(ctx);
            });
        }
    }
}

impl Supervised for Watchdog {
    fn restarting(&mut self, _: &mut Context<Self>) {
        self.renewals.restarted();
        self.watch.restarted();
        self.record.restarted();
    }
}

impl Handler<Track> for Watchdog {
    type Result = ();

    fn handle(&mut self, msg: Track, ctx: &mut Context<Self>) {
        if self.halted {
            return;
        }
        let name = msg.name.clone();
        let key = RenewKey {
            name: msg.name,
            holder: msg.holder,
            what: msg.kind,
        };
        let tracked = Tracked {
            epoch: msg.epoch,
            confirmed: msg.confirmed,
            granted: msg.confirmed,
            validity: msg.validity,
            actor: msg.actor,
            failing: false,
        };
        self.renewals.tracked.insert(key, tracked);
        self.watch_new(name, ctx);
    }
}

impl Handler<Untrack> for Watchdog {
    type Result = ();

    fn handle(&mut self, msg: Untrack, _: &mut Context<Self>) {
        let key = RenewKey {
            name: msg.name,
            holder: msg.holder,
            what: msg.kind,
        };
        let tracked = &mut self.renewals.tracked;
        if tracked.get(&key).is_some_and(|t| t.epoch == msg.epoch) {
            tracked.remove(&key);
        }
    }
}

impl Handler<RenewNow> for Watchdog {
    type Result = ();

    fn handle(&mut self, _: RenewNow, ctx: &mut Context<Self>) {
        // The tracking connection follows the primary too. Dropped first: this round's
        // renewals must not go on it, to the old primary; they go on the command connections,
        // already moved, and the new tracking connection takes the next round's.
        self.watch_again(ctx);
        self.tick(ctx, Round::Every);
    }
}

impl Handler<Halt> for Watchdog {
    type Result = ResponseActFuture<Self, ()>;

    /// Stops renewing, deletes the client record (a dead manager's would expire within a
    /// watchdog timeout; a live one says goodbye), then stops.
    fn handle(&mut self, _: Halt, _: &mut Context<Self>) -> Self::Result {
        self.halted = true;
        self.renewals.tracked.clear();
        let forget = (self.record.written && !self.record.off)
            .then(|| (self.commands.clone(), self.record.id.clone()));
        let forget = async move {
            if let Some((commands, id)) = forget
                && let Err(error) = commands.forget_client_record(&id).await
            {
                tracing::debug!(%error, "client record not deleted; it expires on its own");
            }
        };
        Box::pin(forget.into_actor(self).map(|(), _, ctx| ctx.stop()))
    }
}
