//! The state's timers: every one but a waiter's deadline (which the shell's crowd serves with
//! its caller's watch), in one table of instants ([`TimerTable`]). The state sets and stops
//! entries; the shell keeps one timer for the table's next instant, and when it fires the state
//! handles every entry due ([`NameState::timeout`](crate::actors::name::state::NameState::timeout)). Also a spin
//! waiter's sleeps between attempts ([`SpinSleeps`]).

use std::time::Duration;

use super::Timer;
use crate::actors::name::timers::TimerTable;
use crate::config::SpinBackOff;

/// The timers armed: all but [`Timer::Deadline`], each with its instant.
pub(super) type Timers = TimerTable<Timer>;

/// A spin waiter's sleeps between attempts (Redisson's `LockOptions.BackOffPolicy`, one per
/// wait as Redisson makes one per `lock()` call): the [`Timer::Retry`] a spin waiter's failed
/// attempt arms is [`next`](Self::next) long. Pure: its jitter comes from a generator seeded
/// by the caller, so that tests see the same sleeps every run. The policy is the name's
/// (`Settings::spin_backoff`), given to each step rather than kept here: every waiter carries
/// its sleeps, and a smaller waiter is moved in and out of the queue for less.
#[derive(Debug, Clone)]
pub(super) struct SpinSleeps {
    /// The next sleep, in ms (Redisson's `nextSleep`).
    next_ms: u64,
    /// Failed attempts so far (Redisson's `fails`): the jitter added to the n-th is below n ms.
    fails: u64,
    /// xorshift64 state (never 0).
    rng: u64,
}

impl SpinSleeps {
    /// The sleeps of a new wait under `backoff`; `seed` varies the jitter.
    pub(super) fn new(backoff: SpinBackOff, seed: u64) -> Self {
        let first = match backoff {
            SpinBackOff::Exponential { initial, .. } => initial,
            SpinBackOff::Constant { delay } => delay,
        };
        Self {
            next_ms: ms(first),
            fails: 0,
            // splitmix64's finalizer, so that close seeds give unrelated sequences; never 0.
            rng: mix(seed) | 1,
        }
    }

    /// How long to sleep after this failed attempt under `backoff` (the one the sleeps were made
    /// with), advancing the sequence as Redisson's `ExponentialBackOffPolicy.getNextSleepPeriod`
    /// does: `result = next; next = next * multiplier + random[0, ++fails); next = min(max,
    /// next)`, and `max` for good once reached.
    pub(super) fn next(&mut self, backoff: SpinBackOff) -> Duration {
        let SpinBackOff::Exponential {
            max, multiplier, ..
        } = backoff
        else {
            return Duration::from_millis(self.next_ms);
        };
        let max = ms(max);
        if self.next_ms == max {
            return Duration::from_millis(max);
        }
        let result = self.next_ms;
        self.fails += 1;
        let jitter = self.random() % self.fails;
        self.next_ms = result
            .saturating_mul(u64::from(multiplier))
            .saturating_add(jitter)
            .min(max);
        Duration::from_millis(result)
    }

    fn random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod spin_tests {
    use super::*;

    fn sleeps(backoff: SpinBackOff, seed: u64, n: usize) -> Vec<u64> {
        let mut s = SpinSleeps::new(backoff, seed);
        (0..n).map(|_| s.next(backoff).as_millis() as u64).collect()
    }

    /// Redisson's default: 1, then each sleep twice the last plus a jitter below the number of
    /// failures so far, capped at 128 ms and kept there.
    #[test]
    fn exponential_default_doubles_with_jitter_to_128() {
        for seed in 0..200 {
            let s = sleeps(SpinBackOff::default(), seed, 40);
            assert_eq!(s[0], 1, "seed {seed}: {s:?}");
            for (n, pair) in s.windows(2).enumerate() {
                let (last, next) = (pair[0], pair[1]);
                if last == 128 {
                    assert_eq!(next, 128, "seed {seed}: {s:?}");
                    continue;
                }
                // The (n+1)-th failure adds a jitter in [0, n+1).
                let low = (last * 2).min(128);
                let high = (last * 2 + n as u64).min(128);
                assert!(
                    (low..=high).contains(&next),
                    "seed {seed}, sleep {n}: {last} -> {next} not in {low}..={high}: {s:?}"
                );
            }
            // 1, 2, 4..., the cap within 8 sleeps (the jitter only hastens it).
            assert_eq!(s[8], 128, "seed {seed}: {s:?}");
        }
    }

    /// The jitter is there: across seeds, the sleeps after the first doublings differ.
    #[test]
    fn exponential_jitter_varies_with_the_seed() {
        let distinct: std::collections::BTreeSet<Vec<u64>> = (0..50)
            .map(|seed| sleeps(SpinBackOff::default(), seed, 8))
            .collect();
        assert!(distinct.len() > 1, "{distinct:?}");
    }

    #[test]
    fn constant_never_changes() {
        let d = Duration::from_millis(64);
        assert_eq!(sleeps(SpinBackOff::constant(d), 7, 20), vec![64; 20]);
    }

    /// A multiplier of 1 stays near the first sleep: only the jitter grows it, never past max.
    #[test]
    fn exponential_custom_bounds() {
        let b = SpinBackOff::exponential(Duration::from_millis(10), Duration::from_millis(15), 1);
        let s = sleeps(b, 3, 30);
        assert_eq!(s[0], 10);
        assert!(s.iter().all(|&x| (10..=15).contains(&x)), "{s:?}");
    }
}
