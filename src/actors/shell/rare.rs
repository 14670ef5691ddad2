//! The effects an uncontended request never sees, out of line: see [`perform_rare`].

use actix::prelude::*;

use super::{EffectOf, PerName, lose, subscribe, watch};
use crate::actors::messages::Unsubscribe;
use crate::actors::name::effect::Effect;
use crate::actors::name::witness::Witness;

/// The effects an uncontended request never sees (a wait, a subscription, renewal, a loss, the
/// stop): out of line and cold, so that [`perform`](super::perform)'s code where it is inlined is only what
/// every request runs (a pair's code is fetched anew at each request with many names busy at
/// once: instruction-cache misses, BENCHMARKS.md).
#[cold]
#[inline(never)]
pub(super) fn perform_rare<A: PerName>(act: &mut A, effect: EffectOf<A>, ctx: &mut Context<A>) {
    match effect {
        Effect::Watch(id) => watch(act, id, ctx),
        Effect::Subscribe(channel) => subscribe(act, channel, ctx),
        Effect::Unsubscribe(channel) => {
            let shell = act.shell();
            shell.svc.pubsub.do_send(Unsubscribe {
                channel: channel.to_string(),
                id: shell.id,
            });
        }
        Effect::Arm(id, after) => act.shell().crowd.arm(id, after, ctx),
        Effect::Cancel(id) => act.shell().crowd.disarm(id),
        Effect::Lost(epoch, loss) => lose(act, epoch, loss),
        Effect::Stopped => {
            let (shell, witness) = act.parts();
            if let Some(witness) = witness {
                witness.holds_ended();
            }
            for (_, signal) in shell.signals.drain() {
                A::SERIES.held(signal.kind, -signal.amount);
                signal.lost.raise();
            }
            for tx in shell.stop_replies.drain(..) {
                let _ = tx.send(());
            }
            shell.keepalive = None;
            ctx.stop();
        }
        // [`perform`]'s own.
        Effect::Run(_)
        | Effect::Answer(..)
        | Effect::Done(..)
        | Effect::Ended(_)
        | Effect::Busy
        | Effect::Idle
        | Effect::Track { .. }
        | Effect::Untrack { .. } => {}
    }
}
