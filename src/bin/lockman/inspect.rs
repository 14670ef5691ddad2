//! `lockman inspect` and `lockman unlock --force`.

use std::io::{BufRead, IsTerminal, Write};

use std::time::Duration;

use lockman::{ClientInfo, LockError, LockInfo, LockShape};

use crate::json::{Value, json, ms};
use crate::text::clean;
use crate::{Failure, Server, code};

pub async fn inspect(server: &Server, name: &str, json: bool) -> Result<u8, Failure> {
    let manager = server.connect().await?;
    let info = manager.describe(name).await;
    if let Err(LockError::WrongType { .. }) = info {
        // Not a lock's hash: a semaphore's or a latch's counter, perhaps.
        let sync = manager
            .describe_synchronizer(name)
            .await
            .map_err(Failure::redis);
        crate::close(&manager).await;
        let sync = sync?;
        if let Some(kind) = &sync.other_type {
            return Err(Failure::new(
                code::REDIS,
                format!("{name:?} holds a redis {kind}: not a lock, semaphore or latch"),
            ));
        }
        crate::sync::print(&sync, json);
        return Ok(0);
    }
    // Who the holders are, from the client records: none when the user may not read them.
    let clients = match &info {
        Ok(info) if info.is_held() => manager.clients().await.unwrap_or_default(),
        _ => Vec::new(),
    };
    crate::close(&manager).await;
    let info = info.map_err(Failure::redis)?;
    if !looks_like_a_lock(&info) {
        return Err(not_a_lock(name, false));
    }
    // Records name holds as they are in Redis (with any --prefix); inspect shows names without.
    let mut clients = clients;
    if let Ok(config) = server.config() {
        let mapped = config.mapped_name(name);
        for hold in clients.iter_mut().flat_map(|c| c.holds.iter_mut()) {
            if hold.name == mapped {
                hold.name.clone_from(&info.name);
            }
        }
    }
    if json {
        println!("{}", crate::json::text(&to_json(&info, &clients)));
    } else {
        print!("{}", to_text(&info, &clients));
    }
    // A name its lock-delay closes is not free to lockman's clients with a lock-delay.
    Ok(if info.is_held() || info.delay.is_some() {
        0
    } else {
        code::FREE
    })
}

/// Whether a hash read as a lock looks like one: free (no hash), or with a `mode` field or a
/// holder field (`<uuid>:<n>`, a writer's `…:write`), as every lock Redisson or lockman
/// writes has. An application's hash (`user:42`), a client record or a fence hash has none.
fn looks_like_a_lock(info: &LockInfo) -> bool {
    !info.is_held()
        || info.mode.is_some()
        || info.holders.iter().any(|h| {
            h.holder.rsplit_once(':').is_some_and(|(client, n)| {
                n.parse::<u64>().is_ok() && uuid::Uuid::parse_str(client).is_ok()
            })
        })
}

/// `name` holds a hash that is not a lock's.
fn not_a_lock(name: &str, unlock: bool) -> Failure {
    let what = format!(
        "{name:?} is a redis hash with no lock holder field (<uuid>:<n>) and no mode: not a lock"
    );
    if unlock {
        Failure::new(
            code::USAGE,
            format!("{what}; nothing done (--any-hash deletes it all the same)"),
        )
    } else {
        Failure::new(code::REDIS, what)
    }
}

/// `lockman unlock --force`: deletes the lock whoever holds it; a hash that does not look like
/// a lock (see [`looks_like_a_lock`]) only with `any_hash`.
pub async fn unlock(server: &Server, name: &str, yes: bool, any_hash: bool) -> Result<u8, Failure> {
    let manager = server.connect().await?;
    let result = async {
        let info = manager.describe(name).await.map_err(Failure::redis)?;
        if !info.is_held() {
            // Nobody holds it; its lock-delay may still close it to lockman (opened here: an
            // operator's explicit act).
            if let Some(left) = info.delay {
                confirm(yes, || {
                    format!(
                        "open {name:?}, closed by its lock-delay for {:.1}s more?",
                        left.as_secs_f64()
                    )
                })?;
                if let Some(left) = manager
                    .clear_lock_delay(name)
                    .await
                    .map_err(Failure::redis)?
                {
                    println!(
                        "opened {name:?}: deleted its lock-delay ({} left)",
                        secs(left)
                    );
                    return Ok(0);
                }
            }
            println!("{name:?} is not locked");
            return Ok(code::FREE);
        }
        if !any_hash && !looks_like_a_lock(&info) {
            return Err(not_a_lock(name, true));
        }
        if !yes && std::io::stdin().is_terminal() {
            let clients = manager.clients().await.unwrap_or_default();
            let who: Vec<_> = info
                .holders
                .iter()
                .map(|h| {
                    let client = clients.iter().find(|c| c.owns(&h.holder));
                    crate::elect::holder_text(&h.holder, client)
                })
                .collect();
            confirm(false, || {
                format!("force-unlock {name:?}, held by {}?", who.join(", "))
            })?;
        }
        // The handle of the kind the keys show, so that the unlock message goes on the channel
        // its waiters listen to; a read-write lock in the mode it is in.
        let unlocked = match (info.shape, info.mode.as_deref()) {
            (LockShape::ReadWrite, Some("read")) => {
                manager.read_write_lock(name).read().force_unlock().await
            }
            (LockShape::ReadWrite, _) => manager.read_write_lock(name).write().force_unlock().await,
            (LockShape::Fair, _) => manager.fair_lock(name).force_unlock().await,
            _ => manager.lock(name).force_unlock().await,
        }
        .map_err(Failure::redis)?;
        // A force unlock leaves the delay key (as Redisson's would leave any key of lockman's
        // own); for the operator, `--force` opens the name fully: the delay key is deleted now
        // that the hash is gone, and the waiters woken again.
        let opened = match info.delay {
            Some(_) => manager
                .clear_lock_delay(name)
                .await
                .map_err(Failure::redis)?,
            None => None,
        };
        match (unlocked, opened) {
            (true, None) => println!("unlocked {name:?}"),
            (true, Some(left)) => println!(
                "unlocked {name:?} and deleted its lock-delay ({} left)",
                secs(left)
            ),
            (false, Some(left)) => {
                println!(
                    "opened {name:?}: deleted its lock-delay ({} left)",
                    secs(left)
                )
            }
            (false, None) => {
                println!("{name:?} is not locked");
                return Ok(code::FREE);
            }
        }
        Ok(0)
    }
    .await;
    crate::close(&manager).await;
    result
}

/// Asks on the terminal (unless `yes`, or stdin is none) whether to do what `question` says;
/// not confirmed is a usage failure, nothing done.
fn confirm(yes: bool, question: impl FnOnce() -> String) -> Result<(), Failure> {
    if yes || !std::io::stdin().is_terminal() {
        return Ok(());
    }
    eprint!("{} [y/N] ", question());
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err(Failure::new(code::USAGE, "not confirmed; nothing done"))
    }
}

/// A duration as seconds with one decimal: `1.2s`.
fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// The client whose holder id `holder` is, and how long it has held `name` (when its record
/// lists the hold: held long enough to be renewed).
fn holder_of<'c>(
    clients: &'c [ClientInfo],
    name: &str,
    holder: &str,
) -> Option<(&'c ClientInfo, Option<Duration>)> {
    let c = clients.iter().find(|c| c.owns(holder))?;
    let held = c.holds.iter().find(|h| h.name == name).map(|h| h.held);
    Some((c, held))
}

fn to_text(info: &LockInfo, clients: &[ClientInfo]) -> String {
    let mut out = format!(
        "name:    {}\nkind:    {}\n",
        clean(&info.name),
        info.shape.as_str()
    );
    match (info.ttl, info.delay) {
        (Some(ttl), _) if info.is_held() => {
            out += &format!("state:   held, ttl {:.1}s\n", ttl.as_secs_f64())
        }
        (None, _) if info.is_held() => out += "state:   held, no expiry\n",
        (_, Some(delay)) => {
            out += &format!(
                "state:   closed by its lock-delay for {} (no holder)\n",
                secs(delay)
            )
        }
        _ => out += "state:   free\n",
    }
    if let (Some(delay), true) = (info.delay, info.is_held()) {
        out += &format!(
            "delay:   {} (the lock-delay outlives the hold)\n",
            secs(delay)
        );
    }
    if let Some(mode) = &info.mode {
        out += &format!("mode:    {}\n", clean(mode));
    }
    for h in &info.holders {
        let side = if h.write {
            " (write)"
        } else if info.mode.is_some() {
            " (read)"
        } else {
            ""
        };
        out += &format!("holder:  {} ×{}{side}\n", clean(&h.holder), h.count);
        if let Some((c, held)) = holder_of(clients, &info.name, &h.holder) {
            let held = held.map_or(String::new(), |d| {
                format!(", held {}", crate::clients::short(d))
            });
            out += &format!(
                "         {} (v{}){held}\n",
                crate::clients::who(c),
                clean(&c.version)
            );
        }
    }
    for (i, w) in info.queue.iter().enumerate() {
        out += &format!(
            "queued:  {}. {} (its place times out in {:.1}s)\n",
            i + 1,
            clean(&w.holder),
            w.times_out_in.as_secs_f64()
        );
    }
    if let Some(token) = info.token {
        out += &format!("token:   {token}\n");
    }
    for (c, d) in deadlocks_of(clients, &info.name) {
        out += &format!(
            "deadlock: {} ago, found by {}: {}\n",
            crate::clients::short(d.ago),
            crate::clients::who(c),
            clean(&d.cycle)
        );
    }
    out
}

/// The recent cycles of waits (a client's record lists those it found) through `name`.
fn deadlocks_of<'c>(
    clients: &'c [ClientInfo],
    name: &str,
) -> Vec<(&'c ClientInfo, &'c lockman::RecentDeadlock)> {
    let quoted = format!("{name:?}");
    clients
        .iter()
        .flat_map(|c| c.deadlocks.iter().map(move |d| (c, d)))
        .filter(|(_, d)| d.cycle.contains(&quoted))
        .collect()
}

/// The lock as JSON.
fn to_json(info: &LockInfo, clients: &[ClientInfo]) -> Value {
    let holders: Vec<Value> = info
        .holders
        .iter()
        .map(|h| {
            let client = holder_of(clients, &info.name, &h.holder).map(|(c, held)| {
                json!({
                    "id": c.id,
                    "service": c.service,
                    "host": c.host,
                    "pid": c.pid,
                    "held_ms": held.map(ms),
                })
            });
            json!({
                "holder": h.holder,
                "count": h.count,
                "write": h.write,
                "client": client,
            })
        })
        .collect();
    let queue: Vec<Value> = info
        .queue
        .iter()
        .map(|w| {
            json!({
                "holder": w.holder,
                "times_out_in_ms": ms(w.times_out_in),
            })
        })
        .collect();
    let deadlocks: Vec<Value> = deadlocks_of(clients, &info.name)
        .into_iter()
        .map(|(c, d)| {
            json!({
                "ago_ms": ms(d.ago),
                "client": c.id,
                "cycle": d.cycle,
            })
        })
        .collect();
    json!({
        "name": info.name,
        "kind": info.shape.as_str(),
        "held": info.is_held(),
        "ttl_ms": info.ttl.map(ms),
        "mode": info.mode,
        "holders": holders,
        "queue": queue,
        "token": info.token,
        "delay_ms": info.delay.map(ms),
        "deadlocks": deadlocks,
    })
}
