//! A model of Redis as the scripts of one reentrant, fenced, read-write, fair or non-reentrant
//! (plain or fair) lock see it (`protocol.md`): the holder counts of the lock hash (a writer's field is `<holder>:write`),
//! its `mode`, its PTTL, the token counter, a fair lock's queue and deadlines and the unlock
//! messages published. Each acquire, release and hand-off checks the counts it expects first, as
//! the scripts do (protocol.md, "Sent again"): one sent again after its first run replies as
//! then. A non-reentrant lock's acquire by a holder Redis counts already is refused with
//! `NON_REENTRANT_REACQUIRE` (`LockError::AlreadyHeld`), changing nothing but what a fair
//! script's prune did before it. A read hold's own timeout key is not modelled: the
//! remaining readers are taken as live when a reader leaves. Time is the caller's: the model only compares
//! instants, so a simulation can run hours of virtual time in microseconds. Shared by the
//! property test and the simulation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::*;
use crate::protocol::{Expect, Refreshed};

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
    /// Unlock messages published and not yet delivered.
    pub published: usize,
    /// A fair lock's queue (oldest first) and each queued holder's deadline.
    pub queue: Vec<Arc<str>>,
    deadlines: BTreeMap<Arc<str>, Instant>,
    /// A fair lock's messages not yet delivered: the waiter each is for.
    pub woken: Vec<Arc<str>>,
    fenced: bool,
    /// Whether the scripts check the counts a request expects (always, but in a test that turns
    /// the check off on purpose, to see the simulation catch it).
    pub check_counts: bool,
}

impl Redis {
    pub(crate) fn new(fenced: bool) -> Self {
        Self {
            counts: BTreeMap::new(),
            mode: None,
            expires: None,
            token: 0,
            published: 0,
            queue: Vec::new(),
            deadlines: BTreeMap::new(),
            woken: Vec::new(),
            fenced,
            check_counts: true,
        }
    }

    /// Expires the key when its time has come.
    pub(crate) fn tick(&mut self, now: Instant) {
        if self.expires.is_some_and(|at| at <= now) {
            self.clear();
        }
    }

    /// A queued holder's deadline.
    pub(crate) fn deadline(&self, holder: &str) -> Option<Instant> {
        self.deadlines.get(holder).copied()
    }

    /// Whether `holder` has a place in the fair queue.
    pub(crate) fn queued(&self, holder: &str) -> bool {
        self.queue.iter().any(|h| &**h == holder)
    }

    /// A place lost (a failover's lost write, a prune while its waiter could not come back).
    pub(crate) fn drop_place(&mut self, holder: &str) {
        self.queue.retain(|h| &**h != holder);
        self.deadlines.remove(holder);
    }

    /// A failover to a replica that still had `holder`'s place: it is queued again at the tail,
    /// its deadline a minute after `since` (an old deadline, still ahead). Whether it was not
    /// queued before.
    pub(crate) fn clone_place_of(&mut self, holder: &str, since: Instant) -> bool {
        if self.queued(holder) {
            return false;
        }
        self.queue.push(holder.into());
        self.deadlines
            .insert(holder.into(), since + Duration::from_secs(60));
        true
    }

    /// The holder's count (0: no field).
    pub(crate) fn count(&self, holder: &str) -> u32 {
        self.counts.get(holder).copied().unwrap_or(0)
    }

    /// The count of a holder's hold of `kind` (0: no field).
    pub(crate) fn held(&self, holder: &str, kind: LockKind) -> u32 {
        self.count(&kind.field(holder))
    }

    fn clear(&mut self) {
        self.counts.clear();
        self.mode = None;
        self.expires = None;
    }

    /// The key is deleted (a force unlock, or a failover that lost it).
    pub(crate) fn delete(&mut self) {
        if !self.counts.is_empty() {
            self.clear();
            self.published += 1;
        }
    }

    /// The watchdog's renewal of one hold: `true` while the holder's field is there. A read
    /// hold's (`renew_read.lua`) only lengthens the PTTL: another reader's longer lease needs it.
    pub(crate) fn renew(&mut self, holder: &str, now: Instant, timeout: Duration) -> bool {
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

    /// `fair_refresh.lua` (after `prune`), step for step: walking the queue in order, each of
    /// `places` still queued gets the come-back rule (its wait after the deadline of the place
    /// ahead, as that one stands now, or for the head after now + the PTTL capped at `cap`),
    /// never an earlier deadline; every place behind one that moved on moves on by as much (the
    /// shift), and a place that did not move ends the shift.
    fn fair_refresh(
        &mut self,
        places: &[(Arc<str>, Duration)],
        cap: Duration,
        now: Instant,
    ) -> Refreshed {
        let pruned = self.prune(now);
        let pttl = self
            .expires
            .map_or(Duration::ZERO, |at| at.saturating_duration_since(now));
        let mut prev: Option<Arc<str>> = None;
        let mut shift = Duration::ZERO;
        for holder in self.queue.clone() {
            let current = self.deadlines.get(&holder).copied();
            let mut deadline = current.map(|at| at + shift);
            if let Some((_, wait)) = places.iter().find(|(h, _)| *h == holder) {
                let base = match &prev {
                    Some(p) => self.deadlines.get(p).copied().unwrap_or(now),
                    None => now + pttl.min(cap),
                };
                if deadline.is_none_or(|d| base + *wait > d) {
                    deadline = Some(base + *wait);
                }
            }
            match (deadline, current) {
                (Some(d), None) => {
                    self.deadlines.insert(holder.clone(), d);
                }
                (Some(d), Some(c)) if d > c => {
                    self.deadlines.insert(holder.clone(), d);
                    shift = d - c;
                }
                (_, Some(_)) => shift = Duration::ZERO,
                (None, None) => {}
            }
            prev = Some(holder);
        }
        self.wake_new_head(pruned, |head| places.iter().any(|(h, _)| h == head));
        Refreshed {
            head: self
                .counts
                .is_empty()
                .then(|| self.queue.first().cloned())
                .flatten(),
            gone: places
                .iter()
                .filter(|(h, _)| !self.queue.contains(h))
                .map(|(h, _)| h.clone())
                .collect(),
        }
    }

    /// `fair_prune.lua`: queue heads whose deadline passed leave. Whether one did (`pruned`).
    fn prune(&mut self, now: Instant) -> bool {
        let mut pruned = false;
        while let Some(head) = self.queue.first() {
            if self.deadlines.get(head).is_some_and(|at| *at > now) {
                break;
            }
            self.deadlines.remove(head);
            self.queue.remove(0);
            pruned = true;
        }
        pruned
    }

    /// After a prune that dropped a head (`pruned`): a free lock's new head is woken unless
    /// `spared` says it is the caller's (`fair_acquire.lua`, `fair_refresh.lua`).
    fn wake_new_head(&mut self, pruned: bool, spared: impl Fn(&Arc<str>) -> bool) {
        if pruned
            && self.counts.is_empty()
            && let Some(head) = self.queue.first()
            && !spared(head)
        {
            self.woken.push(head.clone());
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
        (fair, expect): (FairArgs, u32),
        now: Instant,
    ) -> Attempt {
        let pruned = self.prune(now);
        self.wake_new_head(pruned, |head| head == holder);
        if expect > 0 && !self.counts.contains_key(holder) {
            // A re-entry whose hold is gone: nothing taken.
            return Attempt::Gone;
        }
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
        if let Some(again) = self.sent_again(holder, expect, now + ttl) {
            return again;
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
        let capped = |ttl: Duration| ttl.min(fair.cap);
        if let Some(mine) = self.deadlines.get(holder).copied() {
            // Queued, and back: its deadline moves on.
            let at = self.queue.iter().position(|h| h == holder);
            let base = match at {
                Some(at) if at > 0 => self.deadlines.get(&self.queue[at - 1]).copied(),
                _ => None,
            }
            .unwrap_or(now + capped(pttl.unwrap_or(Duration::ZERO)));
            let deadline = base + fair.wait;
            if deadline > mine {
                self.deadlines.insert(holder.clone(), deadline);
                // Every place behind it moves on as much (`fair_queue.lua`).
                if let Some(at) = at {
                    let shift = deadline - mine;
                    for behind in &self.queue[at + 1..] {
                        if let Some(d) = self.deadlines.get_mut(behind) {
                            *d += shift;
                        }
                    }
                }
            }
            return Attempt::Busy { ttl: until_change };
        }
        let (ttl, ahead) = match self.queue.last() {
            Some(last) => {
                let ttl = self
                    .deadlines
                    .get(last)
                    .map_or(Duration::ZERO, |at| at.saturating_duration_since(now));
                (ttl, ttl)
            }
            None => {
                let ttl = pttl.unwrap_or(Duration::ZERO);
                (ttl, capped(ttl))
            }
        };
        self.deadlines
            .insert(holder.clone(), now + ahead + fair.wait);
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

    /// An acquire sent again after its first run (the field counts one more than `expect`):
    /// replied as then, with the lease set again (a read-write lock's never shortened); `None`
    /// otherwise.
    fn sent_again(&mut self, field: &str, expect: u32, until: Instant) -> Option<Attempt> {
        let count = self.count(field);
        if !self.check_counts || count != expect + 1 {
            return None;
        }
        self.expires = match self.mode {
            Some(_) => self.expires.max(Some(until)),
            None => Some(until),
        };
        Some(Attempt::Acquired {
            token: self.fenced.then_some(self.token),
            fresh: count == 1,
        })
    }

    fn acquire(
        &mut self,
        (kind, holder): (LockKind, &Arc<str>),
        ttl: Duration,
        expect: u32,
        now: Instant,
    ) -> Attempt {
        let busy = Attempt::Busy {
            ttl: self.expires.map(|at| at.saturating_duration_since(now)),
        };
        let field: Arc<str> = kind.field(holder).into();
        if let Some(again) = self.sent_again(&field, expect, now + ttl) {
            return again;
        }
        if expect > 0 && !self.counts.contains_key(&field) {
            // A re-entry whose hold is gone: nothing taken.
            return Attempt::Gone;
        }
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

    /// `nonreentrant_acquire.lua`, `fair_refuse_reentry.lua`: whether the acquire of
    /// non-reentrant `kind` by `holder`, expecting `expect`, is refused. Only a holder that Redis
    /// counts is refused, and not a request sent again that finds its own first run's hold (the
    /// count it expected, plus one), which is answered as then before the refusal.
    fn refuses(&self, kind: LockKind, holder: &str, expect: u32) -> bool {
        let count = self.count(&kind.field(holder));
        kind.is_non_reentrant() && count > 0 && !(self.check_counts && count == expect + 1)
    }

    fn release(
        &mut self,
        (kind, holder): (LockKind, &str),
        lease: Duration,
        expect: u32,
        now: Instant,
    ) -> Released {
        if kind.is_fair() {
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
        if self.check_counts && *n + 1 == expect {
            // Sent again after its first run, which left holds.
            return Released::StillHeld;
        }
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
        if kind.is_fair() {
            self.wake_head();
        } else if !kind.spins() {
            // `spin_release.lua` publishes nothing.
            self.published += 1;
        }
        Released::Unlocked
    }

    fn hand_off(
        &mut self,
        (from, lease): (&str, Duration),
        (to, to_lease): (&Arc<str>, Duration),
        expect: Expect,
        now: Instant,
    ) -> HandedOff {
        if self.check_counts && self.count(to) == expect.to + 1 && self.count(from) == 0 {
            // `hand_off_again.lua`: sent again after its first run.
            self.expires = Some(now + to_lease);
            return HandedOff::To {
                token: self.fenced.then_some(self.token),
            };
        }
        let Some(n) = self.counts.get_mut(from) else {
            return HandedOff::No(Released::NotHeld);
        };
        if self.check_counts && *n + 1 == expect.count {
            return HandedOff::No(Released::StillHeld);
        }
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
    pub(crate) fn run(&mut self, op: &Op, now: Instant) -> Outcome {
        self.tick(now);
        match op {
            Op::Acquire {
                kind,
                holder,
                ttl,
                fair,
                expect,
                ..
            } => {
                if self.refuses(*kind, holder, expect.count) {
                    if kind.is_fair() {
                        // The fair script prunes before it refuses; what it pruned stays
                        // pruned. The key exists, so no new head is woken.
                        self.prune(now);
                    }
                    return Outcome::Acquire(Err(LockError::AlreadyHeld {
                        name: "name".into(),
                    }));
                }
                Outcome::Acquire(Ok(if kind.is_fair() {
                    self.fair_acquire(holder, *ttl, (*fair, expect.count), now)
                } else {
                    self.acquire((*kind, holder), *ttl, expect.count, now)
                }))
            }
            Op::Release {
                kind,
                holder,
                lease,
                expect,
                ..
            } => {
                let r = self.release((*kind, holder), *lease, expect.count, now);
                Outcome::Release(Ok(HandedOff::No(r)))
            }
            Op::HandOff {
                from,
                lease,
                to,
                to_lease,
                expect,
                ..
            } => Outcome::Release(Ok(self.hand_off(
                (from, *lease),
                (to, *to_lease),
                *expect,
                now,
            ))),
            // `fair_leave.lua` has no prune in front.
            Op::LeaveQueue { holder, wait } => {
                Outcome::LeaveQueue(Ok(self.fair_leave(holder, *wait)))
            }
            Op::FairRefresh { places, cap } => {
                Outcome::FairRefresh(Ok(self.fair_refresh(places, *cap, now)))
            }
            Op::Settle {
                kind,
                holder,
                target,
                lease,
                ..
            } => {
                while self.held(holder, *kind) > *target {
                    let expect = self.held(holder, *kind);
                    self.release((*kind, holder), *lease, expect, now);
                }
                Outcome::Settle(Ok(self.held(holder, *kind)))
            }
            Op::Shutdown { leave, release, .. } => {
                for (holder, wait) in leave {
                    self.fair_leave(holder, *wait);
                }
                for ((holder, kind), lease) in release {
                    while self.held(holder, *kind) > 0 {
                        let expect = self.held(holder, *kind);
                        self.release((*kind, holder), *lease, expect, now);
                    }
                }
                Outcome::Shutdown
            }
        }
    }
}
