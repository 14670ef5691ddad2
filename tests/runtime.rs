//! lockman inside an actix System (actors on the caller's arbiter) and from a plain tokio
//! program (actors on a System of lockman's own, on a background thread).

mod support;

use std::time::Duration;

use lockman::LockManager;
use support::RedisServer;

async fn exercise(url: String) {
    let mgr = LockManager::connect(&url).await.unwrap();
    let lock = mgr.lock("rt");
    let guard = lock.acquire().await.unwrap();
    let waiter = {
        let lock = mgr.lock("rt");
        tokio::spawn(async move { lock.try_acquire_for(Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    guard.release().await.unwrap();
    let got = waiter.await.unwrap().unwrap();
    assert!(got.is_some());
    drop(got);
    mgr.shutdown().await;
}

#[actix_rt::test]
async fn works_inside_an_actix_system() {
    let server = RedisServer::start();
    assert!(actix_rt::System::try_current().is_some());
    exercise(server.url()).await;
}

#[tokio::test]
async fn works_from_plain_tokio_without_an_actix_system() {
    let server = RedisServer::start();
    assert!(actix_rt::System::try_current().is_none());
    exercise(server.url()).await;
}

#[test]
fn works_from_a_runtime_that_is_dropped_afterwards() {
    let server = RedisServer::start();
    for _ in 0..3 {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(exercise(server.url()));
        drop(rt);
    }
}
