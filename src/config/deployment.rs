//! Where a config's Redis is and how it is reached: one server, Sentinel or a Cluster, with
//! the passwords, database and TLS of each.

use std::sync::Arc;

use super::Config;
use super::redact::{self, redacted};

/// Where the Redis of a config is.
#[derive(Clone)]
pub(crate) enum Deployment {
    /// One server, by URL.
    Server { url: String },
    /// The primary that Sentinel names.
    Sentinel(SentinelSettings),
    /// A Redis Cluster, found from these seed nodes.
    Cluster {
        nodes: Vec<String>,
        subscription: ShardedSubscription,
    },
}

/// How a cluster's lock channels are subscribed and published: sharded pub/sub (`SSUBSCRIBE`,
/// `SPUBLISH`, Redis 7+: each channel lives on the shard that owns its slot) or classic pub/sub
/// (`SUBSCRIBE`, `PUBLISH`: every message goes to every node). Both sides of every client on
/// the same names must agree, so lockman decides as Redisson's `shardedSubscriptionMode` does.
/// Only a cluster config has it; one server and Sentinel always use classic pub/sub.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ShardedSubscription {
    /// Sharded when the cluster supports it: decided once at start, by whether
    /// `PUBSUB SHARDNUMSUB` succeeds (Redisson's default, `AUTO`).
    #[default]
    Auto,
    /// Always sharded (Redisson's `ON`).
    On,
    /// Always classic (Redisson's `OFF`).
    Off,
}

/// What [`Config::sentinel`] and its companions set.
#[derive(Clone)]
pub(crate) struct SentinelSettings {
    pub master_name: String,
    pub sentinels: Vec<String>,
    pub master_user: Option<String>,
    pub master_password: Option<String>,
    pub master_db: i64,
    /// `None`: as the sentinels ([`SentinelSettings::master_tls`]).
    pub master_tls: Option<bool>,
}

impl SentinelSettings {
    /// Whether every sentinel URL asks for TLS (`rediss://`, `valkeys://`).
    pub(crate) fn sentinels_all_tls(&self) -> bool {
        !self.sentinels.is_empty() && self.sentinels.iter().all(|url| redact::is_tls(url))
    }

    /// Whether the primary is reached over TLS: as set by [`Config::master_tls`], else as the
    /// sentinels are reached (TLS when every sentinel URL is `rediss://`).
    pub(crate) fn master_tls(&self) -> bool {
        self.master_tls.unwrap_or_else(|| self.sentinels_all_tls())
    }

    /// Whether the primary's TLS skips certificate and host checks: only when TLS follows the
    /// sentinels (not set by [`Config::master_tls`]) and every sentinel URL ends in `#insecure`.
    pub(crate) fn master_insecure(&self) -> bool {
        self.master_tls.is_none()
            && self.sentinels_all_tls()
            && self.sentinels.iter().all(|url| redact::is_insecure(url))
    }
}

/// What starts each certificate of a PEM file.
pub(super) const PEM_CERTIFICATE: &[u8] = b"-----BEGIN CERTIFICATE-----";

/// Certificates for `rediss://` connections.
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    pub ca_pem: Option<Arc<[u8]>>,
    pub client_identity: Option<ClientIdentity>,
}

/// A client certificate chain and its private key, both PEM.
pub(crate) type ClientIdentity = (Arc<[u8]>, Arc<[u8]>);

impl Deployment {
    /// Whether a TLS connection of this deployment skips certificate and host checks
    /// (`rediss://…#insecure`).
    pub(crate) fn insecure_tls(&self) -> bool {
        match self {
            Deployment::Server { url } => redact::is_insecure(url),
            Deployment::Sentinel(s) => s.sentinels.iter().any(|url| redact::is_insecure(url)),
            Deployment::Cluster { nodes, .. } => nodes.iter().any(|url| redact::is_insecure(url)),
        }
    }

    /// The deployment as printed: URLs without passwords.
    pub(crate) fn label(&self) -> String {
        match self {
            Deployment::Server { url } => redacted(url),
            Deployment::Sentinel(s) => {
                let sentinels: Vec<String> = s.sentinels.iter().map(|u| redacted(u)).collect();
                format!(
                    "sentinel master {:?} via {}",
                    s.master_name,
                    sentinels.join(",")
                )
            }
            Deployment::Cluster { nodes, .. } => {
                let nodes: Vec<String> = nodes.iter().map(|u| redacted(u)).collect();
                format!("cluster via {}", nodes.join(","))
            }
        }
    }
}

impl Config {
    /// Settings for one Redis server: `redis://[user:password@]host:port/db`, `rediss://…` for
    /// TLS, or `redis+unix:///path/to/redis.sock?db=N` for a unix socket. A user and password in
    /// the URL authenticate every connection (Redis ACL users; `redis://:password@…` for the
    /// `default` user). The URL is checked by [`LockManager::start`](crate::LockManager::start).
    ///
    /// TLS checks the server's certificate against the webpki roots (or the CA given to
    /// [`tls_ca_pem`](Self::tls_ca_pem)) and its host name. A URL ending in `#insecure` turns
    /// both checks off: the connection is then encrypted but open to anyone in the middle; use
    /// it only for a test server.
    pub fn new(url: impl Into<String>) -> Self {
        Self::with(Deployment::Server { url: url.into() })
    }

    /// Settings for the primary of the Redis deployment `master_name` that these sentinels
    /// watch (`redis://host:26379`, `rediss://…`; a user and password in a sentinel's URL are
    /// the sentinels' own). lockman asks the sentinels for the primary at start, every second
    /// after, and at once when a command meets a replica or a dropped connection; when the
    /// primary moves, commands, subscriptions and renewals move with it.
    ///
    /// The primary's own credentials, database and TLS are set with
    /// [`master_auth`](Self::master_auth), [`master_db`](Self::master_db) and
    /// [`master_tls`](Self::master_tls). The primary is reached over TLS when every sentinel
    /// URL is `rediss://`, unless [`master_tls(false)`](Self::master_tls) says otherwise.
    ///
    /// ```
    /// let config = lockman::Config::sentinel(
    ///     "mymaster",
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    /// )
    /// .master_auth(Some("app"), "secret");
    /// assert_eq!(config.url(), None);
    /// ```
    pub fn sentinel<I, S>(master_name: impl Into<String>, sentinel_urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with(Deployment::Sentinel(SentinelSettings {
            master_name: master_name.into(),
            sentinels: sentinel_urls.into_iter().map(Into::into).collect(),
            master_user: None,
            master_password: None,
            master_db: 0,
            master_tls: None,
        }))
    }

    /// Settings for a Redis Cluster, found from these seed nodes (`redis://host:port`,
    /// `rediss://…`, with the ACL user and password in the URLs). Every key and channel of one
    /// lock lives in one slot (the name is their hash tag), so each lock is served by one shard;
    /// names whose braces would split them across slots are refused (see `docs/protocol.md`).
    /// Unlock messages use sharded pub/sub when the cluster has it: see
    /// [`sharded_subscription`](Self::sharded_subscription).
    ///
    /// ```
    /// let config = lockman::Config::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]);
    /// assert_eq!(config.url(), None);
    /// ```
    pub fn cluster<I, S>(nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with(Deployment::Cluster {
            nodes: nodes.into_iter().map(Into::into).collect(),
            subscription: ShardedSubscription::Auto,
        })
    }

    /// Cluster only: how unlock messages travel; match the Redisson clients on the same names.
    ///
    /// Default: [`ShardedSubscription::Auto`].
    pub fn sharded_subscription(mut self, mode: ShardedSubscription) -> Self {
        if let Deployment::Cluster { subscription, .. } = &mut self.deployment {
            *subscription = mode;
        }
        self
    }

    /// The password of every URL of this config, in place of the one the URL gives (or
    /// lacks): the server's, the cluster's seed nodes', or the sentinels' own (the primary's is
    /// [`master_auth`](Self::master_auth)'s). For a password kept apart from the URL, in a file
    /// or a secret store, so that the URL can be shown or passed on as it is. The user name, if
    /// any, still comes from the URL.
    ///
    /// Default: the URL's.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// See [`Config::password`](Self::password()): the password set, if any (not the URL's).
    pub(crate) fn get_password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// Sentinel only: the user (`None` for `default`) and password of the primary.
    ///
    /// Default: none.
    pub fn master_auth(mut self, user: Option<&str>, password: impl Into<String>) -> Self {
        if let Deployment::Sentinel(s) = &mut self.deployment {
            s.master_user = user.map(str::to_owned);
            s.master_password = Some(password.into());
        }
        self
    }

    /// Sentinel only: the database number on the primary.
    ///
    /// Default: 0.
    pub fn master_db(mut self, db: u32) -> Self {
        if let Deployment::Sentinel(s) = &mut self.deployment {
            s.master_db = i64::from(db);
        }
        self
    }

    /// Sentinel only: whether the primary is reached over TLS (the sentinels' own TLS follows
    /// their URLs). By default the primary follows the sentinels: TLS, with the same CA and
    /// client certificate, when every sentinel URL is `rediss://` (and without certificate and
    /// host checks only when every one of them ends in `#insecure`), plain TCP otherwise. The
    /// primary's password travels over this connection: `master_tls(false)` with TLS sentinels
    /// sends it in clear, and the manager logs a warning at start when it does.
    ///
    /// Default: as the sentinels.
    pub fn master_tls(mut self, tls: bool) -> Self {
        if let Deployment::Sentinel(s) = &mut self.deployment {
            s.master_tls = Some(tls);
        }
        self
    }

    /// Trust the certificate authorities in this PEM (one or more certificates) for `rediss://`
    /// connections, instead of the public webpki roots: for a private CA. A PEM with no
    /// certificate in it (empty, DER, a key) is refused by [`LockManager::start`](crate::LockManager::start)
    /// with [`LockError::InvalidArgument`](crate::LockError::InvalidArgument).
    ///
    /// Default: the webpki roots.
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.ca_pem = Some(pem.into().into());
        self
    }

    /// Present this client certificate (PEM chain) and private key (PEM) on `rediss://`
    /// connections: mutual TLS, for a server started with `tls-auth-clients yes`.
    ///
    /// Default: none.
    pub fn tls_client_identity(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client_identity = Some((cert_pem.into().into(), key_pem.into().into()));
        self
    }

    /// The URL of a one-server config, **as given, password included**; `None` for Sentinel
    /// and Cluster. Do not log or print it: `Config`'s `Debug` shows the URL without its
    /// password (`redis://app:***@host:6379/0`, a unix socket's `?pass=***`).
    pub fn url(&self) -> Option<&str> {
        match &self.deployment {
            Deployment::Server { url } => Some(url),
            Deployment::Sentinel(_) | Deployment::Cluster { .. } => None,
        }
    }

    pub(crate) fn deployment(&self) -> &Deployment {
        &self.deployment
    }

    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) fn tls(&self) -> &TlsSettings {
        &self.tls
    }
}
