//! How the command reaches Redis: the connection options ([`Server`]), the password kept out of
//! sight (a file or a variable, never shown by `{:?}`, taken out of a supervised command's
//! environment), and the manager started with them, waiting out a state of the server that
//! passes when the subcommand waits.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use lockman::{Config, LockError, LockManager};

use crate::{Failure, code, duration};

/// Where Redis is, and the settings that matter from the shell.
#[derive(Args, Clone)]
pub struct Server {
    /// The Redis URL: redis://, rediss:// (TLS) or redis+unix://, with user (and password) if
    /// any. Default: $LOCKMAN_URL, else $REDIS_URL, else redis://127.0.0.1:6379. A password
    /// here is visible to every user of the machine (ps): give it with --password-file or
    /// $LOCKMAN_PASSWORD, or the whole URL in $LOCKMAN_URL.
    #[arg(long, global = true)]
    url: Option<String>,
    /// Read the password from FILE (its first line) instead of the URL: it replaces the URL's
    /// (with --sentinel, the sentinels'; with --cluster, the seed nodes'). Default:
    /// $LOCKMAN_PASSWORD, else the URL's.
    #[arg(long, global = true, value_name = "FILE")]
    password_file: Option<PathBuf>,
    /// Sentinel: the master's name; --url is then the sentinels' URLs, comma-separated.
    #[arg(long, global = true, value_name = "MASTER")]
    sentinel: Option<String>,
    /// Sentinel: the primary's ACL user (its password from --master-password).
    #[arg(long, global = true, value_name = "USER")]
    master_user: Option<String>,
    /// Sentinel: the primary's password (the sentinels' own come in their URLs). Visible in
    /// ps when given here: prefer $LOCKMAN_MASTER_PASSWORD.
    #[arg(
        long,
        global = true,
        env = "LOCKMAN_MASTER_PASSWORD",
        hide_env_values = true
    )]
    master_password: Option<String>,
    /// Sentinel: reach the primary over TLS (--master-tls), or not (--master-tls=false).
    /// Default: TLS when every sentinel URL is rediss://.
    #[arg(
        long,
        global = true,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    master_tls: Option<bool>,
    /// Redis Cluster: --url is then seed nodes' URLs, comma-separated.
    #[arg(long, global = true)]
    cluster: bool,
    /// A PEM file of the CA that signed the server's TLS certificate (rediss:// only).
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) tls_ca: Option<PathBuf>,
    /// How long a lock taken without --lease outlives a dead lockman (renewed every third of it).
    #[arg(long, global = true, value_name = "DUR", value_parser = duration, default_value = "30s")]
    pub(crate) watchdog_timeout: Duration,
    /// After a lock's hold ends without a release (expired, lost, force-unlocked), wait this long
    /// past its expiry before taking the name (Config::lock_delay; reentrant locks).
    #[arg(long, global = true, value_name = "DUR", value_parser = duration, default_value = "0s")]
    lock_delay: Duration,
    /// The service name this lockman gives in its client record (`lockman ls` shows it).
    #[arg(long, global = true, env = "LOCKMAN_CLIENT_NAME", value_name = "NAME")]
    client_name: Option<String>,
    /// Prefix every name with PREFIX, as a Redisson `PrefixNameMapper` with that prefix does
    /// (a name that starts with it already is used as it is). Give the separator too: `app1:`.
    #[arg(long, global = true, value_name = "PREFIX", env = "LOCKMAN_PREFIX")]
    prefix: Option<String>,
    /// How long connecting to Redis may take.
    #[arg(long, global = true, value_name = "DUR", value_parser = duration, default_value = "5s")]
    connect_timeout: Duration,
    /// After each acquire, wait until N replicas have it (WAIT, as Config::sync_replicas): an
    /// acquire fewer acknowledged within --sync-timeout is given back and fails.
    #[arg(long, global = true, value_name = "N")]
    sync_replicas: Option<u32>,
    /// How long --sync-replicas waits for the replicas.
    #[arg(long, global = true, value_name = "DUR", value_parser = duration, default_value = "250ms")]
    sync_timeout: Duration,
    /// Set by `main`: the subcommand takes a hold (`exec`, `elect`), so that connecting warns
    /// about a server that may evict lock keys.
    #[arg(skip)]
    pub(crate) holds: bool,
    /// Set by `main`: how long the subcommand waits for Redis, if it does (`exec`: its
    /// `--wait`, `Duration::MAX` without one; `elect`: `Duration::MAX`). A server refusing at
    /// the start for a state that passes (`BUSY`, `LOADING`, …) is asked again within it,
    /// capped at `Config::unavailable_after` (the bound on every wait while Redis is away);
    /// without it, the refusal is the answer.
    #[arg(skip)]
    pub(crate) start_wait: Option<Duration>,
}

/// Never the URL or a password: a `{:?}` of the parsed command line must be safe to print.
impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Option<Vec<String>> = self.url.as_ref().map(|url| {
            url.split(',')
                .map(|u| lockman::redacted_url(u.trim()))
                .collect()
        });
        f.debug_struct("Server")
            .field("url", &urls)
            .field("password_file", &self.password_file)
            .field("sentinel", &self.sentinel)
            .field("master_user", &self.master_user)
            .field(
                "master_password",
                &self.master_password.as_ref().map(|_| "***"),
            )
            .field("master_tls", &self.master_tls)
            .field("cluster", &self.cluster)
            .field("tls_ca", &self.tls_ca)
            .field("watchdog_timeout", &self.watchdog_timeout)
            .field("lock_delay", &self.lock_delay)
            .field("client_name", &self.client_name)
            .field("prefix", &self.prefix)
            .field("connect_timeout", &self.connect_timeout)
            .field("sync_replicas", &self.sync_replicas)
            .field("sync_timeout", &self.sync_timeout)
            .finish()
    }
}

/// The environment variables that carry lockman's own secrets: `exec` and `elect` take them out
/// of their command's environment unless `--keep-env` is given. `REDIS_URL` is not one of them:
/// it is a common convention that the command may use for its own Redis, and is passed on.
pub const SECRET_VARIABLES: [&str; 3] =
    ["LOCKMAN_URL", "LOCKMAN_PASSWORD", "LOCKMAN_MASTER_PASSWORD"];

/// Takes [`SECRET_VARIABLES`] out of `command`'s environment, unless `keep`.
pub fn strip_secrets(command: &mut tokio::process::Command, keep: bool) {
    if !keep {
        for name in SECRET_VARIABLES {
            command.env_remove(name);
        }
    }
}

impl Server {
    /// The URL (or comma-separated URLs) given: `--url`, `$LOCKMAN_URL`, `$REDIS_URL`, or the
    /// default. It may carry a password: never print it (see [`lockman::redacted_url`]).
    fn url(&self) -> String {
        self.url
            .clone()
            .or_else(|| std::env::var("LOCKMAN_URL").ok().filter(|u| !u.is_empty()))
            .or_else(|| std::env::var("REDIS_URL").ok().filter(|u| !u.is_empty()))
            .unwrap_or_else(|| "redis://127.0.0.1:6379".into())
    }

    /// Whether `--url` names one server (not sentinels or cluster seeds).
    pub(crate) fn single(&self) -> bool {
        self.sentinel.is_none() && !self.cluster
    }

    /// The password that replaces the URL's: `--password-file`'s first line, else
    /// `$LOCKMAN_PASSWORD`.
    fn password(&self) -> Result<Option<String>, Failure> {
        if let Some(path) = &self.password_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::new(
                    code::USAGE,
                    format!("--password-file {}: cannot read it: {e}", path.display()),
                )
            })?;
            let password = text.lines().next().unwrap_or_default();
            if password.is_empty() {
                return Err(Failure::new(
                    code::USAGE,
                    format!(
                        "--password-file {}: its first line is empty",
                        path.display()
                    ),
                ));
            }
            return Ok(Some(password.to_owned()));
        }
        Ok(std::env::var("LOCKMAN_PASSWORD")
            .ok()
            .filter(|p| !p.is_empty()))
    }

    /// The one server's URL parsed, with the password of `--password-file` or
    /// `$LOCKMAN_PASSWORD` in place of its own: for a connection of the command's own (`watch`).
    pub(crate) fn connection_info(&self) -> Result<redis::ConnectionInfo, Failure> {
        use redis::IntoConnectionInfo;
        let url = self.url();
        let info = url.trim().into_connection_info().map_err(|_| {
            Failure::new(
                code::USAGE,
                format!("invalid redis url: {}", lockman::redacted_url(&url)),
            )
        })?;
        Ok(match self.password()? {
            Some(password) => {
                let settings = info.redis_settings().clone().set_password(password);
                info.set_redis_settings(settings)
            }
            None => info,
        })
    }

    /// The warnings due before connecting, each once on stderr: a password on the command line
    /// (any user can read it with ps for as long as lockman runs), TLS checks turned off
    /// (`#insecure`), and a Sentinel primary reached in plain text while the sentinels use TLS.
    pub(crate) fn warn(&self) {
        let argv: Vec<String> = std::env::args().collect();
        // `--url` comes from the command line only (the environment's URL is not in ps).
        if let Some(url) = &self.url
            && url.split(',').any(|u| has_password(u.trim()))
        {
            eprintln!(
                "lockman: warning: the password in --url is visible to every user of this \
                 machine (ps, /proc/PID/cmdline); give it with --password-file FILE or \
                 $LOCKMAN_PASSWORD, or the URL in $LOCKMAN_URL"
            );
        }
        if argv
            .iter()
            .any(|a| a == "--master-password" || a.starts_with("--master-password="))
        {
            eprintln!(
                "lockman: warning: --master-password is visible to every user of this machine \
                 (ps, /proc/PID/cmdline); give it in $LOCKMAN_MASTER_PASSWORD"
            );
        }
        let url = self.url();
        let urls: Vec<&str> = url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .collect();
        if urls.iter().any(|u| is_insecure(u)) {
            eprintln!(
                "lockman: warning: TLS certificate and host checks are OFF (#insecure in the \
                 URL): anyone in the middle can read and change every command"
            );
        }
        let tls = |u: &&str| {
            let u = u.to_ascii_lowercase();
            u.starts_with("rediss://") || u.starts_with("valkeys://")
        };
        if self.sentinel.is_some() && urls.iter().any(tls) {
            let master_tls = self.master_tls.unwrap_or_else(|| urls.iter().all(tls));
            if !master_tls {
                eprintln!(
                    "lockman: warning: the sentinels are reached over TLS but the primary in \
                     plain text: its password and every lock command travel unencrypted \
                     (--master-tls turns TLS on for it)"
                );
            }
        }
    }

    pub(crate) fn config(&self) -> Result<Config, Failure> {
        let url = self.url();
        let urls = || url.split(',').map(str::trim).filter(|u| !u.is_empty());
        if self.sentinel.is_some() && self.cluster {
            return Err(Failure::new(
                code::USAGE,
                "--sentinel and --cluster exclude each other",
            ));
        }
        let config = match (&self.sentinel, self.cluster) {
            (Some(master), _) => {
                let mut config = Config::sentinel(master.as_str(), urls());
                if let Some(tls) = self.master_tls {
                    config = config.master_tls(tls);
                }
                match &self.master_password {
                    Some(pw) => config.master_auth(self.master_user.as_deref(), pw.as_str()),
                    None => config,
                }
            }
            (None, true) => Config::cluster(urls()),
            (None, false) => Config::new(url.as_str()),
        };
        let mut config = config
            .watchdog_timeout(self.watchdog_timeout)
            .lock_delay(self.lock_delay)
            .connect_timeout(self.connect_timeout);
        if let Some(password) = self.password()? {
            config = config.password(password);
        }
        if let Some(name) = &self.client_name {
            config = config.client_name(name.as_str());
        }
        if let Some(prefix) = &self.prefix {
            config = config.name_prefix(prefix.as_str());
        }
        if let Some(count) = self.sync_replicas {
            config = config.sync_replicas(count, self.sync_timeout);
        }
        if let Some(path) = &self.tls_ca {
            config = config.tls_ca_pem(self.tls_ca_pem(path)?);
        }
        Ok(config)
    }

    /// The `--tls-ca` file's bytes; an unreadable file is refused (the library refuses one
    /// with no PEM certificate in it when the manager starts).
    fn tls_ca_pem(&self, path: &std::path::Path) -> Result<Vec<u8>, Failure> {
        std::fs::read(path).map_err(|e| {
            Failure::new(
                code::USAGE,
                format!("--tls-ca {}: cannot read it: {e}", path.display()),
            )
        })
    }

    pub(crate) async fn connect(&self) -> Result<LockManager, Failure> {
        self.start(self.config()?).await
    }

    /// Starts a manager on `config` ([`Self::config`], as a subcommand adjusts it), and warns
    /// once when the server may evict the locks this command is about to hold.
    pub(crate) async fn start(&self, config: Config) -> Result<LockManager, Failure> {
        let manager = self.open(config).await?;
        if self.holds {
            // The library warns in its log, which the command does not show: said here, once,
            // before a hold is taken on a server that may take it away.
            if let Ok(Some(policy)) = manager.evicting_policy().await {
                eprintln!(
                    "lockman: warning: the server may evict lock keys (maxmemory-policy \
                     {policy}): under memory pressure a lock can vanish while held, and a \
                     second holder take it; set maxmemory-policy noeviction (lockman doctor \
                     says more)"
                );
            }
        }
        Ok(manager)
    }

    async fn open(&self, config: Config) -> Result<LockManager, Failure> {
        // A refusal of a state that passes is retried as a wait retries it, with backoff, the
        // last attempt at the end of the wait (issue 57: a BUSY script at the start failed
        // `exec --wait 5s` at once).
        let wait = self
            .start_wait
            .map_or(Duration::ZERO, |w| w.min(config.get_unavailable_after()));
        let began = std::time::Instant::now();
        let mut pause = START_RETRY_MIN;
        let e = loop {
            match LockManager::start(config.clone()).await {
                Ok(manager) => return Ok(manager),
                Err(e) if passing_refusal(&e).is_some() => {
                    let left = wait.saturating_sub(began.elapsed());
                    if left.is_zero() {
                        break e;
                    }
                    tokio::time::sleep(pause.min(left)).await;
                    pause = (pause * 2).min(START_RETRY_MAX);
                }
                Err(e) => break e,
            }
        };
        // redis-rs reports every refused AUTH alike; Redis refuses a password for a server
        // that has none too. Asked here, so that the message says which.
        if let LockError::Auth { url, .. } = &e
            && self.lets_in_without_password().await
        {
            return Err(Failure::new(
                code::REDIS,
                format!(
                    "redis at {url} has no password, but one was given: leave it out (of the \
                     URL, --password-file and $LOCKMAN_PASSWORD), or set one on the server"
                ),
            ));
        }
        Err(self.failure(e))
    }

    /// Whether the one server named lets a client in without a user or password (its
    /// `default` user has none): a PING on a connection of its own, within the connect
    /// timeout. Not asked for a URL with a user name, whose refusal may be the user's.
    async fn lets_in_without_password(&self) -> bool {
        use redis::IntoConnectionInfo;
        if !self.single() {
            return false;
        }
        let Ok(info) = self.url().as_str().into_connection_info() else {
            return false;
        };
        if info.redis_settings().username().is_some() {
            return false;
        }
        let info = info.set_redis_settings(redis::RedisConnectionInfo::default());
        let Ok(client) = redis::Client::open(info) else {
            return false;
        };
        let ping = async {
            let mut conn = client.get_multiplexed_async_connection().await.ok()?;
            redis::cmd("PING")
                .query_async::<String>(&mut conn)
                .await
                .ok()
        };
        matches!(
            tokio::time::timeout(self.connect_timeout, ping).await,
            Ok(Some(_))
        )
    }

    /// The failure of a manager that did not start.
    fn failure(&self, e: LockError) -> Failure {
        match (&e, &self.tls_ca) {
            (
                LockError::InvalidArgument {
                    what: "tls CA",
                    reason,
                },
                Some(path),
            ) => Failure::new(
                code::USAGE,
                format!("--tls-ca {}: {reason}", path.display()),
            ),
            _ => Failure::redis(e),
        }
    }
}

/// The first and the longest pause between the starts of a manager refused for a passing state.
const START_RETRY_MIN: Duration = Duration::from_millis(50);
const START_RETRY_MAX: Duration = Duration::from_secs(1);

/// The code of a refusal for a state of the server that passes by itself (a script running
/// past `busy-reply-threshold`, a dataset loading, a primary or cluster not ready), the same
/// list the library's waits retry.
pub fn passing_refusal(e: &LockError) -> Option<&'static str> {
    const PASSING: [&str; 5] = ["BUSY", "LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"];
    let source = match e {
        LockError::Redis { source, .. } | LockError::Connect { source, .. } => source,
        _ => return None,
    };
    let code = source.code()?;
    PASSING.into_iter().find(|c| *c == code)
}

/// Whether `url` carries a password, as redis-rs reads it (`user:pw@`, a socket's `?pass=`).
fn has_password(url: &str) -> bool {
    use redis::IntoConnectionInfo;
    url.into_connection_info()
        .is_ok_and(|info| info.redis_settings().password().is_some())
}

/// Whether `url` turns TLS checks off (`rediss://…#insecure`), as redis-rs reads it.
fn is_insecure(url: &str) -> bool {
    use redis::IntoConnectionInfo;
    url.into_connection_info().is_ok_and(|info| {
        matches!(
            info.addr(),
            redis::ConnectionAddr::TcpTls { insecure: true, .. }
        )
    })
}

/// Where a password goes without showing up in ps.
pub(crate) const PASSWORD_HINT: &str = "give it with --password-file FILE or $LOCKMAN_PASSWORD \
     (or the whole URL in $LOCKMAN_URL: redis://USER:PASSWORD@host:port)";
