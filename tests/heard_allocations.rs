//! Allocations per unlock message heard, counted by a counting global allocator (a figure that
//! does not move with the machine's load): the waiting side's path from the pub/sub connection
//! to the name's actor (issue 60 item 3). A lock whose waiter got it keeps its channel
//! subscribed while its actor lingers, so every message on that channel is heard: read by
//! redis-rs and taken by the PubSubActor, which drops it, since that actor has no waiter left
//! to wake (its hearing is off).
//!
//! Messages are published in windows of [`MESSAGES`], from a plain connection of this process,
//! alike on the kept channel and on a channel of the same length nobody here listens to (the
//! publisher's own allocations). Each window ends once the count has stood still for
//! [`SETTLED`]; the fewest of each kind over [`WINDOWS`] windows are free of the work that comes
//! with time (the ping, the Watchdog's tick), and their difference, divided by [`MESSAGES`], is
//! what hearing one costs.
//!
//! Its own test binary: the counting allocator is the whole process's.

#[path = "../benches/common/counting.rs"]
mod counting;
mod support;

use std::time::Duration;

use lockman::{Config, LockManager};
use support::RedisServer;

/// Messages per window.
const MESSAGES: u64 = 100;
/// Windows counted; the figure is the smallest.
const WINDOWS: u64 = 12;
/// How long the count must stand still before a window ends: every message published has been
/// read and handled by then.
const SETTLED: Duration = Duration::from_millis(150);

/// The ceiling per message heard. Measured when it was set (debug build, all features): 4.02
/// (6.02 while each message was still delivered to the actor with no waiter, its envelope
/// boxed; 9.02 before the PubSubActor held its route to each listener, rather than upgrading
/// a weak one per message, which made a sender and boxed it: three allocations). Plus a
/// margin of 1, under what delivering the message would cost.
const CEILING: f64 = 5.0;

/// Publishes [`MESSAGES`] messages on `channel`, each reaching `listeners` subscribers, and
/// returns the allocations counted until the count stood still for [`SETTLED`].
async fn window(raw: &mut redis::Connection, channel: &str, listeners: i64) -> u64 {
    let before = counting::allocations();
    for _ in 0..MESSAGES {
        let heard: i64 = redis::cmd("PUBLISH")
            .arg(channel)
            .arg("0")
            .query(raw)
            .expect("publish");
        assert_eq!(heard, listeners, "subscribers of {channel}");
    }
    let mut last = counting::allocations();
    loop {
        tokio::time::sleep(SETTLED).await;
        let now = counting::allocations();
        if now == last {
            return now - before;
        }
        last = now;
    }
}

#[test]
fn an_unlock_message_heard_stays_under_its_allocation_ceiling() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let system = actix_rt::System::new();
    let per_message = system.block_on(async {
        // A linger far above the test's length: the actor keeps the channel throughout.
        let config = Config::new(server.url()).idle_linger(Duration::from_secs(120));
        let a = LockManager::start(config).await.expect("manager");
        let b = LockManager::start(Config::new(server.url()))
            .await
            .expect("manager");
        // `a`'s waiter gets the lock after waiting for `b`'s release: its actor keeps the
        // lock's channel.
        let held = b.lock("heard").acquire().await.expect("acquire");
        let lock = a.lock("heard");
        let waiter = actix_rt::spawn(async move { lock.acquire().await });
        let channel = "redisson_lock__channel:{heard}";
        assert!(support::wait::subscribed(&mut raw, channel, Duration::from_secs(10)).await);
        held.release().await.expect("release");
        let guard = waiter.await.expect("no panic").expect("acquire");
        guard.release().await.expect("release");
        // Its own release's message, and the manager's settling, before counting.
        tokio::time::sleep(SETTLED).await;
        let nobody = "redisson_lock__channel:{heaRd}";
        // The fewest of each kind of window, each free of the work that comes with time.
        let (mut publishing, mut heard) = (u64::MAX, u64::MAX);
        for _ in 0..WINDOWS {
            publishing = publishing.min(window(&mut raw, nobody, 0).await);
            heard = heard.min(window(&mut raw, channel, 1).await);
        }
        a.shutdown().await;
        b.shutdown().await;
        heard.saturating_sub(publishing) as f64 / MESSAGES as f64
    });
    println!("allocations per unlock message heard: {per_message:.2}");
    assert!(
        per_message <= CEILING,
        "{per_message:.2} allocations per message heard, ceiling {CEILING}"
    );
}
