//! The runner: servers, workers, faults, and the summary.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::deployment::{Deployment, Shape};
use crate::heads::{Heads, Windows};
use crate::options::{Fault, Options};
use crate::progress::{Progress, Tally};
use crate::report::print_table;
use crate::support::RedisServer;
use crate::worker::{Args, all_names};
use crate::{Kind, LEADER_NAMES, Rng, Settings, TASKS, checker, deadlocks, history, leaders};
use crate::{linear, lost};
use lockman::testing::Link;

/// How long after its deadline a worker may take to finish its last attempt and shut down: a
/// patient fair acquire (`2K + 2 s`, 12 s) and the stuck limit past it (10 s), with a margin.
const WORKER_GRACE: Duration = Duration::from_secs(30);

/// How many times a fault the runner could not inject is tried again (once the deployment is
/// whole again) before the runner moves on to the next fault.
const FAULT_RETRIES: u32 = 2;

struct Worker {
    id: u64,
    child: Child,
}

struct Runner {
    options: Options,
    settings: Settings,
    deployment: Deployment,
    red: Vec<RedisServer>,
    checker: RedisServer,
    workers: Vec<Worker>,
    next_id: u64,
    until_unix_ms: u128,
    rng: Rng,
    /// The faults injected, by kind: what the run judged lockman under.
    faults: BTreeMap<&'static str, u64>,
    /// The injections that failed, by kind (each is in `fault_failures` too).
    faults_failed: BTreeMap<&'static str, u64>,
    /// For the progress line, which another thread prints: faults injected and failed so far.
    tally: Arc<Tally>,
    /// How long each kind of fault took, in all (ms): a failover lasts until the old primary
    /// serves again as a replica.
    fault_ms: BTreeMap<&'static str, u64>,
    killed_inside: u64,
    frozen_inside: u64,
    worker_crashes: u64,
    /// The runner's own calls to the checker that failed: any makes the run untrustworthy.
    checker_errors: u64,
    /// Faults the runner could not carry out (a failover Sentinel refused or aborted, one that
    /// never ended, …), and deployments that did not come whole again after one. Reported, but
    /// not part of the verdict: they are the runner's failures, or the machine's, not lockman's.
    /// The verdict needs at least one fault injected when any was tried, and `tests/chaos.rs`
    /// each fault it asks for.
    fault_failures: Vec<String>,
    /// Each fault's window, for the fair heads' sampler; the one open now.
    windows: Arc<Windows>,
    window: Option<usize>,
    interrupted: Arc<AtomicBool>,
    /// Every fault tried (injected or not), as a window of the checker's clock: what each
    /// violation the independent checker finds follows (`linear.rs`).
    fault_windows: Vec<linear::FaultWindow>,
    /// Each worker's proxy to the lock server (`cut-worker`, `drop-replies`).
    proxies: BTreeMap<u64, Link>,
    /// libfaketime's clock files (`clock-worker`, `clock-server`), and the lock server's
    /// offset (s).
    clocks: tempfile::TempDir,
    server_clock: u64,
    /// The lock server's binary cannot run under libfaketime (redis-server's bundled jemalloc
    /// reads the clock while libfaketime starts): `clock-server` does to the keys what the step
    /// does to them instead (see [`STEP_EXPIRIES`]).
    clock_server_emulated: bool,
    /// Servers other than the lock server whose clock a `clock-server` step moved (RedLock's,
    /// measured against the checker's after each step): a fault on them that the checker
    /// never hears of. Empty unless the runner is wrong.
    clock_strays: Vec<String>,
    /// The worker the fault being injected struck, if it struck one.
    struck: Option<u64>,
}

/// A time far ahead on the checker's clock (ms): a frozen worker's mark until it wakes.
const FROZEN: u64 = 1 << 50;

pub fn main(options: Options) -> i32 {
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let flag = interrupted.clone();
        std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if tokio::signal::ctrl_c().await.is_ok() {
                    flag.store(true, Ordering::SeqCst);
                }
            });
        });
    }
    let settings = Settings {
        lease: options.lease,
        response: Duration::from_millis(500),
        wait: Duration::from_millis(1500),
        sync_replicas: options.sync_replicas,
    };
    let clocks = tempfile::tempdir().expect("a temporary folder");
    // The lock server under libfaketime: started, and restarted, with its clock file.
    // One server only: a Sentinel group's sentinels (and a cluster's nodes, which time each
    // other out) would share the clock file, and a sentinel whose clock jumps stops acting for
    // 30 s (its TILT mode); there the step is emulated on every primary.
    let server_clock = (options.faults.contains(&Fault::ClockServer)
        && options.deployment == Shape::Single
        && server_takes_faketime())
    .then(|| {
        let file = clocks.path().join("server");
        let _ = std::fs::write(&file, "+0\n");
        faketime_env(&file)
    });
    let clock_server_emulated = server_clock.is_none();
    // The clock goes to the lock server's own process (and its restarts) alone: set on the
    // runner's environment, it would reach every worker or server started meanwhile.
    let deployment = Deployment::start(options.deployment, server_clock.unwrap_or_default());
    // RedLock's own servers; in a cluster, RedLock's members are names on its shards.
    let redlock = match options.deployment {
        Shape::Cluster => 0,
        _ => options.redlock,
    };
    let red = (0..redlock).map(|_| RedisServer::start()).collect();
    let checker = RedisServer::start();
    // RedLock's servers and the checker's, started above and restarted later, keep the machine's
    // clock: a server that inherited the lock server's fake clock would have its keys expired by
    // every later `clock-server` step, a fault nobody recorded against it (issue 55's long run:
    // RedLock holds doubled after `redlock-*` restarts had put its servers under that clock).
    eprintln!(
        "chaos: seed {}, {} workers, {:?}, faults {:?}; locks on {} (sync_replicas {}), checker on {}",
        options.seed,
        options.workers,
        options.duration,
        options.faults.iter().map(|f| f.name()).collect::<Vec<_>>(),
        deployment.target(),
        options.sync_replicas,
        checker.url()
    );
    // The workers may compete as long as the run may go on; the runner's `stop` ends them
    // when it ends sooner.
    let until_unix_ms = unix_ms() + (options.duration + options.each_fault_once).as_millis();
    let mut runner = Runner {
        rng: Rng::new(options.seed),
        options,
        settings,
        deployment,
        red,
        checker,
        workers: Vec::new(),
        next_id: 1,
        until_unix_ms,
        faults: BTreeMap::new(),
        faults_failed: BTreeMap::new(),
        tally: Arc::default(),
        fault_ms: BTreeMap::new(),
        killed_inside: 0,
        frozen_inside: 0,
        worker_crashes: 0,
        checker_errors: 0,
        fault_failures: Vec::new(),
        windows: Arc::default(),
        window: None,
        interrupted,
        fault_windows: Vec::new(),
        proxies: BTreeMap::new(),
        clocks,
        server_clock: 0,
        clock_server_emulated,
        clock_strays: Vec::new(),
        struck: None,
    };
    let code = runner.run();
    for w in &mut runner.workers {
        let _ = w.child.kill();
        let _ = w.child.wait();
    }
    code
}

impl Runner {
    fn run(&mut self) -> i32 {
        let started = Instant::now();
        for _ in 0..self.options.workers {
            self.spawn_worker();
        }
        let progress = Progress::start(
            self.checker.client(),
            self.options.progress,
            started,
            self.options.duration,
            self.tally.clone(),
        );
        let fair_names: Vec<String> = all_names(false)
            .into_iter()
            .map(|(name, _)| name)
            .filter(|name| {
                [Kind::Fair, Kind::NonReentrantFair]
                    .iter()
                    .any(|k| name.starts_with(&format!("chaos:{}:", k.family())))
            })
            .collect();
        let heads = Heads::start(
            self.deployment.locator(),
            self.checker.client(),
            fair_names,
            self.windows.clone(),
            place_timeout(),
        );
        // Every enabled fault in turn, in a shuffled order, again and again: a short run still
        // sees each of them once when it lasts long enough.
        let mut order: Vec<Fault> = Vec::new();
        let mut retries = 0;
        let planned = started + self.options.duration;
        let mut extended = false;
        while let Some(end) = self.horizon(planned)
            && !self.interrupted()
            && !self.enough()
        {
            if Instant::now() >= planned && !extended {
                extended = true;
                eprintln!("chaos: going on past --duration until every fault was injected once");
            }
            self.sleep_watching(
                self.options
                    .fault_gap
                    .min(end.saturating_duration_since(Instant::now())),
            );
            if Instant::now() >= end || self.interrupted() || self.options.faults.is_empty() {
                continue;
            }
            if order.is_empty() {
                order = self.options.faults.clone();
                for i in (1..order.len()).rev() {
                    order.swap(i, self.rng.below(i as u64 + 1) as usize);
                }
            }
            let fault = order.remove(0);
            // RedLock's own servers hold no fair lock: their faults explain no fair head.
            let window = fault
                .reaches_locks()
                .then(|| self.windows.open(fault.name()));
            self.window = window;
            let began = Instant::now();
            let from = self.checker_clock_us();
            let injected =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.inject(fault)))
                    .unwrap_or_else(|_| Err("panicked (see above)".into()));
            *self.fault_ms.entry(fault.name()).or_default() += began.elapsed().as_millis() as u64;
            let to = self.checker_clock_us();
            self.fault_windows.push(linear::FaultWindow {
                fault: fault.name().into(),
                from,
                to,
                worker: self.struck.take(),
            });
            match injected {
                Ok(()) => {
                    // For the time without a leader after each fault.
                    let to = self.checker_clock_us();
                    let logged = redis::cmd("RPUSH")
                        .arg("fault_log")
                        .arg(format!("{} {from} {to}", fault.name()))
                        .query(&mut self.checker_conn());
                    self.checked::<()>("fault log", logged);
                    *self.faults.entry(fault.name()).or_default() += 1;
                    self.tally.injected.fetch_add(1, Ordering::Relaxed);
                    if let Some(w) = window {
                        self.windows.close(w);
                    }
                    retries = 0;
                }
                Err(e) => {
                    // Not lockman's failure: reported, the deployment made whole, and the
                    // fault tried again a few times (a sentinel that refused a failover while
                    // the last one settled takes the next one) before the next fault's turn.
                    eprintln!("chaos: could not inject {}: {e}", fault.name());
                    self.fault_failures.push(format!("{}: {e}", fault.name()));
                    *self.faults_failed.entry(fault.name()).or_default() += 1;
                    self.tally.failed.fetch_add(1, Ordering::Relaxed);
                    let settled =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.settle()))
                            .unwrap_or_else(|_| Err("panicked (see above)".into()));
                    if let Err(e) = settled {
                        eprintln!("chaos: after {}: {e}", fault.name());
                        self.fault_failures
                            .push(format!("{}, then: {e}", fault.name()));
                    }
                    if let Some(w) = window {
                        self.windows.close(w);
                    }
                    if retries < FAULT_RETRIES {
                        retries += 1;
                        order.insert(0, fault);
                    } else {
                        retries = 0;
                    }
                }
            }
        }
        progress.stop();
        // Workers stop at their deadline, or at once when told to. Once their tasks are done
        // they keep their managers running until Redis was checked for holds nobody holds.
        let stop = redis::cmd("SET")
            .arg("stop")
            .arg(1)
            .query(&mut self.checker_conn());
        self.checked::<()>("stop", stop);
        let mut hung = self.wait_for_idle();
        let (fair_heads, heads_unexplained) = heads.stop();
        let held_while_alive = self.held_while_alive();
        let release = redis::cmd("SET")
            .arg("release")
            .arg(1)
            .query(&mut self.checker_conn());
        self.checked::<()>("release", release);
        hung += self.wait_for_workers();
        if self.interrupted() {
            eprintln!("chaos: interrupted; servers and workers stopped");
            return 130;
        }
        // Holds of killed or frozen workers run out within a lease.
        std::thread::sleep(self.settings.lease + Duration::from_millis(500));
        let mut summary = self.summary(started.elapsed(), hung, held_while_alive);
        summary["fair_heads"] = fair_heads;
        if heads_unexplained > 0 {
            summary["ok"] = Value::Bool(false);
        }
        let (linearizability, linear_ok) = self.check_history();
        summary["linearizability"] = linearizability;
        let (lost_updates, lost_ok) = lost::count(&mut self.checker_conn());
        summary["clock_server"] = match self.clock_server_emulated {
            true => "emulated: expiries shortened by the step (no libfaketime for this server)",
            false => "libfaketime",
        }
        .into();
        summary["lost_updates"] = lost_updates;
        summary["clock_server_strays"] = self.clock_strays.clone().into();
        if !linear_ok || !lost_ok {
            summary["ok"] = Value::Bool(false);
        }
        let ok = summary["ok"].as_bool().unwrap_or(false);
        if self.options.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&summary).unwrap_or_default()
            );
        } else {
            print_table(&summary);
        }
        if ok { 0 } else { 1 }
    }

    /// The run's history, from the checker to its file (`--history`), checked by the
    /// independent checker (`linear.rs`) against the faults tried and the process stalls seen.
    /// Not ok: a history that could not be read or written, or a violation of mutual exclusion,
    /// of the token order or of a latch's model that follows no fault.
    fn check_history(&mut self) -> (Value, bool) {
        let mut conn = self.checker_conn();
        let lines = redis::cmd("LRANGE")
            .arg("history")
            .arg(0)
            .arg(-1)
            .query(&mut conn);
        let mut lines: Vec<String> = self.checked("history", lines);
        let mut faults: Vec<linear::FaultWindow> = self
            .fault_windows
            .iter()
            .map(|f| linear::FaultWindow {
                fault: f.fault.clone(),
                from: f.from,
                to: f.to,
                worker: f.worker,
            })
            .collect();
        // Process stalls nobody injected (a starved worker on a loaded machine): `stalls:<w>`,
        // member its start, score its end (ms).
        for w in 1..self.next_id {
            let stalls = redis::cmd("ZRANGE")
                .arg(format!("stalls:{w}"))
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query(&mut conn);
            let stalls: Vec<(u64, u64)> = self.checked("stalls", stalls);
            faults.extend(stalls.into_iter().map(|(from, to)| linear::FaultWindow {
                fault: "process-stall".into(),
                from: from * 1000,
                to: to * 1000,
                worker: Some(w),
            }));
        }
        // The faults go into the file too: it is all a replay needs (`chaos check FILE`).
        lines.extend(faults.iter().map(history::fault_line));
        let path = self.options.history.clone();
        let written = std::fs::write(
            &path,
            lines.iter().fold(String::new(), |mut all, l| {
                all.push_str(l);
                all.push('\n');
                all
            }),
        );
        if let Err(e) = &written {
            eprintln!(
                "chaos: could not write the history to {}: {e}",
                path.display()
            );
        }
        let parsed: Vec<Value> = lines
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let lease = self.settings.lease.as_micros() as u64;
        let mut verdict = linear::check(&parsed, lease);
        verdict["history_file"] = path.display().to_string().into();
        let unparsed = lines.len() - parsed.len();
        verdict["unparsed_lines"] = unparsed.into();
        let ok = written.is_ok() && unparsed == 0 && linear::ok(&verdict);
        (verdict, ok)
    }

    /// Whether the acquisitions (and failovers) asked for were counted.
    /// When the fault loop ends: at `planned` (the end of `--duration`); past it, with
    /// `--each-fault-once`, when every fault asked for was injected once or its time is up.
    /// `None`: it has ended.
    fn horizon(&self, planned: Instant) -> Option<Instant> {
        let now = Instant::now();
        if now < planned {
            return Some(planned);
        }
        let cap = planned + self.options.each_fault_once;
        let missing = self
            .options
            .faults
            .iter()
            .any(|f| self.faults.get(f.name()).copied().unwrap_or(0) == 0);
        (missing && now < cap).then_some(cap)
    }

    fn enough(&mut self) -> bool {
        let Some(wanted) = self.options.acquisitions else {
            return false;
        };
        if self.injected(Fault::is_failover) < self.options.failovers {
            return false;
        }
        let counts = redis::cmd("HGETALL")
            .arg("counts")
            .query(&mut self.checker_conn());
        let counts: BTreeMap<String, u64> = self.checked("counts", counts);
        let acquired: u64 = counts
            .iter()
            // Terms won are not acquisitions here (they are in `leaders`).
            .filter(|(k, _)| k.starts_with("acquired:") && *k != "acquired:leader")
            .map(|(_, n)| n)
            .sum();
        acquired >= wanted
    }

    /// How many faults of the kinds `which` picks were injected.
    fn injected(&self, which: impl Fn(Fault) -> bool) -> u64 {
        Fault::ALL
            .iter()
            .filter(|f| which(**f))
            .map(|f| self.faults.get(f.name()).copied().unwrap_or(0))
            .sum()
    }

    fn interrupted(&self) -> bool {
        self.interrupted.load(Ordering::SeqCst)
    }

    fn spawn_worker(&mut self) {
        let id = self.next_id;
        self.next_id += 1;
        let mut target = self.deployment.target();
        let proxied = self
            .options
            .faults
            .iter()
            .any(|f| matches!(f, Fault::CutWorker | Fault::DropReplies));
        if proxied && let Deployment::Single(server) = &self.deployment {
            match Link::start(([127, 0, 0, 1], server.port()).into()) {
                Ok(proxy) => {
                    target = format!("single|{}", proxy.url());
                    self.proxies.insert(id, proxy);
                }
                Err(e) => eprintln!("chaos: no proxy for worker {id}: {e}"),
            }
        }
        let args = Args {
            id,
            target,
            redlock_urls: self.red.iter().map(RedisServer::url).collect(),
            checker_url: self.checker.url(),
            until_unix_ms: self.until_unix_ms,
            seed: self.rng.next_u64(),
            settings: self.settings,
            deadlocks: self.options.deadlocks,
        };
        let exe = std::env::current_exe().expect("own executable");
        let mut command = Command::new(exe);
        // A clock of its own for `clock-worker`.
        if self.options.faults.contains(&Fault::ClockWorker) {
            let file = self.clock_file(&format!("w{id}"));
            let _ = std::fs::write(&file, "+0\n");
            command.envs(faketime_env(&file));
        }
        let child = command
            .args(args.to_argv())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn a worker");
        self.workers.push(Worker { id, child });
    }

    /// Sleeps, replacing any worker that died on its own (counted: a crash is a bug).
    fn sleep_watching(&mut self, total: Duration) {
        let end = Instant::now() + total;
        while Instant::now() < end && !self.interrupted() {
            std::thread::sleep(
                Duration::from_millis(50).min(end.saturating_duration_since(Instant::now())),
            );
            let mut crashed = Vec::new();
            self.workers.retain_mut(|w| match w.child.try_wait() {
                Ok(Some(status)) if !status.success() => {
                    eprintln!("chaos: worker {} exited with {status}", w.id);
                    crashed.push(w.id);
                    false
                }
                _ => true,
            });
            self.worker_crashes += crashed.len() as u64;
            for &id in &crashed {
                self.mark_dead(id);
            }
            let crashed = crashed.len();
            for _ in 0..crashed {
                self.spawn_worker();
            }
        }
    }

    /// A worker killed (or found dead): its fair acquires in progress on the checker are no
    /// live waiters for the fair heads' sampler.
    fn mark_dead(&mut self, id: u64) {
        let marked = redis::cmd("SADD")
            .arg("dead")
            .arg(id)
            .query(&mut self.checker_conn());
        self.checked::<()>("dead", marked);
    }

    /// A call to the checker: a failure is counted (the run fails) and answered by the default.
    fn checked<T: Default>(&mut self, what: &str, reply: redis::RedisResult<T>) -> T {
        reply.unwrap_or_else(|e| {
            eprintln!("chaos: the checker failed ({what}): {e}");
            self.checker_errors += 1;
            T::default()
        })
    }

    /// When a worker still running at the end must have finished its last attempt: a deadlock
    /// task's second wait goes on past the deadline until it is granted, found in a cycle, or
    /// counted missed.
    fn finish_limit(&self) -> Instant {
        let deadlock_wait = match self.options.deadlocks {
            deadlocks::Mode::Off => Duration::ZERO,
            _ => deadlocks::missed_after(self.deployment.shape()),
        };
        Instant::now()
            + Duration::from_millis(self.until_unix_ms.saturating_sub(unix_ms()) as u64)
            + WORKER_GRACE
            + deadlock_wait
    }

    /// Waits until every worker has finished its tasks (it says so in `idle`, its managers still
    /// running) or exited; kills and counts those that do neither in time.
    fn wait_for_idle(&mut self) -> u64 {
        let limit = self.finish_limit();
        loop {
            let idle = redis::cmd("SMEMBERS")
                .arg("idle")
                .query(&mut self.checker_conn());
            let idle: Vec<u64> = self.checked("idle", idle);
            let busy =
                |w: &mut Worker| !idle.contains(&w.id) && matches!(w.child.try_wait(), Ok(None));
            if !self.workers.iter_mut().any(busy) {
                return 0;
            }
            if Instant::now() > limit || self.interrupted() {
                let mut hung = 0;
                self.workers.retain_mut(|w| {
                    if !busy(w) {
                        return true;
                    }
                    eprintln!("chaos: worker {} did not finish its tasks; killed", w.id);
                    hung += 1;
                    let _ = w.child.kill();
                    let _ = w.child.wait();
                    false
                });
                return hung;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// With every task done and every guard gone, but the workers' managers still running: the
    /// lock hashes left on the lock servers once a lease and two seconds have passed (holds of
    /// killed workers and releases resent after a fault end by then). One left is a hold that
    /// no live guard holds, kept alive by a watchdog or never released: must be none.
    fn held_while_alive(&self) -> Vec<String> {
        let until = Instant::now() + self.settings.lease + Duration::from_secs(2);
        loop {
            let (held, _) = self.keys_left();
            if held.is_empty() || Instant::now() >= until {
                for key in &held {
                    eprintln!("chaos: held while every guard was gone: {key}");
                }
                return held;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for the workers to finish on their own; kills and counts those that do not.
    fn wait_for_workers(&mut self) -> u64 {
        let limit = self.finish_limit();
        let mut hung = 0;
        for w in &mut self.workers {
            loop {
                match w.child.try_wait() {
                    Ok(Some(status)) => {
                        if !status.success() {
                            eprintln!("chaos: worker {} exited with {status}", w.id);
                            self.worker_crashes += 1;
                        }
                        break;
                    }
                    _ if Instant::now() > limit || self.interrupted.load(Ordering::SeqCst) => {
                        eprintln!("chaos: worker {} did not finish; killed", w.id);
                        hung += 1;
                        let _ = w.child.kill();
                        let _ = w.child.wait();
                        break;
                    }
                    _ => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        self.workers.clear();
        hung
    }

    fn checker_conn(&self) -> redis::Connection {
        self.checker.conn()
    }

    /// The checker's clock now, in µs (0 when the checker failed, counted).
    fn checker_clock_us(&mut self) -> u64 {
        let time = redis::cmd("TIME").query::<(u64, u64)>(&mut self.checker_conn());
        let (secs, micros) = self.checked("time", time);
        secs * 1_000_000 + micros
    }

    /// A worker inside a critical section now, if any, else any worker.
    fn pick_holder(&mut self) -> Option<(usize, bool)> {
        let inside = checker::INSIDE_SCRIPT.invoke(&mut self.checker_conn());
        let inside: Vec<String> = self.checked("inside", inside);
        let inside: Vec<usize> = inside
            .iter()
            .filter_map(|id| id.parse::<u64>().ok())
            .filter_map(|id| self.workers.iter().position(|w| w.id == id))
            .collect();
        if !inside.is_empty() {
            return Some((inside[self.rng.below(inside.len() as u64) as usize], true));
        }
        match self.workers.len() {
            0 => None,
            n => Some((self.rng.below(n as u64) as usize, false)),
        }
    }

    fn inject(&mut self, fault: Fault) -> Result<(), String> {
        let lease = self.settings.lease;
        match fault {
            Fault::KillHolder => {
                let Some((i, inside)) = self.pick_holder() else {
                    return Ok(());
                };
                let mut w = self.workers.remove(i);
                self.struck = Some(w.id);
                // Dead before it is killed: its fair acquires in progress are not live heads.
                self.mark_dead(w.id);
                if let Some(window) = self.window {
                    self.windows.scope(window, w.id);
                }
                let _ = w.child.kill();
                let _ = w.child.wait();
                let at = self.checker_clock_us();
                let logged = redis::cmd("RPUSH")
                    .arg("history")
                    .arg(history::kill_line(w.id, at))
                    .query(&mut self.checker_conn());
                self.checked::<()>("history", logged);
                self.killed_inside += u64::from(inside);
                // Its entries will never be left: forget them, then again in case its last
                // bytes reached the checker after the first pass.
                for _ in 0..2 {
                    let forgot = checker::FORGET_WORKER_SCRIPT
                        .arg(w.id)
                        .invoke(&mut self.checker_conn());
                    self.checked::<u64>("forget", forgot);
                    std::thread::sleep(Duration::from_millis(100));
                }
                self.spawn_worker();
            }
            Fault::StopHolder | Fault::CutWorker | Fault::DropReplies => {
                let Some((i, inside)) = self.pick_holder() else {
                    return Ok(());
                };
                let (id, pid) = (self.workers[i].id, self.workers[i].child.id());
                self.struck = Some(id);
                if fault != Fault::StopHolder && !self.proxies.contains_key(&id) {
                    return Err(format!("worker {id} has no proxy"));
                }
                // A frozen worker's actors serve nobody: its own heads wait. Other workers'
                // heads do not (a hold of the frozen worker expires without a message, and the
                // refresh finds the head then).
                if let Some(window) = self.window {
                    self.windows.scope(window, id);
                }
                let frozen = lease + Duration::from_millis(1000);
                // Marked before it freezes; once it woke, the mark says when, and lasts one
                // lease more: the holds it took before waking are excused that long, no more.
                let mark = format!("paused:{id}");
                let before = redis::cmd("SET")
                    .arg(&mark)
                    .arg(FROZEN)
                    .query(&mut self.checker_conn());
                self.checked::<()>("pause", before);
                let from = self.checker_clock_us();
                // Cut off, its holds expire unrenewed as a frozen worker's do, and it is
                // marked as one: the runner's own checker excuses its holds as a freeze's
                // (`linear.rs` excuses nothing).
                let proxy = self.proxies.get(&id);
                match (fault, proxy) {
                    // Held, not dropped: what the worker sent during the cut reaches Redis
                    // late, after its caller may have given up on it (as TCP retransmits).
                    (Fault::CutWorker, Some(p)) => p.hold(),
                    (Fault::DropReplies, Some(p)) => p.drop_replies(),
                    _ => {
                        signal(pid, "STOP");
                        self.frozen_inside += u64::from(inside);
                    }
                }
                std::thread::sleep(frozen);
                match self.proxies.get(&id) {
                    // What was held back flows on the same connections; after lost replies,
                    // the connections that lost them are closed (their streams lost bytes).
                    Some(p) if fault == Fault::CutWorker => p.release(),
                    Some(p) if fault == Fault::DropReplies => p.heal(),
                    _ => signal(pid, "CONT"),
                }
                // A frozen leader is out of office from here (see `leaders::without_leader`).
                let to = self.checker_clock_us();
                let logged = redis::cmd("RPUSH")
                    .arg("freezes")
                    .arg(format!("{id} {from} {to}"))
                    .query(&mut self.checker_conn());
                self.checked::<()>("freezes", logged);
                let mut conn = self.checker_conn();
                let woke = redis::cmd("TIME")
                    .query(&mut conn)
                    .map(checker::clock_ms)
                    .and_then(|now| {
                        redis::cmd("SET")
                            .arg(&mark)
                            .arg(now)
                            .arg("PX")
                            .arg(lease.as_millis() as u64)
                            .query(&mut conn)
                    });
                self.checked::<()>("woke", woke);
            }
            Fault::ClockWorker => {
                // A wall clock stepped forward by more than a lease, then back (an NTP step
                // each way); its monotonic clock goes on (libfaketime, `FAKETIME_DONT_FAKE_MONOTONIC`).
                let Some((i, _)) = self.pick_holder() else {
                    return Ok(());
                };
                let id = self.workers[i].id;
                self.struck = Some(id);
                // A preload library that is missing is skipped with a warning: the step would
                // change nothing, silently.
                if !std::path::Path::new(LIBFAKETIME).exists() {
                    return Err(format!("{LIBFAKETIME} missing (Debian's libfaketime)"));
                }
                let step = lease.as_secs() + 1;
                let file = self.clock_file(&format!("w{id}"));
                std::fs::write(&file, format!("+{step}\n")).map_err(|e| e.to_string())?;
                std::thread::sleep(Duration::from_secs(1));
                std::fs::write(&file, "+0\n").map_err(|e| e.to_string())?;
            }
            Fault::ClockServer => {
                // Forward by more than a lease, for good: Redis expires every lock key at
                // once (it expires keys by its wall clock).
                let step = lease.as_secs() + 1;
                self.server_clock += step;
                // To the runner's own checker, a data loss: holds that meet while the step is
                // under way are explained by it (its window, as a failover's), and so are holds
                // begun before it that meet later (the epoch moves on once it is done).
                let window = redis::cmd("SET")
                    .arg("window:epoch:lock")
                    .arg(fault.name())
                    .query(&mut self.checker_conn());
                self.checked::<()>("window", window);
                if self.clock_server_emulated {
                    // Every primary (the replicas follow its deletions and expiries): one
                    // machine's clock under every server, stepped at once.
                    for server in self.deployment.primaries() {
                        let mut conn = crate::support::raw(server);
                        redis::Script::new(STEP_EXPIRIES)
                            .arg(step * 1000)
                            .invoke::<u64>(&mut conn)
                            .map_err(|e| format!("{}: {e}", server.port()))?;
                    }
                } else {
                    let file = self.clock_file("server");
                    std::fs::write(&file, format!("+{}\n", self.server_clock))
                        .map_err(|e| e.to_string())?;
                    // libfaketime reads the file at every call: the server has stepped once it
                    // answers again.
                }
                self.bump_epoch("epoch:lock", fault);
                std::thread::sleep(Duration::from_secs(1));
                // The step is the lock server's alone: RedLock's servers keep the machine's
                // clock, which the checker's shows (a server whose clock went with the step
                // is more than half a step ahead of it).
                let checker_ms = self.checker_clock_us() / 1000;
                for server in &self.red {
                    let time = redis::cmd("TIME")
                        .query::<(u64, u64)>(&mut crate::support::raw(server))
                        .map(checker::clock_ms);
                    if let Ok(ms) = time
                        && ms > checker_ms + step * 500
                    {
                        self.clock_strays.push(format!(
                            "{}: {} ms ahead",
                            server.port(),
                            ms - checker_ms
                        ));
                    }
                }
            }
            Fault::RestartEmpty | Fault::RestartAof => {
                self.single()?.stop();
                if fault == Fault::RestartEmpty {
                    self.single()?.wipe_data();
                    self.bump_epoch("epoch:lock", fault);
                }
                self.single()?.restart();
            }
            Fault::ClientKill => {
                for server in self.deployment.primaries() {
                    let mut conn = crate::support::raw(server);
                    for kind in ["normal", "pubsub"] {
                        let _: redis::RedisResult<u64> = redis::cmd("CLIENT")
                            .arg("KILL")
                            .arg("TYPE")
                            .arg(kind)
                            .query(&mut conn);
                    }
                }
            }
            Fault::StallRedis => {
                // Longer than the response timeout, shorter than what is left of a renewed
                // lease, and than the time after which sentinels or the cluster fail it over.
                let primaries = self.deployment.primaries();
                let Some(server) = primaries.get(self.rng.below(primaries.len() as u64) as usize)
                else {
                    return Err("no primary".into());
                };
                let stall = self.settings.response + Duration::from_millis(300);
                server
                    .pause(stall * 10)
                    .map_err(|e| format!("stall: {e}"))?;
                std::thread::sleep(stall);
                server.resume().map_err(|e| format!("stall: {e}"))?;
            }
            Fault::FailoverKill | Fault::FailoverManual | Fault::PartitionPrimary => {
                return self.fail_over(fault);
            }
            Fault::Reshard => {
                // A slot that holds a lock the workers use, moved while they use it.
                let names = all_names(true);
                let (_, keys) = &names[self.rng.below(names.len() as u64) as usize];
                let key = keys[self.rng.below(keys.len() as u64) as usize].clone();
                let pick = self.rng.next_u64();
                return self.deployment.reshard(&key, pick);
            }
            Fault::RedlockMinority | Fault::RedlockMajority => {
                let n = self.red.len();
                let down = match fault {
                    Fault::RedlockMinority => (n - 1) / 2,
                    _ => n / 2 + 1,
                };
                let first = self.rng.below(n as u64) as usize;
                let chosen: Vec<usize> = (0..down).map(|k| (first + k) % n).collect();
                for &i in &chosen {
                    self.red[i].stop();
                }
                if fault == Fault::RedlockMajority {
                    // A majority comes back empty: holds taken before may be doubled.
                    self.bump_epoch("epoch:redlock", fault);
                }
                // Down for longer than a lease (Redlock's delayed restart), then back empty.
                std::thread::sleep(lease + Duration::from_millis(500));
                for &i in &chosen {
                    self.red[i].restart();
                }
            }
        }
        Ok(())
    }

    /// A clock file of libfaketime (`FAKETIME_TIMESTAMP_FILE`): `server`, or `w<id>`.
    fn clock_file(&self, who: &str) -> std::path::PathBuf {
        self.clocks.path().join(who)
    }

    /// Makes RedLock's servers and the deployment whole again ([`Deployment::settle`]): the
    /// lock server restarts under its fake clock, which its own start set.
    fn settle(&mut self) -> Result<(), String> {
        for server in &mut self.red {
            crate::deployment::wake(server);
        }
        self.deployment.settle()
    }

    /// The one server of a single-server deployment.
    fn single(&mut self) -> Result<&mut RedisServer, String> {
        match &mut self.deployment {
            Deployment::Single(server) => Ok(server),
            _ => Err("restarts are one server's faults".into()),
        }
    }

    /// A failover of the primary (or of a master of the cluster) while the workers run. From
    /// its start until the old primary serves again as a replica a window is open on the
    /// checker: holds that meet in it are explained by the failover, and so are holds begun
    /// before its end that meet later (the epoch moves on when it closes). The checker also
    /// notes when the first acquisition begun after the start, of a name the failover
    /// reached, got in: how long waiters stalled.
    fn fail_over(&mut self, fault: Fault) -> Result<(), String> {
        let primaries: Vec<u16> = self
            .deployment
            .primaries()
            .iter()
            .map(|s| s.port())
            .collect();
        if primaries.is_empty() {
            return Err("no primary".into());
        }
        let port = primaries[self.rng.below(primaries.len() as u64) as usize];
        let cluster = self.deployment.shape() == Shape::Cluster;
        let reached = self.deployment.names_on(port, &all_names(cluster));
        // The window's start is kept under the epoch its end will begin (only the runner moves
        // epochs on).
        let mut conn = self.checker_conn();
        let opened = redis::pipe()
            .cmd("TIME")
            .get("epoch:lock")
            .query::<((u64, u64), Option<u64>)>(&mut conn)
            .and_then(|(time, epoch)| {
                let now = checker::clock_ms(time);
                redis::pipe()
                    .atomic()
                    .set("window:epoch:lock", fault.name())
                    .hset("epoch:lock:window", epoch.unwrap_or(0) + 1, now)
                    .set("failover:start", now)
                    .del("failover:names")
                    .sadd("failover:names", &reached)
                    .query::<()>(&mut conn)
            });
        self.checked::<()>("window", opened);
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.deployment.fail_over(fault, port)
        }))
        .unwrap_or_else(|_| Err("panicked (see above)".into()));
        if done.is_err() {
            // A failover the runner gave up waiting for may still happen (a sentinel that
            // promotes a replica after the runner's limit): the window stays open until the
            // deployment is whole again, so what it does is explained as any failover's is.
            // The caller settles again and reports a failure to.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.settle()));
        }
        self.bump_epoch("epoch:lock", fault);
        done
    }

    /// A data loss, or the end of a failover's window: holds taken before it may be doubled
    /// by holds taken after. The checker keeps which fault moved each epoch on.
    fn bump_epoch(&mut self, key: &str, fault: Fault) {
        let mut conn = self.checker_conn();
        let bumped = redis::cmd("INCR")
            .arg(key)
            .query::<u64>(&mut conn)
            .and_then(|epoch| {
                redis::pipe()
                    .atomic()
                    .hset(format!("{key}:fault"), epoch, fault.name())
                    .del(format!("window:{key}"))
                    .query::<()>(&mut conn)
            });
        self.checked::<()>("epoch", bumped);
    }

    fn summary(&mut self, elapsed: Duration, hung: u64, held_while_alive: Vec<String>) -> Value {
        let mut conn = self.checker_conn();
        let counts = redis::cmd("HGETALL").arg("counts").query(&mut conn);
        let counts: BTreeMap<String, u64> = self.checked("counts", counts);
        let get = |k: &str| counts.get(k).copied().unwrap_or(0);
        let by_kind = |prefix: &str| -> BTreeMap<&'static str, u64> {
            Kind::ALL
                .iter()
                .map(|k| (k.name(), get(&format!("{prefix}:{}", k.name()))))
                .collect()
        };
        let sum = |m: &BTreeMap<&'static str, u64>| m.values().sum::<u64>();
        let acquired = by_kind("acquired");
        let timed_out = by_kind("timed_out");
        let acquire_errors = by_kind("acquire_error");
        let release_errors = by_kind("release_error");
        // Every kind's, and two leaders at once (also under `leaders`).
        let mut violations = BTreeMap::new();
        for cause in ["pause", "restart", "unexplained"] {
            let n: u64 = Kind::ALL
                .iter()
                .map(|k| k.name())
                .chain(["leader"])
                .map(|k| get(&format!("violation:{k}:{cause}")))
                .sum();
            violations.insert(cause, n);
        }
        let mut excused = BTreeMap::new();
        for cause in ["pause", "restart", "failover", "stall"] {
            let n = redis::cmd("SCARD")
                .arg(format!("excused:{cause}"))
                .query(&mut conn);
            excused.insert(cause, self.checked::<u64>("excused", n));
        }
        let stuck = sum(&by_kind("stuck"))
            + sum(&by_kind("stuck_release"))
            + get("stuck:leader")
            + get("stuck_release:leader");
        let replica_sync = by_kind("replica_sync");
        let by_fault = redis::cmd("HGETALL")
            .arg("violation_by_fault")
            .query(&mut conn);
        let by_fault: BTreeMap<String, u64> = self.checked("violation_by_fault", by_fault);
        let gaps = redis::cmd("HVALS").arg("failover:resumed").query(&mut conn);
        let mut gaps: Vec<u64> = self.checked("failover:resumed", gaps);
        gaps.sort_unstable();
        let failovers = self.injected(Fault::is_failover);
        let stale = checker::stale_accepted(&mut conn).unwrap_or(u64::MAX);
        let (leader_stale, leader_stale_explained) =
            leaders::stale_writes(&mut conn).unwrap_or((u64::MAX, 0));
        let without_leader = leaders::without_leader(&mut conn);
        let without_leader: Value = self.checked("terms", without_leader.map(Some)).into();
        let leader_overlaps: BTreeMap<&str, u64> = ["pause", "restart", "unexplained"]
            .into_iter()
            .map(|cause| (cause, get(&format!("violation:leader:{cause}"))))
            .collect();
        let (leftover, other_keys) = self.keys_left();
        let unexplained = redis::cmd("LRANGE")
            .arg("unexplained")
            .arg(0)
            .arg(19)
            .query(&mut conn);
        let unexplained: Vec<String> = self.checked("unexplained", unexplained);
        let errors = redis::cmd("LRANGE")
            .arg("errors")
            .arg(-20)
            .arg(-1)
            .query(&mut conn);
        let errors: Vec<String> = self.checked("errors", errors);
        let lost =
            get("lost:reported") + get("lost:found_at_release") + get("lost:reported_but_released");
        let bounds = self.bounds(
            &acquired,
            &timed_out,
            &acquire_errors,
            &release_errors,
            lost,
            (&excused, get("stalls")),
        );
        let within = bounds.iter().all(|b| b["within"] == Value::Bool(true));
        let (deadlocks, deadlocks_ok) = deadlocks::summary(
            self.options.deadlocks,
            self.deployment.shape(),
            &counts,
            &mut conn,
        );
        // Faults were tried and none could be injected: the run saw no fault at all, and a
        // green verdict would say nothing about faults.
        let injected_total = self.faults.values().sum::<u64>();
        let nothing_injected = injected_total == 0 && !self.faults_failed.is_empty();
        let ok = violations["unexplained"] == 0
            && within
            && get("shutdown:live_guard") == 0
            && get("shutdown:task_panicked") == 0
            && get("non_reentrant:reentered") == 0
            && self.checker_errors == 0
            && !nothing_injected
            && stale == 0
            && get("fenced_write:refused_backwards") == 0
            && leader_stale == 0
            && stuck == 0
            && held_while_alive.is_empty()
            && leftover.is_empty()
            && self.worker_crashes == 0
            && hung == 0
            && deadlocks_ok;
        json!({
            "deployment": self.deployment.shape().name(),
            "sync_replicas": self.options.sync_replicas,
            "seed": self.options.seed,
            "workers": self.options.workers,
            "tasks_per_worker": TASKS,
            "seconds": elapsed.as_secs_f64(),
            "lease_ms": self.settings.lease.as_millis() as u64,
            "redlock_servers": self.red.len(),
            "acquired_total": sum(&acquired),
            "acquired": acquired,
            "timed_out": timed_out,
            "acquire_errors": acquire_errors,
            "release_errors": release_errors,
            "stuck_waiters": stuck,
            "violations": violations,
            "violations_by_fault": by_fault,
            "acquires_refused_by_replica_sync": replica_sync,
            "failovers": failovers,
            "failover_stall_ms": {
                "measured": gaps.len(),
                "median": gaps.get(gaps.len() / 2).copied(),
                "max": gaps.last().copied(),
            },
            "violations_by_kind": Kind::ALL.iter().map(|k| {
                let n: u64 = ["pause", "restart", "unexplained"]
                    .iter()
                    .map(|c| get(&format!("violation:{}:{c}", k.name())))
                    .sum();
                (k.name(), n)
            }).collect::<BTreeMap<_, _>>(),
            "excused_holds": excused,
            // Workers' processes that stood still half a lease or more without being frozen
            // (a loaded machine): their holds meeting others are excused as frozen ones are.
            "process_stalls": get("stalls"),
            "fenced_writes": {
                "accepted": get("fenced_write:accepted"),
                "refused_frozen_holder": get("fenced_write:refused_frozen"),
                "refused_stale_holder": get("fenced_write:refused_stale"),
                "refused_split_brain": get("fenced_write:refused_split_brain"),
                "refused_token_went_backwards": get("fenced_write:refused_backwards"),
                "stale_accepted": stale,
            },
            "leaders": {
                "elections": LEADER_NAMES,
                "terms": get("acquired:leader"),
                "campaigns_timed_out": get("timed_out:leader"),
                "campaign_errors": get("acquire_error:leader"),
                "resign_errors": get("release_error:leader"),
                "ended": {
                    "resigned": get("leader:resigned"),
                    "lost": get("leader:lost"),
                    "expiring": get("leader:expiring"),
                },
                "two_at_once": {
                    "explained_by_a_freeze": leader_overlaps["pause"],
                    "explained_by_a_data_loss_or_failover": leader_overlaps["restart"],
                    "unexplained": leader_overlaps["unexplained"],
                },
                "fenced_writes": {
                    "accepted": get("leader_write:accepted"),
                    "refused": get("leader_write:refused"),
                    "errors": get("leader_write:error"),
                    "stale_accepted": leader_stale,
                    "stale_accepted_after_a_data_loss_or_failover": leader_stale_explained,
                },
                "without_leader": without_leader,
            },
            "lost": {
                "reported_by_guard": get("lost:reported"),
                "found_at_release": get("lost:found_at_release"),
                "reported_but_released": get("lost:reported_but_released"),
                // Of the losses reported by a lock's or fenced lock's guard, read on Redis
                // before the release: whether Redis still had the hold (a false loss).
                "reported_still_held": get("lost:still_held"),
                "reported_gone_in_redis": get("lost:gone_in_redis"),
            },
            "patterns": {
                "nested_holds": get("pattern:nested"),
                "clones_at_once": get("pattern:clones"),
                "reentry_refused": get("pattern:reentry_refused"),
                "non_reentrant_refused": get("pattern:non_reentrant_refused"),
                "non_reentrant_reentered": get("non_reentrant:reentered"),
                "non_reentrant_lost_then_new": get("pattern:non_reentrant_lost_then_new"),
                "lost_with_twin_release": get("pattern:lost_with_twin"),
                "shutdowns_while_acquiring": get("pattern:shutdown"),
                "shutdown_left_a_live_guard": get("shutdown:live_guard"),
                "shutdown_other_error": get("shutdown:other_error"),
                "shutdown_task_panicked": get("shutdown:task_panicked"),
                "shutdown_left_held": get("shutdown:left_held"),
            },
            "bounds": bounds,
            "deadlocks": deadlocks,
            "faults": self.faults,
            "faults_failed": self.faults_failed,
            "fault_ms": self.fault_ms,
            "kill_holder_inside": self.killed_inside,
            "stop_holder_inside": self.frozen_inside,
            "held_while_alive": held_while_alive.len(),
            "held_while_alive_sample": held_while_alive.iter().take(20).collect::<Vec<_>>(),
            "leftover_locks": leftover.len(),
            "leftover_sample": leftover.iter().take(20).collect::<Vec<_>>(),
            "other_keys_left": other_keys,
            "worker_crashes": self.worker_crashes,
            "checker_errors": self.checker_errors,
            "fault_failures": self.fault_failures,
            "no_fault_injected": nothing_injected,
            "workers_hung": hung,
            "unexplained_sample": unexplained,
            "errors_sample": errors,
            "ok": ok,
        })
    }

    /// The counts that only faults explain, each beside the bound the faults injected allow
    /// (`TASKS` tasks per worker taking locks, and `LEADER_NAMES` candidates; a fault is
    /// counted once per injection):
    /// - holds excused by a freeze: at most one per task or candidate of the frozen worker, per
    ///   freeze (each has one hold or lead at a time, and only those begun before the wake are
    ///   excused);
    /// - holds excused by a process stall (a worker's beat stopped for half a lease or more
    ///   without a freeze): as by a freeze, per stall;
    /// - holds excused by a data loss: at most one per task or candidate of the run, per
    ///   restart that lost the data (`restart-empty`, `redlock-majority`) or step of the lock
    ///   server's clock (`clock-server`: every lease ends at once); holds excused by a
    ///   failover are what
    ///   the failover did, reported, not bounded;
    /// - acquire errors of the kinds on the lock server: at most 3 per task per fault of that
    ///   server or of one worker's (frozen, cut off, its clock stepped) (an attempt fails only when a reply is lost or the server is away; the next one
    ///   waits for it);
    /// - RedLock acquire errors: at most 10 per task per RedLock fault (a majority down fails
    ///   every attempt for 2.5 s; a task tries again 50 ms after a failure, and most tasks are
    ///   busy with other kinds meanwhile);
    /// - acquire errors, release errors and holds lost: at most 10 more per task per failover
    ///   or reshard (the deployment is away for seconds; a task tries again 50 ms after an
    ///   error);
    /// - release errors: at most 2 per task per fault of any server or process stall;
    /// - holds lost: at most one per task per fault or process stall (a fault ends at most
    ///   every task's hold);
    /// - time-outs: at most a third of each kind's attempts; half for the fair locks (fair
    ///   and non-reentrant fair), whose queue keeps the place of a killed or frozen waiter until the fair wait timeout, so
    ///   that every waiter behind it waits too.
    ///
    /// A fault is counted here whether or not its injection succeeded: one that failed may
    /// still have done all it does to the workers (a failover that happened, whose old primary
    /// was not back as a replica in time).
    fn bounds(
        &self,
        acquired: &BTreeMap<&'static str, u64>,
        timed_out: &BTreeMap<&'static str, u64>,
        acquire_errors: &BTreeMap<&'static str, u64>,
        release_errors: &BTreeMap<&'static str, u64>,
        lost: u64,
        (excused, stalls): (&BTreeMap<&'static str, u64>, u64),
    ) -> Vec<Value> {
        let tasks = self.options.workers as u64 * TASKS;
        // Lock takers and candidates: each has one hold (or lead) at a time to excuse.
        let holders = self.options.workers as u64 * (TASKS + LEADER_NAMES);
        // Tried: injected, or failed.
        let fault = |name: &str| {
            self.faults.get(name).copied().unwrap_or(0)
                + self.faults_failed.get(name).copied().unwrap_or(0)
        };
        let lock_faults = [
            "restart-empty",
            "restart-aof",
            "client-kill",
            "stall-redis",
            "clock-server",
            "cut-worker",
            "drop-replies",
            // A worker frozen, or its clock stepped, while it waits for a reply.
            "stop-holder",
            "clock-worker",
        ]
        .map(fault)
        .iter()
        .sum::<u64>();
        let moves = Fault::ALL
            .iter()
            .filter(|f| f.is_failover() || **f == Fault::Reshard)
            .map(|f| fault(f.name()))
            .sum::<u64>();
        let red_faults = fault("redlock-minority") + fault("redlock-majority");
        // A process that stood still half a lease (not injected) does to its own tasks what a
        // freeze does: counted as a fault here.
        let all_faults = Fault::ALL.iter().map(|f| fault(f.name())).sum::<u64>() + stalls;
        let row = |what: String, count: u64, bound: u64| json!({ "what": what, "count": count, "bound": bound, "within": count <= bound });
        let mut rows = vec![
            row(
                "holds excused by a freeze".into(),
                excused["pause"],
                (TASKS + LEADER_NAMES)
                    * (fault("stop-holder") + fault("cut-worker") + fault("drop-replies")),
            ),
            row(
                "holds excused by a process stall (not injected)".into(),
                excused["stall"],
                (TASKS + LEADER_NAMES) * stalls,
            ),
            row(
                "holds excused by a data loss".into(),
                excused["restart"],
                holders
                    * (fault("restart-empty") + fault("redlock-majority") + fault("clock-server")),
            ),
            row(
                "acquire errors on the lock server".into(),
                acquire_errors
                    .iter()
                    .filter(|(k, _)| **k != Kind::RedLock.name())
                    .map(|(_, n)| n)
                    .sum(),
                3 * tasks * lock_faults + 10 * tasks * moves,
            ),
            row(
                "RedLock acquire errors".into(),
                acquire_errors[Kind::RedLock.name()],
                10 * tasks * (red_faults + moves),
            ),
            row(
                "release errors".into(),
                release_errors.values().sum(),
                2 * tasks * all_faults + 10 * tasks * moves,
            ),
            row(
                "holds lost".into(),
                lost,
                tasks * all_faults + 10 * tasks * moves,
            ),
        ];
        for (kind, &n) in timed_out {
            let attempts = n + acquired[kind] + acquire_errors[kind];
            let fair = Kind::ALL.iter().any(|k| k.is_fair() && k.name() == *kind);
            let share = if fair { 2 } else { 3 };
            rows.push(row(format!("{kind} time-outs"), n, attempts / share));
        }
        rows
    }

    /// Lock hashes still in any lock server, as `url key`, and the other keys left there (fence
    /// counters, by design; fair-queue entries of waiters that went away, pruned by the next
    /// acquire of that name).
    fn keys_left(&self) -> (Vec<String>, Vec<String>) {
        let mut locks = Vec::new();
        let mut other = Vec::new();
        let red = self.red.iter().map(|s| &**s);
        for server in self.deployment.primaries().into_iter().chain(red) {
            let mut conn = crate::support::raw(server);
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("*")
                .query(&mut conn)
                .unwrap_or_default();
            for key in keys {
                let kind: String = redis::cmd("TYPE")
                    .arg(&key)
                    .query(&mut conn)
                    .unwrap_or_default();
                match kind.as_str() {
                    // A manager's client record (docs/protocol.md, "Client records"): not a
                    // lock; a killed worker's stays until it expires with the watchdog timeout.
                    "hash" if key.starts_with("lockman_client:") => {
                        other.push(format!("{key} ({kind})"))
                    }
                    // The newest token each fenced write saw (`fenced_set`): kept, by design.
                    "hash" if key.starts_with("lockman_fence:") => {
                        other.push(format!("{key} ({kind})"))
                    }
                    "hash" => {
                        let fields: Vec<String> = redis::cmd("HGETALL")
                            .arg(&key)
                            .query(&mut conn)
                            .unwrap_or_default();
                        locks.push(format!("{} {key} {fields:?}", server.url()));
                    }
                    _ => other.push(format!("{key} ({kind})")),
                }
            }
        }
        other.sort();
        (locks, other)
    }
}

/// What a forward step of the server's wall clock by ARGV[1] ms does to its keys' expiries: a
/// key with less time to live is gone, the others have that much less. For servers that cannot
/// run under libfaketime. Reply: the keys it expired.
const STEP_EXPIRIES: &str = r#"
local step = tonumber(ARGV[1])
local n = 0
for _, k in ipairs(redis.call('keys', '*')) do
    local ttl = redis.call('pttl', k)
    if ttl > 0 then
        if ttl <= step then
            redis.call('del', k)
            n = n + 1
        else
            redis.call('pexpire', k, ttl - step)
        end
    end
end
return n
"#;

/// Whether the lock server's binary (`REDIS_SERVER_BIN`, else `redis-server`) starts under
/// libfaketime (Valkey's, built with libc's malloc, does; Debian's redis-server, with jemalloc,
/// hangs).
fn server_takes_faketime() -> bool {
    // Without the library, the loader only warns and the server starts with its clock untouched:
    // that is no clock step, so the runner emulates it instead.
    if !std::path::Path::new(LIBFAKETIME).exists() {
        return false;
    }
    let bin = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
    let dir = std::env::temp_dir().join(format!("lockman-chaos-probe-{}", std::process::id()));
    let _ = std::fs::write(&dir, "+0\n");
    let child = Command::new(bin)
        .arg("--version")
        .envs(faketime_env(&dir))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return false;
    };
    let until = Instant::now() + Duration::from_secs(3);
    let ok = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.success(),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break false;
            }
        }
    };
    let _ = std::fs::remove_file(&dir);
    ok
}

/// libfaketime's variables for a process whose wall clock follows `file` (an offset such as
/// `+3`, read at every call), its monotonic clock left alone.
fn faketime_env(file: &std::path::Path) -> Vec<(String, String)> {
    [
        ("LD_PRELOAD", LIBFAKETIME.to_owned()),
        ("FAKETIME_TIMESTAMP_FILE", file.display().to_string()),
        ("FAKETIME_NO_CACHE", "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
    ]
    .map(|(k, v)| (k.to_owned(), v))
    .to_vec()
}

/// Where Debian's libfaketime (package `libfaketime`) keeps its multi-threaded library.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

/// The workers' fair place timeout `K` (`Config::fair_lock_place_timeout`; they keep the
/// default).
pub fn place_timeout() -> Duration {
    lockman::Config::new("redis://127.0.0.1").get_fair_lock_place_timeout()
}

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}
