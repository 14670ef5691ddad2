//! `scope`: runs a future only while a hold is held and guaranteed, for every kind of guard.
//!
//! The work is dropped (so it stops at its next await) as soon as the hold is known lost, or
//! when its `valid_until` comes within the margin and no renewal has confirmed it since: by
//! then the key may expire and another holder take it, and the work must already be stopped.

use std::future::Future;
use std::time::{Duration, Instant};

use futures_util::future::select_all;

use crate::actors::name::lost::LostSignal;
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
    Held(Option<Instant>),
    Lost,
    Expiring,
}

impl Watched<'_> {
    /// Lost, expiring, or held until when (`None`: never expires).
    fn state(&self, now: Instant) -> State {
        let held: Vec<&LostSignal> = self
            .holds
            .iter()
            .copied()
            .filter(|h| !h.is_lost())
            .collect();
        if held.len() < self.quorum.max(1) {
            return State::Lost;
        }
        // Each held member's stop instant; the composition holds while `quorum` of them do,
        // so it stops at the quorum-th latest.
        let mut stops: Vec<Option<Instant>> = held
            .iter()
            .map(|h| {
                h.confirmed().map(|c| {
                    let margin = self.margin.unwrap_or(c.ttl / DEFAULT_SCOPE_MARGIN_DIVISOR);
                    c.valid_until().checked_sub(margin).unwrap_or(now)
                })
            })
            .collect();
        // `None` (never expires) sorts first; reversed, the latest come first.
        stops.sort_unstable_by(|a, b| match (a, b) {
            (None, None) => std::cmp::Ordering::Equal,
            (None, Some(_)) => std::cmp::Ordering::Less,
            (Some(_), None) => std::cmp::Ordering::Greater,
            (Some(a), Some(b)) => b.cmp(a),
        });
        let own = self.deadline.map(|d| {
            d.checked_sub(self.margin.unwrap_or_default())
                .unwrap_or(now)
        });
        let stop = match (stops[self.quorum.max(1) - 1], own) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match stop {
            Some(stop) if now >= stop => State::Expiring,
            stop => State::Held(stop),
        }
    }

    /// Runs `fut` while the holds are held and guaranteed.
    pub(crate) async fn run<F: Future>(self, fut: F) -> Result<F::Output, LockError> {
        let mut fut = std::pin::pin!(fut);
        loop {
            let stop = match self.state(Instant::now()) {
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
                    Some(stop) => tokio::time::sleep_until(stop.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                out = &mut fut => return Ok(out),
                _ = changed => {}
                () = sleep => {}
            }
        }
    }
}
