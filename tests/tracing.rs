//! The spans lockman opens, as a subscriber sees them: one per acquire and release, with the
//! name, kind, wait, outcome and whether the request waited, for locks, semaphores and latches.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockman::LockManager;
use support::RedisServer;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// Every closed span: its name and fields, and its parent's name under [`PARENT`].
type Closed = Arc<Mutex<Vec<(String, BTreeMap<String, String>)>>>;

struct Capture(Closed);

/// The key under which a closed span's parent span's name is kept (no span has such a field).
const PARENT: &str = "(parent)";

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<Fields>()
        {
            values.record(fields);
        }
    }
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            let mut fields = span
                .extensions()
                .get::<Fields>()
                .map(|f| f.0.clone())
                .unwrap_or_default();
            if let Some(parent) = span.parent() {
                fields.insert(PARENT.to_owned(), parent.name().to_owned());
            }
            self.0
                .lock()
                .unwrap()
                .push((span.name().to_owned(), fields));
        }
    }
}

/// A server, a subscriber that captures every closed span (set as this thread's default while
/// the guard lives), and a current-thread runtime on this thread: the handles run here, under
/// the subscriber.
fn traced() -> (
    RedisServer,
    Closed,
    tracing::subscriber::DefaultGuard,
    tokio::runtime::Runtime,
) {
    let server = RedisServer::start();
    let closed: Closed = Arc::default();
    let subscriber = tracing_subscriber::registry().with(Capture(closed.clone()));
    let default = tracing::subscriber::set_default(subscriber);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    (server, closed, default, rt)
}

fn field<'a>(fields: &'a BTreeMap<String, String>, name: &str) -> &'a str {
    fields.get(name).map_or("", String::as_str)
}

#[test]
fn every_acquire_and_release_has_a_span_with_its_outcome() {
    let (server, closed, _default, rt) = traced();
    rt.block_on(async {
        let mgr = LockManager::connect(&server.url()).await.unwrap();
        let (a, b) = (mgr.lock("traced"), mgr.lock("traced"));
        let held = a.acquire().await.unwrap();
        let waiter = tokio::spawn(async move { b.acquire().await.unwrap().release().await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        held.release().await.unwrap();
        waiter.await.unwrap().unwrap();
        let busy = mgr.lock("traced").acquire().await.unwrap();
        let none = mgr.lock("traced").try_acquire().await.unwrap();
        assert!(none.is_none());
        busy.release().await.unwrap();
        let sem = mgr.permit_semaphore("traced-sem");
        sem.try_set_permits(1).await.unwrap();
        sem.acquire(1).await.unwrap().release().await.unwrap();
        let latch = mgr.count_down_latch("traced-latch");
        assert!(latch.wait_for(Duration::from_millis(10)).await.unwrap());
        mgr.shutdown().await;
    });
    let closed = closed.lock().unwrap();
    let acquires: Vec<_> = closed
        .iter()
        .filter(|(n, _)| n == "lockman.acquire")
        .collect();
    let releases: Vec<_> = closed
        .iter()
        .filter(|(n, _)| n == "lockman.release")
        .collect();
    let locks: Vec<_> = acquires
        .iter()
        .filter(|(_, f)| field(f, "name") == "traced")
        .map(|(_, f)| (field(f, "outcome"), field(f, "waited"), field(f, "wait")))
        .collect();
    // The first holder, the waiter (in the order their spans closed), the third, the try.
    assert_eq!(locks.len(), 4, "{closed:?}");
    assert!(
        locks.contains(&("acquired", "false", "Forever")),
        "{locks:?}"
    );
    assert!(
        locks.contains(&("acquired", "true", "Forever")),
        "the waiter waited: {locks:?}"
    );
    assert!(locks.contains(&("timed_out", "true", "No")), "{locks:?}");
    assert_eq!(
        releases
            .iter()
            .filter(|(_, f)| field(f, "outcome") == "released")
            .count(),
        4
    );
    let sem = acquires
        .iter()
        .find(|(_, f)| field(f, "name") == "traced-sem")
        .unwrap();
    assert_eq!(field(&sem.1, "kind"), "PermitSemaphore");
    assert_eq!(field(&sem.1, "outcome"), "acquired");
    let latch = acquires
        .iter()
        .find(|(_, f)| field(f, "name") == "traced-latch")
        .unwrap();
    assert_eq!(field(&latch.1, "outcome"), "opened");
}

/// A waiter's acquire span names the holder it waited behind: its holder id, client id and the
/// service in that client's record (another manager, as another process would be).
#[test]
fn a_waiters_span_names_the_holder_it_waited_behind() {
    let (server, closed, _default, rt) = traced();
    let (holder_id, client_id) = rt.block_on(async {
        let billing = lockman::Config::new(server.url())
            .watchdog_timeout(Duration::from_secs(1))
            .client_name("billing");
        let billing = LockManager::start(billing).await.unwrap();
        let waiter = LockManager::connect(&server.url()).await.unwrap();
        let lock = billing.lock("behind");
        let held = lock.acquire().await.unwrap();
        // Its client record is written after a third of its watchdog timeout.
        let mut conn = server.conn();
        let key = format!("lockman_client:{{lockman}}:{}", billing.client_id());
        assert!(
            support::wait::eventually(Duration::from_secs(5), || {
                redis::cmd("EXISTS")
                    .arg(&key)
                    .query::<bool>(&mut conn)
                    .unwrap()
            })
            .await
        );
        let wait = tokio::spawn({
            let lock = waiter.lock("behind");
            async move { lock.try_acquire_for(Duration::from_secs(5)).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        held.release().await.unwrap();
        let got = wait
            .await
            .unwrap()
            .unwrap()
            .expect("granted after the release");
        got.release().await.unwrap();
        let ids = (
            lock.holder_id(),
            billing.client_id().hyphenated().to_string(),
        );
        billing.shutdown().await;
        waiter.shutdown().await;
        ids
    });
    let closed = closed.lock().unwrap();
    let spans: Vec<_> = closed
        .iter()
        .filter(|(n, f)| n == "lockman.acquire" && field(f, "name") == "behind")
        .map(|(_, f)| f)
        .collect();
    assert_eq!(spans.len(), 2, "{closed:?}");
    let waited = spans
        .iter()
        .find(|f| field(f, "waited") == "true")
        .expect("the waiter's span");
    assert_eq!(field(waited, "behind"), holder_id);
    assert_eq!(field(waited, "behind_client"), client_id);
    assert_eq!(field(waited, "behind_service"), "billing");
    let first = spans
        .iter()
        .find(|f| field(f, "waited") == "false")
        .unwrap();
    assert_eq!(
        field(first, "behind"),
        "",
        "an uncontended acquire looks nobody up"
    );
}

/// A group waiter's acquire span names the owner of the member it waited behind (the value of
/// the member's field), not a field of the group's hash.
#[test]
fn a_group_waiters_span_names_the_owner_it_waited_behind() {
    let (server, closed, _default, rt) = traced();
    let holder_id = rt.block_on(async {
        let holder = LockManager::connect(&server.url()).await.unwrap();
        let waiter = LockManager::connect(&server.url()).await.unwrap();
        let lock = holder.group_lock("gbehind", ["a", "b"]).unwrap();
        let held = lock.acquire().await.unwrap();
        let wait = tokio::spawn({
            let lock = waiter.group_lock("gbehind", ["b"]).unwrap();
            async move { lock.try_acquire_for(Duration::from_secs(5)).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        held.release().await.unwrap();
        let got = wait
            .await
            .unwrap()
            .unwrap()
            .expect("granted after the release");
        got.release().await.unwrap();
        let id = lock.holder_id();
        holder.shutdown().await;
        waiter.shutdown().await;
        id
    });
    let closed = closed.lock().unwrap();
    let waited = closed
        .iter()
        .filter(|(n, f)| {
            n == "lockman.acquire" && field(f, "name") == "gbehind" && field(f, "waited") == "true"
        })
        .map(|(_, f)| f)
        .next()
        .expect("the waiter's span");
    assert_eq!(field(waited, "behind"), holder_id);
}

/// Elections in spans: a campaign's outcome and the term it won, the term's own span from the
/// win until it ends (resigned, or lost), and a resign's release inside that term.
#[test]
fn a_campaign_and_the_term_it_won_have_spans() {
    let (server, closed, _default, rt) = traced();
    let (first, second, holder) = rt.block_on(async {
        let config = lockman::Config::new(server.url()).watchdog_timeout(Duration::from_secs(1));
        let mgr = LockManager::start(config).await.unwrap();
        let election = mgr.election("traced-election");
        let lead = election.campaign().await.unwrap();
        let first = lead.term();
        let holder = lead.holder_id().to_owned();
        let none = election
            .try_campaign_for(Duration::from_millis(20))
            .await
            .unwrap();
        assert!(none.is_none());
        lead.resign().await.unwrap();
        // A lead whose key is deleted is lost at the next renewal; dropped, its term says so.
        let lead = election.campaign().await.unwrap();
        let second = lead.term();
        let mut conn = server.conn();
        let _: () = redis::cmd("DEL")
            .arg("traced-election")
            .query(&mut conn)
            .unwrap();
        assert!(support::wait::eventually(Duration::from_secs(5), || lead.is_lost()).await);
        drop(lead);
        mgr.shutdown().await;
        (first, second, holder)
    });
    let closed = closed.lock().unwrap();
    let named = |span: &str| -> Vec<(usize, &BTreeMap<String, String>)> {
        closed
            .iter()
            .enumerate()
            .filter(|(_, (n, f))| n == span && field(f, "name") == "traced-election")
            .map(|(i, (_, f))| (i, f))
            .collect()
    };
    let campaigns = named("lockman.campaign");
    let outcomes: Vec<_> = campaigns
        .iter()
        .map(|(_, f)| (field(f, "outcome"), field(f, "term"), field(f, "wait")))
        .collect();
    let (first, second) = (first.to_string(), second.to_string());
    assert_eq!(
        outcomes,
        [
            ("won", first.as_str(), "Forever"),
            ("timed_out", "", "Up(20ms)"),
            ("won", second.as_str(), "Forever"),
        ],
        "{closed:?}"
    );
    let terms = named("lockman.term");
    let ended: Vec<_> = terms
        .iter()
        .map(|(_, f)| (field(f, "term"), field(f, "ended"), field(f, "holder")))
        .collect();
    assert_eq!(ended.len(), 2, "{closed:?}");
    assert_eq!(ended[0], (first.as_str(), "resigned", holder.as_str()));
    assert_eq!((ended[1].0, ended[1].1), (second.as_str(), "lost"));
    // The resign's release ran inside the first term: its span's parent, closed before it.
    let releases = named("lockman.release");
    assert!(
        releases.iter().any(|(i, f)| *i < terms[0].0
            && field(f, "outcome") == "released"
            && field(f, PARENT) == "lockman.term"),
        "{closed:?}"
    );
    // Each campaign's acquire ran inside it: the campaign is its parent.
    let acquires = named("lockman.acquire");
    assert_eq!(acquires.len(), 3, "{closed:?}");
    assert!(
        acquires
            .iter()
            .zip(&campaigns)
            .all(|((a, f), (c, _))| a < c && field(f, PARENT) == "lockman.campaign"),
        "{closed:?}"
    );
}

/// The environment variable that makes [`child_subscriber_set_mid_run`] run (as a child
/// process of [`a_subscriber_set_mid_run_sees_the_spans_from_then_on`]).
const MID_RUN: &str = "LOCKMAN_TEST_TRACING_MID_RUN";

/// A subscriber set after lockman's spans were first created with none: `tracing` caches each
/// callsite's interest when the callsite is first hit, as "never" while no subscriber exists,
/// and must rebuild it when one is set (a thread's default, then the global one). The cache is
/// the process's, and the other tests of this binary hold subscribers while they run, so the
/// first hits with none happen in a child process of its own.
#[test]
fn a_subscriber_set_mid_run_sees_the_spans_from_then_on() {
    let out = support::child::run_child_test("child_subscriber_set_mid_run", (MID_RUN, "1"));
    assert!(
        out.status.success(),
        "the child failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("mid-run: checked"),
        "the child ran no check:\n{said}"
    );
}

/// One uncontended acquire and release of `name`, and one acquire that waits behind another
/// handle's hold (its span looks the holder up after 10 ms).
async fn rounds(mgr: &LockManager, name: &str) {
    let held = mgr.lock(name).acquire().await.unwrap();
    let waiter = tokio::spawn({
        let lock = mgr.lock(name);
        async move { lock.acquire().await.unwrap().release().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.release().await.unwrap();
    waiter.await.unwrap().unwrap();
}

/// The acquire spans of `name` among `closed`, as (outcome, waited, behind).
fn acquires_of(closed: &Closed, name: &str) -> Vec<(String, String, String)> {
    let closed = closed.lock().unwrap();
    closed
        .iter()
        .filter(|(n, f)| n == "lockman.acquire" && field(f, "name") == name)
        .map(|(_, f)| {
            let get = |k| field(f, k).to_owned();
            (get("outcome"), get("waited"), get("behind"))
        })
        .collect()
}

#[test]
#[ignore = "a child process of a_subscriber_set_mid_run_sees_the_spans_from_then_on"]
fn child_subscriber_set_mid_run() {
    if std::env::var_os(MID_RUN).is_none() {
        return;
    }
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mgr = rt.block_on(async { LockManager::connect(&server.url()).await.unwrap() });
    // No subscriber anywhere: every callsite is first hit here.
    assert!(!tracing::dispatcher::has_been_set());
    rt.block_on(rounds(&mgr, "before"));

    let scoped: Closed = Arc::default();
    let default = tracing::subscriber::set_default(
        tracing_subscriber::registry().with(Capture(scoped.clone())),
    );
    rt.block_on(rounds(&mgr, "scoped"));
    drop(default);
    rt.block_on(rounds(&mgr, "after"));
    let seen = acquires_of(&scoped, "scoped");
    assert_eq!(seen.len(), 2, "a thread's default set mid-run: {seen:?}");
    let waited = seen
        .iter()
        .find(|s| s.1 == "true")
        .expect("the waiter's span");
    assert_eq!(waited.0, "acquired");
    assert!(
        waited.2.starts_with(&mgr.client_id().to_string()),
        "{waited:?}"
    );
    assert!(acquires_of(&scoped, "before").is_empty());
    assert!(acquires_of(&scoped, "after").is_empty(), "removed");

    let global: Closed = Arc::default();
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(Capture(global.clone())),
    )
    .unwrap();
    rt.block_on(rounds(&mgr, "global"));
    let seen = acquires_of(&global, "global");
    assert_eq!(seen.len(), 2, "the global default set mid-run: {seen:?}");
    assert!(
        seen.iter().any(|s| s.1 == "true" && !s.2.is_empty()),
        "{seen:?}"
    );
    rt.block_on(mgr.shutdown());
    println!("mid-run: checked");
}
