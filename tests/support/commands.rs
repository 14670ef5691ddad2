//! What Redis itself counts and hears, read raw: calls of a command since a reset (INFO
//! commandstats), scripts loaded before counting, and a raw subscriber standing in for another
//! client.

use std::collections::BTreeSet;
use std::time::Duration;

use redis::Commands;

/// Number of calls of `command` (lowercase, e.g. `evalsha`, `publish`) since the last
/// CONFIG RESETSTAT, from INFO commandstats.
pub fn command_calls(conn: &mut redis::Connection, command: &str) -> u64 {
    command_stats(conn)
        .into_iter()
        .find_map(|(name, calls)| (name == command).then_some(calls))
        .unwrap_or(0)
}

/// `INFO commandstats` as (command, calls): every command the server counted since the last
/// CONFIG RESETSTAT.
pub fn command_stats(conn: &mut redis::Connection) -> Vec<(String, u64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO");
    info.lines()
        .filter_map(|l| {
            let (cmd, rest) = l.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            Some((cmd.to_owned(), rest.split(',').next()?.parse().ok()?))
        })
        .collect()
}

/// The server's `redis_version` (INFO server; Valkey reports the Redis version it matches
/// there too), or `?`.
pub fn server_version(conn: &mut redis::Connection) -> String {
    let info: String = redis::cmd("INFO").arg("server").query(conn).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned()
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

/// Every command the server runs from now on, as `MONITOR` prints it, gathered by a thread
/// (which may lag behind the server: read after the commands wanted have been seen).
pub fn monitor(server: &super::RedisServer) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut conn = server.conn();
    redis::cmd("MONITOR").exec(&mut conn).expect("MONITOR");
    let seen = lines.clone();
    std::thread::spawn(move || {
        while let Ok(value) = conn.recv_response() {
            if let Ok(line) = redis::from_redis_value::<String>(value) {
                seen.lock().unwrap().push(line);
            }
        }
    });
    lines
}

/// Kills every client of `types` (`normal`, `pubsub`, ...) but `raw` itself.
pub fn kill_clients(raw: &mut redis::Connection, types: &[&str]) {
    for kind in types {
        let _: u64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg(*kind)
            .arg("SKIPME")
            .arg("yes")
            .query(raw)
            .unwrap();
    }
}
