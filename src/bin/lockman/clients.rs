//! `lockman ls` and `lockman top`: the live clients' records (who they are, their long holds,
//! the names they wait on), as a list or as a screen refreshed every second. Also the holder
//! lines `lockman inspect` adds from the same records.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use lockman::{ClientInfo, LockManager};

use crate::json::{Value, json, ms};
use crate::text::clean;
use crate::{Failure, Server};

/// The width `top`'s screen fits in.
const WIDTH: usize = 80;
/// Rows of each table on `top`'s screen.
const ROWS: usize = 10;

pub async fn ls(server: &Server, pattern: Option<&str>, json: bool) -> Result<u8, Failure> {
    let manager = server.connect().await?;
    let clients = read(&manager, pattern).await;
    crate::close(&manager).await;
    let clients = clients?;
    if json {
        println!("{}", crate::json::text(&clients_json(&clients)));
    } else {
        print!("{}", ls_text(&clients));
    }
    Ok(0)
}

pub async fn top(
    server: &Server,
    pattern: Option<&str>,
    once: bool,
    json: bool,
) -> Result<u8, Failure> {
    // A screen needs a terminal: into a pipe or a file (`lockman top | head`, `> file`) the
    // text is one frame, with no escapes, and top ends, as with `--once`. JSON frames are one
    // line each, meant for a pipe, and go on until `q` or SIGINT.
    let once = once || (!json && !std::io::stdout().is_terminal());
    let manager = server.connect().await?;
    let result = async {
        let _raw = if once { None } else { RawMode::enter() };
        // `q` (or Ctrl-C, a byte in raw mode) quits on a terminal; SIGINT does elsewhere.
        let interrupted = crate::interrupted();
        tokio::pin!(interrupted);
        loop {
            let clients = read(&manager, pattern).await?;
            let mut out = std::io::stdout().lock();
            let frame = if json {
                format!("{}\n", crate::json::text(&frame_json(&clients)))
            } else if once {
                frame_text(&clients)
            } else {
                // Home and clear, then the frame; the raw mode keeps output processing, so
                // each newline still returns the carriage.
                format!("\x1b[H\x1b[2J{}", frame_text(&clients))
            };
            let _ = out.write_all(frame.as_bytes());
            let _ = out.flush();
            drop(out);
            if once {
                return Ok(0);
            }
            let quit = tokio::select! {
                quit = tokio::task::spawn_blocking(|| quit_within(Duration::from_secs(1))) => {
                    quit.unwrap_or(true)
                }
                () = &mut interrupted => true,
            };
            if quit {
                return Ok(0);
            }
        }
    }
    .await;
    crate::close(&manager).await;
    result
}

/// The clients, with only the names matching `pattern` (and without clients left with none).
pub async fn read(
    manager: &LockManager,
    pattern: Option<&str>,
) -> Result<Vec<ClientInfo>, Failure> {
    let mut clients = manager.clients().await.map_err(Failure::redis)?;
    if let Some(p) = pattern {
        for c in &mut clients {
            c.holds.retain(|h| glob(p, &h.name));
            c.waits.retain(|w| glob(p, &w.name));
        }
        clients.retain(|c| !c.holds.is_empty() || !c.waits.is_empty());
    }
    Ok(clients)
}

/// `*` any run of characters, `?` any one; everything else itself.
pub fn glob(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// `12.3s`, `4m05s`, `2h07m`.
pub fn short(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{:.1}s", d.as_secs_f64())
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

/// `service@host:pid`, its control characters escaped ([`clean`]) for text output.
pub fn who(c: &ClientInfo) -> String {
    let (service, host) = (clean(&c.service), clean(&c.host));
    match c.pid {
        Some(pid) => format!("{service}@{host}:{pid}"),
        None => format!("{service}@{host}"),
    }
}

/// At most `n` characters of `s` (an ellipsis in the last place when cut).
pub fn fit(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(n.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

fn ls_text(clients: &[ClientInfo]) -> String {
    if clients.is_empty() {
        return "no live lockman clients\n".into();
    }
    let mut out = String::new();
    for c in clients {
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        out += &format!(
            "{}  v{}  up {}  {} long hold{}, waiting on {} name{}\n  client {}\n",
            who(c),
            clean(&c.version),
            c.up.map_or("?".into(), short),
            c.holds_total,
            plural(c.holds_total),
            c.waits_total,
            plural(c.waits_total),
            clean(&c.id),
        );
        for h in &c.holds {
            out += &format!(
                "  holds  {}  {} for {}  as {}\n",
                clean(&h.name),
                kind_text(h),
                short(h.held),
                clean(&h.holder)
            );
        }
        for w in &c.waits {
            out += &format!(
                "  waits  {}  {} waiter{} for {}\n",
                clean(&w.name),
                w.waiters,
                if w.waiters == 1 { "" } else { "s" },
                short(w.waited)
            );
        }
        for d in &c.deadlocks {
            out += &format!("  deadlock  {} ago  {}\n", short(d.ago), clean(&d.cycle));
        }
    }
    out
}

/// A hold's kind as `ls` shows it: a group's with its member count and first members,
/// `group of 1000 (m1, m2, m3, …)`.
fn kind_text(h: &lockman::HeldName) -> String {
    if h.members_total == 0 {
        return clean(&h.kind).into_owned();
    }
    let mut listed: Vec<String> = h.members.iter().map(|m| clean(m).into_owned()).collect();
    if h.members_total > h.members.len() {
        listed.push("…".into());
    }
    format!(
        "{} of {} ({})",
        clean(&h.kind),
        h.members_total,
        listed.join(", ")
    )
}

/// A client's recent deadlocks as a JSON array.
pub fn deadlocks_json(c: &ClientInfo) -> Value {
    let all = c.deadlocks.iter().map(|d| {
        json!({
            "ago_ms": ms(d.ago),
            "cycle": d.cycle,
        })
    });
    Value::Array(all.collect())
}

/// One client as JSON.
pub fn client_json(c: &ClientInfo) -> Value {
    let holds: Vec<Value> = c
        .holds
        .iter()
        .map(|h| {
            let mut hold = json!({
                "name": h.name,
                "kind": h.kind,
                "holder": h.holder,
                "held_ms": ms(h.held),
            });
            if h.members_total > 0 {
                hold["members_total"] = json!(h.members_total);
                hold["members"] = json!(h.members);
            }
            hold
        })
        .collect();
    let waits: Vec<Value> = c
        .waits
        .iter()
        .map(|w| {
            json!({
                "name": w.name,
                "waiters": w.waiters,
                "waited_ms": ms(w.waited),
            })
        })
        .collect();
    json!({
        "id": c.id,
        "service": c.service,
        "host": c.host,
        "pid": c.pid,
        "version": c.version,
        "up_ms": c.up.map(ms),
        "holds_total": c.holds_total,
        "waits_total": c.waits_total,
        "holds": holds,
        "waits": waits,
        "deadlocks": deadlocks_json(c),
    })
}

fn clients_json(clients: &[ClientInfo]) -> Value {
    Value::Array(clients.iter().map(client_json).collect())
}

/// One name's waiters over every client: how many, the longest wait, who holds it (if known).
struct Contended<'a> {
    name: &'a str,
    waiters: u32,
    longest: Duration,
    holder: Option<&'a ClientInfo>,
}

/// The long holds of every client, longest first; the waited names, most waiters first.
fn view(clients: &[ClientInfo]) -> (Vec<(&ClientInfo, &lockman::HeldName)>, Vec<Contended<'_>>) {
    let mut holds: Vec<_> = clients
        .iter()
        .flat_map(|c| c.holds.iter().map(move |h| (c, h)))
        .collect();
    holds.sort_by(|a, b| {
        b.1.held
            .cmp(&a.1.held)
            .then_with(|| a.1.name.cmp(&b.1.name))
    });
    let mut waits: Vec<Contended<'_>> = Vec::new();
    for w in clients.iter().flat_map(|c| &c.waits) {
        match waits.iter_mut().find(|x| x.name == w.name) {
            Some(x) => {
                x.waiters += w.waiters;
                x.longest = x.longest.max(w.waited);
            }
            None => waits.push(Contended {
                name: &w.name,
                waiters: w.waiters,
                longest: w.waited,
                holder: holds
                    .iter()
                    .find(|(_, h)| h.name == w.name)
                    .map(|(c, _)| *c),
            }),
        }
    }
    waits.sort_by(|a, b| {
        (b.waiters, b.longest)
            .cmp(&(a.waiters, a.longest))
            .then_with(|| a.name.cmp(b.name))
    });
    (holds, waits)
}

/// One screen of `top`, at most [`WIDTH`] columns.
fn frame_text(clients: &[ClientInfo]) -> String {
    let (holds, waits) = view(clients);
    let mut out = fit(
        &format!(
            "lockman top: {} clients, {} long holds, {} names waited on   (q quits)",
            clients.len(),
            holds.len(),
            waits.len()
        ),
        WIDTH,
    );
    out += "\n\nHELD LONGEST\n";
    out += &format!("{:>8}  {:<32} {:<6} {}\n", "HELD", "NAME", "KIND", "HOLDER");
    for (c, h) in holds.iter().take(ROWS) {
        out += &format!(
            "{:>8}  {:<32} {:<6} {}\n",
            short(h.held),
            fit(&clean(&h.name), 32),
            fit(&clean(&h.kind), 6),
            fit(&who(c), WIDTH - 50)
        );
    }
    out += "\nMOST WAITERS\n";
    out += &format!(
        "{:>7} {:>8}  {:<32} {}\n",
        "WAITERS", "LONGEST", "NAME", "HELD BY"
    );
    for w in waits.iter().take(ROWS) {
        out += &format!(
            "{:>7} {:>8}  {:<32} {}\n",
            w.waiters,
            short(w.longest),
            fit(&clean(w.name), 32),
            fit(&w.holder.map_or("?".into(), who), WIDTH - 51)
        );
    }
    let deadlocks: Vec<_> = clients
        .iter()
        .flat_map(|c| c.deadlocks.iter().map(move |d| (c, d)))
        .collect();
    if !deadlocks.is_empty() {
        out += "\nDEADLOCKS (last 10 min)\n";
        for (c, d) in deadlocks.iter().take(ROWS) {
            out += &format!(
                "{:>8}  {}\n",
                short(d.ago),
                fit(&format!("{}: {}", who(c), clean(&d.cycle)), WIDTH - 10)
            );
        }
    }
    out
}

/// One frame of `top --json`: the held and waited names, and the clients.
fn frame_json(clients: &[ClientInfo]) -> Value {
    let (holds, waits) = view(clients);
    let held: Vec<Value> = holds
        .iter()
        .map(|(c, h)| {
            json!({
                "name": h.name,
                "kind": h.kind,
                "held_ms": ms(h.held),
                "client": c.id,
                "service": c.service,
            })
        })
        .collect();
    let waited: Vec<Value> = waits
        .iter()
        .map(|w| {
            json!({
                "name": w.name,
                "waiters": w.waiters,
                "longest_ms": ms(w.longest),
                "held_by": w.holder.map(|c| c.id.as_str()),
            })
        })
        .collect();
    json!({
        "held": held,
        "waited": waited,
        "clients": clients_json(clients),
    })
}

/// The terminal without line buffering, echo or signal keys while `top` runs; restored when
/// dropped. `None` when stdin is not a terminal.
struct RawMode {
    saved: libc::termios,
}

impl RawMode {
    fn enter() -> Option<Self> {
        if !std::io::stdin().is_terminal() {
            return None;
        }
        // SAFETY: tcgetattr fills the struct it is given; fd 0 is a terminal (checked above).
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        if unsafe { libc::tcgetattr(0, &mut t) } != 0 {
            return None;
        }
        let saved = t;
        t.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG);
        t.c_cc[libc::VMIN] = 1;
        t.c_cc[libc::VTIME] = 0;
        // SAFETY: a termios read from the same terminal, with flags changed.
        if unsafe { libc::tcsetattr(0, libc::TCSANOW, &t) } != 0 {
            return None;
        }
        Some(Self { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: restores the settings read in `enter`.
        unsafe { libc::tcsetattr(0, libc::TCSANOW, &self.saved) };
    }
}

/// Waits up to `limit` for a key on stdin: true for `q`, `Q` or Ctrl-C (the raw mode turns
/// the signal key into a byte). At end of input it just waits out the time.
fn quit_within(limit: Duration) -> bool {
    let until = std::time::Instant::now() + limit;
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        let mut fds = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(1);
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut fds, 1, ms) };
        if ready <= 0 {
            continue;
        }
        let mut byte = [0u8; 1];
        // SAFETY: reads at most one byte into a one-byte buffer.
        let n = unsafe { libc::read(0, byte.as_mut_ptr().cast(), 1) };
        if n <= 0 {
            std::thread::sleep(left);
            return false;
        }
        if matches!(byte[0], b'q' | b'Q' | 3) {
            return true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_the_shell_does() {
        assert!(glob("orders:*", "orders:42"));
        assert!(glob("*", ""));
        assert!(glob("o?ders:*2", "orders:42"));
        assert!(!glob("orders:*", "order:42"));
        assert!(glob("*:4*", "a:b:42"));
        assert!(!glob("a", "ab"));
    }
}
