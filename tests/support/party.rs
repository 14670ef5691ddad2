//! Parties to a deadlock, for `tests/deadlock*.rs`: tasks that take a first lock, say who they
//! are, and on a signal begin their second wait.

use std::future::Future;
use std::time::{Duration, Instant};

use lockman::LockError;
use lockman::deadlock::{self, Cycle, Owner};
use tokio::sync::oneshot;

/// A task that takes its first lock (any kind of guard), says who it is (its owner), waits for
/// `go`, then runs `then` (its second wait) and gives back what that returned and when, still
/// holding the first lock until then.
pub fn party<G: Send + 'static, T: Send + 'static>(
    first: impl Future<Output = Result<G, LockError>> + Send + 'static,
    then: impl Future<Output = T> + Send + 'static,
) -> (
    oneshot::Receiver<Owner>,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<(T, Instant)>,
) {
    let (me_tx, me_rx) = oneshot::channel();
    let (go_tx, go_rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let held = first.await.expect("first lock");
        me_tx.send(deadlock::current()).unwrap();
        go_rx.await.unwrap();
        let out = then.await;
        let at = Instant::now();
        drop(held);
        (out, at)
    });
    (me_rx, go_tx, task)
}

/// The cycle of a `LockError::Deadlock`; panics on anything else.
pub fn deadlock_of<T: std::fmt::Debug>(res: Result<T, LockError>) -> Cycle {
    match res {
        Err(LockError::Deadlock { cycle }) => cycle,
        other => panic!("expected a deadlock, got {other:?}"),
    }
}

/// Lets a party (see [`party`]) close a cycle: sends it `go`, and awaits its task, whose second
/// wait must be broken with `LockError::Deadlock` within `found` of the signal. The task must
/// end within `limit` (a cycle never broken panics there). Returns the cycle and how long its
/// breaking took from the signal.
pub async fn close_cycle<T: std::fmt::Debug>(
    go: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<(Result<T, LockError>, Instant)>,
    found: Duration,
    limit: Duration,
) -> (Cycle, Duration) {
    let closed = Instant::now();
    go.send(()).unwrap();
    let (res, done) = tokio::time::timeout(limit, task)
        .await
        .expect("the cycle is broken")
        .unwrap();
    let took = done - closed;
    assert!(took < found, "found after {took:?}");
    (deadlock_of(res), took)
}

/// Awaits a party's task whose second wait must go on (to its grant, or its own end) within
/// `limit`, once a cycle it was part of was broken elsewhere: what that wait returned. `who`
/// names the party in the panic.
pub async fn goes_on<T>(
    who: &str,
    task: tokio::task::JoinHandle<(T, Instant)>,
    limit: Duration,
) -> T {
    tokio::time::timeout(limit, task)
        .await
        .unwrap_or_else(|_| panic!("{who} does not go on within {limit:?}"))
        .unwrap()
        .0
}
