//! Parties to a deadlock, for `tests/deadlock*.rs`: tasks that take a first lock, say who they
//! are, and on a signal begin their second wait.

use std::future::Future;
use std::time::Instant;

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
