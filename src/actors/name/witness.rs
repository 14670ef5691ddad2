//! [`Witness`]: what a family keeps of a per-name actor's waits and holds beside the shell,
//! told by the shell as it carries them out. The shell knows no family's record: a lock actor
//! keeps its place in the waits-for graph so (its seat, `deadlock::seat`); a synchronizer keeps
//! none (`()`). Generic over the actor's context `C`, so that this vocabulary stays pure.

use std::sync::Arc;
use std::time::Instant;

use super::WaiterId;
use crate::error::Owner;

/// Told by the per-name shell when a wait begins and ends, when a hold ends, after each event
/// and at the stop, for actor `actor` of name `name`. Every method does nothing unless a family
/// says otherwise.
pub(crate) trait Witness<C> {
    /// Waiter `id` began waiting at `now` (its caller is watched from now on).
    fn wait_began(
        &mut self,
        _name: &Arc<str>,
        _actor: u64,
        _id: WaiterId,
        _now: Instant,
        _ctx: &mut C,
    ) {
    }

    /// Waiter `id` is answered, or its caller left. Returns whose request it was, when the
    /// witness knows (the family's answer gets it).
    fn wait_over(&mut self, _actor: u64, _id: WaiterId) -> Option<Owner> {
        None
    }

    /// The hold of `epoch` ended (released, or lost).
    fn hold_ended(&mut self, _epoch: u64) {}

    /// Every hold ended: the actor stops.
    fn holds_ended(&mut self) {}

    /// The effects of one event are all carried out.
    fn settled(&mut self, _name: &Arc<str>, _actor: u64) {}

    /// The actor stopped (its waits were over as they were answered).
    fn left(&mut self, _name: &Arc<str>, _actor: u64) {}
}

/// A family that keeps no record of its waits and holds.
impl<C> Witness<C> for () {}
