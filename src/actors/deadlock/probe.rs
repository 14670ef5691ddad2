//! [`Probe`]: deadlocks across processes (docs/protocol.md, "Waits for deadlock detection"),
//! an actor on a schedule of its own (supervised). A cycle inside this manager is found by its
//! waits-for graph the moment it closes (`graph.rs`); one through other processes needs what
//! they say of their waits. Every [`PROBE_EVERY`], while a wait of this manager has lasted
//! [`LONG_WAIT`]:
//!
//! 1. **publish**: each such wait's owner, what it waits for and what it holds (asked of every
//!    live lock actor, `HoldsOf`), in this manager's waits hash (`protocol/deadlocks.rs`);
//! 2. **follow** each such wait: the lock's holder fields name the holding client; its waits
//!    hash says which of its owners holds that lock and what that owner waits for (a hold
//!    blocks a wait by the graph's one rule, [`blocks`]); and so on,
//!    up to [`MAX_STEPS`] steps, until a step comes back to the wait followed: a cycle;
//! 3. a cycle's **youngest wait** (by when it began, on the server's clock) is broken, or
//!    reported, by the manager whose wait it is, so each cycle is acted on once: when it is
//!    this manager's, it fails with `LockError::Deadlock` once the same cycle was found by two
//!    probes in a row, every other process on it having written its hash again between them,
//!    and its actor confirms it still waits. Another process's hash may say a wait that ended
//!    since it was written: until its next probe rewrites it (a half-second), or for as long as
//!    that process cannot write at all (cut off from Redis, frozen), up to the hash's TTL. A
//!    wait found again in a hash written after the last probe read it was still there then.
//!
//! With no wait that long it costs nothing but an empty check of the graph each period: no
//! Redis command, and nothing on any acquire's path.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};

use super::graph::{blocks, has_member};
use super::{Detector, Wait};
use crate::actors::messages::{Halt, HoldsOf};
use crate::error::{Cycle, LockError, Owner, Step};
use crate::protocol::{Blocked, Commands, LockKind, Published, group_holder_of, holder_of};

/// How long a wait lasts before this manager publishes it and follows it through other
/// processes.
pub(crate) const LONG_WAIT: Duration = Duration::from_secs(1);
/// How often the long waits are published and followed.
const PROBE_EVERY: Duration = Duration::from_millis(500);
/// How long a published waits hash lives without being written again (a dead process's goes).
const WAITS_TTL: Duration = Duration::from_secs(5);
/// How much later than the one read before a hash's write must be to count as a new one.
/// Writes come a probe period apart; the time of one write, as `read.lua` derives it, can read
/// a millisecond apart from one read to the next (`TIME` against the command's clock).
const REWRITTEN_AFTER: Duration = Duration::from_millis(250);
/// The longest cycle followed, in steps (waits).
const MAX_STEPS: usize = 8;
/// How long a client whose waits hash was over the read bounds (forged?) is not read again
/// at first; doubled each time it is found so again, up to [`MAX_SHUN`].
const FIRST_SHUN: Duration = Duration::from_secs(5);
const MAX_SHUN: Duration = Duration::from_secs(300);

/// The live lock actors of the manager, asked for their waiting owners' holds (the registry's
/// directory; a trait here, since the registry starts the probe).
pub(crate) trait LockActors: Send + Sync {
    fn live(&self) -> Vec<Recipient<HoldsOf>>;
}

/// The actor that publishes and follows this manager's long waits (see the module).
pub(crate) struct Probe {
    commands: Commands,
    detector: Arc<Detector>,
    actors: Arc<dyn LockActors>,
    client: uuid::Uuid,
    /// A probe under way (a slow Redis must not pile them up).
    running: bool,
    /// Set by `Halt`: no more probes.
    halted: bool,
    /// Whether this manager's waits hash may hold something (to delete).
    published: bool,
    /// The user may not write `lockman_waits:*`: cycles through other processes are not looked
    /// for, after one warning (those inside this manager still are).
    off: bool,
    /// The cycles the last probe found whose youngest wait is this manager's, each with when
    /// each step's hash was written: acted on when the next probe finds them again, from
    /// hashes written since.
    suspects: Suspects,
    /// Clients whose waits hash was over the read bounds: not read until then.
    shunned: Shunned,
}

/// Clients not read for a while, by id: until when, and for how long the last time.
type Shunned = FxHashMap<String, (Instant, Duration)>;

/// Cycles found by a probe, with when each step's hash was written (server clock, ms).
type Suspects = FxHashMap<Signature, Vec<u64>>;

/// A cycle, by its steps' clients, owners and names.
type Signature = Vec<(uuid::Uuid, Owner, String)>;

impl Probe {
    pub(crate) fn new(
        commands: Commands,
        detector: Arc<Detector>,
        actors: Arc<dyn LockActors>,
        client: uuid::Uuid,
    ) -> Self {
        Self {
            commands,
            detector,
            actors,
            client,
            running: false,
            halted: false,
            published: false,
            off: false,
            suspects: Suspects::default(),
            shunned: Shunned::default(),
        }
    }

    /// Publishes and follows this manager's long waits (see the module).
    fn probe(&mut self, ctx: &mut Context<Self>) {
        if self.halted || self.running || self.off || !self.detector.is_on() {
            return;
        }
        let long = self.detector.long_waits(LONG_WAIT, Instant::now());
        if long.is_empty() && !self.published {
            return;
        }
        self.running = true;
        let run = Run {
            commands: self.commands.clone(),
            detector: self.detector.clone(),
            actors: self.actors.clone(),
            client: self.client,
        };
        let was_published = self.published;
        let suspects = std::mem::take(&mut self.suspects);
        let shunned = std::mem::take(&mut self.shunned);
        ctx.spawn(
            async move { run.go(long, suspects, shunned, was_published).await }
                .into_actor(self)
                .map(move |(shunned, res), act, _| {
                    act.running = false;
                    act.shunned = shunned;
                    match res {
                        Ok((suspects, published)) => {
                            act.published = published;
                            act.suspects = suspects;
                        }
                        Err(error @ LockError::NoPermission { .. }) => {
                            act.off = true;
                            tracing::warn!(%error, "no permission for lockman_waits:* keys: deadlocks through other processes are not looked for (those within this manager still are)");
                        }
                        Err(error) => tracing::debug!(%error, "deadlock probe failed; again soon"),
                    }
                }),
        );
    }
}

impl Actor for Probe {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(PROBE_EVERY, |act, ctx| act.probe(ctx));
    }
}

impl Supervised for Probe {
    fn restarting(&mut self, _: &mut Context<Self>) {
        self.running = false;
    }
}

impl Handler<Halt> for Probe {
    type Result = ResponseActFuture<Self, ()>;

    /// Stops probing and deletes this manager's waits hash (the lock actors have stopped, so
    /// none is left; a dead manager's expires on its own), then stops.
    fn handle(&mut self, _: Halt, _: &mut Context<Self>) -> Self::Result {
        self.halted = true;
        let waits = self.published.then(|| {
            let id = self.client.hyphenated().to_string();
            (self.commands.clone(), id)
        });
        let forget = async move {
            if let Some((commands, id)) = waits {
                let _ = commands.publish_blocked(&id, Duration::ZERO, &[]).await;
            }
        };
        Box::pin(forget.into_actor(self).map(|(), _, ctx| ctx.stop()))
    }
}

/// One probe: what it needs, off the actor.
struct Run {
    commands: Commands,
    detector: Arc<Detector>,
    actors: Arc<dyn LockActors>,
    client: uuid::Uuid,
}

/// One step of a cycle being followed.
#[derive(Clone, Debug)]
struct Found {
    owner: Owner,
    client: uuid::Uuid,
    service: String,
    /// The lock it waits for (its key) and how.
    name: String,
    kind: String,
    /// Where its code asked for the wait, and its scope's label, as published.
    place: Option<String>,
    label: Option<String>,
    since_ms: u64,
    /// When its client's hash was last written (server clock, ms).
    written_ms: u64,
}

impl Run {
    /// [`run`](Self::run), giving back the clients not to read (whatever came of it).
    async fn go(
        self,
        long: Vec<Wait>,
        suspected: Suspects,
        mut shunned: Shunned,
        was_published: bool,
    ) -> (Shunned, Result<(Suspects, bool), LockError>) {
        let res = self.run(long, suspected, &mut shunned, was_published).await;
        (shunned, res)
    }

    /// Publishes and follows; acts on the cycles `suspected` by the last probe and found again.
    /// Returns the cycles to act on if the next probe finds them too, and whether this
    /// manager's waits hash holds anything now.
    ///
    /// Only the waits of owners that hold a lock are published and followed: a cycle through
    /// an owner leads back to it through something it holds, so one that holds nothing closes
    /// none, and costs no command (a waiter that holds nothing, the usual one, never reads
    /// what other clients wrote).
    async fn run(
        &self,
        mut long: Vec<Wait>,
        suspected: Suspects,
        shunned: &mut Shunned,
        was_published: bool,
    ) -> Result<(Suspects, bool), LockError> {
        let mut suspects = Suspects::default();
        let me = self.client.hyphenated().to_string();
        let mine = self.holding(&mut long).await;
        // How long each has waited, as of now: the server stamps it with its own clock on
        // arrival, so waits of different processes compare by one clock, give or take a
        // one-way trip.
        let mine: Vec<(Blocked, Duration)> = mine
            .into_iter()
            .map(|(b, since)| (b, since.elapsed()))
            .collect();
        if mine.is_empty() && !was_published {
            return Ok((suspects, false));
        }
        let now_ms = self.commands.publish_blocked(&me, WAITS_TTL, &mine).await?;
        let mine: Vec<Blocked> = mine
            .into_iter()
            .map(|(b, waited)| Blocked {
                since_ms: now_ms.saturating_sub(crate::protocol::millis(waited)),
                ..b
            })
            .collect();
        let mut others: FxHashMap<String, Published> = FxHashMap::default();
        others.insert(
            me.clone(),
            Published {
                written_ms: now_ms,
                waits: mine.clone(),
            },
        );
        for (wait, start) in long.iter().zip(&mine) {
            let Some(cycle) = self.follow(start, &me, &mut others, shunned).await? else {
                continue;
            };
            // Only cycles through another process: the graph finds the others itself.
            if cycle.iter().all(|s| s.client == self.client) {
                continue;
            }
            if self.confirmed(&cycle, &suspected, &mut suspects) {
                let steps = cycle.iter().map(|s| self.step(s)).collect();
                self.detector.break_found(wait, Cycle { steps }).await;
            }
        }
        Ok((suspects, !mine.is_empty()))
    }

    /// The waits in `long` whose owners hold a lock here (the others are dropped from it), as
    /// published: each with what its owner holds, and when it began.
    async fn holding(&self, long: &mut Vec<Wait>) -> Vec<(Blocked, Instant)> {
        let mut mine = Vec::with_capacity(long.len());
        if long.is_empty() {
            return mine;
        }
        let owners: Arc<[Owner]> = long.iter().map(|w| w.owner).collect();
        let asked = self.actors.live().into_iter().map(|a| {
            a.send(HoldsOf {
                owners: owners.clone(),
            })
        });
        let mut holds: FxHashMap<Owner, Vec<(String, String)>> = FxHashMap::default();
        for reply in futures_util::future::join_all(asked).await {
            for (owner, name, holder) in reply.unwrap_or_default() {
                holds
                    .entry(owner)
                    .or_default()
                    .push((name.to_string(), holder.to_string()));
            }
        }
        long.retain(|w| holds.get(&w.owner).is_some_and(|h| !h.is_empty()));
        for wait in long.iter() {
            let blocked = Blocked {
                owner: wait.owner,
                service: self.detector.service().to_owned(),
                name: wait.name.to_string(),
                kind: wait.kind.label().to_owned(),
                holder: wait.holder.to_string(),
                since_ms: 0,
                holds: holds.get(&wait.owner).cloned().unwrap_or_default(),
                members: wait.members.clone().unwrap_or_default(),
                place: wait.site.as_ref().map(|s| s.place.to_string()),
                label: wait
                    .site
                    .as_ref()
                    .and_then(|s| s.label.as_deref().map(str::to_owned)),
            };
            mine.push((blocked, wait.since));
        }
        mine
    }

    /// Whether `cycle`, found from a wait of this manager, is this manager's to act on (its
    /// youngest wait is the one followed: a cycle through two of this manager's waits is found
    /// from either) and the last probe found it too (`suspected`), each other client's step of
    /// it read again from a hash rewritten since ([`rewritten`]); it is remembered in
    /// `suspects` for the next probe either way.
    fn confirmed(&self, cycle: &[Found], suspected: &Suspects, suspects: &mut Suspects) -> bool {
        let youngest = cycle.iter().enumerate().max_by(|(_, a), (_, b)| {
            (a.since_ms, a.client, a.owner).cmp(&(b.since_ms, b.client, b.owner))
        });
        if !youngest.is_some_and(|(i, s)| i == 0 && s.client == self.client) {
            return false;
        }
        let signature: Signature = cycle
            .iter()
            .map(|s| (s.client, s.owner, s.name.clone()))
            .collect();
        let written: Vec<u64> = cycle.iter().map(|s| s.written_ms).collect();
        let again = suspected
            .get(&signature)
            .is_some_and(|then| rewritten(cycle, then, self.client));
        suspects.insert(signature, written);
        again
    }

    /// One step of a cycle found, as its error tells it.
    fn step(&self, s: &Found) -> Step {
        Step {
            owner: s.owner,
            client: s.client,
            service: s.service.clone(),
            name: self.detector.given(&s.name).to_owned(),
            kind: s.kind.clone(),
            place: s.place.clone(),
            label: s.label.clone(),
        }
    }

    /// Follows `start`'s wait through the holders of what it waits for, their clients' waits
    /// hashes, and so on: the cycle back to `start`, if there is one within [`MAX_STEPS`].
    /// Depth first; `hashes` caches each client's hash for this probe.
    async fn follow(
        &self,
        start: &Blocked,
        me: &str,
        hashes: &mut FxHashMap<String, Published>,
        shunned: &mut Shunned,
    ) -> Result<Option<Vec<Found>>, LockError> {
        let step = |b: &Blocked, client: &str, hashes: &FxHashMap<String, Published>| Found {
            owner: b.owner,
            client: uuid::Uuid::parse_str(client).unwrap_or_default(),
            service: b.service.clone(),
            name: b.name.clone(),
            kind: b.kind.clone(),
            place: b.place.clone(),
            label: b.label.clone(),
            since_ms: b.since_ms,
            written_ms: hashes.get(client).map_or(0, |h| h.written_ms),
        };
        // Each frame: a step of the path, and the next steps still to try from it.
        let mut path: Vec<(Found, Vec<(String, Blocked)>)> = Vec::new();
        let mut seen: FxHashSet<(String, Owner)> = FxHashSet::default();
        seen.insert((me.to_owned(), start.owner));
        let next = self.next_steps(start, hashes, shunned).await?;
        path.push((step(start, me, hashes), next));
        while let Some((_, next)) = path.last_mut() {
            let Some((client, blocked)) = next.pop() else {
                path.pop();
                continue;
            };
            if client == me && blocked.owner == start.owner {
                // Back at the start: a cycle, unless it never left it (a reader asking to write
                // waits for its own read too): a cycle of one is no deadlock, as in the graph,
                // and the other holders of that lock are still to be followed.
                if path.len() > 1 {
                    return Ok(Some(path.into_iter().map(|(f, _)| f).collect()));
                }
                continue;
            }
            if path.len() >= MAX_STEPS || !seen.insert((client.clone(), blocked.owner)) {
                continue;
            }
            let after = self.next_steps(&blocked, hashes, shunned).await?;
            path.push((step(&blocked, &client, hashes), after));
        }
        Ok(None)
    }

    /// The owners (by client) that hold what `blocked` waits for and themselves wait, as
    /// their hashes say: the steps after it. A lock's hash or a client's waits hash over the
    /// read bounds is not read (it leads nowhere), and that client is not read again for a
    /// while ([`FIRST_SHUN`], doubling up to [`MAX_SHUN`]).
    async fn next_steps(
        &self,
        blocked: &Blocked,
        hashes: &mut FxHashMap<String, Published>,
        shunned: &mut Shunned,
    ) -> Result<Vec<(String, Blocked)>, LockError> {
        let group = blocked.kind == LockKind::Group.label();
        let Some(fields) = self.commands.lock_fields(&blocked.name, group).await? else {
            tracing::debug!(name = ?blocked.name, "deadlock probe: the lock's hash is over the read bounds; not followed");
            return Ok(Vec::new());
        };
        let mut next = Vec::new();
        // A group's holder has a field per member: followed once.
        let mut followed: FxHashSet<&str> = FxHashSet::default();
        for field in &fields {
            let Some((client, holder)) = blocker(blocked, field) else {
                continue;
            };
            if !followed.insert(holder) {
                continue;
            }
            if !hashes.contains_key(client) {
                let read = self.read(client, shunned).await?;
                hashes.insert(client.to_owned(), read);
            }
            let Some(theirs) = hashes.get(client) else {
                continue;
            };
            for b in &theirs.waits {
                if b.holds
                    .iter()
                    .any(|(n, h)| *n == blocked.name && h == holder)
                {
                    next.push((client.to_owned(), b.clone()));
                }
            }
        }
        Ok(next)
    }
}

impl Run {
    /// Client `client`'s waits, unless it is shunned (then none); a hash over the read bounds
    /// reads as none, and shuns the client.
    async fn read(&self, client: &str, shunned: &mut Shunned) -> Result<Published, LockError> {
        let now = Instant::now();
        if shunned.get(client).is_some_and(|(until, _)| *until > now) {
            return Ok(Published::default());
        }
        if let Some(read) = self.commands.read_blocked(client, WAITS_TTL).await? {
            shunned.remove(client);
            return Ok(read);
        }
        let last = shunned.get(client).map(|(_, last)| *last);
        let next = last.map_or(FIRST_SHUN, |d| (d * 2).min(MAX_SHUN));
        if last.is_none() {
            tracing::warn!(
                client,
                "deadlock probe: this client's waits hash is over the read bounds (forged?); not read for a while"
            );
        }
        if shunned.len() >= 1024 {
            shunned.retain(|_, (until, _)| *until > now);
        }
        shunned.insert(client.to_owned(), (now + next, next));
        Ok(Published::default())
    }
}

/// The client and holder whose hold, by the lock hash's field `field`, blocks the wait
/// `blocked`, by the graph's rule: for a group lock's wait, a field
/// `<member>:<holder>:expire_time` of one of its members (each member's holder, whatever else
/// that holder holds of the group); for the other kinds, a holder field ([`blocks_field`]).
fn blocker<'a>(blocked: &Blocked, field: &'a str) -> Option<(&'a str, &'a str)> {
    if blocked.kind == LockKind::Group.label() {
        let (member, client, holder) = group_holder_of(field)?;
        let share = || has_member(&blocked.members, member);
        return blocks(
            LockKind::Group,
            LockKind::Group,
            holder == blocked.holder,
            share,
        )
        .then_some((client, holder));
    }
    let (client, holder) = holder_of(field)?;
    blocks_field(&blocked.kind, field, holder == blocked.holder).then_some((client, holder))
}

/// Whether a hold of the lock, by its hash field `field`, blocks a wait published as of kind
/// `waiting` (its label): the graph's rule. The field says a read-write lock's write hold
/// (`<holder>:write`) from its read holds; in any other kind's hash, every field is a hold of
/// that kind. A label this version does not know (a newer process's) waits as a plain lock.
fn blocks_field(waiting: &str, field: &str, same_holder: bool) -> bool {
    let waiting = LockKind::from_label(waiting).unwrap_or(LockKind::Reentrant);
    let held = match waiting.family() {
        LockKind::Read if field.ends_with(":write") => LockKind::Write,
        LockKind::Read => LockKind::Read,
        other => other,
    };
    blocks(waiting, held, same_holder, || false)
}

/// Whether every step of `cycle` from another client was read from a hash written after the
/// one the last probe read (`then`, in the cycle's order; [`REWRITTEN_AFTER`] later at least):
/// each such wait was still there after that probe. A process that cannot write (cut off from
/// Redis, frozen) never passes, however long its stale hash lives.
fn rewritten(cycle: &[Found], then: &[u64], me: uuid::Uuid) -> bool {
    let after = crate::protocol::millis(REWRITTEN_AFTER);
    cycle.len() == then.len()
        && cycle
            .iter()
            .zip(then)
            .all(|(s, &before)| s.client == me || s.written_ms >= before.saturating_add(after))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(client: uuid::Uuid, written_ms: u64) -> Found {
        Found {
            owner: Owner::Task(1),
            client,
            service: String::new(),
            name: "x".into(),
            kind: "lock".into(),
            place: None,
            label: None,
            since_ms: 0,
            written_ms,
        }
    }

    #[test]
    fn a_hash_field_blocks_a_published_wait_by_the_graphs_rule() {
        let (holder, write) = ("c:1", "c:1:write");
        // Another holder's hold blocks, whatever the kinds.
        assert!(blocks_field("lock", holder, false));
        assert!(blocks_field("read", write, false));
        // The holder's own: only a read under a write.
        assert!(blocks_field("write", holder, true));
        assert!(!blocks_field("write", write, true));
        assert!(!blocks_field("read", write, true));
        assert!(!blocks_field("lock", holder, true));
        assert!(!blocks_field("fair", holder, true));
        assert!(!blocks_field("from a newer version", holder, true));
    }

    #[test]
    fn a_group_field_blocks_a_published_group_wait_through_a_shared_member_only() {
        let (a, b) = (
            "00000000-0000-0000-0000-00000000000a:1",
            "00000000-0000-0000-0000-00000000000b:1",
        );
        let wait = |holder: &str, members: &[&str]| Blocked {
            owner: Owner::Task(1),
            service: String::new(),
            name: "g".into(),
            kind: "group".into(),
            holder: holder.into(),
            since_ms: 0,
            holds: Vec::new(),
            members: members.iter().map(|m| (*m).to_owned()).collect(),
            place: None,
            label: None,
        };
        let field = |member: &str, holder: &str| format!("{member}:{holder}:expire_time");
        // b waits for m2, m3; a holds m1 and m2: m2 blocks, m1 does not.
        let w = wait(b, &["m2", "m3"]);
        assert_eq!(
            blocker(&w, &field("m2", a)),
            Some(("00000000-0000-0000-0000-00000000000a", a))
        );
        assert_eq!(blocker(&w, &field("m1", a)), None);
        // The holder's own member re-enters; the member and count fields name no holder.
        assert_eq!(blocker(&w, &field("m2", b)), None);
        assert_eq!(blocker(&w, "m2"), None);
        assert_eq!(blocker(&w, &format!("m2:{a}:lock_count")), None);
        // A plain wait on the key reads holder fields, as before.
        let plain = Blocked {
            kind: "lock".into(),
            ..wait(b, &[])
        };
        assert_eq!(blocker(&plain, &field("m2", a)), None);
        assert!(blocker(&plain, a).is_some());
    }

    #[test]
    fn a_cycle_is_acted_on_only_through_hashes_written_since_the_last_probe() {
        let (me, east, north) = (
            uuid::Uuid::from_u128(1),
            uuid::Uuid::from_u128(2),
            uuid::Uuid::from_u128(3),
        );
        let then = [100, 1_000, 2_000];
        // Both others wrote again (a probe period later); this manager's own step is never
        // judged by its stamp.
        let cycle = [found(me, 0), found(east, 1_500), found(north, 2_490)];
        assert!(rewritten(&cycle, &then, me));
        // One other's hash is the one read before: it may say a wait that has ended. Its
        // write time, derived from its TTL, may read a millisecond later the second time.
        let stale = [found(me, 150), found(east, 1_500), found(north, 2_001)];
        assert!(!rewritten(&stale, &then, me));
        // A cycle of another shape is not the one suspected.
        assert!(!rewritten(&cycle[..2], &then, me));
    }
}
