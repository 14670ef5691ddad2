//! A synchronizer's round trips: each [`Op`] a future of its own, spawned on the actor's
//! context, behind its request latch, its [`Outcome`] going back to the state.

use std::time::Instant;

use actix::prelude::*;

use super::SyncActor;
use crate::actors::shell;
use crate::actors::sync_state::{Op, Outcome, Trip};
use crate::protocol::{Commands, SyncKind, SyncLatch};

impl SyncActor {
    /// Makes one round trip; its outcome goes back to the state. A request sent again goes
    /// with the latch of its first run.
    pub(super) fn run_trip(&mut self, Trip { seq, lane, op }: Trip, ctx: &mut Context<Self>) {
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
        let (commands, kind, name) = (
            self.shell.svc.commands.clone(),
            self.kind,
            self.shell.name.clone(),
        );
        let work = async move { perform(&commands, kind, &name, op, latch.as_ref()).await };
        ctx.spawn(work.into_actor(self).map(move |outcome, act, ctx| {
            act.shell.state.ran(seq, outcome, Instant::now());
            if !act.shell.state.is_under_way(seq) {
                act.latches.remove(&seq);
            }
            shell::apply(act, ctx);
        }));
    }
}

/// Runs one op of a synchronizer on Redis.
async fn perform(
    commands: &Commands,
    kind: SyncKind,
    name: &str,
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
            let taken = commands
                .permits(kind, name, latch)
                .take(permits, &ids, lease);
            return Outcome::Take(taken.await);
        }
        Op::Read { .. } => commands.read_counter(name).await,
        Op::Give { permits, ids } => {
            commands
                .permits(kind, name, latch)
                .give(permits, &ids)
                .await
        }
        Op::ReleaseIds(ids) => commands.release_all_permits(name, &ids, latch).await,
        Op::Adjust(adjustment) => commands.adjust(kind, name, adjustment, latch).await,
    };
    Outcome::Reply(res)
}
