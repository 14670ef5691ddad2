//! The command connections of one manager: a multiplexed connection to the primary (redis-rs's
//! `ConnectionManager`, which reconnects by itself when its socket fails), a second one for
//! replica-synced writes when [`Config::sync_replicas`] is on, the switch of both to a new
//! primary after a failover, and their replacement after a command that got no reply within
//! the response timeout. (The access check made at start is the protocol's: `protocol/probe.rs`.)
//!
//! Why the replacement: a connection whose flow a NAT, firewall or load balancer forgot (no
//! reset) stays open and silently drops everything. redis-rs reconnects only on errors it deems
//! unrecoverable (a closed or reset socket); a response timeout, its own or ours, is not one
//! (`RetryMethod::RetryImmediately`), so without this the same dead connection is reused for
//! every later call, for good. The cluster connection does the same with its node connections.

use std::pin::{Pin, pin};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, Value};

use crate::config::Config;
use crate::connections::endpoint::Endpoint;
use crate::connections::failure::{connect_error, diagnose_tls_timeout};
use crate::error::LockError;

pub(crate) use crate::connections::script_call::ScriptCall;
use crate::connections::shared_timer::SharedTimer;

/// The connections, and how long a command may take. Cheap to clone; clones share them, and
/// use the same **lane**: a set of connections whose I/O runs on one thread (lane 0 on the
/// thread that opened them; one more per thread that runs lock actors, see `add_lane`).
#[derive(Clone)]
pub(crate) struct Conn {
    inner: Arc<Inner>,
    lane: usize,
    /// `Some`: the response timeouts of [`eval`](Self::eval)'s calls are kept by this one
    /// timer ([`for_one_task`](Self::for_one_task)); `None`: each call has a timer of its own.
    timer: Option<Arc<SharedTimer>>,
}

/// The least time between two renewals of a lane's connections: a server that is only slow (a
/// long script, `CLIENT PAUSE`) times every call out, and each renewal opens a connection.
const RENEW_GAP: Duration = Duration::from_secs(1);

/// How long replaced connections are kept open: requests already sent on them still run on a
/// server that was only slow, as they would have without the replacement (closing a connection
/// discards what the server has not read yet). With [`RENEW_GAP`], at most five per lane.
const RETIRED_GRACE: Duration = Duration::from_secs(5);

/// Runs a future on a lane's own thread (an actix arbiter's, given by the layer above).
pub(crate) type Spawner = Arc<dyn Fn(Pin<Box<dyn Future<Output = ()> + Send>>) + Send + Sync>;

struct Inner {
    /// The connections to the current primary, by lane: replaced whole after a failover.
    lanes: RwLock<Vec<Lane>>,
    endpoint: Endpoint,
    settings: ConnectionManagerConfig,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// `WAIT` after synced writes: replicas wanted, and for how long (ms).
    sync: Option<(u32, u64)>,
}

#[derive(Clone)]
struct Lane {
    pair: Pair,
    /// Where its connections are made (so that their I/O runs there); `None`: where asked.
    home: Option<Spawner>,
    /// Which connections `pair` is: one more at every replacement (a failover's switch, or a
    /// renewal after a timeout), so that a renewal replaces only the connections that timed out.
    generation: u64,
    /// Whether new connections are being made for this lane after a timeout: one at a time.
    renewing: bool,
    /// When the last renewal began (see [`RENEW_GAP`]).
    renewed_at: Option<Instant>,
}

#[derive(Clone)]
struct Pair {
    main: Link,
    /// `Some` with replica sync: `WAIT` blocks a connection, so it gets one of its own (in a
    /// cluster, a second cluster connection: the script and its `WAIT` go to the slot's master).
    synced: Option<Link>,
}

impl Conn {
    /// Connects to the endpoint's primary, failing within the connect timeout.
    pub(crate) async fn open(endpoint: Endpoint, config: &Config) -> Result<Self, LockError> {
        // No response timeout of redis-rs's own: every command is bounded here (`bounded`, or a
        // lock actor's `SharedTimer`), also while the connection manager reconnects, and a
        // second timer per command would only cost (a timer per call is about 1,000
        // instructions, callgrind: `shared_timer`).
        let settings = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.get_connect_timeout()))
            .set_response_timeout(None)
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(2));
        let sync = config.get_sync_replicas().map(|(count, timeout)| {
            (
                count,
                u64::try_from(timeout.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
            )
        });
        let connect_timeout = config.get_connect_timeout();
        let pair = pair_for(&endpoint, &settings, connect_timeout, sync.is_some()).await?;
        // Lane 0's replacements are made where it was (the manager's arbiter), not on the thread
        // of whichever caller saw the timeout (a user's runtime, which may end before the manager).
        let home = tokio::runtime::Handle::try_current().ok().map(|here| {
            Arc::new(move |work: Pin<Box<dyn Future<Output = ()> + Send>>| {
                here.spawn(work);
            }) as Spawner
        });
        let inner = Inner {
            lanes: RwLock::new(vec![Lane {
                pair,
                home,
                generation: 0,
                renewing: false,
                renewed_at: None,
            }]),
            endpoint,
            settings,
            connect_timeout,
            response_timeout: config.get_response_timeout(),
            sync,
        };
        Ok(Self {
            inner: Arc::new(inner),
            lane: 0,
            timer: None,
        })
    }

    /// A new lane: connections of its own to the same primary, made on `home`'s thread so that
    /// their I/O runs there. The clones of the returned `Conn` use it.
    pub(crate) async fn add_lane(&self, home: Spawner) -> Result<Self, LockError> {
        let pair = self.connect(Some(&home)).await?;
        let mut lanes = self
            .inner
            .lanes
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        lanes.push(Lane {
            pair,
            home: Some(home),
            generation: 0,
            renewing: false,
            renewed_at: None,
        });
        Ok(Self {
            inner: self.inner.clone(),
            lane: lanes.len() - 1,
            timer: None,
        })
    }

    /// The same connections, the response timeouts of whose [`eval`](Self::eval) calls are
    /// kept by one timer they share ([`SharedTimer`]): for the calls of one task that polls
    /// them all at each wake, a per-name actor's round trips.
    pub(crate) fn for_one_task(&self) -> Self {
        Self {
            timer: Some(Arc::default()),
            ..self.clone()
        }
    }

    /// Connections to the endpoint's current primary, made on `home`'s thread when given.
    async fn connect(&self, home: Option<&Spawner>) -> Result<Pair, LockError> {
        let this = &*self.inner;
        let (endpoint, settings) = (this.endpoint.clone(), this.settings.clone());
        let (limit, synced) = (this.connect_timeout, this.sync.is_some());
        let Some(home) = home else {
            return pair_for(&endpoint, &settings, limit, synced).await;
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        home(Box::pin(async move {
            let _ = tx.send(pair_for(&endpoint, &settings, limit, synced).await);
        }));
        // Nobody answers when that thread has stopped: the manager is shutting down.
        rx.await.map_err(|_| LockError::Shutdown)?
    }

    /// After a failover: from now on every command, of every lane, goes to the endpoint's
    /// current primary.
    pub(crate) async fn switch(&self) -> Result<(), LockError> {
        let homes: Vec<Option<Spawner>> = {
            let lanes = self
                .inner
                .lanes
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            lanes.iter().map(|lane| lane.home.clone()).collect()
        };
        let mut pairs = Vec::with_capacity(homes.len());
        for home in &homes {
            pairs.push(self.connect(home.as_ref()).await?);
        }
        let mut lanes = self
            .inner
            .lanes
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        for (lane, pair) in lanes.iter_mut().zip(pairs) {
            lane.pair = pair;
            lane.generation += 1;
        }
        Ok(())
    }

    /// A command on this lane's connections of `generation` got no reply within the response
    /// timeout: make new ones, in the background, and use them from then on. The old ones are
    /// closed [`RETIRED_GRACE`] later (once the calls still under way on them end, if later).
    /// Nothing is done when they were replaced already, a renewal is under way or began less
    /// than [`RENEW_GAP`] ago; a failed attempt leaves them in place, and a later timeout tries
    /// again.
    fn renew(&self, generation: u64) {
        let Some(home) = self.claim_renewal(generation) else {
            return;
        };
        let this = self.clone();
        let work = async move {
            let inner = &*this.inner;
            let made = pair_for(
                &inner.endpoint,
                &inner.settings,
                inner.connect_timeout,
                inner.sync.is_some(),
            )
            .await;
            let retired = this.renewed(generation, made);
            let lane = this.lane;
            // Only the retired connections are kept through the grace, not every lane's (`this`):
            // a manager dropped meanwhile still closes its own at once.
            drop(this);
            if let Some(retired) = retired {
                tracing::info!(
                    lane,
                    "command connections replaced after a response timeout"
                );
                // No metric here: the metrics facade sits above the connections layer
                // (tests/layers.rs); the log line is the record.
                tokio::time::sleep(RETIRED_GRACE).await;
                drop(retired);
            }
        };
        match home {
            Some(home) => home(Box::pin(work)),
            None => match tokio::runtime::Handle::try_current() {
                Ok(here) => drop(here.spawn(work)),
                Err(_) => {
                    // No runtime to connect on: let the next timeout try again.
                    let mut lanes = self
                        .inner
                        .lanes
                        .write()
                        .unwrap_or_else(PoisonError::into_inner);
                    if let Some(lane) = lanes.get_mut(self.lane) {
                        lane.renewing = false;
                    }
                }
            },
        }
    }

    /// Marks this lane's connections of `generation` as being renewed, unless they were
    /// replaced already, a renewal is under way or began less than [`RENEW_GAP`] ago (`None`).
    /// Gives where to run the renewal (`Some(None)`: on the current runtime).
    fn claim_renewal(&self, generation: u64) -> Option<Option<Spawner>> {
        let mut lanes = self
            .inner
            .lanes
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let lane = lanes.get_mut(self.lane)?;
        let now = Instant::now();
        let recent = lane
            .renewed_at
            .is_some_and(|at| now.saturating_duration_since(at) < RENEW_GAP);
        if lane.generation != generation || lane.renewing || recent {
            return None;
        }
        lane.renewing = true;
        lane.renewed_at = Some(now);
        Some(lane.home.clone())
    }

    /// The renewal of this lane's connections of `generation` ended with `made`: the new ones
    /// take their place, unless a failover's switch replaced them meanwhile. Gives the retired
    /// ones.
    fn renewed(&self, generation: u64, made: Result<Pair, LockError>) -> Option<Pair> {
        let mut lanes = (self.inner.lanes.write()).unwrap_or_else(PoisonError::into_inner);
        let lane = lanes.get_mut(self.lane)?;
        lane.renewing = false;
        match made {
            Ok(pair) if lane.generation == generation => {
                lane.generation += 1;
                Some(std::mem::replace(&mut lane.pair, pair))
            }
            // A failover's switch replaced them meanwhile.
            Ok(_) => None,
            Err(error) => {
                tracing::warn!(%error, lane = self.lane, "replacing timed-out command connections failed");
                None
            }
        }
    }

    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.inner.endpoint
    }

    /// Whether replica sync is on ([`Config::sync_replicas`]): synced writes are followed by
    /// `WAIT`.
    pub(crate) fn syncs_replicas(&self) -> bool {
        self.inner.sync.is_some()
    }

    /// This lane's connections, and their generation (for [`renew`](Self::renew)).
    fn pair(&self) -> (Pair, u64) {
        let lanes = self
            .inner
            .lanes
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        // Lanes are only ever added, so a clone's lane is always there.
        let lane = lanes.get(self.lane).unwrap_or(&lanes[0]);
        (lane.pair.clone(), lane.generation)
    }

    /// Runs one script call, bounded by the response timeout even while reconnecting; a
    /// server that does not know the script (restarted, or SCRIPT FLUSH) is given it first.
    /// With [`Replicas::Wait`] and replica sync on, the call is followed by `WAIT` on a
    /// connection of its own (`WAIT` blocks it), and the reply says how many acknowledged.
    ///
    /// The script call alone is bounded by a timer of its own, or by the one its clone of
    /// [`for_one_task`](Self::for_one_task) shares among its calls (the replica-synced call and
    /// the reload keep a timer each: they are rare).
    ///
    /// Every lock request runs through here: its future holds only the common case, the
    /// script call alone. The `WAIT` pipeline and the script's reload are boxed futures of
    /// their own (an allocation only when they run): inline, their code and state were a
    /// third of this future's and of its poll's code, fetched at every call (I-cache misses
    /// with 64 names busy at once, BENCHMARKS.md).
    pub(crate) async fn eval(
        &self,
        op: &'static str,
        key: &str,
        call: &ScriptCall<'_>,
        replicas: Replicas,
    ) -> Result<Reply, LockError> {
        let (pair, generation) = self.pair();
        if let (Replicas::Wait, Some(sync), Some(synced)) = (replicas, self.inner.sync, pair.synced)
        {
            return Box::pin(self.eval_waited(op, key, call, synced, sync, generation)).await;
        }
        let mut conn = pair.main;
        // Each call's future is made where it is polled (`pin!`) and the timeout gets a pointer
        // to it: the connection manager's future is several kilobytes, and every move of it
        // into `bounded` and its `Timeout` is a copy of all of it.
        let mut reply = {
            let work = pin!(send_one(&mut conn, call.cmd()));
            match &self.timer {
                Some(timer) => {
                    let limit = self.inner.response_timeout;
                    let reply = timer.bound(work, limit).await;
                    reply.map_err(|()| LockError::Timeout { op, after: limit })
                }
                None => self.bounded(op, work).await,
            }
        };
        if no_script(&reply) {
            let request = Request::One(call.cmd());
            reply = Box::pin(self.reload(op, key, call, &mut conn, &request, generation)).await;
        }
        let (value, _) = self.classify(op, key, reply, generation)?;
        Ok(Reply {
            value,
            unsynced: None,
        })
    }

    /// [`eval`](Self::eval) with replica sync: the call and `WAIT` for `count` replicas (up to
    /// `wait_ms`) on the `synced` connection.
    async fn eval_waited(
        &self,
        op: &'static str,
        key: &str,
        call: &ScriptCall<'_>,
        mut conn: Link,
        (count, wait_ms): (u32, u64),
        generation: u64,
    ) -> Result<Reply, LockError> {
        let mut pipe = redis::pipe();
        pipe.add_command(call.cmd().clone())
            .cmd("WAIT")
            .arg(count)
            .arg(wait_ms);
        let request = Request::Waited(pipe);
        let mut reply = self.bounded(op, pin!(request.send(&mut conn))).await;
        if no_script(&reply) {
            reply = Box::pin(self.reload(op, key, call, &mut conn, &request, generation)).await;
        }
        let (value, acked) = self.classify(op, key, reply, generation)?;
        let unsynced = acked.and_then(|acked| {
            let acked = u32::try_from(acked.max(0)).unwrap_or(u32::MAX);
            (acked < count).then_some(Unsynced {
                acked,
                wanted: count,
            })
        });
        Ok(Reply { value, unsynced })
    }

    /// The server did not know the script: loads it on `conn` and sends `request` again.
    async fn reload(
        &self,
        op: &'static str,
        key: &str,
        call: &ScriptCall<'_>,
        conn: &mut Link,
        request: &Request<'_>,
        generation: u64,
    ) -> Result<redis::RedisResult<(Value, Option<i64>)>, LockError> {
        let loaded = self.bounded(op, pin!(call.script().load_async(conn))).await;
        self.classify(op, key, loaded, generation)?;
        self.bounded(op, pin!(request.send(conn))).await
    }

    pub(crate) async fn bounded<T>(
        &self,
        op: &'static str,
        work: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<redis::RedisResult<T>, LockError> {
        let limit = self.inner.response_timeout;
        tokio::time::timeout(limit, work)
            .await
            .map_err(|_| LockError::Timeout { op, after: limit })
    }

    /// The reply of a call on the connections of `generation`, as lockman reports it; a
    /// timeout has them replaced (`renew`), since a dead flow never ends by itself.
    fn classify<T>(
        &self,
        op: &'static str,
        key: &str,
        reply: Result<redis::RedisResult<T>, LockError>,
        generation: u64,
    ) -> Result<T, LockError> {
        match reply {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(self.failure(op, key, Ok(e), generation)),
            Err(timeout) => Err(self.failure(op, key, Err(timeout), generation)),
        }
    }

    /// A call that failed (`Ok`: Redis's error; `Err`: our response timeout), as
    /// [`classify`](Self::classify) reports it. Out of line and cold: one copy, not one per
    /// reply type, and none of it in the calls' code.
    #[cold]
    #[inline(never)]
    fn failure(
        &self,
        op: &'static str,
        key: &str,
        error: Result<redis::RedisError, LockError>,
        generation: u64,
    ) -> LockError {
        let error = match error {
            Ok(e) => {
                // redis-rs's own timeout (the cluster connection has one): the same silence.
                if e.is_timeout() {
                    self.renew(generation);
                }
                LockError::redis(op, key, e)
            }
            Err(timeout) => {
                self.renew(generation);
                timeout
            }
        };
        if error.hints_failover() {
            self.inner.endpoint.suspect_failover();
        }
        error
    }

    /// The main connection, for one-off commands (the start-time probe).
    pub(crate) fn main_link(&self) -> Link {
        self.pair().0.main
    }

    /// How long connecting may take.
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.inner.connect_timeout
    }
}

/// Whether a script call waits for replicas to acknowledge it, with replica sync on
/// ([`Config::sync_replicas`]): the writes a failover must not lose do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Replicas {
    /// `WAIT` after the call, on the same connection.
    Wait,
    /// No `WAIT`: reads, and writes that are made again anyway.
    Skip,
}

/// A script call's reply.
#[derive(Debug)]
pub(crate) struct Reply {
    pub value: Value,
    /// With [`Replicas::Wait`]: fewer replicas acknowledged the call than replica sync asks for.
    pub unsynced: Option<Unsynced>,
}

/// How many replicas acknowledged a write, of how many replica sync asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unsynced {
    pub acked: u32,
    pub wanted: u32,
}

impl Reply {
    /// The value, or [`LockError::ReplicaSync`] when too few replicas acknowledged the call.
    pub(crate) fn synced(self) -> Result<Value, LockError> {
        match self.unsynced {
            None => Ok(self.value),
            Some(Unsynced { acked, wanted }) => Err(LockError::ReplicaSync { acked, wanted }),
        }
    }
}

/// What [`Conn::eval`] sends: the script call alone, or followed by `WAIT`.
enum Request<'c> {
    One(&'c Cmd),
    Waited(redis::Pipeline),
}

impl Request<'_> {
    /// The script's reply and, after a `WAIT`, how many replicas acknowledged it.
    async fn send(&self, conn: &mut Link) -> redis::RedisResult<(Value, Option<i64>)> {
        match self {
            Request::One(cmd) => send_one(conn, cmd).await,
            Request::Waited(pipe) => pipe
                .query_async::<(Value, i64)>(conn)
                .await
                .map(|(value, acked)| (value, Some(acked))),
        }
    }
}

/// The script call alone: its reply.
async fn send_one(conn: &mut Link, cmd: &Cmd) -> redis::RedisResult<(Value, Option<i64>)> {
    // Straight to the connection manager: through redis-rs's `ConnectionLike`, which
    // `query_async` takes, its future is boxed (an allocation per command, two per pair).
    // The reply is read as `query_async` reads it: a server error in it is the error.
    match conn {
        Link::Server(server) => server.send_packed_command(cmd).await,
        Link::Cluster(_) => redis::aio::ConnectionLike::req_packed_command(conn, cmd).await,
    }
    .and_then(Value::extract_error)
    .map(|value| (value, None))
}

/// The command connection: to one server (redis-rs's `ConnectionManager`, which reconnects by
/// itself), or to a cluster (redis-rs's cluster connection, which routes each script call by its
/// first key and follows MOVED and ASK).
#[derive(Clone)]
pub(crate) enum Link {
    Server(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Link {
    /// Runs `cmd` on one node: the server, or in a cluster the master of slot 0, so that a
    /// series of reads (a diagnosis's) is all of one server.
    pub(crate) async fn query_one_node<T: redis::FromRedisValue>(
        &mut self,
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        match self {
            Link::Server(conn) => cmd.query_async(conn).await,
            Link::Cluster(cluster) => {
                use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
                let master = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::new(0, SlotAddr::Master),
                ));
                let reply = cluster.route_command(cmd.clone(), master).await?;
                redis::from_redis_value(reply).map_err(Into::into)
            }
        }
    }
}

impl redis::aio::ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, Value> {
        match self {
            Link::Server(conn) => conn.req_packed_command(cmd),
            Link::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Server(conn) => conn.req_packed_commands(pipeline, offset, count),
            Link::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Server(conn) => conn.get_db(),
            Link::Cluster(conn) => conn.get_db(),
        }
    }
}

/// Connections to the endpoint's current primary: the main one, and one for synced writes.
async fn pair_for(
    endpoint: &Endpoint,
    settings: &ConnectionManagerConfig,
    limit: Duration,
    synced: bool,
) -> Result<Pair, LockError> {
    let connect = |client: Client| async move {
        let made = ConnectionManager::new_with_config(client.clone(), settings.clone());
        match tokio::time::timeout(limit, made).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(source)) => Err(connect_error(endpoint.label(), source)),
            Err(_) => match diagnose_tls_timeout(&client, endpoint.label()).await {
                Some(not_tls) => Err(not_tls),
                None => Err(LockError::Timeout {
                    op: "connect",
                    after: limit,
                }),
            },
        }
    };
    if let Some(cluster) = endpoint.cluster() {
        let main = Link::Cluster(cluster.connect(None, endpoint.label()).await?);
        let synced = match synced {
            true => Some(Link::Cluster(
                cluster.connect(None, endpoint.label()).await?,
            )),
            false => None,
        };
        return Ok(Pair { main, synced });
    }
    let main = Link::Server(connect(endpoint.client()).await?);
    let synced = match synced {
        true => Some(Link::Server(connect(endpoint.client()).await?)),
        false => None,
    };
    Ok(Pair { main, synced })
}

/// Whether Redis answered that it does not know the script.
fn no_script<T>(reply: &Result<redis::RedisResult<T>, LockError>) -> bool {
    matches!(reply, Ok(Err(e)) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript))
}
