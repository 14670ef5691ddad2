//! MultiLock and RedLock over several independent redis-servers.

mod support;

use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockManager, MultiLock, RedLock};
use redis::AsyncCommands;
use support::{RedisServer, wait::eventually};

fn servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

async fn managers(servers: &[RedisServer], watchdog: Duration) -> Vec<LockManager> {
    let mut out = Vec::new();
    for s in servers {
        let config = Config::new(s.url())
            .watchdog_timeout(watchdog)
            .response_timeout(Duration::from_millis(500));
        out.push(LockManager::start(config).await.unwrap());
    }
    out
}

fn redlock(managers: &[LockManager], name: &str) -> RedLock {
    RedLock::new(managers.iter().map(|m| m.lock(name)).collect())
}

fn exists(server: &RedisServer, key: &str) -> bool {
    redis::Commands::exists(&mut server.conn(), key).unwrap()
}

async fn exclusion_over(n: usize) {
    let nodes = servers(n);
    let counter_server = RedisServer::start();
    let (a, b) = (
        managers(&nodes, Duration::from_secs(5)).await,
        managers(&nodes, Duration::from_secs(5)).await,
    );
    let conn = counter_server.async_conn().await;
    let mut tasks = Vec::new();
    for t in 0..8 {
        let red = redlock(if t % 2 == 0 { &a } else { &b }, "red:counter");
        let mut conn = conn.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..50 {
                let guard = red.acquire().await.unwrap();
                let v: u64 = conn
                    .get::<_, Option<u64>>("counter")
                    .await
                    .unwrap()
                    .unwrap_or(0);
                tokio::task::yield_now().await;
                let _: () = conn.set("counter", v + 1).await.unwrap();
                guard.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total: u64 = conn.clone().get("counter").await.unwrap();
    assert_eq!(total, 400);
    for node in &nodes {
        assert!(!exists(node, "red:counter"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_redlocks_exclude_each_other_over_3_servers() {
    exclusion_over(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_redlocks_exclude_each_other_over_5_servers() {
    exclusion_over(5).await;
}

#[tokio::test]
async fn one_of_three_down_still_acquires_two_down_fails_with_quorum_error() {
    let mut nodes = servers(3);
    let mgrs = managers(&nodes, Duration::from_secs(5)).await;
    let red = redlock(&mgrs, "red:quorum");
    assert_eq!(red.quorum(), 2);

    nodes[0].stop();
    let guard = red
        .try_acquire_for(Duration::from_secs(2))
        .await
        .unwrap()
        .expect("2 of 3 is a majority");
    assert_eq!(guard.members_held(), 2);
    assert!(exists(&nodes[1], "red:quorum") && exists(&nodes[2], "red:quorum"));
    guard.release().await.unwrap();

    nodes[1].stop();
    let wait = Duration::from_millis(800);
    let started = Instant::now();
    let err = red.try_acquire_for(wait).await.unwrap_err();
    let took = started.elapsed();
    match err {
        LockError::QuorumNotReached {
            needed: 2,
            members: 3,
            failed,
            ..
        } => assert_eq!(failed, 2),
        other => panic!("{other:?}"),
    }
    assert!(
        took >= wait && took <= wait + Duration::from_millis(700),
        "{took:?}"
    );
    assert!(
        !exists(&nodes[2], "red:quorum"),
        "the member it took was released"
    );
}

#[tokio::test]
async fn a_stalled_server_costs_at_most_the_member_timeout() {
    let nodes = servers(3);
    let mgrs = managers(&nodes, Duration::from_secs(5)).await;
    let red = redlock(&mgrs, "red:stall").member_timeout(Duration::from_millis(100));
    // Warm the scripts, so the stalled server really holds an EVALSHA when it wakes.
    red.try_acquire()
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    // Frozen until the RedLock has its answer, resumed by the test: its member's request waits
    // there whenever it is sent. (A 1 s stall begun before it: a loaded machine could send it
    // after the stall, and all three members were taken.)
    nodes[0].pause(support::FROZEN).expect("pause the server");
    let started = Instant::now();
    let guard = red
        .try_acquire()
        .await
        .unwrap()
        .expect("the two live servers are a majority");
    let took = started.elapsed();
    // The member timeout is 100 ms; waiting the stall out takes the whole second.
    assert!(took <= Duration::from_millis(700), "stalled {took:?}");
    assert_eq!(guard.members_held(), 2);
    guard.release().await.unwrap();
    nodes[0].resume().expect("resume the server");
    // The stalled server ran the late acquire when it woke: lockman released it.
    let gone = eventually(Duration::from_secs(2), || !exists(&nodes[0], "red:stall")).await;
    assert!(gone, "the late grant on the stalled server was left held");
}

#[tokio::test]
async fn multilock_is_all_or_nothing_and_wakes_when_the_busy_member_is_released() {
    let nodes = servers(3);
    let mine = managers(&nodes, Duration::from_secs(5)).await;
    let other = managers(&nodes[1..2], Duration::from_secs(5)).await;
    let names = ["m:a", "m:b", "m:c"];
    let multi = MultiLock::new(mine.iter().zip(names).map(|(m, n)| m.lock(n)).collect());

    let blocker = other[0].lock("m:b").acquire().await.unwrap();
    assert!(multi.try_acquire().await.unwrap().is_none());
    assert!(
        !exists(&nodes[0], "m:a") && !exists(&nodes[2], "m:c"),
        "nothing stays held"
    );

    let waiting = {
        let multi = multi.clone();
        tokio::spawn(async move { multi.acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !exists(&nodes[0], "m:a"),
        "a waiting multilock holds nothing"
    );
    let released = Instant::now();
    blocker.release().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // Not woken, it would wait for the 5 s lease: 1.5 s leaves a loaded machine room.
    assert!(
        released.elapsed() < Duration::from_millis(1_500),
        "woken by the release: {:?}",
        released.elapsed()
    );
    assert_eq!(guard.members_held(), 3);
    for (node, name) in nodes.iter().zip(names) {
        assert!(exists(node, name));
    }
    guard.release().await.unwrap();
    for (node, name) in nodes.iter().zip(names) {
        assert!(!exists(node, name));
    }
}

#[tokio::test]
async fn a_lease_redlock_knows_its_validity() {
    let nodes = servers(3);
    let mgrs = managers(&nodes, Duration::from_secs(5)).await;
    let lease = Duration::from_millis(500);
    let started = Instant::now();
    let guard = redlock(&mgrs, "red:lease")
        .try_acquire_with_lease(Duration::ZERO, lease)
        .await
        .unwrap()
        .unwrap();
    let returned = Instant::now();
    let deadline = guard.validity_deadline().unwrap();
    let drift = lease / 100 + Duration::from_millis(2);
    // Counted from the sends, which were between `started` and `returned` however late a
    // loaded machine made them.
    assert!(
        deadline <= returned + lease - drift,
        "{:?}",
        deadline - started
    );
    assert!(deadline >= started + lease - drift - Duration::from_millis(20));
    assert!(!guard.is_lost());
    tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .unwrap();
    assert!(Instant::now() >= deadline);
    assert!(guard.is_lost());
}

#[tokio::test]
async fn a_watchdog_redlock_is_lost_when_a_majority_of_members_is() {
    let nodes = servers(3);
    let mgrs = managers(&nodes, Duration::from_millis(600)).await;
    let red = redlock(&mgrs, "red:wd");
    let guard = red.acquire().await.unwrap();
    assert_eq!(guard.validity_deadline(), None);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!guard.is_lost(), "renewed by the members' watchdogs");
    assert!(mgrs[0].lock("red:wd").force_unlock().await.unwrap());
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !guard.is_lost(),
        "one member of three lost: still a majority"
    );
    assert!(mgrs[1].lock("red:wd").force_unlock().await.unwrap());
    tokio::time::timeout(Duration::from_secs(1), guard.lost())
        .await
        .expect("lost with the majority");
}

#[tokio::test]
async fn bad_member_lists_are_refused() {
    let nodes = servers(2);
    let mgrs = managers(&nodes, Duration::from_secs(5)).await;
    let empty = RedLock::new(Vec::new());
    assert!(matches!(
        empty.try_acquire().await,
        Err(LockError::InvalidArgument { .. })
    ));
    assert!(matches!(
        MultiLock::new(Vec::new()).try_acquire().await,
        Err(LockError::InvalidArgument { .. })
    ));
    let twice = MultiLock::new(vec![mgrs[0].lock("dup"), mgrs[0].lock("dup")]);
    assert!(matches!(
        twice.try_acquire().await,
        Err(LockError::InvalidArgument { .. })
    ));
    let lease = RedLock::new(vec![mgrs[0].lock("x"), mgrs[1].lock("x")]);
    let zero = lease
        .try_acquire_with_lease(Duration::ZERO, Duration::ZERO)
        .await;
    assert!(matches!(zero, Err(LockError::InvalidArgument { .. })));
    for node in &nodes {
        let size: u64 = redis::cmd("DBSIZE").query(&mut node.conn()).unwrap();
        assert_eq!(size, 0, "nothing was written");
    }
    // One member: the quorum is 1.
    let single = RedLock::new(vec![mgrs[0].lock("one")]);
    assert_eq!(single.quorum(), 1);
    let guard = single.try_acquire().await.unwrap().unwrap();
    let another = RedLock::new(vec![mgrs[0].lock("one")]); // another holder
    assert!(another.try_acquire().await.unwrap().is_none());
    guard.release().await.unwrap();
}

const CHILD_URLS: &str = "LOCKMAN_TEST_CHILD_URLS";
const CHILD_WATCHDOG: Duration = Duration::from_millis(1500);

/// The body of the child process of `a_crashed_holder_releases_every_member` (run with --ignored).
#[tokio::test]
#[ignore = "child process of a_crashed_holder_releases_every_member"]
async fn child_holds_a_redlock_until_killed() {
    let urls = std::env::var(CHILD_URLS).expect("run by the parent test");
    let mut mgrs = Vec::new();
    for url in urls.split(',') {
        mgrs.push(
            LockManager::start(Config::new(url).watchdog_timeout(CHILD_WATCHDOG))
                .await
                .unwrap(),
        );
    }
    let _guard = redlock(&mgrs, "red:crash").acquire().await.unwrap();
    println!("HELD");
    tokio::time::sleep(Duration::from_secs(120)).await;
}

#[tokio::test]
async fn a_crashed_holder_releases_every_member_within_the_watchdog_timeout() {
    let nodes = servers(3);
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let urls = urls.join(",");
    let (mut child, _) = support::child::spawn_child_test(
        "child_holds_a_redlock_until_killed",
        (CHILD_URLS, &urls),
        "HELD",
    );
    std::thread::sleep(CHILD_WATCHDOG * 2);
    assert!(
        nodes.iter().all(|n| exists(n, "red:crash")),
        "renewed on every member"
    );

    let mgrs = managers(&nodes, Duration::from_secs(5)).await;
    let red = redlock(&mgrs, "red:crash");
    assert!(red.try_acquire().await.unwrap().is_none());
    let killed = Instant::now();
    child.kill().unwrap();
    child.wait().unwrap();
    let guard = red.acquire().await.unwrap(); // as soon as a majority expired
    let took = killed.elapsed();
    assert!(took <= CHILD_WATCHDOG + Duration::from_secs(1), "{took:?}");
    assert!(guard.members_held() >= 2);
    guard.release().await.unwrap();
    // Whatever is left is the dead holder's: every member expires within the watchdog timeout.
    let limit = (CHILD_WATCHDOG + Duration::from_secs(1)).saturating_sub(killed.elapsed());
    let all_gone = eventually(limit, || nodes.iter().all(|n| !exists(n, "red:crash"))).await;
    assert!(
        all_gone,
        "a member of the crashed holder outlived the watchdog timeout"
    );
}

#[tokio::test]
async fn multilock_with_a_server_down_gives_up_on_time_holding_nothing() {
    let mut nodes = servers(3);
    let mgrs = managers(&nodes, Duration::from_secs(5)).await;
    let multi = MultiLock::new(mgrs.iter().map(|m| m.lock("m:down")).collect());
    nodes[1].stop();
    let wait = Duration::from_millis(600);
    let started = Instant::now();
    let got = multi.try_acquire_for(wait).await;
    let took = started.elapsed();
    // A member's Redis away at its end: an error that says so, not contention (issue 57; was
    // `Ok(None)`).
    assert!(
        matches!(&got, Err(LockError::Unavailable { name, .. }) if name == "m:down"),
        "{got:?}"
    );
    assert!(
        took >= wait && took <= wait + Duration::from_millis(700),
        "{took:?}"
    );
    assert!(
        !exists(&nodes[0], "m:down") && !exists(&nodes[2], "m:down"),
        "nothing stays held"
    );
}

/// Two MultiLocks on the same two locks, listed in opposite orders, taken again and again: each
/// must get both every time. Without one shared order of waiting, they were seen to take one
/// member each, give both back and swap, round after round, until their waits ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multilocks_listing_the_same_locks_in_opposite_orders_never_livelock() {
    let server = RedisServer::start();
    let mgr = LockManager::start(Config::new(server.url())).await.unwrap();
    let tasks: Vec<_> = [["live:a", "live:b"], ["live:b", "live:a"]]
        .into_iter()
        .flat_map(|names| {
            let mgr = mgr.clone();
            (0..2).map(move |_| {
                let members = names.iter().map(|n| mgr.lock(*n)).collect();
                let multi = MultiLock::new(members);
                tokio::spawn(async move {
                    for round in 0..150 {
                        let started = std::time::Instant::now();
                        let held = multi
                            .try_acquire_for(Duration::from_secs(3))
                            .await
                            .unwrap()
                            .unwrap_or_else(|| panic!("round {round}: not both within 3 s"));
                        assert!(started.elapsed() < Duration::from_secs(3));
                        held.release().await.unwrap();
                    }
                })
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    mgr.shutdown().await;
}
