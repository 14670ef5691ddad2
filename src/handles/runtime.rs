//! Where the actors run: on the caller's actix arbiter when there is one (actix-web,
//! `#[actix_rt::main]`), otherwise on an actix System of lockman's own, on a background thread,
//! so that a plain `#[tokio::main]` program works too (actix actors need a System).

use actix_rt::{Arbiter, ArbiterHandle, System};

use crate::error::LockError;

/// The arbiter that hosts a manager's actors, and the System lockman started, if it did.
pub(crate) struct Host {
    pub arbiter: ArbiterHandle,
    /// More arbiters for lock actors (lockman's own System only, [`Config::arbiters`] − 1 of
    /// them): names are spread over `arbiter` and these.
    ///
    /// [`Config::arbiters`]: crate::Config::arbiters
    pub more: Vec<ArbiterHandle>,
    /// `Some` when lockman runs its own System: stopped when the manager is dropped.
    pub owned: Option<System>,
}

impl Host {
    /// The current arbiter, or a new System on a thread named `lockman`, with `threads`
    /// arbiters in all (its own and `threads - 1` more).
    pub(crate) async fn current_or_spawn(threads: usize) -> Result<Self, LockError> {
        if let Some(arbiter) = Arbiter::try_current() {
            return Ok(Self {
                arbiter,
                more: Vec::new(),
                owned: None,
            });
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("lockman".into())
            .spawn(move || {
                let runner = System::new();
                // Arbiters of the System (its stop stops them too); one that cannot start
                // leaves its names to the others.
                let more: Vec<ArbiterHandle> = (1..threads)
                    .filter_map(|_| match Arbiter::try_new() {
                        Ok(arbiter) => Some(arbiter.handle()),
                        Err(error) => {
                            tracing::warn!(%error, "an arbiter for lock actors did not start");
                            None
                        }
                    })
                    .collect();
                let _ = tx.send((System::current(), Arbiter::current(), more));
                if let Err(error) = runner.run() {
                    tracing::error!(%error, "lockman's actix system failed");
                }
            })
            .map_err(|e| LockError::invalid("runtime", format!("cannot start a thread: {e}")))?;
        let (system, arbiter, more) = rx.await.map_err(|_| LockError::Shutdown)?;
        Ok(Self {
            arbiter,
            more,
            owned: Some(system),
        })
    }
}
