//! The one timer a per-name actor keeps for its state's timer table
//! (`actors::name::timers`): set to the table's next instant after every event, it rings the
//! state then ([`NameState::timeout`](crate::actors::name::state::NameState::timeout)), which
//! handles every timer due. One tokio `Sleep`, made at the first arming and reset to each new
//! instant after, and one future spawned to wait on it: arming, moving and disarming allocate
//! nothing, so what an actor allocates does not depend on how often its timers fire (a watched
//! hold's hand-over tick fires every 20 ms of a busy name's life).

use std::pin::Pin;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::time::Sleep;

use super::driver::{Driver, Work};

/// The longest the alarm sleeps at once (tokio's wheel takes about two years); a later instant
/// rings early, finds nothing due, and is set again.
const MAX_SLEEP: Duration = Duration::from_secs(365 * 24 * 3600);

/// An actor's alarm: when it rings next, and what waits for it.
#[derive(Default)]
pub(crate) struct Alarm {
    /// The state's next timer, as last set; `None`: nothing armed.
    at: Option<Instant>,
    /// Made at the first arming, reset after.
    sleep: Option<Pin<Box<Sleep>>>,
    /// Whether the ringer's task is registered with `sleep` (polled since it last fired):
    /// until the sleep fires, the ringer need not poll it again. Actix polls every spawned
    /// future of an actor whenever the actor wakes, about six times per uncontended pair.
    registered: bool,
    /// The future waiting on `sleep`, while spawned.
    ringer: Option<SpawnHandle>,
    /// The ringer's waker, while it waits with nothing set (it does not poll `sleep` then).
    parked: Option<Waker>,
}

/// An actor with an [`Alarm`].
pub(crate) trait Alarmed: Actor<Context = Context<Self>> {
    fn alarm(&mut self) -> &mut Alarm;
    /// The alarm rang at `now`: the state's timers due fire, and the alarm is set again.
    fn rang(&mut self, now: Instant, ctx: &mut Context<Self>);
    /// Whether the actor stays while nothing is set (busy or lingering: it is kept alive
    /// anyway), so that the ringer waits rather than ends and is not spawned again per arming.
    fn stays(&mut self) -> bool;
}

impl Alarm {
    /// Sets the alarm for `at`, or off with `None`.
    pub(crate) fn set<A: Alarmed>(act: &mut A, at: Option<Instant>, ctx: &mut Context<A>) {
        let alarm = act.alarm();
        if alarm.at == at {
            return;
        }
        alarm.at = at;
        let Some(at) = at else {
            // A sleep set before may still wake the ringer: it finds nothing and waits.
            return;
        };
        let deadline = tokio::time::Instant::from_std(at.min(Instant::now() + MAX_SLEEP));
        match &mut alarm.sleep {
            Some(sleep) => {
                // A sleep that has not fired keeps its task registered through a reset (tokio
                // moves a later deadline without touching its wheel): the ringer wakes at the
                // new instant, and need not be woken now, even parked. One that fired has
                // woken its task already, and is polled again then.
                alarm.registered = alarm.registered && !sleep.is_elapsed();
                sleep.as_mut().reset(deadline);
            }
            None => alarm.first(deadline),
        }
        if alarm.ringer.is_none() {
            alarm.ringer = Some(Driver::<A, Ring>::spawn(ctx));
        } else if !alarm.registered
            && let Some(waker) = alarm.parked.take()
        {
            waker.wake();
        }
    }

    /// Turns the alarm off and ends its ringer when nothing is set: a spawned future keeps an
    /// actor alive, and one that departs must stop once nobody holds its address.
    pub(crate) fn end_if_unset<A: Alarmed>(act: &mut A, ctx: &mut Context<A>) {
        let alarm = act.alarm();
        if alarm.at.is_none()
            && let Some(ringer) = alarm.ringer.take()
        {
            alarm.parked = None;
            ctx.cancel_future(ringer);
        }
    }
}

impl Alarm {
    /// Its first arming: the sleep made (once per actor, out of every later arming's code).
    #[cold]
    #[inline(never)]
    fn first(&mut self, deadline: tokio::time::Instant) {
        self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline)));
        self.registered = false;
    }
}

/// The ringer ([`Driver`]): waits for the alarm's instant and rings; waits while nothing is
/// set, and ends then when the actor does not stay.
struct Ring;

impl<A: Alarmed> Work<A> for Ring {
    fn poll(act: &mut A, ctx: &mut Context<A>, task: &mut std::task::Context<'_>) -> Poll<()> {
        ring(act, ctx, task)
    }
}

fn ring<A: Alarmed>(
    act: &mut A,
    ctx: &mut Context<A>,
    task: &mut std::task::Context<'_>,
) -> Poll<()> {
    loop {
        if act.alarm().at.is_none() {
            if !act.stays() {
                let alarm = act.alarm();
                alarm.ringer = None;
                alarm.parked = None;
                return Poll::Ready(());
            }
            let alarm = act.alarm();
            if !alarm
                .parked
                .as_ref()
                .is_some_and(|w| w.will_wake(task.waker()))
            {
                alarm.parked = Some(task.waker().clone());
            }
            return Poll::Pending;
        }
        let alarm = act.alarm();
        alarm.parked = None;
        let Some(sleep) = alarm.sleep.as_mut() else {
            return Poll::Pending;
        };
        // Registered and not fired: the sleep wakes this task when it fires (the actor's
        // task: its waker does not change), so polling it again would only say `Pending`.
        if alarm.registered && !sleep.is_elapsed() {
            return Poll::Pending;
        }
        // Polled outside tokio's task budget: a `Pending` from a spent budget would leave the
        // sleep unregistered while taken as registered.
        if Pin::new(&mut tokio::task::unconstrained(sleep.as_mut()))
            .poll(task)
            .is_pending()
        {
            alarm.registered = true;
            return Poll::Pending;
        }
        // Rung: what the state sets next is a new instant, even the same one again.
        alarm.registered = false;
        alarm.at = None;
        act.rang(Instant::now(), ctx);
    }
}
