//! Elections: one leader at a time, terms that grow, resign waking the next candidate by
//! message, observers, cancel safety, and fenced writes refusing a stale leader.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockman::{Config, Leader, LockManager};
use redis::Commands;
use support::{RedisServer, wait};

async fn manager(server: &RedisServer) -> LockManager {
    LockManager::start(Config::new(server.url()))
        .await
        .expect("manager starts")
}

#[tokio::test]
async fn candidates_lead_one_at_a_time_with_growing_terms_and_resign_wakes_the_next() {
    let server = RedisServer::start();
    let leading = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let mgr = manager(&server).await;
        let (leading, most, terms) = (leading.clone(), most.clone(), terms.clone());
        tasks.push(tokio::spawn(async move {
            let election = mgr.election("singleton");
            for _ in 0..2 {
                let lead = election.campaign().await.unwrap();
                let now = leading.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                terms.lock().unwrap().push(lead.term());
                tokio::time::sleep(Duration::from_millis(50)).await;
                leading.fetch_sub(1, Ordering::SeqCst);
                lead.resign().await.unwrap();
            }
            mgr.shutdown().await;
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(most.load(Ordering::SeqCst), 1, "two leaders at once");
    let terms = terms.lock().unwrap().clone();
    assert_eq!(terms.len(), 6);
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "terms {terms:?}");
    // Five hand-overs, each woken by the unlock message: a TTL (30 s) would take far longer.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn observers_see_each_leader_with_its_term_and_nobody_between() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let election = mgr
        .election("observed")
        .observe_every(Duration::from_millis(10));
    let mut observer = election.observe();
    assert_eq!(observer.next().await.unwrap(), None);
    let lead = election.campaign().await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(2), observer.next())
        .await
        .unwrap()
        .unwrap();
    let expected = Leader {
        holder: lead.holder_id().to_owned(),
        term: lead.term(),
    };
    assert_eq!(seen, Some(expected.clone()));
    assert_eq!(election.leader().await.unwrap(), Some(expected));
    // The record is the fenced lock itself: its holder field and its token counter.
    let fields: Vec<(String, u32)> = raw.hgetall("observed").unwrap();
    assert_eq!(fields, vec![(lead.holder_id().to_owned(), 1)]);
    let counter: u64 = raw.get("redisson_lock_token:{observed}").unwrap();
    assert_eq!(counter, lead.term());
    lead.resign().await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(2), observer.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen, None);
    assert_eq!(raw.exists::<_, bool>("observed"), Ok(false));
}

#[tokio::test]
async fn a_dropped_campaign_never_leads() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let election = mgr.election("dropped");
    let lead = election.campaign().await.unwrap();
    // Even a clone of the leader's own election is another candidate: no re-entry. It waits
    // (subscribed to the election's channel) until its caller drops it.
    let waiting = election.clone();
    let candidate = {
        let waiting = waiting.clone();
        tokio::spawn(async move { waiting.campaign().await.map(|_| ()) })
    };
    let channel = "redisson_lock__channel:{dropped}";
    wait::subscribers(&mut raw, channel, 1).await;
    assert!(
        !candidate.is_finished(),
        "the second candidate led beside the first"
    );
    candidate.abort();
    // Its waiter left: the actor unsubscribed the channel, which nobody else needs.
    wait::until("the dropped candidate left", || {
        redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query::<(String, u64)>(&mut raw)
            .is_ok_and(|(_, n)| n == 0)
    })
    .await;
    let term = lead.term();
    lead.resign().await.unwrap();
    // Everything the manager had under way for the name is over once its actor stopped.
    assert!(
        support::wait::lock_actors_stop(&mgr, Duration::from_secs(5)).await,
        "the election's actor stopped"
    );
    assert_eq!(waiting.leader().await.unwrap(), None);
    assert_eq!(raw.exists::<_, bool>("dropped"), Ok(false));
    // Never led, not led and let go: every lead takes a token from the counter, and it still
    // holds the first lead's.
    let counter: u64 = raw.get("redisson_lock_token:{dropped}").unwrap();
    assert_eq!(counter, term, "a dropped candidate took a term");
}

/// The same, with the resign right after the drop, before the actor has seen the caller go.
#[tokio::test]
async fn a_campaign_dropped_just_before_the_resign_never_leads() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let election = mgr.election("dropped");
    let lead = election.campaign().await.unwrap();
    let waiting = election.clone();
    let gave_up = tokio::time::timeout(Duration::from_millis(200), waiting.campaign()).await;
    assert!(
        gave_up.is_err(),
        "the second candidate led beside the first"
    );
    let term = lead.term();
    lead.resign().await.unwrap();
    assert!(
        support::wait::lock_actors_stop(&mgr, Duration::from_secs(5)).await,
        "the election's actor stopped"
    );
    assert_eq!(raw.exists::<_, bool>("dropped"), Ok(false));
    let counter: u64 = raw.get("redisson_lock_token:{dropped}").unwrap();
    assert_eq!(counter, term, "a dropped candidate took a term");
}

#[tokio::test]
async fn a_paused_old_leaders_write_is_refused_after_a_new_leader_wrote() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (m1, m2) = (manager(&server).await, manager(&server).await);
    let old = m1.election("jobs").campaign().await.unwrap();
    assert!(old.fenced_set("{jobs}:out", "old-1").await.unwrap());
    assert!(
        old.fenced_set("{jobs}:out", "old-2").await.unwrap(),
        "a term writes again"
    );
    // The old leader stalls past its TTL (here: its key expires at once) and another leads.
    let _: () = raw.del("jobs").unwrap();
    let new = m2.election("jobs").campaign().await.unwrap();
    assert!(new.term() > old.term());
    assert!(new.fenced_set("{jobs}:out", "new").await.unwrap());
    // The old leader wakes up, not knowing yet, and writes: refused, nothing changed.
    assert!(!old.fenced_set("{jobs}:out", "stale").await.unwrap());
    assert_eq!(raw.get::<_, String>("{jobs}:out").unwrap(), "new");
    let seen: u64 = raw.hget("lockman_fence:{jobs}", "{jobs}:out").unwrap();
    assert_eq!(seen, new.term());
    // A key the new leader never wrote still takes the old token: the fence is per key.
    assert!(old.fenced_set("{jobs}:other", "old").await.unwrap());
    new.resign().await.unwrap();
}
