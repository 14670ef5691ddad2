//! A fair lock's keys as Redis has them: the queue, the deadlines, and the clock they are in.

use std::time::{SystemTime, UNIX_EPOCH};

use redis::Commands;

/// The queue of `name` (`redisson_lock_queue:{name}`), head first.
pub fn queue(raw: &mut redis::Connection, name: &str) -> Vec<String> {
    raw.lrange(format!("redisson_lock_queue:{{{name}}}"), 0, -1)
        .unwrap()
}

/// The places' deadlines of `name` (`redisson_lock_timeout:{name}`), epoch ms, earliest first.
pub fn deadlines(raw: &mut redis::Connection, name: &str) -> Vec<(String, i64)> {
    raw.zrange_withscores(format!("redisson_lock_timeout:{{{name}}}"), 0, -1)
        .unwrap()
}

/// Now in the deadlines' clock: epoch ms.
pub fn epoch_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
