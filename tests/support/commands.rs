//! What Redis itself counts and hears, read raw: calls of a command since a reset (INFO
//! commandstats), scripts loaded before counting, and a raw subscriber standing in for another
//! client.

use std::collections::BTreeSet;
use std::time::Duration;

use redis::Commands;

/// Number of calls of `command` (lowercase, e.g. `evalsha`, `publish`) since the last
/// CONFIG RESETSTAT, from INFO commandstats.
pub fn command_calls(conn: &mut redis::Connection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// CONFIG RESETSTAT: command counts start again from zero.
pub fn reset_stats(conn: &mut redis::Connection) {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query::<()>(conn)
        .expect("CONFIG RESETSTAT");
}

/// Takes and releases `lock` once, so that its kind's acquire and release scripts are loaded: on
/// a fresh server each first EVALSHA is a NOSCRIPT miss, which would skew counts and stalls.
pub async fn load_scripts(lock: &lockman::Lock) {
    lock.try_acquire()
        .await
        .expect("warm-up acquire")
        .expect("warm-up lock is free")
        .release()
        .await
        .expect("warm-up release");
}

/// A raw subscriber, standing in for another client: `command` (`SUBSCRIBE`, `SSUBSCRIBE`)
/// on `channel` over a blocking connection that gives up reading after 3 s.
pub fn listen(mut conn: redis::Connection, command: &str, channel: &str) -> redis::Connection {
    conn.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("read timeout");
    redis::cmd(command)
        .arg(channel)
        .exec(&mut conn)
        .expect("subscribe");
    conn
}

/// The next message a [`listen`] connection hears: `[kind, channel, payload]`.
pub fn next_message(conn: &mut redis::Connection) -> Vec<String> {
    let heard = conn.recv_response().expect("a message within 3 s");
    redis::from_redis_value(heard).expect("a pub/sub message")
}

/// Every key but the managers' client records (lockman's own, unprefixed, written from a
/// manager's first hold on): what a test's locks left, or wrote.
pub fn keys_but_records(raw: &mut redis::Connection) -> BTreeSet<String> {
    let keys: BTreeSet<String> = raw.keys("*").expect("KEYS");
    keys.into_iter()
        .filter(|k| !k.starts_with("lockman_client:{lockman}"))
        .collect()
}

/// [`keys_but_records`], split into the unlock request latches and the rest.
pub fn latches_and_rest(raw: &mut redis::Connection) -> (BTreeSet<String>, BTreeSet<String>) {
    keys_but_records(raw)
        .into_iter()
        .partition(|k| k.starts_with("redisson_unlock_latch:"))
}
