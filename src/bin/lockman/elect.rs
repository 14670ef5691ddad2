//! `lockman elect`: run a command only while leading an election; `lockman leader`: show who
//! leads.

use std::os::unix::process::ExitStatusExt;

use clap::Args;
use lockman::{Election, Leader, Leadership, LockError};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::exec::{kill, start_child};
use crate::{Failure, Server, code, json};

#[derive(Args, Debug)]
pub struct ElectArgs {
    /// Exit (73) when the lead is lost instead of campaigning again.
    #[arg(long)]
    once: bool,
    /// The election name (the key of its fenced lock).
    name: String,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, num_args = 1..)]
    command: Vec<String>,
}

/// How a term of the command ended.
enum Ended {
    /// The command exited by itself (or by a signal lockman passed on): its exit code.
    Exited(u8),
    /// The lead was lost, or about to expire unrenewed: the command was stopped.
    Lost,
}

pub async fn elect(server: &Server, args: ElectArgs) -> Result<u8, Failure> {
    let manager = server.connect().await?;
    let election = manager.election(args.name.as_str());
    let signals = Signals::new()?;
    let outcome = campaigns(&election, &args, signals).await;
    manager.shutdown().await;
    outcome
}

/// SIGINT and SIGTERM, passed on to the command while it runs, ending the campaign otherwise.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
}

impl Signals {
    fn new() -> Result<Self, Failure> {
        let sig = |kind| signal(kind).map_err(|e| Failure::new(code::REDIS, e.to_string()));
        Ok(Self {
            interrupt: sig(SignalKind::interrupt())?,
            terminate: sig(SignalKind::terminate())?,
        })
    }
}

async fn campaigns(
    election: &Election,
    args: &ElectArgs,
    mut signals: Signals,
) -> Result<u8, Failure> {
    loop {
        let lead = tokio::select! {
            lead = election.campaign() => lead.map_err(Failure::redis)?,
            _ = signals.interrupt.recv() => return Ok(128 + libc::SIGINT as u8),
            _ = signals.terminate.recv() => return Ok(128 + libc::SIGTERM as u8),
        };
        eprintln!("lockman: leading {:?}, term {}", args.name, lead.term());
        let ended = supervise(args, &lead, &mut signals).await;
        let term = lead.term();
        if let Err(e) = lead.resign().await
            && !matches!(e, LockError::NotHeld { .. })
        {
            eprintln!("lockman: resigning {:?}: {e}", args.name);
        }
        match ended? {
            Ended::Exited(code) => return Ok(code),
            Ended::Lost if args.once => return Ok(code::LOST),
            Ended::Lost => {
                eprintln!(
                    "lockman: term {term} of {:?} ended; campaigning again",
                    args.name
                );
            }
        }
    }
}

/// Runs the command for one term: stopped (SIGTERM) once the lead is lost or about to expire
/// unrenewed (`Leadership::scope`), waited for, and reported.
async fn supervise(
    args: &ElectArgs,
    lead: &Leadership,
    signals: &mut Signals,
) -> Result<Ended, Failure> {
    let mut command = tokio::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("LOCKMAN_ELECTION", &args.name)
        .env("LOCKMAN_TERM", lead.term().to_string());
    let (mut child, pid) = start_child(&mut command, &args.command[0])?;
    // The child's pid stays ours until `wait` reaps it, which ends the loop below.
    let send = |sig: i32| {
        if let Some(pid) = pid {
            kill(pid, sig);
        }
    };
    let leading = lead.scope(std::future::pending::<()>());
    tokio::pin!(leading);
    let mut lost = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = signals.interrupt.recv() => send(libc::SIGINT),
            _ = signals.terminate.recv() => send(libc::SIGTERM),
            res = &mut leading, if !lost => {
                lost = true;
                let why = match res {
                    Err(LockError::HoldExpiring { .. }) => "about to expire unrenewed",
                    _ => "lost",
                };
                eprintln!("lockman: the lead of {:?} is {why}; stopping the command", args.name);
                send(libc::SIGTERM);
            }
        }
    };
    let status = status.map_err(|e| Failure::new(code::CANNOT_RUN, e.to_string()))?;
    if lost {
        return Ok(Ended::Lost);
    }
    Ok(Ended::Exited(match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(255),
        (None, None) => 1,
    }))
}

/// `lockman leader NAME [--watch] [--json]`: the leader and its term, once or at every change.
pub async fn leader(
    server: &Server,
    name: &str,
    watch: bool,
    as_json: bool,
) -> Result<u8, Failure> {
    let manager = server.connect().await?;
    let election = manager.election(name);
    let outcome = if watch {
        let mut observer = election.observe();
        loop {
            match observer.next().await {
                Ok(now) => println!("{}", show(name, now.as_ref(), as_json)),
                Err(e) => break Err(Failure::redis(e)),
            }
        }
    } else {
        match election.leader().await {
            Ok(now) => {
                println!("{}", show(name, now.as_ref(), as_json));
                Ok(if now.is_some() { 0 } else { code::FREE })
            }
            Err(e) => Err(Failure::redis(e)),
        }
    };
    manager.shutdown().await;
    outcome
}

/// One line: text, or a JSON object.
fn show(name: &str, leader: Option<&Leader>, as_json: bool) -> String {
    match (leader, as_json) {
        (Some(l), true) => format!(
            "{{\"name\":\"{}\",\"leader\":\"{}\",\"term\":{}}}",
            json::escape(name),
            json::escape(&l.holder),
            l.term
        ),
        (None, true) => format!(
            "{{\"name\":\"{}\",\"leader\":null,\"term\":null}}",
            json::escape(name)
        ),
        (Some(l), false) => format!("{name}: led by {}, term {}", l.holder, l.term),
        (None, false) => format!("{name}: no leader"),
    }
}
