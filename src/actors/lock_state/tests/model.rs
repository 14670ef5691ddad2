//! A model of Redis as the scripts of one reentrant, fenced, read-write or fair lock see it
//! (`protocol.md`): the holder counts of the lock hash (a writer's field is `<holder>:write`),
//! its `mode`, its PTTL, the token counter, a fair lock's queue and deadlines, the unlock
//! messages published, and the request latches (`latch.lua`, one per field). A read hold's own timeout key is not modelled: the
//! remaining readers are taken as live when a reader leaves. Time is the caller's: the model only compares
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
    /// Field → count: the lock hash. Empty: no key.
    pub counts: BTreeMap<Arc<str>, u32>,
    /// A read-write lock's `mode` (`Read` or `Write`); `None` for other kinds or no key.
    pub mode: Option<LockKind>,
    /// When the key expires (its PTTL); `None` with no key.
    pub expires: Option<Instant>,
    /// The fenced lock's counter.
    pub token: u64,
    /// Request latches, one per holder: holder → (request id, reply, expiry).
    latches: BTreeMap<Arc<str>, (u64, Reply, Instant)>,
    latch_ttl: Duration,
    /// Unlock messages published and not yet delivered.
    pub published: usize,
    /// A fair lock's queue (oldest first) and each queued holder's deadline.
    pub queue: Vec<Arc<str>>,
    deadlines: BTreeMap<Arc<str>, Instant>,
    /// A fair lock's messages not yet delivered: the waiter each is for.
    pub woken: Vec<Arc<str>>,
    fenced: bool,
}

impl Redis {
    pub fn new(settings: &Settings, fenced: bool) -> Self {
        Self {
            counts: BTreeMap::new(),
            mode: None,
            expires: None,
            token: 0,
            latches: BTreeMap::new(),
            latch_ttl: latch_ttl(settings),
            published: 0,
            queue: Vec::new(),
            deadlines: BTreeMap::new(),
            woken: Vec::new(),
            fenced,
        }
    }

    /// Expires the key and the latches whose time has come.
    pub fn tick(&mut self, now: Instant) {
        if self.expires.is_some_and(|at| at <= now) {
            self.clear();
        }
        self.latches.retain(|_, (_, _, at)| *at > now);
    }

    /// The holder's count (0: no field).
    pub fn count(&self, holder: &str) -> u32 {
        self.counts.get(holder).copied().unwrap_or(0)
    }

    /// The count of a holder's hold of `kind` (0: no field).
    pub fn held(&self, holder: &str, kind: LockKind) -> u32 {
        self.count(&kind.field(holder))
    }

    fn clear(&mut self) {
        self.counts.clear();
        self.mode = None;
        self.expires = None;
    }

    /// The key is deleted (a force unlock, or a failover that lost it).
    pub fn delete(&mut self) {
        if !self.counts.is_empty() {
            self.clear();
            self.published += 1;
        }
    }

    /// The watchdog's renewal of one hold: `true` while the holder's field is there. A read
    /// hold's (`renew_read.lua`) only lengthens the PTTL: another reader's longer lease needs it.
    pub fn renew(&mut self, holder: &str, now: Instant, timeout: Duration) -> bool {
        self.tick(now);
        if self.counts.contains_key(holder) {
            let reader = self.mode.is_some() && !holder.ends_with(":write");
            self.expires = match self.expires {
                Some(at) if reader && at > now + timeout => Some(at),
                _ => Some(now + timeout),
            };
            true
        } else {
            false
        }
    }

    /// `fair_prune.lua`: queue heads whose deadline passed leave.
    fn prune(&mut self, now: Instant) {
        while let Some(head) = self.queue.first() {
            if self.deadlines.get(head).is_some_and(|at| *at > now) {
                break;
            }
            self.deadlines.remove(head);
            self.queue.remove(0);
        }
    }

    /// Takes `by` off every queued deadline (the waiter ahead left early).
    fn advance_deadlines<'a>(&mut self, who: impl Iterator<Item = &'a Arc<str>>, by: Duration) {
        for holder in who {
            if let Some(at) = self.deadlines.get_mut(holder) {
                *at = at.checked_sub(by).unwrap_or(*at);
            }
        }
    }

    /// `fair_acquire.lua` (after `prune`).
    fn fair_acquire(
        &mut self,
        holder: &Arc<str>,
        ttl: Duration,
        fair: FairArgs,
        now: Instant,
    ) -> Attempt {
        self.prune(now);
        if self.counts.is_empty() && self.queue.first().is_none_or(|h| h == holder) {
            if !self.queue.is_empty() {
                self.queue.remove(0);
            }
            self.deadlines.remove(holder);
            let rest: Vec<Arc<str>> = self.queue.clone();
            self.advance_deadlines(rest.iter(), fair.wait);
            self.expires = Some(now + ttl);
            return self.count_in(holder.clone(), None);
        }
        if self.counts.contains_key(holder) {
            self.expires = Some(now + ttl);
            return self.count_in(holder.clone(), None);
        }
        let pttl = self.expires.map(|at| at.saturating_duration_since(now));
        let until_change = match (pttl, self.queue.first()) {
            (Some(ttl), _) => Some(ttl),
            (None, None) => Some(Duration::ZERO),
            (None, Some(head)) => Some(
                self.deadlines
                    .get(head)
                    .map_or(Duration::ZERO, |at| at.saturating_duration_since(now)),
            ),
        };
        if fair.once {
            return Attempt::Busy { ttl: until_change };
        }
        if let Some(mine) = self.deadlines.get(holder).copied() {
            // Queued, and back: its deadline moves on.
            let at = self.queue.iter().position(|h| h == holder);
            let base = match at {
                Some(at) if at > 0 => self.deadlines.get(&self.queue[at - 1]).copied(),
                _ => None,
            }
            .unwrap_or(now + pttl.unwrap_or(Duration::ZERO));
            let deadline = base + fair.wait;
            if deadline > mine {
                self.deadlines.insert(holder.clone(), deadline);
            }
            return Attempt::Busy { ttl: until_change };
        }
        let ttl = match self.queue.last() {
            Some(last) => self
                .deadlines
                .get(last)
                .map_or(Duration::ZERO, |at| at.saturating_duration_since(now)),
            None => pttl.unwrap_or(Duration::ZERO),
        };
        self.deadlines.insert(holder.clone(), now + ttl + fair.wait);
        self.queue.push(holder.clone());
        Attempt::Busy { ttl: Some(ttl) }
    }

    /// `fair_leave.lua`: whether the holder was queued.
    fn fair_leave(&mut self, holder: &Arc<str>, wait: Duration) -> bool {
        let Some(at) = self.queue.iter().position(|h| h == holder) else {
            self.deadlines.remove(holder);
            return false;
        };
        let behind: Vec<Arc<str>> = self.queue[at + 1..].to_vec();
        self.advance_deadlines(behind.iter(), wait);
        self.queue.remove(at);
        self.deadlines.remove(holder);
        if at == 0 && self.counts.is_empty() {
            self.wake_head();
        }
        true
    }

    /// A fair lock's release publishes to the waiter at the head of its queue.
    fn wake_head(&mut self) {
        if let Some(head) = self.queue.first() {
            self.woken.push(head.clone());
        }
    }

    fn acquire(
        &mut self,
        kind: LockKind,
        holder: &Arc<str>,
        ttl: Duration,
        now: Instant,
    ) -> Attempt {
        let busy = Attempt::Busy {
            ttl: self.expires.map(|at| at.saturating_duration_since(now)),
        };
        let field: Arc<str> = kind.field(holder).into();
        match kind {
            LockKind::Read => {
                let writer = self.counts.contains_key(&*LockKind::Write.field(holder));
                if self.counts.is_empty() {
                    self.mode = Some(LockKind::Read);
                    self.expires = Some(now + ttl);
                } else if self.mode == Some(LockKind::Read) || writer {
                    self.expires = self.expires.max(Some(now + ttl));
                } else {
                    return busy;
                }
                return self.count_in(field, None);
            }
            LockKind::Write => {
                if self.counts.is_empty() {
                    self.mode = Some(LockKind::Write);
                    self.expires = Some(now + ttl);
                } else if self.mode == Some(LockKind::Write) && self.counts.contains_key(&field) {
                    self.expires = self.expires.map(|at| at + ttl);
                } else {
                    return busy;
                }
                return self.count_in(field, None);
            }
            _ => {}
        }
        if !self.counts.is_empty() && !self.counts.contains_key(holder) {
            return busy;
        }
        self.expires = Some(now + ttl);
        let token = self.fenced.then(|| {
            self.token += 1;
            self.token
        });
        self.count_in(field, token)
    }

    /// One more hold of `field`, as the scripts reply it.
    fn count_in(&mut self, field: Arc<str>, token: Option<u64>) -> Attempt {
        let count = self.counts.entry(field).or_default();
        *count += 1;
        Attempt::Acquired {
            token,
            fresh: *count == 1,
        }
    }

    fn release(&mut self, kind: LockKind, holder: &str, lease: Duration, now: Instant) -> Released {
        if kind == LockKind::Fair {
            // `fair_release.lua`: a free lock wakes its queue's head all the same.
            self.prune(now);
            if self.counts.is_empty() {
                self.wake_head();
                return Released::NotHeld;
            }
        }
        let field = kind.field(holder);
        let Some(n) = self.counts.get_mut(&*field) else {
            return Released::NotHeld;
        };
        *n -= 1;
        let left = *n;
        match kind {
            // `read_release.lua`: the key stays while readers remain, or a writer in write mode.
            LockKind::Read => {
                if left == 0 {
                    self.counts.remove(&*field);
                }
                let reply = if left == 0 {
                    Released::Unlocked
                } else {
                    Released::StillHeld
                };
                let readers = self.counts.keys().any(|f| !f.ends_with(":write"));
                if readers || (!self.counts.is_empty() && self.mode == Some(LockKind::Write)) {
                    return reply;
                }
            }
            // `write_release.lua`: the writer's own reads keep the key, in read mode.
            LockKind::Write => {
                if left > 0 {
                    self.expires = Some(now + lease);
                    return Released::StillHeld;
                }
                self.counts.remove(&*field);
                if !self.counts.is_empty() {
                    self.mode = Some(LockKind::Read);
                    return Released::Unlocked;
                }
            }
            _ => {
                if left > 0 {
                    self.expires = Some(now + lease);
                    return Released::StillHeld;
                }
            }
        }
        self.clear();
        if kind == LockKind::Fair {
            self.wake_head();
        } else {
            self.published += 1;
        }
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
        self.clear();
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
        if let (Some(latch), Some(field)) = (op.latch(), latch_field(op))
            && let Some((id, reply, _)) = self.latches.get(&*field)
            && *id == latch.id
        {
            if let Op::Acquire { holder, kind, .. } = op
                && self.held(holder, *kind) == 0
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
                kind,
                holder,
                ttl,
                latch,
                ..
            } => {
                let a = match (kind, op) {
                    (LockKind::Fair, Op::Acquire { fair, .. }) => {
                        self.fair_acquire(holder, *ttl, *fair, now)
                    }
                    _ => self.acquire(*kind, holder, *ttl, now),
                };
                if matches!(a, Attempt::Acquired { .. }) {
                    let field = kind.field(holder).into();
                    self.latch(&field, latch.id, Some(Reply::Acquire(a)), now);
                }
                Outcome::Acquire(Ok(a))
            }
            Op::Release {
                kind,
                holder,
                lease,
                latch,
            } => {
                let r = HandedOff::No(self.release(*kind, holder, *lease, now));
                let field = kind.field(holder).into();
                match r {
                    HandedOff::No(Released::NotHeld | Released::Unlocked) => {
                        self.latch(&field, latch.id, None, now)
                    }
                    r => self.latch(&field, latch.id, Some(Reply::Release(r)), now),
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
            Op::LeaveQueue { holder, wait } => {
                self.prune(now);
                Outcome::LeaveQueue(Ok(self.fair_leave(holder, *wait)))
            }
            Op::Settle {
                kind,
                holder,
                target,
                lease,
            } => {
                while self.held(holder, *kind) > *target {
                    self.release(*kind, holder, *lease, now);
                }
                Outcome::Settle(Ok(self.held(holder, *kind)))
            }
            Op::Shutdown { leave, release } => {
                for (holder, wait) in leave {
                    self.fair_leave(holder, *wait);
                }
                for ((holder, kind), lease) in release {
                    while self.held(holder, *kind) > 0 {
                        self.release(*kind, holder, *lease, now);
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

/// Whose latch a request uses: its holder's field (a hand-off's next holder's).
fn latch_field(op: &Op) -> Option<String> {
    match op {
        Op::Acquire { holder, kind, .. } | Op::Release { holder, kind, .. } => {
            Some(kind.field(holder))
        }
        Op::HandOff { to, kind, .. } => Some(kind.field(to)),
        _ => None,
    }
}
