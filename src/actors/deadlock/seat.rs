//! [`Seat`]: what one lock actor keeps of its place in the waits-for graph — whose each request
//! is, which of its waits are in the graph, whose its holds are, and which of them the graph
//! last learned. A lock actor holds one (none with deadlock detection off; a synchronizer has
//! none) and lends it to the per-name shell as its [`Witness`] (`PerName::parts`), which tells
//! it when a wait begins and ends, when a hold ends, after each event and at the stop; the lock
//! actor tells it whose each request and grant is. It is plain data and methods on its own
//! fields; the shell knows it only as a `Witness` (the shell is above `deadlock/`).

use std::sync::Arc;
use std::time::Instant;

use actix::{Actor, AsyncContext, Context, Handler};
use rustc_hash::FxHashMap;

use super::graph::{self, Hold, Marks, WaitId};
use super::{Asks, Detector};
use crate::actors::lost::Claim;
use crate::actors::messages::{Deadlocked, StillWaiting};
use crate::actors::name::few::Few;
use crate::actors::name::witness::Witness;
use crate::actors::name::{Wait, WaiterId};
use crate::error::{Owner, Site};
use crate::protocol::LockKind;

/// Whose request it is: what the graph needs of a waiter.
#[derive(Clone, Debug)]
pub(crate) struct Whose {
    pub owner: Owner,
    /// Its holder field: what it re-enters rather than waits for.
    pub holder: Arc<str>,
    pub kind: LockKind,
    /// A group lock's members, sorted (filled in by [`Seat::coming`]).
    pub members: Option<graph::Members>,
    /// Where the caller's code asked for it.
    pub site: Option<Site>,
}

impl Whose {
    /// Whose a request is, when it waits at all: a single attempt never waits for a holder
    /// (queued behind a round trip, it is watched, but it answers `None` rather than wait), so
    /// it is no wait of the waits-for graph; a request with no owner is none either.
    pub(crate) fn of(
        owner: Option<Owner>,
        wait: Wait,
        holder: &Arc<str>,
        kind: LockKind,
        site: Option<Site>,
    ) -> Option<Self> {
        owner
            .filter(|_| wait.normalized() != Wait::No)
            .map(|owner| Self {
                owner,
                holder: holder.clone(),
                kind,
                members: None,
                site,
            })
    }
}

/// One hold of this actor, as the graph is told of it.
struct Held {
    /// Whom it belongs to (its first grant's owner; `None` once grants of several owners
    /// share it) and its holder field.
    owner: Option<(Owner, Arc<str>)>,
    kind: LockKind,
    /// A group lock's members, sorted.
    members: Option<graph::Members>,
    claim: Arc<dyn Claim>,
}

/// One lock actor's place in the waits-for graph.
pub(crate) struct Seat {
    detector: Arc<Detector>,
    /// Whose each request not answered yet is (a request with no owner, or a single attempt,
    /// is none of the graph's business).
    whose: Few<WaiterId, Whose>,
    /// The waits of this actor in the graph, with their owners.
    in_graph: FxHashMap<WaiterId, Owner>,
    /// How the graph asks this actor about its waits (made at its first wait there).
    asks: Option<Arc<Asks>>,
    /// The holds, by epoch.
    holds: Few<u64, Held>,
    /// The owners of this name's holds (with their epochs) as the graph last learned them,
    /// sorted: kept there while a wait of this actor is in it.
    published: Vec<(Owner, u64)>,
}

impl Seat {
    /// A seat, when `detector` looks for deadlocks at all.
    pub(crate) fn new(detector: &Arc<Detector>) -> Option<Self> {
        detector.is_on().then(|| Self {
            detector: detector.clone(),
            whose: Few::default(),
            in_graph: FxHashMap::default(),
            asks: None,
            holds: Few::default(),
            published: Vec::new(),
        })
    }

    /// A request came, `whose` it is (a group lock's with its members).
    pub(crate) fn coming(&mut self, id: WaiterId, mut whose: Whose) {
        if whose.kind == LockKind::Group {
            whose.members = self.detector.members(&whose.holder);
        }
        self.whose.insert(id, whose);
    }

    /// Whether waiter `id`'s wait goes into the graph and this actor has no `Asks` yet (made
    /// by its actor, [`asked_by`](Self::asked_by)).
    pub(crate) fn needs_asks(&self, id: WaiterId) -> bool {
        self.asks.is_none() && self.whose.contains_key(&id)
    }

    /// How the graph asks this actor.
    pub(crate) fn asked_by(&mut self, asks: Asks) {
        self.asks = Some(Arc::new(asks));
    }

    /// Waiter `id` of actor `actor` (of lock `name`) began waiting at `now`: into the graph,
    /// with the name's holders first (the search this wait starts must see whom it waits for).
    pub(crate) fn wait_began(&mut self, name: &Arc<str>, actor: u64, id: WaiterId, now: Instant) {
        let (Some(whose), Some(asks)) = (self.whose.get(&id), &self.asks) else {
            return;
        };
        if self.in_graph.insert(id, whose.owner).is_some() {
            return;
        }
        let wait = graph::Wait {
            owner: whose.owner,
            id: WaitId { actor, waiter: id },
            name: name.clone(),
            kind: whose.kind,
            holder: whose.holder.clone(),
            members: whose.members.clone(),
            site: whose.site.clone(),
            since: now,
            via: asks.clone(),
            marks: Marks::default(),
        };
        self.publish(name, actor);
        self.detector.wait_began(wait);
    }

    /// Waiter `id` of actor `actor` is answered, or its caller left: out of the graph. Returns
    /// whose request it was.
    pub(crate) fn wait_over(&mut self, actor: u64, id: WaiterId) -> Option<Owner> {
        let owner = self.whose.remove(&id)?.owner;
        if !self.in_graph.is_empty() && self.in_graph.remove(&id).is_some() {
            self.detector
                .wait_ended(owner, WaitId { actor, waiter: id });
        }
        Some(owner)
    }

    /// The hold of `epoch` was granted to `owner`'s request (`holder`, `kind`), `claim` its
    /// grants' claims; a hold shared by the requests of several owners is nobody's in
    /// particular.
    pub(crate) fn granted(
        &mut self,
        epoch: u64,
        owner: Option<Owner>,
        (holder, kind): (&Arc<str>, LockKind),
        claim: impl FnOnce() -> Arc<dyn Claim>,
    ) {
        if let Some(held) = self.holds.get_mut(&epoch) {
            if held.owner.as_ref().map(|o| o.0) != owner {
                held.owner = None;
            }
            return;
        }
        let held = Held {
            owner: owner.map(|owner| (owner, holder.clone())),
            kind,
            members: (kind == LockKind::Group)
                .then(|| self.detector.members(holder))
                .flatten(),
            claim: claim(),
        };
        self.holds.insert(epoch, held);
    }

    /// The hold of `epoch` ended (released, or lost).
    pub(crate) fn hold_ended(&mut self, epoch: u64) {
        self.holds.remove(&epoch);
    }

    /// Every hold ended (the actor stopped).
    pub(crate) fn holds_ended(&mut self) {
        self.holds.clear();
    }

    /// Tells the graph who holds lock `name` of actor `actor` now, while one of its waits is
    /// there (and that nobody does, once none is): whoever it waits for. Compares first, so
    /// the graph's lock is taken only when the owners changed.
    #[inline]
    pub(crate) fn publish(&mut self, name: &Arc<str>, actor: u64) {
        // After every event of the actor: nothing to compare while no wait is in the graph.
        if self.in_graph.is_empty() && self.published.is_empty() {
            return;
        }
        self.publish_now(name, actor);
    }

    fn publish_now(&mut self, name: &Arc<str>, actor: u64) {
        let mut owners: Vec<(Owner, u64)> = if self.in_graph.is_empty() {
            Vec::new()
        } else {
            self.holds
                .iter()
                .filter_map(|(epoch, held)| Some((held.owner.as_ref()?.0, *epoch)))
                .collect()
        };
        owners.sort_unstable();
        if owners == self.published {
            return;
        }
        let holds = owners
            .iter()
            .filter_map(|(_, epoch)| {
                let held = self.holds.get(epoch)?;
                let (owner, holder) = held.owner.clone()?;
                Some(Hold {
                    owner,
                    holder,
                    kind: held.kind,
                    members: held.members.clone(),
                    claim: held.claim.clone(),
                })
            })
            .collect();
        self.published = owners;
        self.detector.holders(name, actor, holds);
    }

    /// The actor stopped: its holds leave the graph with it (its waits left as they were
    /// answered).
    pub(crate) fn leave(&mut self, name: &Arc<str>, actor: u64) {
        self.in_graph.clear();
        self.publish(name, actor);
    }

    /// The holds of this actor (of lock key `name`) claimed by one of `owners`: each one's
    /// owner, lock key and holder field (for the cross-process probe).
    pub(crate) fn holds_of(
        &self,
        owners: &[Owner],
        name: &Arc<str>,
    ) -> Vec<(Owner, Arc<str>, Arc<str>)> {
        self.holds
            .values()
            .filter(|held| held.claim.is_claimed())
            .filter_map(|held| held.owner.clone())
            .filter(|(owner, _)| owners.contains(owner))
            .map(|(owner, holder)| (owner, name.clone(), holder))
            .collect()
    }
}

/// A lock actor's witness is its seat: the shell tells it when a wait begins and ends, a hold
/// ends, after each event and at the stop.
impl<A> Witness<Context<A>> for Seat
where
    A: Actor<Context = Context<A>> + Handler<StillWaiting> + Handler<Deadlocked>,
{
    /// Into the graph, with the address the graph asks this actor at, made at its first wait
    /// there (each actix address made allocates: not for an uncontended acquire).
    fn wait_began(
        &mut self,
        name: &Arc<str>,
        actor: u64,
        id: WaiterId,
        now: Instant,
        ctx: &mut Context<A>,
    ) {
        if self.needs_asks(id) {
            self.asked_by(Asks::of(ctx.address()));
        }
        Seat::wait_began(self, name, actor, id, now);
    }

    fn wait_over(&mut self, actor: u64, id: WaiterId) -> Option<Owner> {
        Seat::wait_over(self, actor, id)
    }

    fn hold_ended(&mut self, epoch: u64) {
        Seat::hold_ended(self, epoch);
    }

    fn holds_ended(&mut self) {
        Seat::holds_ended(self);
    }

    fn settled(&mut self, name: &Arc<str>, actor: u64) {
        self.publish(name, actor);
    }

    fn left(&mut self, name: &Arc<str>, actor: u64) {
        self.leave(name, actor);
    }
}
