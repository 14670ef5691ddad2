//! The throwaway server: its process, its folder, its port, its faults and what it holds.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::error::ServerError;
use super::link::{Link, url_to};
pub(super) use super::options::{Options, ServerBinary};
use super::spawner;
use crate::config::Config;
use crate::protocol::keys::{fair_queue, unlock_channel};

/// How long a server may take to answer its first PING.
const STARTUP_LIMIT: Duration = Duration::from_secs(10);

/// How long the kit's own commands (`lose`, `holder`, …) wait for an answer: a paused server
/// makes them fail after this instead of hanging.
const COMMAND_LIMIT: Duration = Duration::from_secs(5);

/// One `redis-server` (or `valkey-server`) process on 127.0.0.1, killed when dropped.
///
/// It saves nothing to disk (unless its [`Options`] say `--appendonly yes`), and runs with
/// `--enable-debug-command local`. Every method that talks to it opens a connection of its own,
/// answered within 5 s or failed.
pub struct TestServer {
    binary: ServerBinary,
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// Boxed, as the link: a server stays small to hold in an enum or a `Vec`.
    options: Box<Options>,
    /// The link [`TestServer::config`] goes through, made at its first call.
    link: OnceLock<Box<Link>>,
    /// Bumped by every resume and stop, so that a pause's timer resumes only its own pause.
    pauses: Arc<AtomicU64>,
}

impl std::fmt::Debug for TestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestServer")
            .field("server", &self.binary.version)
            .field("url", &self.url())
            .field("running", &self.is_running())
            .finish()
    }
}

impl TestServer {
    /// Starts a plain server on a free loopback port and waits until it answers PING.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(Options::default())
    }

    /// Starts a server of the given kind on a free loopback port. A port another process took
    /// between the kit's probe and the server's bind is retried on another, up to five times;
    /// any other failure (an argument the server refuses) is returned at once, with what the
    /// server printed and logged.
    pub fn start_with(options: Options) -> Result<Self, ServerError> {
        let binary = match &options.bin {
            Some(bin) => ServerBinary::probe(bin.clone())?,
            None => ServerBinary::find()?,
        };
        let mut last = None;
        for _ in 0..5 {
            let mut server = Self {
                binary: binary.clone(),
                port: free_port()?,
                dir: spawner::temp_dir()?,
                child: None,
                options: Box::new(options.clone()),
                link: OnceLock::new(),
                pauses: Arc::new(AtomicU64::new(0)),
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                // Another process bound the port after the probe: try another one.
                Err(e) if port_taken(&e) => last = Some(e),
                // Anything else (a bad argument, a binary that is no server) would fail the
                // same way on every port.
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| ServerError::Io(std::io::Error::other("no attempt made"))))
    }

    /// The binary this server runs and its version.
    pub fn binary(&self) -> &ServerBinary {
        &self.binary
    }

    /// `redis://127.0.0.1:<port>/0`, or with TLS `rediss://localhost:<port>/0` (the name the
    /// certificate is for): straight to the server, no link between.
    pub fn url(&self) -> String {
        url_to(self.tls_enabled(), self.port)
    }

    /// `redis+unix://…/redis.sock?db=0`, with [`Options::unix_socket`].
    pub fn unix_url(&self) -> String {
        format!("redis+unix://{}?db=0", self.socket_path().display())
    }

    /// The server's own port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's folder (its log, `redis.log`; what it printed, `server.out`; its socket;
    /// what it persisted).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process runs (it may be paused).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// A redis-rs client straight to the server, as the `default` user (with TLS: trusting the
    /// CA, presenting the client certificate if any), for checks of your own.
    pub fn client(&self) -> Result<redis::Client, ServerError> {
        let url = match &self.options.password {
            Some(pw) => self.url().replacen("://", &format!("://:{pw}@"), 1),
            None => self.url(),
        };
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.options.tls {
            let client_tls = match &tls.client {
                Some((cert, key)) => Some(redis::ClientTlsConfig {
                    client_cert: std::fs::read(cert)?,
                    client_key: std::fs::read(key)?,
                }),
                None => None,
            };
            let certificates = redis::TlsCertificates {
                client_tls,
                root_cert: Some(std::fs::read(&tls.ca)?),
            };
            return Ok(redis::Client::build_with_tls(url, certificates)?);
        }
        Ok(redis::Client::open(url)?)
    }

    /// A blocking connection straight to the server, whose commands fail after 5 s without an
    /// answer (a paused server).
    pub fn conn(&self) -> Result<redis::Connection, ServerError> {
        let conn = self.client()?.get_connection_with_timeout(COMMAND_LIMIT)?;
        conn.set_read_timeout(Some(COMMAND_LIMIT))?;
        conn.set_write_timeout(Some(COMMAND_LIMIT))?;
        Ok(conn)
    }

    /// A [`Config`] for a lock manager that reaches this server through its link (made at the
    /// first call; every config from here shares it, so [`cut`](Self::cut) cuts them all: use
    /// [`link`](Self::link) for a client to cut alone). Settings for quick tests, each one
    /// yours to change with `Config`'s methods: a response and a connect timeout of 500 ms, a
    /// watchdog timeout of 3 s (renewed each second: a lost hold too young to be watched is seen
    /// within about a second), Redis called unavailable after 2 s without an answer, and the
    /// server's password.
    pub fn config(&self) -> Result<Config, ServerError> {
        let link = match self.link.get() {
            Some(link) => link,
            None => {
                let mut made = Link::open(self.addr(), self.tls_enabled())?;
                made.config = Some(self.config_with_url(made.url())?);
                // Another thread may have set it meanwhile: then its link is the one.
                let _ = self.link.set(Box::new(made));
                self.link.get().ok_or_else(|| {
                    ServerError::Io(std::io::Error::other("the server's link was not kept"))
                })?
            }
        };
        Ok(link.config())
    }

    /// A new link to this server, for a client you want to cut off alone: its
    /// [`Link::config`] reaches the server through it, and only its clients see its faults.
    pub fn link(&self) -> Result<Link, ServerError> {
        let mut link = Link::open(self.addr(), self.tls_enabled())?;
        link.config = Some(self.config_with_url(link.url())?);
        Ok(link)
    }

    /// The clients of [`config`](Self::config) are cut off: see [`Link::cut`].
    pub fn cut(&self) {
        if let Some(link) = self.link.get() {
            link.cut();
        }
    }

    /// The clients of [`config`](Self::config) get no replies: see [`Link::drop_replies`].
    pub fn drop_replies(&self) {
        if let Some(link) = self.link.get() {
            link.drop_replies();
        }
    }

    /// The clients of [`config`](Self::config) reach the server again: see [`Link::heal`].
    pub fn heal(&self) {
        if let Some(link) = self.link.get() {
            link.heal();
        }
    }

    /// **A hold lost**: the lock's key deleted, as a failover to a replica the grant had not
    /// reached, or an operator's `DEL`, would do. The holder's guard is told: a watched hold
    /// (renewed by the watchdog, [`Config::watch_holds`](crate::Config::watch_holds) on, as by
    /// default; one server or Sentinel) within a round trip or two, milliseconds; a hold younger
    /// than a sixth of the watchdog timeout (0.5 s with [`config`](Self::config)), which is not
    /// watched yet, at the watchdog's next renewal (every third of the timeout, 1 s). Then
    /// `lost()` resolves, `is_lost()` is true, a [`scope`](crate::LockGuard::scope) stops its
    /// work; and meanwhile anyone else may take the lock. Returns whether there was a key. (A
    /// lease lock, taken with `acquire_with_lease`, is neither renewed nor watched: nothing tells
    /// its holder before the lease ends.)
    pub fn lose(&self, name: &str) -> Result<bool, ServerError> {
        let deleted: u64 = redis::cmd("DEL").arg(name).query(&mut self.conn()?)?;
        Ok(deleted > 0)
    }

    /// **A hold expired**: the lock's key given a millisecond to live, so Redis expires it
    /// itself (as when a holder's renewals stopped reaching Redis). Its holder sees what
    /// [`lose`](Self::lose) shows; a waiter in another process wakes by its own deadline (an
    /// expiry publishes no release). Returns whether there was a key.
    pub fn expire(&self, name: &str) -> Result<bool, ServerError> {
        let set: u64 = redis::cmd("PEXPIRE")
            .arg(name)
            .arg(1)
            .query(&mut self.conn()?)?;
        Ok(set > 0)
    }

    /// **Redis frozen** for `duration` (SIGSTOP, then SIGCONT from a timer thread): connections
    /// stay open and nothing is answered, as a server stalled by a long command, a swap storm or
    /// a paused VM. Returns at once. Every client sees requests time out (the response timeout);
    /// a bounded wait ends in [`LockError::Unavailable`](crate::LockError::Unavailable) at its
    /// deadline, an unbounded one after `unavailable_after`; holds not renewed meanwhile are
    /// reported lost once their lease would have run out. The kit's own commands fail after 5 s
    /// meanwhile. [`resume`](Self::resume) ends it early.
    pub fn pause(&self, duration: Duration) -> Result<(), ServerError> {
        let Some(pid) = self.pid() else {
            return Err(not_running());
        };
        signal(pid, "STOP")?;
        let pauses = Arc::clone(&self.pauses);
        let this_pause = pauses.load(Ordering::SeqCst);
        std::thread::spawn(move || {
            std::thread::sleep(duration);
            // Only if no resume or stop came since: the pid may be another process's by now.
            if pauses
                .compare_exchange(
                    this_pause,
                    this_pause + 1,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_ok()
            {
                let _ = signal(pid, "CONT");
            }
        });
        Ok(())
    }

    /// Ends a [`pause`](Self::pause) now: the server runs what queued up meanwhile.
    pub fn resume(&self) -> Result<(), ServerError> {
        self.pauses.fetch_add(1, Ordering::SeqCst);
        match self.pid() {
            Some(pid) => signal(pid, "CONT"),
            None => Err(not_running()),
        }
    }

    /// **Redis restarted empty** on the same port: killed (SIGKILL, as a crash), its data
    /// deleted, started again. Every client's connections break and reconnect; every hold is
    /// gone, so each holder is told as for [`lose`](Self::lose) (a watched hold once its
    /// manager's tracking connection is back and checks it, or at the next renewal, whichever
    /// comes first); waiters retry once their pub/sub connection is back. Returns once the
    /// server answers PING.
    pub fn restart_empty(&mut self) -> Result<(), ServerError> {
        self.stop();
        self.wipe_data();
        self.restart()
    }

    /// Kills the server (SIGKILL: what a crash looks like) and waits for it to go. Its port
    /// stays this server's: [`restart`](Self::restart) starts it there again.
    pub fn stop(&mut self) {
        self.pauses.fetch_add(1, Ordering::SeqCst);
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Deletes what the server saved in its folder (append-only files and snapshot), so that
    /// the next [`restart`](Self::restart) starts empty: a server that lost its disk.
    pub fn wipe_data(&self) {
        let _ = std::fs::remove_dir_all(self.dir.path().join("appendonlydir"));
        let _ = std::fs::remove_file(self.dir.path().join("dump.rdb"));
    }

    /// Starts the server again on the same port (stopping it first if it runs), with what it
    /// persisted: nothing, unless its options turned persistence on. Tries for about 2 s while
    /// the old process's port is still held.
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.stop();
        let mut last = None;
        for _ in 0..20 {
            match self.spawn() {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(last.unwrap_or_else(not_running))
    }

    /// **Who holds** `name`: the holder field of its lock hash (`<client id>:<n>`, a writer's
    /// `…:write`; compare with [`LockManager::client_id`](crate::LockManager::client_id)), or
    /// `None` when nobody does. For a lock, fair lock, fenced lock, read-write lock or election
    /// named `name` by a manager without a name prefix (the kit's configs set none); with
    /// several readers, one of them.
    pub fn holder(&self, name: &str) -> Result<Option<String>, ServerError> {
        let mut conn = self.conn()?;
        let kind: String = redis::cmd("TYPE").arg(name).query(&mut conn)?;
        if kind != "hash" {
            return Ok(None);
        }
        let fields: Vec<String> = redis::cmd("HKEYS").arg(name).query(&mut conn)?;
        Ok(fields.into_iter().find(|f| f.contains(':')))
    }

    /// **Who waits** for `name`: the length of its fair lock's queue when it has one, else how
    /// many connections listen on its release channel (each lock manager with a waiter on the
    /// name counts once, however many callers wait in it, and may keep listening a moment after
    /// its last waiter left; a Java Redisson client counts as well).
    pub fn waiters(&self, name: &str) -> Result<usize, ServerError> {
        let mut conn = self.conn()?;
        let queued: usize = redis::cmd("LLEN").arg(fair_queue(name)).query(&mut conn)?;
        if queued > 0 {
            return Ok(queued);
        }
        let (_, listening): (String, usize) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(unlock_channel(name))
            .query(&mut conn)?;
        Ok(listening)
    }

    /// **What is left**: every key in the server's database 0, sorted. After every manager
    /// shut down cleanly ([`LockManager::shutdown`](crate::LockManager::shutdown)) and every
    /// guard was released, lockman leaves none; a fenced lock's token counter
    /// (`lockman_fence:…`, never going backwards by design) is the exception.
    pub fn keys_left(&self) -> Result<Vec<String>, ServerError> {
        let mut conn = self.conn()?;
        let mut keys =
            redis::Commands::scan::<String>(&mut conn)?.collect::<Result<Vec<_>, _>>()?;
        keys.sort();
        Ok(keys)
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn tls_enabled(&self) -> bool {
        #[cfg(feature = "tls")]
        if self.options.tls.is_some() {
            return true;
        }
        false
    }

    fn config_with_url(&self, url: String) -> Result<Config, ServerError> {
        let mut config = Config::new(url)
            .response_timeout(Duration::from_millis(500))
            .connect_timeout(Duration::from_millis(500))
            .watchdog_timeout(Duration::from_secs(3))
            .unavailable_after(Duration::from_secs(2));
        if let Some(pw) = &self.options.password {
            config = config.password(pw.clone());
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.options.tls {
            config = config.tls_ca_pem(std::fs::read(&tls.ca)?);
            if let Some((cert, key)) = &tls.client {
                config = config.tls_client_identity(std::fs::read(cert)?, std::fs::read(key)?);
            }
        }
        Ok(config)
    }

    fn socket_path(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    fn spawn(&mut self) -> Result<(), ServerError> {
        let log = self.dir.path().join("redis.log");
        #[allow(unused_mut)]
        let mut listen = vec!["--port".to_owned(), self.port.to_string()];
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.options.tls {
            listen = tls.server_args(self.port);
        }
        let socket = match self.options.unix_socket {
            true => vec![
                "--unixsocket".into(),
                self.socket_path().display().to_string(),
                "--unixsocketperm".into(),
                "700".into(),
            ],
            false => Vec::new(),
        };
        // What the server prints before its log is open (a refused argument) goes here.
        let output = std::fs::File::create(self.output_path())?;
        let mut command = spawner::server_command(&self.binary.bin);
        command
            .args(listen)
            .args(["--bind", "127.0.0.1"])
            .args(socket)
            // Defaults first: a setting in `options.args` comes later and wins.
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .args(["--enable-debug-command", "local"])
            // A replica gets its first copy at once, not after the default 5 s wait.
            .args(["--repl-diskless-sync-delay", "0"])
            .args(&self.options.args)
            .args(
                self.options
                    .password
                    .iter()
                    .flat_map(|pw| ["--requirepass", pw.as_str()]),
            )
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output);
        let child = spawner::spawn(command).map_err(|source| ServerError::Missing {
            bin: self.binary.bin.clone(),
            source,
        })?;
        self.child = Some(child);
        let client = self.client()?;
        let deadline = Instant::now() + STARTUP_LIMIT;
        while Instant::now() < deadline {
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.child = None;
                return Err(self.not_started(format!("exited with {status}: {}", self.said(&log))));
            }
            if ping(&client, Duration::from_millis(200)) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.stop();
        Err(self.not_started(format!(
            "no PING answer within {STARTUP_LIMIT:?}: {}",
            self.said(&log)
        )))
    }

    /// Where the server's stdout and stderr go (a file in its folder).
    fn output_path(&self) -> PathBuf {
        self.dir.path().join("server.out")
    }

    /// What the server printed (its stdout and stderr) and the end of its log, as one line.
    fn said(&self, log: &Path) -> String {
        // In the order printed: a refused argument takes several lines that read top down.
        let text = std::fs::read_to_string(self.output_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let printed = lines[lines.len().saturating_sub(5)..].join(" | ");
        let logged = read_log(log);
        match (printed.is_empty(), logged.is_empty()) {
            (true, _) => logged,
            (false, true) => printed,
            (false, false) => format!("{printed} | log: {logged}"),
        }
    }

    fn not_started(&self, reason: String) -> ServerError {
        ServerError::NotStarted {
            server: self.binary.version.clone(),
            port: self.port,
            reason,
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether a start failed because the port was taken (redis-server and valkey-server log
/// `bind: Address already in use`), the one failure worth retrying on another port.
fn port_taken(error: &ServerError) -> bool {
    matches!(error, ServerError::NotStarted { reason, .. } if reason.contains("in use"))
}

fn not_running() -> ServerError {
    ServerError::Io(std::io::Error::other("the test server is not running"))
}

/// `kill -<signal> <pid>` (the crate forbids the `unsafe` a direct `kill(2)` needs).
fn signal(pid: u32, signal: &str) -> Result<(), ServerError> {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    match status.success() {
        true => Ok(()),
        false => Err(ServerError::Io(std::io::Error::other(format!(
            "kill -{signal} {pid}: {status}"
        )))),
    }
}

/// Whether a server answers PING within `limit`.
pub(super) fn ping(client: &redis::Client, limit: Duration) -> bool {
    client
        .get_connection_with_timeout(limit)
        .is_ok_and(|mut conn| redis::cmd("PING").query::<String>(&mut conn).is_ok())
}

/// Ports handed out in this process (each server's port and its cluster bus port), never handed
/// out twice: the OS may offer a port again once the probe below has closed it, and a server
/// stopped to be restarted on its port leaves it unbound for a while.
static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A free loopback port below 55536 whose port + 10000 is free too (where a cluster node's bus
/// listens), never handed out before in this process: the ports every [`TestServer`] takes come
/// from here, so a server of your own (a Sentinel, a cluster node) on such a port never meets
/// one of the kit's, nor a port kept closed on purpose.
pub fn free_port() -> Result<u16, ServerError> {
    for _ in 0..1000 {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        if port >= 55536 {
            continue;
        }
        let mut taken = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        if taken.contains(&port) || taken.contains(&(port + 10000)) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            taken.insert(port);
            taken.insert(port + 10000);
            return Ok(port);
        }
    }
    Err(ServerError::Io(std::io::Error::other(
        "no free loopback port pair below 55536",
    )))
}

/// The last lines of the server's log (5, or `LOG_LINES`), newest first.
pub(super) fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .rev()
        .take(
            std::env::var("LOG_LINES")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(5),
        )
        .collect::<Vec<_>>()
        .join(" | ")
}
