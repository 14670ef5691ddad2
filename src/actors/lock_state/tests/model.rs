//! A model of Redis as the scripts of one reentrant or fenced lock see it (`protocol.md`): the
//! holder counts of the lock hash, its PTTL, the token counter, the unlock messages published,
//! and the request latches (`latch.lua`). Time is the caller's: the model only compares
//! instants, so a simulation can run hours of virtual time in microseconds. Shared by the
//! property test and the simulation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::*;

/// What one latched request replied, kept as `latch.lua` keeps it.
#[derive(Clone, Debug)]
enum Reply {
    Acquire(Attempt),
    Release(HandedOff),
}

/// How long a latch lives: the watchdog timeout and four response timeouts, as `Commands`
/// sets it (the model's response timeout is a second).
pub(super) fn latch_ttl(settings: &Settings) -> Duration {
    settings.watchdog_timeout + 4 * Duration::from_secs(1)
}

#[derive(Debug)]
pub(super) struct Redis {
    /// Holder → count: the lock hash. Empty: no key.
    pub counts: BTreeMap<Arc<str>, u32>,
    /// When the key expires (its PTTL); `None` with no key.
    pub expires: Option<Instant>,
    /// The fenced lock's counter.
    pub token: u64,
    /// Request latches, one per holder: holder → (request id, reply, expiry).
    latches: BTreeMap<Arc<str>, (u64, Reply, Instant)>,
    latch_ttl: Duration,
    /// Unlock messages published and not yet delivered.
    pub published: usize,
    fenced: bool,
}

impl Redis {
    pub fn new(settings: &Settings, fenced: bool) -> Self {
        Self {
            counts: BTreeMap::new(),
            expires: None,
            token: 0,
            latches: BTreeMap::new(),
            latch_ttl: latch_ttl(settings),
            published: 0,
            fenced,
        }
    }

    /// Expires the key and the latches whose time has come.
    pub fn tick(&mut self, now: Instant) {
        if self.expires.is_some_and(|at| at <= now) {
            self.counts.clear();
            self.expires = None;
        }
        self.latches.retain(|_, (_, _, at)| *at > now);
    }

    /// The holder's count (0: no field).
    pub fn count(&self, holder: &str) -> u32 {
        self.counts.get(holder).copied().unwrap_or(0)
    }

    /// The one holder, when the lock is held.
    pub fn owner(&self) -> Option<&Arc<str>> {
        self.counts.keys().next()
    }

    /// The key is deleted (a force unlock, or a failover that lost it).
    pub fn delete(&mut self) {
        if !self.counts.is_empty() {
            self.counts.clear();
            self.expires = None;
            self.published += 1;
        }
    }

    /// The watchdog's renewal of one hold: `true` while the holder's field is there.
    pub fn renew(&mut self, holder: &str, now: Instant, timeout: Duration) -> bool {
        self.tick(now);
        if self.counts.contains_key(holder) {
            self.expires = Some(now + timeout);
            true
        } else {
            false
        }
    }

    fn acquire(&mut self, holder: &Arc<str>, ttl: Duration, now: Instant) -> Attempt {
        if !self.counts.is_empty() && !self.counts.contains_key(holder) {
            let left = self.expires.map(|at| at.saturating_duration_since(now));
            return Attempt::Busy { ttl: left };
        }
        *self.counts.entry(holder.clone()).or_default() += 1;
        self.expires = Some(now + ttl);
        let token = self.fenced.then(|| {
            self.token += 1;
            self.token
        });
        Attempt::Acquired { token }
    }

    fn release(&mut self, holder: &str, lease: Duration, now: Instant) -> Released {
        let Some(n) = self.counts.get_mut(holder) else {
            return Released::NotHeld;
        };
        *n -= 1;
        if *n > 0 {
            self.expires = Some(now + lease);
            return Released::StillHeld;
        }
        self.counts.clear();
        self.expires = None;
        self.published += 1;
        Released::Unlocked
    }

    fn hand_off(
        &mut self,
        (from, lease): (&str, Duration),
        (to, to_lease): (&Arc<str>, Duration),
        now: Instant,
    ) -> HandedOff {
        let Some(n) = self.counts.get_mut(from) else {
            return HandedOff::No(Released::NotHeld);
        };
        *n -= 1;
        if *n > 0 {
            self.expires = Some(now + lease);
            return HandedOff::No(Released::StillHeld);
        }
        self.counts.clear();
        self.counts.insert(to.clone(), 1);
        self.expires = Some(now + to_lease);
        let token = self.fenced.then(|| {
            self.token += 1;
            self.token
        });
        HandedOff::To { token }
    }

    /// Runs one round trip as its script would, at `now`.
    pub fn run(&mut self, op: &Op, now: Instant) -> Outcome {
        self.tick(now);
        if let (Some(latch), Some(holder)) = (op.latch(), latch_holder(op))
            && let Some((id, reply, _)) = self.latches.get(holder)
            && *id == latch.id
        {
            if let Op::Acquire { holder, .. } = op
                && !self.counts.contains_key(holder)
            {
                // Acquired then, lost since: as a busy attempt.
                let ttl = Some(
                    self.expires
                        .map_or(Duration::ZERO, |at| at.saturating_duration_since(now)),
                );
                return Outcome::Acquire(Ok(Attempt::Busy { ttl }));
            }
            if let (Op::HandOff { to, .. }, Reply::Release(HandedOff::To { .. })) = (op, reply)
                && !self.counts.contains_key(to)
            {
                // Handed off then, lost since: as a release that freed the lock.
                return Outcome::Release(Ok(HandedOff::No(Released::Unlocked)));
            }
            return match reply.clone() {
                Reply::Acquire(a) => Outcome::Acquire(Ok(a)),
                Reply::Release(r) => Outcome::Release(Ok(r)),
            };
        }
        match op {
            Op::Acquire {
                holder, ttl, latch, ..
            } => {
                let a = self.acquire(holder, *ttl, now);
                if matches!(a, Attempt::Acquired { .. }) {
                    self.latch(holder, latch.id, Some(Reply::Acquire(a)), now);
                }
                Outcome::Acquire(Ok(a))
            }
            Op::Release {
                holder,
                lease,
                latch,
                ..
            } => {
                let r = HandedOff::No(self.release(holder, *lease, now));
                match r {
                    HandedOff::No(Released::NotHeld | Released::Unlocked) => {
                        self.latch(holder, latch.id, None, now)
                    }
                    r => self.latch(holder, latch.id, Some(Reply::Release(r)), now),
                }
                Outcome::Release(Ok(r))
            }
            Op::HandOff {
                from,
                lease,
                to,
                to_lease,
                latch,
                ..
            } => {
                let r = self.hand_off((from, *lease), (to, *to_lease), now);
                if r != HandedOff::No(Released::StillHeld) {
                    self.latches.remove(from);
                }
                if r != HandedOff::No(Released::NotHeld) {
                    self.latch(to, latch.id, Some(Reply::Release(r)), now);
                }
                Outcome::Release(Ok(r))
            }
            Op::LeaveQueue { .. } => Outcome::LeaveQueue(Ok(true)),
            Op::Settle {
                holder,
                target,
                lease,
                ..
            } => {
                while self.count(holder) > *target {
                    self.release(holder, *lease, now);
                }
                Outcome::Settle(Ok(self.count(holder)))
            }
            Op::Shutdown { release, .. } => {
                for ((holder, _), lease) in release {
                    while self.count(holder) > 0 {
                        self.release(holder, *lease, now);
                    }
                }
                Outcome::Shutdown
            }
        }
    }

    /// Sets the holder's latch, or deletes it (`None`: its last hold was released).
    fn latch(&mut self, holder: &Arc<str>, id: u64, reply: Option<Reply>, now: Instant) {
        match reply {
            Some(reply) => {
                let at = now + self.latch_ttl;
                self.latches.insert(holder.clone(), (id, reply, at));
            }
            None => {
                self.latches.remove(holder);
            }
        }
    }
}

/// Whose latch a request uses: its holder's (a hand-off's next holder's).
fn latch_holder(op: &Op) -> Option<&Arc<str>> {
    match op {
        Op::Acquire { holder, .. } | Op::Release { holder, .. } => Some(holder),
        Op::HandOff { to, .. } => Some(to),
        _ => None,
    }
}
