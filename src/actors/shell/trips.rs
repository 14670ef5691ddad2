//! [`Trips`]: a per-name actor's request round trips in flight, each in a slot the actor keeps
//! between requests. Actix boxes every future spawned on an actor (an allocation and its free
//! per round trip, two per uncontended pair) and gives each spawn a second pass through the
//! actor's context; a slot is allocated once and reused, and the slots are polled by the
//! actor's ringer (`alarm`), spawned once per stay. Kept slots hold no request: a finished
//! round trip's future is dropped at once.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use actix::prelude::*;

use super::alarm::{Alarm, Alarmed};

/// The round trips in flight, of requests `Q` with outcomes `O`.
pub(crate) struct Trips<Q, O> {
    slots: Box<dyn InFlight<Q, O>>,
    /// How many are in flight: none, and the slots are not polled (no call through `slots`).
    busy: usize,
}

/// An actor whose request round trips run in [`Trips`].
pub(crate) trait Travels: Alarmed {
    type Request;
    type Outcome;

    fn trips(&mut self) -> &mut Trips<Self::Request, Self::Outcome>;

    /// A round trip's outcome, back in the actor.
    fn arrived(&mut self, outcome: Self::Outcome, ctx: &mut Context<Self>);
}

impl<Q: 'static, O: 'static> Trips<Q, O> {
    /// No trip in flight; `trip` makes each request's future.
    pub(crate) fn new<F, Fut>(trip: F) -> Self
    where
        F: Fn(Q) -> Fut + 'static,
        Fut: Future<Output = O> + 'static,
    {
        let slots = Slots {
            trip,
            slots: Vec::new(),
        };
        Self {
            slots: Box::new(slots),
            busy: 0,
        }
    }

    /// Starts `request`'s round trip: its outcome comes to [`Travels::arrived`].
    pub(crate) fn start<A: Travels<Request = Q, Outcome = O>>(
        act: &mut A,
        request: Q,
        ctx: &mut Context<A>,
    ) {
        let trips = act.trips();
        trips.slots.start(request);
        trips.busy += 1;
        Alarm::travel(act, ctx);
    }

    /// Polls the trips in flight and hands each outcome to the actor (a trip started meanwhile
    /// is polled too): whether any is still in flight. The ringer's work ([`Alarmed::travel`]).
    pub(crate) fn drive<A: Travels<Request = Q, Outcome = O>>(
        act: &mut A,
        ctx: &mut Context<A>,
        task: &mut std::task::Context<'_>,
    ) -> bool {
        while act.trips().busy > 0 {
            let trips = act.trips();
            let Poll::Ready(outcome) = trips.slots.poll_next(task) else {
                return true;
            };
            trips.busy -= 1;
            act.arrived(outcome, ctx);
        }
        false
    }
}

/// The slots behind [`Trips`], their future's type erased.
trait InFlight<Q, O> {
    fn start(&mut self, request: Q);

    /// Polls every trip in flight (one at least) until one is done: its outcome. `Pending`
    /// only once every trip in flight was polled.
    fn poll_next(&mut self, task: &mut std::task::Context<'_>) -> Poll<O>;
}

struct Slots<F, Fut> {
    trip: F,
    /// Each slot pinned in its own box, so that the list can grow while trips are in flight.
    slots: Vec<Pin<Box<Option<Fut>>>>,
}

impl<Q, O, F: Fn(Q) -> Fut, Fut: Future<Output = O>> InFlight<Q, O> for Slots<F, Fut> {
    fn start(&mut self, request: Q) {
        let fut = (self.trip)(request);
        match self.slots.iter_mut().find(|slot| slot.is_none()) {
            Some(slot) => slot.set(Some(fut)),
            None => self.slots.push(Box::pin(Some(fut))),
        }
    }

    fn poll_next(&mut self, task: &mut std::task::Context<'_>) -> Poll<O> {
        for slot in &mut self.slots {
            let Some(fut) = slot.as_mut().as_pin_mut() else {
                continue;
            };
            if let Poll::Ready(outcome) = fut.poll(task) {
                slot.set(None);
                return Poll::Ready(outcome);
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::{mpsc, oneshot};

    use super::*;
    use crate::actors::shell::alarm::Alarm;

    /// A trip: one that waits for its outcome, or one done at once.
    enum Trip {
        Wait(oneshot::Receiver<u32>),
        Now(u32),
    }

    async fn go(trip: Trip) -> u32 {
        match trip {
            Trip::Wait(rx) => rx.await.unwrap_or(0),
            Trip::Now(n) => n,
        }
    }

    /// Tells each outcome; outcome 2 starts trip 3 while it is handled.
    struct Traveller {
        trips: Trips<Trip, u32>,
        alarm: Alarm,
        out: mpsc::UnboundedSender<u32>,
    }

    impl Actor for Traveller {
        type Context = Context<Self>;
    }

    /// No timer of its own; it does not stay, so its ringer ends once no trip is in flight.
    impl Alarmed for Traveller {
        fn alarm(&mut self) -> &mut Alarm {
            &mut self.alarm
        }

        fn rang(&mut self, _: std::time::Instant, _: &mut Context<Self>) {}

        fn stays(&mut self) -> bool {
            false
        }

        fn travel(&mut self, ctx: &mut Context<Self>, task: &mut std::task::Context<'_>) -> bool {
            Trips::drive(self, ctx, task)
        }

        fn lingered(&mut self, _: &mut Context<Self>) {}
    }

    impl Travels for Traveller {
        type Request = Trip;
        type Outcome = u32;

        fn trips(&mut self) -> &mut Trips<Trip, u32> {
            &mut self.trips
        }

        fn arrived(&mut self, outcome: u32, ctx: &mut Context<Self>) {
            let _ = self.out.send(outcome);
            if outcome == 2 {
                Trips::start(self, Trip::Now(3), ctx);
            }
        }
    }

    #[derive(Message)]
    #[rtype(result = "()")]
    struct Start(Trip);

    /// Starts its trip from a future spawned after the ringer (as a crowd's deadline does).
    #[derive(Message)]
    #[rtype(result = "()")]
    struct StartLater(Trip);

    impl Handler<StartLater> for Traveller {
        type Result = ();

        fn handle(&mut self, msg: StartLater, ctx: &mut Context<Self>) {
            let later = actix::fut::ready(()).map(move |(), act: &mut Self, ctx| {
                Trips::start(act, msg.0, ctx);
            });
            ctx.spawn(later);
        }
    }

    impl Handler<Start> for Traveller {
        type Result = ();

        fn handle(&mut self, msg: Start, ctx: &mut Context<Self>) {
            Trips::start(self, msg.0, ctx);
        }
    }

    /// Whether the ringer is spawned.
    #[derive(Message)]
    #[rtype(result = "bool")]
    struct Driven;

    impl Handler<Driven> for Traveller {
        type Result = bool;

        fn handle(&mut self, _: Driven, _: &mut Context<Self>) -> bool {
            self.alarm.ringing()
        }
    }

    /// The next outcome told (nothing else wakes the actor meanwhile).
    async fn next(out: &mut mpsc::UnboundedReceiver<u32>) -> u32 {
        let next = actix_rt::time::timeout(Duration::from_secs(5), out.recv());
        next.await.expect("an outcome that never came").unwrap()
    }

    /// Trips in flight together end in whatever order their outcomes come; one started while
    /// an outcome is handled runs (it is polled, so it can wake its actor); once none is in
    /// flight the ringer of an actor that does not stay ends, and a later trip spawns it again;
    /// one started by another of the actor's futures, polled after the ringer, runs too. (The
    /// breaks: a ringer that handles one outcome per wake leaves trip 3 never polled; a trip
    /// started after the ringer's poll that does not wake it leaves trip 5 unpolled; a ringer
    /// whose end is not noted is seen spawned.)
    #[actix_rt::test]
    async fn trips_end_in_any_order_and_one_started_meanwhile_runs() {
        let (tx, mut out) = mpsc::unbounded_channel();
        let addr = Traveller {
            trips: Trips::new(go),
            alarm: Alarm::default(),
            out: tx,
        }
        .start();
        let (tx1, rx1) = oneshot::channel();
        let (tx2, rx2) = oneshot::channel();
        addr.send(Start(Trip::Wait(rx1))).await.unwrap();
        addr.send(Start(Trip::Wait(rx2))).await.unwrap();
        assert!(addr.send(Driven).await.unwrap());
        tx2.send(2).unwrap();
        assert_eq!((next(&mut out).await, next(&mut out).await), (2, 3));
        assert!(addr.send(Driven).await.unwrap(), "trip 1 is in flight");
        addr.send(StartLater(Trip::Now(5))).await.unwrap();
        assert_eq!(next(&mut out).await, 5);
        tx1.send(1).unwrap();
        assert_eq!(next(&mut out).await, 1);
        assert!(!addr.send(Driven).await.unwrap(), "none in flight");
        addr.send(Start(Trip::Now(4))).await.unwrap();
        assert_eq!(next(&mut out).await, 4);
    }
}
