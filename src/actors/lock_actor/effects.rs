//! Carrying out the state's effects: round trips (each [`Op`] a future of its own, spawned on the
//! actor's context, its [`Outcome`] going back to the state), subscriptions, timers, words to the
//! Watchdog, lost signals.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::LockActor;
use crate::actors::lock_state::{Effect, Op, Outcome};
use crate::actors::messages::{
    HoldLost, Listener, Renewal, Subscribe, Track, Unsubscribe, Untrack,
};
use crate::metrics;
use crate::protocol::{Commands, HandedOff, LockKind};

impl LockActor {
    /// Starts one round trip; its outcome goes back to the state. Each kind of round trip is a
    /// future of its own size (the rare, large ones are not what every acquire pays for).
    pub(super) fn run(&mut self, op: Op, ctx: &mut Context<Self>) {
        let (cmds, name) = (self.svc.commands.clone(), self.name.clone());
        match op {
            Op::Acquire {
                kind,
                holder,
                ttl,
                fair,
                expect,
                ..
            } => self.spawn_op(ctx, async move {
                let res = cmds.acquire(kind, (&name, &holder), ttl, fair, expect);
                Outcome::Acquire(res.await)
            }),
            Op::Release {
                kind,
                holder,
                lease,
                expect,
                ..
            } => self.spawn_op(ctx, async move {
                let res = cmds.release(kind, (&name, &holder), lease, expect).await;
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
                let res = cmds.hand_off(kind, &name, (&from, lease), (&to, to_lease), expect);
                Outcome::Release(res.await)
            }),
            Op::LeaveQueue { holder, wait } => self.spawn_op(
                ctx,
                Box::pin(async move {
                    Outcome::LeaveQueue(cmds.leave_queue(&name, &holder, wait).await)
                }),
            ),
            Op::FairRefresh { places, cap } => self.spawn_op(
                ctx,
                Box::pin(async move {
                    Outcome::FairRefresh(cmds.fair_refresh(&name, &places, cap).await)
                }),
            ),
            Op::Settle {
                kind,
                holder,
                target,
                lease,
            } => self.spawn_op(
                ctx,
                Box::pin(async move {
                    let res = cmds.settle_releases(kind, &name, &holder, target, lease);
                    Outcome::Settle(res.await)
                }),
            ),
            Op::Shutdown { leave, release } => self.spawn_op(
                ctx,
                Box::pin(async move {
                    shut_down(&cmds, &name, leave, release).await;
                    Outcome::Shutdown
                }),
            ),
        }
    }

    fn spawn_op(
        &mut self,
        ctx: &mut Context<Self>,
        op: impl std::future::Future<Output = Outcome> + 'static,
    ) {
        ctx.spawn(op.into_actor(self).map(|outcome, act, ctx| {
            act.state.ran(outcome, Instant::now());
            act.apply(ctx);
        }));
    }

    pub(super) fn effect(&mut self, effect: Effect, ctx: &mut Context<Self>) {
        match effect {
            Effect::Run(op) => self.run(op, ctx),
            Effect::Answer(id, answer) => self.answer(id, answer, ctx),
            Effect::ReleaseDone(id, res) => {
                if let Some(tx) = self.releasing.remove(&id) {
                    let _ = tx.send(res);
                }
            }
            Effect::Subscribe(channel) => {
                let request = self.svc.pubsub.send(Subscribe {
                    channel: channel.to_string(),
                    id: self.id,
                    actor: Listener::of(&ctx.address()),
                });
                ctx.spawn(request.into_actor(self).map(move |res, act, ctx| {
                    let ok = !matches!(res, Ok(Err(_)));
                    act.state.subscribed(&channel, ok, Instant::now());
                    act.apply(ctx);
                }));
            }
            Effect::Unsubscribe(channel) => self.svc.pubsub.do_send(Unsubscribe {
                channel: channel.to_string(),
                id: self.id,
            }),
            Effect::Arm(timer, after) => self.arm(timer, after, ctx),
            Effect::Cancel(timer) => self.disarm(&timer, ctx),
            Effect::Watch(id) => self.watch(id, ctx),
            Effect::Track {
                key: (holder, kind),
                epoch,
                confirmed,
            } => self.svc.watchdog.do_send(Track {
                name: self.name.clone(),
                holder,
                kind: Renewal::Lock(kind),
                epoch,
                confirmed,
                validity: self.lost.get(&epoch).map(|(_, _, v)| v.clone()),
                actor: ctx.address().recipient::<HoldLost>().downgrade(),
            }),
            Effect::Untrack {
                key: (holder, kind),
                epoch,
            } => self.svc.watchdog.do_send(Untrack {
                name: self.name.clone(),
                holder,
                kind: Renewal::Lock(kind),
                epoch,
            }),
            Effect::Lost(epoch, loss) => {
                if let Some((lost, kind, _)) = self.lost.remove(&epoch) {
                    // Counted before the guard is told: whoever the guard wakes reads the
                    // counters already moved.
                    metrics::holds(kind, -1.0);
                    metrics::lost(kind, loss.label());
                    lost.send_replace(true);
                }
            }
            Effect::Ended(epoch) => {
                if let Some((_, kind, _)) = self.lost.remove(&epoch) {
                    metrics::holds(kind, -1.0);
                }
            }
            Effect::Busy => self.busy(ctx),
            Effect::Idle => crate::actors::name::linger::Linger::idle(self, ctx),
            Effect::Stopped => {
                for tx in self.stop_replies.drain(..) {
                    let _ = tx.send(());
                }
                ctx.stop();
            }
        }
    }
}

/// Leaves fair queues, then releases each hold entirely (whatever its count in Redis).
async fn shut_down(
    cmds: &Commands,
    name: &str,
    leave: Vec<(Arc<str>, Duration)>,
    release: Vec<((Arc<str>, LockKind), Duration)>,
) {
    for (holder, wait) in leave {
        if let Err(e) = cmds.leave_queue(name, &holder, wait).await {
            tracing::warn!(lock = %name, %holder, error = %e, "leaving the fair queue at shutdown failed");
        }
    }
    for ((holder, kind), lease) in release {
        match cmds.settle_releases(kind, name, &holder, 0, lease).await {
            Ok(0) => {}
            Ok(_) => tracing::warn!(lock = %name, %holder, "release at shutdown failed"),
            Err(e) => {
                tracing::warn!(lock = %name, %holder, error = %e, "release at shutdown failed")
            }
        }
    }
}
