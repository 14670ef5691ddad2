//! The floor every benchmark compares with: redis-rs alone, running lockman's own acquire and
//! release scripts by EVALSHA on a `ConnectionManager` (the connection kind lockman uses), with
//! none of lockman's bookkeeping. Shared by the benches and the load generator.
//!
//! Two floors: `pair` sends the scripts through redis-rs's `ScriptInvocation` (the usual way,
//! and how every ratio before the presized command was taken); `pair_cmd` builds each EVALSHA as
//! one presized `redis::Cmd`, the cheapest way redis-rs allows, as lockman itself does.
#![allow(dead_code)]

use std::sync::LazyLock;

use redis::Script;
use redis::aio::ConnectionManager;

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../src/protocol/acquire.lua")));
// lockman's release script: its prologue, then its tail (src/protocol/mod.rs).
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../../src/protocol/release_prologue.lua"),
        include_str!("../../src/protocol/release.lua")
    ))
});

/// The lease every raw hold is taken with (ms).
const LEASE_MS: u64 = 30_000;

/// A connection to `url`.
pub async fn connect(url: &str) -> ConnectionManager {
    connect_client(redis::Client::open(url).expect("valid url")).await
}

/// A connection through `client` (one built for TLS, say).
pub async fn connect_client(client: redis::Client) -> ConnectionManager {
    ConnectionManager::new(client).await.expect("connect")
}

/// One acquire attempt of `holder` on `name`: `None` when taken (the script replies the holder's
/// count), else the holder's PTTL (ms).
pub async fn acquire(conn: &ConnectionManager, name: &str, holder: &str) -> Option<u64> {
    let reply: redis::Value = ACQUIRE
        .key(name)
        .arg(LEASE_MS)
        .arg(holder)
        .arg(0) // the holder's count before: none (lockman's scripts check it, protocol.md)
        .invoke_async(&mut conn.clone())
        .await
        .expect("acquire script");
    match reply {
        redis::Value::Int(ttl) => Some(ttl.max(0) as u64),
        _ => None,
    }
}

/// One release of `holder` on `name`; `Some(1)` when it unlocked (and published `0`).
pub async fn release(conn: &ConnectionManager, name: &str, holder: &str) -> Option<i64> {
    RELEASE
        .key(name)
        .key(channel(name))
        .arg("0")
        .arg(LEASE_MS)
        .arg(holder)
        .arg("publish")
        .arg(1) // the holder's count before: one hold
        .invoke_async(&mut conn.clone())
        .await
        .expect("release script")
}

/// An uncontended acquire + release, checked.
pub async fn pair(conn: &ConnectionManager, name: &str, holder: &str) {
    assert!(
        acquire(conn, name, holder).await.is_none(),
        "raw lock taken"
    );
    assert_eq!(release(conn, name, holder).await, Some(1));
}

/// The unlock channel of `name` (protocol.md).
pub fn channel(name: &str) -> String {
    format!("redisson_lock__channel:{{{name}}}")
}

/// The cheapest floor: each EVALSHA one presized command (the scripts loaded once first, as
/// `load` does). An uncontended acquire + release, checked.
pub async fn pair_cmd(conn: &ConnectionManager, name: &str, channel: &str, holder: &str) {
    assert!(acquire_cmd(conn, name, holder).await, "raw lock taken");
    assert_eq!(release_cmd(conn, name, channel, holder).await, Some(1));
}

/// One acquire attempt as one presized EVALSHA command: whether `holder` took `name` (the script
/// replies the holder's count as a table when it did, the PTTL as an integer when taken).
pub async fn acquire_cmd(conn: &ConnectionManager, name: &str, holder: &str) -> bool {
    let mut conn = conn.clone();
    let mut acquire = redis::Cmd::with_capacity(7, 128);
    acquire
        .arg("EVALSHA")
        .arg(ACQUIRE.get_hash())
        .arg(1)
        .arg(name)
        .arg(LEASE_MS)
        .arg(holder)
        .arg(0);
    let reply: redis::Value = acquire.query_async(&mut conn).await.expect("acquire");
    !matches!(reply, redis::Value::Int(_))
}

/// One release of `holder`'s single hold on `name` as one presized EVALSHA command; `Some(1)`
/// when it unlocked (and published `0` on `channel`).
pub async fn release_cmd(
    conn: &ConnectionManager,
    name: &str,
    channel: &str,
    holder: &str,
) -> Option<i64> {
    let mut conn = conn.clone();
    let mut release = redis::Cmd::with_capacity(11, 192);
    release
        .arg("EVALSHA")
        .arg(RELEASE.get_hash())
        .arg(2)
        .arg(name)
        .arg(channel)
        .arg("0")
        .arg(LEASE_MS)
        .arg(holder)
        .arg("publish")
        .arg(1);
    release.query_async(&mut conn).await.expect("release")
}

/// Loads both scripts, for `pair_cmd` (which sends EVALSHA only).
pub async fn load(conn: &ConnectionManager) {
    let mut conn = conn.clone();
    for script in [&*ACQUIRE, &*RELEASE] {
        script
            .prepare_invoke()
            .load_async(&mut conn)
            .await
            .expect("script load");
    }
}
