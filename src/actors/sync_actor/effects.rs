//! Carrying out the synchronizer state's effects: round trips (each [`Op`] a future of its own,
//! spawned on the actor's context, behind its request latch, its [`Outcome`] going back to the
//! state), replies, subscriptions, timers, words to the Watchdog, lost signals, lingering.

use std::time::Instant;

use actix::prelude::*;

use super::{Replying, SyncActor, hex_ids};
use crate::actors::messages::*;
use crate::actors::name::linger::Linger;
use crate::actors::sync_state::{Effect, Op, Outcome, Timer, Trip};
use crate::metrics;
use crate::protocol::{Commands, SyncKind, SyncLatch};

impl SyncActor {
    pub(super) fn effect(&mut self, effect: Effect, ctx: &mut Context<Self>) {
        match effect {
            Effect::Run(trip) => self.run(trip, ctx),
            Effect::Answer(id, answer) => self.answer(id, answer, ctx),
            Effect::ReleaseDone(id, res) => {
                if let Some(Replying::Done(tx)) = self.replying.remove(&id) {
                    let _ = tx.send(res);
                }
            }
            Effect::AdjustDone(id, res) => {
                if let Some(Replying::Adjust(tx)) = self.replying.remove(&id) {
                    let _ = tx.send(res);
                }
            }
            Effect::Subscribe => {
                let request = self.svc.pubsub.send(Subscribe {
                    channel: self.kind.channel(&self.name),
                    id: self.id,
                    actor: Listener::of(&ctx.address()),
                });
                ctx.spawn(request.into_actor(self).map(|res, act, ctx| {
                    let ok = matches!(res, Ok(Ok(())));
                    act.state.subscribed(ok, Instant::now());
                    act.apply(ctx);
                }));
            }
            Effect::Unsubscribe => self.svc.pubsub.do_send(Unsubscribe {
                channel: self.kind.channel(&self.name),
                id: self.id,
            }),
            Effect::Arm(Timer::Deadline(id), after) => self.crowd.arm(id, after, ctx),
            Effect::Cancel(Timer::Deadline(id)) => self.crowd.disarm(id),
            Effect::Arm(timer, after) => {
                // One per actor or per hold, not per waiter: an actix timer of its own.
                let t = timer.clone();
                let handle = ctx.run_later(after, move |act, ctx| {
                    act.timers.remove(&t);
                    act.state.fired(t, Instant::now());
                    act.apply(ctx);
                });
                if let Some(old) = self.timers.insert(timer, handle) {
                    ctx.cancel_future(old);
                }
            }
            Effect::Cancel(timer) => {
                if let Some(handle) = self.timers.remove(&timer) {
                    ctx.cancel_future(handle);
                }
            }
            Effect::Track {
                epoch,
                ids,
                confirmed,
            } => self.svc.watchdog.do_send(Track {
                name: self.name.clone(),
                holder: hex_ids(&ids).into(),
                kind: Renewal::Permits,
                epoch,
                confirmed,
                validity: self.signals.get(&epoch).map(|(_, _, v)| v.clone()),
                actor: ctx.address().recipient::<HoldLost>().downgrade(),
            }),
            Effect::Untrack { epoch, ids } => self.svc.watchdog.do_send(Untrack {
                name: self.name.clone(),
                holder: hex_ids(&ids).into(),
                kind: Renewal::Permits,
                epoch,
            }),
            Effect::Lost(epoch, why) => {
                if let Some((lost, _, _)) = self.signals.get(&epoch) {
                    // Counted before the guard is told: whoever the guard wakes reads the
                    // counter already moved.
                    tracing::warn!(name = %self.name, kind = self.kind.label(), reason = why.describe(), "permits lost");
                    metrics::permits_lost(self.kind.label(), why.label());
                    lost.send_replace(true);
                }
            }
            Effect::Ended(epoch) => {
                if let Some((_, permits, _)) = self.signals.remove(&epoch) {
                    metrics::permits(self.kind.label(), -f64::from(permits));
                }
            }
            Effect::Busy => {
                Linger::busy(self);
                if self.keepalive.is_none() {
                    self.keepalive = Some(ctx.address());
                }
            }
            Effect::Idle => {
                // Kept alive by its own address while it lingers (its round trips kept it so
                // far).
                if self.keepalive.is_none() && self.linger.is_busy() {
                    self.keepalive = Some(ctx.address());
                }
                Linger::idle(self, ctx);
            }
            Effect::Stopped => {
                for (lost, _, _) in self.signals.values() {
                    lost.send_replace(true);
                }
                for tx in self.stop_replies.drain(..) {
                    let _ = tx.send(());
                }
                self.keepalive = None;
                ctx.stop();
            }
        }
    }

    /// Makes one round trip; its outcome goes back to the state. A request sent again goes
    /// with the latch of its first run.
    fn run(&mut self, Trip { seq, lane, op }: Trip, ctx: &mut Context<Self>) {
        let latch = match op {
            Op::Read { .. } => None,
            _ => {
                let prefix = &self.latch_prefix;
                let latch = self.latches.entry(seq).or_insert_with(|| SyncLatch {
                    lane: format!("{prefix}:{lane}"),
                    id: crate::protocol::Latch::new().id,
                });
                Some(latch.clone())
            }
        };
        let (commands, kind, name) = (self.svc.commands.clone(), self.kind, self.name.clone());
        let work = async move { perform(&commands, (kind, &name), op, latch.as_ref()).await };
        ctx.spawn(work.into_actor(self).map(move |outcome, act, ctx| {
            act.state.ran(seq, outcome, Instant::now());
            if !act.state.is_under_way(seq) {
                act.latches.remove(&seq);
            }
            act.apply(ctx);
        }));
    }
}

/// Runs one op of a synchronizer on Redis.
async fn perform(
    commands: &Commands,
    (kind, name): (SyncKind, &str),
    op: Op,
    latch: Option<&SyncLatch>,
) -> Outcome {
    let Some(latch) = latch else {
        return Outcome::Reply(commands.read_counter(name).await);
    };
    let res = match op {
        Op::Take {
            permits,
            ids,
            lease,
            ..
        } => {
            let taken = commands.take_permits(kind, name, (permits, &ids, lease), latch);
            return Outcome::Take(taken.await);
        }
        Op::Read { .. } => commands.read_counter(name).await,
        Op::Give { permits, ids } => {
            commands
                .give_permits(kind, name, (permits, &ids), latch)
                .await
        }
        Op::ReleaseIds(ids) => commands.release_all_permits(name, &ids, latch).await,
        Op::Adjust(adjustment) => match adjustment {
            Adjustment::SetPermits(n) => commands
                .set_permits(kind, name, (n, None), latch)
                .await
                .map(i64::from),
            Adjustment::SetPermitsWithTtl(n, ttl) => commands
                .set_permits(kind, name, (n, Some(ttl)), latch)
                .await
                .map(i64::from),
            Adjustment::ReleaseIfExists(n) => commands
                .release_if_exists(name, n, latch)
                .await
                .map(i64::from),
            Adjustment::AddPermits(d) => commands.add_permits(kind, name, d, latch).await,
            Adjustment::Drain => commands.drain_permits(name, latch).await,
            Adjustment::Release(n) => commands.give_permits(kind, name, (n, &[]), latch).await,
            Adjustment::Available => commands
                .count_permits(kind, name)
                .await
                .map(|(free, _)| free),
            Adjustment::Acquired => commands
                .count_permits(kind, name)
                .await
                .map(|(_, held)| held),
            Adjustment::SetCount(c) => commands.set_count(name, c, latch).await.map(i64::from),
            Adjustment::CountDown => commands.count_down(name, latch).await,
        },
    };
    Outcome::Reply(res)
}
