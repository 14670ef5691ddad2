//! The fair heads' sampler: "a free fair lock with a live head not served".
//!
//! lockman's fair places are short (`Config::fair_lock_place_timeout`, `K`, 5 s by default) and
//! refreshed by their owners every `K/3`; the refresh's reply names the head of a free lock,
//! which its actor then tries, and a release publishes to the head. So the head of a free fair
//! lock whose acquire is still in progress (a *live* head) is served within about `K/3` and a
//! round trip, however it missed its message. A dead head (its process killed, its call
//! returned with its leave lost) is the other check's business: its place expires in about
//! `2K`.
//!
//! A thread of the runner's samples, every [`SAMPLE_EVERY`], each fair name, in three reads:
//! 1. the checker: the fair acquires in progress on each name (`waiting:<name>`, kept by the
//!    workers around each call: holder id → `worker|attempt`, without the workers the runner
//!    killed) and how many holds entered each name (`entries`);
//! 2. the lock server (the primary a sentinel names, the cluster node that owns the name's
//!    slot), from the runner's own connection, one script per name, atomic there: whether the
//!    lock hash exists, the queue's head and length;
//! 3. the checker again, as in 1.
//!
//! The head is live at the instant of read 2 when the same attempt of it (same holder, same
//! attempt tick) is in progress at reads 1 and 3: an attempt's record spans its whole call, so
//! it was in progress in between. A *streak* is a run of samples that saw the lock free with
//! the same live attempt at its head and no entry to the name (1 and 3 agree, and they agree
//! with the streak's first sample: nobody got in meanwhile), no sample failing in between and
//! none more than [`MAX_GAP`] after the last. Its length is counted from the latest instant of
//! its first lock read to the earliest instant of its last: the lock was free with that live
//! head at both, and only that head can take a fair lock while it is the head, so nobody took
//! it in between either (an acquisition would have entered).
//!
//! A streak longer than the bound, `K/3 + 2 s` (3.7 s by default: the refresh period, a round
//! trip, and on a loaded 2-core machine a wide margin for the actor's and the worker's
//! scheduling and reconnections), is one "live head not served". It is *explained* when a
//! fault window (the runner's injection of a fault that reaches the locks or the workers, every
//! fault but those of RedLock's own servers, from its start to the deployment whole again)
//! overlaps it and it never went on for longer than the bound after the last such window
//! ended; otherwise it is *unexplained*, and the run fails. A fault may stall everything: a
//! failover takes the keys away, a stalled server or killed connections make every actor retry;
//! the head must be served within the bound once it is over. A fault done to one worker
//! (`stop-holder`, `kill-holder`) explains only that worker's heads: a frozen worker's actors
//! serve nobody, but another worker's head is served whatever happens to it (a hold of the
//! frozen or killed worker expires without a message, and the head's refresh finds the lock
//! free within `K/3`; the streak only begins once the lock is free), and a killed worker's
//! acquires are not live.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redis::FromRedisValue;
use serde_json::{Value, json};

use crate::checker;

/// How often each fair name is sampled (the three reads take a few ms more).
pub const SAMPLE_EVERY: Duration = Duration::from_millis(150);
/// A streak ends at a gap longer than this between two samples (a loaded machine, a lock server
/// slow to answer): what happened in between was not seen.
pub const MAX_GAP: Duration = Duration::from_secs(1);
/// The margin of the bound over the refresh period `K/3`.
pub const MARGIN: Duration = Duration::from_secs(2);
/// How long the sampler waits for a reply.
const PATIENCE: Duration = Duration::from_millis(500);

/// The fault windows: each fault the runner tried that reaches the lock servers or the workers
/// (not RedLock's own servers'), from the start of its injection until the deployment was whole
/// again (a failed injection's too, until it was settled).
#[derive(Default)]
pub struct Windows(Mutex<Vec<Window>>);

struct Window {
    start: Instant,
    end: Option<Instant>,
    fault: &'static str,
    /// A fault done to one worker (`kill-holder`, `stop-holder`) explains only that worker's
    /// heads: another worker's actor serves its head whatever happens to this one.
    worker: Option<u64>,
}

impl Windows {
    /// A window opens for `fault`; returns its index for [`Windows::close`].
    pub fn open(&self, fault: &'static str) -> usize {
        let mut w = self.0.lock().unwrap_or_else(|p| p.into_inner());
        w.push(Window {
            start: Instant::now(),
            end: None,
            fault,
            worker: None,
        });
        w.len() - 1
    }

    /// The fault of window `i` is done to `worker` alone.
    pub fn scope(&self, i: usize, worker: u64) {
        let mut w = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(window) = w.get_mut(i) {
            window.worker = Some(worker);
        }
    }

    pub fn close(&self, i: usize) {
        let mut w = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(window) = w.get_mut(i) {
            window.end = Some(Instant::now());
        }
    }

    /// Over `[from, to]`, for a head of `worker`: when the time after the last fault window
    /// that explains its stall ended began (`None`: such a window is open at `to`), and the
    /// first fault whose window overlaps it.
    fn quiet_since(
        &self,
        from: Instant,
        to: Instant,
        worker: &str,
    ) -> (Option<Instant>, Option<&'static str>) {
        let w = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut quiet = Some(from);
        let mut fault = None;
        for window in w.iter() {
            let (start, end, name) = (window.start, window.end, window.fault);
            if start > to || end.is_some_and(|e| e < from) {
                continue;
            }
            if window.worker.is_some_and(|id| id.to_string() != worker) {
                continue;
            }
            fault.get_or_insert(name);
            match end {
                Some(e) if e < to => quiet = quiet.map(|q| q.max(e)),
                _ => quiet = None,
            }
        }
        (quiet, fault)
    }
}

/// Where the sampler finds each fair name's keys.
pub enum Locator {
    /// One server, at this URL.
    Single(String),
    /// A Sentinel group: the primary the sentinel at `sentinel` names, reached with `password`.
    Sentinel {
        sentinel: String,
        master: String,
        password: String,
    },
    /// A Redis Cluster's nodes, by port: a name is read on the node that owns it (a MOVED reply
    /// says which).
    Cluster(Vec<u16>),
}

/// What the sampler counted.
#[derive(Default)]
pub struct Tally {
    /// Name samples read (each name in each round whose three reads answered).
    samples: u64,
    /// Name samples that failed (a server away, a redirection, the checker slow).
    errors: u64,
    /// Samples whose queue head was a live waiter.
    live_head: u64,
    /// Samples with the lock free and a live head.
    free_live_head: u64,
    explained: u64,
    explained_by: BTreeMap<&'static str, u64>,
    unexplained: u64,
    longest: Duration,
    longest_outside_faults: Duration,
    unexplained_sample: Vec<String>,
}

struct Streak {
    head: String,
    attempt: String,
    entries: u64,
    /// The latest instant of its first lock read.
    first: Instant,
    /// The earliest and latest instants of its last lock read.
    last: Instant,
    last_end: Instant,
    queued: u64,
    /// Longer than the bound, in all; after the last fault window.
    over: bool,
    over_outside: Option<Duration>,
    fault: Option<&'static str>,
}

impl Streak {
    /// The head's worker (its attempt is `worker|tick`).
    fn worker(&self) -> &str {
        self.attempt.split('|').next().unwrap_or_default()
    }
}

/// The sampler's thread, until [`Heads::stop`].
pub struct Heads {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Tally>>,
    bound: Duration,
    place: Duration,
}

struct Sampler {
    locator: Locator,
    checker: redis::Client,
    checker_conn: Option<redis::Connection>,
    conns: HashMap<u16, redis::Connection>,
    /// Per name, the cluster node last found to own it.
    owner: HashMap<String, u16>,
    names: Vec<String>,
    windows: Arc<Windows>,
    bound: Duration,
    streaks: HashMap<String, Streak>,
    tally: Tally,
    /// A Sentinel group's primary, as the sentinel named it at the round's start.
    primary: Option<u16>,
}

/// Reads, atomically, whether the lock hash exists, the queue's head and its length.
/// KEYS: the hash, the queue.
static READ: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        "return {redis.call('exists', KEYS[1]), redis.call('lindex', KEYS[2], 0) or '', \
         redis.call('llen', KEYS[2])}",
    )
});

impl Heads {
    /// Samples `names` where `locator` finds them, judged against `windows`, with the fair
    /// place timeout `place` (the workers' `K`).
    pub fn start(
        locator: Locator,
        checker: redis::Client,
        names: Vec<String>,
        windows: Arc<Windows>,
        place: Duration,
    ) -> Self {
        let bound = place / 3 + MARGIN;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let mut sampler = Sampler {
            locator,
            checker,
            checker_conn: None,
            conns: HashMap::new(),
            owner: HashMap::new(),
            names,
            windows,
            bound,
            streaks: HashMap::new(),
            tally: Tally::default(),
            primary: None,
        };
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                sampler.round();
                std::thread::sleep(SAMPLE_EVERY);
            }
            sampler.end_all();
            sampler.tally
        });
        Self {
            stop,
            thread: Some(thread),
            bound,
            place,
        }
    }

    /// Stops sampling; the summary's `fair_heads`, and the unexplained count.
    pub fn stop(mut self) -> (Value, u64) {
        self.stop.store(true, Ordering::SeqCst);
        let t = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        let ms = |d: Duration| d.as_millis() as u64;
        let value = json!({
            "place_timeout_ms": ms(self.place),
            "refresh_ms": ms(self.place / 3),
            "bound_ms": ms(self.bound),
            "sample_every_ms": ms(SAMPLE_EVERY),
            "samples": t.samples,
            "sample_errors": t.errors,
            "samples_live_head": t.live_head,
            "samples_free_with_live_head": t.free_live_head,
            "longest_free_with_live_head_ms": ms(t.longest),
            "longest_outside_faults_ms": ms(t.longest_outside_faults),
            "not_served_explained": t.explained,
            "not_served_explained_by": t.explained_by,
            "not_served_unexplained": t.unexplained,
            "unexplained_sample": t.unexplained_sample,
        });
        (value, t.unexplained)
    }
}

impl Sampler {
    fn round(&mut self) {
        if let Locator::Sentinel {
            sentinel, master, ..
        } = &self.locator
        {
            self.primary = redis::Client::open(sentinel.as_str())
                .and_then(|c| c.get_connection_with_timeout(PATIENCE))
                .and_then(|mut c| {
                    c.set_read_timeout(Some(PATIENCE))?;
                    redis::cmd("SENTINEL")
                        .arg("GET-MASTER-ADDR-BY-NAME")
                        .arg(master)
                        .query::<(String, u16)>(&mut c)
                })
                .ok()
                .map(|(_, port)| port);
        }
        let Some(before) = self.live() else {
            self.tally.errors += self.names.len() as u64;
            self.end_all();
            return;
        };
        let mut read = Vec::new();
        for name in self.names.clone() {
            let a = Instant::now();
            let got = self.read(&name);
            read.push((a, Instant::now(), got));
        }
        let Some(after) = self.live() else {
            self.tally.errors += self.names.len() as u64;
            self.end_all();
            return;
        };
        for (i, name) in self.names.clone().into_iter().enumerate() {
            let (a, b, got) = &read[i];
            let Some((held, head, queued)) = got else {
                self.tally.errors += 1;
                if let Some(s) = self.streaks.remove(&name) {
                    self.end(&name, s);
                }
                continue;
            };
            self.tally.samples += 1;
            let (entries, live1) = &before[i];
            let (entries2, live2) = &after[i];
            let attempt = live1
                .get(head)
                .filter(|a1| live2.get(head) == Some(*a1))
                .cloned();
            if attempt.is_some() {
                self.tally.live_head += 1;
            }
            let (Some(attempt), false, true) = (attempt, *held, entries == entries2) else {
                if let Some(s) = self.streaks.remove(&name) {
                    self.end(&name, s);
                }
                continue;
            };
            self.tally.free_live_head += 1;
            let same = self.streaks.get(&name).is_some_and(|s| {
                s.head == *head
                    && s.attempt == attempt
                    && s.entries == *entries
                    && a.saturating_duration_since(s.last_end) <= MAX_GAP
            });
            if !same {
                if let Some(s) = self.streaks.remove(&name) {
                    self.end(&name, s);
                }
                self.streaks.insert(
                    name.clone(),
                    Streak {
                        head: head.clone(),
                        attempt,
                        entries: *entries,
                        first: *b,
                        last: *a,
                        last_end: *b,
                        queued: *queued,
                        over: false,
                        over_outside: None,
                        fault: None,
                    },
                );
                continue;
            }
            let bound = self.bound;
            let windows = self.windows.clone();
            if let Some(s) = self.streaks.get_mut(&name) {
                s.last = *a;
                s.last_end = *b;
                s.queued = *queued;
                let long = s.last.saturating_duration_since(s.first);
                if long > bound {
                    s.over = true;
                    let (quiet, fault) = windows.quiet_since(s.first, s.last, s.worker());
                    if s.fault.is_none() {
                        s.fault = fault;
                    }
                    let outside = quiet.map(|q| s.last.saturating_duration_since(q));
                    if let Some(outside) = outside.filter(|o| *o > bound) {
                        s.over_outside = Some(outside);
                    }
                }
            }
        }
    }

    /// Every streak ends: a sample failed for all of them.
    fn end_all(&mut self) {
        for (name, streak) in std::mem::take(&mut self.streaks) {
            self.end(&name, streak);
        }
    }

    /// A streak ended (or the run did): counted when it went on for longer than the bound.
    fn end(&mut self, name: &str, s: Streak) {
        let long = s.last.saturating_duration_since(s.first);
        self.tally.longest = self.tally.longest.max(long);
        let (quiet, _) = self.windows.quiet_since(s.first, s.last, s.worker());
        if let Some(q) = quiet {
            let outside = s.last.saturating_duration_since(q);
            self.tally.longest_outside_faults = self.tally.longest_outside_faults.max(outside);
        }
        if !s.over {
            return;
        }
        match s.over_outside {
            Some(outside) => {
                self.tally.unexplained += 1;
                if self.tally.unexplained_sample.len() < 20 {
                    self.tally.unexplained_sample.push(format!(
                        "{name}: free for {} ms ({} ms after the last fault) with the live \
                         head {} (worker|attempt {}), {} queued",
                        long.as_millis(),
                        outside.as_millis(),
                        s.head,
                        s.attempt,
                        s.queued
                    ));
                }
            }
            None => {
                self.tally.explained += 1;
                *self
                    .tally
                    .explained_by
                    .entry(s.fault.unwrap_or("unknown"))
                    .or_default() += 1;
            }
        }
    }

    /// Per name: holds entered, and holder → `worker|attempt` of its acquires in progress.
    #[allow(clippy::type_complexity)]
    fn live(&mut self) -> Option<Vec<(u64, HashMap<String, String>)>> {
        if self.checker_conn.is_none() {
            let conn = self.checker.get_connection_with_timeout(PATIENCE).ok()?;
            conn.set_read_timeout(Some(PATIENCE)).ok()?;
            self.checker_conn = Some(conn);
        }
        let conn = self.checker_conn.as_mut()?;
        let mut invoke = checker::LIVE_SCRIPT.prepare_invoke();
        for name in &self.names {
            invoke.arg(name);
        }
        let rows: Vec<Vec<redis::Value>> = match invoke.invoke(conn) {
            Ok(rows) => rows,
            Err(_) => {
                self.checker_conn = None;
                return None;
            }
        };
        let text = |v: &redis::Value| String::from_redis_value_ref(v).ok();
        let mut out = Vec::new();
        for row in rows {
            let entries = row
                .first()
                .and_then(|v| u64::from_redis_value_ref(v).ok())?;
            let mut live = HashMap::new();
            for pair in row[1..].chunks(2) {
                if let [holder, attempt] = pair {
                    live.insert(text(holder)?, text(attempt)?);
                }
            }
            out.push((entries, live));
        }
        (out.len() == self.names.len()).then_some(out)
    }

    /// `(held, head, queued)` of `name`, read atomically on the server that has it.
    fn read(&mut self, name: &str) -> Option<(bool, String, u64)> {
        let port = match &self.locator {
            Locator::Single(url) => {
                let url = url.clone();
                return self.read_at(0, &url, name).ok();
            }
            Locator::Sentinel { password, .. } => {
                let port = self.primary?;
                let url = format!("redis://:{password}@127.0.0.1:{port}");
                return self.read_at(port, &url, name).ok();
            }
            Locator::Cluster(ports) => {
                let first = ports.first().copied()?;
                self.owner.get(name).copied().unwrap_or(first)
            }
        };
        let url = |p: u16| format!("redis://127.0.0.1:{p}");
        match self.read_at(port, &url(port), name) {
            Ok(got) => Some(got),
            Err(e) => {
                // `(address, slot)`: the node that has the name's slot.
                let moved = e
                    .redirect_node()
                    .and_then(|(addr, _)| addr.rsplit(':').next()?.parse::<u16>().ok());
                let next = match (moved, &self.locator) {
                    (Some(p), _) => p,
                    (None, Locator::Cluster(ports)) => {
                        let at = ports.iter().position(|p| *p == port).unwrap_or(0);
                        ports[(at + 1) % ports.len()]
                    }
                    _ => port,
                };
                self.owner.insert(name.to_owned(), next);
                if moved.is_some() {
                    return self.read_at(next, &url(next), name).ok();
                }
                None
            }
        }
    }

    fn read_at(
        &mut self,
        port: u16,
        url: &str,
        name: &str,
    ) -> redis::RedisResult<(bool, String, u64)> {
        let conn = match self.conns.entry(port) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let conn = redis::Client::open(url)?.get_connection_with_timeout(PATIENCE)?;
                conn.set_read_timeout(Some(PATIENCE))?;
                conn.set_write_timeout(Some(PATIENCE))?;
                e.insert(conn)
            }
        };
        let got = READ
            .key(name)
            .key(format!("redisson_lock_queue:{{{name}}}"))
            .invoke::<(u8, String, u64)>(conn);
        match got {
            Ok((held, head, queued)) => Ok((held == 1, head, queued)),
            Err(e) => {
                // A redirection leaves the connection usable; anything else may not.
                if e.redirect_node().is_none() {
                    self.conns.remove(&port);
                }
                Err(e)
            }
        }
    }
}
