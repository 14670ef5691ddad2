//! A lock's round trips: each [`Op`] a future of its own, spawned on the actor's context, its
//! [`Outcome`] going back to the state.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::LockActor;
use crate::actors::lock_state::{Op, Outcome, shutdown_retry};
use crate::actors::shell;
use crate::protocol::{Commands, HandedOff, LockKind, Successor};

impl LockActor {
    /// Starts one round trip; its outcome goes back to the state. Each kind of round trip is a
    /// future of its own size: a request's (acquire, release, hand-off) here, unboxed; the
    /// rare, large ones in [`run_upkeep`](Self::run_upkeep), which are not what every acquire
    /// pays for.
    pub(super) fn run_op(&mut self, op: Op, ctx: &mut Context<Self>) {
        let (cmds, name) = (self.shell.svc.commands.clone(), self.shell.name.clone());
        match op {
            Op::Acquire {
                kind,
                holder,
                ttl,
                fair,
                expect,
                ..
            } => self.spawn_op(ctx, async move {
                let res = cmds.holder(kind, &name, &holder).acquire(ttl, fair, expect);
                Outcome::Acquire(res.await)
            }),
            Op::Release {
                kind,
                holder,
                lease,
                expect,
                ..
            } => self.spawn_op(ctx, async move {
                let res = cmds
                    .holder(kind, &name, &holder)
                    .release(lease, expect)
                    .await;
                Outcome::Release(res.map(HandedOff::No))
            }),
            Op::HandOff {
                kind,
                from,
                lease,
                to,
                to_lease,
                expect,
                ..
            } => self.spawn_op(ctx, async move {
                let next = Successor {
                    holder: &to,
                    lease: to_lease,
                };
                let res = cmds
                    .holder(kind, &name, &from)
                    .hand_off(lease, next, expect);
                Outcome::Release(res.await)
            }),
            upkeep => self.run_upkeep(upkeep, ctx),
        }
    }

    /// Starts one of the round trips that keep the name in order rather than serve a request
    /// (leaving a fair queue, refreshing its places, settling a count, the shutdown): rare and
    /// large, each boxed.
    fn run_upkeep(&mut self, op: Op, ctx: &mut Context<Self>) {
        let (cmds, name) = (self.shell.svc.commands.clone(), self.shell.name.clone());
        let trip: Pin<Box<dyn Future<Output = Outcome>>> = match op {
            Op::LeaveQueue { holder, wait } => Box::pin(async move {
                Outcome::LeaveQueue(cmds.leave_queue(&name, &holder, wait).await)
            }),
            Op::FairRefresh { places, cap } => Box::pin(async move {
                Outcome::FairRefresh(cmds.fair_refresh(&name, &places, cap).await)
            }),
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
            // Only `run_op` sends round trips here; a request's goes back there all the same.
            request @ (Op::Acquire { .. } | Op::Release { .. } | Op::HandOff { .. }) => {
                return self.run_op(request, ctx);
            }
        };
        self.spawn_op(ctx, trip);
    }

    fn spawn_op(&mut self, ctx: &mut Context<Self>, op: impl Future<Output = Outcome> + 'static) {
        ctx.spawn(op.into_actor(self).map(|outcome, act, ctx| {
            act.shell.state.ran(outcome, Instant::now());
            shell::apply(act, ctx);
        }));
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
