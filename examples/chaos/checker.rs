//! The checker: a redis-server of its own (never one that holds locks) where workers record each
//! entry into and exit from a critical section, and the fenced store they write to. Its scripts
//! run atomically there, so two entries are ordered however the workers' clocks disagree.
//!
//! Keys on the checker:
//! - `occ:<name>`: who is inside `<name>` now: field = hold id, value =
//!   `mode|worker|epoch|began` (`began`: the checker's clock, ms, when the hold began acquiring).
//! - `epoch:lock`, `epoch:redlock`: incremented by the runner before a server that lost its data
//!   comes back; a hold taken at an older epoch may legitimately be doubled.
//! - `paused:<worker>`: set by the runner while that worker is frozen (a time far ahead), then
//!   to the checker's clock when it woke, for one lease more.
//! - `excused:pause`, `excused:restart`: the holds a fault excused (see [`ENTER`]).
//! - `idle`: workers whose tasks are done and whose managers still run; `release`: set by the
//!   runner once it checked, while they run, that Redis holds nothing no live guard holds.
//! - `fence:<name>`: the fenced store: `max` (newest token accepted) and `hold` (its writer);
//!   `audit:<name>`: every accepted write, `token hold`, in order, checked at the end.
//! - `counts`: every counter of the run (workers' and the runner's), `errors`: a sample of
//!   error messages.

use std::sync::LazyLock;

use redis::Script;

/// Records an entry; counts a violation when someone incompatible is inside, and says which
/// fault explains it. KEYS: the `occ:` keys of the names entered. ARGV: kind, hold, worker, mode
/// (`x` exclusive, `r` read, `w` write), epoch key, the epoch read before acquiring, the fencing
/// token (or -1), the fenced store's name (where a fenced holder writes its token on entry), and
/// the checker's clock (ms) when the hold began acquiring.
/// Reply: {cause, fenced write accepted (1/0)}, cause
/// 0 none, 1 pause, 2 restart, 3 unexplained.
///
/// An excuse names the hold it is for, and every excused hold is kept in `excused:pause` or
/// `excused:restart`, so the summary can bound how many holds a fault excused:
/// - **pause**: one of the two holds belongs to a worker the runner froze (`paused:<worker>`
///   holds the checker's clock when it woke, or a time far ahead while it is frozen, and lives
///   one lease past the wake), and that hold began acquiring before the wake: it may have been
///   granted before the freeze and expired during it. A hold begun after the wake has no excuse.
/// - **restart**: one of the two holds began acquiring before a restart that lost the data
///   (`epoch:*` moved on since).
const ENTER: &str = r#"
local kind, hold, worker, mode = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local epoch = tonumber(redis.call('get', ARGV[5]) or '0')
local mine = tonumber(ARGV[6])
local started = tonumber(ARGV[9])
local function frozen(w, began)
    local wake = redis.call('get', 'paused:' .. w)
    return wake and began < tonumber(wake)
end
local cause = 0
for _, occ in ipairs(KEYS) do
    local inside = redis.call('hgetall', occ)
    for j = 1, #inside, 2 do
        local omode, oworker, oepoch, ostarted =
            string.match(inside[j + 1], '^(%a)|([^|]*)|(%d+)|(%d+)$')
        local clash = mode == 'x' or omode == 'x' or mode == 'w' or omode == 'w'
        if clash then
            local why = 3
            if frozen(worker, started) then
                why = 1
                redis.call('sadd', 'excused:pause', hold)
            elseif frozen(oworker, tonumber(ostarted)) then
                why = 1
                redis.call('sadd', 'excused:pause', inside[j])
            elseif tonumber(oepoch) < epoch then
                why = 2
                redis.call('sadd', 'excused:restart', inside[j])
            elseif mine < epoch then
                why = 2
                redis.call('sadd', 'excused:restart', hold)
            end
            if why == 3 then
                redis.call('rpush', 'unexplained', kind .. ' ' .. hold .. ' met ' .. inside[j] .. ' ' .. inside[j + 1])
            end
            if cause == 0 or why == 3 then cause = why end
        end
    end
    redis.call('hset', occ, hold, mode .. '|' .. worker .. '|' .. mine .. '|' .. started)
end
redis.call('hincrby', 'counts', 'acquired:' .. kind, 1)
if cause == 1 then redis.call('hincrby', 'counts', 'violation:' .. kind .. ':pause', 1) end
if cause == 2 then redis.call('hincrby', 'counts', 'violation:' .. kind .. ':restart', 1) end
if cause == 3 then redis.call('hincrby', 'counts', 'violation:' .. kind .. ':unexplained', 1) end
local accepted = 0
local token = tonumber(ARGV[7])
if token >= 0 then
    accepted = fenced_write(ARGV[8], token, hold, worker)
end
return {cause, accepted}
"#;

/// A write to the fenced store, as a holder makes before it leaves (see [`FENCE`]). KEYS: none.
/// ARGV: store name, token, hold, worker. Reply: 1 accepted, 0 refused;
/// a refusal is counted as `refused_frozen` when the writer was frozen (a stale holder the fence
/// stopped), else `refused_other` (a token lower than one accepted before: the counter was lost).
const FENCED_WRITE: &str = r#"
return fenced_write(ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4])
"#;

/// The fenced store, shared by [`ENTER`] and [`FENCED_WRITE`]: accepts `token` for `name` when
/// it is newer than every token accepted (or the same hold's), logs it for the audit, and counts
/// the outcome. Returns 1 accepted, 0 refused.
const FENCE: &str = r#"
local function fenced_write(name, token, hold, worker)
    local store = 'fence:' .. name
    local max = tonumber(redis.call('hget', store, 'max') or '-1')
    if token > max or (token == max and redis.call('hget', store, 'hold') == hold) then
        redis.call('hset', store, 'max', token, 'hold', hold)
        redis.call('rpush', 'audit:' .. name, token .. ' ' .. hold)
        redis.call('hincrby', 'counts', 'fenced_write:accepted', 1)
        return 1
    end
    if redis.call('exists', 'paused:' .. worker) == 1 then
        redis.call('hincrby', 'counts', 'fenced_write:refused_frozen', 1)
    else
        redis.call('hincrby', 'counts', 'fenced_write:refused_other', 1)
    end
    return 0
end
"#;

/// Each script, hashed once (EVALSHA by redis-rs, loaded on first use).
pub static ENTER_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{FENCE}{ENTER}")));
pub static FENCED_WRITE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{FENCE}{FENCED_WRITE}")));
pub static EXIT_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(EXIT));
pub static FORGET_WORKER_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(FORGET_WORKER));
pub static INSIDE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(INSIDE));

/// Records an exit. KEYS: the `occ:` keys. ARGV: the hold.
const EXIT: &str = r#"
for _, occ in ipairs(KEYS) do redis.call('hdel', occ, ARGV[1]) end
return 0
"#;

/// Forgets every entry of a worker that was killed inside. ARGV: the worker. Reply: how many.
const FORGET_WORKER: &str = r#"
local n = 0
for _, occ in ipairs(redis.call('keys', 'occ:*')) do
    local inside = redis.call('hgetall', occ)
    for j = 1, #inside, 2 do
        if string.match(inside[j + 1], '^%a|([^|]*)|') == ARGV[1] then
            redis.call('hdel', occ, inside[j])
            n = n + 1
        end
    end
end
return n
"#;

/// The workers inside some critical section now. Reply: their ids (repeats possible).
const INSIDE: &str = r#"
local out = {}
for _, occ in ipairs(redis.call('keys', 'occ:*')) do
    for _, v in ipairs(redis.call('hvals', occ)) do
        out[#out + 1] = string.match(v, '^%a|([^|]*)|')
    end
end
return out
"#;

/// Stale writes the store accepted, from its audit lists: an accepted token lower than one
/// accepted before it, or equal to one accepted for another hold. Must be 0.
pub fn stale_accepted(conn: &mut redis::Connection) -> redis::RedisResult<u64> {
    let lists: Vec<String> = redis::cmd("KEYS").arg("audit:*").query(conn)?;
    let mut stale = 0;
    for list in lists {
        let writes: Vec<String> = redis::cmd("LRANGE").arg(&list).arg(0).arg(-1).query(conn)?;
        let mut newest: Option<(u64, String)> = None;
        for write in writes {
            let Some((token, hold)) = write.split_once(' ') else {
                stale += 1;
                continue;
            };
            let token: u64 = token.parse().unwrap_or(0);
            match &newest {
                Some((max, by)) if token < *max || (token == *max && by != hold) => stale += 1,
                _ => newest = Some((token, hold.to_owned())),
            }
        }
    }
    Ok(stale)
}

/// The checker's clock in ms, from its `TIME` reply (seconds, microseconds).
pub fn clock_ms((secs, micros): (u64, u64)) -> u64 {
    secs * 1000 + micros / 1000
}
