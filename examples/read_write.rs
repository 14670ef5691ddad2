//! Read-write lock: readers share, a writer excludes them; when the writer releases, every
//! waiting reader enters at once; a writer may also read (downgrade), a reader cannot write.
//!
//! Run: `cargo run --example read_write` (uses `REDIS_URL`, else 127.0.0.1:6379, else starts a
//! private redis-server for the run).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use lockman::{LockError, LockManager};

#[tokio::main]
async fn main() {
    let (url, _server) = support::example::or_exit(support::example::redis_for_example());
    if let Err(e) = run(&url).await {
        eprintln!("read_write example failed: {e}");
        std::process::exit(1);
    }
}

async fn run(url: &str) -> Result<(), LockError> {
    let manager = LockManager::connect(url).await?;
    let start = Instant::now();
    let at = move || format!("{:>5.0} ms", start.elapsed().as_secs_f64() * 1000.0);

    let editor = manager.read_write_lock("example:doc");
    let w = editor.write().acquire().await?;
    println!("{}  editor writes", at());
    let mut readers = Vec::new();
    for i in 1..=3 {
        let lock = manager.read_write_lock("example:doc").read();
        readers.push(tokio::spawn(async move {
            let g = lock.acquire().await?;
            println!("{}  reader {i} reads", at());
            tokio::time::sleep(Duration::from_millis(100)).await;
            g.release().await
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Downgrade: the editor takes the read side before letting the write side go.
    let r = editor.read().acquire().await?;
    w.release().await?;
    println!(
        "{}  editor downgraded to reading: the readers enter together",
        at()
    );
    for reader in readers {
        reader.await.expect("reader task")?;
    }
    let upgrade = editor
        .write()
        .try_acquire_for(Duration::from_millis(100))
        .await?;
    println!(
        "{}  editor, still reading, tries to write: {}",
        at(),
        if upgrade.is_some() {
            "granted"
        } else {
            "refused (no upgrade)"
        }
    );
    r.release().await?;
    manager.shutdown().await;
    Ok(())
}
