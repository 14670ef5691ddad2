//! Fenced lock: why a lock alone is not enough, and how a token makes storage safe.
//! A slow holder pauses past its lease; a second holder takes over and writes; the slow one
//! wakes up and writes too. Storage that keeps the highest token it has seen refuses the stale
//! write (a Lua "write if token ≥ stored token" on a Redis hash).
//!
//! Run: `cargo run --example fenced` (uses `REDIS_URL`, else 127.0.0.1:6379, else starts a
//! private redis-server for the run).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use lockman::{LockError, LockManager};

/// KEYS[1]: the record. ARGV[1]: the writer's token; ARGV[2]: the value.
/// Reply: 1 when written, 0 when refused (a greater token was seen).
const FENCED_WRITE: &str = r"
local seen = tonumber(redis.call('hget', KEYS[1], 'token') or '0')
if tonumber(ARGV[1]) < seen then return 0 end
redis.call('hset', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return 1";

/// Writes `value` to `record` if `token` is not below the highest token the record has seen.
async fn write(
    storage: &mut redis::aio::MultiplexedConnection,
    record: &str,
    token: u64,
    value: &str,
) -> Result<bool, LockError> {
    let script = redis::Script::new(FENCED_WRITE);
    let written: i64 = script
        .key(record)
        .arg(token)
        .arg(value)
        .invoke_async(storage)
        .await
        .map_err(|source| LockError::Redis {
            op: "fenced write",
            source,
        })?;
    Ok(written == 1)
}

#[tokio::main]
async fn main() {
    let (url, _server) = support::example::or_exit(support::example::redis_for_example());
    if let Err(e) = run(&url).await {
        eprintln!("fenced example failed: {e}");
        std::process::exit(1);
    }
}

async fn run(url: &str) -> Result<(), LockError> {
    let manager = LockManager::connect(url).await?;
    let client = redis::Client::open(url).map_err(|e| LockError::Redis {
        op: "example",
        source: e,
    })?;
    let mut storage = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| LockError::Redis {
            op: "example",
            source: e,
        })?;
    let record = "example:fenced:record";

    let slow = manager
        .fenced_lock("example:fenced")
        .acquire_with_lease(Duration::from_millis(200))
        .await?;
    println!(
        "slow holder: token {}, lease 200 ms ... and then it pauses for 400 ms",
        slow.token()
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    println!("slow holder's lock is lost: {}", slow.is_lost());

    let fast = manager.fenced_lock("example:fenced").acquire().await?;
    let ok = write(&mut storage, record, fast.token(), "from the new holder").await?;
    println!("new holder: token {}, write accepted: {ok}", fast.token());
    let stale = write(&mut storage, record, slow.token(), "from the stale holder").await?;
    println!(
        "slow holder wakes up and writes with token {}: accepted: {stale}",
        slow.token()
    );
    fast.release().await?;
    manager.shutdown().await;
    Ok(())
}
