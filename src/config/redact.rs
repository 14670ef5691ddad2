//! Passwords kept out of every URL lockman prints, logs or puts in an error.
//!
//! A URL is printed from what redis-rs parses out of it, never by editing its text: only the
//! parts known to be harmless (scheme, host, port, socket path, database, user name, `#insecure`)
//! are written back, and a password is written as `***` wherever the URL carried it (`user:pw@`,
//! a unix socket's `?pass=`). Anything else in the URL (other query parameters, a fragment) is
//! left out. A URL that does not parse is printed as its scheme alone.

use redis::{ConnectionAddr, IntoConnectionInfo};

/// `url` without its password, as lockman prints it in errors, logs and `Debug`:
/// `redis://app:***@host:6379/0`, `redis+unix:///run/redis.sock?db=0&pass=***`. It is built
/// from what the URL means to the Redis client (scheme, host, port, socket path, database, user
/// name, `#insecure`), never by editing the text: whatever else the URL holds is left out, and a
/// URL that does not parse is shown as its scheme alone (`redis://…`).
///
/// ```
/// assert_eq!(
///     lockman::redacted_url("redis://app:secret@10.0.0.1:6379/2"),
///     "redis://app:***@10.0.0.1:6379/2"
/// );
/// assert_eq!(
///     lockman::redacted_url("redis+unix:///run/redis.sock?pass=secret"),
///     "redis+unix:///run/redis.sock?db=0&pass=***"
/// );
/// assert_eq!(lockman::redacted_url("redis//:secret@10.0.0.1:6379"), "…");
/// ```
pub fn redacted_url(url: &str) -> String {
    redacted(url)
}

/// What is printed of a URL that does not parse, after its scheme (if any).
const UNPARSED: &str = "…";

/// `url` as lockman prints it: `redis://app:***@host:6379/0`,
/// `redis+unix:///run/redis.sock?db=0&pass=***`, `rediss://host:6380/0#insecure`; a URL that
/// does not parse is printed as `scheme://…` (or `…` when it has no scheme).
pub(crate) fn redacted(url: &str) -> String {
    let trimmed = url.trim();
    let scheme = scheme(trimmed);
    let Some(scheme) = scheme else {
        return UNPARSED.to_owned();
    };
    let Ok(info) = trimmed.into_connection_info() else {
        return format!("{scheme}://{UNPARSED}");
    };
    let settings = info.redis_settings();
    let db = settings.db();
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => {
            format!(
                "{scheme}://{}{}:{port}/{db}",
                userinfo(settings.username(), settings.password()),
                bracketed(host)
            )
        }
        ConnectionAddr::TcpTls {
            host,
            port,
            insecure,
            ..
        } => {
            format!(
                "{scheme}://{}{}:{port}/{db}{}",
                userinfo(settings.username(), settings.password()),
                bracketed(host),
                if *insecure { "#insecure" } else { "" }
            )
        }
        ConnectionAddr::Unix(path) => {
            let mut shown = format!("{scheme}://{}?db={db}", path.display());
            if let Some(user) = settings.username() {
                shown.push_str("&user=");
                shown.push_str(user);
            }
            if settings.password().is_some() {
                shown.push_str("&pass=***");
            }
            shown
        }
        // Not made from a URL string by redis-rs; nothing of it is printed.
        _ => format!("{scheme}://{UNPARSED}"),
    }
}

/// Whether `url` turns TLS certificate and host checks off (`rediss://…#insecure`), as redis-rs
/// reads it.
pub(crate) fn is_insecure(url: &str) -> bool {
    matches!(
        url.trim()
            .into_connection_info()
            .map(|info| info.addr().clone()),
        Ok(ConnectionAddr::TcpTls { insecure: true, .. })
    )
}

/// Whether `url` asks for TLS: `rediss://` or `valkeys://`.
pub(crate) fn is_tls(url: &str) -> bool {
    scheme(url.trim()).is_some_and(|scheme| scheme == "rediss" || scheme == "valkeys")
}

/// The scheme of `url`, lower-cased, when it starts with one (`letters[+.-letters]://`).
fn scheme(url: &str) -> Option<String> {
    let (scheme, _) = url.split_once("://")?;
    let valid = !scheme.is_empty()
        && scheme.len() <= 16
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then(|| scheme.to_ascii_lowercase())
}

/// `user:***@`, `:***@`, `user@` or nothing.
fn userinfo(user: Option<&str>, password: Option<&str>) -> String {
    match (user, password) {
        (Some(user), Some(_)) => format!("{user}:***@"),
        (None, Some(_)) => ":***@".to_owned(),
        (Some(user), None) => format!("{user}@"),
        (None, None) => String::new(),
    }
}

/// An IPv6 address in brackets, as a URL writes it.
fn bracketed(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every URL form redis-rs takes a password from, and URLs that do not parse: the password
    /// is never printed.
    #[test]
    fn no_form_of_url_prints_its_password() {
        let cases = [
            ("redis://:s3cret@host:1/0", "redis://:***@host:1/0"),
            ("redis://app:s3cret@host:1/2", "redis://app:***@host:1/2"),
            ("redis://app:s3c%40ret@host:1", "redis://app:***@host:1/0"),
            ("valkey://app:s3cret@host:1/0", "valkey://app:***@host:1/0"),
            ("redis://host:1/0", "redis://host:1/0"),
            ("redis://app@host:1/0", "redis://app@host:1/0"),
            ("REDIS://:s3cret@Host:1", "redis://:***@Host:1/0"),
            (
                "redis://:s3cret@host:1/0?protocol=resp3&pass=s3cret",
                "redis://:***@host:1/0",
            ),
            ("redis://:s3cret@[::1]:1/0", "redis://:***@[::1]:1/0"),
            (
                "redis+unix:///tmp/r.sock?db=1&pass=s3cret",
                "redis+unix:///tmp/r.sock?db=1&pass=***",
            ),
            (
                "unix:///tmp/r.sock?user=app&pass=s3cret",
                "unix:///tmp/r.sock?db=0&user=app&pass=***",
            ),
            (
                "redis+unix:///tmp/r.sock?password=s3cret",
                "redis+unix:///tmp/r.sock?db=0",
            ),
            ("redis+unix:///tmp/r.sock", "redis+unix:///tmp/r.sock?db=0"),
            // Do not parse: nothing past the scheme.
            ("redis//:s3cret@127.0.0.1:1", "…"),
            (":s3cret@127.0.0.1:1", "…"),
            ("http://app:s3cret@host:1", "http://…"),
            ("redis://:s3cret@host:99999", "redis://…"),
            ("redis://:s3cret@host:1/x", "redis://…"),
            ("redis://:s3cret@0.0.0.0:1", "redis://…"),
            ("s3cret", "…"),
            ("", "…"),
        ];
        for (url, shown) in cases {
            assert_eq!(redacted(url), shown, "{url}");
            assert!(!redacted(url).contains("s3c"), "{url}");
        }
    }

    #[test]
    #[cfg(feature = "tls")]
    fn tls_urls_keep_insecure_and_hide_the_password() {
        assert_eq!(
            redacted("rediss://app:s3cr@t/x@host:1/0"),
            "rediss://…",
            "a password with '/' must be percent-encoded; unparsed, nothing is shown"
        );
        assert_eq!(
            redacted("rediss://app:s3cr%2Ft@host:1/0"),
            "rediss://app:***@host:1/0"
        );
        assert_eq!(
            redacted("rediss://:s3cret@host:1/#insecure"),
            "rediss://:***@host:1/0#insecure"
        );
        assert_eq!(redacted("rediss://host:1/#other"), "rediss://…");
        assert!(is_insecure("rediss://host:1/#insecure"));
        assert!(!is_insecure("rediss://host:1/"));
        assert!(!is_insecure("redis://host:1/#insecure"));
    }
}
