//! The lost-update workload's count (Jepsen's lock tests do the same): inside each hold of an
//! exclusive kind a worker read a counter on the checker, waited a random moment and wrote it
//! plus one (`worker.rs`, `lost_update`); a fenced hold also did so through the fenced
//! register, with its token. At the end each counter is compared with the writes made: when
//! two holders overlapped, one's write overwrote the other's, and the counter is short by one.
//! The count trusts no clock and no checker.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// Per family of names (writes, lost), and the totals (writes, lost).
type Lost = (BTreeMap<String, (u64, u64)>, u64, u64);

/// The updates lost, plain and fenced, by family of names. Ok: no fenced update lost, and the
/// checker answered.
pub fn count(conn: &mut redis::Connection) -> (Value, bool) {
    let plain = lost(conn, "cwrites", |name| format!("counter:{name}"), false);
    let fenced = lost(
        conn,
        "fcounter_writes",
        |name| format!("fcounter:{name}"),
        true,
    );
    let refused: Option<u64> = redis::cmd("HGET")
        .arg("counts")
        .arg("counter:fenced:refused")
        .query(conn)
        .ok()
        .flatten();
    let ok = matches!(&fenced, Some((_, _, 0)));
    let side = |t: Option<Lost>| match t {
        Some((by_family, writes, lost)) => json!({
            "writes": writes,
            "lost": lost,
            "by_family": by_family
                .into_iter()
                .map(|(f, (w, l))| (f, json!({ "writes": w, "lost": l })))
                .collect::<BTreeMap<_, _>>(),
        }),
        None => json!("the checker failed"),
    };
    (
        json!({
            "plain": side(plain),
            "fenced": side(fenced),
            "fenced_refused": refused.unwrap_or(0),
        }),
        ok,
    )
}

/// Per family (writes, lost), and the totals, from the writes per name in `writes` and each
/// name's counter.
fn lost(
    conn: &mut redis::Connection,
    writes: &str,
    key: impl Fn(&str) -> String,
    hash: bool,
) -> Option<Lost> {
    let per_name: BTreeMap<String, u64> = redis::cmd("HGETALL").arg(writes).query(conn).ok()?;
    let mut by_family: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let (mut all, mut all_lost) = (0, 0);
    for (name, n) in per_name {
        let value: Option<u64> = match hash {
            true => redis::cmd("HGET")
                .arg(key(&name))
                .arg("value")
                .query(conn)
                .ok()?,
            false => redis::cmd("GET").arg(key(&name)).query(conn).ok()?,
        };
        let lost = n.saturating_sub(value.unwrap_or(0));
        let family = name.split(':').nth(1).unwrap_or(&name).to_owned();
        let e = by_family.entry(family).or_default();
        e.0 += n;
        e.1 += lost;
        all += n;
        all_lost += lost;
    }
    Some((by_family, all, all_lost))
}
