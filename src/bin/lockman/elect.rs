//! `lockman elect`: run a command only while leading an election; `lockman leader`: show who
//! leads.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use clap::Args;
use lockman::{ClientInfo, Election, Leader, Leadership, LockError};

use crate::supervisor::{Ending, Hold, OnEnd, Signals, stop_grace, supervise};
use crate::{Failure, Server, code, duration, json, text};

#[derive(Args, Debug)]
pub struct ElectArgs {
    /// Exit (73) when the lead is lost instead of campaigning again.
    #[arg(long)]
    once: bool,
    /// How long before the lead can expire unrenewed the command gets SIGTERM; it gets
    /// SIGKILL (its whole process group) when the lead's guarantee ends. Default: a tenth of
    /// the watchdog timeout; it must be shorter than half of it.
    #[arg(long, value_name = "DUR", value_parser = duration)]
    stop_grace: Option<Duration>,
    /// Pass lockman's own secrets on to CMD: $LOCKMAN_URL, $LOCKMAN_PASSWORD and
    /// $LOCKMAN_MASTER_PASSWORD are taken out of its environment otherwise ($REDIS_URL and
    /// everything else is passed on).
    #[arg(long)]
    keep_env: bool,
    /// The election name (the key of its fenced lock).
    name: String,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, num_args = 1..)]
    command: Vec<String>,
}

impl ElectArgs {
    /// The name given on the command line.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// How a term of the command ended.
enum Ended {
    /// The command exited by itself (or by a signal lockman passed on): its exit code.
    Exited(u8),
    /// The lead was lost, or about to expire unrenewed: the command was stopped.
    Lost,
}

pub async fn elect(server: &Server, args: ElectArgs) -> Result<u8, Failure> {
    // A lead is renewed by the watchdog: its TTL is the watchdog timeout.
    let grace = stop_grace(args.stop_grace, server.watchdog_timeout, true)?;
    let manager = server.connect().await?;
    let election = manager.election(args.name.as_str());
    let signals = Signals::new()?;
    let outcome = campaigns(&election, &args, grace, signals).await;
    crate::close(&manager).await;
    outcome
}

async fn campaigns(
    election: &Election,
    args: &ElectArgs,
    grace: Duration,
    mut signals: Signals,
) -> Result<u8, Failure> {
    loop {
        let lead = tokio::select! {
            lead = election.campaign() => lead.map_err(Failure::redis)?,
            _ = signals.interrupt.recv() => return Ok(128 + libc::SIGINT as u8),
            _ = signals.terminate.recv() => return Ok(128 + libc::SIGTERM as u8),
        };
        eprintln!("lockman: leading {:?}, term {}", args.name, lead.term());
        let ended = term(args, &lead, grace, &mut signals).await;
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

impl Hold for Leadership {
    async fn ending(&self, grace: Duration) -> Ending {
        Ending::of(
            self.scope_with_margin(grace, std::future::pending::<Infallible>())
                .await,
        )
    }

    async fn lost(&self) {
        Leadership::lost(self).await;
    }

    fn valid_until(&self) -> Option<Instant> {
        Some(Leadership::valid_until(self))
    }
}

/// Runs the command for one term, stopped when the lead ends (see [`supervise`]).
async fn term(
    args: &ElectArgs,
    lead: &Leadership,
    grace: Duration,
    signals: &mut Signals,
) -> Result<Ended, Failure> {
    let mut command = tokio::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("LOCKMAN_ELECTION", &args.name)
        .env("LOCKMAN_TERM", lead.term().to_string());
    crate::strip_secrets(&mut command, args.keep_env);
    let what = format!("the lead of {:?}", args.name);
    let ran = supervise(
        lead,
        &what,
        &mut command,
        &args.command[0],
        OnEnd::Stop { grace },
        signals,
    )
    .await?;
    Ok(if ran.hold_ended {
        Ended::Lost
    } else {
        Ended::Exited(ran.code)
    })
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
        let clients = manager.clients().await.unwrap_or_default();
        let interrupted = crate::interrupted();
        tokio::pin!(interrupted);
        loop {
            let next = tokio::select! {
                next = observer.next() => next,
                () = &mut interrupted => break Ok(0),
            };
            match next {
                Ok(now) => {
                    // A new leader may have started after the records were read.
                    let known = now
                        .as_ref()
                        .is_none_or(|l| clients.iter().any(|c| c.owns(&l.holder)));
                    let fresh;
                    let clients = if known {
                        &clients
                    } else {
                        fresh = manager.clients().await.unwrap_or_default();
                        &fresh
                    };
                    println!("{}", show(name, now.as_ref(), clients, as_json));
                }
                Err(e) => break Err(Failure::redis(e)),
            }
        }
    } else {
        match election.leader().await {
            Ok(now) => {
                let clients = match &now {
                    Some(_) => manager.clients().await.unwrap_or_default(),
                    None => Vec::new(),
                };
                println!("{}", show(name, now.as_ref(), &clients, as_json));
                Ok(if now.is_some() { 0 } else { code::FREE })
            }
            Err(e) => Err(Failure::redis(e)),
        }
    };
    crate::close(&manager).await;
    outcome
}

/// One line: text, or a JSON object; the leader's service (from its client record) when known.
fn show(name: &str, leader: Option<&Leader>, clients: &[ClientInfo], as_json: bool) -> String {
    let client = leader.and_then(|l| clients.iter().find(|c| c.owns(&l.holder)));
    match (leader, as_json) {
        (Some(l), true) => json::text(&json::json!({
            "name": name,
            "leader": l.holder,
            "service": client.map(|c| c.service.as_str()),
            "term": l.term,
        })),
        (None, true) => json::text(&json::json!({
            "name": name,
            "leader": null,
            "service": null,
            "term": null,
        })),
        (Some(l), false) => format!(
            "{}: led by {}, term {}",
            text::clean(name),
            holder_text(&l.holder, client),
            l.term
        ),
        (None, false) => format!("{}: no leader", text::clean(name)),
    }
}

/// `service@host:pid (holder id)` when the holder's client record is known, else the holder id.
pub fn holder_text(holder: &str, client: Option<&ClientInfo>) -> String {
    match client {
        Some(c) => format!("{} ({})", crate::clients::who(c), text::clean(holder)),
        None => text::clean(holder).into_owned(),
    }
}
