//! What lockman logs, kept in memory for the tests that look for a line in it (a warning given
//! once) or for what must never be in it (a password). Two ways: [`global`], the test binary's
//! one global subscriber, for what lockman logs on any thread (its actors run on the runtime's
//! workers); and [`logged`], a subscriber of this thread alone while a future runs, for a
//! current-thread test whose lockman work runs on its own thread.

use std::sync::{Arc, Mutex, OnceLock};

/// Every event of this test binary at `level` and above, on any thread, in one buffer: set as
/// the global subscriber at the first call. A test binary has one global subscriber, so every
/// call gets that buffer, at the level of the first call (each binary asks for one level).
pub fn global(level: tracing::Level) -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let subscriber = subscriber(level, buffer.clone());
        tracing::subscriber::set_global_default(subscriber).expect("one global subscriber");
        buffer
    })
    .clone()
}

/// What lockman logs at WARN and above on this thread while `work` runs (a current-thread test
/// runs `LockManager::start`'s own checks here), as text.
pub async fn logged<T>(work: impl std::future::Future<Output = T>) -> (T, String) {
    let buffer = Arc::new(Mutex::new(Vec::new()));
    let guard = tracing::subscriber::set_default(subscriber(tracing::Level::WARN, buffer.clone()));
    let out = work.await;
    drop(guard);
    let text = String::from_utf8_lossy(&buffer.lock().unwrap()).into_owned();
    (out, text)
}

/// Plain text (no colours) at `level` and above, into `buffer`.
fn subscriber(level: tracing::Level, buffer: Arc<Mutex<Vec<u8>>>) -> impl tracing::Subscriber {
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_writer(move || Capture(buffer.clone()))
        .finish()
}

/// A writer into the shared buffer.
struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
