//! The manager state every handle shares: the client id, the registry of actors, the command
//! connections and the settings. Handles keep it alive; dropping the last one stops the actors.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use actix::Addr;
use uuid::Uuid;

use super::name::Name;
use super::runtime::Host;
use crate::actors::lock_actor::LockActor;
use crate::actors::messages::Shutdown;
use crate::actors::registry::{Directory, Registry};
use crate::actors::registry::{Resolve, ResolveSync};
use crate::config::Config;
use crate::error::LockError;
use crate::protocol::keys::HolderPrefix;
use crate::protocol::{Commands, LockKind};

/// What a [`LockManager`](super::manager::LockManager) and its handles share.
pub(crate) struct Inner {
    pub client_id: Uuid,
    /// `<client id>:`, written once: every holder of this manager starts with it.
    pub holder_prefix: HolderPrefix,
    pub registry: Addr<Registry>,
    /// The live lock actors: found here, a handle needs no round trip to the registry.
    pub directory: Directory,
    pub commands: Commands,
    pub config: Arc<Config>,
    pub next_holder: AtomicU64,
    pub host: Host,
}

impl Inner {
    /// A new holder of this manager: `<client id>:<n>`, `n` never given before.
    pub(crate) fn new_holder<T: for<'a> From<&'a str>>(&self) -> T {
        let n = self.next_holder.fetch_add(1, Ordering::Relaxed) + 1;
        crate::protocol::keys::holder(&self.holder_prefix, n)
    }

    /// A user's name and the key every key and channel of it is built from, with the
    /// configured prefix ([`Config::name_prefix`]) as Redisson's `PrefixNameMapper` maps it:
    /// the one place a name becomes a key.
    pub(crate) fn name(&self, given: impl Into<String>) -> Name {
        Name::new(self.config.get_name_prefix(), given.into())
    }

    /// As [`name`](Self::name), for a lock handle of `kind`: while the name's actor of that
    /// kind lives, the key is the directory's (no allocation for it) and the actor's shared
    /// address comes with it (weak; dead when none), one look-up for a handle made per request.
    pub(crate) fn lock_name(
        &self,
        kind: LockKind,
        given: impl Into<String>,
    ) -> (Name, Weak<Addr<LockActor>>) {
        let prefix = self.config.get_name_prefix();
        let key = crate::config::map_name(prefix, given.into());
        match self.directory.lock_entry(kind, &key) {
            Some((kept, actor)) => (Name::keyed(kept, prefix), actor),
            None => (Name::keyed(key.into(), prefix), Weak::new()),
        }
    }

    /// A key as the user named it: without the configured prefix (a grant's name is its key).
    pub(crate) fn unmap_name<'a>(&self, key: &'a str) -> &'a str {
        crate::config::unmap_name(self.config.get_name_prefix(), key)
    }

    /// Checks `name` before a command that no actor serves (reads, `force_unlock`): as
    /// [`Name::validate`], and in a cluster the key's braces.
    pub(crate) fn check(&self, name: &Name) -> Result<(), LockError> {
        name.validate()?;
        self.commands.check_name(name.key())
    }

    /// The live lock actor of the lock of `kind` named `name`, started when there is none.
    pub(crate) async fn lock_actor(
        &self,
        kind: LockKind,
        name: Arc<str>,
    ) -> Result<Addr<LockActor>, LockError> {
        if let Some(live) = self.directory.find(kind, &name) {
            return Ok(live);
        }
        let resolve = Resolve { kind, name };
        let sent = self.registry.send(resolve).await;
        sent.map_err(|_| LockError::Shutdown)?
    }

    /// The live synchronizer actor of `kind` named `name`, started when there is none.
    pub(crate) async fn sync_actor(
        &self,
        kind: crate::protocol::SyncKind,
        name: Arc<str>,
    ) -> Result<Addr<crate::actors::sync_actor::SyncActor>, LockError> {
        if let Some(live) = self.directory.find_sync(kind, &name) {
            return Ok(live);
        }
        let resolve = ResolveSync { kind, name };
        let sent = self.registry.send(resolve).await;
        sent.map_err(|_| LockError::Shutdown)?
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Releases already sent by dropped guards are queued before this stop, so they run first.
        let (registry, own) = (self.registry.clone(), self.host.owned.is_some());
        let spawned = self.host.arbiter.spawn(async move {
            let _ = registry.send(Shutdown { release: false }).await;
            if own {
                actix_rt::System::current().stop();
            }
        });
        if let (false, Some(system)) = (spawned, &self.host.owned) {
            system.stop();
        }
    }
}
