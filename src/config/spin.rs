//! [`SpinBackOff`]: how a spin lock's waiters space their attempts.

use std::time::Duration;

/// How a [spin lock](crate::LockManager::spin_lock)'s waiter spaces its attempts while the lock
/// is held ([`Config::spin_backoff`](crate::Config::spin_backoff)): Redisson's
/// `LockOptions.BackOff`, the same rules and defaults (`RedissonSpinLock`, `LockOptions`).
///
/// ```
/// use std::time::Duration;
/// use lockman::SpinBackOff;
/// // Redisson's default: 1 ms, doubling (plus a jitter) up to 128 ms.
/// assert_eq!(SpinBackOff::default(), SpinBackOff::exponential(
///     Duration::from_millis(1), Duration::from_millis(128), 2));
/// let config = lockman::Config::new("redis://127.0.0.1/")
///     .spin_backoff(SpinBackOff::constant(Duration::from_millis(64)));
/// assert_eq!(config.get_spin_backoff(), SpinBackOff::constant(Duration::from_millis(64)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpinBackOff {
    /// Redisson's `ExponentialBackOff`: the first sleep is `initial`; each next one is the last
    /// times `multiplier`, plus a jitter of 0 to n−1 ms after the n-th failed attempt, at most
    /// `max` (which it then keeps).
    Exponential {
        /// The first sleep (Redisson's `initialDelay`, 1 ms by default).
        initial: Duration,
        /// The longest sleep (Redisson's `maxDelay`, 128 ms by default).
        max: Duration,
        /// The growth of each sleep (Redisson's `multiplier`, 2 by default).
        multiplier: u32,
    },
    /// Redisson's `ConstantBackOff`: every sleep is `delay` (64 ms by default in Redisson). No
    /// jitter: Redisson's class comment speaks of one, but its policy adds none.
    Constant {
        /// The sleep between attempts.
        delay: Duration,
    },
}

impl SpinBackOff {
    /// An exponential back-off (see [`SpinBackOff::Exponential`]).
    pub const fn exponential(initial: Duration, max: Duration, multiplier: u32) -> Self {
        Self::Exponential {
            initial,
            max,
            multiplier,
        }
    }

    /// A constant back-off of `delay` (see [`SpinBackOff::Constant`]).
    pub const fn constant(delay: Duration) -> Self {
        Self::Constant { delay }
    }

    /// What is wrong with it, if anything: Redisson refuses non-positive values, and lockman
    /// refuses a sleep under 1 ms (timers count milliseconds) or a longest sleep below the
    /// first.
    pub(crate) fn problem(&self) -> Option<String> {
        let ms = Duration::from_millis(1);
        match *self {
            Self::Exponential {
                initial,
                max,
                multiplier,
            } => {
                if initial < ms || max < ms {
                    Some(format!("{initial:?} and {max:?} must be at least 1 ms"))
                } else if max < initial {
                    Some(format!("max {max:?} is below initial {initial:?}"))
                } else if multiplier == 0 {
                    Some("multiplier must be at least 1".to_owned())
                } else if max > super::MAX_EXPIRY {
                    Some(format!("{max:?} is above {:?}", super::MAX_EXPIRY))
                } else {
                    None
                }
            }
            Self::Constant { delay } if delay < ms || delay > super::MAX_EXPIRY => Some(format!(
                "{delay:?} must be at least 1 ms and at most {:?}",
                super::MAX_EXPIRY
            )),
            Self::Constant { .. } => None,
        }
    }
}

impl Default for SpinBackOff {
    /// Redisson's default (`LockOptions.defaults()`): exponential, 1 ms doubling to 128 ms.
    fn default() -> Self {
        Self::exponential(Duration::from_millis(1), Duration::from_millis(128), 2)
    }
}
