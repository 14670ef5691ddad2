//! `lockman watch`: a lock's events as they happen.

use std::time::Instant;

use futures_util::StreamExt;
use lockman::LockManager;

use crate::{Failure, Server, code};

pub async fn run(server: &Server, name: &str) -> Result<u8, Failure> {
    if !server.single() {
        return Err(Failure::new(
            code::USAGE,
            "watch needs the URL of one server (the primary, or the cluster node that owns the name)",
        ));
    }
    // The manager checks the URL, the credentials and the TLS settings, and reads the state.
    let manager = server.connect().await?;
    let redis_err = |e: redis::RedisError| Failure::new(code::REDIS, e.to_string());
    let info = server.connection_info()?;
    let db = info.redis_settings().db();
    let client = client(server, info)?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(redis_err)?;
    // The keys and channels are the mapped name's (--prefix); what is printed is the name given.
    let key = server.config()?.mapped_name(name);
    let keyspace = format!("__keyspace@{db}__:{key}");
    let with_keyspace = keyspace_events_on(&mut conn).await;
    let mut pubsub = client.get_async_pubsub().await.map_err(redis_err)?;
    let [unlock, rwlock] = lockman::release_channels(&key);
    for channel in [&unlock, &rwlock] {
        pubsub.subscribe(channel).await.map_err(redis_err)?;
    }
    // A fair lock wakes each waiter on a channel of its own.
    pubsub
        .psubscribe(format!("{unlock}:*"))
        .await
        .map_err(redis_err)?;
    if with_keyspace {
        pubsub.subscribe(&keyspace).await.map_err(redis_err)?;
    }
    // One Ctrl-C future for the whole watch: a signal that arrives while an event is printed
    // (the select not polling) is kept for the next turn, where one made per turn would lose it.
    // Made before the first line, so that a SIGINT sent once it is read is not missed.
    let interrupted = crate::interrupted();
    tokio::pin!(interrupted);
    println!("watching {name:?} (Ctrl-C to stop)");
    print_state(&manager, name, "now").await;
    let started = Instant::now();
    let mut messages = pubsub.on_message();
    loop {
        let message = tokio::select! {
            message = messages.next() => message,
            _ = &mut interrupted => break,
        };
        let Some(message) = message else {
            crate::close(&manager).await;
            return Err(Failure::new(
                code::REDIS,
                "the connection to Redis was lost",
            ));
        };
        let channel = message.get_channel_name().to_owned();
        let payload: String = message.get_payload().unwrap_or_default();
        let at = format!("+{:.3}s", started.elapsed().as_secs_f64());
        if channel == keyspace {
            println!("{at}  {} [{payload}]", keyspace_event(&payload));
            if payload != "pexpire" {
                print_state(&manager, name, "      ").await;
            }
        } else {
            let what = release_message(channel == rwlock, &payload);
            println!("{at}  {what} (message {payload:?} on {channel})");
        }
    }
    crate::close(&manager).await;
    Ok(0)
}

/// Whether the server sends the keyspace events `watch` shows (keys, generic and hash
/// commands); says on stderr what is shown when it does not.
async fn keyspace_events_on(conn: &mut redis::aio::MultiplexedConnection) -> bool {
    let events: Result<Vec<String>, _> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("notify-keyspace-events")
        .query_async(conn)
        .await;
    match events {
        Ok(pair) => {
            let flags = pair.get(1).cloned().unwrap_or_default();
            let on = flags.contains('K')
                && (flags.contains('A') || (flags.contains('g') && flags.contains('h')));
            if !on {
                eprintln!(
                    "lockman: keyspace notifications are off here (notify-keyspace-events = {flags:?}): \
                     showing releases only; `CONFIG SET notify-keyspace-events Kghx` adds acquires, \
                     renewals and expiries"
                );
            }
            on
        }
        Err(e) => {
            eprintln!("lockman: cannot read notify-keyspace-events ({e}): showing releases only");
            false
        }
    }
}

/// What a keyspace event on the lock's hash means.
fn keyspace_event(event: &str) -> &str {
    match event {
        "hincrby" | "hset" => "acquired, re-entered or released once",
        "hdel" => "a holder's field removed",
        "pexpire" | "expire" => "renewed",
        "del" => "released (deleted)",
        "expired" => "expired",
        other => other,
    }
}

/// What a message on a release channel means (`rwlock`: the read-write lock's channel).
fn release_message(rwlock: bool, payload: &str) -> &'static str {
    match (rwlock, payload) {
        (true, "1") => "write lock released: every waiter may go",
        (_, "0") | (_, "1") => "released: a waiter may go",
        _ => "message",
    }
}

fn client(server: &Server, info: redis::ConnectionInfo) -> Result<redis::Client, Failure> {
    #[cfg(feature = "tls")]
    if let Some(path) = &server.tls_ca {
        let root_cert = std::fs::read(path)
            .map_err(|e| Failure::new(code::USAGE, format!("{}: {e}", path.display())))?;
        let certs = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(root_cert),
        };
        return redis::Client::build_with_tls(info, certs)
            .map_err(|e| Failure::new(code::USAGE, e.to_string()));
    }
    let _ = server;
    redis::Client::open(info).map_err(|e| Failure::new(code::USAGE, e.to_string()))
}

async fn print_state(manager: &LockManager, name: &str, indent: &str) {
    match manager.describe(name).await {
        Ok(info) if info.is_held() => {
            let who: Vec<String> = info
                .holders
                .iter()
                .map(|h| format!("{} ×{}", crate::text::clean(&h.holder), h.count))
                .collect();
            let ttl = info
                .ttl
                .map(|t| format!(", ttl {:.1}s", t.as_secs_f64()))
                .unwrap_or_default();
            println!("{indent}  held by {}{ttl}", who.join(", "));
        }
        Ok(_) => println!("{indent}  free"),
        Err(e) => println!("{indent}  ({e})"),
    }
}
