//! The one future a per-name actor keeps spawned while it stays, its ringer: it drives the
//! actor's round trips ([`Alarmed::travel`]), the one timer of its state's timer table
//! (`actors::name::timers`) and its linger's timer. Actix polls every future spawned on an
//! actor at every wake of the actor, and each spawn costs a second pass through its context:
//! one future, spawned once per stay, polls all three, and a timer's `Sleep` is polled only
//! when it may have fired (its own wake, or not registered yet).
//!
//! The state's timer is set to the table's next instant after every event; it rings the state
//! then ([`NameState::timeout`](crate::actors::name::state::NameState::timeout)), which handles
//! every timer due. A timer is set lazily: one set for an earlier instant than asked stays (it
//! fires early, finds nothing due and is set to the instant asked then), so that a timer armed
//! and stopped per request (a hold's hand-over to the Watchdog) touches tokio's wheel about
//! once per its own duration, not per request. Each `Sleep` is made at its first use and reset
//! after: what an actor allocates does not depend on how often its timers fire.

use std::pin::Pin;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::time::Sleep;

use super::driver::{Driver, Work};

/// The longest a timer sleeps at once (tokio's wheel takes about two years); a later instant
/// rings early, finds nothing due, and is set again.
const MAX_SLEEP: Duration = Duration::from_secs(365 * 24 * 3600);

/// An actor's alarm: its timers, and the ringer that drives them and its round trips.
#[derive(Default)]
pub(crate) struct Alarm {
    /// The state's next timer, as last set; `None`: nothing armed.
    at: Option<Instant>,
    /// Set by `at` (or earlier).
    state: Timer,
    /// The linger's timer (`linger`).
    linger: Timer,
    /// The ringer, while spawned.
    ringer: Option<SpawnHandle>,
    /// Its task, as of its last poll: woken when something for it starts where it may have
    /// been polled already in the actor's current pass.
    waker: Option<Waker>,
}

/// An actor with an [`Alarm`].
pub(crate) trait Alarmed: Actor<Context = Context<Self>> {
    fn alarm(&mut self) -> &mut Alarm;
    /// The state's timer rang at `now`: its timers due fire, and the alarm is set again.
    fn rang(&mut self, now: Instant, ctx: &mut Context<Self>);
    /// Whether the actor stays while nothing is under way or set (busy or lingering: it is
    /// kept alive anyway), so that the ringer waits rather than ends and is not spawned again
    /// per request.
    fn stays(&mut self) -> bool;
    /// Polls its round trips in flight and takes in their outcomes: whether any is still in
    /// flight.
    fn travel(&mut self, ctx: &mut Context<Self>, task: &mut std::task::Context<'_>) -> bool;
    /// The linger's timer fired.
    fn lingered(&mut self, ctx: &mut Context<Self>);
    /// Whether its linger's timer matters now (the actor lingers): only then is it looked at.
    /// One that fires meanwhile is seen when it is set again ([`Alarm::linger_by`]).
    fn lingers(&mut self) -> bool {
        true
    }
}

/// One tokio `Sleep`, polled only when it may have fired.
#[derive(Default)]
struct Timer {
    sleep: Option<Pin<Box<Sleep>>>,
    /// The instant it is set for, until it is seen fired.
    armed: Option<Instant>,
    /// Whether the actor's task is registered with `sleep` (polled since it was set): until it
    /// fires, it need not be polled again. The actor's task is the same whichever of its
    /// futures polled it.
    registered: bool,
}

impl Timer {
    /// Makes it fire by `at`: one set for an earlier instant stays. Whether it must be polled
    /// (to register the actor's task).
    fn by(&mut self, at: Instant) -> bool {
        if self.armed.is_some_and(|armed| armed <= at) {
            // Registered, it wakes the actor when it fires; one that fired while nobody looked
            // (the linger's, while the actor is busy) is polled now.
            return !self.registered || self.sleep.as_ref().is_some_and(|s| s.is_elapsed());
        }
        self.armed = Some(at);
        let deadline = tokio::time::Instant::from_std(at.min(Instant::now() + MAX_SLEEP));
        match &mut self.sleep {
            Some(sleep) => {
                // A sleep that has not fired keeps its task registered through a reset: it
                // wakes it at the new instant. One that fired has woken its task already.
                self.registered = self.registered && !sleep.is_elapsed();
                sleep.as_mut().reset(deadline);
            }
            None => self.first(deadline),
        }
        !self.registered
    }

    /// Its first setting: the sleep made (once per actor, out of every later setting's code).
    #[cold]
    #[inline(never)]
    fn first(&mut self, deadline: tokio::time::Instant) {
        self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline)));
        self.registered = false;
    }

    /// Whether it fired (and is unset now); polled only when it may have.
    fn fired(&mut self, task: &mut std::task::Context<'_>) -> bool {
        let (Some(_), Some(sleep)) = (self.armed, self.sleep.as_mut()) else {
            return false;
        };
        // Registered and not fired: the sleep wakes the actor when it fires.
        if self.registered && !sleep.is_elapsed() {
            return false;
        }
        // Polled outside tokio's task budget: a `Pending` from a spent budget would leave the
        // sleep unregistered while taken as registered.
        if Pin::new(&mut tokio::task::unconstrained(sleep.as_mut()))
            .poll(task)
            .is_pending()
        {
            self.registered = true;
            return false;
        }
        self.registered = false;
        self.armed = None;
        true
    }
}

impl Alarm {
    /// Sets the state's timer for `at`, or off with `None`.
    pub(crate) fn set<A: Alarmed>(act: &mut A, at: Option<Instant>, ctx: &mut Context<A>) {
        let alarm = act.alarm();
        if alarm.at == at {
            return;
        }
        alarm.at = at;
        // Off: a timer set before fires, finds nothing due and stays unset.
        if let Some(at) = at {
            let poll = alarm.state.by(at);
            Self::wind(act, poll, ctx);
        }
    }

    /// Sets the linger's timer to fire by `at` (the linger finds out then whether it is due).
    pub(crate) fn linger_by<A: Alarmed>(act: &mut A, at: Instant, ctx: &mut Context<A>) {
        let poll = act.alarm().linger.by(at);
        Self::wind(act, poll, ctx);
    }

    /// A round trip started: the ringer polls it.
    pub(crate) fn travel<A: Alarmed>(act: &mut A, ctx: &mut Context<A>) {
        Self::wind(act, true, ctx);
    }

    /// Makes sure the ringer runs and, when `poll`, polls its work soon. Started from a message
    /// (the actor's futures are polled after its mailbox) or from the ringer itself (it goes
    /// on), it is polled in the actor's current pass; from another of the actor's futures it
    /// may have been polled already, and is woken.
    fn wind<A: Alarmed>(act: &mut A, poll: bool, ctx: &mut Context<A>) {
        let alarm = act.alarm();
        let Some(ringer) = alarm.ringer else {
            alarm.ringer = Some(Driver::<A, Ring>::spawn(ctx));
            return;
        };
        if !poll {
            return;
        }
        let polling = ctx.handle();
        if polling != ringer
            && polling != SpawnHandle::default()
            && let Some(waker) = &alarm.waker
        {
            waker.wake_by_ref();
        }
    }

    /// Whether the ringer is spawned.
    #[cfg(test)]
    pub(crate) fn ringing(&self) -> bool {
        self.ringer.is_some()
    }

    /// The actor departs: the ringer ends once nothing is under way (a spawned future keeps an
    /// actor alive, and one that departs must stop once nobody holds its address).
    pub(crate) fn end_if_unset<A: Alarmed>(act: &mut A) {
        let alarm = act.alarm();
        if alarm.ringer.is_some()
            && let Some(waker) = alarm.waker.take()
        {
            waker.wake();
        }
    }
}

/// The ringer ([`Driver`]): drives the round trips, rings the state's timers and the linger's
/// when due; ends once nothing is under way or set and the actor does not stay.
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
        // What the state does with an outcome may start more: polled in this loop too.
        let travelling = act.travel(ctx, task);
        let alarm = act.alarm();
        if alarm.state.fired(task) {
            let now = Instant::now();
            match alarm.at {
                // Rung: what the state sets next is a new instant, even the same one again.
                Some(at) if at <= now => {
                    alarm.at = None;
                    act.rang(now, ctx);
                }
                // Set early (or rung a little early): set again for the instant asked.
                Some(at) => drop(alarm.state.by(at)),
                None => {}
            }
            continue;
        }
        if act.lingers() && act.alarm().linger.fired(task) {
            act.lingered(ctx);
            continue;
        }
        if !travelling && act.alarm().at.is_none() && !act.stays() {
            let alarm = act.alarm();
            (alarm.ringer, alarm.waker) = (None, None);
            return Poll::Ready(());
        }
        let alarm = act.alarm();
        if !alarm
            .waker
            .as_ref()
            .is_some_and(|w| w.will_wake(task.waker()))
        {
            alarm.waker = Some(task.waker().clone());
        }
        return Poll::Pending;
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use tokio::sync::mpsc;

    use super::*;

    /// Tells when its state's timer or its linger's rang; it stays (a busy actor's ringer
    /// waits). Its linger's timer is looked at always (`looks: None`), or only as many more
    /// times as `looks` says, each time the ringer asks told on its channel (looked or not).
    struct Clock {
        alarm: Alarm,
        rung: mpsc::UnboundedSender<Instant>,
        looks: Option<(u32, mpsc::UnboundedSender<bool>)>,
    }

    impl Actor for Clock {
        type Context = Context<Self>;
    }

    impl Alarmed for Clock {
        fn alarm(&mut self) -> &mut Alarm {
            &mut self.alarm
        }

        fn rang(&mut self, now: Instant, _: &mut Context<Self>) {
            let _ = self.rung.send(now);
        }

        fn stays(&mut self) -> bool {
            true
        }

        fn travel(&mut self, _: &mut Context<Self>, _: &mut std::task::Context<'_>) -> bool {
            false
        }

        fn lingered(&mut self, _: &mut Context<Self>) {
            let _ = self.rung.send(Instant::now());
        }

        fn lingers(&mut self) -> bool {
            let Some((left, told)) = &mut self.looks else {
                return true;
            };
            let looks = *left > 0;
            *left = left.saturating_sub(1);
            let _ = told.send(looks);
            looks
        }
    }

    /// Sets the state's timer, each instant in turn.
    #[derive(Message)]
    #[rtype(result = "()")]
    struct Set(Vec<Option<Instant>>);

    impl Handler<Set> for Clock {
        type Result = ();

        fn handle(&mut self, msg: Set, ctx: &mut Context<Self>) {
            for at in msg.0 {
                Alarm::set(self, at, ctx);
            }
        }
    }

    /// The next ring, if one comes within `within`.
    async fn ring(
        rung: &mut mpsc::UnboundedReceiver<Instant>,
        within: Duration,
    ) -> Option<Instant> {
        actix_rt::time::timeout(within, rung.recv())
            .await
            .ok()
            .flatten()
    }

    /// A timer set lazily rings when asked, neither at the earlier instant its sleep was left
    /// set for nor never; one moved earlier rings at the earlier instant. (The breaks: ringing
    /// whenever the sleep fires rings at 60 ms; a sleep that fired early and is not set again
    /// never rings; a sleep not moved earlier rings at 3 s, not within 1 s.)
    #[actix_rt::test]
    async fn a_lazy_timer_rings_when_asked() {
        let (tx, mut rung) = mpsc::unbounded_channel();
        let clock = Clock {
            alarm: Alarm::default(),
            rung: tx,
            looks: None,
        }
        .start();
        let t0 = Instant::now();
        let (early, asked) = (
            t0 + Duration::from_millis(60),
            t0 + Duration::from_millis(250),
        );
        clock
            .send(Set(vec![Some(early), None, Some(asked)]))
            .await
            .unwrap();
        let at = ring(&mut rung, Duration::from_secs(5)).await;
        let at = at.expect("the timer never rang");
        assert!(at >= asked, "rang {:?} early", asked - at);
        assert_eq!(ring(&mut rung, Duration::from_millis(100)).await, None);

        let t1 = Instant::now();
        let (late, soon) = (t1 + Duration::from_secs(3), t1 + Duration::from_millis(80));
        clock.send(Set(vec![Some(late), Some(soon)])).await.unwrap();
        let at = ring(&mut rung, Duration::from_secs(1)).await;
        let at = at.expect("the timer moved earlier did not ring within 1 s");
        assert!(at >= soon);
    }

    /// How many more times its linger's timer is looked at, and when it fires by.
    type Linger = (u32, Option<Instant>);

    /// Takes its `Linger`s from a stream spawned after the ringer, as a crowd's wake-ups are: in
    /// the pass that takes one, the ringer was polled already.
    #[derive(Message)]
    #[rtype(result = "()")]
    struct Listen(mpsc::UnboundedReceiver<Linger>);

    impl Handler<Listen> for Clock {
        type Result = ();

        fn handle(&mut self, Listen(rx): Listen, ctx: &mut Context<Self>) {
            let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|linger| (linger, rx))
            });
            ctx.add_stream(stream);
        }
    }

    impl StreamHandler<Linger> for Clock {
        fn handle(&mut self, (looks, by): Linger, ctx: &mut Context<Self>) {
            if let Some((left, _)) = &mut self.looks {
                *left = looks;
            }
            if let Some(at) = by {
                Alarm::linger_by(self, at, ctx);
            }
        }
    }

    /// A linger's timer that fires while the actor is busy (not looked at, its wake spent) is
    /// seen once it is set again for a later instant, from another of the actor's futures: the
    /// actor does not linger forever. The set-up is read from what the ringer did, not timed:
    /// one look registers the timer, the next wake is its firing, not looked at (a timer that
    /// fired before its one look rang then, and the set-up is made again with a longer delay).
    /// (The break: a timer set earlier and registered, taken as still pending when set again,
    /// is not polled, and nothing wakes the actor any more.)
    #[actix_rt::test]
    async fn a_linger_timer_fired_while_busy_rings_once_set_again() {
        let (tx, mut rung) = mpsc::unbounded_channel();
        let (looked, mut looks) = mpsc::unbounded_channel();
        let clock = Clock {
            alarm: Alarm::default(),
            rung: tx,
            looks: Some((0, looked)),
        }
        .start();
        // The ringer first (the state's timer, far off), then the stream.
        let far = Instant::now() + Duration::from_secs(3600);
        clock.send(Set(vec![Some(far)])).await.unwrap();
        let (lingers, rx) = mpsc::unbounded_channel();
        clock.send(Listen(rx)).await.unwrap();
        let mut delay = Duration::from_millis(50);
        loop {
            lingers.send((1, Some(Instant::now() + delay))).unwrap();
            // Its one look (earlier asks, before the stream's item, were not looks) ...
            while !looks.recv().await.unwrap() {}
            // ... then the next wake: the timer fired, not looked at, or it rang at the look.
            assert!(!looks.recv().await.unwrap());
            if ring(&mut rung, Duration::ZERO).await.is_none() {
                break;
            }
            delay *= 2;
        }
        // Lingering again, set for a later instant than the one it fired at.
        let later = Instant::now() + Duration::from_millis(50);
        lingers.send((u32::MAX, Some(later))).unwrap();
        let at = ring(&mut rung, Duration::from_secs(10)).await;
        assert!(at.is_some(), "the linger's timer never rang");
    }
}
