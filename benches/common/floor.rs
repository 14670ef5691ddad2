//! The floor of the actor design itself (issue 60): one trivial actix actor per name that
//! receives `Acquire` and `Release`, runs lockman's own scripts by EVALSHA (each one presized
//! `redis::Cmd`, as lockman sends them) on a `ConnectionManager` (the connection kind lockman
//! uses), and replies. No state machine, no waiters, no watchdog, no lost signal: what an
//! uncontended pair costs in any design where every acquire and release is a message to the
//! name's actor. lockman's figures are read against this floor and against the raw loop
//! (`raw.rs`) in the same run.
//!
//! [`Floors`] is the directory a caller that makes a handle per request looks a name's actor up
//! in (one mutex-guarded map lookup and an `Addr` clone per request); a kept handle is the
//! `Addr` itself.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use actix::prelude::*;
use actix_rt::ArbiterHandle;
use redis::aio::ConnectionManager;

use super::raw;

/// One name's actor: its keys and its holder made once, at start.
pub struct Floor {
    conn: ConnectionManager,
    name: Arc<str>,
    channel: Arc<str>,
    holder: Arc<str>,
    /// Holds taken and not yet released: the actor's whole bookkeeping.
    held: u32,
}

impl Actor for Floor {
    type Context = Context<Self>;
}

/// Take the name once; replies whether it was taken.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct Acquire;

/// Release the hold; replies the script's reply (`Some(1)`: unlocked).
#[derive(Message)]
#[rtype(result = "Option<i64>")]
pub struct Release;

impl Handler<Acquire> for Floor {
    // An actor future: the actor handles nothing else until the reply came, as a name's actor
    // that owns the name's state must.
    type Result = ResponseActFuture<Self, bool>;

    fn handle(&mut self, _: Acquire, _: &mut Context<Self>) -> Self::Result {
        let (conn, name, holder) = (self.conn.clone(), self.name.clone(), self.holder.clone());
        Box::pin(
            async move { raw::acquire_cmd(&conn, &name, &holder).await }
                .into_actor(self)
                .map(|taken, act, _| {
                    act.held += u32::from(taken);
                    taken
                }),
        )
    }
}

impl Handler<Release> for Floor {
    type Result = ResponseActFuture<Self, Option<i64>>;

    fn handle(&mut self, _: Release, _: &mut Context<Self>) -> Self::Result {
        let (conn, name, channel, holder) = (
            self.conn.clone(),
            self.name.clone(),
            self.channel.clone(),
            self.holder.clone(),
        );
        Box::pin(
            async move { raw::release_cmd(&conn, &name, &channel, &holder).await }
                .into_actor(self)
                .map(|reply, act, _| {
                    act.held = act.held.saturating_sub(1);
                    reply
                }),
        )
    }
}

/// An uncontended acquire + release through a name's floor actor, checked.
pub async fn pair(addr: &Addr<Floor>) {
    assert!(
        addr.send(Acquire).await.expect("floor mailbox"),
        "floor lock taken"
    );
    assert_eq!(addr.send(Release).await.expect("floor mailbox"), Some(1));
}

/// The floor's directory: names to their actors, all on one arbiter with one connection.
#[derive(Clone)]
pub struct Floors {
    conn: ConnectionManager,
    arbiter: ArbiterHandle,
    actors: Arc<Mutex<HashMap<String, Addr<Floor>>>>,
}

impl Floors {
    /// A directory whose actors run on the current arbiter (call inside an actix System), on a
    /// connection made through `client` here. Loads the scripts (the floor sends EVALSHA only).
    pub async fn here(client: redis::Client) -> Self {
        let conn = raw::connect_client(client).await;
        raw::load(&conn).await;
        Floors {
            conn,
            arbiter: actix_rt::Arbiter::current(),
            actors: Arc::default(),
        }
    }

    /// A directory whose actors run on an actix System of their own on a new thread, with their
    /// connection made there: where lockman's actors run when it is called from plain tokio.
    pub fn on_own_thread(client: redis::Client) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let system = actix_rt::System::new();
            let floors = system.block_on(Floors::here(client));
            tx.send(floors).expect("floor directory sent");
            system.run().expect("floor system");
        });
        rx.recv().expect("floor thread started")
    }

    /// The actor of `name`, started (on the directory's arbiter) the first time.
    pub fn actor(&self, name: &str) -> Addr<Floor> {
        let mut actors = self.actors.lock().expect("floor directory");
        if let Some(addr) = actors.get(name) {
            return addr.clone();
        }
        let floor = Floor {
            conn: self.conn.clone(),
            name: name.into(),
            channel: raw::channel(name).into(),
            holder: format!("00000000-0000-4000-8000-00000000f100:{}", actors.len() + 1).into(),
            held: 0,
        };
        let addr = Floor::start_in_arbiter(&self.arbiter, move |_| floor);
        actors.insert(name.to_owned(), addr.clone());
        addr
    }
}
