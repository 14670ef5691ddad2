//! [`Receipt`]: what a grant of either family (a lock's `Grant`, a synchronizer's `Permits`)
//! keeps of the hold it stands for: the actor that granted it, the hold's epoch and its lost
//! signal. Made by the shell ([`Shell::receipt`]), so that both families grant alike: a grant
//! shares the actor's own address (no new address per grant), and its lost signal is the
//! hold's, made at its first grant.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::{PerName, Shell, Signal};
use crate::actors::lost::{LostSignal, Raiser};
use crate::error::LockError;

/// One grant's hold, as its guard keeps it.
pub(crate) struct Receipt<A: Actor> {
    /// Shared with the actor's own address while it is busy: a grant costs no new address.
    pub actor: Arc<Addr<A>>,
    /// The granting actor's id: any other actor refuses its release.
    pub actor_id: u64,
    /// The name's key (with the name prefix).
    pub name: Arc<str>,
    /// The hold's epoch: the same for every grant of one hold, never reused.
    pub epoch: u64,
    pub lost: LostSignal,
    /// Whether the request waited for it (its first attempt fell short).
    pub waited: bool,
    /// Whether dropping it still has to end its hold (release it, or give it back).
    pub armed: bool,
}

impl<A: Actor> Receipt<A> {
    /// Refuses it sent back to an actor (of id `actor_id`) other than the one that granted it,
    /// with the error `why` says from its name. Still armed, it ends its hold through its own
    /// actor when it is dropped there.
    pub(crate) fn sent_back_to(
        &self,
        actor_id: u64,
        why: impl FnOnce(&str) -> String,
    ) -> Result<(), LockError> {
        if self.actor_id == actor_id {
            return Ok(());
        }
        Err(LockError::invalid("release", why(&self.name)))
    }
}

impl<A: PerName> Shell<A> {
    /// The receipt of a grant of the hold of `epoch`, counted held as `counted` (its kind's
    /// label, and how much) at its first grant; `confirmed`: when the request Redis confirmed
    /// was sent, and the TTL it set (none for a hold that never expires: its validity stays
    /// unconfirmed). Its lost signal is the hold's validity too, and a lock grant's claim.
    pub(crate) fn receipt(
        &mut self,
        epoch: u64,
        counted: (&'static str, f64),
        confirmed: Option<(Instant, Duration)>,
        waited: bool,
        ctx: &mut Context<A>,
    ) -> Receipt<A> {
        let lost = self.signal(epoch, counted, confirmed);
        Receipt {
            actor: self.link(ctx),
            actor_id: self.id,
            name: self.name.clone(),
            epoch,
            lost,
            waited,
            armed: true,
        }
    }

    /// The lost signal of the hold of `epoch`, made at its first grant (and counted held),
    /// with what Redis `confirmed` of this grant (when its call was sent, and the TTL it set).
    /// The actor keeps one handle of the hold's cells (its raiser), the grant another.
    fn signal(
        &mut self,
        epoch: u64,
        (kind, amount): (&'static str, f64),
        confirmed: Option<(Instant, Duration)>,
    ) -> LostSignal {
        if let Some(signal) = self.signals.get_mut(&epoch) {
            if let Some((sent, ttl)) = confirmed {
                signal.lost.confirm(sent, ttl);
            }
            return signal.lost.signal();
        }
        A::SERIES.held(kind, amount);
        let lost = Raiser::first(confirmed, &mut self.spare);
        let signal = lost.signal();
        self.signals.insert(epoch, Signal { lost, kind, amount });
        signal
    }
}
