//! Two processes take two locks in opposite orders and deadlock: each holds one and waits for
//! the other. lockman follows the waits through Redis (each process publishes its waits that
//! last a second, with what their owners hold), finds the cycle, and the youngest wait fails
//! with `LockError::Deadlock`, naming it; the other process goes on.
//!
//! Run: `cargo run --example deadlock` (uses `REDIS_URL`, else 127.0.0.1:6379, else starts a
//! private redis-server for the run). The example runs itself a second time as the other
//! process ("west"); the first is "east".

#[path = "../tests/support/mod.rs"]
mod support;

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockManager};

const ALICE: &str = "deadlock-example:accounts:alice";
const BOB: &str = "deadlock-example:accounts:bob";

#[tokio::main]
async fn main() {
    let result = match std::env::var("DEADLOCK_EXAMPLE_URL") {
        Ok(url) => west(&url).await,
        Err(_) => {
            let (url, _server) = support::example::or_exit(support::example::redis_for_example());
            east(&url).await
        }
    };
    if let Err(e) = result {
        eprintln!("deadlock example failed: {e}");
        std::process::exit(1);
    }
}

fn say(who: &str, started: Instant, what: &str) {
    println!(
        "{:>6.0} ms  {who:<5} {what}",
        started.elapsed().as_secs_f64() * 1000.0
    );
}

/// The first process: holds alice, starts west (which holds bob), then waits for bob. Both
/// locks are taken by this one future, the owner of the hold and of the wait.
async fn east(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let manager = LockManager::start(Config::new(url).client_name("east")).await?;
    let alice = manager.lock(ALICE).acquire().await?;
    say("east", started, "holds alice");
    let me = std::env::current_exe()?;
    let mut west = Command::new(me)
        .env("DEADLOCK_EXAMPLE_URL", url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    // West's lines, printed as they come; the first that says it holds bob is passed on.
    let (holds_bob, mut west_holds_bob) = tokio::sync::mpsc::unbounded_channel();
    let stdout = west.stdout.take().ok_or("no stdout")?;
    let printer = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            println!("{line}");
            if line.ends_with("holds bob") {
                let _ = holds_bob.send(());
            }
        }
    });
    let _ = west_holds_bob.recv().await;
    // West is told to ask for alice a moment after east has begun to wait for bob: its wait
    // closes the cycle, and is the youngest.
    let mut stdin = west.stdin.take().ok_or("no stdin")?;
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let _ = writeln!(stdin, "go");
    });
    say("east", started, "waits for bob");
    let bob = manager.lock(BOB).acquire().await?;
    say("east", started, "holds bob too: west gave way");
    let _ = west.wait();
    let _ = printer.join();
    drop((alice, bob));
    manager.shutdown().await;
    Ok(())
}

/// The second process: holds bob, and when told, waits for alice.
async fn west(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let manager = LockManager::start(Config::new(url).client_name("west")).await?;
    let bob = manager.lock(BOB).acquire().await?;
    say("west", started, "holds bob");
    let mut go = String::new();
    let _ = std::io::stdin().read_line(&mut go);
    say("west", started, "waits for alice");
    match manager.lock(ALICE).acquire().await {
        Err(LockError::Deadlock { cycle }) => {
            say(
                "west",
                started,
                "told: a deadlock, and this wait was the youngest:",
            );
            for step in &cycle.steps {
                println!(
                    "             {} of {} (client {}) waits for {} {:?}",
                    step.owner, step.service, step.client, step.kind, step.name
                );
            }
            say("west", started, "lets bob go");
        }
        Ok(_) => say("west", started, "got alice (no deadlock?)"),
        Err(e) => return Err(e.into()),
    }
    drop(bob);
    manager.shutdown().await;
    Ok(())
}
