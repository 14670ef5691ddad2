//! What the criterion benches share besides the raw floor: the tokio runtime they measure on,
//! and the median of interleaved batches.
#![allow(dead_code)]

/// A tokio current-thread runtime, the plain-tokio side of every comparison.
pub fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// The runtime `#[tokio::main]` makes: multi-thread, one worker per core. The caller runs in
/// `block_on` on its own thread; what it spawns (a redis connection's task) runs on a worker.
pub fn tokio_multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// The median of batch results (durations or rates).
pub fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v[v.len() / 2]
}

/// How long `iters` runs of `op`, one after another, take.
pub async fn timed<F: std::future::Future<Output = ()>>(
    iters: u64,
    mut op: impl FnMut() -> F,
) -> std::time::Duration {
    let start = std::time::Instant::now();
    for _ in 0..iters {
        op().await;
    }
    start.elapsed()
}

/// One uncontended acquire + release through lockman.
pub async fn lockman_once(lock: &lockman::Lock) {
    let guard = lock.acquire().await.expect("acquire");
    guard.release().await.expect("release");
}
