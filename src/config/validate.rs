//! [`Config::validate`]: every setting but the URLs (parsed when connecting), checked by
//! [`LockManager::start`](crate::LockManager::start) before anything connects, each refusal an
//! [`InvalidArgument`](crate::LockError::InvalidArgument) naming the setting.

use std::time::Duration;

use super::deployment::PEM_CERTIFICATE;
use super::{Config, MAX_EXPIRY, MIN_FAIR_LOCK_PLACE_TIMEOUT, MIN_WATCHDOG_TIMEOUT};
use crate::error::LockError;

impl Config {
    /// Checks every setting but the URLs (parsed when connecting).
    pub(crate) fn validate(&self) -> Result<(), LockError> {
        self.validate_durations()?;
        self.validate_fair_places()?;
        if self.arbiters == Some(0) {
            return Err(LockError::invalid("arbiters", "must be at least 1"));
        }
        if self.idle_linger > MAX_EXPIRY {
            return Err(LockError::invalid(
                "idle linger",
                format!("{:?} is above {MAX_EXPIRY:?}", self.idle_linger),
            ));
        }
        if let Some(why) = self.spin_backoff.problem() {
            return Err(LockError::invalid("spin backoff", why));
        }
        self.validate_tls()?;
        self.validate_sync_replicas()
    }

    /// The watchdog timeout within its bounds, and no timeout zero.
    fn validate_durations(&self) -> Result<(), LockError> {
        if self.watchdog_timeout < MIN_WATCHDOG_TIMEOUT {
            return Err(LockError::invalid(
                "watchdog timeout",
                format!(
                    "{:?} is below the minimum {MIN_WATCHDOG_TIMEOUT:?}",
                    self.watchdog_timeout
                ),
            ));
        }
        at_most_max_expiry("watchdog timeout", self.watchdog_timeout)?;
        // Set as a lease plus the delay (both at most MAX_EXPIRY: within what Lua's doubles and
        // PEXPIRE take); a larger one made every acquire fail in its script, after the grant.
        at_most_max_expiry("lock delay", self.lock_delay)?;
        for (what, value) in [
            ("connect timeout", self.connect_timeout),
            ("response timeout", self.response_timeout),
            ("fair lock wait timeout", self.fair_lock_wait_timeout),
            ("fair lock place timeout", self.fair_lock_place_timeout),
            ("unavailable after", self.unavailable_after),
        ] {
            if value.is_zero() {
                return Err(LockError::invalid(what, "must be greater than zero"));
            }
        }
        Ok(())
    }

    /// A place waits the smaller of the two fair-lock timeouts and is refreshed every third of
    /// it: it must outlive a refresh period and its round trip.
    fn validate_fair_places(&self) -> Result<(), LockError> {
        for (what, value) in [
            ("fair lock place timeout", self.fair_lock_place_timeout),
            ("fair lock wait timeout", self.fair_lock_wait_timeout),
        ] {
            if value < MIN_FAIR_LOCK_PLACE_TIMEOUT {
                return Err(LockError::invalid(
                    what,
                    format!("{value:?} is below the minimum {MIN_FAIR_LOCK_PLACE_TIMEOUT:?}"),
                ));
            }
        }
        at_most_max_expiry("fair lock place timeout", self.fair_lock_place_timeout)
    }

    /// redis-rs skips what is not a PEM certificate and would go on with no CA of ours: a
    /// `rediss://` connection then fails its handshake as untrusted, far from the cause.
    fn validate_tls(&self) -> Result<(), LockError> {
        if let Some(pem) = &self.tls.ca_pem
            && !pem
                .windows(PEM_CERTIFICATE.len())
                .any(|w| w == PEM_CERTIFICATE)
        {
            return Err(LockError::invalid(
                "tls CA",
                "no PEM certificate in it (a \"-----BEGIN CERTIFICATE-----\" block)",
            ));
        }
        Ok(())
    }

    /// At least one replica, and a wait for them shorter than the response timeout.
    fn validate_sync_replicas(&self) -> Result<(), LockError> {
        let Some((count, timeout)) = self.sync_replicas else {
            return Ok(());
        };
        if count == 0 {
            return Err(LockError::invalid(
                "sync replicas",
                "count must be at least 1",
            ));
        }
        if timeout.is_zero() || timeout >= self.response_timeout {
            return Err(LockError::invalid(
                "sync replicas",
                format!(
                    "timeout {timeout:?} must be above zero and below the response timeout {:?}",
                    self.response_timeout
                ),
            ));
        }
        Ok(())
    }
}

/// `value` of setting `what` is one lockman can set as an expiry.
fn at_most_max_expiry(what: &'static str, value: Duration) -> Result<(), LockError> {
    if value > MAX_EXPIRY {
        return Err(LockError::invalid(
            what,
            format!("{value:?} is above {MAX_EXPIRY:?}, the longest expiry lockman sets"),
        ));
    }
    Ok(())
}
