//! The leaders' audit, read from the checker at the end of a run: stale fenced writes the lock
//! server accepted, and how long each election went without a leader after a fault.
//!
//! Two leaders at once are counted as they happen, by the checker's `ENTER` (a leader enters
//! its election's name as an exclusive hold), and explained or not as two holders are.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::worker::leader_names;

/// One accepted fenced write of a leader: its term, the sequence's ticks before it was sent
/// and after it was accepted, the epoch and whether a failover was under way when it began.
struct Write {
    term: u64,
    start: u64,
    end: u64,
    epoch: u64,
    window: bool,
}

/// Stale fenced writes accepted: a write accepted although it began after a write with a
/// higher term had been accepted on the same election (the sequence orders them: it began at
/// a tick after the other's end). `(unexplained, explained)`: unexplained when such a higher
/// write is of the same epoch and neither began while a failover was under way; explained
/// when every higher one is of an earlier epoch (a data loss or a failover's end came between
/// the two, and the fence's high-water mark may have been lost with the data) or began in a
/// failover's window, or the write itself did.
pub fn stale_writes(conn: &mut redis::Connection) -> redis::RedisResult<(u64, u64)> {
    let (mut unexplained, mut explained) = (0, 0);
    for name in leader_names() {
        let lines = list(conn, &format!("leader_writes:{name}"))?;
        let mut writes: Vec<Write> = Vec::new();
        for line in lines {
            let f: Vec<u64> = line
                .split(' ')
                .take(5)
                .filter_map(|v| v.parse().ok())
                .collect();
            let &[term, start, end, epoch, window] = f.as_slice() else {
                unexplained += 1; // a record the audit cannot read is not a clean run
                continue;
            };
            writes.push(Write {
                term,
                start,
                end,
                epoch,
                window: window == 1,
            });
        }
        let mut by_end: Vec<&Write> = writes.iter().collect();
        by_end.sort_unstable_by_key(|w| w.end);
        let mut by_start: Vec<&Write> = writes.iter().collect();
        by_start.sort_unstable_by_key(|w| w.start);
        // Among the writes accepted before the current one began: the highest term, and the
        // highest of each epoch's writes begun outside a failover's window. The per-epoch one
        // matters on its own: a higher write of an older epoch must not hide a higher write of
        // the current epoch (terms that failed to grow after a data loss).
        let mut done = by_end.iter().peekable();
        let mut highest = 0;
        let mut highest_clean: BTreeMap<u64, u64> = BTreeMap::new();
        for w in by_start {
            while let Some(d) = done.next_if(|d| d.end < w.start) {
                highest = highest.max(d.term);
                if !d.window {
                    let top = highest_clean.entry(d.epoch).or_default();
                    *top = (*top).max(d.term);
                }
            }
            if highest <= w.term {
                continue;
            }
            let same_epoch = highest_clean.get(&w.epoch).copied().unwrap_or(0);
            if same_epoch > w.term && !w.window {
                unexplained += 1;
            } else {
                explained += 1;
            }
        }
    }
    Ok((unexplained, explained))
}

/// A term in office: when its leader entered and left (µs, the checker's clock), who, why.
struct Term {
    entered: u64,
    left: u64,
    worker: u64,
    reason: String,
}

/// A stretch without a leader: when it began (µs), how long (ms), and why the last leader
/// before it left.
struct Vacancy {
    from: u64,
    ms: u64,
    after: String,
}

/// The whole list `key` on the checker.
fn list(conn: &mut redis::Connection, key: &str) -> redis::RedisResult<Vec<String>> {
    redis::cmd("LRANGE").arg(key).arg(0).arg(-1).query(conn)
}

fn numbers(line: &str) -> Vec<u64> {
    line.split(' ').filter_map(|v| v.parse().ok()).collect()
}

/// The time each election went without a leader: hand-overs (the last leader resigned; the
/// next candidate is woken by the unlock message) and, for every other stretch, the fault
/// injected last before it began, by kind: `{ handover: {count, p50, max}, after_fault: {kind:
/// {vacancies, p50, max}} }` (ms). A frozen leader is out of office from its freeze on (its
/// lead expires meanwhile, and it acts again only once it woke); a killed one from its kill.
/// The stretch after the last term of a run (the workers stopping) is not counted.
pub fn without_leader(conn: &mut redis::Connection) -> redis::RedisResult<Value> {
    let freezes: Vec<Vec<u64>> = list(conn, "freezes")?.iter().map(|l| numbers(l)).collect();
    let faults: Vec<(String, u64)> = list(conn, "fault_log")?
        .iter()
        .filter_map(|l| {
            let (kind, rest) = l.split_once(' ')?;
            Some((kind.to_owned(), *numbers(rest).first()?))
        })
        .collect();
    let mut vacancies = Vec::new();
    for name in leader_names() {
        let lines = list(conn, &format!("terms:{name}"))?;
        let mut terms: Vec<Term> = lines
            .iter()
            .filter_map(|l| {
                let mut f = l.split(' ');
                let entered = f.next()?.parse().ok()?;
                let left = f.next()?.parse().ok()?;
                let worker = f.next()?.parse().ok()?;
                let reason = f.next()?.to_owned();
                Some(Term {
                    entered,
                    left,
                    worker,
                    reason,
                })
            })
            .collect();
        for t in &mut terms {
            let frozen = freezes
                .iter()
                .filter(|f| f.len() == 3 && f[0] == t.worker)
                .find(|f| f[1] > t.entered && f[1] < t.left);
            if let Some(f) = frozen {
                t.left = f[1];
                t.reason = "frozen".into();
            }
        }
        terms.sort_unstable_by_key(|t| t.entered);
        let mut covered: Option<(u64, String)> = None;
        for t in terms {
            if let Some((until, why)) = &covered
                && t.entered > *until
            {
                vacancies.push(Vacancy {
                    from: *until,
                    ms: (t.entered - until) / 1000,
                    after: why.clone(),
                });
            }
            if covered.as_ref().is_none_or(|(until, _)| t.left > *until) {
                covered = Some((t.left, t.reason));
            }
        }
    }
    let mut handover = Vec::new();
    let mut by_fault: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for v in vacancies {
        if v.after == "resigned" {
            handover.push(v.ms);
            continue;
        }
        let fault = faults
            .iter()
            .filter(|(_, from)| *from <= v.from)
            .max_by_key(|(_, from)| *from)
            .map_or("none", |(kind, _)| kind.as_str());
        by_fault.entry(fault.to_owned()).or_default().push(v.ms);
    }
    let stats = |mut ms: Vec<u64>| {
        ms.sort_unstable();
        json!({
            "count": ms.len(),
            "p50": ms.get(ms.len() / 2),
            "max": ms.last(),
        })
    };
    Ok(json!({
        "handover_ms": stats(handover),
        "after_fault_ms": by_fault
            .into_iter()
            .map(|(k, ms)| (k, stats(ms)))
            .collect::<BTreeMap<_, _>>(),
    }))
}
