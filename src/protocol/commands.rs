//! [`Commands`]: every script call lockman makes, with its arguments and its reply decoded.

use std::time::Duration;

use redis::{Script, Value};

use super::*;
use crate::config::Config;
use crate::connections::command::{Conn, Replicas, ScriptCall, Spawner, Unsynced};
use crate::connections::endpoint::Endpoint;
use crate::connections::tracking::Tracking;
use crate::error::LockError;
use crate::protocol::keys::{self, UNLOCK_MESSAGE, WAKE_ALL_MESSAGE};

mod admin;

/// The command connections (see `connections/command.rs`) and the scripts run on them. Cheap to clone: clones
/// share the connections.
#[derive(Clone)]
pub(crate) struct Commands {
    conn: Conn,
    /// How long a synchronizer's request latch lives, in ms: past the time a synchronizer
    /// actor keeps sending a request whose reply never came (at most the watchdog timeout), plus
    /// four response timeouts (the last resend may wait for the round trip under way, then take
    /// its own). Lock requests have no latch: their holder's count tells (`Expect`).
    latch_ttl: u64,
    /// The lock-delay in ms ([`Config::lock_delay`]), 0 for none.
    lock_delay: u64,
    /// Each group lock holder's members (`group.rs`).
    groups: Groups,
}

impl Commands {
    /// Connects to the endpoint's primary and checks the user's permissions, failing within
    /// the config's connect timeout when Redis is unreachable.
    pub(crate) async fn open(endpoint: Endpoint, config: &Config) -> Result<Self, LockError> {
        let conn = Conn::open(endpoint, config).await?;
        let limit = config.get_connect_timeout();
        probe::check_access_following(&conn, &all_scripts(), limit).await?;
        let latch_ttl = latch_ttl(config);
        let lock_delay = match config.get_lock_delay() {
            Duration::ZERO => 0,
            delay => millis(delay),
        };
        Ok(Self {
            conn,
            latch_ttl: millis(latch_ttl),
            lock_delay,
            groups: Groups::default(),
        })
    }

    /// The same commands on a lane of their own (connections whose I/O runs on `home`'s
    /// thread): see [`Conn::add_lane`].
    pub(crate) async fn add_lane(&self, home: Spawner) -> Result<Self, LockError> {
        Ok(Self {
            conn: self.conn.add_lane(home).await?,
            ..self.clone()
        })
    }

    /// The same commands, for the calls of one task that polls them all at each wake (a
    /// lock actor's round trips): their response timeouts are kept by one timer they share
    /// ([`Conn::for_one_task`]), not a timer per call.
    pub(crate) fn for_one_task(&self) -> Self {
        Self {
            conn: self.conn.for_one_task(),
            ..self.clone()
        }
    }

    /// Each group lock holder's members.
    pub(crate) fn groups(&self) -> &Groups {
        &self.groups
    }

    /// Where the primary is.
    pub(crate) fn endpoint(&self) -> &Endpoint {
        self.conn.endpoint()
    }

    /// After a failover: move every connection to the endpoint's current primary.
    pub(crate) async fn switch_primary(&self) -> Result<(), LockError> {
        self.conn.switch().await
    }

    /// Checks a lock name before anything is sent: not empty, and in a cluster, braces that keep
    /// all of its keys in one slot ([`keys::check_cluster_name`]).
    pub(crate) fn check_name(&self, name: &str) -> Result<(), LockError> {
        keys::validate_name(name)?;
        if self.endpoint().cluster().is_some() {
            keys::check_cluster_name(name)?;
        }
        Ok(())
    }

    /// Whether renewal batches must be split by slot (a script's keys must share one).
    pub(crate) fn by_slot(&self) -> bool {
        self.endpoint().cluster().is_some()
    }

    /// The connections, for the synchronizers' calls (`sync.rs`).
    pub(crate) fn conn(&self) -> &Conn {
        &self.conn
    }

    /// How long a synchronizer's request latch lives, in ms.
    pub(super) fn latch_ttl_ms(&self) -> u64 {
        self.latch_ttl
    }

    /// `publish` or `spublish`, for the synchronizers' calls.
    pub(super) fn publish_command(&self) -> &'static str {
        self.publish()
    }

    /// `publish` or `spublish`: see [`Endpoint::publish_command`].
    fn publish(&self) -> &'static str {
        self.conn.endpoint().publish_command()
    }

    /// The requests of `holder` on the lock `name` of `kind`.
    pub(crate) fn holder<'a>(
        &'a self,
        kind: LockKind,
        name: &'a str,
        holder: &'a str,
    ) -> HolderCalls<'a> {
        HolderCalls {
            commands: self,
            kind,
            name,
            holder,
        }
    }

    /// Brings `holder`'s count in Redis down to `target` when requests of unknown outcome were
    /// given up (Redis unreachable for too long): reads it, then releases
    /// what is over. Exact because every hold of a holder is its lock actor's, and the actor
    /// runs nothing else on the name meanwhile; `target` is all that the actor still grants.
    /// Replies the count afterwards (0: the field is gone); a release that fails stops early,
    /// with the count so far. `lapsed`: the hold's lease ran out (it ended without a release),
    /// so the releases leave the name's lock-delay key to run out on its own.
    pub(crate) async fn settle_releases(
        &self,
        kind: LockKind,
        name: &str,
        holder: &str,
        target: u32,
        lease: Duration,
        lapsed: bool,
    ) -> Result<u32, LockError> {
        let mut in_redis = self.inspect(kind, name, holder).await?.count;
        let delay = if lapsed { 0 } else { self.lock_delay };
        while in_redis > target {
            let expect = Expect::count(in_redis);
            let calls = self.holder(kind, name, holder);
            match calls.release_with_delay(lease, expect, delay).await {
                Ok(Released::StillHeld) => in_redis -= 1,
                Ok(Released::Unlocked | Released::NotHeld) => in_redis = 0,
                Err(_) => break,
            }
        }
        Ok(in_redis)
    }

    /// A fair-lock waiter gives up: it leaves the queue, and those behind it get `wait` back.
    /// Idempotent: a second run finds no place and changes nothing.
    pub(crate) async fn leave_queue(
        &self,
        name: &str,
        holder: &str,
        wait: Duration,
    ) -> Result<bool, LockError> {
        let key = keys::lock_key(name);
        let mut call = ScriptCall::new(&FAIR_LEAVE, 4, 4, 4 * name.len() + holder.len() + 96);
        call.key(key)
            .key(keys::fair_queue(name))
            .key(keys::fair_deadlines(name))
            .key(keys::unlock_channel(name))
            .arg(holder)
            .arg(millis(wait))
            .arg(UNLOCK_MESSAGE)
            .arg(self.publish());
        // With replica sync, a leave the replicas did not take is an error: sent again (it is
        // idempotent), since a failover would otherwise bring the place back.
        let reply = self.conn.eval("leave queue", key, &call, Replicas::Wait);
        match reply.await?.synced()? {
            Value::Int(n) => Ok(n == 1),
            other => Err(unexpected("leave queue", other)),
        }
    }

    /// Keeps this client's fair-queue places alive (`fair_refresh.lua`): each of `places` (a
    /// holder and its place's wait) still queued gets the come-back rule, the head's base capped
    /// at `cap` after now (the server's clock). Not synced to replicas: a refresh lost in a failover is made again a
    /// third of a place timeout later.
    pub(crate) async fn fair_refresh(
        &self,
        name: &str,
        places: &[(Arc<str>, Duration)],
        cap: Duration,
    ) -> Result<Refreshed, LockError> {
        let key = keys::lock_key(name);
        let held: usize = places.iter().map(|(holder, _)| holder.len() + 20).sum();
        let mut call = ScriptCall::new(
            &FAIR_REFRESH,
            4,
            3 + 2 * places.len(),
            4 * name.len() + held + 96,
        );
        call.key(key)
            .key(keys::fair_queue(name))
            .key(keys::fair_deadlines(name))
            .key(keys::unlock_channel(name))
            .arg(millis(cap))
            .arg(UNLOCK_MESSAGE)
            .arg(self.publish());
        for (holder, wait) in places {
            call.arg(&**holder).arg(millis(*wait));
        }
        let reply = self.conn.eval("fair refresh", key, &call, Replicas::Skip);
        match reply.await?.value {
            Value::Array(items) => {
                let mut items = items.into_iter().map(|v| match v {
                    Value::BulkString(b) => String::from_utf8(b).ok().map(Arc::<str>::from),
                    _ => None,
                });
                let head = items.next().flatten().filter(|h| !h.is_empty());
                Ok(Refreshed {
                    head,
                    gone: items.flatten().collect(),
                })
            }
            other => Err(unexpected("fair refresh", other)),
        }
    }

    /// Renews each group hold of `holds` (`group_renew.lua`, one call per hold: a hold's members
    /// may be many): `true` for each hold still in place. A holder whose members are no longer
    /// known counts as not in place.
    async fn renew_groups(
        &self,
        holds: &[(&str, &str)],
        timeout: Duration,
        tracking: Option<&Tracking>,
    ) -> Result<Vec<bool>, LockError> {
        let mut renewed = Vec::with_capacity(holds.len());
        for (name, holder) in holds {
            let Ok(members) = self.groups.members(holder) else {
                renewed.push(false);
                continue;
            };
            let key = keys::lock_key(name);
            let call = group_call(&group::GROUP_RENEW, key, holder, &members, Some(timeout));
            match self.renewal(key, slot_of(key), &call, tracking).await? {
                Value::Int(n) => renewed.push(n == 1),
                other => return Err(unexpected("renew", other)),
            }
        }
        Ok(renewed)
    }

    /// Renews up to [`RENEW_BATCH`] holds of one kind (`renew.lua`; `renew_read.lua` for read
    /// holds, which also renews the holder's own timeout keys, and no other reader's): `true`
    /// for each hold still in place. With `tracking`, the call runs on the tracking connection
    /// (see [`renewal`](Self::renewal)).
    pub(crate) async fn renew(
        &self,
        kind: LockKind,
        holds: &[(&str, &str)],
        timeout: Duration,
        tracking: Option<&Tracking>,
    ) -> Result<Vec<bool>, LockError> {
        let read = kind == LockKind::Read;
        if kind == LockKind::Group {
            return self.renew_groups(holds, timeout, tracking).await;
        }
        if kind == LockKind::Reentrant && self.lock_delay > 0 {
            return self.renew_delayed(holds, timeout, tracking).await;
        }
        let (script, per_hold): (&Script, usize) =
            if read { (&RENEW_READ, 2) } else { (&RENEW, 1) };
        let bytes: usize = holds
            .iter()
            .map(|(name, holder)| (1 + per_hold) * (name.len() + 24) + holder.len())
            .sum();
        let mut call = ScriptCall::new(script, holds.len(), 1 + per_hold * holds.len(), bytes);
        for (name, _) in holds {
            call.key(keys::lock_key(name));
        }
        call.arg(millis(timeout));
        for (name, holder) in holds {
            call.arg(kind.field(holder));
            if read {
                call.arg(keys::tagged(name));
            }
        }
        match self.renewal("", first_slot(holds), &call, tracking).await? {
            Value::Array(items) if items.len() == holds.len() => {
                Ok(items.iter().map(|v| matches!(v, Value::Int(1))).collect())
            }
            other => Err(unexpected("renew", other)),
        }
    }

    /// [`renew`](Self::renew) for reentrant holds with a lock-delay (`renew_delay.lua`): each
    /// hold's delay key is set to outlive it by the delay.
    async fn renew_delayed(
        &self,
        holds: &[(&str, &str)],
        timeout: Duration,
        tracking: Option<&Tracking>,
    ) -> Result<Vec<bool>, LockError> {
        let bytes: usize = holds
            .iter()
            .map(|(name, holder)| 2 * name.len() + 40 + holder.len())
            .sum();
        let mut call = ScriptCall::new(&RENEW_DELAY, 2 * holds.len(), 2 + holds.len(), bytes);
        for (name, _) in holds {
            call.key(keys::lock_key(name));
        }
        for (name, _) in holds {
            call.key(keys::delay_key(name));
        }
        call.arg(millis(timeout)).arg(self.lock_delay);
        for (_, holder) in holds {
            call.arg(*holder);
        }
        match self.renewal("", first_slot(holds), &call, tracking).await? {
            Value::Array(items) if items.len() == holds.len() => {
                Ok(items.iter().map(|v| matches!(v, Value::Int(1))).collect())
            }
            other => Err(unexpected("renew", other)),
        }
    }

    /// Runs one renewal call. On the tracking connection when one is given and replica sync is
    /// off (`WAIT` would block that connection and its checks): every renewal script reads the
    /// lock key again after writing it, and the tracking connection has `NOLOOP`, so a renewal
    /// there sends no invalidation to lockman and leaves the key tracked (docs/protocol.md
    /// "Watched holds"); on a command connection, each renewal of a watched hold would be an
    /// invalidation, and a check. A renewal writes the same thing however often it is sent, so
    /// a call whose reply was lost is resolved by sending it again, on any connection.
    async fn renewal(
        &self,
        key: &str,
        slot: u16,
        call: &ScriptCall<'_>,
        tracking: Option<&Tracking>,
    ) -> Result<Value, LockError> {
        match tracking {
            Some(tracking) if !self.conn.syncs_replicas() => {
                tracking.eval("renew", slot, call).await
            }
            _ => self
                .conn
                .eval("renew", key, call, Replicas::Wait)
                .await?
                .synced(),
        }
    }

    /// Whether each of up to [`RENEW_BATCH`] lock holds is still in place (`held.lua`), read on
    /// the tracking connection, which registers their keys: the server then tells it when one
    /// of them is written. Changes nothing.
    pub(crate) async fn held(
        &self,
        tracking: &Tracking,
        kind: LockKind,
        holds: &[(&str, &str)],
    ) -> Result<Vec<bool>, LockError> {
        if kind == LockKind::Group {
            let mut held = Vec::with_capacity(holds.len());
            for (name, holder) in holds {
                let Ok(members) = self.groups.members(holder) else {
                    held.push(false);
                    continue;
                };
                let call = group_call(&group::GROUP_HELD, name, holder, &members, None);
                match tracking.eval("held", slot_of(name), &call).await? {
                    Value::Int(n) => held.push(n == 1),
                    other => return Err(unexpected("held", other)),
                }
            }
            return Ok(held);
        }
        let bytes: usize = holds
            .iter()
            .map(|(name, holder)| name.len() + 24 + holder.len())
            .sum();
        let mut call = ScriptCall::new(&HELD, holds.len(), holds.len(), bytes);
        for (name, _) in holds {
            call.key(keys::lock_key(name));
        }
        for (_, holder) in holds {
            call.arg(kind.field(holder));
        }
        match tracking.eval("held", first_slot(holds), &call).await? {
            Value::Array(items) if items.len() == holds.len() => {
                Ok(items.iter().map(|v| matches!(v, Value::Int(1))).collect())
            }
            other => Err(unexpected("held", other)),
        }
    }
}

/// The cluster slot of `key`: on a cluster, which master's tracking connection a call on it
/// goes to.
fn slot_of(key: &str) -> u16 {
    keys::slot(key.as_bytes())
}

/// The slot of a batch's holds (the Watchdog batches them by slot on a cluster): its first
/// lock key's.
fn first_slot(holds: &[(&str, &str)]) -> u16 {
    holds
        .first()
        .map_or(0, |(name, _)| slot_of(keys::lock_key(name)))
}

/// One holder's requests on one lock: what a lock actor asks of Redis for a holder. Each
/// script is its kind's ([`LockKind::acquire_call`], [`LockKind::release_call`]).
#[derive(Clone, Copy)]
pub(crate) struct HolderCalls<'a> {
    commands: &'a Commands,
    kind: LockKind,
    name: &'a str,
    holder: &'a str,
}

/// Whom a hand-off grants the lock to, and for how long.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Successor<'a> {
    pub holder: &'a str,
    pub lease: Duration,
}

impl HolderCalls<'_> {
    /// One acquire attempt, for `lease`; `expect`: the holder's count before it. Waits for
    /// replicas with replica sync: a grant too few of them have is [`Attempt::Unsynced`].
    pub(crate) async fn acquire(
        self,
        lease: Duration,
        fair: FairArgs,
        expect: Expect,
    ) -> Result<Attempt, LockError> {
        let Self {
            commands,
            kind,
            name,
            holder,
        } = self;
        let publish = commands.publish();
        let delay = commands.lock_delay;
        let mut call = kind.acquire_call(name, holder, lease, fair, expect, publish, delay);
        if kind == LockKind::Group {
            for m in commands.groups.members(holder)?.iter() {
                call.arg(m);
            }
        }
        let key = keys::lock_key(name);
        let reply = commands
            .conn
            .eval("acquire", key, &call, Replicas::Wait)
            .await?;
        match (decode_attempt(kind, reply.value)?, reply.unsynced) {
            // Not on enough replicas to survive a failover: the caller gives it back.
            (Attempt::Acquired { .. }, Some(Unsynced { acked, wanted })) => {
                Ok(Attempt::Unsynced { acked, wanted })
            }
            (attempt, _) => Ok(attempt),
        }
    }

    /// Releases one hold, restoring `lease` when holds remain; `expect`: the holder's count
    /// before it.
    pub(crate) async fn release(
        self,
        lease: Duration,
        expect: Expect,
    ) -> Result<Released, LockError> {
        let delay = self.commands.lock_delay;
        self.release_with_delay(lease, expect, delay).await
    }

    /// [`release`](Self::release), deleting the name's lock-delay key with the lock only when
    /// `delay` > 0.
    async fn release_with_delay(
        self,
        lease: Duration,
        expect: Expect,
        delay: u64,
    ) -> Result<Released, LockError> {
        let Self {
            commands,
            kind,
            name,
            holder,
        } = self;
        let publish = commands.publish();
        let mut call = kind.release_call(name, holder, lease, expect, publish, delay);
        if kind == LockKind::Group {
            for m in commands.groups.members(holder)?.iter() {
                call.arg(m);
            }
        }
        let key = keys::lock_key(name);
        let reply = commands.conn.eval("release", key, &call, Replicas::Skip);
        match reply.await?.value {
            Value::Nil => Ok(Released::NotHeld),
            Value::Int(0) => Ok(Released::StillHeld),
            Value::Int(1) => Ok(Released::Unlocked),
            other => Err(unexpected("release", other)),
        }
    }

    /// Releases one hold of this holder (its lease `lease` restored when holds remain) and,
    /// when that frees the lock, grants it to `to` in the same call (`hand_off.lua`): reentrant
    /// and fenced locks only. `expect`: both holders' counts before it.
    pub(crate) async fn hand_off(
        self,
        lease: Duration,
        to: Successor<'_>,
        expect: Expect,
    ) -> Result<HandedOff, LockError> {
        let Self {
            commands,
            kind,
            name,
            holder,
        } = self;
        let key = keys::lock_key(name);
        let room = 3 * name.len() + holder.len() + to.holder.len() + 96;
        let delayed = commands.lock_delay > 0 && kind == LockKind::Reentrant;
        let mut call = ScriptCall::new(&HAND_OFF, 2 + usize::from(delayed), 9, room + 64);
        call.key(key).key(keys::token_key(name));
        if delayed {
            call.key(keys::delay_key(name));
        }
        call.arg(UNLOCK_MESSAGE)
            .arg(millis(lease))
            .arg(holder)
            .arg(to.holder)
            .arg(expect.count)
            .arg(millis(to.lease))
            .arg(if kind == LockKind::Fenced { "1" } else { "0" })
            .arg(expect.to);
        if delayed {
            call.arg(commands.lock_delay);
        }
        let reply = commands.conn.eval("hand off", key, &call, Replicas::Skip);
        match reply.await?.value {
            Value::Nil => Ok(HandedOff::No(Released::NotHeld)),
            Value::Int(0) => Ok(HandedOff::No(Released::StillHeld)),
            Value::Array(items) => match items.as_slice() {
                [Value::Int(1)] => Ok(HandedOff::To { token: None }),
                [Value::Int(1), Value::Int(t)] => Ok(HandedOff::To {
                    token: u64::try_from(*t).ok(),
                }),
                _ => Err(unexpected("hand off", Value::Array(items))),
            },
            other => Err(unexpected("hand off", other)),
        }
    }
}

/// A one-hold group script call (`group_renew.lua` with the `timeout`, `group_held.lua`
/// without): the group hash, then the timeout, the holder and the members.
fn group_call<'s>(
    script: &'s Script,
    key: &str,
    holder: &str,
    members: &[String],
    timeout: Option<Duration>,
) -> ScriptCall<'s> {
    let bytes = members.iter().map(|m| m.len()).sum::<usize>();
    let mut call = ScriptCall::new(
        script,
        1,
        2 + members.len(),
        key.len() + holder.len() + bytes + 32,
    );
    call.key(key);
    if let Some(timeout) = timeout {
        call.arg(millis(timeout));
    }
    call.arg(holder);
    for m in members {
        call.arg(m);
    }
    call
}

/// How long a synchronizer request's latch lives: the watchdog timeout and four response
/// timeouts. Saturating: a response timeout as long as `Duration::MAX` (no bound at all) is a
/// setting, not an overflow.
fn latch_ttl(config: &Config) -> Duration {
    (config.get_response_timeout().saturating_mul(4)).saturating_add(config.get_watchdog_timeout())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The break: `watchdog + 4 * response_timeout` panicked on the manager's thread for a
    /// response timeout past a quarter of `Duration::MAX`, and the manager never started.
    #[test]
    fn a_latch_ttl_of_an_unbounded_response_timeout_saturates() {
        let config = Config::new("redis://127.0.0.1:6379").response_timeout(Duration::MAX);
        assert_eq!(latch_ttl(&config), Duration::MAX);
        assert_eq!(millis(latch_ttl(&config)), u64::MAX);
        let config = Config::new("redis://127.0.0.1:6379");
        assert_eq!(
            latch_ttl(&config),
            config.get_watchdog_timeout() + 4 * config.get_response_timeout()
        );
    }
}
