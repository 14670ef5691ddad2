//! The group multi-lock (`LockManager::group_lock`, Redisson's `RedissonFasterMultiLock`): the
//! exact hash after each operation, exclusion of overlapping member sets counted exactly across
//! two managers, bad input, a lost hold, and the Java side played by Redisson's own scripts
//! (`java` below: the script text of `RedissonFasterMultiLock` as Redisson sends it).

mod support;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockKind, LockManager};
use redis::Commands;
use support::{
    RedisServer, commands::latches_and_rest, commands::listen, commands::next_message, wait,
};

const WATCHDOG: Duration = Duration::from_millis(900);

/// Java's holder: Redisson's `<client uuid>:<thread id>`.
const JAVA: &str = "6f1d2c3b-0a9e-4d8c-b7f6-5e4d3c2b1a09:1";

async fn manager(server: &RedisServer, watchdog: Duration) -> LockManager {
    LockManager::start(Config::new(server.url()).watchdog_timeout(watchdog))
        .await
        .expect("manager starts")
}

fn hash(raw: &mut redis::Connection, key: &str) -> HashMap<String, String> {
    raw.hgetall(key).unwrap()
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

/// The Java side: `RedissonFasterMultiLock`'s scripts, their text as Redisson (master, 2026)
/// builds it, with the keys and arguments the Java client passes. The members are the fields
/// (Redisson hashes its values into them first).
mod java {
    use redis::{Connection, Script};

    const TRY_LOCK: &str = concat!(
        "local leaseTime = tonumber(ARGV[1]);",
        "local currentTime = tonumber(ARGV[2]);",
        "local currentThread = ARGV[3];",
        "local maxExpireTime = -1;",
        "local keyExist = nil;",
        "if (tonumber(redis.call('exists',KEYS[1])) > 0) then",
        "   keyExist = 1;",
        "   for i=4, #ARGV, 1 do ",
        "       local lockThread = redis.call('hget', KEYS[1], ARGV[i]); ",
        "       if(lockThread ~= false and lockThread ~= currentThread) then ",
        "           local expireFieldName = ARGV[i]..':'..lockThread..':expire_time';",
        "           local expireTime = redis.call('hget', KEYS[1], expireFieldName);",
        "           if(expireTime ~= false and tonumber(expireTime) > currentTime ) then ",
        "               if(tonumber(expireTime) > maxExpireTime) then",
        "                   maxExpireTime = tonumber(expireTime);",
        "               end;",
        "           end",
        "       end; ",
        "   end; ",
        "else",
        "   keyExist = 0;",
        "end;",
        "if( maxExpireTime ~= -1) then",
        "   return maxExpireTime-currentTime;",
        "end;",
        "for i=4, #ARGV, 1 do ",
        "   redis.call('hset', KEYS[1], ARGV[i], currentThread); ",
        "   local expireFieldName = ARGV[i]..':'..currentThread..':expire_time'",
        "   local expireTime = redis.call('hget', KEYS[1], expireFieldName); ",
        "   local newExpireTime = leaseTime + currentTime ",
        "   if(expireTime == false or tonumber(expireTime) < newExpireTime ) then",
        "      redis.call('hset', KEYS[1], expireFieldName, newExpireTime); ",
        "   end;",
        "   redis.call('HINCRBY', KEYS[1], ARGV[i]..':'..currentThread..':lock_count', 1); ",
        "end; ",
        "if(keyExist == 1) then",
        "   local expireTime = redis.call('pttl',KEYS[1]);",
        "   if(tonumber(expireTime) > 0 and leaseTime > tonumber(expireTime)) then",
        "       redis.call('pexpire',KEYS[1], leaseTime);",
        "   end;",
        "else",
        "    redis.call('pexpire',KEYS[1], leaseTime);",
        "end;",
        "return nil;",
    );

    const UNLOCK: &str = concat!(
        "local val = redis.call('get', KEYS[3]); ",
        "if val ~= false then ",
        "   return tonumber(val);",
        "end; ",
        "if(redis.call('exists', KEYS[1]) == 0) then",
        "   redis.call(ARGV[4], KEYS[2], ARGV[2]); ",
        "   return nil;",
        "end;",
        "local lockName = ARGV[1];",
        "local hasFailed = 0;",
        "local allDeleted = 1;",
        "local hasDeleted = 0;",
        "local newExpireTime = tonumber(ARGV[3]) + tonumber(ARGV[6]);",
        "for i = 7,#ARGV,1 do",
        "   local expireTime = redis.call('hget', KEYS[1], ARGV[i]..':'..lockName..':expire_time');",
        "   if (expireTime ~= false and tonumber(expireTime) >= tonumber(ARGV[6])) then",
        "       if(tonumber(redis.call('hincrby', KEYS[1], ARGV[i]..':'..lockName..':lock_count',-1)) <= 0) then",
        "           redis.call('hdel',KEYS[1], ARGV[i]..':'..lockName..':expire_time');",
        "           redis.call('hdel',KEYS[1], ARGV[i]..':'..lockName..':lock_count');",
        "           redis.call('hdel',KEYS[1], ARGV[i]);",
        "           hasDeleted = 1;",
        "       else",
        "           if(tonumber(expireTime) < newExpireTime) then ",
        "               redis.call('hset', KEYS[1], ARGV[i]..':'..lockName..':expire_time', newExpireTime);",
        "           end;",
        "           allDeleted = 0;",
        "       end;",
        "   else",
        "       allDeleted = 0;",
        "       hasFailed = 1;",
        "   end;",
        "end;",
        "if(hasFailed ~= 0) then",
        "   return nil;",
        "end;",
        "if(hasDeleted) then",
        "   redis.call(ARGV[4], KEYS[2], ARGV[2]); ",
        "end;",
        "if(allDeleted == 1) then",
        "   redis.call('set', KEYS[3], 1, 'px', ARGV[5]); ",
        "else ",
        "   redis.call('set', KEYS[3], 0, 'px', ARGV[5]); ",
        "   local expireTime = redis.call('pttl',KEYS[1]);",
        "   if(tonumber(ARGV[3]) > tonumber(expireTime)) then",
        "       redis.call('pexpire',KEYS[1], ARGV[3]);",
        "   end;",
        "end;",
        "return allDeleted;",
    );

    const FORCE_UNLOCK: &str = concat!(
        "local removeCount = 0;",
        "for i=3, #ARGV, 1 do ",
        "    local lockName = redis.call('hget', KEYS[1], ARGV[i]); ",
        "    local count = redis.call('HDEL', KEYS[1], ARGV[i]); ",
        "    redis.call('HDEL', KEYS[1], ARGV[i]..':'..lockName..':expire_time'); ",
        "    redis.call('HDEL', KEYS[1], ARGV[i]..':'..lockName..':lock_count'); ",
        "    removeCount = removeCount+count;",
        "end; ",
        "redis.call(ARGV[2], KEYS[2], ARGV[1]); ",
        "return removeCount; ",
    );

    fn channel(group: &str) -> String {
        format!("redisson_lock__channel:{{{group}}}")
    }

    /// `tryLockInnerAsync`: `None` when acquired, else the ms until the latest other hold ends.
    pub fn try_lock(
        conn: &mut Connection,
        group: &str,
        owner: &str,
        lease_ms: i64,
        fields: &[&str],
    ) -> Option<i64> {
        let script = Script::new(TRY_LOCK);
        let mut call = script.key(group);
        call.arg(lease_ms).arg(super::now_ms()).arg(owner);
        for f in fields {
            call.arg(*f);
        }
        call.invoke(conn).expect("java tryLock")
    }

    /// `unlockInnerAsync` (a fresh request id each): `Some(1)` all freed, `Some(0)` holds
    /// remain, `None` not held.
    pub fn unlock(
        conn: &mut Connection,
        group: &str,
        owner: &str,
        lease_ms: i64,
        fields: &[&str],
    ) -> Option<i64> {
        let script = Script::new(UNLOCK);
        let latch = format!(
            "redisson_unlock_latch:{{{group}}}:{}",
            uuid::Uuid::new_v4().simple()
        );
        let mut call = script.key(group);
        call.key(channel(group))
            .key(latch)
            .arg(owner)
            .arg(0)
            .arg(lease_ms)
            .arg("publish")
            .arg(5_000)
            .arg(super::now_ms());
        for f in fields {
            call.arg(*f);
        }
        call.invoke(conn).expect("java unlock")
    }

    /// `forceUnlockAsync`: how many members had an owner.
    pub fn force_unlock(conn: &mut Connection, group: &str, fields: &[&str]) -> i64 {
        try_force_unlock(conn, group, fields).expect("java forceUnlock")
    }

    /// `forceUnlockAsync`, its error kept.
    pub fn try_force_unlock(
        conn: &mut Connection,
        group: &str,
        fields: &[&str],
    ) -> redis::RedisResult<i64> {
        let script = Script::new(FORCE_UNLOCK);
        let mut call = script.key(group);
        call.key(channel(group)).arg(0).arg("publish");
        for f in fields {
            call.arg(*f);
        }
        call.invoke(conn)
    }
}

/// The fields a hold of `members` by `holder` writes, with their counts, expiries left out.
fn layout(members: &[&str], holder: &str, count: u32) -> Vec<(String, String)> {
    let mut fields = Vec::new();
    for m in members {
        fields.push(((*m).to_owned(), holder.to_owned()));
        fields.push((format!("{m}:{holder}:lock_count"), count.to_string()));
    }
    fields.sort();
    fields
}

/// The hash without its `expire_time` fields, sorted; and those expiries, by member.
fn split(h: &HashMap<String, String>) -> (Vec<(String, String)>, HashMap<String, i64>) {
    let mut rest: Vec<(String, String)> = h
        .iter()
        .filter(|(k, _)| !k.ends_with(":expire_time"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    rest.sort();
    let ends = h
        .iter()
        .filter_map(|(k, v)| {
            let member = k.strip_suffix(":expire_time")?.split(':').next()?;
            Some((member.to_owned(), v.parse().unwrap()))
        })
        .collect();
    (rest, ends)
}

/// Acquire, re-enter, release twice: the hash after each, field by field, and the unlock
/// message once the last hold goes.
#[tokio::test]
async fn a_group_hold_writes_redissons_fields_and_a_release_removes_them() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, Duration::from_secs(30)).await;
    let group = mgr.group_lock("order:7", ["a", "b"]).unwrap();
    assert_eq!(group.kind(), LockKind::Group);
    let holder = group.holder_id();
    let mut heard = listen(
        server.conn(),
        "SUBSCRIBE",
        "redisson_lock__channel:{order:7}",
    );

    let before = now_ms();
    let first = group.acquire().await.unwrap();
    let h = hash(&mut raw, "order:7");
    assert_eq!(h.len(), 6, "three fields per member: {h:?}");
    let (rest, ends) = split(&h);
    assert_eq!(rest, layout(&["a", "b"], &holder, 1));
    for m in ["a", "b"] {
        let end = ends[m];
        assert!(
            (before + 29_000..=now_ms() + 30_000).contains(&end),
            "{m} ends a watchdog timeout from now: {end}"
        );
    }
    let pttl: i64 = raw.pttl("order:7").unwrap();
    assert!((20_000..=30_000).contains(&pttl), "key PTTL: {pttl}");
    assert_eq!(group.hold_count().await.unwrap(), 1);
    assert!(group.is_held().await.unwrap());

    let second = group.acquire().await.unwrap();
    let (rest, _) = split(&hash(&mut raw, "order:7"));
    assert_eq!(
        rest,
        layout(&["a", "b"], &holder, 2),
        "a re-entry counts on every member"
    );
    assert_eq!(group.hold_count().await.unwrap(), 2);

    second.release().await.unwrap();
    let (rest, _) = split(&hash(&mut raw, "order:7"));
    assert_eq!(rest, layout(&["a", "b"], &holder, 1));

    first.release().await.unwrap();
    let exists: bool = raw.exists("order:7").unwrap();
    assert!(!exists, "every field deleted: the key is gone");
    let message = next_message(&mut heard);
    assert_eq!(
        message,
        ["message", "redisson_lock__channel:{order:7}", "0"],
        "the unlock message, as Redisson's unlock publishes"
    );
    assert!(!group.is_locked().await.unwrap());
    assert_eq!(group.hold_count().await.unwrap(), 0);
}

/// Overlapping member sets exclude each other; disjoint ones on the same group do not; the
/// other holder's members stay as they were.
#[tokio::test]
async fn overlapping_members_exclude_and_disjoint_members_do_not() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (m1, m2) = (
        manager(&server, WATCHDOG).await,
        manager(&server, WATCHDOG).await,
    );
    let ab = m1.group_lock("g", ["a", "b"]).unwrap();
    let bc = m2.group_lock("g", ["b", "c"]).unwrap();
    let cd = m2.group_lock("g", ["c", "d"]).unwrap();
    let held = ab.acquire().await.unwrap();
    let before = hash(&mut raw, "g");
    assert!(bc.try_acquire().await.unwrap().is_none(), "b is taken");
    assert_eq!(
        hash(&mut raw, "g"),
        before,
        "a refused attempt writes nothing"
    );
    let other = cd.try_acquire().await.unwrap().expect("c and d are free");
    let (rest, _) = split(&hash(&mut raw, "g"));
    let mut want = layout(&["a", "b"], &ab.holder_id(), 1);
    want.extend(layout(&["c", "d"], &cd.holder_id(), 1));
    want.sort();
    assert_eq!(rest, want);
    assert!(
        bc.try_acquire_for(Duration::from_millis(300))
            .await
            .unwrap()
            .is_none()
    );
    held.release().await.unwrap();
    assert!(
        bc.try_acquire().await.unwrap().is_none(),
        "c is still taken"
    );
    other.release().await.unwrap();
    let g = bc.try_acquire().await.unwrap().expect("b and c are free");
    g.release().await.unwrap();
    let exists: bool = raw.exists("g").unwrap();
    assert!(!exists);
}

/// Many tasks over two managers, each taking one of several overlapping member sets: no member
/// is ever inside twice (counted per member), and every round completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_groups_exclude_exactly_across_two_managers() {
    let server = RedisServer::start();
    let mgrs = [
        manager(&server, WATCHDOG).await,
        manager(&server, WATCHDOG).await,
    ];
    let sets: [&[&str]; 5] = [
        &["m0", "m1"],
        &["m1", "m2"],
        &["m2", "m3"],
        &["m3", "m0"],
        &["m0", "m2"],
    ];
    let inside: Arc<Vec<AtomicBool>> = Arc::new((0..4).map(|_| AtomicBool::new(false)).collect());
    let rounds = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..10 {
        let set: Vec<usize> = sets[t % sets.len()]
            .iter()
            .map(|m| m[1..].parse().unwrap())
            .collect();
        let lock = mgrs[t % 2]
            .group_lock("many", sets[t % sets.len()].iter().copied())
            .unwrap();
        let (inside, rounds) = (inside.clone(), rounds.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                let g = lock.acquire().await.unwrap();
                for &m in &set {
                    assert!(
                        !inside[m].swap(true, Ordering::SeqCst),
                        "m{m} is inside twice"
                    );
                }
                tokio::task::yield_now().await;
                for &m in &set {
                    inside[m].store(false, Ordering::SeqCst);
                }
                rounds.fetch_add(1, Ordering::SeqCst);
                g.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("every task finishes")
            .unwrap();
    }
    assert_eq!(rounds.load(Ordering::SeqCst), 200);
    let mut raw = server.conn();
    let exists: bool = raw.exists("many").unwrap();
    assert!(!exists, "nothing is left in the group");
}

/// Bad members are refused before anything is sent, each with `InvalidArgument`.
#[tokio::test]
async fn bad_members_are_refused() {
    let server = RedisServer::start();
    let mgr = manager(&server, WATCHDOG).await;
    let invalid = |r: Result<lockman::GroupLock, LockError>| {
        matches!(r, Err(LockError::InvalidArgument { .. }))
    };
    assert!(
        invalid(mgr.group_lock("g", Vec::<String>::new())),
        "no members"
    );
    assert!(invalid(mgr.group_lock("g", ["a", "a"])), "a member twice");
    assert!(invalid(mgr.group_lock("g", ["a:b"])), "a member with ':'");
    assert!(invalid(mgr.group_lock("g", [""])), "an empty member");
    let many = (0..=lockman::MAX_GROUP_MEMBERS).map(|i| i.to_string());
    assert!(invalid(mgr.group_lock("g", many)), "too many members");
    let empty_name = mgr.group_lock("", ["a"]).unwrap();
    assert!(matches!(
        empty_name.try_acquire().await,
        Err(LockError::InvalidArgument { .. })
    ));
    let mut raw = server.conn();
    let keys: Vec<String> = raw.keys("*").unwrap();
    assert!(keys.is_empty(), "nothing written: {keys:?}");
}

/// A key of another type under the group's name: WRONGTYPE, left as it was.
#[tokio::test]
async fn a_key_of_another_type_is_left_alone() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, WATCHDOG).await;
    let _: () = raw.set("s", "value").unwrap();
    let group = mgr.group_lock("s", ["a"]).unwrap();
    assert!(matches!(
        group.try_acquire().await,
        Err(LockError::WrongType { .. })
    ));
    assert!(matches!(
        group.force_unlock().await,
        Err(LockError::WrongType { .. })
    ));
    let v: String = raw.get("s").unwrap();
    assert_eq!(v, "value");
}

/// The watchdog keeps a group hold past its timeout (expire_time fields and the key's PTTL
/// raised); when its fields are deleted under it, the guard is told lost.
#[tokio::test]
async fn the_watchdog_renews_a_group_hold_and_a_deleted_one_is_reported_lost() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, WATCHDOG).await;
    let group = mgr.group_lock("w", ["a", "b"]).unwrap();
    let guard = group.acquire().await.unwrap();
    let (_, first) = split(&hash(&mut raw, "w"));
    wait::until("a renewal raised every member's expire_time", || {
        let (_, now) = split(&hash(&mut raw, "w"));
        now.len() == 2 && now.iter().all(|(m, end)| *end > first[m])
    })
    .await;
    // Past three watchdog timeouts, still held.
    tokio::time::sleep(WATCHDOG * 3).await;
    assert!(!guard.is_lost());
    assert!(group.is_held().await.unwrap());
    let (rest, _) = split(&hash(&mut raw, "w"));
    assert_eq!(rest, layout(&["a", "b"], &group.holder_id(), 1));

    let _: () = raw.hdel("w", "b").unwrap();
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the hold is reported lost");
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotHeld { .. })
    ));
}

/// A hold with a lease is not renewed: its members expire by their expire_time while the key
/// lives on (another member is held, renewed), and another holder then takes them; an expired
/// holder's stale fields stay, as Redisson leaves them. The stale fields looked at are a Java
/// holder's: a lockman lease hold's own may be gone, and rightly (lockman counts a lease from its
/// request and, when it ends, settles the holder's count with a release that finds the hold
/// still live in Redis when the script ran late, as on a loaded machine: seen in CI).
#[tokio::test]
async fn a_lease_hold_expires_and_another_takes_its_members() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, WATCHDOG).await;
    let keeper = mgr.group_lock("l", ["c"]).unwrap();
    let kept = keeper.acquire().await.unwrap();
    let first = mgr.group_lock("l", ["a"]).unwrap();
    let second = mgr.group_lock("l", ["a", "b", "d"]).unwrap();
    let lease = first
        .acquire_with_lease(Duration::from_millis(400))
        .await
        .unwrap();
    // Java holds `d` with a lease of its own, by Redisson's script and clock.
    assert_eq!(java::try_lock(&mut raw, "l", JAVA, 400, &["d"]), None);
    assert!(second.try_acquire().await.unwrap().is_none());
    let started = Instant::now();
    let g = second
        .try_acquire_for(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("taken after the leases");
    assert!(started.elapsed() < Duration::from_secs(5));
    let h = hash(&mut raw, "l");
    assert_eq!(h.get("a"), Some(&second.holder_id()));
    assert_eq!(h.get("d"), Some(&second.holder_id()));
    let java_stale = (format!("d:{JAVA}:lock_count"), "1".to_owned());
    assert_eq!(
        h.get(&java_stale.0),
        Some(&java_stale.1),
        "Java's fields stay: {h:?}"
    );
    tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("the lease hold is reported lost");
    g.release().await.unwrap();
    kept.release().await.unwrap();
    // Left: Java's stale count, and the first's if its hold had expired in Redis before lockman
    // settled it.
    let (rest, _) = split(&hash(&mut raw, "l"));
    let first_stale = (
        format!("a:{}:lock_count", first.holder_id()),
        "1".to_owned(),
    );
    assert!(rest.contains(&java_stale), "{rest:?}");
    assert!(
        rest.iter().all(|f| *f == java_stale || *f == first_stale),
        "the stale fields are left until the key expires, nothing else: {rest:?}"
    );
}

/// A Java group lock (Redisson's script) and a lockman one over overlapping members exclude each
/// other both ways; disjoint members do not; Java's release wakes a lockman waiter by its
/// message, long before Java's lease would end.
#[tokio::test]
async fn a_java_group_lock_and_a_lockman_one_exclude_each_other_both_ways() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, WATCHDOG).await;
    let fields = ["b64memberA", "b64memberB"];

    // Java first.
    assert_eq!(java::try_lock(&mut raw, "j", JAVA, 60_000, &fields), None);
    let bc = mgr.group_lock("j", ["b64memberB", "c"]).unwrap();
    let cd = mgr.group_lock("j", ["c", "d"]).unwrap();
    assert!(bc.try_acquire().await.unwrap().is_none(), "Java holds B");
    let g = cd.try_acquire().await.unwrap().expect("c and d are free");
    g.release().await.unwrap();
    let waiting = {
        let bc = bc.clone();
        tokio::spawn(async move { bc.acquire().await.map(|g| g.holder_id().to_owned()) })
    };
    wait::subscribers(&mut raw, "redisson_lock__channel:{j}", 1).await;
    let started = Instant::now();
    assert_eq!(java::unlock(&mut raw, "j", JAVA, 30_000, &fields), Some(1));
    let holder = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("woken by Java's unlock message")
        .unwrap()
        .unwrap();
    assert_eq!(holder, bc.holder_id());
    assert!(started.elapsed() < Duration::from_secs(10));

    // lockman first: the waiter's guard was dropped, so take it again.
    let held = bc.acquire().await.unwrap();
    let ttl = java::try_lock(&mut raw, "j", JAVA, 60_000, &["c"]);
    assert!(
        ttl.is_some_and(|t| t > 0 && t <= WATCHDOG.as_millis() as i64 + 50),
        "Java is refused c with the time left: {ttl:?}"
    );
    assert_eq!(
        java::try_lock(&mut raw, "j", JAVA, 60_000, &["b64memberA"]),
        None,
        "A is free"
    );
    held.release().await.unwrap();
    assert_eq!(java::try_lock(&mut raw, "j", JAVA, 60_000, &["c"]), None);
    assert!(
        bc.try_acquire().await.unwrap().is_none(),
        "Java holds c now"
    );
}

/// Java's re-entry counts twice on each member: a lockman group stays out until Java's second
/// unlock. lockman's re-entry reads the same way to Java's unlock: it stays out of Java's
/// members and fails (nil) on members lockman holds.
#[tokio::test]
async fn java_reentry_holds_a_lockman_group_out_until_the_last_unlock() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, WATCHDOG).await;
    let f = ["x"];
    assert_eq!(java::try_lock(&mut raw, "r", JAVA, 60_000, &f), None);
    assert_eq!(java::try_lock(&mut raw, "r", JAVA, 60_000, &f), None);
    assert_eq!(
        hash(&mut raw, "r").get(&format!("x:{JAVA}:lock_count")),
        Some(&"2".to_owned())
    );
    let mine = mgr.group_lock("r", ["x", "y"]).unwrap();
    assert!(mine.try_acquire().await.unwrap().is_none());
    // Redisson's unlock publishes even when it frees nothing (`if(hasDeleted)` tests a number).
    let mut heard = listen(server.conn(), "SUBSCRIBE", "redisson_lock__channel:{r}");
    assert_eq!(java::unlock(&mut raw, "r", JAVA, 30_000, &f), Some(0));
    assert_eq!(
        next_message(&mut heard),
        ["message", "redisson_lock__channel:{r}", "0"]
    );
    assert!(
        mine.try_acquire().await.unwrap().is_none(),
        "one Java hold left"
    );
    assert_eq!(java::unlock(&mut raw, "r", JAVA, 30_000, &f), Some(1));
    let g = mine
        .try_acquire()
        .await
        .unwrap()
        .expect("free after Java's last unlock");
    let again = mine.acquire().await.unwrap();
    assert_eq!(
        java::unlock(&mut raw, "r", JAVA, 30_000, &["y"]),
        None,
        "Java's unlock of a member lockman holds fails"
    );
    let (rest, _) = split(&hash(&mut raw, "r"));
    assert_eq!(rest, layout(&["x", "y"], &mine.holder_id(), 2));
    // Redisson's unlock counts down the members before the first it finds not held, then
    // answers nil: Java's `z` is freed, lockman's `y` untouched.
    assert_eq!(java::try_lock(&mut raw, "r", JAVA, 60_000, &["z"]), None);
    assert_eq!(java::unlock(&mut raw, "r", JAVA, 30_000, &["z", "y"]), None);
    let (rest, _) = split(&hash(&mut raw, "r"));
    assert_eq!(rest, layout(&["x", "y"], &mine.holder_id(), 2), "z freed");
    again.release().await.unwrap();
    g.release().await.unwrap();
    // Redisson's force unlock of a member nobody owns is a script error (it joins `false` to a
    // string); lockman's skips it.
    assert!(java::try_force_unlock(&mut raw, "r", &["nobody"]).is_err());
    assert!(!mine.force_unlock().await.unwrap());
}

/// Java's force unlock of lockman's members: the guard is told lost; lockman's force unlock of
/// Java's members deletes their fields and publishes, leaving the other members alone.
#[tokio::test]
async fn force_unlock_works_both_ways() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, WATCHDOG).await;
    let mine = mgr.group_lock("f", ["a", "b"]).unwrap();
    let guard = mine.acquire().await.unwrap();
    assert_eq!(java::force_unlock(&mut raw, "f", &["a", "b"]), 2);
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("lockman's hold is reported lost after Java's force unlock");
    drop(guard);

    assert_eq!(
        java::try_lock(&mut raw, "f", JAVA, 60_000, &["a", "c"]),
        None
    );
    assert_eq!(java::try_lock(&mut raw, "f", JAVA, 60_000, &["d"]), None);
    let mut heard = listen(server.conn(), "SUBSCRIBE", "redisson_lock__channel:{f}");
    let ac = mgr.group_lock("f", ["a", "c"]).unwrap();
    assert!(ac.force_unlock().await.unwrap());
    assert_eq!(
        next_message(&mut heard),
        ["message", "redisson_lock__channel:{f}", "0"]
    );
    let (rest, _) = split(&hash(&mut raw, "f"));
    assert_eq!(rest, layout(&["d"], JAVA, 1), "Java's other member stays");
    let g = ac.try_acquire().await.unwrap().expect("a and c are free");
    g.release().await.unwrap();
    assert!(
        !mgr.group_lock("f", ["zz"])
            .unwrap()
            .force_unlock()
            .await
            .unwrap()
    );
}

/// A release frees the members one local waiter waits for, but not those of the waiter ahead of
/// it (one of its members stays taken): the one unlock message wakes both (a group actor wakes
/// every waiter), and the second takes its members. Woken one at a time, the head would try,
/// find its member taken and sleep, and the second would sleep until the time its busy reply
/// gave it (Java's 60 s lease).
#[tokio::test]
async fn one_unlock_message_wakes_every_local_waiter_of_the_group() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, WATCHDOG).await;
    const OTHER: &str = "6f1d2c3b-0a9e-4d8c-b7f6-5e4d3c2b1a09:2";
    assert_eq!(
        java::try_lock(&mut raw, "both", JAVA, 60_000, &["a", "b"]),
        None
    );
    assert_eq!(
        java::try_lock(&mut raw, "both", OTHER, 60_000, &["c"]),
        None
    );
    let (head, next) = (
        mgr.group_lock("both", ["a", "c"]).unwrap(),
        mgr.group_lock("both", ["b"]).unwrap(),
    );
    let first = tokio::spawn(async move { head.acquire().await.map(|g| g.holder_id().to_owned()) });
    wait::subscribers(&mut raw, "redisson_lock__channel:{both}", 1).await;
    wait::quiet(&mut raw).await;
    let second =
        tokio::spawn(async move { next.acquire().await.map(|g| g.holder_id().to_owned()) });
    wait::quiet(&mut raw).await;
    assert!(!first.is_finished() && !second.is_finished());
    assert_eq!(
        java::unlock(&mut raw, "both", JAVA, 30_000, &["a", "b"]),
        Some(1)
    );
    tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .expect("the second waiter is woken by the one unlock message")
        .unwrap()
        .unwrap();
    assert!(!first.is_finished(), "c is still Java's");
    first.abort();
}

/// lockman's group scripts sent again (docs/protocol.md, "Sent again"): a request whose reply
/// never came is sent again with the same expected count, and replies as its first run without
/// counting twice; a re-entry whose hold is gone replies `{0}` and writes nothing; another
/// holder is answered the time left. The scripts are run here by hand, as the actor sends them.
#[test]
fn a_group_request_sent_again_replies_as_its_first_run_and_counts_once() {
    use redis::Value;
    let server = RedisServer::start();
    let mut raw = server.conn();
    let acquire = redis::Script::new(include_str!("../src/protocol/group_acquire.lua"));
    let release = redis::Script::new(include_str!("../src/protocol/group_release.lua"));
    let take = |raw: &mut redis::Connection, holder: &str, expect: u32| -> Value {
        acquire
            .key("s")
            .arg(30_000)
            .arg(holder)
            .arg(expect)
            .arg("a")
            .arg("b")
            .invoke(raw)
            .unwrap()
    };
    let give = |raw: &mut redis::Connection, expect: u32| -> Value {
        release
            .key("s")
            .key("redisson_lock__channel:{s}")
            .arg(0)
            .arg(30_000)
            .arg("c:1")
            .arg("publish")
            .arg(expect)
            .arg("a")
            .arg("b")
            .invoke(raw)
            .unwrap()
    };
    let counted = |raw: &mut redis::Connection| split(&hash(raw, "s")).0;
    let counts = |n: u32| Value::Array(vec![Value::Int(i64::from(n))]);

    assert_eq!(take(&mut raw, "c:1", 0), counts(1));
    assert_eq!(take(&mut raw, "c:1", 0), counts(1), "sent again");
    assert_eq!(counted(&mut raw), layout(&["a", "b"], "c:1", 1));
    assert_eq!(take(&mut raw, "c:1", 1), counts(2), "a re-entry");
    assert_eq!(take(&mut raw, "c:1", 1), counts(2), "sent again");
    assert_eq!(counted(&mut raw), layout(&["a", "b"], "c:1", 2));
    let before = hash(&mut raw, "s");
    assert_eq!(
        take(&mut raw, "c:1", 5),
        counts(0),
        "a re-entry of a hold it has not"
    );
    assert!(
        matches!(take(&mut raw, "d:1", 0), Value::Int(ms) if ms > 29_000 && ms <= 30_000),
        "another holder is told the time left"
    );
    assert_eq!(hash(&mut raw, "s"), before, "neither wrote anything");

    assert_eq!(give(&mut raw, 2), Value::Int(0));
    assert_eq!(give(&mut raw, 2), Value::Int(0), "sent again");
    assert_eq!(counted(&mut raw), layout(&["a", "b"], "c:1", 1));
    assert_eq!(give(&mut raw, 1), Value::Int(1));
    let exists: bool = raw.exists("s").unwrap();
    assert!(!exists);
    assert_eq!(
        give(&mut raw, 1),
        Value::Nil,
        "sent again after the last: not held"
    );
}

/// A group hold is watched (`Config::watch_holds`): a member's field deleted under it is known
/// within a round trip or two, long before the next renewal (a third of the 30 s watchdog
/// timeout).
#[tokio::test]
async fn a_watched_group_hold_is_told_lost_at_once() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, Duration::from_secs(30)).await;
    let group = mgr.group_lock("watched", ["a", "b"]).unwrap();
    let guard = group.acquire().await.unwrap();
    // Watched from 20 ms after the grant.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let _: () = raw.hdel("watched", "a").unwrap();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("told lost before any renewal");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A wait on a group is blocked only by the owners of the members it shares. Task 1 holds member `a` and
/// waits for the lock `x`; task 2 holds `x` and waits for member `b`, which task 3 holds. An
/// edge from task 2's wait to every holder of the group would close task 1 → task 2 → task 1, a
/// cycle that blocks nothing; none is reported, and all three finish once task 3 lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_wait_is_never_reported_as_a_deadlock_behind_a_member_it_does_not_share() {
    use tokio::sync::oneshot;
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, Duration::from_secs(30)).await;
    let (t3_held, t3_holds) = oneshot::channel();
    let (t3_go, t3_let_go) = oneshot::channel::<()>();
    let b = mgr.group_lock("dg", ["b"]).unwrap();
    let t3 = tokio::spawn(async move {
        let g = b.acquire().await?;
        t3_held.send(()).unwrap();
        t3_let_go.await.unwrap();
        g.release().await
    });
    t3_holds.await.unwrap();
    let (t2_held, t2_holds) = oneshot::channel();
    let (x, b2) = (mgr.lock("dx"), mgr.group_lock("dg", ["b"]).unwrap());
    let t2 = tokio::spawn(async move {
        let held = x.acquire().await?;
        t2_held.send(()).unwrap();
        let g = b2.acquire().await?;
        g.release().await?;
        held.release().await
    });
    t2_holds.await.unwrap();
    wait::subscribers(&mut raw, "redisson_lock__channel:{dg}", 1).await;
    let (t1_held, t1_holds) = oneshot::channel();
    let (a, x1) = (mgr.group_lock("dg", ["a"]).unwrap(), mgr.lock("dx"));
    let t1 = tokio::spawn(async move {
        let held = a.acquire().await?;
        t1_held.send(()).unwrap();
        let g = x1.acquire().await?;
        g.release().await?;
        held.release().await
    });
    t1_holds.await.unwrap();
    // Task 1 waits for `x` (it subscribed), unless its wait failed at once.
    let waiting = support::wait::eventually(Duration::from_secs(10), || {
        t1.is_finished()
            || redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg("redisson_lock__channel:{dx}")
                .query::<(String, u64)>(&mut raw)
                .is_ok_and(|(_, n)| n > 0)
    })
    .await;
    assert!(waiting);
    // A cycle is found within milliseconds of closing (tests/deadlock.rs allows 2 s).
    tokio::time::sleep(Duration::from_secs(2)).await;
    if t1.is_finished() {
        panic!("task 1's wait ended: {:?}", t1.await.unwrap().err());
    }
    assert!(!t2.is_finished(), "task 2's wait ended");
    t3_go.send(()).unwrap();
    for t in [t3, t2, t1] {
        tokio::time::timeout(Duration::from_secs(10), t)
            .await
            .expect("every task finishes")
            .unwrap()
            .expect("no deadlock reported");
    }
}

/// Under `Config::name_prefix`, a group lock is the prefixed group's hash and no other key;
/// Redisson's group script on that key is refused the held member; the release publishes on
/// the prefixed channel and leaves nothing; a lockman waiter behind Java's hold listens on the
/// prefixed channel and Java's unlock message there wakes it long before Java's lease ends.
#[tokio::test]
async fn a_prefixed_group_lock_is_the_prefixed_hash_and_channel() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let config = Config::new(server.url())
        .watchdog_timeout(WATCHDOG)
        .name_prefix("app1:");
    let mgr = LockManager::start(config).await.expect("manager starts");
    let channel = "redisson_lock__channel:{app1:order:7}";
    let mut heard = listen(server.conn(), "SUBSCRIBE", channel);
    let group = mgr.group_lock("order:7", ["a", "b"]).unwrap();
    assert_eq!((group.name(), group.key()), ("order:7", "app1:order:7"));

    let g = group.acquire().await.unwrap();
    let (_, found) = latches_and_rest(&mut raw);
    assert_eq!(found, BTreeSet::from(["app1:order:7".to_owned()]));
    let (rest, _) = split(&hash(&mut raw, "app1:order:7"));
    assert_eq!(rest, layout(&["a", "b"], &group.holder_id(), 1));
    let ttl = java::try_lock(&mut raw, "app1:order:7", JAVA, 60_000, &["b"]);
    assert!(
        ttl.is_some_and(|t| t > 0 && t <= WATCHDOG.as_millis() as i64 + 50),
        "Java is refused b with the time left: {ttl:?}"
    );
    g.release().await.unwrap();
    assert_eq!(next_message(&mut heard), ["message", channel, "0"]);
    let (latches, left) = latches_and_rest(&mut raw);
    assert!(left.is_empty(), "a release leaves nothing: {left:?}");
    for latch in &latches {
        assert!(
            latch.starts_with("redisson_unlock_latch:{app1:order:7}"),
            "{latch}"
        );
    }

    // Java holds b for a minute; lockman's waiter subscribes the prefixed channel (the raw
    // listener is the other subscriber) and Java's unlock there wakes it.
    assert_eq!(
        java::try_lock(&mut raw, "app1:order:7", JAVA, 60_000, &["b"]),
        None
    );
    let waiting = {
        let group = group.clone();
        tokio::spawn(async move { group.acquire().await })
    };
    wait::subscribers(&mut raw, channel, 2).await;
    assert_eq!(
        java::unlock(&mut raw, "app1:order:7", JAVA, 60_000, &["b"]),
        Some(1)
    );
    assert_eq!(next_message(&mut heard), ["message", channel, "0"]);
    let g = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("woken by Java's unlock message")
        .unwrap()
        .unwrap();
    g.release().await.unwrap();
    let (_, left) = latches_and_rest(&mut raw);
    assert!(left.is_empty(), "{left:?}");
    mgr.shutdown().await;
}
