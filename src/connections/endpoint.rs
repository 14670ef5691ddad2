//! [`Endpoint`]: where the primary is — one server named by a URL, the primary that Sentinel
//! names (followed through a failover), or a cluster (`cluster.rs`). No actix here.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{Client, ConnectionAddr};

use super::cluster::ClusterTarget;
use crate::config::{Config, Deployment, SentinelSettings};
use crate::error::LockError;

use super::failure::connect_error;
#[cfg(all(test, feature = "tls"))]
use super::failure::tls_failure;
#[cfg(feature = "tls")]
use super::url::certificates;
use super::url::{connection_info, install_crypto_provider, server_client};

/// Where the primary is: fixed for one server, looked up through Sentinel otherwise. Cheap to
/// clone; clones share the current primary.
#[derive(Clone)]
pub(crate) struct Endpoint {
    inner: Arc<Inner>,
}

struct Inner {
    /// The client of the current primary: replaced when Sentinel names another. (For a cluster,
    /// the first seed node: not used for commands or pub/sub.)
    current: RwLock<Client>,
    /// `Some` for a cluster: commands and pub/sub go through cluster connections.
    cluster: Option<ClusterTarget>,
    /// `Some` for Sentinel: asked again whenever lockman suspects a failover.
    sentinel: Option<tokio::sync::Mutex<SentinelClient>>,
    /// The deployment, as printed in errors and logs (no password).
    label: String,
    /// Raised when a command saw a sign of a failover (READONLY, a dropped connection).
    suspect: tokio::sync::Notify,
    /// How long a reply may take ([`Config::response_timeout`]): also the pub/sub connection's.
    response_timeout: Duration,
}

impl Endpoint {
    /// Builds the clients of `config` and, for Sentinel, asks the sentinels for the primary.
    pub(crate) async fn open(config: &Config) -> Result<Self, LockError> {
        install_crypto_provider();
        let label = config.deployment().label();
        let mut cluster = None;
        let (client, sentinel) = match config.deployment() {
            Deployment::Server { url } => (server_client(url, config)?, None),
            Deployment::Cluster {
                nodes,
                subscription,
            } => {
                let target = ClusterTarget::open(nodes, *subscription, config, &label).await?;
                cluster = Some(target);
                (server_client(&nodes[0], config)?, None)
            }
            Deployment::Sentinel(settings) => {
                let mut sentinel = sentinel_client(settings, config)?;
                let limit = config.get_connect_timeout();
                let client = match tokio::time::timeout(limit, sentinel.async_get_client()).await {
                    Ok(Ok(client)) => client,
                    Ok(Err(source)) => return Err(connect_error(&label, source)),
                    Err(_) => {
                        return Err(LockError::Timeout {
                            op: "ask sentinel for the primary",
                            after: limit,
                        });
                    }
                };
                (client, Some(tokio::sync::Mutex::new(sentinel)))
            }
        };
        Ok(Self {
            inner: Arc::new(Inner {
                current: RwLock::new(client),
                cluster,
                sentinel,
                label,
                suspect: tokio::sync::Notify::new(),
                response_timeout: config.get_response_timeout(),
            }),
        })
    }

    /// The client of the current primary.
    pub(crate) fn client(&self) -> Client {
        match self.inner.current.read() {
            Ok(client) => client.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The cluster, when the deployment is one.
    pub(crate) fn cluster(&self) -> Option<&ClusterTarget> {
        self.inner.cluster.as_ref()
    }

    /// The command that publishes unlock messages: `spublish` on a cluster with sharded pub/sub,
    /// `publish` everywhere else. The scripts get it as an argument, so that the publishing side
    /// and the subscribing side (the PubSubActor) follow this one decision.
    pub(crate) fn publish_command(&self) -> &'static str {
        match self.cluster() {
            Some(cluster) if cluster.sharded() => "spublish",
            _ => "publish",
        }
    }

    /// The deployment, without passwords: for errors and logs.
    pub(crate) fn label(&self) -> &str {
        &self.inner.label
    }

    /// How long a reply may take before the connection is deemed silent
    /// ([`Config::response_timeout`]).
    pub(crate) fn response_timeout(&self) -> Duration {
        self.inner.response_timeout
    }

    /// Whether the primary can move (Sentinel).
    pub(crate) fn follows_failover(&self) -> bool {
        self.inner.sentinel.is_some()
    }

    /// Asks Sentinel for the primary and makes its client the current one (a no-op without
    /// Sentinel). Whoever holds connections compares [`client`](Self::client)'s address with
    /// theirs to learn that it moved.
    pub(crate) async fn locate(&self, limit: Duration) -> Result<(), LockError> {
        let Some(sentinel) = &self.inner.sentinel else {
            return Ok(());
        };
        let found = tokio::time::timeout(limit, async {
            sentinel.lock().await.async_get_client().await
        })
        .await
        .map_err(|_| LockError::Timeout {
            op: "ask sentinel for the primary",
            after: limit,
        })?
        .map_err(|source| LockError::Redis {
            op: "ask sentinel for the primary",
            source,
        })?;
        match self.inner.current.write() {
            Ok(mut current) => *current = found,
            Err(poisoned) => *poisoned.into_inner() = found,
        }
        Ok(())
    }

    /// A command saw a sign that the primary may have moved: ask Sentinel soon.
    pub(crate) fn suspect_failover(&self) {
        if self.follows_failover() {
            self.inner.suspect.notify_one();
        }
    }

    /// Resolves when [`suspect_failover`](Self::suspect_failover) was called.
    pub(crate) async fn suspected(&self) {
        self.inner.suspect.notified().await;
    }
}

/// The Sentinel client of `settings`: the sentinels' addresses and password (from their URLs),
/// the primary's name, database, user, password and TLS.
fn sentinel_client(
    settings: &SentinelSettings,
    config: &Config,
) -> Result<SentinelClient, LockError> {
    if settings.sentinels.is_empty() {
        return Err(LockError::invalid(
            "sentinel urls",
            "at least one sentinel is needed",
        ));
    }
    if settings.master_name.is_empty() {
        return Err(LockError::invalid(
            "sentinel master name",
            "must not be empty",
        ));
    }
    let mut addrs = Vec::with_capacity(settings.sentinels.len());
    let mut auth: Option<(Option<String>, String)> = None;
    let mut sentinel_tls = false;
    for url in &settings.sentinels {
        let info = connection_info(url, config)?;
        let redis = info.redis_settings();
        if let Some(password) = redis.password() {
            auth = Some((redis.username().map(str::to_owned), password.to_owned()));
        }
        sentinel_tls |= matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        addrs.push(info.addr().clone());
    }
    let mut builder = SentinelClientBuilder::new(
        addrs,
        settings.master_name.clone(),
        SentinelServerType::Master,
    )
    .map_err(|e| LockError::invalid("sentinel urls", e.to_string()))?
    .set_client_to_redis_db(settings.master_db);
    if let Some((user, password)) = auth {
        if let Some(user) = user {
            builder = builder.set_client_to_sentinel_username(user);
        }
        builder = builder.set_client_to_sentinel_password(password);
    }
    if let Some(user) = &settings.master_user {
        builder = builder.set_client_to_redis_username(user);
    }
    if let Some(password) = &settings.master_password {
        builder = builder.set_client_to_redis_password(password);
    }
    let master_tls = settings.master_tls();
    builder = master_tls_mode(builder, settings, sentinel_tls)?;
    #[cfg(feature = "tls")]
    if let Some(certs) = certificates(config) {
        if master_tls {
            builder = builder.set_client_to_redis_certificates(certs.clone());
        }
        if sentinel_tls {
            builder = builder.set_client_to_sentinel_certificates(certs);
        }
    }
    // (Without `tls`, only the lines above read them.)
    let _ = (config, sentinel_tls, master_tls);
    builder
        .build()
        .map_err(|e| LockError::invalid("sentinel settings", e.to_string()))
}

/// The primary's TLS on `builder`: on, checked or `#insecure`, as `settings` say; off, said
/// once in the log when the sentinels (`sentinel_tls`) are reached over TLS.
fn master_tls_mode(
    mut builder: SentinelClientBuilder,
    settings: &SentinelSettings,
    sentinel_tls: bool,
) -> Result<SentinelClientBuilder, LockError> {
    if settings.master_tls() {
        if !cfg!(feature = "tls") {
            return Err(LockError::invalid(
                "sentinel master tls",
                "TLS needs lockman's `tls` cargo feature, which this build leaves out",
            ));
        }
        builder = builder.set_client_to_redis_tls_mode(if settings.master_insecure() {
            redis::TlsMode::Insecure
        } else {
            redis::TlsMode::Secure
        });
    } else if sentinel_tls {
        // The primary's password and every lock command would travel in clear while the
        // sentinels are reached over TLS: said once, when the manager starts.
        tracing::warn!(
            master = %settings.master_name,
            "the sentinels are reached over TLS but the primary in plain text (master_tls(false), \
             or not every sentinel URL is rediss://): its password and every lock command travel \
             unencrypted"
        );
    }
    Ok(builder)
}

#[cfg(test)]
mod tests {
    use super::super::url::is_tls_url;
    use super::*;
    #[cfg(feature = "tls")]
    use crate::error::TlsFailure;

    #[test]
    #[cfg(feature = "tls")]
    fn rustls_failures_are_told_apart() {
        let io = |text: &str| redis::RedisError::from(std::io::Error::other(text.to_owned()));
        let cases = [
            (
                "invalid peer certificate: UnknownIssuer",
                TlsFailure::UntrustedCertificate,
            ),
            (
                "invalid peer certificate: certificate not valid for name \"127.0.0.1\"",
                TlsFailure::HostnameMismatch,
            ),
            (
                "received corrupt message of type InvalidContentType",
                TlsFailure::NotTls,
            ),
            (
                "received fatal alert: CertificateRequired",
                TlsFailure::RejectedByServer,
            ),
        ];
        for (text, failure) in cases {
            assert_eq!(tls_failure(&io(text)), Some(failure), "{text}");
        }
        assert_eq!(tls_failure(&io("connection refused")), None);
    }

    #[test]
    #[cfg(not(feature = "tls"))]
    fn rediss_is_refused_without_the_tls_feature() {
        let err = super::super::url::parse_url("rediss://app:pw@host:6380/0").unwrap_err();
        let shown = err.to_string();
        assert!(shown.contains("`tls` cargo feature"), "{shown}");
        assert!(!shown.contains("pw@"), "{shown}");
    }

    #[test]
    fn tls_urls_are_recognised() {
        assert!(is_tls_url("rediss://h:1"));
        assert!(is_tls_url("REDISS://h:1"));
        assert!(!is_tls_url("redis://h:1"));
    }
}
