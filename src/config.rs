//! How a [`LockManager`](crate::LockManager) reaches Redis and how long things may take.

use std::time::Duration;

use crate::LockError;

/// Default [`Config::watchdog_timeout`]: Redisson's `lockWatchdogTimeout`.
pub const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);
/// Default [`Config::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default [`Config::response_timeout`].
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);
/// Default [`Config::fair_lock_wait_timeout`]: Redisson's.
pub const DEFAULT_FAIR_LOCK_WAIT_TIMEOUT: Duration = Duration::from_secs(300);
/// The shortest [`Config::watchdog_timeout`] accepted: renewal runs every third of it.
pub const MIN_WATCHDOG_TIMEOUT: Duration = Duration::from_millis(30);

/// Settings of a [`LockManager`](crate::LockManager), built from a Redis URL.
///
/// ```
/// use std::time::Duration;
/// let config = lockman::Config::new("redis://127.0.0.1:6379/0")
///     .watchdog_timeout(Duration::from_secs(10))
///     .response_timeout(Duration::from_secs(1));
/// assert_eq!(config.url(), "redis://127.0.0.1:6379/0");
/// ```
#[derive(Clone, Debug)]
pub struct Config {
    url: String,
    watchdog_timeout: Duration,
    connect_timeout: Duration,
    response_timeout: Duration,
    fair_lock_wait_timeout: Duration,
}

impl Config {
    /// Settings for one Redis server, `redis://host:port/db` (also `rediss://`, `redis+unix://`).
    /// The URL is checked by [`LockManager::start`](crate::LockManager::start).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            watchdog_timeout: DEFAULT_WATCHDOG_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            fair_lock_wait_timeout: DEFAULT_FAIR_LOCK_WAIT_TIMEOUT,
        }
    }

    /// The lease of a lock taken without one. The **watchdog** renews such a lock every third of
    /// this while it is held (from when it has been held a sixth of it); when its holder dies,
    /// the lock expires after at most this long.
    /// At least [`MIN_WATCHDOG_TIMEOUT`].
    ///
    /// Default: [`DEFAULT_WATCHDOG_TIMEOUT`] (30 s).
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.watchdog_timeout = timeout;
        self
    }

    /// How long connecting to Redis may take before it counts as unreachable.
    ///
    /// Default: [`DEFAULT_CONNECT_TIMEOUT`] (5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one Redis command may wait for its reply. A command that timed out may still
    /// have run on the server: lockman treats its outcome as unknown.
    ///
    /// Default: [`DEFAULT_RESPONSE_TIMEOUT`] (3 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long a fair-lock waiter keeps its place in the queue after its turn came without it
    /// coming back (its process died, say): then the queue skips it. A waiter that gave a wait
    /// time uses that instead.
    ///
    /// Default: [`DEFAULT_FAIR_LOCK_WAIT_TIMEOUT`] (300 s, as Redisson).
    pub fn fair_lock_wait_timeout(mut self, timeout: Duration) -> Self {
        self.fair_lock_wait_timeout = timeout;
        self
    }

    /// See [`Config::fair_lock_wait_timeout`](Self::fair_lock_wait_timeout()).
    pub fn get_fair_lock_wait_timeout(&self) -> Duration {
        self.fair_lock_wait_timeout
    }

    /// The Redis URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// See [`Config::watchdog_timeout`](Self::watchdog_timeout()).
    pub fn get_watchdog_timeout(&self) -> Duration {
        self.watchdog_timeout
    }

    /// See [`Config::connect_timeout`](Self::connect_timeout()).
    pub fn get_connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// See [`Config::response_timeout`](Self::response_timeout()).
    pub fn get_response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// How often the watchdog renews: a third of the watchdog timeout.
    pub(crate) fn renewal_interval(&self) -> Duration {
        self.watchdog_timeout / 3
    }

    /// Checks every setting; the URL is parsed by redis-rs.
    pub(crate) fn validate(&self) -> Result<redis::Client, LockError> {
        if self.watchdog_timeout < MIN_WATCHDOG_TIMEOUT {
            return Err(LockError::invalid(
                "watchdog timeout",
                format!(
                    "{:?} is below the minimum {MIN_WATCHDOG_TIMEOUT:?}",
                    self.watchdog_timeout
                ),
            ));
        }
        for (what, value) in [
            ("connect timeout", self.connect_timeout),
            ("response timeout", self.response_timeout),
            ("fair lock wait timeout", self.fair_lock_wait_timeout),
        ] {
            if value.is_zero() {
                return Err(LockError::invalid(what, "must be greater than zero"));
            }
        }
        redis::Client::open(self.url.as_str())
            .map_err(|e| LockError::invalid("redis url", format!("{:?}: {e}", self.url)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_redisson() {
        let c = Config::new("redis://127.0.0.1/");
        assert_eq!(c.get_watchdog_timeout(), Duration::from_secs(30));
        assert_eq!(c.renewal_interval(), Duration::from_secs(10));
        assert_eq!(c.get_connect_timeout(), Duration::from_secs(5));
        assert_eq!(c.get_response_timeout(), Duration::from_secs(3));
    }

    #[test]
    fn rejects_bad_settings() {
        let bad = [
            Config::new("not a url"),
            Config::new("redis://127.0.0.1/").watchdog_timeout(Duration::ZERO),
            Config::new("redis://127.0.0.1/").connect_timeout(Duration::ZERO),
            Config::new("redis://127.0.0.1/").response_timeout(Duration::ZERO),
        ];
        for c in bad {
            let err = c.validate().unwrap_err();
            assert!(
                matches!(err, LockError::InvalidArgument { .. }),
                "{c:?}: {err:?}"
            );
        }
        assert!(Config::new("redis://127.0.0.1:1/3").validate().is_ok());
    }
}
