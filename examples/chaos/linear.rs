//! The independent checker: each name's history (`history.rs`) checked against a sequential
//! model of its kind by a linearizability checker lockman's authors did not write
//! (todc-utils' `WGLChecker`, Wing–Gong–Lowe), not by the runner's own bookkeeping
//! (`checker.rs`), which decides which overlaps a fault explains before counting them. Here
//! nothing is excused before it is checked: every violation is counted, then put beside the
//! faults injected around it (`follows`).
//!
//! The model of a name, as its users see it: who holds it (a hold from its grant to the end of
//! its release call), with a reentrant count, a mode (exclusive, read, write, a permit) and the
//! newest token granted. A grant needs the name free for its mode (a permit: fewer than
//! [`SEMAPHORE_PERMITS`] others inside), and a token above every token granted before (the
//! fenced lock; the election's term); a try refused (`busy`), and a timed try or an
//! acquire that timed out, needs a holder in its way at some point of its interval (not for
//! the fair kinds, whose queue may make a waiter wait on a free lock, nor for MultiLock and
//! RedLock, which do not say which member was in the way); a release needs the hold. A hold
//! lost without its holder knowing is still held in the model until its release: a second
//! holder meanwhile is a violation, which is what a pause past the lease or a data loss does.
//! A hold of a worker the runner killed ends at some point between the kill and a lease after
//! it (its key expires by then). Errors and stuck calls are left out (no effect the model can
//! know).
//!
//! A count-down latch has a model of its own ([`LatchSpec`]): its count, which a set, a
//! count-down and a wait must each find as their replies say (see [`check_latch`]).
//!
//! A name's history is cut into windows at quiescent points (no operation in progress, no
//! hold), where the model's state is known (free), so that each window is small for WGL and a
//! violation costs only its window. A failing window is shrunk, hold by hold, to a smallest
//! failing sub-history, which is printed.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};
use todc_utils::linearizability::WGLChecker;
use todc_utils::linearizability::history::{Action, History};
use todc_utils::specifications::Specification;

use crate::SEMAPHORE_PERMITS;

/// A window with more operations is not checked (counted as such): WGL's cost grows with it.
const MOST_OPS: usize = 400;
/// How many failing sub-histories the summary prints.
const SAMPLES: usize = 8;

/// The faults that can cost a hold its lease while its holder goes on: a holder that stands
/// still or is cut off past its lease, the lock data lost, the server's clock past every lease.
/// Only the holds these may have cost are left out when looking for a violation no fault
/// explains; the others (a killed worker's, whose holds end with it, a closed connection, a
/// frozen Redis shorter than a lease, a restart with the data, a RedLock minority) cost no
/// lease, so a violation near them alone is one they do not explain.
const COST_LEASES: [&str; 11] = [
    "stop-holder",
    "process-stall",
    "cut-worker",
    "drop-replies",
    "restart-empty",
    "redlock-majority",
    "clock-server",
    "failover-kill",
    "failover-manual",
    "partition-primary",
    "reshard",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Mode {
    Exclusive,
    Read,
    Permit,
}

#[derive(Clone, Debug)]
enum Call {
    Grant {
        holder: u32,
        mode: Mode,
        token: Option<u64>,
    },
    Busy {
        holder: u32,
        mode: Mode,
    },
    Release {
        holder: u32,
    },
}

impl Call {
    fn holder(&self) -> u32 {
        match self {
            Call::Grant { holder, .. } | Call::Busy { holder, .. } | Call::Release { holder } => {
                *holder
            }
        }
    }
}

/// The model's state: the holds (holder, mode, count), sorted by holder, and the newest token.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    holds: Vec<(u32, Mode, u32)>,
    newest: Option<u64>,
}

struct NameSpec;

impl Specification for NameSpec {
    type State = State;
    type Operation = Call;

    fn init() -> State {
        State {
            holds: Vec::new(),
            newest: None,
        }
    }

    fn apply(call: &Call, state: &State) -> (bool, State) {
        let others = |me: u32| state.holds.iter().filter(move |(h, _, _)| *h != me);
        let mine = |me: u32| state.holds.iter().position(|(h, _, _)| *h == me);
        match call {
            Call::Grant {
                holder,
                mode,
                token,
            } => {
                let free = match mode {
                    Mode::Exclusive => others(*holder).next().is_none(),
                    Mode::Read => others(*holder).all(|(_, m, _)| *m == Mode::Read),
                    Mode::Permit => others(*holder).count() < SEMAPHORE_PERMITS as usize,
                };
                let mut next = state.clone();
                let newer = match (token, state.newest) {
                    (Some(t), Some(n)) => *t > n,
                    _ => true,
                };
                if let Some(t) = token {
                    next.newest = Some(next.newest.map_or(*t, |n| n.max(*t)));
                }
                match mine(*holder) {
                    Some(i) => {
                        next.holds[i].2 += 1;
                        (true, next)
                    }
                    None if free && newer => {
                        next.holds.push((*holder, *mode, 1));
                        next.holds.sort_unstable();
                        (true, next)
                    }
                    None => (false, state.clone()),
                }
            }
            Call::Busy { holder, mode } => {
                let in_the_way = match mode {
                    Mode::Exclusive => others(*holder).next().is_some(),
                    Mode::Read => others(*holder).any(|(_, m, _)| *m != Mode::Read),
                    Mode::Permit => others(*holder).count() >= SEMAPHORE_PERMITS as usize,
                };
                (in_the_way, state.clone())
            }
            Call::Release { holder } => match mine(*holder) {
                Some(i) => {
                    let mut next = state.clone();
                    next.holds[i].2 -= 1;
                    if next.holds[i].2 == 0 {
                        next.holds.remove(i);
                    }
                    (true, next)
                }
                None => (false, state.clone()),
            },
        }
    }
}

/// One operation of a name's history, for the model.
#[derive(Clone, Debug)]
struct Op {
    call: Call,
    worker: u64,
    invoke: u64,
    complete: u64,
    /// Its line, for the printed sub-history.
    text: String,
}

/// A fault injected, as a window of the checker's clock (µs), for `follows`.
pub struct FaultWindow {
    pub fault: String,
    pub from: u64,
    pub to: u64,
    /// The worker it struck (a freeze, a cut, a clock step, a kill, a stall); `None`: the
    /// servers', which strike everyone.
    pub worker: Option<u64>,
}

/// Whether a verdict of [`check`] holds no violation of mutual exclusion, of the token order
/// or of a latch's model that follows no fault, and checked something.
pub fn ok(verdict: &Value) -> bool {
    let unexplained: u64 = ["exclusion", "token_order", "latch_count", "latch_wait"]
        .iter()
        .map(|class| verdict["violations"][class]["none"].as_u64().unwrap_or(0))
        .sum();
    unexplained == 0 && verdict["checked_ops"].as_u64() > Some(0)
}

/// Checks `lines` (the history, with the runner's `kill` and `fault` records) name by name;
/// `lease` (µs): how long a killed worker's hold may outlive it, and how long after a fault a
/// violation still follows it. Returns the summary's `linearizability` object.
pub fn check(lines: &[Value], lease: u64) -> Value {
    let faults: Vec<FaultWindow> = lines
        .iter()
        .filter(|l| l["op"] == "fault")
        .filter_map(|l| {
            Some(FaultWindow {
                fault: l["outcome"].as_str()?.to_owned(),
                from: l["invoke"].as_u64()?,
                to: l["complete"].as_u64()?,
                worker: l["worker"].as_u64().filter(|w| *w > 0),
            })
        })
        .collect();
    let faults = &faults[..];
    let kills: HashMap<u64, u64> = lines
        .iter()
        .filter(|l| l["op"] == "kill")
        .filter_map(|l| Some((l["worker"].as_u64()?, l["invoke"].as_u64()?)))
        .collect();
    let mut by_name: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for line in lines.iter().filter(|l| l["kind"] != "process") {
        if let Some(name) = line["name"].as_str() {
            by_name.entry(name).or_default().push(line);
        }
    }
    let end = lines
        .iter()
        .filter_map(|l| l["complete"].as_u64())
        .max()
        .unwrap_or(0);
    let mut out = Tally::default();
    for (name, lines) in &by_name {
        let family = name.split(':').nth(1).unwrap_or(name).to_owned();
        if lines.iter().all(|l| l["kind"] == "latch") {
            check_latch(name, lines, faults, lease, &mut out);
            continue;
        }
        let ops = ops_of(lines, &kills, lease, end);
        let tally = out.by_family.entry(family.clone()).or_default();
        tally.ops += ops.len() as u64;
        for window in windows(ops) {
            out.windows += 1;
            if window.len() > MOST_OPS {
                out.unchecked_windows += 1;
                out.unchecked_ops += window.len() as u64;
                continue;
            }
            out.checked_ops += window.len() as u64;
            if linearizable(&window) {
                continue;
            }
            // The workers a fault struck around this window: their holds are left out first
            // when shrinking, so that a violation among the others (which no fault explains)
            // is the one found when there is one.
            let lo = window.iter().map(|o| o.invoke).min().unwrap_or(0);
            let hi = window.iter().map(|o| o.complete).max().unwrap_or(0);
            let struck: Vec<u64> = faults
                .iter()
                .filter(|f| f.from <= hi && lo <= f.to + lease + 1_000_000)
                .filter_map(|f| f.worker)
                .collect();
            let shrink = |ops: Vec<Op>| shrink(ops, &struck);
            let without_busy: Vec<Op> = window
                .iter()
                .filter(|o| !matches!(o.call, Call::Busy { .. }))
                .cloned()
                .collect();
            // The holds a fault may have cost their lease: under way when a fault of the
            // servers began, or when one that struck their worker did. When the window still
            // fails without them, the violation is one no fault explains, and that is the
            // sub-history reported.
            let mut spans: HashMap<u32, (u64, u64, u64)> = HashMap::new();
            for o in &without_busy {
                let e = spans
                    .entry(o.call.holder())
                    .or_insert((o.worker, o.invoke, o.complete));
                e.1 = e.1.min(o.invoke);
                e.2 = e.2.max(o.complete);
            }
            let excusable = |h: u32| {
                spans.get(&h).is_some_and(|&(w, from, to)| {
                    faults.iter().any(|f| {
                        COST_LEASES.contains(&f.fault.as_str())
                            && f.worker.is_none_or(|fw| fw == w)
                            && from <= f.to
                            && f.from <= to
                    })
                })
            };
            let unexcused: Vec<Op> = without_busy
                .iter()
                .filter(|o| !excusable(o.call.holder()))
                .cloned()
                .collect();
            let unexplained = !linearizable(&unexcused);
            let (class, failing) = match linearizable(&without_busy) {
                false => {
                    let smallest = match unexplained {
                        true => shrink(unexcused),
                        false => shrink(without_busy),
                    };
                    let untokened: Vec<Op> = smallest.iter().map(without_token).collect();
                    match linearizable(&untokened) {
                        true => ("token_order", smallest),
                        false => ("exclusion", smallest),
                    }
                }
                true => ("busy_without_holder", shrink(window)),
            };
            let lo = failing.iter().map(|o| o.invoke).min().unwrap_or(0);
            let hi = failing.iter().map(|o| o.complete).max().unwrap_or(0);
            // Two holders at once follow a fault that struck one worker only when one of the holds
            // was that worker's and lasted through the fault (it was frozen, cut off, killed
            // or stalled while holding); a busy reply with nobody in the way may come from a
            // hold the history has not (a killed worker's last grant, never recorded): any
            // fault near it.
            let holds: Option<Vec<(u64, u64, u64)>> = (class != "busy_without_holder").then(|| {
                let mut spans: BTreeMap<u32, (u64, u64, u64)> = BTreeMap::new();
                for o in &failing {
                    let e = spans
                        .entry(o.call.holder())
                        .or_insert((o.worker, o.invoke, o.complete));
                    e.1 = e.1.min(o.invoke);
                    e.2 = e.2.max(o.complete);
                }
                spans.into_values().collect()
            });
            // A fault that began after the last grant of the sub-history did not cause it.
            let last_grant = failing
                .iter()
                .filter(|o| matches!(o.call, Call::Grant { .. }))
                .map(|o| o.complete)
                .max()
                .unwrap_or(hi);
            let until = if holds.is_some() { last_grant } else { hi };
            let follows = match unexplained {
                true => "none".to_owned(),
                false => follows(faults, lo, until, lease, holds.as_deref()),
            };
            let tally = out.by_family.entry(family.clone()).or_default();
            *tally
                .violations
                .entry(class)
                .or_default()
                .entry(follows.clone())
                .or_default() += 1;
            *out.violations
                .entry(class)
                .or_default()
                .entry(follows.clone())
                .or_default() += 1;
            if out.samples.len() < SAMPLES {
                out.samples.push(json!({
                    "name": name,
                    "class": class,
                    "follows": follows,
                    "ops": failing.iter().map(|o| format!(
                        "+{}..+{} ms {}",
                        (o.invoke - lo) / 1000,
                        (o.complete - lo) / 1000,
                        o.text
                    )).collect::<Vec<_>>(),
                }));
            }
        }
    }
    json!({
        "checker": "todc-utils WGLChecker (Wing-Gong-Lowe), per name, windows between quiescent points",
        "operations": lines.len(),
        "names": by_name.len(),
        "windows": out.windows,
        "checked_ops": out.checked_ops,
        "unchecked_windows": out.unchecked_windows,
        "unchecked_ops": out.unchecked_ops,
        "violations": out.violations,
        "by_family": out.by_family.iter().map(|(f, t)| (f.clone(), json!({
            "ops": t.ops,
            "violations": t.violations,
        }))).collect::<BTreeMap<_, _>>(),
        "samples": out.samples,
    })
}

#[derive(Default)]
struct Tally {
    windows: u64,
    checked_ops: u64,
    unchecked_windows: u64,
    unchecked_ops: u64,
    /// class → the faults it follows (`none`: no fault near it) → count.
    violations: BTreeMap<&'static str, BTreeMap<String, u64>>,
    by_family: BTreeMap<String, FamilyTally>,
    samples: Vec<Value>,
}

#[derive(Default)]
struct FamilyTally {
    ops: u64,
    violations: BTreeMap<&'static str, BTreeMap<String, u64>>,
}

/// The faults whose window (to a lease and a second past its end) meets `lo..=hi` and, for a
/// fault that struck one worker, with `holds` (worker, from, to), that struck the worker of a
/// hold that was under way when the fault began; joined by `+`, or `none`.
fn follows(
    faults: &[FaultWindow],
    lo: u64,
    hi: u64,
    lease: u64,
    holds: Option<&[(u64, u64, u64)]>,
) -> String {
    let mut names: Vec<&str> = faults
        .iter()
        .filter(|f| f.from <= hi && lo <= f.to + lease + 1_000_000)
        .filter(|f| match (f.worker, holds) {
            (Some(w), Some(holds)) => holds
                .iter()
                .any(|&(hw, from, to)| hw == w && from <= f.to && to >= f.from),
            _ => true,
        })
        .map(|f| f.fault.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    match names.is_empty() {
        true => "none".into(),
        false => names.join("+"),
    }
}

/// The model's operations of one name's lines.
fn ops_of(lines: &[&Value], kills: &HashMap<u64, u64>, lease: u64, end: u64) -> Vec<Op> {
    let mut holders: HashMap<&str, u32> = HashMap::new();
    // Holds granted and not (yet) released: holder → (worker, count, the grant's completion).
    let mut open: HashMap<u32, (u64, u32, u64)> = HashMap::new();
    let mut ops = Vec::new();
    let mut lines: Vec<&Value> = lines.to_vec();
    lines.sort_by_key(|l| l["complete"].as_u64().unwrap_or(0));
    for line in lines {
        let (Some(kind), Some(op), Some(outcome), Some(hold)) = (
            line["kind"].as_str(),
            line["op"].as_str(),
            line["outcome"].as_str(),
            line["hold"].as_str(),
        ) else {
            continue;
        };
        let (Some(invoke), Some(complete), Some(worker)) = (
            line["invoke"].as_u64(),
            line["complete"].as_u64(),
            line["worker"].as_u64(),
        ) else {
            continue;
        };
        let next = holders.len() as u32;
        let holder = *holders.entry(hold).or_insert(next);
        let mode = match kind {
            "read" => Mode::Read,
            "sem" => Mode::Permit,
            _ => Mode::Exclusive,
        };
        // Which kinds' waits tell that someone was in the way.
        let says_busy = !matches!(
            kind,
            "fair" | "nonreentrant_fair" | "multi" | "redlock" | "group"
        );
        let call = match (op, outcome) {
            ("release", _) => match open.get_mut(&holder) {
                Some((_, n, _)) => {
                    *n -= 1;
                    if *n == 0 {
                        open.remove(&holder);
                    }
                    Call::Release { holder }
                }
                None => continue,
            },
            (_, "granted") => {
                open.entry(holder).or_insert((worker, 0, complete)).1 += 1;
                Call::Grant {
                    holder,
                    mode,
                    token: line["token"].as_u64(),
                }
            }
            (_, "busy" | "timed_out") if says_busy => Call::Busy { holder, mode },
            _ => continue,
        };
        ops.push(Op {
            call,
            worker,
            invoke,
            complete: complete.max(invoke),
            text: line.to_string(),
        });
    }
    // Holds with no release: a killed worker's ends between its grant (the worker may have
    // left and released it, and been killed before its record was sent) and a lease and a
    // second after the kill (its key expires by then); any other's (a worker that hung) at
    // the end of the run.
    for (holder, (worker, n, granted)) in open {
        let (invoke, complete) = match kills.get(&worker) {
            Some(&at) => (granted, at.max(granted) + lease + 1_000_000),
            None => (end, end),
        };
        for _ in 0..n {
            ops.push(Op {
                call: Call::Release { holder },
                worker,
                invoke,
                complete,
                text: format!("(release of worker {worker}'s hold: killed or never released)"),
            });
        }
    }
    ops
}

/// The name's operations cut where none is in progress and nothing is held.
fn windows(mut ops: Vec<Op>) -> Vec<Vec<Op>> {
    ops.sort_by_key(|o| o.invoke);
    // Events: (time, 0 call / 1 response, op): calls first at one time, so that operations
    // that touch count as concurrent.
    let mut events: Vec<(u64, u8, usize)> = Vec::with_capacity(ops.len() * 2);
    for (i, o) in ops.iter().enumerate() {
        events.push((o.invoke, 0, i));
        events.push((o.complete, 1, i));
    }
    events.sort_unstable();
    let mut out = Vec::new();
    let mut current = Vec::new();
    let (mut pending, mut held) = (0i64, 0i64);
    for (_, kind, i) in events {
        if kind == 0 {
            pending += 1;
            current.push(i);
            continue;
        }
        pending -= 1;
        match ops[i].call {
            Call::Grant { .. } => held += 1,
            Call::Release { .. } => held = (held - 1).max(0),
            Call::Busy { .. } => {}
        }
        if pending == 0 && held == 0 {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out.into_iter()
        .map(|w| w.into_iter().map(|i| ops[i].clone()).collect())
        .collect()
}

/// Whether WGL finds a linearization of `ops` in the model.
fn linearizable(ops: &[Op]) -> bool {
    wgl::<NameSpec>(ops.iter().map(|o| (o.invoke, o.complete, &o.call)))
}

/// Whether WGL finds a linearization in the model `S` of the operations (invoke, complete,
/// call): each its own process, so that only their intervals order them.
fn wgl<'a, S: Specification>(ops: impl Iterator<Item = (u64, u64, &'a S::Operation)>) -> bool
where
    S::Operation: 'a,
{
    let ops: Vec<_> = ops.collect();
    if ops.is_empty() {
        return true;
    }
    let mut events: Vec<(u64, u8, usize)> = Vec::with_capacity(ops.len() * 2);
    for (i, (invoke, complete, _)) in ops.iter().enumerate() {
        events.push((*invoke, 0, i));
        events.push((*complete, 1, i));
    }
    events.sort_unstable();
    let actions = events
        .into_iter()
        .map(|(_, kind, i)| {
            let call = ops[i].2.clone();
            (
                i,
                match kind {
                    0 => Action::Call(call),
                    _ => Action::Response(call),
                },
            )
        })
        .collect();
    WGLChecker::<S>::is_linearizable(History::from_actions(actions))
}

/// A smallest failing sub-history: whole holds (every operation of one holder) left out while
/// the rest still fails, the holds of the workers in `struck` tried first.
fn shrink(mut ops: Vec<Op>, struck: &[u64]) -> Vec<Op> {
    let mut holders: Vec<(bool, u32)> = ops
        .iter()
        .map(|o| (!struck.contains(&o.worker), o.call.holder()))
        .collect();
    holders.sort_unstable();
    holders.dedup();
    for (_, h) in holders {
        let without: Vec<Op> = ops
            .iter()
            .filter(|o| o.call.holder() != h)
            .cloned()
            .collect();
        if !linearizable(&without) {
            ops = without;
        }
    }
    ops
}

fn without_token(op: &Op) -> Op {
    let mut op = op.clone();
    if let Call::Grant { token, .. } = &mut op.call {
        *token = None;
    }
    op
}

/// The faults that can take a latch's count away (the key lost: a restart without the data, a
/// failover or a resharding that lose writes): a latch violation near none of them follows no
/// fault (`none`), whatever else was injected around it. A latch's key has no TTL, so a clock
/// step on the server does not touch it.
const LOSE_LATCH: [&str; 5] = [
    "restart-empty",
    "failover-kill",
    "failover-manual",
    "partition-primary",
    "reshard",
];

/// A call on a count-down latch, as its user sees it (`CountDownLatch`'s rustdoc and the
/// crate's docs/protocol.md: the count is the key, missing means 0).
#[derive(Clone, Debug)]
enum LatchCall {
    /// `try_set_count(count)`: `Some(true)` set (the latch was open: count 0), `Some(false)`
    /// refused (a count was there); `None` an error: it may have set it or not.
    Set { count: u64, set: Option<bool> },
    /// `count_down()`: `Some(left)`, the count left it returned (the count before it minus 1;
    /// 0 on an open latch, which stays 0: `count_down` returns no count below 0); `None` an
    /// error: it may have counted down or not.
    CountDown { left: Option<i64> },
    /// `wait_for` returned: `true` opened (the count was 0 at some point of the call), `false`
    /// timed out (Redis answered closed: the count was above 0 at some point of the call).
    Await { opened: bool },
}

/// The latch's state: every count it may have, sorted (one count, unless a call that failed
/// may have taken effect or not: then both).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct LatchState(Vec<u64>);

struct LatchSpec;

impl Specification for LatchSpec {
    type State = LatchState;
    type Operation = LatchCall;

    fn init() -> LatchState {
        LatchState(vec![0])
    }

    fn apply(call: &LatchCall, state: &LatchState) -> (bool, LatchState) {
        let counts = state.0.iter().copied();
        let mut next: Vec<u64> = match *call {
            LatchCall::Set {
                count,
                set: Some(true),
            } => counts.filter(|c| *c == 0).map(|_| count).collect(),
            LatchCall::Set {
                set: Some(false), ..
            } => counts.filter(|c| *c > 0).collect(),
            LatchCall::Set { count, set: None } => counts
                .flat_map(|c| [Some(c), (c == 0).then_some(count)])
                .flatten()
                .collect(),
            LatchCall::CountDown { left: Some(left) } => counts
                .filter(|c| (*c as i64 - 1).max(0) == left)
                .map(|c| c.saturating_sub(1))
                .collect(),
            LatchCall::CountDown { left: None } => {
                counts.flat_map(|c| [c, c.saturating_sub(1)]).collect()
            }
            LatchCall::Await { opened } => counts.filter(|c| (*c == 0) == opened).collect(),
        };
        next.sort_unstable();
        next.dedup();
        match next.is_empty() {
            true => (false, state.clone()),
            false => (true, LatchState(next)),
        }
    }
}

/// One call of a latch's history, for its model.
#[derive(Clone, Debug)]
struct LatchOp {
    call: LatchCall,
    invoke: u64,
    complete: u64,
    /// Its line, for the printed sub-history.
    text: String,
}

/// The model's calls of one latch's lines. A call that failed (`error`, `stuck`) may still take
/// effect after it returned: its interval runs to the latch's last record. A wait that failed
/// tells nothing and is left out.
fn latch_ops(lines: &[&Value]) -> Vec<LatchOp> {
    let end = lines
        .iter()
        .filter_map(|l| l["complete"].as_u64())
        .max()
        .unwrap_or(0);
    let mut ops = Vec::new();
    for line in lines {
        let (Some(op), Some(outcome), Some(invoke), Some(complete)) = (
            line["op"].as_str(),
            line["outcome"].as_str(),
            line["invoke"].as_u64(),
            line["complete"].as_u64(),
        ) else {
            continue;
        };
        let failed = matches!(outcome, "error" | "stuck");
        let call = match (op, outcome) {
            ("set_count", _) => {
                let Some(count) = line["count"].as_u64() else {
                    continue;
                };
                let set = match outcome {
                    "set" => Some(true),
                    "busy" => Some(false),
                    _ => None,
                };
                LatchCall::Set { count, set }
            }
            ("count_down", "ok") => match line["left"].as_i64() {
                Some(left) => LatchCall::CountDown { left: Some(left) },
                None => continue,
            },
            ("count_down", _) => LatchCall::CountDown { left: None },
            ("await", "opened") => LatchCall::Await { opened: true },
            ("await", "timed_out") => LatchCall::Await { opened: false },
            _ => continue,
        };
        let complete = match failed {
            true => end,
            false => complete,
        };
        ops.push(LatchOp {
            call,
            invoke,
            complete: complete.max(invoke),
            text: line.to_string(),
        });
    }
    ops
}

fn latch_linearizable(ops: &[LatchOp]) -> bool {
    wgl::<LatchSpec>(ops.iter().map(|o| (o.invoke, o.complete, &o.call)))
}

/// Checks one latch's history: the runner gives every latch round a latch of its own
/// (`chaos:latch:<hold>`: a set, a wait, two count-downs), so its history is one window, which
/// begins quiescent and open (no key). A failing one is classed (`latch_count`: it fails
/// without its waits, so the counts returned or the set's reply contradict each other;
/// `latch_wait`: only a wait's outcome does, an open before the count reached 0 or a time-out
/// while it was 0), shrunk wait by wait (only the waits: leaving out a set or a count-down
/// would change what the others read), and put beside the faults around it: `none` when no
/// fault that can lose the count ([`LOSE_LATCH`]) was near it.
fn check_latch(name: &str, lines: &[&Value], faults: &[FaultWindow], lease: u64, out: &mut Tally) {
    let ops = latch_ops(lines);
    out.by_family.entry("latch".into()).or_default().ops += ops.len() as u64;
    if ops.is_empty() {
        return;
    }
    out.windows += 1;
    if ops.len() > MOST_OPS {
        out.unchecked_windows += 1;
        out.unchecked_ops += ops.len() as u64;
        return;
    }
    out.checked_ops += ops.len() as u64;
    let Some((class, failing)) = latch_violation(ops) else {
        return;
    };
    let lo = failing.iter().map(|o| o.invoke).min().unwrap_or(0);
    let hi = failing.iter().map(|o| o.complete).max().unwrap_or(0);
    let lost = faults.iter().any(|f| {
        LOSE_LATCH.contains(&f.fault.as_str()) && f.from <= hi && lo <= f.to + lease + 1_000_000
    });
    let follows = match lost {
        true => follows(faults, lo, hi, lease, None),
        false => "none".to_owned(),
    };
    for tally in [
        &mut out.by_family.entry("latch".into()).or_default().violations,
        &mut out.violations,
    ] {
        *tally
            .entry(class)
            .or_default()
            .entry(follows.clone())
            .or_default() += 1;
    }
    if out.samples.len() < SAMPLES {
        out.samples.push(json!({
            "name": name,
            "class": class,
            "follows": follows,
            "ops": failing.iter().map(|o| format!(
                "+{}..+{} ms {}",
                (o.invoke - lo) / 1000,
                (o.complete - lo) / 1000,
                o.text
            )).collect::<Vec<_>>(),
        }));
    }
}

/// A latch history's violation: its class and a smallest failing sub-history; `None` when it
/// is linearizable.
fn latch_violation(ops: Vec<LatchOp>) -> Option<(&'static str, Vec<LatchOp>)> {
    if latch_linearizable(&ops) {
        return None;
    }
    let counts: Vec<LatchOp> = ops
        .iter()
        .filter(|o| !matches!(o.call, LatchCall::Await { .. }))
        .cloned()
        .collect();
    if !latch_linearizable(&counts) {
        return Some(("latch_count", counts));
    }
    let mut failing = ops;
    let mut i = 0;
    while i < failing.len() {
        if matches!(failing[i].call, LatchCall::Await { .. }) {
            let mut without = failing.clone();
            without.remove(i);
            if !latch_linearizable(&without) {
                failing = without;
                continue;
            }
        }
        i += 1;
    }
    Some(("latch_wait", failing))
}

/// `chaos check FILE [LEASE_MS]`: checks a history file written by a run (its faults are in
/// it) and prints the verdict as JSON. Exit 0: no violation of exclusion, of the token order
/// or of a latch's model that follows no fault; 1: some; 2: the file could not be read.
pub fn replay(args: &[String]) -> i32 {
    let Some(path) = args.first() else {
        eprintln!("usage: chaos check FILE [LEASE_MS]");
        return 2;
    };
    let lease_ms: u64 = args.get(1).and_then(|l| l.parse().ok()).unwrap_or(2000);
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("chaos check: {path}: {e}");
            return 2;
        }
    };
    let lines: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let verdict = check(&lines, lease_ms * 1000);
    println!(
        "{}",
        serde_json::to_string_pretty(&verdict).unwrap_or_default()
    );
    if ok(&verdict) { 0 } else { 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A latch record as a worker writes it (times in ms here, µs in the line).
    fn line(op: &str, outcome: &str, invoke: u64, complete: u64, extra: Value) -> Value {
        let mut v = json!({
            "kind": "latch", "name": "chaos:latch:1:0:1", "worker": 1, "task": 0,
            "hold": "1:0:1", "op": op, "outcome": outcome,
            "invoke": invoke * 1000, "complete": complete * 1000,
        });
        if let (Value::Object(v), Value::Object(extra)) = (&mut v, extra) {
            v.extend(extra);
        }
        v
    }

    fn set(invoke: u64, complete: u64, outcome: &str) -> Value {
        line("set_count", outcome, invoke, complete, json!({"count": 2}))
    }

    fn down(invoke: u64, complete: u64, left: i64) -> Value {
        line("count_down", "ok", invoke, complete, json!({"left": left}))
    }

    fn wait(invoke: u64, complete: u64, outcome: &str) -> Value {
        line("await", outcome, invoke, complete, json!({}))
    }

    fn fault(name: &str, from: u64, to: u64) -> Value {
        json!({"kind": "process", "name": "", "worker": 0, "task": 0, "hold": "", "op": "fault",
            "outcome": name, "invoke": from * 1000, "complete": to * 1000})
    }

    /// The verdict's latch violations: class → follows → count.
    fn latch_verdict(lines: &[Value]) -> (Value, bool) {
        let verdict = check(lines, 2_000_000);
        (verdict["by_family"]["latch"].clone(), ok(&verdict))
    }

    #[test]
    fn a_correct_round_checks() {
        // The runner's round: set 2, a waiter, two count-downs; the waiter opens after the
        // second.
        let lines = [
            set(0, 1, "set"),
            wait(1, 9, "opened"),
            down(2, 3, 1),
            down(4, 5, 0),
        ];
        let (latch, ok) = latch_verdict(&lines);
        assert_eq!(latch["ops"], 4);
        assert_eq!(latch["violations"], json!({}), "{latch}");
        assert!(ok);
        // A wait that overlaps the second count-down may open at its end.
        let lines = [
            set(0, 1, "set"),
            wait(1, 5, "opened"),
            down(2, 3, 1),
            down(4, 6, 0),
        ];
        assert!(latch_verdict(&lines).1);
        // A wait that times out while the count is above 0; a set refused on a set latch; a
        // count-down of an open latch (0 left, no change).
        let lines = [
            set(0, 1, "set"),
            set(2, 3, "busy"),
            wait(2, 4, "timed_out"),
            down(5, 6, 1),
            down(7, 8, 0),
            down(9, 10, 0),
            wait(11, 12, "opened"),
        ];
        assert!(latch_verdict(&lines).1);
    }

    /// The break "an await returns before the count reaches 0": caught as `latch_wait`, and
    /// shrunk to the calls that show it.
    #[test]
    fn an_early_open_is_caught() {
        let lines = [
            set(0, 1, "set"),
            wait(2, 3, "opened"),
            down(4, 5, 1),
            down(6, 7, 0),
        ];
        let (latch, ok) = latch_verdict(&lines);
        assert_eq!(latch["violations"], json!({"latch_wait": {"none": 1}}));
        // Touching the set, the wait may have opened before it: calls that touch are
        // concurrent, which is why a worker's call begins just after the record before it.
        let touching = [set(0, 1, "set"), wait(1, 3, "opened"), down(4, 5, 1)];
        assert!(latch_verdict(&touching).1);
        assert!(!ok);
        let verdict = check(&lines, 2_000_000);
        assert_eq!(
            verdict["samples"][0]["ops"].as_array().map(Vec::len),
            Some(4)
        );
    }

    /// The break "a count-down decrements twice": the first returns 0 where the model has 1
    /// left, whether or not anyone waits.
    #[test]
    fn a_double_count_down_is_caught() {
        let lines = [
            set(0, 1, "set"),
            wait(1, 5, "opened"),
            down(2, 3, 0),
            down(4, 5, 0),
        ];
        let (latch, ok) = latch_verdict(&lines);
        assert_eq!(latch["violations"], json!({"latch_count": {"none": 1}}));
        assert!(!ok);
        let lines = [set(0, 1, "set"), down(2, 3, 0)];
        assert_eq!(
            latch_verdict(&lines).0["violations"],
            json!({"latch_count": {"none": 1}})
        );
    }

    /// A wait that timed out though the count was 0 all along; a set refused on an open
    /// latch; a set accepted over a count.
    #[test]
    fn other_contradictions_are_caught() {
        let lines = [
            set(0, 1, "set"),
            down(2, 3, 1),
            down(4, 5, 0),
            wait(6, 7, "timed_out"),
        ];
        assert_eq!(
            latch_verdict(&lines).0["violations"],
            json!({"latch_wait": {"none": 1}})
        );
        let lines = [set(0, 1, "busy")];
        assert_eq!(
            latch_verdict(&lines).0["violations"],
            json!({"latch_count": {"none": 1}})
        );
        let lines = [set(0, 1, "set"), set(2, 3, "set")];
        assert_eq!(
            latch_verdict(&lines).0["violations"],
            json!({"latch_count": {"none": 1}})
        );
    }

    /// A count-down that failed may have counted down, then or later: both are kept possible,
    /// so neither its effect nor its absence is a violation.
    #[test]
    fn a_failed_count_down_may_or_may_not_count() {
        let failed = line("count_down", "error", 2, 3, json!({"error": "x"}));
        // It counted down (after the other one): the waiter opened.
        let lines = [
            set(0, 1, "set"),
            failed.clone(),
            down(4, 5, 1),
            wait(6, 20, "opened"),
        ];
        assert!(latch_verdict(&lines).1);
        // It did not: the waiter timed out.
        let lines = [
            set(0, 1, "set"),
            failed,
            down(4, 5, 1),
            wait(6, 20, "timed_out"),
        ];
        assert!(latch_verdict(&lines).1);
        // Without it the second count-down's 1 left would contradict nothing either, but a 0
        // left after it would: a failed call is not a free pass.
        let lines = [
            set(0, 1, "set"),
            down(2, 3, 1),
            line("count_down", "error", 4, 5, json!({})),
            down(6, 7, 1),
        ];
        assert!(!latch_verdict(&lines).1);
    }

    /// A latch that lost its count to a restart without the data opens early: found, and
    /// said to follow the restart; a fault that cannot lose the count explains nothing.
    #[test]
    fn a_violation_follows_only_a_fault_that_loses_the_count() {
        let round = [set(0, 1, "set"), wait(1, 30, "opened"), down(31, 32, 0)];
        let mut lines = round.to_vec();
        lines.push(fault("restart-empty", 10, 12));
        let (latch, ok) = latch_verdict(&lines);
        assert_eq!(
            latch["violations"],
            json!({"latch_count": {"restart-empty": 1}})
        );
        assert!(ok);
        let mut lines = round.to_vec();
        lines.push(fault("kill-holder", 10, 12));
        let (latch, ok) = latch_verdict(&lines);
        assert_eq!(latch["violations"], json!({"latch_count": {"none": 1}}));
        assert!(!ok);
    }
}
