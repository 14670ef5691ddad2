//! A worker process: a few tasks that take random locks of every kind, again and again, and
//! record each critical section on the checker. It exits at its deadline, or at once when the
//! runner goes away (its stdin closes).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lockman::{
    CompositeGuard, Config, FencedGuard, Leadership, Lock, LockError, LockGuard, LockManager,
    MultiLock, PermitGuard, RedLock,
};
use redis::aio::MultiplexedConnection;

use crate::history::Record;
use crate::{Kind, LEADER_NAMES, Rng, SEMAPHORE_PERMITS, Settings, TASKS};
use crate::{checker, deadlocks, deployment};

/// The group multi-lock's hash: its members are `chaos:group:<member>`'s last part.
const GROUP: &str = "chaos:group";

/// How long past its wait an acquire may take before the worker calls it stuck.
const STUCK_AFTER: Duration = Duration::from_secs(10);
/// Names per kind: few, so that they are contended.
const NAMES: u64 = 3;
/// How long a worker waits for the checker's reply before it gives up (and exits non-zero).
const CHECKER_PATIENCE: Duration = Duration::from_secs(30);
/// The wait of one fair acquire in three: `2K + 2 s` (12 s with the default place timeout
/// `K`), longer than a dead place ahead of it lasts (about `2K`), so that it outlives one and
/// becomes a live head, and three times the fair heads' bound (`heads.rs`, `K/3 + 2 s`), so
/// that a live head of a free fair lock left unserved stays a head (and live) well past the
/// bound, even between two faults of a fault-dense run.
fn patient_fair_wait() -> Duration {
    crate::run::place_timeout() * 2 + Duration::from_secs(2)
}
/// The pause between a latch round's two count-downs (see `latch_round`).
const LATCH_GAP: Duration = Duration::from_millis(50);
/// How long an idle worker keeps its managers running for the runner's check.
const IDLE_PATIENCE: Duration = Duration::from_secs(60);
/// How many fenced writes a leader makes before it resigns, at most (2 more than a random
/// number below it): most hand-overs come from resigns, the others from faults.
const MOST_WRITES: u64 = 50;
/// The longest pause between two writes of a leader (a random share of it): a term lasts
/// about 0.8 s on average.
const WRITE_EVERY: Duration = Duration::from_millis(60);

/// A call to the checker, which the run's counts depend on: a failure ends the worker with a
/// non-zero exit, which the runner counts as a crash, so the run fails instead of miscounting.
pub fn must<T>(what: &str, reply: redis::RedisResult<T>) -> T {
    match reply {
        Ok(v) => v,
        Err(e) => {
            eprintln!("chaos worker: the checker failed ({what}): {e}");
            std::process::exit(4);
        }
    }
}

/// What the runner tells a worker on its command line.
pub struct Args {
    pub id: u64,
    /// Where the locks live: see `Deployment::target`.
    pub target: String,
    pub redlock_urls: Vec<String>,
    pub checker_url: String,
    pub until_unix_ms: u128,
    pub seed: u64,
    pub settings: Settings,
    /// Whether it runs deadlock tasks too, and how they order their names.
    pub deadlocks: deadlocks::Mode,
}

impl Args {
    pub fn to_argv(&self) -> Vec<String> {
        vec![
            "worker".into(),
            self.id.to_string(),
            self.target.clone(),
            self.redlock_urls.join(","),
            self.checker_url.clone(),
            self.until_unix_ms.to_string(),
            self.seed.to_string(),
            self.settings.lease.as_millis().to_string(),
            self.settings.response.as_millis().to_string(),
            self.settings.wait.as_millis().to_string(),
            self.settings.sync_replicas.to_string(),
            self.deadlocks.name().into(),
        ]
    }

    pub fn parse(argv: &[String]) -> Option<Self> {
        let ms = |s: &String| s.parse().ok().map(Duration::from_millis);
        Some(Self {
            id: argv.get(1)?.parse().ok()?,
            target: argv.get(2)?.clone(),
            redlock_urls: argv
                .get(3)?
                .split(',')
                .filter(|u| !u.is_empty())
                .map(str::to_owned)
                .collect(),
            checker_url: argv.get(4)?.clone(),
            until_unix_ms: argv.get(5)?.parse().ok()?,
            seed: argv.get(6)?.parse().ok()?,
            settings: Settings {
                lease: ms(argv.get(7)?)?,
                response: ms(argv.get(8)?)?,
                wait: ms(argv.get(9)?)?,
                sync_replicas: argv.get(10)?.parse().ok()?,
            },
            deadlocks: deadlocks::Mode::parse(argv.get(11)?)?,
        })
    }
}

/// A worker's process: exits 0 at its deadline; a panic or a failed start exits non-zero,
/// which the runner counts.
pub fn main(args: Args) {
    // The runner holds our stdin: when it dies, so do we.
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(3);
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(args));
}

async fn run(args: Args) {
    let deadline =
        Instant::now() + Duration::from_millis(args.until_unix_ms.saturating_sub(unix_ms()) as u64);
    let settings = args.settings;
    let tune = |config: Config| {
        config
            .watchdog_timeout(settings.lease)
            .response_timeout(settings.response)
            .connect_timeout(settings.response)
    };
    let Some((shape, lock_config)) = deployment::config(&args.target) else {
        eprintln!("chaos worker: bad target {}", args.target);
        std::process::exit(2);
    };
    // Named after the worker: a cycle across workers names each step's process by it.
    let mut lock_config = tune(lock_config).client_name(format!("chaos-w{}", args.id));
    if settings.sync_replicas > 0 {
        // WAIT must end before the response timeout.
        lock_config = lock_config.sync_replicas(settings.sync_replicas, settings.response / 2);
    }
    let cluster = shape == deployment::Shape::Cluster;
    // A fault may have a server down just now: keep trying until the deadline.
    let lock = start(lock_config.clone(), deadline).await;
    let mut red = Vec::new();
    for url in &args.redlock_urls {
        red.push(start(tune(Config::new(url)), deadline).await);
    }
    let (Some(lock), Some(red)) = (lock, red.into_iter().collect::<Option<Vec<_>>>()) else {
        return;
    };
    // redis-rs gives up on a reply after 500 ms by default. A worker frozen by the runner (or a
    // slow machine) would then miss the record of an entry that did happen: wait much longer.
    let patient = redis::AsyncConnectionConfig::new().set_response_timeout(Some(CHECKER_PATIENCE));
    let checker = redis::Client::open(args.checker_url.as_str())
        .expect("checker url")
        .get_multiplexed_async_connection_with_config(&patient)
        .await
        .expect("checker");
    // The process's beat: a stall of half a lease or more (a starved process on a loaded
    // machine) can let a hold expire unrenewed, as a freeze does; the checker excuses it.
    tokio::spawn({
        let (mut checker, worker) = (checker.clone(), args.id);
        let stall_ms = (settings.lease / 2).as_millis() as u64;
        async move {
            let mut beat = tokio::time::interval(checker::BEAT_EVERY);
            loop {
                beat.tick().await;
                let _: Result<i64, _> = checker::BEAT_SCRIPT
                    .arg(worker)
                    .arg(stall_ms)
                    .invoke_async(&mut checker)
                    .await;
            }
        }
    });
    let ctx = |task| Ctx {
        worker: args.id,
        task,
        lock: lock.clone(),
        red: red.clone(),
        lock_config: lock_config.clone(),
        cluster,
        checker: checker.clone(),
        settings,
        deadline,
        shutdown_due: task == 0,
        op: std::sync::Mutex::new("timed_try"),
    };
    let seed = |task: u64| Rng::new(args.seed ^ ((task + 1) * 0x9e37_79b9));
    let mut tasks: Vec<_> = (0..TASKS)
        .map(|task| tokio::spawn(ctx(task).run(seed(task))))
        .collect();
    // A candidate in every election: the worker's tasks after the lock takers.
    for (i, name) in leader_names().into_iter().enumerate() {
        let task = TASKS + i as u64;
        tasks.push(tokio::spawn(ctx(task).lead(name, seed(task))));
    }
    // The deadlock tasks, after the candidates: each is a tokio task of its own, so each is an
    // owner of its own for lockman's deadlock detection.
    if args.deadlocks != deadlocks::Mode::Off {
        let stop = deadlocks::watch_stop(checker.clone());
        for i in 0..deadlocks::TASKS {
            let task = TASKS + LEADER_NAMES + i;
            let dl = deadlocks::Task {
                worker: args.id,
                mode: args.deadlocks,
                lock: lock.clone(),
                checker: checker.clone(),
                deadline,
                stop: stop.clone(),
                missed_after: deadlocks::missed_after(shape),
                release_within: settings.response * 4 + Duration::from_secs(5),
            };
            tasks.push(tokio::spawn(dl.run(seed(task))));
        }
    }
    for task in tasks {
        if task.await.is_err() {
            eprintln!("chaos worker {}: a task panicked", args.id);
            std::process::exit(5);
        }
    }
    // Every guard is gone now, and the managers still run: the runner checks that Redis holds
    // nothing (a hold leaked and kept alive by a watchdog would show there), then lets us stop.
    let mut checker = checker;
    let _: () = must(
        "idle",
        redis::cmd("SADD")
            .arg("idle")
            .arg(args.id)
            .query_async(&mut checker)
            .await,
    );
    let patience = Instant::now() + IDLE_PATIENCE;
    while Instant::now() < patience {
        let released: bool = must(
            "release",
            redis::cmd("EXISTS")
                .arg("release")
                .query_async(&mut checker)
                .await,
        );
        if released {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    lock.shutdown().await;
    for m in red {
        m.shutdown().await;
    }
}

async fn start(config: Config, deadline: Instant) -> Option<LockManager> {
    while Instant::now() < deadline {
        match LockManager::start(config.clone()).await {
            Ok(m) => return Some(m),
            Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("worker cannot start: {e}"),
        }
    }
    None
}

struct Ctx {
    worker: u64,
    task: u64,
    lock: LockManager,
    red: Vec<LockManager>,
    /// For the short-lived managers shut down while their tasks acquire.
    lock_config: Config,
    /// The locks live in a Redis Cluster: RedLock's members are names on its shards.
    cluster: bool,
    checker: MultiplexedConnection,
    settings: Settings,
    deadline: Instant,
    /// The next reentrant-lock attempt is a manager shut down while acquiring.
    shutdown_due: bool,
    /// How the last attempt called for its lock (`acquire`, `try`, `timed_try`), for the
    /// history.
    op: std::sync::Mutex<&'static str>,
}

enum Held {
    Guard(LockGuard),
    Fenced(FencedGuard),
    Composite(CompositeGuard),
    Permit(PermitGuard),
}

impl Held {
    fn is_lost(&self) -> bool {
        match self {
            Held::Guard(g) => g.is_lost(),
            Held::Fenced(g) => g.is_lost(),
            Held::Composite(g) => g.is_lost(),
            Held::Permit(g) => g.is_lost(),
        }
    }

    async fn release(self) -> Result<(), LockError> {
        match self {
            Held::Guard(g) => g.release().await,
            Held::Fenced(g) => g.release().await,
            Held::Composite(g) => g.release().await,
            Held::Permit(g) => g.release().await,
        }
    }
}

impl Ctx {
    async fn run(mut self, mut rng: Rng) {
        let mut seq = 0u64;
        while Instant::now() < self.deadline {
            seq += 1;
            let kind = Kind::ALL[rng.below(Kind::ALL.len() as u64) as usize];
            let hold = format!("{}:{}:{seq}", self.worker, self.task);
            let names = self.names(kind, &mut rng);
            let counts = self.once(kind, &hold, &names, &mut rng).await;
            let counts: Vec<_> = counts.into_iter().filter(|(_, n)| *n > 0).collect();
            if counts.is_empty() {
                continue;
            }
            let mut pipe = redis::pipe();
            for (field, n) in &counts {
                pipe.hincr("counts", field, *n).ignore();
            }
            let _: () = must("counts", pipe.query_async(&mut self.checker).await);
        }
    }

    fn names(&self, kind: Kind, rng: &mut Rng) -> Vec<String> {
        let family = kind.family();
        match kind {
            // Two of four names, in random order: MultiLock must cope with any order.
            Kind::Multi => {
                let a = rng.below(4);
                let b = (a + 1 + rng.below(3)) % 4;
                vec![format!("chaos:multi:{a}"), format!("chaos:multi:{b}")]
            }
            // Two of four members of the group `chaos:group`, each checked as a name.
            Kind::Group => {
                let a = rng.below(4);
                let b = (a + 1 + rng.below(3)) % 4;
                vec![format!("chaos:group:{a}"), format!("chaos:group:{b}")]
            }
            _ => vec![format!("chaos:{family}:{}", rng.below(NAMES))],
        }
    }

    /// The epoch that a data loss under this kind's locks moves on.
    fn epoch_key(&self, kind: Kind) -> &'static str {
        match kind {
            Kind::RedLock if !self.cluster => "epoch:redlock",
            _ => "epoch:lock",
        }
    }

    /// One attempt: acquire, enter, work, leave, release. Returns the counters it moved.
    async fn once(
        &mut self,
        kind: Kind,
        hold: &str,
        names: &[String],
        rng: &mut Rng,
    ) -> Vec<(String, i64)> {
        let mut counts: Vec<(String, i64)> = Vec::new();
        macro_rules! count {
            ($field:expr) => {
                counts.push(($field, 1))
            };
        }
        let epoch_key = self.epoch_key(kind);
        // The epoch and the checker's clock before acquiring, and whether the runner has seen
        // enough.
        let ((epoch, stop), time): ((Option<u64>, Option<u8>), (u64, u64)) = must(
            "epoch",
            redis::pipe()
                .cmd("MGET")
                .arg(epoch_key)
                .arg("stop")
                .cmd("TIME")
                .query_async(&mut self.checker)
                .await,
        );
        let began = checker::clock_ms(time);
        if stop.is_some() {
            self.deadline = Instant::now();
            return counts;
        }
        let wait = self.settings.wait;
        if kind == Kind::Latch {
            counts.extend(
                self.latch_round(hold, epoch.unwrap_or(0), epoch_key, began * 1000)
                    .await,
            );
            return counts;
        }
        // Each worker's first reentrant-lock attempt, and one in a hundred after it: a short
        // run sees it too.
        if kind == Kind::Lock && (std::mem::take(&mut self.shutdown_due) || rng.below(100) == 0) {
            counts.extend(self.shut_down_while_acquiring(&names[0], rng).await);
            return counts;
        }
        // A fair acquire is on the checker while its call is in progress, under its handle's
        // holder id (what the queue holds): the heads' sampler (`heads.rs`) tells a live head
        // of the queue from a dead one by it. One fair acquire in three waits longer than the
        // sampler's bound, so that a live head left unserved on a free lock lasts long enough
        // to be seen; the worker's usual wait ends before the bound.
        let fair = match kind {
            Kind::Fair => Some((*self.lock.fair_lock(names[0].as_str())).clone()),
            Kind::NonReentrantFair => {
                Some((*self.lock.non_reentrant_fair_lock(names[0].as_str())).clone())
            }
            _ => None,
        };
        let wait = match fair {
            Some(_) if rng.below(3) == 0 => patient_fair_wait(),
            _ => wait,
        };
        let holder = fair.as_ref().map(Lock::holder_id);
        if let Some(holder) = &holder {
            let _: String = must(
                "waiting",
                checker::WAIT_BEGIN_SCRIPT
                    .arg(&names[0])
                    .arg(holder)
                    .arg(self.worker)
                    .invoke_async(&mut self.checker)
                    .await,
            );
        }
        let acquire = self.acquire(kind, names, wait, fair, rng, &mut counts);
        let held = tokio::time::timeout(wait + STUCK_AFTER, acquire).await;
        if let Some(holder) = &holder {
            let _: i64 = must(
                "waited",
                checker::WAIT_END_SCRIPT
                    .arg(&names[0])
                    .arg(holder)
                    .invoke_async(&mut self.checker)
                    .await,
            );
        }
        let invoke_us = began * 1000;
        let op = *self.op.lock().unwrap_or_else(|p| p.into_inner());
        let (worker, task) = (self.worker, self.task);
        // Every name the attempt takes (a MultiLock's two), for the history.
        let record = |outcome: &'static str, token: Option<u64>, error: Option<String>| {
            names
                .iter()
                .map(|name| Record {
                    kind: kind.name(),
                    name,
                    worker,
                    task,
                    hold,
                    op,
                    outcome,
                    invoke_us,
                    token,
                    error: error.clone(),
                })
                .collect::<Vec<_>>()
        };
        let failed = match &held {
            Err(_) => Some(("stuck", None)),
            Ok(Err(e)) => Some(("error", Some(e.to_string()))),
            Ok(Ok(None)) if op == "try" => Some(("busy", None)),
            Ok(Ok(None)) => Some(("timed_out", None)),
            Ok(Ok(Some(_))) => None,
        };
        if let Some((outcome, error)) = failed {
            for r in record(outcome, None, error) {
                r.send(&mut self.checker, None).await;
            }
        }
        let held = match held {
            Err(_) => {
                count!(format!("stuck:{}", kind.name()));
                return counts;
            }
            // Too few replicas acknowledged in time (`sync_replicas`): undone, and counted apart.
            Ok(Err(LockError::ReplicaSync { .. })) => {
                count!(format!("replica_sync:{}", kind.name()));
                tokio::time::sleep(Duration::from_millis(50)).await;
                return counts;
            }
            Ok(Err(e)) => {
                count!(format!("acquire_error:{}", kind.name()));
                if matches!(e, LockError::Deadlock { .. }) {
                    // Beside the deadlock tasks' own (`deadlocks.rs`): these tasks wait holding
                    // nothing (a MultiLock or RedLock lets its members go before it waits for
                    // one; a nested hold is a single try), so none is expected.
                    count!(format!("deadlock:elsewhere:{}", kind.name()));
                }
                self.note_error(kind, "acquire", &e).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                return counts;
            }
            Ok(Ok(None)) => {
                count!(format!("timed_out:{}", kind.name()));
                return counts;
            }
            Ok(Ok(Some(held))) => held,
        };
        let token = match &held {
            Held::Fenced(g) => g.token() as i64,
            _ => -1,
        };
        let occ: Vec<String> = names.iter().map(|n| format!("occ:{n}")).collect();
        let (_, _, entered): (i64, i64, String) = must(
            "enter",
            checker::ENTER_SCRIPT
                .key(&occ)
                .arg(kind.name())
                .arg(hold)
                .arg(self.worker)
                .arg(kind.mode())
                .arg(epoch_key)
                .arg(epoch.unwrap_or(0))
                .arg(token)
                .arg(&names[0])
                .arg(began)
                .arg(if kind == Kind::Semaphore {
                    SEMAPHORE_PERMITS
                } else {
                    0
                })
                .invoke_async(&mut self.checker)
                .await,
        );
        let token = (token >= 0).then_some(token as u64);
        for r in record("granted", token, None) {
            r.send(&mut self.checker, Some(&entered)).await;
        }
        let token = token.map_or(-1, |t| t as i64);
        // The critical section: mostly short, now and then long enough to be frozen inside.
        // A hold whose twin was just released stays inside long enough, now and then, for a
        // background correction of the holder's count (what the removed direct path did) to
        // happen while it is inside.
        let twinned = counts.iter().any(|(k, _)| k == "pattern:twin_released");
        let work = match rng.below(50) {
            0..=4 if twinned => Duration::from_millis(100 + rng.below(500)),
            0 => Duration::from_millis(20 + rng.below(150)),
            _ => Duration::from_micros(rng.below(1000)),
        };
        tokio::time::sleep(work).await;
        if kind.mode() == "x" || kind.mode() == "w" {
            self.lost_update(&names[0], token, rng).await;
        }
        if token >= 0 {
            let _: i64 = must(
                "fenced write",
                checker::FENCED_WRITE_SCRIPT
                    .arg(&names[0])
                    .arg(token)
                    .arg(hold)
                    .arg(self.worker)
                    .arg(&entered)
                    .arg(began)
                    .arg(epoch.unwrap_or(0))
                    .invoke_async(&mut self.checker)
                    .await,
            );
        }
        let left: String = must(
            "exit",
            checker::EXIT_SCRIPT
                .key(&occ)
                .arg(hold)
                .invoke_async(&mut self.checker)
                .await,
        );
        let lost_first = held.is_lost();
        if lost_first {
            // A loss reported while Redis still has the hold is a false one (the watch's or a
            // renewal's mistake): counted, read before the release touches anything.
            let guard = match &held {
                Held::Guard(g) => Some((g.name().to_owned(), g.holder_id().to_owned())),
                Held::Fenced(g) => Some((g.name().to_owned(), g.holder_id().to_owned())),
                _ => None,
            };
            if let Some((name, holder)) = guard
                && let Ok(Ok(info)) =
                    tokio::time::timeout(self.settings.response * 4, self.lock.describe(&name))
                        .await
            {
                if info.holders.iter().any(|h| h.holder == holder) {
                    count!("lost:still_held".into());
                } else {
                    count!("lost:gone_in_redis".into());
                }
            }
        }
        let release = tokio::time::timeout(
            self.settings.response * 4 + Duration::from_secs(5),
            held.release(),
        )
        .await;
        let outcome = match (lost_first, &release) {
            (_, Err(_)) => "stuck",
            (true, _) | (false, Ok(Err(LockError::NotHeld { .. }))) => "lost",
            (false, Ok(Ok(()))) => "ok",
            (false, Ok(Err(_))) => "error",
        };
        for name in names {
            Record {
                kind: kind.name(),
                name,
                worker: self.worker,
                task: self.task,
                hold,
                op: "release",
                outcome,
                invoke_us: left.parse().unwrap_or(0),
                token: None,
                error: None,
            }
            .send(&mut self.checker, None)
            .await;
        }
        match (lost_first, release) {
            (_, Err(_)) => count!(format!("stuck_release:{}", kind.name())),
            (true, Ok(Ok(()))) => count!("lost:reported_but_released".into()),
            (true, Ok(Err(_))) => count!("lost:reported".into()),
            (false, Ok(Ok(()))) => {}
            (false, Ok(Err(LockError::NotHeld { .. }))) => count!("lost:found_at_release".into()),
            (false, Ok(Err(e))) => {
                count!(format!("release_error:{}", kind.name()));
                self.note_error(kind, "release", &e).await;
            }
        }
        counts
    }

    async fn acquire(
        &self,
        kind: Kind,
        names: &[String],
        wait: Duration,
        fair: Option<Lock>,
        rng: &mut Rng,
        counts: &mut Vec<(String, i64)>,
    ) -> Result<Option<Held>, LockError> {
        let name = names[0].as_str();
        let guard = |g: Option<LockGuard>| g.map(Held::Guard);
        self.set_op("timed_try");
        Ok(match kind {
            Kind::Lock => guard(
                self.take_lock(self.lock.lock(name), wait, rng, counts)
                    .await?,
            ),
            Kind::Fair => {
                let lock = fair.unwrap_or_else(|| (*self.lock.fair_lock(name)).clone());
                guard(self.take_lock(lock, wait, rng, counts).await?)
            }
            Kind::NonReentrant => guard(
                self.take_lock(self.lock.non_reentrant_lock(name), wait, rng, counts)
                    .await?,
            ),
            Kind::Spin => guard(
                self.take_lock(self.lock.spin_lock(name), wait, rng, counts)
                    .await?,
            ),
            Kind::NonReentrantFair => {
                let lock =
                    fair.unwrap_or_else(|| (*self.lock.non_reentrant_fair_lock(name)).clone());
                guard(self.take_lock(lock, wait, rng, counts).await?)
            }
            Kind::Read => {
                let lock = (*self.lock.read_write_lock(name).read()).clone();
                guard(self.take_lock(lock, wait, rng, counts).await?)
            }
            Kind::Write => {
                let lock = (*self.lock.read_write_lock(name).write()).clone();
                guard(self.take_lock(lock, wait, rng, counts).await?)
            }
            Kind::Group => {
                let members = names.iter().filter_map(|n| n.rsplit(':').next());
                let lock = (*self.lock.group_lock(GROUP, members)?).clone();
                guard(self.take_lock(lock, wait, rng, counts).await?)
            }
            Kind::Fenced => self
                .lock
                .fenced_lock(name)
                .try_acquire_for(wait)
                .await?
                .map(Held::Fenced),
            Kind::Multi => {
                // A bounded wait, or an `acquire()` (with a lease or the watchdog) cancelled at
                // the wait's end.
                let multi =
                    MultiLock::new(names.iter().map(|n| self.lock.lock(n.as_str())).collect());
                let how = rng.below(3);
                if how > 0 {
                    self.set_op("acquire");
                }
                let held = match how {
                    0 => multi.try_acquire_for(wait).await?,
                    1 => match tokio::time::timeout(wait, multi.acquire()).await {
                        Ok(held) => Some(held?),
                        Err(_) => None,
                    },
                    _ => {
                        let lease = self.settings.lease;
                        match tokio::time::timeout(wait, multi.acquire_with_lease(lease)).await {
                            Ok(held) => Some(held?),
                            Err(_) => None,
                        }
                    }
                };
                held.map(Held::Composite)
            }
            Kind::Semaphore => {
                // Set (again, after a data loss) by whoever finds it missing; then a renewed
                // permit or one with a lease, with a bounded wait or a cancelled acquire.
                let sem = self.lock.permit_semaphore(name);
                sem.try_set_permits(SEMAPHORE_PERMITS).await?;
                let lease = self.settings.lease;
                let how = rng.below(3);
                if how == 2 {
                    self.set_op("acquire");
                }
                let held = match how {
                    0 => sem.try_acquire_for(1, wait).await?,
                    1 => sem.try_acquire_with_lease(1, wait, lease).await?,
                    _ => match tokio::time::timeout(wait, sem.acquire(1)).await {
                        Ok(held) => Some(held?),
                        Err(_) => None,
                    },
                };
                held.map(Held::Permit)
            }
            Kind::Latch => None,
            Kind::RedLock => {
                let members = match self.cluster {
                    // Three names, most likely on three shards.
                    true => redlock_members(name)
                        .iter()
                        .map(|n| self.lock.lock(n.as_str()))
                        .collect(),
                    false => self.red.iter().map(|m| m.lock(name)).collect(),
                };
                RedLock::new(members)
                    .try_acquire_for(wait)
                    .await?
                    .map(Held::Composite)
            }
        })
    }

    /// A lock (reentrant, fair, read, write, non-reentrant or non-reentrant fair) taken the ways
    /// users take one: a bounded wait, one attempt, an `acquire()` cancelled at the wait's end,
    /// with a lease or the watchdog; now and then two holds of one holder (nested on one handle,
    /// or two clones of it at once, mixing a lease and the watchdog) of which one is released or
    /// dropped before the critical section, which then runs on the other alone. A re-entry that
    /// is refused, or a hold that reports itself lost right after its twin's release, is
    /// counted. A non-reentrant lock must refuse the second hold (`AlreadyHeld`, counted as
    /// such): a second hold it granted while the first was live is counted as a violation of
    /// its rule (one granted after the first was found gone is the first's loss, counted apart),
    /// and released.
    async fn take_lock(
        &self,
        lock: Lock,
        wait: Duration,
        rng: &mut Rng,
        counts: &mut Vec<(String, i64)>,
    ) -> Result<Option<LockGuard>, LockError> {
        let lease = self.settings.lease;
        let non_reentrant = lock.kind().is_non_reentrant();
        // A non-reentrant lock's refusal of a clone's hold while the other clone holds:
        // counted, and no hold.
        let refused = |res: Result<Option<LockGuard>, LockError>,
                       counts: &mut Vec<(String, i64)>| match res {
            Err(LockError::AlreadyHeld { .. }) if non_reentrant => {
                counts.push(("pattern:non_reentrant_refused".into(), 1));
                Ok(None)
            }
            other => other,
        };
        let first = Take::pick(rng, lease);
        self.set_op(match first.how {
            How::Bounded => "timed_try",
            How::Once => "try",
            How::Cancelled => "acquire",
        });
        let (kept, twin) = match rng.below(10) {
            0..=5 => (first.run(&lock, wait).await?, None),
            6..=7 => {
                counts.push(("pattern:nested".into(), 1));
                let Some(outer) = first.run(&lock, wait).await? else {
                    return Ok(None);
                };
                // The other mode inside: a lease inside a watchdog hold, or the reverse.
                let inner = match first.lease {
                    Some(_) => lock.try_acquire().await,
                    None => lock.try_acquire_with_lease(Duration::ZERO, lease).await,
                };
                match inner {
                    Err(LockError::AlreadyHeld { .. }) if non_reentrant => {
                        counts.push(("pattern:non_reentrant_refused".into(), 1));
                        (Some(outer), None)
                    }
                    Ok(Some(inner)) => (Some(outer), Some(inner)),
                    Ok(None) => {
                        counts.push(("pattern:reentry_refused".into(), 1));
                        (Some(outer), None)
                    }
                    Err(_) => (Some(outer), None),
                }
            }
            _ => {
                counts.push(("pattern:clones".into(), 1));
                let clone = lock.clone();
                let second = Take::pick(rng, lease);
                let (a, b) = tokio::join!(first.run(&lock, wait), second.run(&clone, wait));
                let (a, b) = (refused(a, counts), refused(b, counts));
                match (a, b) {
                    (Ok(Some(a)), Ok(Some(b))) => (Some(a), Some(b)),
                    (Ok(Some(g)), _) | (_, Ok(Some(g))) => (Some(g), None),
                    (Err(e), _) | (_, Err(e)) => return Err(e),
                    _ => (None, None),
                }
            }
        };
        let (mut kept, mut twin) = match (kept, twin) {
            (Some(kept), Some(twin)) => (kept, twin),
            (kept, _) => return Ok(kept),
        };
        if non_reentrant {
            if kept.is_lost() || twin.is_lost() {
                // The first hold was gone from Redis (a failover, a data loss) and the second
                // found it so: the first is told lost, and the second is a new hold.
                counts.push(("pattern:non_reentrant_lost_then_new".into(), 1));
            } else {
                // Two live holds of one holder at once: what a non-reentrant lock must never
                // grant.
                counts.push(("non_reentrant:reentered".into(), 1));
            }
        }
        if rng.below(2) == 0 {
            std::mem::swap(&mut kept, &mut twin);
        }
        // The twin goes first, released or dropped; the kept hold must still exclude others.
        counts.push(("pattern:twin_released".into(), 1));
        let lost_before = kept.is_lost();
        if rng.below(2) == 0 {
            let _ = twin.release().await;
        } else {
            drop(twin);
            tokio::task::yield_now().await;
        }
        if !lost_before && kept.is_lost() {
            counts.push(("pattern:lost_with_twin".into(), 1));
        }
        Ok(Some(kept))
    }

    /// A manager of its own, shut down while two of its tasks acquire (one `acquire()`, one
    /// bounded wait): each must end with `Shutdown`, no guard, or a guard that says it is lost,
    /// and the holder must hold nothing in Redis once `shutdown` returned.
    async fn shut_down_while_acquiring(&self, name: &str, rng: &mut Rng) -> Vec<(String, i64)> {
        let mut counts = vec![("pattern:shutdown".to_string(), 1)];
        let Ok(manager) = LockManager::start(self.lock_config.clone()).await else {
            return counts;
        };
        let lock = manager.lock(name);
        let holder = lock.holder_id();
        let wait = self.settings.wait;
        let (a, b) = (lock.clone(), lock.clone());
        let first = tokio::spawn(async move { a.acquire().await.map(Some) });
        let second = tokio::spawn(async move { b.try_acquire_for(wait).await });
        tokio::time::sleep(Duration::from_millis(rng.below(40))).await;
        manager.shutdown().await;
        for task in [first, second] {
            match task.await {
                Ok(Ok(Some(g))) if !g.is_lost() => {
                    counts.push(("shutdown:live_guard".into(), 1));
                }
                Ok(Ok(_) | Err(LockError::Shutdown)) => {}
                Ok(Err(_)) => counts.push(("shutdown:other_error".into(), 1)),
                Err(_) => counts.push(("shutdown:task_panicked".into(), 1)),
            }
        }
        // What shutdown left in Redis for this holder (it releases every hold it knows).
        if let Ok(info) = self.lock.describe(name).await
            && info.holders.iter().any(|h| h.holder == holder)
        {
            counts.push(("shutdown:left_held".into(), 1));
        }
        counts
    }

    /// How the attempt under way calls for its lock, for the history.
    fn set_op(&self, op: &'static str) {
        *self.op.lock().unwrap_or_else(|p| p.into_inner()) = op;
    }

    /// The lost-update workload, inside a hold of an exclusive kind: read a counter on the
    /// checker, wait a random moment, write it plus one; plainly, and (a fenced hold) through
    /// the fenced register with the hold's token (see `checker::FENCED_COUNTER_READ`). The
    /// runner compares each counter with the writes made: the difference is updates lost, a
    /// count that trusts no clock and no checker.
    async fn lost_update(&mut self, name: &str, token: i64, rng: &mut Rng) {
        let key = format!("counter:{name}");
        // Mostly a moment, one hold in ten long enough for a fault to land between the read
        // and the write.
        let pause = match rng.below(10) {
            0 => Duration::from_millis(50 + rng.below(450)),
            _ => Duration::from_micros(rng.below(2000)),
        };
        let read: Option<u64> = must(
            "counter read",
            redis::cmd("GET")
                .arg(&key)
                .query_async(&mut self.checker)
                .await,
        );
        tokio::time::sleep(pause).await;
        let _: () = must(
            "counter write",
            redis::pipe()
                .set(&key, read.unwrap_or(0) + 1)
                .ignore()
                .hincr("cwrites", name, 1)
                .ignore()
                .query_async(&mut self.checker)
                .await,
        );
        if token < 0 {
            return;
        }
        let read: i64 = must(
            "fenced counter read",
            checker::FENCED_COUNTER_READ_SCRIPT
                .arg(name)
                .arg(token)
                .invoke_async(&mut self.checker)
                .await,
        );
        let written: i64 = match read {
            -1 => -1,
            read => {
                tokio::time::sleep(pause).await;
                must(
                    "fenced counter write",
                    checker::FENCED_COUNTER_WRITE_SCRIPT
                        .arg(name)
                        .arg(token)
                        .arg(read + 1)
                        .invoke_async(&mut self.checker)
                        .await,
                )
            }
        };
        if written < 0 {
            self.count("counter:fenced:refused").await;
        }
    }

    async fn note_error(&mut self, kind: Kind, op: &str, e: &LockError) {
        self.note_error_text(&format!("{} {op}", kind.name()), e)
            .await;
    }

    async fn note_error_text(&mut self, what: &str, e: &LockError) {
        let _: () = must(
            "errors",
            redis::pipe()
                .rpush("errors", format!("{what}: {e}"))
                .ignore()
                .ltrim("errors", -200, -1)
                .ignore()
                .query_async(&mut self.checker)
                .await,
        );
    }
}

impl Ctx {
    /// A candidate in the election `name`, again and again until the deadline: it campaigns
    /// with a bounded wait; once it leads it records its term on the checker (entering the
    /// name as an exclusive hold does, so that two leaders at once are a violation explained
    /// or not as two holders are), makes fenced writes with its term through
    /// `Leadership::fenced_set` (each accepted one logged on the checker between two ticks of
    /// its sequence, for the audit), and resigns after a random term, unless it lost the lead
    /// first (in `scope`, or by its lost signal).
    async fn lead(mut self, name: String, mut rng: Rng) {
        let election = self.lock.election(name.as_str());
        let occ = [format!("occ:{name}")];
        let data = format!("{{{name}}}:data");
        let mut seq = 0u64;
        while Instant::now() < self.deadline {
            seq += 1;
            let hold = format!("{}:{}:{seq}", self.worker, self.task);
            let ((epoch, stop), time): ((Option<u64>, Option<u8>), (u64, u64)) = must(
                "epoch",
                redis::pipe()
                    .cmd("MGET")
                    .arg("epoch:lock")
                    .arg("stop")
                    .cmd("TIME")
                    .query_async(&mut self.checker)
                    .await,
            );
            if stop.is_some() {
                break;
            }
            let began = checker::clock_ms(time);
            let wait = self.settings.wait;
            let campaign =
                tokio::time::timeout(wait + STUCK_AFTER, election.try_campaign_for(wait));
            let campaign = campaign.await;
            let (worker, task) = (self.worker, self.task);
            let record =
                |outcome: &'static str, token: Option<u64>, error: Option<String>| Record {
                    kind: "leader",
                    name: &name,
                    worker,
                    task,
                    hold: &hold,
                    op: "timed_try",
                    outcome,
                    invoke_us: began * 1000,
                    token,
                    error,
                };
            let failed = match &campaign {
                Err(_) => Some(record("stuck", None, None)),
                Ok(Ok(None)) => Some(record("timed_out", None, None)),
                Ok(Err(e)) => Some(record("error", None, Some(e.to_string()))),
                Ok(Ok(Some(_))) => None,
            };
            if let Some(r) = failed {
                r.send(&mut self.checker, None).await;
            }
            let lead = match campaign {
                Err(_) => {
                    self.count("stuck:leader").await;
                    continue;
                }
                Ok(Ok(Some(lead))) => lead,
                Ok(Ok(None)) => {
                    self.count("timed_out:leader").await;
                    continue;
                }
                Ok(Err(e)) => {
                    self.count("acquire_error:leader").await;
                    self.note_error_text("leader campaign", &e).await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let term = lead.term();
            let (_, _, entered): (i64, i64, String) = must(
                "enter",
                checker::ENTER_SCRIPT
                    .key(&occ)
                    .arg("leader")
                    .arg(&hold)
                    .arg(self.worker)
                    .arg("x")
                    .arg("epoch:lock")
                    .arg(epoch.unwrap_or(0))
                    .arg(-1)
                    .arg(&name)
                    .arg(began)
                    .arg(0)
                    .invoke_async(&mut self.checker)
                    .await,
            );
            record("granted", Some(term), None)
                .send(&mut self.checker, Some(&entered))
                .await;
            let _: () = must(
                "term",
                redis::cmd("HSET")
                    .arg(format!("leading:{name}"))
                    .arg(&hold)
                    .arg(format!("{} {entered}", self.worker))
                    .query_async(&mut self.checker)
                    .await,
            );
            // A term is a number of writes, not a time: a leader frozen in office writes on
            // when it wakes, as a process that was paused would.
            let term_writes = 2 + rng.below(MOST_WRITES);
            let mut writes = Vec::new();
            // Half the terms run their work in `scope`, which stops it once the lead is lost
            // or about to expire unrenewed; the others only look at the lost signal between
            // writes, as code that does not use `scope` would: a leader that wakes from a
            // freeze writes at once, and only the fence stands in the way of its stale term.
            let scoped = rng.below(2) == 0;
            let work = async {
                for _ in 0..term_writes {
                    if Instant::now() >= self.deadline {
                        break;
                    }
                    if !scoped && lead.is_lost() {
                        return Err(LockError::HoldLost { name: name.clone() });
                    }
                    writes.push(self.fenced_write(&lead, &name, &data, term, &hold).await);
                    let pause = rng.below(WRITE_EVERY.as_millis() as u64);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                Ok(())
            };
            let led = match scoped {
                true => lead.scope(work).await.and_then(|led| led),
                false => work.await,
            };
            let reason = match led {
                Ok(()) => "resigned",
                Err(LockError::HoldExpiring { .. }) => "expiring",
                Err(_) => "lost",
            };
            let left: String = must(
                "leave",
                checker::LEAVE_SCRIPT
                    .key(&occ)
                    .arg(&hold)
                    .arg(&name)
                    .arg(reason)
                    .invoke_async(&mut self.checker)
                    .await,
            );
            let resigned = tokio::time::timeout(
                self.settings.response * 4 + Duration::from_secs(5),
                lead.resign(),
            )
            .await;
            Record {
                op: "release",
                outcome: match &resigned {
                    Err(_) => "stuck",
                    Ok(Ok(())) => "ok",
                    Ok(Err(LockError::NotHeld { .. })) => "lost",
                    Ok(Err(_)) => "error",
                },
                invoke_us: left.parse().unwrap_or(0),
                ..record("", None, None)
            }
            .send(&mut self.checker, None)
            .await;
            let mut counts = writes;
            counts.push(format!("leader:{reason}"));
            match resigned {
                Err(_) => counts.push("stuck_release:leader".into()),
                Ok(Ok(())) | Ok(Err(LockError::NotHeld { .. })) => {}
                Ok(Err(e)) => {
                    counts.push("release_error:leader".into());
                    self.note_error_text("leader resign", &e).await;
                }
            }
            let mut pipe = redis::pipe();
            for field in &counts {
                pipe.hincr("counts", field, 1).ignore();
            }
            let _: () = must("counts", pipe.query_async(&mut self.checker).await);
            // Another candidate's turn, now and then.
            tokio::time::sleep(Duration::from_millis(rng.below(200))).await;
        }
    }

    /// One fenced write of the leader with `term` to `data`: its start is a tick of the
    /// checker's sequence (with the epoch and whether a failover is under way), and an
    /// accepted write is logged with a second tick at its end, so that the audit can tell a
    /// write that began after another had been accepted. Returns the counter it moves.
    async fn fenced_write(
        &mut self,
        lead: &Leadership,
        name: &str,
        data: &str,
        term: u64,
        hold: &str,
    ) -> String {
        let (start, epoch, window): (u64, Option<u64>, Option<String>) = must(
            "write start",
            redis::pipe()
                .atomic()
                .incr("seq", 1)
                .get("epoch:lock")
                .get("window:epoch:lock")
                .query_async(&mut self.checker)
                .await,
        );
        match lead.fenced_set(data, format!("{term} {hold}")).await {
            Ok(true) => {
                let _: i64 = must(
                    "write",
                    checker::LEADER_WRITE_SCRIPT
                        .arg(name)
                        .arg(term)
                        .arg(start)
                        .arg(epoch.unwrap_or(0))
                        .arg(u8::from(window.is_some()))
                        .arg(hold)
                        .invoke_async(&mut self.checker)
                        .await,
                );
                "leader_write:accepted".into()
            }
            Ok(false) => "leader_write:refused".into(),
            Err(_) => "leader_write:error".into(),
        }
    }

    async fn count(&mut self, field: &str) {
        let _: () = must(
            "counts",
            redis::cmd("HINCRBY")
                .arg("counts")
                .arg(field)
                .arg(1)
                .query_async(&mut self.checker)
                .await,
        );
    }
}

impl Ctx {
    /// A count-down latch round on a latch of its own: set 2, a waiting task, two count-downs.
    /// The waiter must open, and not before the second count-down was sent: opening early is a
    /// violation, explained when the epoch moved on (a data loss deleted the count) or a
    /// failover is under way. Each call goes into the history too (`set_count`, `await`,
    /// `count_down`), for the latch's model in `linear.rs`: a call's `invoke` is the checker's
    /// clock read before it was made (`began_us`; the wait's, just after the set's record
    /// completed; a count-down's, read just before it).
    async fn latch_round(
        &mut self,
        hold: &str,
        epoch: u64,
        epoch_key: &str,
        began_us: u64,
    ) -> Vec<(String, i64)> {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let name = format!("chaos:latch:{hold}");
        let latch = self.lock.count_down_latch(name.as_str());
        let wait = self.settings.wait;
        let (worker, task) = (self.worker, self.task);
        let record = |op: &'static str, outcome: &'static str, invoke_us: u64, error| Record {
            kind: Kind::Latch.name(),
            name: &name,
            worker,
            task,
            hold,
            op,
            outcome,
            invoke_us,
            token: None,
            error,
        };
        // The invoke of the call after a record: the record's completion plus 1 µs, so that the
        // two do not touch (touching intervals count as concurrent) — the call is made after
        // the record's reply came back, more than a microsecond after the checker read its
        // clock. 0, the widest interval, if the time were ever unreadable.
        let us = |t: &str| t.parse::<u64>().map_or(0, |t| t + 1);
        let outcome = |what: &str| vec![(format!("{what}:latch"), 1)];
        let set = latch.try_set_count(2).await;
        let (what, error) = match &set {
            Ok(true) => ("set", None),
            Ok(false) => ("busy", None),
            Err(e) => ("error", Some(e.to_string())),
        };
        let last = record("set_count", what, began_us, error)
            .send_with(&mut self.checker, None, &[("count", 2)])
            .await;
        match set {
            Ok(true) => {}
            Ok(false) => return outcome("acquire_error"),
            Err(LockError::ReplicaSync { .. }) => return outcome("replica_sync"),
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                return outcome("acquire_error");
            }
        }
        let second_sent = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (latch, second_sent) = (latch.clone(), second_sent.clone());
            let mut checker = self.checker.clone();
            let (name, hold) = (name.clone(), hold.to_owned());
            let invoke_us = us(&last);
            tokio::spawn(async move {
                let opened = latch.wait_for(wait + STUCK_AFTER).await;
                let after_second = second_sent.load(Ordering::SeqCst);
                let (what, error) = match &opened {
                    Ok(true) => ("opened", None),
                    Ok(false) => ("timed_out", None),
                    Err(e) => ("error", Some(e.to_string())),
                };
                Record {
                    kind: Kind::Latch.name(),
                    name: &name,
                    worker,
                    task,
                    hold: &hold,
                    op: "await",
                    outcome: what,
                    invoke_us,
                    token: None,
                    error,
                }
                .send(&mut checker, None)
                .await;
                (opened, after_second)
            })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        let invoke_us = self.checker_now_us().await;
        let first = latch.count_down().await;
        self.latch_counted(record("count_down", "ok", invoke_us, None), &first)
            .await;
        // Long enough for the record of a waiter that opened at the first count-down (too
        // early) to reach the checker before the second begins: the history then shows the
        // open with the count still 1 (a few ms were not enough on a loaded machine).
        tokio::time::sleep(LATCH_GAP).await;
        second_sent.store(true, Ordering::SeqCst);
        let invoke_us = self.checker_now_us().await;
        let second = latch.count_down().await;
        self.latch_counted(record("count_down", "ok", invoke_us, None), &second)
            .await;
        let Ok((opened, after_second)) = waiter.await else {
            return outcome("stuck");
        };
        let mut counts = Vec::new();
        match opened {
            Ok(true) if !after_second => {
                // Opened before the count reached zero.
                let (now, window): (Option<u64>, Option<String>) = must(
                    "epoch",
                    redis::cmd("MGET")
                        .arg(epoch_key)
                        .arg(format!("window:{epoch_key}"))
                        .query_async(&mut self.checker)
                        .await,
                );
                let why = match (now.unwrap_or(0) > epoch, window) {
                    (true, _) | (_, Some(_)) => "restart",
                    _ => "unexplained",
                };
                counts.push((format!("violation:latch:{why}"), 1));
                counts.push(("acquired:latch".into(), 1));
            }
            Ok(true) => counts.push(("acquired:latch".into(), 1)),
            Ok(false) => counts.push(("timed_out:latch".into(), 1)),
            Err(e) => {
                counts.push(("acquire_error:latch".into(), 1));
                self.note_error(Kind::Latch, "wait", &e).await;
            }
        }
        if first.is_err() || second.is_err() {
            counts.push(("release_error:latch".into(), 1));
        }
        counts
    }

    /// The checker's clock now (µs): a call's `invoke` when it is read just before the call.
    async fn checker_now_us(&mut self) -> u64 {
        let (secs, micros): (u64, u64) = must(
            "time",
            redis::cmd("TIME").query_async(&mut self.checker).await,
        );
        secs * 1_000_000 + micros
    }

    /// Records a latch's count-down `r` with its result: the count left it returned (`left`),
    /// or its error. Returns the record's completion time.
    async fn latch_counted(
        &mut self,
        mut r: Record<'_>,
        result: &Result<i64, LockError>,
    ) -> String {
        match result {
            Ok(left) => {
                r.send_with(&mut self.checker, None, &[("left", *left)])
                    .await
            }
            Err(e) => {
                r.outcome = "error";
                r.error = Some(e.to_string());
                r.send(&mut self.checker, None).await
            }
        }
    }
}

/// Every lock name a worker may take, each with the keys it locks: a RedLock in a cluster
/// locks three names on the cluster's shards ([`redlock_members`]).
pub fn all_names(cluster: bool) -> Vec<(String, Vec<String>)> {
    let mut names = Vec::new();
    for family in [
        "lock", "fair", "rw", "fenced", "redlock", "sem", "nr", "nrfair",
    ] {
        for i in 0..NAMES {
            let name = format!("chaos:{family}:{i}");
            let keys = match (family, cluster) {
                ("redlock", true) => redlock_members(&name),
                _ => vec![name.clone()],
            };
            names.push((name, keys));
        }
    }
    for i in 0..4 {
        let name = format!("chaos:multi:{i}");
        names.push((name.clone(), vec![name]));
    }
    names
}

/// The elections every worker campaigns in.
pub fn leader_names() -> Vec<String> {
    (0..LEADER_NAMES)
        .map(|i| format!("chaos:leader:{i}"))
        .collect()
}

/// The members of the RedLock `name` in a cluster.
fn redlock_members(name: &str) -> Vec<String> {
    ["a", "b", "c"].map(|m| format!("{name}:{m}")).to_vec()
}

/// One way to take a reentrant lock.
#[derive(Clone, Copy)]
struct Take {
    how: How,
    lease: Option<Duration>,
}

#[derive(Clone, Copy)]
enum How {
    /// `try_acquire_for(wait)` / `try_acquire_with_lease(wait, lease)`.
    Bounded,
    /// `try_acquire()` / `try_acquire_with_lease(0, lease)`: one attempt.
    Once,
    /// `acquire()` / `acquire_with_lease(lease)`, dropped at the wait's end.
    Cancelled,
}

impl Take {
    fn pick(rng: &mut Rng, lease: Duration) -> Self {
        let how = match rng.below(4) {
            0 => How::Once,
            1 => How::Cancelled,
            _ => How::Bounded,
        };
        let lease = (rng.below(3) == 0).then_some(lease);
        Self { how, lease }
    }

    async fn run(self, lock: &Lock, wait: Duration) -> Result<Option<LockGuard>, LockError> {
        match (self.how, self.lease) {
            (How::Bounded, None) => lock.try_acquire_for(wait).await,
            (How::Bounded, Some(lease)) => lock.try_acquire_with_lease(wait, lease).await,
            (How::Once, None) => lock.try_acquire().await,
            (How::Once, Some(lease)) => lock.try_acquire_with_lease(Duration::ZERO, lease).await,
            (How::Cancelled, lease) => {
                let acquire = async {
                    match lease {
                        None => lock.acquire().await,
                        Some(lease) => lock.acquire_with_lease(lease).await,
                    }
                };
                match tokio::time::timeout(wait, acquire).await {
                    Ok(result) => result.map(Some),
                    Err(_) => Ok(None),
                }
            }
        }
    }
}

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}
