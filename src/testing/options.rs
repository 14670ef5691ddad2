//! What a throwaway server is made of before it starts: the binary it runs ([`ServerBinary`],
//! and what it says it is), and the [`Options`] it starts with (arguments, a password, a unix
//! socket, TLS files).

use std::ffi::OsString;
#[cfg(feature = "tls")]
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::error::ServerError;

/// The server binary a [`TestServer`](super::TestServer) runs, and what it says it is.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ServerBinary {
    /// `REDIS_SERVER_BIN`, else `redis-server` (found on the `PATH`).
    pub bin: OsString,
    /// The start of its `--version` line: `Redis server v=7.0.15`, `Valkey server v=9.1.2`.
    pub version: String,
}

impl ServerBinary {
    /// The binary `REDIS_SERVER_BIN` names, else `redis-server`, if it runs `--version`;
    /// [`ServerError::Missing`] if it cannot be run.
    pub fn find() -> Result<Self, ServerError> {
        let bin = std::env::var_os("REDIS_SERVER_BIN")
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| "redis-server".into());
        Self::probe(bin)
    }

    /// `bin`, if it runs `--version`.
    pub(super) fn probe(bin: OsString) -> Result<Self, ServerError> {
        let out = Command::new(&bin)
            .arg("--version")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .map_err(|source| ServerError::Missing {
                bin: bin.clone(),
                source,
            })?;
        let line = String::from_utf8_lossy(&out.stdout).into_owned();
        // "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 …": the name and version;
        // the build details would only make every message longer.
        let words: Vec<&str> = line.split_whitespace().take(3).collect();
        if !out.status.success() || words.is_empty() {
            return Err(ServerError::Missing {
                source: std::io::Error::other(format!("`--version` answered {}", out.status)),
                bin,
            });
        }
        Ok(Self {
            version: words.join(" "),
            bin,
        })
    }
}

/// What kind of server [`TestServer::start_with`](super::TestServer::start_with) starts: built from
/// `Options::default()`.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Options {
    pub(super) bin: Option<OsString>,
    pub(super) args: Vec<String>,
    pub(super) password: Option<String>,
    pub(super) unix_socket: bool,
    #[cfg(feature = "tls")]
    pub(super) tls: Option<TlsFiles>,
}

impl Options {
    /// Run this binary (a path, or a name looked up on the `PATH`: `valkey-server`) instead of
    /// `REDIS_SERVER_BIN` or `redis-server`.
    pub fn bin(mut self, bin: impl Into<OsString>) -> Self {
        self.bin = Some(bin.into());
        self
    }

    /// One more server argument (`--maxmemory-policy`, then `allkeys-lru`): after the kit's
    /// defaults, so it wins over them (`--appendonly yes` turns persistence on).
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// More server arguments, e.g. `["--user", "app", "on", ">pw", "~*", "&*", "+@all"]`.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// The `default` user's password (`--requirepass`); the kit's own connections and
    /// [`TestServer::config`](super::TestServer::config) give it.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Also listen on a unix socket in the server's folder
    /// ([`TestServer::unix_url`](super::TestServer::unix_url)).
    pub fn unix_socket(mut self) -> Self {
        self.unix_socket = true;
        self
    }

    /// TLS only: the server listens for `rediss://` on its port, with these files.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, files: TlsFiles) -> Self {
        self.tls = Some(files);
        self
    }
}

/// The PEM files of a TLS-only [`TestServer`](super::TestServer): its certificate (for the DNS name
/// `localhost`, which [`TestServer::url`](super::TestServer::url) names), its key, the CA clients
/// trust, and optionally a client certificate the kit presents.
#[cfg(feature = "tls")]
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    pub(super) ca: PathBuf,
    pub(super) client: Option<(PathBuf, PathBuf)>,
    auth_clients: bool,
}

#[cfg(feature = "tls")]
impl TlsFiles {
    /// The server's certificate and key, and the CA file (`--tls-ca-cert-file`, also what the
    /// kit's connections and configs trust).
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>, ca: impl Into<PathBuf>) -> Self {
        Self {
            cert: cert.into(),
            key: key.into(),
            ca: ca.into(),
            client: None,
            auth_clients: false,
        }
    }

    /// The server requires a client certificate (`--tls-auth-clients yes`); the kit's
    /// connections and configs present this one.
    pub fn require_client(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.client = Some((cert.into(), key.into()));
        self.auth_clients = true;
        self
    }

    /// The kit presents this client certificate, but the server does not require one.
    pub fn client(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.client = Some((cert.into(), key.into()));
        self
    }

    pub(super) fn server_args(&self, port: u16) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            path(&self.cert),
            "--tls-key-file".into(),
            path(&self.key),
            "--tls-ca-cert-file".into(),
            path(&self.ca),
            "--tls-auth-clients".into(),
            if self.auth_clients { "yes" } else { "no" }.into(),
        ]
    }
}
