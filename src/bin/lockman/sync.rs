//! `lockman semaphore` and `lockman latch`, and how `inspect` shows a synchronizer.

use std::time::Duration;

use clap::Subcommand;
use lockman::{LockError, LockManager, SyncInfo};

use crate::json::{Value, json, ms};
use crate::{Failure, Server, code, duration};

/// What `lockman latch NAME` does (nothing: show its count).
#[derive(Subcommand, Debug)]
pub enum LatchOp {
    /// Set the count when the latch is open. Exit 1 if a count was set already.
    Set {
        /// The count, at least 1.
        count: u64,
    },
    /// Count down once; prints the count left.
    CountDown,
    /// Wait until the latch is open. Exit 75 if --timeout passes first.
    Wait {
        /// How long to wait (default: as long as it takes).
        #[arg(long, value_name = "DUR", value_parser = duration)]
        timeout: Option<Duration>,
    },
}

/// `lockman semaphore NAME [--set N] [--add D] [--drain]`: changes first, then shows it.
pub async fn semaphore(
    server: &Server,
    name: &str,
    (set, add, drain): (Option<u32>, Option<i64>, bool),
    json: bool,
) -> Result<u8, Failure> {
    let manager = server.connect().await?;
    let result = async {
        let info = manager
            .describe_synchronizer(name)
            .await
            .map_err(Failure::redis)?;
        refuse_other_types(&manager, &info, "a semaphore").await?;
        let changed =
            change_semaphore(&manager, name, !info.held.is_empty(), (set, add, drain)).await;
        let changed = match changed {
            Ok(changed) => changed,
            Err(e) => return Err(crate::kinds::failure(&manager, name, "a semaphore", e).await),
        };
        let shown = show(&manager, name, json).await?;
        // `--set` that found permits set: nothing else was changed, and the exit code says so.
        Ok(if changed { shown } else { code::FREE })
    }
    .await;
    crate::close(&manager).await;
    result
}

/// `--set`, then `--add`, then `--drain`; false when `--set` found permits set already (and
/// then nothing is changed).
async fn change_semaphore(
    manager: &LockManager,
    name: &str,
    // A name with held permits is a permit semaphore: change it as one (what its adds
    // publish differs).
    permit: bool,
    (set, add, drain): (Option<u32>, Option<i64>, bool),
) -> Result<bool, LockError> {
    let (plain, expiring) = (manager.semaphore(name), manager.permit_semaphore(name));
    if let Some(n) = set {
        let done = if permit {
            expiring.try_set_permits(n).await?
        } else {
            plain.try_set_permits(n).await?
        };
        if !done {
            eprintln!("lockman: {name:?} has permits already; not set");
            return Ok(false);
        }
    }
    if let Some(d) = add {
        if permit {
            expiring.add_permits(d).await?;
        } else {
            plain.add_permits(d).await?;
        }
    }
    if drain {
        let taken = if permit {
            expiring.drain().await?
        } else {
            plain.drain().await?
        };
        eprintln!("lockman: drained {taken} permits");
    }
    Ok(true)
}

/// `lockman latch NAME [set N | count-down | wait]`.
pub async fn latch(
    server: &Server,
    name: &str,
    op: Option<LatchOp>,
    json: bool,
) -> Result<u8, Failure> {
    let began = std::time::Instant::now();
    // A server busy with a script or loading is waited out within `wait`'s timeout (the
    // `Server::start_wait` of `latch wait`), as `exec` waits it out.
    let manager = server.connect().await?;
    let latch = manager.count_down_latch(name);
    let result = async {
        let wrong = async |e| crate::kinds::failure(&manager, name, "a latch", e).await;
        match op {
            None => return show(&manager, name, json).await,
            Some(LatchOp::Set { count }) => {
                let set = match latch.try_set_count(count).await {
                    Ok(set) => set,
                    Err(e) => return Err(wrong(e).await),
                };
                if !set {
                    eprintln!("lockman: {name:?} has a count already; not set");
                    return Ok(code::FREE);
                }
            }
            Some(LatchOp::CountDown) => {
                let left = match latch.count_down().await {
                    Ok(left) => left,
                    Err(e) => return Err(wrong(e).await),
                };
                println!("{left}");
                return Ok(0);
            }
            Some(LatchOp::Wait { timeout: None }) => tokio::select! {
                waited = latch.wait() => if let Err(e) = waited {
                    return Err(wrong(e).await);
                },
                () = crate::interrupted() => return Ok(code::INTERRUPTED),
            },
            Some(LatchOp::Wait { timeout: Some(t) }) => {
                // A start that waited out a passing refusal took that time from the wait.
                let left = t.saturating_sub(began.elapsed());
                let opened = tokio::select! {
                    opened = latch.wait_for(left) => match opened {
                        Ok(opened) => opened,
                        Err(e) => return Err(wrong(e).await),
                    },
                    () = crate::interrupted() => return Ok(code::INTERRUPTED),
                };
                if !opened {
                    return Err(Failure::new(
                        code::NOT_ACQUIRED,
                        format!("latch {name:?} not open within {t:?}"),
                    ));
                }
            }
        }
        Ok(0)
    }
    .await;
    crate::close(&manager).await;
    result
}

/// Refuses a name that holds something else than a counter: a lock (named as such) or
/// another redis type.
async fn refuse_other_types(
    manager: &LockManager,
    info: &SyncInfo,
    wanted: &str,
) -> Result<(), Failure> {
    let Some(kind) = &info.other_type else {
        return Ok(());
    };
    let what = match crate::kinds::what_it_holds(manager, &info.name).await {
        Some(what) => what,
        None => format!("a redis {kind}"),
    };
    Err(Failure::new(
        code::REDIS,
        format!("{:?} holds {what}, not {wanted}", info.name),
    ))
}

/// Prints a synchronizer; exit 0 when it exists, 1 when its key is missing.
async fn show(manager: &LockManager, name: &str, json: bool) -> Result<u8, Failure> {
    let info = manager
        .describe_synchronizer(name)
        .await
        .map_err(Failure::redis)?;
    refuse_other_types(manager, &info, "a semaphore or latch").await?;
    print(&info, json);
    Ok(if info.count.is_some() { 0 } else { code::FREE })
}

/// Prints a synchronizer as text or JSON.
pub fn print(info: &SyncInfo, json: bool) {
    if json {
        println!("{}", crate::json::text(&to_json(info)));
    } else {
        print!("{}", to_text(info));
    }
}

fn to_text(info: &SyncInfo) -> String {
    let mut out = format!("name:    {}\n", info.name);
    match info.count {
        Some(n) => out += &format!("count:   {n} (a semaphore's free permits, a latch's count)\n"),
        None => out += "count:   none (no key: a semaphore never set, or an open latch)\n",
    }
    if let Some(ttl) = info.ttl {
        out += &format!("ttl:     {:.1}s\n", ttl.as_secs_f64());
    }
    if !info.held.is_empty() {
        out += &format!("held:    {} permits\n", info.held.len());
    }
    for p in &info.held {
        let expiry = match p.expires_in {
            None => "no lease".to_owned(),
            Some(d) if d.is_zero() => "expired, not yet reclaimed".to_owned(),
            Some(d) => format!("expires in {:.1}s", d.as_secs_f64()),
        };
        out += &format!(
            "permit:  {} client {}… ({expiry})\n",
            p.id,
            p.client_prefix()
        );
    }
    out
}

fn to_json(info: &SyncInfo) -> Value {
    let held: Vec<Value> = info
        .held
        .iter()
        .map(|p| {
            json!({
                "id": p.id,
                "client": p.client_prefix(),
                "expires_in_ms": p.expires_in.map(ms),
            })
        })
        .collect();
    json!({
        "name": info.name,
        "kind": "synchronizer",
        "count": info.count,
        "ttl_ms": info.ttl.map(ms),
        "held": held,
    })
}
