//! README, "Recovery": a connection whose flow a NAT or firewall forgot stays open and silent.
//! Besides lockman's own checks (the pub/sub PING, the replacement of a command connection
//! after a timeout), every connection lockman opens has TCP keepalive on, which keeps an idle
//! flow alive in such a middlebox and lets the kernel fail a dead one. What is tried here: the
//! kernel's own table (Linux `/proc/net/tcp`) shows a keepalive timer on each of a manager's
//! connections, commands and pub/sub alike.

mod support;

use std::time::Duration;

use lockman::{Config, LockManager};
use support::{RedisServer, wait::eventually};

/// The timer of each established IPv4 connection to `port`, from `/proc/net/tcp`: `0` none,
/// `1` retransmission, `2` keepalive (its `tr` column).
fn timers_to(port: u16) -> Vec<u8> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    let port = format!("{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let remote = fields.get(2)?;
            let established = *fields.get(3)? == "01";
            let timer = fields.get(5)?.split(':').next()?;
            (established && remote.ends_with(&format!(":{port}")))
                .then(|| u8::from_str_radix(timer, 16).ok())
                .flatten()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_of_a_manager_has_tcp_keepalive() {
    let server = RedisServer::start();
    let mgr = LockManager::start(Config::new(server.url())).await.unwrap();
    // A waiter makes the pub/sub connection subscribe; the holder used the command connection.
    let held = mgr.lock("keepalive").acquire().await.unwrap();
    let other = tokio::spawn({
        let lock = mgr.lock("keepalive");
        async move { lock.try_acquire_for(Duration::from_secs(10)).await }
    });
    let mut probe = server.conn();
    assert!(
        support::wait::subscribed(
            &mut probe,
            "redisson_lock__channel:{keepalive}",
            Duration::from_secs(5)
        )
        .await
    );
    drop(probe);
    // Commands and pub/sub: at least two connections, none without a keepalive timer (an
    // acknowledgement in flight shows a retransmission timer for a moment: waited out).
    let all_keepalive = || {
        let timers = timers_to(server.port());
        timers.len() >= 2 && timers.iter().all(|&t| t == 2)
    };
    let ok = eventually(Duration::from_secs(3), all_keepalive).await;
    assert!(
        ok,
        "connections to the server and their timers (2: keepalive): {:?}",
        timers_to(server.port())
    );
    held.release().await.unwrap();
    let served = tokio::time::timeout(Duration::from_secs(5), other).await;
    assert!(matches!(&served, Ok(Ok(Ok(Some(_))))), "{served:?}");
    mgr.shutdown().await;
}
