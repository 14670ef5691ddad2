//! The uncontended path of a reentrant lock: when its name has no lock actor in this manager,
//! the handle sends the acquire script itself, on the caller's runtime, and the guard releases
//! with one script. No message and, from plain tokio, no hop to lockman's thread: the cost of an
//! uncontended acquire+release is the two scripts. The bookkeeping is in `actors::direct`.
//!
//! The attempt runs on the caller's task. A caller that goes away mid-attempt leaves its
//! outcome unknown, which is settled against Redis's count before this holder's next direct
//! round trip (and in the background), as after a time-out. When the lock is busy the request
//! goes on to the name's lock actor, which waits for it as for any other request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use actix_rt::ArbiterHandle;

use crate::actors::direct::{BusyNames, Counted, DirectHold, InFlight, Renewals, Side, Trip};
use crate::actors::messages::{DrainDirect, Wait};
use crate::actors::{Grant, Watchdog, backoff};
use crate::error::LockError;
use crate::scripts::{Attempt, Commands, FairArgs, LockKind};

/// What the direct path needs of its manager.
pub(crate) struct DirectPath {
    /// The command connection the handles use: on the caller's runtime when lockman runs its
    /// own actix System, else the actors' own.
    pub commands: Commands,
    pub busy: BusyNames,
    pub renewals: Renewals,
    pub watchdog: Addr<Watchdog>,
    pub spawner: ArbiterHandle,
    pub lease: Duration,
}

/// How a direct request ended.
pub(super) enum Direct {
    /// Granted, refused or failed: the request's answer.
    Done(Result<Option<Grant>, LockError>),
    /// The lock is busy and the request may wait: it goes on to the lock actor with what is
    /// left of its wait, counted there.
    Wait(Wait, Counted),
}

/// One direct attempt's outcome.
enum Outcome {
    Acquired(Grant),
    Busy,
}

impl DirectPath {
    /// Whether a request goes direct: a reentrant lock taken without a lease (lease holds, the
    /// other kinds and contended names go through the lock actor).
    pub(super) fn takes(&self, kind: LockKind, lease: Option<Duration>) -> bool {
        kind == LockKind::Reentrant && lease.is_none()
    }

    /// Runs a direct request of `holder` on `name`, counted on the direct path by `counted`.
    pub(super) async fn request(
        &self,
        side: &Arc<Side>,
        mut counted: Counted,
        (name, holder): (&Arc<str>, &Arc<str>),
        wait: Wait,
    ) -> Direct {
        // As the lock actor would: a zero wait is one attempt, never cut short.
        let wait = wait.normalized();
        let started = Instant::now();
        let deadline = match wait {
            Wait::Up(d) => started.checked_add(d),
            _ => None,
        };
        let trip = Trip {
            commands: self.commands.clone(),
            name: name.clone(),
            holder: holder.clone(),
            lease: self.lease,
            spawner: self.spawner.clone(),
        };
        let mut failures = 0;
        loop {
            let attempt = self.attempt(side, &trip);
            let reply = match deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline.into(), attempt).await {
                    Ok(reply) => reply,
                    // An attempt cut short is settled like one of unknown outcome.
                    Err(_) => return Direct::Done(Ok(None)),
                },
                None => attempt.await,
            };
            let error = match reply {
                Ok(Outcome::Acquired(grant)) => return Direct::Done(Ok(Some(grant))),
                Ok(Outcome::Busy) if wait == Wait::No => return Direct::Done(Ok(None)),
                Ok(Outcome::Busy) => None,
                Err(e) if wait == Wait::No || !e.is_retryable() => return Direct::Done(Err(e)),
                Err(e) => Some(e),
            };
            let left = match wait {
                Wait::Up(d) => Wait::Up(d.saturating_sub(started.elapsed())),
                other => other,
            };
            if left == Wait::Up(Duration::ZERO) {
                return Direct::Done(Ok(None));
            }
            if error.is_none() && counted.move_to_actor() {
                return Direct::Wait(left, counted);
            }
            // A Redis error (the lock actor would retry it just the same), or this holder still
            // has direct holds or an unsettled count: try again here.
            let pause = backoff(failures);
            if let Some(error) = &error {
                tracing::warn!(lock = %name, %error, ?pause, "direct acquire failed, retrying");
            }
            let pause = match deadline {
                Some(deadline) => pause.min(deadline.saturating_duration_since(Instant::now())),
                None => pause,
            };
            tokio::time::sleep(pause).await;
            failures += 1;
        }
    }

    /// One acquire attempt, in this holder's turn.
    async fn attempt(&self, side: &Arc<Side>, trip: &Trip) -> Result<Outcome, LockError> {
        let (ops, settled) = side.turn(trip).await;
        settled?;
        let fair = FairArgs {
            wait: trip.lease,
            once: true,
        };
        let flight = InFlight::new(ops, side, trip);
        let res = trip
            .commands
            .acquire(
                LockKind::Reentrant,
                &trip.name,
                &trip.holder,
                trip.lease,
                fair,
            )
            .await;
        let Some(mut ops) = flight.land() else {
            return Err(LockError::Shutdown);
        };
        match res {
            Ok(Attempt::Acquired { .. }) => {
                let (hold, lost) = DirectHold::new(trip.clone(), side.clone(), Instant::now());
                if self.renewals.push(hold.clone()) {
                    self.watchdog.do_send(DrainDirect);
                }
                Ok(Outcome::Acquired(Grant::direct(hold, lost)))
            }
            Ok(Attempt::Busy { .. }) => Ok(Outcome::Busy),
            Err(e) => {
                if e.outcome_unknown() {
                    side.unsettled(&mut ops, trip);
                }
                Err(e)
            }
        }
    }
}
