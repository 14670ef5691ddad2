//! `scope`: runs a future only while a hold is held and guaranteed, for every kind of guard.
//!
//! The work is dropped (so it stops at its next await) as soon as the hold is known lost, or
//! when its `valid_until` comes within the margin and no renewal has confirmed it since: by
//! then the key may expire and another holder take it, and the work must already be stopped.
//! Both are checked before every poll of the work, so a thread that stalled past that instant
//! never runs the work's next step. The instant is kept on two clocks: the monotonic one, and
//! the system clock, which goes on counting while the host is suspended (when the monotonic
//! clock stands still on Linux, while Redis's TTL runs on).

use std::future::Future;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};

use futures_util::future::select_all;

use crate::actors::lost::LostSignal;
use crate::error::LockError;

/// The default margin of `scope`: a tenth of the hold's TTL (3 s of the default 30 s watchdog
/// timeout). A watchdog hold is renewed every third of the timeout, so a healthy hold never
/// comes that close; a hold whose renewals fail does, well before its key can expire.
const DEFAULT_SCOPE_MARGIN_DIVISOR: u32 = 10;

/// What a scope watches: the holds, how many of them must stay held (1, all, a majority),
/// and any deadline of their own (a RedLock's validity).
pub(crate) struct Watched<'a> {
    pub name: &'a str,
    pub holds: Vec<&'a LostSignal>,
    pub quorum: usize,
    pub deadline: Option<Instant>,
    /// `None`: [`DEFAULT_SCOPE_MARGIN_DIVISOR`] of each hold's TTL.
    pub margin: Option<Duration>,
}

enum State {
    Held(Option<Stop>),
    Lost,
    Expiring,
}

/// When a scope stops: the monotonic instant, and the same by the system clock for holds Redis
/// confirmed (which a host suspend does not stop, where the monotonic clock stands still).
#[derive(Clone, Copy)]
struct Stop {
    at: Instant,
    wall: Option<SystemTime>,
}

impl Stop {
    fn passed(&self, now: Instant, wall_now: SystemTime) -> bool {
        now >= self.at || self.wall.is_some_and(|wall| wall_now >= wall)
    }
}

impl Watched<'_> {
    /// Lost, expiring, or held until when (`None`: never expires).
    fn state(&self, now: Instant, wall_now: SystemTime) -> State {
        let held: Vec<&LostSignal> = self
            .holds
            .iter()
            .copied()
            .filter(|h| !h.is_lost())
            .collect();
        if held.len() < self.quorum.max(1) {
            return State::Lost;
        }
        // Each held member's stop; the composition holds while `quorum` of them do, so it
        // stops at the quorum-th latest.
        let mut stops: Vec<Option<Stop>> = held
            .iter()
            .map(|h| {
                h.confirmed().map(|c| {
                    let margin = self.margin.unwrap_or(c.ttl / DEFAULT_SCOPE_MARGIN_DIVISOR);
                    Stop {
                        at: c.valid_until().checked_sub(margin).unwrap_or(now),
                        wall: Some(c.valid_until_wall().checked_sub(margin).unwrap_or(wall_now)),
                    }
                })
            })
            .collect();
        // `None` (never expires) sorts first; reversed, the latest come first.
        stops.sort_unstable_by(|a, b| match (a, b) {
            (None, None) => std::cmp::Ordering::Equal,
            (None, Some(_)) => std::cmp::Ordering::Less,
            (Some(_), None) => std::cmp::Ordering::Greater,
            (Some(a), Some(b)) => b.at.cmp(&a.at),
        });
        let own = self.deadline.map(|d| Stop {
            at: d
                .checked_sub(self.margin.unwrap_or_default())
                .unwrap_or(now),
            wall: None,
        });
        let stop = match (stops[self.quorum.max(1) - 1], own) {
            (Some(a), Some(b)) if b.at < a.at => Some(Stop {
                at: b.at,
                wall: a.wall,
            }),
            (a, b) => a.or(b),
        };
        match stop {
            Some(stop) if stop.passed(now, wall_now) => State::Expiring,
            stop => State::Held(stop),
        }
    }

    /// Whether the hold may be gone now: fewer than `quorum` members held, or `stop` passed.
    /// Cheaper than [`state`](Self::state): it runs before every poll of the work.
    fn may_be_gone(&self, stop: Option<Stop>) -> bool {
        let lost = self.holds.iter().filter(|h| h.is_lost()).count();
        lost > self.holds.len().saturating_sub(self.quorum.max(1))
            || stop.is_some_and(|stop| stop.passed(Instant::now(), SystemTime::now()))
    }

    /// Runs `fut` while the holds are held and guaranteed.
    ///
    /// The clocks and the lost signals are read before **every** poll of the work, not only
    /// when a timer or a signal wakes this loop: a thread that stalled past the stop instant
    /// (a paused process, a blocked runtime thread) finds, when it runs again, both the work's
    /// awaited event and the deadline ready, and must not let the work take its next step.
    pub(crate) async fn run<F: Future>(self, fut: F) -> Result<F::Output, LockError> {
        let mut fut = std::pin::pin!(fut);
        loop {
            let stop = match self.state(Instant::now(), SystemTime::now()) {
                State::Lost => {
                    return Err(LockError::HoldLost {
                        name: self.name.to_owned(),
                    });
                }
                State::Expiring => {
                    return Err(LockError::HoldExpiring {
                        name: self.name.to_owned(),
                    });
                }
                State::Held(stop) => stop,
            };
            let changed = select_all(self.holds.iter().map(|h| Box::pin(h.changed())));
            let sleep = async {
                match stop {
                    Some(stop) => tokio::time::sleep_until(stop.at.into()).await,
                    None => std::future::pending().await,
                }
            };
            // `None`: the hold may be gone; the loop's next turn says how.
            let work = std::future::poll_fn(|cx| {
                if self.may_be_gone(stop) {
                    return Poll::Ready(None);
                }
                fut.as_mut().poll(cx).map(Some)
            });
            tokio::select! {
                biased;
                out = work => if let Some(out) = out {
                    return Ok(out);
                },
                _ = changed => {}
                () = sleep => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actors::lost::Validity;

    fn watched<'a>(hold: &'a LostSignal) -> Watched<'a> {
        Watched {
            name: "n",
            holds: vec![hold],
            quorum: 1,
            deadline: None,
            margin: None,
        }
    }

    /// After a host suspend the monotonic clock has not moved while the system clock (and
    /// Redis's TTL) ran on: the hold is taken as expiring by the system clock alone.
    #[test]
    fn a_suspend_that_the_monotonic_clock_missed_stops_the_scope() {
        let validity = Validity::first(None);
        let hold = validity.signal();
        let (sent, ttl) = (Instant::now(), Duration::from_secs(30));
        // Confirmed just now by the monotonic clock, but 40 s ago by the system clock: the
        // host slept 40 s between the two readings.
        let wall = SystemTime::now() - Duration::from_secs(40);
        validity.confirm_at(sent, wall, ttl);
        assert!(matches!(
            watched(&hold).state(Instant::now(), SystemTime::now()),
            State::Expiring
        ));
        assert!(watched(&hold).may_be_gone(Some(Stop {
            at: sent + ttl,
            wall: Some(wall + ttl),
        })));
        // Both clocks agreeing, the same hold is held for most of its TTL.
        validity.confirm_at(Instant::now(), SystemTime::now(), ttl);
        let State::Held(Some(stop)) = watched(&hold).state(Instant::now(), SystemTime::now())
        else {
            panic!("held")
        };
        assert!(!watched(&hold).may_be_gone(Some(stop)));
    }
}
