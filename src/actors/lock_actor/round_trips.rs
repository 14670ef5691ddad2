//! A lock's round trips: each [`Op`] a future in a [`Trips`] slot, its [`Outcome`] to the state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures_util::future::LocalBoxFuture;

use super::LockActor;
use crate::actors::lock_state::{Op, Outcome, shutdown_retry};
use crate::actors::shell::{self, trips::Travels, trips::Trips};
use crate::protocol::{Commands, HandedOff, LockKind, Successor};

impl Travels for LockActor {
    type Request = Op;
    type Outcome = Outcome;

    fn trips(&mut self) -> &mut Trips<Op, Outcome> {
        &mut self.trips
    }

    fn arrived(&mut self, outcome: Outcome, ctx: &mut Context<Self>) {
        self.shell.state.ran(outcome, Instant::now());
        shell::apply(self, ctx);
    }
}

/// A round trip's future, in a [`Trips`] slot: a request's unboxed, the rare ones boxed.
pub(super) async fn trip(cmds: Commands, name: Arc<str>, op: Op) -> Outcome {
    match op {
        Op::Acquire {
            kind,
            holder,
            ttl,
            fair,
            expect,
            ..
        } => {
            let res = cmds.holder(kind, &name, &holder).acquire(ttl, fair, expect);
            Outcome::Acquire(res.await)
        }
        Op::Release {
            kind,
            holder,
            lease,
            expect,
            ..
        } => {
            let res = cmds.holder(kind, &name, &holder).release(lease, expect);
            Outcome::Release(res.await.map(HandedOff::No))
        }
        Op::HandOff {
            kind,
            from,
            lease,
            to,
            to_lease,
            expect,
            ..
        } => {
            let next = Successor {
                holder: &to,
                lease: to_lease,
            };
            let res = cmds
                .holder(kind, &name, &from)
                .hand_off(lease, next, expect);
            Outcome::Release(res.await)
        }
        upkeep => run_upkeep(cmds, name, upkeep).await,
    }
}

/// One of the round trips that keep the name in order rather than serve a request: boxed.
fn run_upkeep(cmds: Commands, name: Arc<str>, op: Op) -> LocalBoxFuture<'static, Outcome> {
    match op {
        Op::LeaveQueue { holder, wait } => {
            Box::pin(
                async move { Outcome::LeaveQueue(cmds.leave_queue(&name, &holder, wait).await) },
            )
        }
        Op::FairRefresh { places, cap } => {
            Box::pin(
                async move { Outcome::FairRefresh(cmds.fair_refresh(&name, &places, cap).await) },
            )
        }
        Op::Settle {
            kind,
            holder,
            target,
            lease,
            lapsed,
        } => Box::pin(async move {
            let res = cmds.settle_releases(kind, &name, &holder, target, lease, lapsed);
            Outcome::Settle(res.await)
        }),
        Op::Shutdown {
            leave,
            release,
            lapsed,
        } => Box::pin(async move {
            shut_down(&cmds, &name, leave, release, lapsed).await;
            Outcome::Shutdown
        }),
        // A request (`trip` runs them itself) is run all the same.
        request => Box::pin(trip(cmds, name, request)),
    }
}

/// Leaves fair queues, then releases each hold entirely (whatever its count in Redis).
async fn shut_down(
    cmds: &Commands,
    name: &str,
    leave: Vec<(Arc<str>, Duration)>,
    release: Vec<((Arc<str>, LockKind), Duration)>,
    lapsed: Vec<(Arc<str>, LockKind)>,
) {
    for (holder, wait) in leave {
        if let Err(e) = cmds.leave_queue(name, &holder, wait).await {
            tracing::warn!(lock = %name, %holder, error = %e, "leaving the fair queue at shutdown failed");
        }
    }
    for ((holder, kind), lease) in release {
        let ran_out = lapsed.contains(&(holder.clone(), kind));
        // A failed try is tried again as `shutdown_retry` says (a dropped connection, not a
        // frozen server).
        let mut tries = 0;
        loop {
            let began = Instant::now();
            let res = cmds
                .settle_releases(kind, name, &holder, 0, lease, ran_out)
                .await;
            let error = match res {
                Ok(0) => break,
                Ok(_) => None,
                Err(e) => Some(e),
            };
            tries += 1;
            let Some(backoff) = shutdown_retry(tries, began.elapsed()) else {
                match error {
                    Some(e) => {
                        tracing::warn!(lock = %name, %holder, error = %e, "release at shutdown failed")
                    }
                    None => tracing::warn!(lock = %name, %holder, "release at shutdown failed"),
                }
                break;
            };
            actix_rt::time::sleep(backoff).await;
        }
    }
}
