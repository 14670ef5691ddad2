//! URLs and TLS: a server URL parsed into redis-rs connection info (refusing `rediss://` in a
//! build without TLS), and the client built with the config's CA and client identity.

use std::time::Duration;

use redis::io::tcp::{TcpSettings, socket2};
use redis::{Client, ConnectionAddr, IntoConnectionInfo};

use crate::config::Config;
use crate::config::redact::redacted;
use crate::error::LockError;

/// The address of a client, for logs: `host:port` or the socket path.
pub(crate) fn address(client: &Client) -> String {
    match client.get_connection_info().addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            format!("{host}:{port}")
        }
        ConnectionAddr::Unix(path) => path.display().to_string(),
        other => format!("{other:?}"),
    }
}

/// rustls needs a process-wide crypto provider; lockman brings `ring`. An application that
/// installed one already keeps its own.
pub(super) fn install_crypto_provider() {
    #[cfg(feature = "tls")]
    {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Whether `url` asks for TLS.
pub(super) fn is_tls_url(url: &str) -> bool {
    url.trim_start()
        .to_ascii_lowercase()
        .starts_with("rediss://")
}

/// The client of one server URL, with the config's CA and client identity for `rediss://`.
pub(super) fn server_client(url: &str, config: &Config) -> Result<Client, LockError> {
    let info = connection_info(url, config)?;
    tls_client(info, config)
}

/// `url` parsed, with the config's [password](Config::password) in place of its own.
pub(crate) fn connection_info(
    url: &str,
    config: &Config,
) -> Result<redis::ConnectionInfo, LockError> {
    let info = parse_url(url)?;
    Ok(match config.get_password() {
        Some(password) => {
            let settings = info.redis_settings().clone().set_password(password);
            info.set_redis_settings(settings)
        }
        None => info,
    })
}

pub(crate) fn parse_url(url: &str) -> Result<redis::ConnectionInfo, LockError> {
    if is_tls_url(url) && !cfg!(feature = "tls") {
        return Err(LockError::invalid(
            "redis url",
            format!(
                "{}: rediss:// needs lockman's `tls` cargo feature, which this build leaves out",
                redacted(url)
            ),
        ));
    }
    let info = url
        .trim()
        .into_connection_info()
        .map_err(|e| LockError::invalid("redis url", unparsable(url, &e)))?;
    let tcp = keepalive(info.tcp_settings().clone());
    Ok(info.set_tcp_settings(tcp))
}

/// Why `url` did not parse, in words, with nothing of it past its scheme (the password may be
/// anywhere in a URL that does not parse).
fn unparsable(url: &str, error: &redis::RedisError) -> String {
    let shown = redacted(url);
    let Some((scheme, _)) = url.trim().split_once("://") else {
        return format!(
            "{shown}: it does not start with a scheme; a Redis URL starts with redis://, \
             rediss:// (TLS) or redis+unix:// (a socket), e.g. redis://127.0.0.1:6379"
        );
    };
    let known = [
        "redis",
        "rediss",
        "valkey",
        "valkeys",
        "redis+unix",
        "valkey+unix",
        "unix",
    ];
    if !known.contains(&scheme.to_ascii_lowercase().as_str()) {
        return format!(
            "{shown}: the scheme is not one of redis://, rediss:// (TLS) or redis+unix:// (a \
             socket)"
        );
    }
    // redis-rs's description without its error-kind name (`- InvalidClientConfig`).
    let said = match error.detail() {
        Some(detail) if error.kind() == redis::ErrorKind::InvalidClientConfig => {
            let text = error.to_string();
            let description = text.split(" - ").next().unwrap_or_default().to_owned();
            // The detail is one of the URL's values (a protocol name), never its password.
            format!("{description}: {detail}")
        }
        _ => error.to_string().replacen(" - InvalidClientConfig", "", 1),
    };
    let said = match said.as_str() {
        "Redis URL did not parse" => {
            "it is not a valid URL (a password with @ / : ? # or % needs percent-encoding)"
                .to_owned()
        }
        _ => said,
    };
    format!("{shown}: {said}")
}

/// How long a connection may be idle before the kernel sends a keepalive probe.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// Between unanswered probes, and how many go unanswered before the socket fails (where the
/// platform lets us set them).
#[cfg(any(target_os = "linux", target_os = "macos"))]
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
#[cfg(any(target_os = "linux", target_os = "macos"))]
const KEEPALIVE_PROBES: u32 = 3;

/// `tcp` with TCP keepalive on: an idle connection is probed every 30 s, which keeps its flow
/// alive in a NAT or firewall that forgets idle flows, and fails the socket (so redis-rs
/// reconnects) when a forgotten flow's probes go unanswered. The PING of the pub/sub connection
/// and the replacement of command connections after a timeout notice a silent connection
/// sooner; this is the kernel's own check besides them.
pub(crate) fn keepalive(tcp: TcpSettings) -> TcpSettings {
    let probe = socket2::TcpKeepalive::new().with_time(KEEPALIVE_IDLE);
    #[cfg(any(target_os = "linux", target_os = "macos"))]
    let probe = probe
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_PROBES);
    tcp.set_keepalive(probe)
}

#[cfg(feature = "tls")]
pub(crate) fn certificates(config: &Config) -> Option<redis::TlsCertificates> {
    let tls = config.tls();
    if tls.ca_pem.is_none() && tls.client_identity.is_none() {
        return None;
    }
    Some(redis::TlsCertificates {
        client_tls: tls
            .client_identity
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert.to_vec(),
                client_key: key.to_vec(),
            }),
        root_cert: tls.ca_pem.as_ref().map(|pem| pem.to_vec()),
    })
}

pub(super) fn tls_client(
    info: redis::ConnectionInfo,
    config: &Config,
) -> Result<Client, LockError> {
    let bad = |e: redis::RedisError| LockError::invalid("tls settings", e.to_string());
    #[cfg(feature = "tls")]
    if matches!(info.addr(), ConnectionAddr::TcpTls { .. })
        && let Some(certs) = certificates(config)
    {
        return Client::build_with_tls(info, certs).map_err(bad);
    }
    let _ = config;
    Client::open(info).map_err(bad)
}
