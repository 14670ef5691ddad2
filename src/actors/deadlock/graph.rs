//! The waits-for graph, pure: its nodes are owners (tasks, or scopes); an owner waiting for a
//! lock has an edge to every owner holding it in this manager. A cycle means that none of its
//! owners will ever proceed. The graph finds one when it closes (a wait begins, or a waited-for
//! lock gains a holder) and answers a [`Verdict`]; the detector (`deadlock/mod.rs`) carries it
//! out. No actix, tokio or Redis here, so the rules are tested without a runtime; the one
//! blocking rule, [`blocks`], serves the cross-process probe (`deadlock/probe.rs`) too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::actors::lost::Claim;
use crate::actors::name::WaiterId;
use crate::config::Deadlocks;
use crate::error::{Owner, Site};
use crate::protocol::LockKind;

/// A group lock's members, sorted: what its wait waits for and its hold holds, each a field
/// of the group's hash. Shared: a wait and a hold of one handle have one copy.
pub(crate) type Members = Arc<[String]>;

/// Whether a hold of kind `held` blocks a wait of kind `waiting` for the same lock:
/// always when it is another holder's; when it is the waiting holder's own, only a read hold
/// under a write wait (a read-write lock's reader cannot upgrade: Redisson lets the writer
/// read, not the reader write). A request of a holder that holds the lock otherwise re-enters
/// it, waiting only for a round trip under way.
///
/// A group lock's wait waits for each of its members' owners: a group hold of another holder
/// blocks it only when they `share` a member (asked only then); the holder's own re-enters.
/// A group lock and a lock of another kind on one key are in no edge (they are different
/// data in one hash: neither's script reads the other's fields as holds).
pub(crate) fn blocks(
    waiting: LockKind,
    held: LockKind,
    same_holder: bool,
    share: impl FnOnce() -> bool,
) -> bool {
    match (waiting == LockKind::Group, held == LockKind::Group) {
        (true, true) => !same_holder && share(),
        (false, false) => !same_holder || (waiting == LockKind::Write && held == LockKind::Read),
        _ => false,
    }
}

/// Whether two sorted member lists share a member: one merge, linear in their lengths (two
/// groups of 1,000 members compare in 2,000 steps, not a million).
pub(crate) fn share(a: &[String], b: &[String]) -> bool {
    let (mut i, mut j) = (0, 0);
    while let (Some(x), Some(y)) = (a.get(i), b.get(j)) {
        match x.cmp(y) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => return true,
        }
    }
    false
}

/// Whether a group member list (sorted) has `member`.
pub(crate) fn has_member(members: &[String], member: &str) -> bool {
    members.binary_search_by(|m| m.as_str().cmp(member)).is_ok()
}

/// Which wait: waiter `waiter` of the per-name actor `actor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct WaitId {
    pub actor: u64,
    pub waiter: WaiterId,
}

/// One wait: an owner's request for a lock, queued in a lock actor. `via` is how the detector
/// reaches that actor (`()` where nobody is asked, as in the tests).
#[derive(Clone, Debug)]
pub(crate) struct Wait<P> {
    pub owner: Owner,
    pub id: WaitId,
    /// The lock's key.
    pub name: Arc<str>,
    pub kind: LockKind,
    /// Its holder field: what it re-enters rather than waits for.
    pub holder: Arc<str>,
    /// A group lock's members (sorted): the fields it waits for; `None` for other kinds.
    pub members: Option<Members>,
    /// Where the caller's code asked for it, for the cycle's message.
    pub site: Option<Site>,
    pub since: Instant,
    pub via: P,
    /// What the graph has made of it so far.
    pub marks: Marks,
}

/// A wait's marks: in a cycle being confirmed, or reported already (`Deadlocks::Report`):
/// not looked at again until that ends.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Marks {
    suspected: bool,
    reported: bool,
}

/// One hold of a name, as its actor reports it.
#[derive(Clone, Debug)]
pub(crate) struct Hold {
    pub owner: Owner,
    /// Its holder field, `<client id>:<n>`.
    pub holder: Arc<str>,
    pub kind: LockKind,
    /// A group lock's members (sorted): the fields it holds; `None` for other kinds.
    pub members: Option<Members>,
    /// Whether a grant of it still claims it.
    pub claim: Arc<dyn Claim>,
}

impl Hold {
    /// Whether this hold is one that `wait` waits for: claimed, and blocking by [`blocks`].
    fn blocks<P>(&self, wait: &Wait<P>) -> bool {
        self.claim.is_claimed()
            && blocks(wait.kind, self.kind, self.holder == wait.holder, || match (
                &wait.members,
                &self.members,
            ) {
                (Some(a), Some(b)) => share(a, b),
                _ => false,
            })
    }
}

/// What the graph found, for the detector to carry out.
#[derive(Debug)]
pub(crate) enum Verdict<P> {
    /// A cycle closed, by these waits (marked suspected): each wait's actor is to confirm it
    /// still waits before [`Graph::judge`] decides.
    Confirm(Vec<Wait<P>>),
    /// A cycle confirmed: its youngest wait first, taken out of the graph, to be failed.
    Break(Vec<Wait<P>>),
    /// A cycle confirmed, to be reported only (`Deadlocks::Report`), youngest wait first.
    Report(Vec<Wait<P>>),
}

/// Where a wait is in the graph: its owner and its index among that owner's waits.
type At = (Owner, usize);

/// The graph of one manager's lock waits.
pub(crate) struct Graph<P> {
    policy: Deadlocks,
    /// Each owner's waits now (one, unless it waits in several branches at once).
    waits: FxHashMap<Owner, Vec<Wait<P>>>,
    /// The holds of each lock name waited for, per actor (the kinds of one name may be served
    /// by more than one).
    holders: FxHashMap<Arc<str>, Vec<(u64, Vec<Hold>)>>,
}

impl<P: Clone> Graph<P> {
    pub(crate) fn new(policy: Deadlocks) -> Self {
        Self {
            policy,
            waits: FxHashMap::default(),
            holders: FxHashMap::default(),
        }
    }

    /// A wait began: it may close a cycle.
    pub(crate) fn wait_began(&mut self, wait: Wait<P>) -> Option<Verdict<P>> {
        let owner = wait.owner;
        self.waits.entry(owner).or_default().push(wait);
        self.look_from(owner)
    }

    /// Wait `id` of `owner` is over (answered, gone, or broken).
    pub(crate) fn wait_ended(&mut self, owner: Owner, id: WaitId) {
        if let Some(waits) = self.waits.get_mut(&owner) {
            waits.retain(|w| w.id != id);
            if waits.is_empty() {
                self.waits.remove(&owner);
            }
        }
    }

    /// The holds of `name` in actor `actor` now (empty: none, or nobody waits for it any
    /// more). An owner new among them may close cycles through a wait for `name`.
    pub(crate) fn holders(
        &mut self,
        name: &Arc<str>,
        actor: u64,
        holds: Vec<Hold>,
    ) -> Vec<Verdict<P>> {
        // A new cycle runs through a new holder, and on from it only if it waits itself: a
        // hand-off to an owner that waits for nothing else (the usual one) needs no search.
        let searched = {
            let old = self
                .holders
                .get(name)
                .and_then(|slots| slots.iter().find(|(a, _)| *a == actor))
                .map_or(&[][..], |(_, holds)| holds.as_slice());
            holds.iter().any(|h| {
                self.waits.contains_key(&h.owner)
                    && !old
                        .iter()
                        .any(|o| o.owner == h.owner && o.holder == h.holder)
            })
        };
        let slots = self.holders.entry(name.clone()).or_default();
        let before = slots.iter().position(|(a, _)| *a == actor);
        match (before, holds.is_empty()) {
            (Some(i), true) => {
                slots.swap_remove(i);
            }
            (Some(i), false) => slots[i].1 = holds,
            (None, true) => {}
            (None, false) => slots.push((actor, holds)),
        }
        if slots.is_empty() {
            self.holders.remove(name);
        }
        if !searched {
            return Vec::new();
        }
        // Every new edge ends at an added owner and starts at a waiter of `name`.
        let waiting: Vec<Owner> = self
            .waits
            .iter()
            .filter(|(_, waits)| waits.iter().any(|w| w.name == *name))
            .map(|(owner, _)| *owner)
            .collect();
        waiting
            .into_iter()
            .filter_map(|owner| self.look_from(owner))
            .collect()
    }

    /// Looks for a cycle through `start`'s waits; one found (and not under confirmation, or
    /// reported already) is marked suspected and given to be confirmed.
    fn look_from(&mut self, start: Owner) -> Option<Verdict<P>> {
        let path = self.cycle_from(start)?;
        if path.iter().all(|&at| self.wait(at).marks.suspected) {
            return None; // being confirmed already
        }
        if self.policy == Deadlocks::Report && path.iter().all(|&at| self.wait(at).marks.reported) {
            return None;
        }
        let mut cycle = Vec::with_capacity(path.len());
        for at in path {
            let wait = self.wait_mut(at)?;
            wait.marks.suspected = true;
            cycle.push(wait.clone());
        }
        Some(Verdict::Confirm(cycle))
    }

    /// The cycle of waits `cycle` (a [`Verdict::Confirm`]'s) was asked about: `still`, when each
    /// wait's actor said it still waits. Only if so, and the cycle still closes, is it broken
    /// at its youngest wait (the one that closed it, or one begun after the others), or
    /// reported. Whatever comes of it, its waits may be suspected again.
    pub(crate) fn judge(&mut self, cycle: &[Wait<P>], still: bool) -> Option<Verdict<P>> {
        for wait in cycle {
            let waits = self.waits.get_mut(&wait.owner).into_iter().flatten();
            for w in waits.filter(|w| w.id == wait.id) {
                w.marks.suspected = false;
            }
        }
        let mut path = cycle
            .iter()
            .map(|w| self.find(w.owner, w.id))
            .collect::<Option<Vec<At>>>()
            .filter(|path| still && self.closes(path))?;
        let youngest = (0..path.len()).max_by_key(|&i| self.wait(path[i]).since)?;
        path.rotate_left(youngest);
        let mut cycle: Vec<Wait<P>> = path.iter().map(|&at| self.wait(at).clone()).collect();
        match self.policy {
            Deadlocks::Break => {
                cycle[0] = self.take(path[0])?;
                Some(Verdict::Break(cycle))
            }
            Deadlocks::Report => {
                for &at in &path {
                    if let Some(wait) = self.wait_mut(at) {
                        wait.marks.reported = true;
                    }
                }
                Some(Verdict::Report(cycle))
            }
            Deadlocks::Off => None,
        }
    }

    /// A cycle through other processes, found by following wait `id` of `owner` (its youngest
    /// wait), whose actor confirmed it still waits: broken (the wait taken out) or reported
    /// once, as an in-process cycle's would be. The verdict holds that one wait.
    pub(crate) fn judge_across(&mut self, owner: Owner, id: WaitId) -> Option<Verdict<P>> {
        let at = self.find(owner, id)?;
        match self.policy {
            Deadlocks::Break => Some(Verdict::Break(vec![self.take(at)?])),
            Deadlocks::Report => {
                let wait = self.wait_mut(at)?;
                if std::mem::replace(&mut wait.marks.reported, true) {
                    return None;
                }
                Some(Verdict::Report(vec![wait.clone()]))
            }
            Deadlocks::Off => None,
        }
    }

    /// The waits begun at least `older_than` before `now`: what this manager publishes for
    /// other processes to follow (`deadlock/probe.rs`).
    pub(crate) fn long_waits(&self, older_than: Duration, now: Instant) -> Vec<Wait<P>> {
        self.waits
            .values()
            .flatten()
            .filter(|w| now.saturating_duration_since(w.since) >= older_than)
            .cloned()
            .collect()
    }

    /// Whether a cycle is being confirmed.
    #[cfg(test)]
    pub(crate) fn confirming(&self) -> bool {
        self.waits.values().flatten().any(|w| w.marks.suspected)
    }

    /// How many waits were reported.
    #[cfg(test)]
    pub(crate) fn reported(&self) -> usize {
        self.waits
            .values()
            .flatten()
            .filter(|w| w.marks.reported)
            .count()
    }

    /// Takes the wait at `at` out of the graph.
    fn take(&mut self, (owner, i): At) -> Option<Wait<P>> {
        let waits = self.waits.get_mut(&owner)?;
        if i >= waits.len() {
            return None;
        }
        let wait = waits.swap_remove(i);
        if waits.is_empty() {
            self.waits.remove(&owner);
        }
        Some(wait)
    }

    fn wait(&self, (owner, i): At) -> &Wait<P> {
        &self.waits[&owner][i]
    }

    fn wait_mut(&mut self, (owner, i): At) -> Option<&mut Wait<P>> {
        self.waits.get_mut(&owner)?.get_mut(i)
    }

    /// Where wait `id` of `owner` is now, if still in the graph.
    fn find(&self, owner: Owner, id: WaitId) -> Option<At> {
        let i = self.waits.get(&owner)?.iter().position(|w| w.id == id)?;
        Some((owner, i))
    }

    /// Whether each wait of `path` is still blocked by a hold of the next step's owner, the
    /// last by one of the first's.
    fn closes(&self, path: &[At]) -> bool {
        path.iter().enumerate().all(|(n, &step)| {
            let next = path[(n + 1) % path.len()].0;
            self.blockers(self.wait(step)).any(|owner| owner == next)
        })
    }

    /// The owners whose holds `wait` waits for.
    fn blockers<'a>(&'a self, wait: &'a Wait<P>) -> impl Iterator<Item = Owner> + 'a {
        self.holders
            .get(&wait.name)
            .into_iter()
            .flatten()
            .flat_map(|(_, holds)| holds.iter())
            .filter(|hold| hold.blocks(wait))
            .map(|hold| hold.owner)
    }

    /// A cycle of waits through `start`: each step an owner and the index of its wait that
    /// leads to the next step's owner (a holder of that wait's name); the last leads back to
    /// `start`. Depth first, each owner entered once: linear in the graph's edges.
    fn cycle_from(&self, start: Owner) -> Option<Vec<At>> {
        // Most waits wait for owners that wait for nothing: no cycle, and nothing allocated.
        let onward = self.waits.get(&start)?.iter().any(|w| {
            self.blockers(w)
                .any(|o| o != start && self.waits.contains_key(&o))
        });
        if !onward {
            return None;
        }
        let mut seen: FxHashSet<Owner> = FxHashSet::default();
        seen.insert(start);
        let mut stack: Vec<Frame> = Vec::new();
        let mut next = Some((start, 0));
        loop {
            if let Some((owner, wait)) = next.take()
                && let Some(mut frame) = self.frame(owner, wait)
            {
                if stack.is_empty() {
                    // A wait for a lock its own owner holds (through another handle) is no
                    // cycle by itself: it may be another branch of the same task (`join!`),
                    // which will let it go; or a probe with a timeout. Left to its wait.
                    frame.holders.retain(|h| *h != start);
                }
                let closes = frame.holders.contains(&start);
                stack.push(frame);
                if closes {
                    return Some(stack.iter().map(|f| (f.owner, f.wait)).collect());
                }
            }
            let top = stack.last_mut()?;
            match top.holders.pop() {
                Some(holder) => {
                    if seen.insert(holder) {
                        next = Some((holder, 0));
                    }
                }
                // Every holder of this wait tried: the owner's next wait, if it has one.
                None => {
                    let done = stack.pop()?;
                    next = Some((done.owner, done.wait + 1));
                }
            }
        }
    }

    /// `owner`'s wait number `wait`, with the holders of its name to try; `None` past its last.
    fn frame(&self, owner: Owner, wait: usize) -> Option<Frame> {
        let wait_ = self.waits.get(&owner)?.get(wait)?;
        let holders = self.blockers(wait_).collect();
        Some(Frame {
            owner,
            wait,
            holders,
        })
    }
}

/// One step of the search: `owner`'s wait number `wait`, and the holders of its name not
/// tried yet.
struct Frame {
    owner: Owner,
    wait: usize,
    holders: Vec<Owner>,
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[derive(Debug)]
    struct Flag(AtomicBool);

    impl Claim for Flag {
        fn is_claimed(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }

    fn claim(claimed: bool) -> Arc<Flag> {
        Arc::new(Flag(AtomicBool::new(claimed)))
    }

    fn hold(owner: u64, kind: LockKind, holder: &str, claim: Arc<Flag>) -> Hold {
        Hold {
            owner: Owner::Task(owner),
            holder: holder.into(),
            kind,
            members: None,
            claim,
        }
    }

    fn wait(owner: u64, name: &str, kind: LockKind, holder: &str, waiter: WaiterId) -> Wait<()> {
        Wait {
            owner: Owner::Task(owner),
            id: WaitId { actor: 1, waiter },
            name: name.into(),
            kind,
            holder: holder.into(),
            members: None,
            site: None,
            since: Instant::now(),
            via: (),
            marks: Marks::default(),
        }
    }

    /// A graph, and a lock actor as it answers: whether its waiters still wait.
    struct Bench {
        graph: Graph<()>,
        /// The waiters whose callers are gone.
        gone: Vec<WaiterId>,
        /// What the verdicts came to: broken waits, and cycles reported.
        broken: Vec<(WaiterId, Vec<Owner>)>,
        reports: usize,
    }

    impl Bench {
        fn new(policy: Deadlocks) -> Self {
            Self {
                graph: Graph::new(policy),
                gone: Vec::new(),
                broken: Vec::new(),
                reports: 0,
            }
        }

        fn wait(&mut self, owner: u64, name: &str, waiter: WaiterId) {
            let verdict = self.graph.wait_began(wait(
                owner,
                name,
                LockKind::Reentrant,
                &format!("h{waiter}"),
                waiter,
            ));
            self.carry_out(verdict.into_iter().collect());
        }

        fn hold(&mut self, name: &str, owner: u64, claim: Arc<Flag>) {
            let holder = format!("held by {owner}");
            let verdicts = self.graph.holders(
                &name.into(),
                1,
                vec![hold(owner, LockKind::Reentrant, &holder, claim)],
            );
            self.carry_out(verdicts);
        }

        /// As the detector does: each cycle confirmed by asking its waits' actor.
        fn carry_out(&mut self, verdicts: Vec<Verdict<()>>) {
            for verdict in verdicts {
                match verdict {
                    Verdict::Confirm(cycle) => {
                        let still = cycle.iter().all(|w| !self.gone.contains(&w.id.waiter));
                        let judged = self.graph.judge(&cycle, still);
                        self.carry_out(judged.into_iter().collect());
                    }
                    Verdict::Break(cycle) => self
                        .broken
                        .push((cycle[0].id.waiter, cycle.iter().map(|w| w.owner).collect())),
                    Verdict::Report(_) => self.reports += 1,
                }
            }
            assert!(!self.graph.confirming());
        }
    }

    #[test]
    fn the_one_blocking_rule() {
        use LockKind::*;
        let never = || -> bool { panic!("members asked of a wait that is no group's") };
        // Another holder's hold blocks, whatever the kinds.
        assert!(blocks(Reentrant, Reentrant, false, never));
        assert!(blocks(Read, Write, false, never));
        // The holder's own: only a read under a write (no upgrade).
        assert!(blocks(Write, Read, true, never));
        assert!(!blocks(Write, Write, true, never));
        assert!(!blocks(Read, Write, true, never));
        assert!(!blocks(Reentrant, Reentrant, true, never));
        assert!(!blocks(Fair, Fair, true, never));
        // A group hold blocks a group wait of another holder only through a shared member; the
        // holder's own re-enters; a group and another kind on one key are in no edge.
        assert!(blocks(Group, Group, false, || true));
        assert!(!blocks(Group, Group, false, || false));
        assert!(!blocks(Group, Group, true, || true));
        assert!(!blocks(Reentrant, Group, false, never));
        assert!(!blocks(Group, Reentrant, false, never));
    }

    fn members(names: &[&str]) -> Members {
        let mut m: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        m.sort();
        m.into()
    }

    #[test]
    fn members_are_shared_by_one_merge() {
        assert!(share(&members(&["a", "c", "e"]), &members(&["b", "e"])));
        assert!(!share(
            &members(&["a", "c", "e"]),
            &members(&["b", "d", "f"])
        ));
        assert!(!share(&members(&[]), &members(&["a"])));
        assert!(has_member(&members(&["m1", "m2", "m3"]), "m2"));
        assert!(!has_member(&members(&["m1", "m3"]), "m2"));
        // 1,000 against 1,000, disjoint but interleaved, and sharing only their last.
        let evens: Vec<String> = (0..1000).map(|i| format!("{:05}", 2 * i)).collect();
        let odds: Vec<String> = (0..1000).map(|i| format!("{:05}", 2 * i + 1)).collect();
        assert!(!share(&evens, &odds));
        let mut last = odds.clone();
        last.push("99999".into());
        let mut evens_last = evens.clone();
        evens_last.push("99999".into());
        assert!(share(&evens_last, &last));
    }

    /// A group lock's wait and hold on group `g`.
    fn group_wait(owner: u64, of: &[&str], waiter: WaiterId) -> Wait<()> {
        let mut w = wait(owner, "g", LockKind::Group, &format!("g{owner}"), waiter);
        w.members = Some(members(of));
        w
    }

    fn group_hold(owner: u64, of: &[&str]) -> Hold {
        let mut h = hold(owner, LockKind::Group, &format!("g{owner}"), claim(true));
        h.members = Some(members(of));
        h
    }

    #[test]
    fn a_cycle_through_a_group_lock_runs_through_a_shared_member_only() {
        // Owner 1 holds g{m1, m2} and waits for x; owner 2 holds x and waits for g{m2, m3}:
        // m2 is shared, a cycle.
        let mut g: Graph<()> = Graph::new(Deadlocks::Break);
        g.holders(&"g".into(), 1, vec![group_hold(1, &["m1", "m2"])]);
        g.holders(
            &"x".into(),
            2,
            vec![hold(2, LockKind::Reentrant, "x2", claim(true))],
        );
        assert!(
            g.wait_began(wait(1, "x", LockKind::Reentrant, "g1", 10))
                .is_none()
        );
        assert!(matches!(
            g.wait_began(group_wait(2, &["m2", "m3"], 20)),
            Some(Verdict::Confirm(c)) if c.len() == 2
        ));
        // The same, but owner 2 waits for g{m3, m4}: no member shared, no edge, no cycle.
        let mut g: Graph<()> = Graph::new(Deadlocks::Break);
        g.holders(&"g".into(), 1, vec![group_hold(1, &["m1", "m2"])]);
        g.holders(
            &"x".into(),
            2,
            vec![hold(2, LockKind::Reentrant, "x2", claim(true))],
        );
        g.wait_began(wait(1, "x", LockKind::Reentrant, "g1", 10));
        assert!(g.wait_began(group_wait(2, &["m3", "m4"], 20)).is_none());
    }

    #[test]
    fn a_cycle_of_two_breaks_the_wait_that_closed_it() {
        let mut b = Bench::new(Deadlocks::Break);
        b.hold("x", 1, claim(true));
        b.hold("y", 2, claim(true));
        b.wait(1, "y", 10);
        assert!(b.broken.is_empty());
        b.wait(2, "x", 20);
        assert_eq!(
            b.broken,
            vec![(20, vec![Owner::Task(2), Owner::Task(1)])],
            "the youngest wait first, then the cycle in order"
        );
        // The broken wait left the graph: nothing more to break.
        b.hold("x", 1, claim(true));
        assert_eq!(b.broken.len(), 1);
    }

    #[test]
    fn a_cycle_closed_by_a_new_holder_is_found_too() {
        let mut b = Bench::new(Deadlocks::Break);
        b.hold("y", 2, claim(true));
        b.wait(1, "y", 10);
        b.wait(2, "x", 20);
        assert!(b.broken.is_empty());
        // Owner 1 comes to hold x (granted elsewhere while it waits in a branch).
        b.hold("x", 1, claim(true));
        assert_eq!(b.broken.len(), 1);
    }

    #[test]
    fn a_wait_whose_caller_has_gone_closes_no_cycle() {
        let mut b = Bench::new(Deadlocks::Break);
        b.hold("x", 1, claim(true));
        b.hold("y", 2, claim(true));
        // Owner 1 dropped its request for y; its actor has not reported it yet.
        b.gone.push(10);
        b.wait(1, "y", 10);
        b.wait(2, "x", 20);
        assert!(b.broken.is_empty());
    }

    #[test]
    fn a_hold_let_go_closes_no_cycle() {
        let mut b = Bench::new(Deadlocks::Break);
        let x = claim(true);
        b.hold("x", 1, x.clone());
        b.hold("y", 2, claim(true));
        b.wait(1, "y", 10);
        // Owner 1 dropped its guard of x: being released in the background.
        x.0.store(false, Ordering::SeqCst);
        b.wait(2, "x", 20);
        assert!(b.broken.is_empty());
    }

    #[test]
    fn a_hold_let_go_while_the_cycle_is_confirmed_breaks_nothing() {
        let mut g: Graph<()> = Graph::new(Deadlocks::Break);
        let x = claim(true);
        g.holders(
            &"x".into(),
            1,
            vec![hold(1, LockKind::Reentrant, "a", x.clone())],
        );
        g.holders(
            &"y".into(),
            1,
            vec![hold(2, LockKind::Reentrant, "b", claim(true))],
        );
        assert!(
            g.wait_began(wait(1, "y", LockKind::Reentrant, "a", 10))
                .is_none()
        );
        let Some(Verdict::Confirm(cycle)) =
            g.wait_began(wait(2, "x", LockKind::Reentrant, "b", 20))
        else {
            panic!("no cycle found");
        };
        x.0.store(false, Ordering::SeqCst);
        assert!(
            g.judge(&cycle, true).is_none(),
            "the cycle no longer closes"
        );
        assert!(!g.confirming());
    }

    #[test]
    fn report_only_breaks_nothing_and_reports_a_cycle_once() {
        let mut b = Bench::new(Deadlocks::Report);
        b.hold("x", 1, claim(true));
        b.hold("y", 2, claim(true));
        b.wait(1, "y", 10);
        b.wait(2, "x", 20);
        assert!(b.broken.is_empty());
        assert_eq!(b.reports, 1);
        assert_eq!(b.graph.reported(), 2);
        // A holder published again changes nothing: the same cycle is not looked at again.
        b.hold("x", 1, claim(true));
        assert_eq!(b.reports, 1);
    }

    #[test]
    fn a_wait_for_a_lock_its_own_owner_holds_is_no_cycle() {
        let mut g: Graph<()> = Graph::new(Deadlocks::Break);
        let held = |kind| vec![hold(1, kind, "h", claim(true))];
        // A re-entry of the holder (queued behind a round trip) waits for nobody.
        assert!(
            g.holders(&"rw".into(), 1, held(LockKind::Reentrant))
                .is_empty()
        );
        assert!(
            g.wait_began(wait(1, "rw", LockKind::Reentrant, "h", 1))
                .is_none()
        );
        g.wait_ended(
            Owner::Task(1),
            WaitId {
                actor: 1,
                waiter: 1,
            },
        );
        // A reader that waits to write, or another handle of the same task: maybe another
        // branch of the task (`join!`) that will let go. Left to its wait.
        assert!(g.holders(&"rw".into(), 1, held(LockKind::Read)).is_empty());
        assert!(
            g.wait_began(wait(1, "rw", LockKind::Write, "h", 2))
                .is_none()
        );
        assert!(
            g.wait_began(wait(1, "rw", LockKind::Reentrant, "other", 3))
                .is_none()
        );
    }

    #[test]
    fn a_search_finds_the_cycle_through_the_owner_that_waits_in_two_branches() {
        // Owner 1 waits for y (held by 3, who waits for nothing) and for z (held by 2, who
        // waits for x, held by 1).
        let mut g: Graph<()> = Graph::new(Deadlocks::Break);
        let w = |owner, name, waiter| wait(owner, name, LockKind::Reentrant, "waiter", waiter);
        g.waits
            .insert(Owner::Task(1), vec![w(1, "y", 0), w(1, "z", 1)]);
        g.waits.insert(Owner::Task(2), vec![w(2, "x", 2)]);
        for (name, owner) in [("x", 1), ("y", 3), ("z", 2)] {
            let holds = vec![hold(owner, LockKind::Reentrant, "held", claim(true))];
            g.holders.insert(name.into(), vec![(1, holds)]);
        }
        assert_eq!(
            g.cycle_from(Owner::Task(1)),
            Some(vec![(Owner::Task(1), 1), (Owner::Task(2), 0)])
        );
        assert_eq!(g.cycle_from(Owner::Task(3)), None);
    }

    #[test]
    fn a_cycle_across_processes_is_broken_or_reported_once() {
        let id = WaitId {
            actor: 1,
            waiter: 7,
        };
        let mut g: Graph<()> = Graph::new(Deadlocks::Report);
        g.wait_began(wait(1, "x", LockKind::Reentrant, "a", 7));
        assert!(matches!(
            g.judge_across(Owner::Task(1), id),
            Some(Verdict::Report(_))
        ));
        assert!(
            g.judge_across(Owner::Task(1), id).is_none(),
            "reported once"
        );
        let mut g: Graph<()> = Graph::new(Deadlocks::Break);
        g.wait_began(wait(1, "x", LockKind::Reentrant, "a", 7));
        assert!(
            matches!(g.judge_across(Owner::Task(1), id), Some(Verdict::Break(w)) if w[0].id == id)
        );
        assert!(
            g.judge_across(Owner::Task(1), id).is_none(),
            "taken out of the graph"
        );
    }
}
