//! The checker: a redis-server of its own (never one that holds locks) where workers record each
//! entry into and exit from a critical section, and the fenced store they write to. Its scripts
//! run atomically there, so two entries are ordered however the workers' clocks disagree.
//!
//! Keys on the checker:
//! - `occ:<name>`: who is inside `<name>` now: field = hold id, value =
//!   `mode|worker|epoch|began` (`began`: the checker's clock, ms, when the hold began acquiring).
//! - `epoch:lock`, `epoch:redlock`: incremented by the runner before a server that lost its data
//!   comes back, and when a failover ends; a hold taken at an older epoch may legitimately be
//!   doubled. `epoch:lock:fault` (and `epoch:redlock:fault`): which fault moved each epoch on.
//! - `window:epoch:lock`: the failover under way (its fault's name), while it lasts: holds that
//!   meet meanwhile are explained by it. `epoch:lock:window`: each failover's start (the
//!   checker's clock, ms) under the epoch its end begins. `failover:start` and
//!   `failover:names` (the names it reached): the latest failover; `failover:resumed`: per
//!   failover start, how long until the first acquisition begun after it, of a name it
//!   reached, got in.
//! - `paused:<worker>`: set by the runner while that worker is frozen (a time far ahead), then
//!   to the checker's clock when it woke, for one lease more.
//! - `beats`, `stalls:<worker>`, `stall_ms`: each worker's last beat and the times its process
//!   stood still without the runner freezing it (see [`BEAT`]); a hold whose process stood
//!   still is excused as a frozen one is (`excused:stall`).
//! - `excused:pause`, `excused:restart`, `excused:failover`: the holds a fault excused (see
//!   [`ENTER`]); `violation_by_fault`: entries that met another hold, by the fault explaining it.
//! - `idle`: workers whose tasks are done and whose managers still run; `release`: set by the
//!   runner once it checked, while they run, that Redis holds nothing no live guard holds.
//! - `fence:<name>`: the fenced store: `max` (newest token accepted) and `hold` (its writer);
//!   `audit:<name>`: every accepted write, `token hold`, in order, checked at the end.
//! - `occ:chaos:leader:<i>`: the leader of an election, entered by [`ENTER`] as an exclusive
//!   hold (kind `leader`): two leaders at once are a violation, explained as two holders are.
//!   `leading:<name>`: the terms in office, hold = `worker entered` (µs); `terms:<name>`: every
//!   term ended, `entered left worker reason` (µs; reason `resigned`, `lost`, `expiring`, or
//!   `killed` by the runner). `leader_writes:<name>`: every fenced write of a leader that the
//!   lock server accepted, `term start end epoch window hold` (`start`, `end`: ticks of `seq`
//!   before the write was sent and after it was accepted).
//! - `freezes`: every freeze of a worker, `worker from to` (µs); `fault_log`: every fault
//!   injected, `fault from to` (µs): for the time without a leader after each fault.
//! - `history`: every operation of every worker, one JSON object each (see `history.rs` and
//!   the crate's `docs/histories.md`), checked at the end by an independent checker.
//! - `counter:<name>`, `cwrites` (per name): the lost-update workload's plain register and
//!   how many holds wrote it; `fcounter:<name>` and `fcounter_writes`: its fenced register and
//!   the writes it accepted (see [`FENCED_COUNTER_READ`]).
//! - `counts`: every counter of the run (workers' and the runner's), `errors`: a sample of
//!   error messages.
//! - `waiting:<name>`: the fair acquires in progress on `<name>`, field = the handle's holder id
//!   (what the lock server's queue holds), value = `worker|attempt|count` (`attempt`: a tick of
//!   `attempts`, new when the holder's first acquire in progress began; `count`: its acquires
//!   in progress, two for clones of one handle). Set by a worker before it calls the acquire
//!   and cleared after the call returned (whatever it returned, even stuck), so an entry spans
//!   the whole call; see [`WAIT_BEGIN`]. `dead`: the workers the runner killed (set before the
//!   kill) or found dead: their entries are not live. `entries`: per name, how many holds
//!   entered it (every acquisition enters). The fair heads' sampler (`heads.rs`) reads them.

use std::sync::LazyLock;

use redis::Script;

/// Records an entry; counts a violation when someone incompatible is inside, and says which
/// fault explains it. KEYS: the `occ:` keys of the names entered. ARGV: kind, hold, worker, mode
/// (`x` exclusive, `r` read, `w` write, `s` a semaphore's permit), epoch key, the epoch read
/// before acquiring, the fencing token (or -1), the fenced store's name (where a fenced holder
/// writes its token on entry), the checker's clock (ms) when the hold began acquiring, and a
/// semaphore's permits (how many `s` holds may be inside at once; 0 for other kinds).
/// A permit's entry is a violation when the semaphore's permits are all inside already, and it
/// is unexplained when at least that many of those inside (and the entry itself) have no
/// excuse. The entries of a worker marked `dead` (killed by the runner) meet nobody.
/// Reply: {cause, fenced write accepted (1/0), the checker's clock at entry (µs, as text)},
/// cause 0 none, 1 pause, 2 restart, 3 unexplained.
///
/// An excuse names the hold it is for, and every excused hold is kept in `excused:pause` or
/// `excused:restart`, so the summary can bound how many holds a fault excused:
/// - **pause**: one of the two holds belongs to a worker the runner froze (`paused:<worker>`
///   holds the checker's clock when it woke, or a time far ahead while it is frozen, and lives
///   one lease past the wake), and that hold began acquiring before the wake: it may have been
///   granted before the freeze and expired during it. A hold begun after the wake has no excuse.
/// - **restart** (a data loss): one of the two holds began acquiring before a restart that lost
///   the data or before a failover ended (`epoch:*` moved on since), or a failover is under way
///   (`window:*`). Holds excused by a failover are kept in `excused:failover`.
const ENTER: &str = r#"
local kind, hold, worker, mode = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local epoch_key = ARGV[5]
local epoch = tonumber(redis.call('get', epoch_key) or '0')
local window = redis.call('get', 'window:' .. epoch_key)
local mine = tonumber(ARGV[6])
local started = tonumber(ARGV[9])
local function frozen(w, began)
    local wake = redis.call('get', 'paused:' .. w)
    return wake and began < tonumber(wake)
end
-- Whether worker `w`'s process stood still (its beat stopped for `stall_ms` or more, see
-- [`BEAT`]) since `began`, or stands still now: a stall the runner did not inject (a starved
-- process on a loaded machine), which can outlast the hold's lease as a freeze does.
local function stalled(w, began)
    local limit = tonumber(redis.call('get', 'stall_ms') or '0')
    if limit <= 0 then return false end
    if redis.call('zcount', 'stalls:' .. w, began, '+inf') > 0 then return true end
    local last = tonumber(redis.call('hget', 'beats', w) or '0')
    local t = redis.call('time')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    return last > 0 and now - last >= limit
end
-- The fault that ended epoch `e`: what a hold taken at `e` may have been lost to.
local function ended(e)
    return redis.call('hget', epoch_key .. ':fault', e + 1) or 'unknown'
end
local function excuse(fault, h)
    if fault == 'restart-empty' or fault == 'redlock-majority' or fault == 'clock-server' then
        redis.call('sadd', 'excused:restart', h)
    else
        redis.call('sadd', 'excused:failover', h)
    end
end
local loss
local cause = 0
local permits = tonumber(ARGV[10] or '0')
for _, occ in ipairs(KEYS) do
    local inside = redis.call('hgetall', occ)
    local full = #inside / 2 >= permits
    local unexplained = 0
    for j = 1, #inside, 2 do
        local omode, oworker, oepoch, ostarted =
            string.match(inside[j + 1], '^(%a)|([^|]*)|(%d+)|(%d+)$')
        local clash = mode == 'x' or omode == 'x' or mode == 'w' or omode == 'w'
        if mode == 's' and omode == 's' then
            clash = full
        end
        -- A worker the runner killed is marked dead before the kill: its entries are gone with
        -- it, though the runner forgets them only once the process is reaped (on a loaded
        -- machine, after its hold may have expired and been taken).
        if redis.call('sismember', 'dead', oworker) == 1 then
            clash = false
        end
        if clash then
            local why = 3
            if frozen(worker, started) then
                why = 1
                redis.call('sadd', 'excused:pause', hold)
            elseif frozen(oworker, tonumber(ostarted)) then
                why = 1
                redis.call('sadd', 'excused:pause', inside[j])
            elseif stalled(worker, started) then
                why = 1
                redis.call('sadd', 'excused:stall', hold)
            elseif stalled(oworker, tonumber(ostarted)) then
                why = 1
                redis.call('sadd', 'excused:stall', inside[j])
            elseif tonumber(oepoch) < epoch then
                why = 2
                loss = ended(tonumber(oepoch))
                excuse(loss, inside[j])
            elseif mine < epoch then
                why = 2
                loss = ended(mine)
                excuse(loss, hold)
            elseif window then
                why = 2
                loss = window
                excuse(loss, inside[j])
                excuse(loss, hold)
            end
            if why == 3 and mode == 's' then
                -- One more permit holder than permits is explained by any excused one.
                unexplained = unexplained + 1
                if unexplained >= permits then
                    redis.call('rpush', 'unexplained', kind .. ' ' .. hold .. ' met ' .. inside[j] .. ' and ' .. (unexplained - 1) .. ' more')
                    cause = 3
                end
            elseif why == 3 then
                redis.call('rpush', 'unexplained', kind .. ' ' .. hold .. ' met ' .. inside[j] .. ' ' .. inside[j + 1])
                cause = 3
            elseif cause == 0 then
                cause = why
            end
        end
    end
    redis.call('hset', occ, hold, mode .. '|' .. worker .. '|' .. mine .. '|' .. started)
end
redis.call('hincrby', 'entries', ARGV[8], 1)
redis.call('hincrby', 'counts', 'acquired:' .. kind, 1)
if cause == 1 then redis.call('hincrby', 'counts', 'violation:' .. kind .. ':pause', 1) end
if cause == 2 then
    redis.call('hincrby', 'counts', 'violation:' .. kind .. ':restart', 1)
    redis.call('hincrby', 'violation_by_fault', loss, 1)
end
-- The first acquisition begun after the latest failover's start, of a name it reached (not a
-- RedLock's: it gets in without the shard that fails over).
local fstart = tonumber(redis.call('get', 'failover:start') or '-1')
if epoch_key == 'epoch:lock' and kind ~= 'redlock' and fstart >= 0 and started >= fstart
    and redis.call('sismember', 'failover:names', ARGV[8]) == 1 then
    local t = redis.call('time')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('hsetnx', 'failover:resumed', fstart, now - fstart)
end
if cause == 3 then redis.call('hincrby', 'counts', 'violation:' .. kind .. ':unexplained', 1) end
local accepted = 0
local t = redis.call('time')
local entered = t[1] .. string.format('%06d', tonumber(t[2]))
if tonumber(ARGV[7]) >= 0 then
    accepted = fenced_write(ARGV[8], ARGV[7], hold, worker, entered, started, mine)
end
return {cause, accepted, entered}
"#;

/// A write to the fenced store, as a holder makes before it leaves (see [`FENCE`]). KEYS: none.
/// ARGV: store name, token, hold, worker, the hold's entry time (from [`ENTER`]'s reply), when
/// it began acquiring (ms) and the epoch then. Reply: 1 accepted, 0 refused.
const FENCED_WRITE: &str = r#"
return fenced_write(ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7]))
"#;

/// The fenced store, shared by [`ENTER`] and [`FENCED_WRITE`]: accepts `token` for `name` when
/// it is newer than every token accepted (or the same hold's), logs it for the audit, and counts
/// the outcome. Returns 1 accepted, 0 refused. A refusal is what fencing is for when the writer
/// began acquiring before the hold whose token the store keeps had entered: a stale holder,
/// `refused_frozen` when the runner froze it, else `refused_stale` (its hold was lost, say in a
/// failover, and it wrote late). A writer that began acquiring after that hold had entered got
/// its token later, yet a lower one: `refused_split_brain` when either hold began while a
/// failover was under way (two servers took writes for a moment, each handing out tokens from
/// its copy of the counter), else `refused_backwards`: the token series went backwards. The token travels and is stored as the text it
/// came as: tokens are about 1.8 × 10¹⁵ (seeded from a clock in µs), exact as Lua numbers for
/// comparing, but a Lua number turned back into text would lose digits.
const FENCE: &str = r#"
-- Whether a hold taken at epoch `e` began (`began`, ms) while a failover was under way: in the
-- window that ends (or ended) `e`, whose start the runner keeps in `epoch:lock:window` when it
-- opens it.
local function during_failover(e, began)
    local start = redis.call('hget', 'epoch:lock:window', e + 1)
    return start ~= false and began >= tonumber(start)
end
local function fenced_write(name, token_text, hold, worker, entered, began, epoch)
    local store = 'fence:' .. name
    local token = tonumber(token_text)
    local max = tonumber(redis.call('hget', store, 'max') or '-1')
    if token > max or (token == max and redis.call('hget', store, 'hold') == hold) then
        redis.call('hset', store, 'max', token_text, 'hold', hold, 'entered', entered,
            'began', began, 'epoch', epoch)
        redis.call('rpush', 'audit:' .. name, token_text .. ' ' .. hold)
        redis.call('hincrby', 'counts', 'fenced_write:accepted', 1)
        return 1
    end
    -- The writer began acquiring after the kept hold had entered, so its token was handed out
    -- after the kept one: it should be greater.
    local kept_entered = tonumber(redis.call('hget', store, 'entered') or '0')
    if began * 1000 > kept_entered then
        local kept_epoch = tonumber(redis.call('hget', store, 'epoch') or '0')
        local kept_began = tonumber(redis.call('hget', store, 'began') or '0')
        if during_failover(epoch, began) or during_failover(kept_epoch, kept_began) then
            redis.call('hincrby', 'counts', 'fenced_write:refused_split_brain', 1)
        else
            redis.call('hincrby', 'counts', 'fenced_write:refused_backwards', 1)
        end
    elseif redis.call('exists', 'paused:' .. worker) == 1 then
        redis.call('hincrby', 'counts', 'fenced_write:refused_frozen', 1)
    else
        redis.call('hincrby', 'counts', 'fenced_write:refused_stale', 1)
    end
    return 0
end
"#;

/// A fair acquire begins. ARGV: name, holder id, worker. Reply: the attempt's tick.
const WAIT_BEGIN: &str = r#"
local key = 'waiting:' .. ARGV[1]
local v = redis.call('hget', key, ARGV[2])
if v then
    local worker, attempt, n = string.match(v, '^([^|]*)|([^|]*)|(%d+)$')
    redis.call('hset', key, ARGV[2], worker .. '|' .. attempt .. '|' .. (tonumber(n) + 1))
    return attempt
end
local attempt = redis.call('incr', 'attempts')
redis.call('hset', key, ARGV[2], ARGV[3] .. '|' .. attempt .. '|1')
return attempt
"#;

/// A fair acquire's call returned. ARGV: name, holder id. Reply: acquires of the holder still
/// in progress.
const WAIT_END: &str = r#"
local key = 'waiting:' .. ARGV[1]
local v = redis.call('hget', key, ARGV[2])
if not v then return 0 end
local worker, attempt, n = string.match(v, '^([^|]*)|([^|]*)|(%d+)$')
n = tonumber(n) - 1
if n <= 0 then
    redis.call('hdel', key, ARGV[2])
    return 0
end
redis.call('hset', key, ARGV[2], worker .. '|' .. attempt .. '|' .. n)
return n
"#;

/// The live fair acquires of each name, for the heads' sampler. ARGV: the names. Reply, per
/// name: `{entries, holder, worker|attempt, holder, worker|attempt, …}`, leaving out the
/// workers in `dead`.
const LIVE: &str = r#"
local out = {}
for i, name in ipairs(ARGV) do
    local row = {tonumber(redis.call('hget', 'entries', name) or '0')}
    local waiting = redis.call('hgetall', 'waiting:' .. name)
    for j = 1, #waiting, 2 do
        local worker, attempt = string.match(waiting[j + 1], '^([^|]*)|([^|]*)|')
        if worker and redis.call('sismember', 'dead', worker) == 0 then
            row[#row + 1] = waiting[j]
            row[#row + 1] = worker .. '|' .. attempt
        end
    end
    out[i] = row
end
return out
"#;

/// A worker's beat, every [`BEAT_EVERY`]: when the last one is `stall_ms` or more ago (the
/// checker's clock), the worker's process stood still meanwhile, and the stall is logged
/// (`stalls:<worker>`, score its end, member its start; `counts` `stalls`). ARGV: the worker,
/// `stall_ms` (kept for [`ENTER`]).
const BEAT: &str = r#"
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = tonumber(redis.call('hget', 'beats', ARGV[1]) or now)
-- A freeze the runner injected (`paused:<worker>`, set before it and kept a lease after) is
-- not a stall: it is excused as a freeze.
if now - last >= tonumber(ARGV[2]) and redis.call('exists', 'paused:' .. ARGV[1]) == 0 then
    redis.call('zadd', 'stalls:' .. ARGV[1], now, last)
    redis.call('hincrby', 'counts', 'stalls', 1)
end
redis.call('hset', 'beats', ARGV[1], now)
redis.call('set', 'stall_ms', ARGV[2])
return 0
"#;

/// How often a worker beats (see [`BEAT`]).
pub const BEAT_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Each script, hashed once (EVALSHA by redis-rs, loaded on first use).
pub static ENTER_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{FENCE}{ENTER}")));
pub static FENCED_WRITE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{FENCE}{FENCED_WRITE}")));
pub static EXIT_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(EXIT));
pub static FORGET_WORKER_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(FORGET_WORKER));
pub static INSIDE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(INSIDE));
pub static LEAVE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(LEAVE));
pub static LEADER_WRITE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(LEADER_WRITE));
pub static WAIT_BEGIN_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(WAIT_BEGIN));
pub static WAIT_END_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(WAIT_END));
pub static LIVE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(LIVE));
pub static BEAT_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(BEAT));
pub static RECORD_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RECORD));
pub static FENCED_COUNTER_READ_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(FENCED_COUNTER_READ));
pub static FENCED_COUNTER_WRITE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(FENCED_COUNTER_WRITE));

/// A leader leaves office: its exit (as [`EXIT`]) and its term logged. KEYS: the `occ:` key.
/// ARGV: the hold, the election's name, why it left. Reply: the checker's clock (µs, as text),
/// as [`EXIT`]'s.
const LEAVE: &str = r#"
redis.call('hdel', KEYS[1], ARGV[1])
local t = redis.call('time')
local left = t[1] .. string.format('%06d', tonumber(t[2]))
local term = redis.call('hget', 'leading:' .. ARGV[2], ARGV[1])
if not term then return left end
redis.call('hdel', 'leading:' .. ARGV[2], ARGV[1])
local worker, entered = string.match(term, '^(%S+) (%S+)$')
redis.call('rpush', 'terms:' .. ARGV[2], entered .. ' ' .. left .. ' ' .. worker .. ' ' .. ARGV[3])
return left
"#;

/// A leader's fenced write the lock server accepted, logged with the sequence's tick now (its
/// end). ARGV: the election's name, term, the tick before the write was sent, the epoch then,
/// whether a failover was under way then (1/0), the hold.
const LEADER_WRITE: &str = r#"
local stop = redis.call('incr', 'seq')
redis.call('rpush', 'leader_writes:' .. ARGV[1],
    ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. stop .. ' ' .. ARGV[4] .. ' ' .. ARGV[5] .. ' ' .. ARGV[6])
return stop
"#;

/// Records an exit. KEYS: the `occ:` keys. ARGV: the hold. Reply: the checker's clock (µs, as
/// text): when the holder left its critical section, the invoke time of its release in the
/// history (`history.rs`).
const EXIT: &str = r#"
for _, occ in ipairs(KEYS) do redis.call('hdel', occ, ARGV[1]) end
local t = redis.call('time')
return t[1] .. string.format('%06d', tonumber(t[2]))
"#;

/// Appends one operation to the run's history (`history`, a list of JSON objects, one per
/// operation, in the order their records reached the checker). ARGV: the object without its
/// completion time (it ends with `}`), and that time (µs) or `""`: then the checker's clock
/// now, which is after the operation returned (a later completion only widens its interval,
/// so it can hide no violation the true one would show). Reply: the completion time.
const RECORD: &str = r#"
local complete = ARGV[2]
if complete == '' then
    local t = redis.call('time')
    complete = t[1] .. string.format('%06d', tonumber(t[2]))
end
redis.call('rpush', 'history', string.sub(ARGV[1], 1, -2) .. ',"complete":' .. complete .. '}')
return complete
"#;

/// The lost-update workload's fenced register (`fcounter:<name>`: `max`, the newest token
/// seen, and `value`): a read with a token refuses a token older than `max`, and raises `max`
/// to its own, so that a holder whose lock expired cannot write what it read once a newer
/// holder has read; a write refuses a token older than `max`. An equal token is the same hold
/// (tokens are unique per hold). ARGV: name, token, and for a write the value. Reply: the
/// value read (a read), 1 (a write accepted); -1 refused.
const FENCED_COUNTER_READ: &str = r#"
local key = 'fcounter:' .. ARGV[1]
local max = tonumber(redis.call('hget', key, 'max') or '-1')
if tonumber(ARGV[2]) < max then return -1 end
redis.call('hset', key, 'max', ARGV[2])
return tonumber(redis.call('hget', key, 'value') or '0')
"#;
const FENCED_COUNTER_WRITE: &str = r#"
local key = 'fcounter:' .. ARGV[1]
local max = tonumber(redis.call('hget', key, 'max') or '-1')
if tonumber(ARGV[2]) < max then return -1 end
redis.call('hset', key, 'max', ARGV[2], 'value', ARGV[3])
redis.call('hincrby', 'counts', 'counter:fenced:written', 1)
redis.call('hincrby', 'fcounter_writes', ARGV[1], 1)
return 1
"#;

/// Forgets every entry of a worker that was killed inside, and ends its terms in office
/// (`killed`, now). ARGV: the worker. Reply: how many entries.
const FORGET_WORKER: &str = r#"
local t = redis.call('time')
local now = t[1] .. string.format('%06d', tonumber(t[2]))
for _, leading in ipairs(redis.call('keys', 'leading:*')) do
    local terms = redis.call('hgetall', leading)
    for j = 1, #terms, 2 do
        local worker, entered = string.match(terms[j + 1], '^(%S+) (%S+)$')
        if worker == ARGV[1] then
            redis.call('hdel', leading, terms[j])
            redis.call('rpush', 'terms:' .. string.sub(leading, 9),
                entered .. ' ' .. now .. ' ' .. worker .. ' killed')
        end
    end
end
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
