//! What went wrong when connecting, told apart (TLS, authentication, ACL), and URLs made safe to
//! print.

use std::time::Duration;

use redis::{Client, ConnectionAddr};

use crate::error::{LockError, TlsFailure};

/// Classifies a failure to connect to `label`: TLS, authentication, ACL, or plain trouble.
pub(crate) fn connect_error(label: &str, source: redis::RedisError) -> LockError {
    let url = label.to_owned();
    if let Some(failure) = tls_failure(&source) {
        return LockError::Tls {
            url,
            failure,
            detail: source.to_string(),
        };
    }
    if let Some(refused) = LockError::no_permission(|| "connect".into(), &source) {
        return refused;
    }
    // The cluster client reports a refused password inside its own error, as text.
    let text = source.to_string();
    if source.kind() == redis::ErrorKind::AuthenticationFailed
        || text.contains("AuthenticationFailed")
        || text.contains("WRONGPASS")
    {
        return LockError::Auth { url, source };
    }
    LockError::Connect { url, source }
}

/// How long [`diagnose_tls_timeout`] may take.
const DIAGNOSIS: Duration = Duration::from_millis(300);

/// A TLS connection timed out: if a plain Redis answers PING on that port, the URL said
/// `rediss://` for a plain-TCP server (which waits for a newline that a TLS hello never sends,
/// so the handshake hangs instead of failing). Takes at most [`DIAGNOSIS`].
pub(crate) async fn diagnose_tls_timeout(client: &Client, label: &str) -> Option<LockError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ConnectionAddr::TcpTls { host, port, .. } = client.get_connection_info().addr() else {
        return None;
    };
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect((host.as_str(), *port))
            .await
            .ok()?;
        stream.write_all(b"PING\r\n").await.ok()?;
        let mut reply = [0u8; 1];
        stream.read_exact(&mut reply).await.ok()?;
        // `+PONG`, or `-NOAUTH …`: RESP, in the clear.
        matches!(reply[0], b'+' | b'-').then_some(())
    };
    tokio::time::timeout(DIAGNOSIS, probe)
        .await
        .ok()
        .flatten()?;
    Some(LockError::Tls {
        url: label.to_owned(),
        failure: TlsFailure::NotTls,
        detail: "the TLS handshake got no answer, and the port answers plain-text RESP".into(),
    })
}

/// What went wrong in a TLS handshake, when that is what failed. redis-rs keeps the rustls
/// error behind an `Arc` whose `source()` skips it, so it cannot be downcast: rustls's own
/// wording is read instead (its `Display` of each error kind).
pub(super) fn tls_failure(error: &redis::RedisError) -> Option<TlsFailure> {
    if !cfg!(feature = "tls") {
        return None;
    }
    let text = error.to_string();
    let failure = if text.contains("not valid for name") || text.contains("NotValidForName") {
        TlsFailure::HostnameMismatch
    } else if text.contains("invalid peer certificate") {
        TlsFailure::UntrustedCertificate
    } else if text.contains("received corrupt message")
        || text.contains("received unexpected message")
    {
        TlsFailure::NotTls
    } else if text.contains("received fatal alert") {
        TlsFailure::RejectedByServer
    } else {
        return None;
    };
    Some(failure)
}
