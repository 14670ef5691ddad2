//! The Registry: resolves a lock or synchronizer name to its live actor, starting one when there
//! is none.
//!
//! It keeps only weak addresses, so it never keeps an idle lock actor alive; a lock actor tells it
//! when it stops. The lock actors' addresses are in a [`Directory`] it shares with the handles, so
//! that a handle made for a name whose actor lives (a new handle per request, say) reaches it
//! without a round trip to the Registry; only starting an actor goes through it. Resolving and stopping cannot race into a lost request: a resolved address is
//! strong (the actor cannot stop while it is held), and a message that reaches an actor already
//! stopping comes back `Closed`, unhandled, for the sender to resolve again.

use std::sync::{Arc, Mutex};

use actix::WeakAddr;
use actix::prelude::*;
use actix_rt::ArbiterHandle;
use futures_util::future::join_all;
use rustc_hash::FxHashMap;

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

/// (Kind family, name) → (actor id, its address), for every live lock actor of a manager: from
/// the first request for that lock until its actor stops. Written by the Registry only.
#[derive(Clone, Default)]
pub(crate) struct Directory(Arc<Mutex<LockActors>>);

type LockActors = FxHashMap<(LockKind, Arc<str>), (u64, WeakAddr<LockActor>)>;

impl Directory {
    /// The live actor of the lock of `kind` named `name`, if there is one.
    pub(crate) fn find(&self, kind: LockKind, name: &Arc<str>) -> Option<Addr<LockActor>> {
        let actors = self.lock();
        let (_, weak) = actors.get(&(kind.family(), name.clone()))?;
        weak.upgrade().filter(Addr::connected)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LockActors> {
        // Nothing panics while holding it; a poisoned map is still a valid map.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
    /// The lock actors, shared with the handles.
    actors: Directory,
    /// (Kind, name) → its synchronizer actor, likewise.
    syncs: FxHashMap<(SyncKind, Arc<str>), (u64, WeakAddr<SyncActor>)>,
    /// Set by `Shutdown`: no new lock actors.
    shut: bool,
}

impl Registry {
    pub(crate) fn new(homes: Vec<Home>, actors: Directory) -> Self {
        Self {
            svc: homes[0].svc.clone(),
            homes,
            actors,
            syncs: FxHashMap::default(),
            shut: false,
        }
    }
}

impl Actor for Registry {
    type Context = Context<Self>;
}

impl Handler<Resolve> for Registry {
    type Result = Result<Addr<LockActor>, LockError>;

    fn handle(&mut self, msg: Resolve, ctx: &mut Context<Self>) -> Self::Result {
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
        self.actors.lock().insert(key, (id, addr.downgrade()));
        Ok(addr)
    }
}

impl Handler<ResolveSync> for Registry {
    type Result = Result<Addr<SyncActor>, LockError>;

    fn handle(&mut self, msg: ResolveSync, ctx: &mut Context<Self>) -> Self::Result {
        if self.shut {
            return Err(LockError::Shutdown);
        }
        self.svc.commands.check_name(&msg.name)?;
        if msg.kind == SyncKind::CountDownLatch && self.svc.commands.by_slot() {
            crate::protocol::keys::check_latch_name(&msg.name)?;
        }
        let key = (msg.kind, msg.name);
        let live = self.syncs.get(&key).and_then(|(_, weak)| weak.upgrade());
        if let Some(addr) = live.filter(|a| a.connected()) {
            return Ok(addr);
        }
        let id = NEXT_ACTOR_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (svc, me) = (self.svc.clone(), ctx.address().recipient().downgrade());
        let addr = SyncActor::new(id, key.0, key.1.clone(), svc, me).start();
        self.syncs.insert(key, (id, addr.downgrade()));
        Ok(addr)
    }
}

impl Handler<ForgetSync> for Registry {
    type Result = ();

    fn handle(&mut self, msg: ForgetSync, _: &mut Context<Self>) {
        let key = (msg.kind, msg.name);
        if self.syncs.get(&key).is_some_and(|(id, _)| *id == msg.id) {
            self.syncs.remove(&key);
        }
    }
}

impl Handler<Forget> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Forget, _: &mut Context<Self>) {
        let key = (msg.family, msg.name);
        let mut actors = self.actors.lock();
        if actors.get(&key).is_some_and(|(id, _)| *id == msg.id) {
            actors.remove(&key);
        }
    }
}

impl Handler<CountLive> for Registry {
    type Result = usize;

    fn handle(&mut self, _: CountLive, _: &mut Context<Self>) -> usize {
        let actors = self.actors.lock();
        let locks = actors.values();
        let locks = locks.filter(|(_, weak)| weak.upgrade().is_some_and(|a| a.connected()));
        let syncs = self.syncs.values();
        let syncs = syncs.filter(|(_, weak)| weak.upgrade().is_some_and(|a| a.connected()));
        locks.count() + syncs.count()
    }
}

impl Handler<Shutdown> for Registry {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, msg: Shutdown, _: &mut Context<Self>) -> Self::Result {
        self.shut = true;
        let live: Vec<_> = self
            .actors
            .lock()
            .drain()
            .filter_map(|(_, (_, w))| w.upgrade())
            .collect();
        let syncs: Vec<_> = self
            .syncs
            .drain()
            .filter_map(|(_, (_, w))| w.upgrade())
            .collect();
        let release = msg.release;
        let stops = join_all(live.into_iter().map(|a| a.send(StopLock { release })));
        let sync_stops = join_all(syncs.into_iter().map(|a| a.send(StopSync { release })));
        let stops = futures_util::future::join(stops, sync_stops);
        let watchdog = self.svc.watchdog.clone();
        let stops = async move {
            stops.await;
            // Answered once the client record is deleted (bounded by the response timeout).
            let _ = watchdog.send(Halt).await;
        };
        Box::pin(stops.into_actor(self).map(|_, act, ctx| {
            act.svc.pubsub.do_send(Halt);
            tracing::info!("lock manager shut down");
            ctx.stop();
        }))
    }
}
