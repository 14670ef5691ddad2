//! The Registry: resolves a name to its live per-name actor (a lock's or a synchronizer's),
//! starting one when there is none.
//!
//! It keeps only weak addresses, so it never keeps an idle actor alive; an actor tells it when it
//! stops. The addresses are in a [`Directory`] it shares with the handles: the one cache from a
//! name to its actor, so that any handle of a name whose actor lives (a handle kept, or a new one
//! per request) reaches it without a round trip to the Registry; only starting an actor goes
//! through it. Resolving and stopping cannot race into a lost request: a resolved address is
//! strong (the actor cannot stop while it is held), and a message that reaches an actor already
//! stopping comes back `Closed`, unhandled, for the sender to resolve again.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, Weak};

use actix::WeakAddr;
use actix::prelude::*;
use actix_rt::ArbiterHandle;
use futures_util::future::join_all;
use rustc_hash::FxHashMap;

use super::deadlock::probe::Probe;
use super::lock_actor::LockActor;
use super::messages::*;
use super::services::Services;
use super::sync_actor::SyncActor;
use crate::error::LockError;
use crate::protocol::{LockKind, SyncKind};

/// Registry: the live lock actor of `name`, started when there is none.
#[derive(Message)]
#[rtype(result = "Result<Addr<LockActor>, LockError>")]
pub(crate) struct Resolve {
    pub kind: LockKind,
    pub name: Arc<str>,
}

/// Registry: the live synchronizer actor of `kind` named `name`, started when there is none.
#[derive(Message)]
#[rtype(result = "Result<Addr<SyncActor>, LockError>")]
pub(crate) struct ResolveSync {
    pub kind: SyncKind,
    pub name: Arc<str>,
}

/// Which of `homes` homes serve the lock `name`: spread by the name's hash, the same home for
/// the same name as long as the manager lives.
fn home_of(name: &str, homes: usize) -> usize {
    use std::hash::{BuildHasher, BuildHasherDefault};
    let hash = BuildHasherDefault::<rustc_hash::FxHasher>::default().hash_one(name);
    usize::try_from(hash % homes.max(1) as u64).unwrap_or(0)
}

/// Lock actor ids, for every manager of the process.
static NEXT_ACTOR_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Key → (actor id, its address), for every live actor of one family of a manager: from the
/// first request for its name until the actor stops. Written by the Registry only.
pub(crate) struct Table<K, A: Actor>(Arc<Mutex<Entries<K, A>>>);

type Entries<K, A> = FxHashMap<K, Entry<A>>;

/// One live actor: its id (so that a stopped actor's word does not forget its successor), and
/// its address, weak (an idle actor still stops).
struct Entry<A: Actor> {
    id: u64,
    actor: WeakAddr<A>,
    /// The actor's own shared address, as its grants carry it, once a handle was granted by it:
    /// weak too (it lives while the actor is busy or lingers). Upgrading it allocates nothing,
    /// where upgrading `actor` makes a new actix address (two allocations): a handle made per
    /// request reaches a live actor through it.
    shared: Weak<Addr<A>>,
}

impl<K, A: Actor> Clone for Table<K, A> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<K, A: Actor> Default for Table<K, A> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<K: Hash + Eq, A: Actor> Table<K, A> {
    /// The live actor of `key`, if there is one.
    fn find<Q: ?Sized + Hash + Eq>(&self, key: &Q) -> Option<Addr<A>>
    where
        K: Borrow<Q>,
    {
        let map = self.map();
        map.get(key)?.actor.upgrade().filter(Addr::connected)
    }

    /// The key of `key`'s live entry as the table keeps it, and the actor's shared address
    /// (weak, as kept: dead when no handle was granted by it yet or it let it go).
    fn entry<Q: ?Sized + Hash + Eq>(&self, key: &Q) -> Option<(K, Weak<Addr<A>>)>
    where
        K: Borrow<Q> + Clone,
    {
        let map = self.map();
        let (kept, entry) = map.get_key_value(key)?;
        Some((kept.clone(), entry.shared.clone()))
    }

    fn insert(&self, key: K, id: u64, actor: &Addr<A>) {
        let actor = actor.downgrade();
        let shared = Weak::new();
        self.map().insert(key, Entry { id, actor, shared });
    }

    /// The live actor of `key` by its shared address, if a handle was granted by it and it
    /// keeps it (busy, or lingering idle).
    fn shared<Q: ?Sized + Hash + Eq>(&self, key: &Q) -> Option<Arc<Addr<A>>>
    where
        K: Borrow<Q>,
    {
        let map = self.map();
        let shared = map.get(key)?.shared.upgrade()?;
        shared.connected().then_some(shared)
    }

    /// Notes the shared address a handle was granted through, for the next handles of `key`.
    /// An actor that stopped meanwhile leaves a dead or disconnected one: `shared` skips it.
    fn share<Q: ?Sized + Hash + Eq>(&self, key: &Q, actor: &Arc<Addr<A>>)
    where
        K: Borrow<Q>,
    {
        if let Some(entry) = self.map().get_mut(key) {
            entry.shared = Arc::downgrade(actor);
        }
    }

    /// Forgets actor `id` of `key` (stopped); a newer actor of the key stays.
    fn forget(&self, key: &K, id: u64) {
        let mut map = self.map();
        if map.get(key).is_some_and(|entry| entry.id == id) {
            map.remove(key);
        }
    }

    /// How many of its actors run.
    fn live(&self) -> usize {
        let map = self.map();
        let running = map.values().filter_map(|entry| entry.actor.upgrade());
        running.filter(Addr::connected).count()
    }

    /// Every running actor.
    fn all(&self) -> Vec<Addr<A>> {
        let map = self.map();
        map.values()
            .filter_map(|entry| entry.actor.upgrade())
            .filter(Addr::connected)
            .collect()
    }

    /// Every running actor, forgotten all at once.
    fn drain(&self) -> Vec<Addr<A>> {
        let mut map = self.map();
        map.drain()
            .filter_map(|(_, entry)| entry.actor.upgrade())
            .collect()
    }

    fn map(&self) -> std::sync::MutexGuard<'_, Entries<K, A>> {
        // Nothing panics while holding it; a poisoned map is still a valid map.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A manager with a long wait asks each live lock actor for its waiting owners' holds.
impl super::deadlock::probe::LockActors for Directory {
    fn live(&self) -> Vec<actix::Recipient<super::messages::HoldsOf>> {
        self.locks.all().into_iter().map(Addr::recipient).collect()
    }
}

/// A lock actor's key as its table sees it, (kind family, name): so that the table is searched
/// by a borrowed name, without a key made (or an `Arc` cloned) for the search.
pub(crate) trait LockKey {
    /// The family and the name.
    fn parts(&self) -> (LockKind, &str);
}

impl LockKey for (LockKind, Arc<str>) {
    fn parts(&self) -> (LockKind, &str) {
        (self.0, &self.1)
    }
}

impl LockKey for (LockKind, &str) {
    fn parts(&self) -> (LockKind, &str) {
        (self.0, self.1)
    }
}

impl<'a> Borrow<dyn LockKey + 'a> for (LockKind, Arc<str>) {
    fn borrow(&self) -> &(dyn LockKey + 'a) {
        self
    }
}

/// As the owned key hashes: a tuple hashes its fields in order, and an `Arc<str>` as its `str`.
impl Hash for dyn LockKey + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.parts().hash(state);
    }
}

impl PartialEq for dyn LockKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn LockKey + '_ {}

/// Every live per-name actor of a manager, by name: lock actors by (kind family, name),
/// synchronizer actors by (kind, name). Shared by the Registry, which writes it, and the
/// handles, which find live actors in it.
#[derive(Clone, Default)]
pub(crate) struct Directory {
    locks: Table<(LockKind, Arc<str>), LockActor>,
    syncs: Table<(SyncKind, Arc<str>), SyncActor>,
}

impl Directory {
    /// The live actor of the lock of `kind` named `name`, if there is one.
    pub(crate) fn find(&self, kind: LockKind, name: &str) -> Option<Addr<LockActor>> {
        self.locks.find(&(kind.family(), name) as &dyn LockKey)
    }

    /// The live actor of the lock of `kind` named `name` by the shared address its grants
    /// carry, if a handle was granted by it and it still keeps it: no allocation.
    pub(crate) fn shared(&self, kind: LockKind, name: &str) -> Option<Arc<Addr<LockActor>>> {
        self.locks.shared(&(kind.family(), name) as &dyn LockKey)
    }

    /// Notes the shared address of the actor that granted a handle of the lock of `kind` named
    /// `name`, for the next handles of the name (a handle made per request).
    pub(crate) fn share(&self, kind: LockKind, name: &str, actor: &Arc<Addr<LockActor>>) {
        self.locks
            .share(&(kind.family(), name) as &dyn LockKey, actor);
    }

    /// While the lock of `kind` named `name` has an actor: its name as the directory keeps it
    /// (the key a new handle shares instead of making its own) and the actor's shared address,
    /// weak (dead when no handle was granted by it yet). One look-up for a handle made per
    /// request.
    pub(crate) fn lock_entry(
        &self,
        kind: LockKind,
        name: &str,
    ) -> Option<(Arc<str>, Weak<Addr<LockActor>>)> {
        let ((_, kept), shared) = self.locks.entry(&(kind.family(), name) as &dyn LockKey)?;
        Some((kept, shared))
    }

    /// The live actor of the synchronizer of `kind` named `name`, if there is one.
    pub(crate) fn find_sync(&self, kind: SyncKind, name: &Arc<str>) -> Option<Addr<SyncActor>> {
        self.syncs.find(&(kind, name.clone()))
    }
}

/// Where lock actors run: an arbiter (`None`: the registry's own) and the services there (its
/// own command connections).
pub(crate) struct Home {
    pub arbiter: Option<ArbiterHandle>,
    pub svc: Services,
}

/// The actor that maps lock and synchronizer names to their actors.
pub(crate) struct Registry {
    /// The services of the registry's own arbiter, where synchronizer actors run too.
    svc: Services,
    /// Where lock actors run, by the hash of their name: the registry's arbiter first.
    homes: Vec<Home>,
    /// The live actors, shared with the handles.
    actors: Directory,
    /// The cross-process deadlock probe (none with deadlock detection off), halted at
    /// shutdown.
    probe: Option<Addr<Probe>>,
    /// Set by `Shutdown`: no new lock actors.
    shut: bool,
    /// Whether the Watchdog was told of the manager's first use (`FirstUse`): once, when the
    /// first per-name actor starts, so that its client record is written then.
    used: bool,
}

impl Registry {
    pub(crate) fn new(homes: Vec<Home>, actors: Directory, probe: Option<Addr<Probe>>) -> Self {
        Self {
            svc: homes[0].svc.clone(),
            homes,
            actors,
            probe,
            shut: false,
            used: false,
        }
    }

    /// Before the first per-name actor starts (the manager is about to hold or wait for the
    /// first time): the client record's first write (`FirstUse`, one message in the manager's
    /// life), awaited for at most [`FIRST_RECORD_WAIT`] so that it reaches Redis before the
    /// first acquire does (`lockman ls` names the process from its first hold or wait on).
    /// Every later call: nothing to wait for.
    fn first_use(&mut self) -> impl std::future::Future<Output = ()> + 'static {
        let first = !self.shut && !std::mem::replace(&mut self.used, true);
        let watchdog = first.then(|| self.svc.watchdog.clone());
        async move {
            if let Some(watchdog) = watchdog {
                let written = watchdog.send(super::watchdog::FirstUse);
                let _ = tokio::time::timeout(FIRST_RECORD_WAIT, written).await;
            }
        }
    }
}

/// The longest the first per-name actor's start waits for the client record's first write (a
/// frozen Redis must not hold the first acquire up for a whole response timeout). A healthy
/// server answers in one round trip: the record's script is loaded at start with the others
/// (`protocol::clients::record_scripts`).
const FIRST_RECORD_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

impl Actor for Registry {
    type Context = Context<Self>;
}

impl Handler<Resolve> for Registry {
    type Result = AtomicResponse<Self, Result<Addr<LockActor>, LockError>>;

    /// Atomic: no other actor starts while the first one waits for the client record.
    fn handle(&mut self, msg: Resolve, _: &mut Context<Self>) -> Self::Result {
        let first = self.first_use().into_actor(self);
        AtomicResponse::new(Box::pin(
            first.map(move |(), act, ctx| act.resolve(msg, ctx)),
        ))
    }
}

impl Registry {
    fn resolve(
        &mut self,
        msg: Resolve,
        ctx: &mut Context<Self>,
    ) -> Result<Addr<LockActor>, LockError> {
        if self.shut {
            return Err(LockError::Shutdown);
        }
        self.svc.commands.check_name(&msg.name)?;
        if let Some(addr) = self.actors.find(msg.kind, &msg.name) {
            return Ok(addr);
        }
        let key = (msg.kind.family(), msg.name);
        // Unique in the process, not only in this manager: a grant names its actor by it.
        let id = NEXT_ACTOR_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let me = ctx.address().recipient().downgrade();
        let home = &self.homes[home_of(&key.1, self.homes.len())];
        let (svc, kind, name) = (home.svc.clone(), key.0, key.1.clone());
        let addr = match &home.arbiter {
            None => LockActor::new(id, kind, name, svc, me).start(),
            Some(arbiter) => LockActor::start_in_arbiter(arbiter, move |_| {
                LockActor::new(id, kind, name, svc, me)
            }),
        };
        self.actors.locks.insert(key, id, &addr);
        Ok(addr)
    }
}

impl Handler<ResolveSync> for Registry {
    type Result = AtomicResponse<Self, Result<Addr<SyncActor>, LockError>>;

    /// Atomic, as `Resolve`.
    fn handle(&mut self, msg: ResolveSync, _: &mut Context<Self>) -> Self::Result {
        let first = self.first_use().into_actor(self);
        AtomicResponse::new(Box::pin(
            first.map(move |(), act, ctx| act.resolve_sync(msg, ctx)),
        ))
    }
}

impl Registry {
    fn resolve_sync(
        &mut self,
        msg: ResolveSync,
        ctx: &mut Context<Self>,
    ) -> Result<Addr<SyncActor>, LockError> {
        if self.shut {
            return Err(LockError::Shutdown);
        }
        self.svc.commands.check_name(&msg.name)?;
        if msg.kind == SyncKind::CountDownLatch && self.svc.commands.by_slot() {
            crate::protocol::keys::check_latch_name(&msg.name)?;
        }
        if let Some(addr) = self.actors.find_sync(msg.kind, &msg.name) {
            return Ok(addr);
        }
        let key = (msg.kind, msg.name);
        let id = NEXT_ACTOR_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (svc, me) = (self.svc.clone(), ctx.address().recipient().downgrade());
        let addr = SyncActor::new(id, key.0, key.1.clone(), svc, me).start();
        self.actors.syncs.insert(key, id, &addr);
        Ok(addr)
    }
}

impl Handler<Forget> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Forget, _: &mut Context<Self>) {
        match msg.kind {
            NameKind::Lock(family) => self.actors.locks.forget(&(family, msg.name), msg.id),
            NameKind::Sync(kind) => self.actors.syncs.forget(&(kind, msg.name), msg.id),
        }
    }
}

impl Handler<CountLive> for Registry {
    type Result = usize;

    fn handle(&mut self, _: CountLive, _: &mut Context<Self>) -> usize {
        self.actors.locks.live() + self.actors.syncs.live()
    }
}

impl Handler<Shutdown> for Registry {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, msg: Shutdown, _: &mut Context<Self>) -> Self::Result {
        self.shut = true;
        let live = self.actors.locks.drain();
        let syncs = self.actors.syncs.drain();
        let release = msg.release;
        let stops = join_all(live.into_iter().map(|a| a.send(Stop { release })));
        let sync_stops = join_all(syncs.into_iter().map(|a| a.send(Stop { release })));
        let stops = futures_util::future::join(stops, sync_stops);
        let watchdog = self.svc.watchdog.clone();
        let probe = self.probe.clone();
        let stops = async move {
            stops.await;
            // Answered once the client record (and the waits hash) is deleted (bounded by the
            // response timeout).
            let _ = watchdog.send(Halt).await;
            if let Some(probe) = probe {
                let _ = probe.send(Halt).await;
            }
        };
        Box::pin(stops.into_actor(self).map(|_, act, ctx| {
            act.svc.pubsub.do_send(Halt);
            tracing::info!("lock manager shut down");
            ctx.stop();
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table keyed by (family, `Arc<str>`) is searched by a borrowed name: the view hashes
    /// and compares as the owned key, so a handle made per request finds the key its name's
    /// actor was started under (and shares it instead of making its own).
    #[test]
    fn a_lock_key_is_found_by_a_borrowed_name() {
        let mut map: FxHashMap<(LockKind, Arc<str>), u32> = FxHashMap::default();
        map.insert((LockKind::Reentrant, "orders:1".into()), 1);
        map.insert((LockKind::Fair, "orders:1".into()), 2);
        map.insert((LockKind::Reentrant, "orders:2".into()), 3);
        let find = |kind, name: &str| map.get(&(kind, name) as &dyn LockKey).copied();
        assert_eq!(find(LockKind::Reentrant, "orders:1"), Some(1));
        assert_eq!(find(LockKind::Fair, "orders:1"), Some(2));
        assert_eq!(find(LockKind::Reentrant, "orders:2"), Some(3));
        assert_eq!(find(LockKind::Fair, "orders:2"), None);
        assert_eq!(find(LockKind::Reentrant, "orders:3"), None);
        let (kept, _) = map
            .get_key_value(&(LockKind::Reentrant, "orders:2") as &dyn LockKey)
            .expect("found");
        assert_eq!(&*kept.1, "orders:2");
    }
}
