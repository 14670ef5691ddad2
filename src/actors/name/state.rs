//! [`NameState`]: the events every per-name state takes, whatever its family. The shell
//! (`actors::shell`) drives a state through them alone, so it knows no family: timers firing,
//! subscriptions, messages on the name's channels, the pub/sub connection's losses, the
//! Watchdog's lost holds, callers leaving, the stop. What a family takes besides (its requests,
//! its round trips' outcomes) its adapter tells its state directly.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Instant;

use super::effect::{Effect, Family};
use super::timers::TimerTable;
use super::{Renewal, WaiterId};
use crate::error::LockError;

/// A per-name state, as its shell drives it. Pure, as the states are: events in, effects out
/// (collected with [`NameState::drain_into`]).
pub(crate) trait NameState {
    /// Its family.
    type Family: Family;
    /// Its timers (a waiter's deadline among them, which its table does not keep).
    type Timer: Clone + Eq + Hash;

    /// Moves its queued effects into `out`, in order.
    fn drain_into(&mut self, out: &mut Vec<Effect<Self::Family>>);
    /// Waiter `id`'s deadline, armed with [`Effect::Arm`], passed.
    fn deadline(&mut self, id: WaiterId, now: Instant);
    /// Its table of timers: every one but the waiters' deadlines.
    fn timers(&self) -> &TimerTable<Self::Timer>;
    /// Its table of timers, to take the due ones out.
    fn timers_mut(&mut self) -> &mut TimerTable<Self::Timer>;
    /// `timer` fired (a deadline, through [`deadline`](Self::deadline); any other, through
    /// [`timeout`](Self::timeout)): it is armed no more.
    fn fired(&mut self, timer: Self::Timer, now: Instant);
    /// When the next timer of its table fires: the shell keeps one timer for it.
    fn next_timeout(&self) -> Option<Instant> {
        self.timers().next()
    }
    /// The shell's timer for [`next_timeout`](Self::next_timeout) fired: every timer of its
    /// table due by `now` fires, earliest first. Those armed meanwhile wait for the shell's
    /// next turn, as they did when each timer was one of the shell's own.
    fn timeout(&mut self, now: Instant) {
        let mark = self.timers().mark();
        while let Some(timer) = self.timers_mut().take_due(now, mark) {
            self.fired(timer, now);
        }
    }
    /// Subscribing `channel` went well (`ok`) or not.
    fn subscribed(&mut self, channel: &str, ok: bool, now: Instant);
    /// A message came on `channel`: `count`, when it is a decimal number.
    fn message(&mut self, channel: &str, count: Option<i64>, now: Instant);
    /// The pub/sub connection was lost (`Some`: why), or came back (`None`): messages may
    /// have been lost either way.
    fn pubsub(&mut self, lost: Option<LockError>, now: Instant);
    /// The Watchdog found the hold of `epoch` gone (`holder` and `what` as it renewed it, from
    /// [`NameState::renewal`]), or could not renew it within the watchdog timeout.
    fn renewal_lost(&mut self, holder: Arc<str>, what: Renewal, epoch: u64, now: Instant);
    /// Waiter `id`'s caller left. True when the waiter is gone from the state; false when it is
    /// answered soon (its attempt is under way, or it is leaving a fair queue), and its answer
    /// finds nobody.
    fn caller_left(&mut self, id: WaiterId, now: Instant) -> bool;
    /// Stop: nothing new is served, every waiter fails with `Shutdown`, and holds are
    /// released when `release`; ends with [`Effect::Stopped`].
    fn stop(&mut self, release: bool, now: Instant);
    /// Its actor is going after lingering idle: its last timers are cancelled.
    fn retire(&mut self) {}
    /// Its actor stopped: it answers every waiter and lets go of its holds.
    fn abandon(&mut self);
    /// The `outcome` label of `answer`, for the metrics.
    fn outcome(&self, answer: &<Self::Family as Family>::Answer) -> &'static str;
    /// What the Watchdog renews `hold` by: its holder field and its renewal kind.
    fn renewal(&self, hold: &<Self::Family as Family>::Hold) -> (Arc<str>, Renewal);
}
