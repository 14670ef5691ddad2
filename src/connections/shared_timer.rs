//! [`SharedTimer`]: the response timeout of the calls one task polls, kept by one timer armed
//! lazily, instead of a timer of each call's own (`tokio::time::timeout`). A call's own timer
//! enters tokio's timer wheel at its first poll and leaves it when the call ends: about 1,000
//! instructions and some 40 lines of code per call, a twelfth of an uncontended pair's
//! instructions and most of its instruction-cache misses with many names busy at once
//! (BENCHMARKS.md). A per-name actor's calls share one instead: armed for the earliest
//! deadline of its calls under way, and moved only when it fired or an earlier deadline comes,
//! so that back-to-back calls, each done long before its deadline, touch the wheel about once
//! per response timeout rather than twice per call. A timer left set after the last call fires
//! once all the same: one wake of the task, with nothing to do.
//!
//! The one rule of its use: every future bounded by it is polled by one task, and all of them
//! at each wake of that task (a per-name actor's round trips, `Trips`). Tokio's timer wakes the
//! task that polled it last; that task then polls every call, and each call whose deadline
//! passed ends.

use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// What a deadline past what an instant holds is taken as.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// One lazily armed timer for the calls of one task (see the module's doc).
#[derive(Default)]
pub(crate) struct SharedTimer {
    // A mutex, not a cell: the connections that carry it are `Sync`. Only one task locks it.
    lazy: Mutex<Lazy>,
}

#[derive(Default)]
struct Lazy {
    sleep: Option<Pin<Box<Sleep>>>,
    /// The instant `sleep` is set for: never later than a deadline of a call under way that
    /// polled it since.
    armed: Option<Instant>,
    /// Whether the task is registered with `sleep` (polled since it was made or fired): until
    /// it fires it wakes the task, which is the same whichever call polled it, so it is not
    /// polled again (a reset keeps the registration).
    registered: bool,
}

impl SharedTimer {
    /// Runs `work`, bounded by `limit` from now: `Err(())` when the limit passed first.
    pub(crate) async fn bound<T>(
        &self,
        work: Pin<&mut impl Future<Output = T>>,
        limit: Duration,
    ) -> Result<T, ()> {
        let now = Instant::now();
        // A limit past what an instant holds (`Config::response_timeout` is not capped): about
        // 30 years, as `tokio::time::timeout` takes it.
        let deadline = (now.checked_add(limit)).unwrap_or_else(|| now + FAR_FUTURE);
        let mut work = work;
        let mut first = true;
        std::future::poll_fn(move |cx| {
            if let Poll::Ready(out) = work.as_mut().poll(cx) {
                return Poll::Ready(Ok(out));
            }
            // Its deadline is checked on the clock, not on the timer (which may be set for an
            // earlier call's): a call never waits past its own. On the first poll it is a full
            // limit away.
            if !std::mem::take(&mut first) && Instant::now() >= deadline {
                return Poll::Ready(Err(()));
            }
            self.wake_by(deadline, cx).map(Err)
        })
        .await
    }

    /// Makes sure the task is woken by `deadline` (in the future): the timer stays when set
    /// for earlier and not fired yet; else it is set for `deadline`. `Ready` only when
    /// `deadline` passed meanwhile.
    fn wake_by(&self, deadline: Instant, cx: &mut Context<'_>) -> Poll<()> {
        let mut lazy = self.lazy.lock().unwrap_or_else(PoisonError::into_inner);
        let Lazy {
            sleep,
            armed,
            registered,
        } = &mut *lazy;
        let sleep = match sleep {
            Some(sleep) => {
                let fired = sleep.is_elapsed();
                if !fired && armed.is_some_and(|at| at <= deadline) {
                    // Set for this call's deadline or earlier: it wakes the task by then.
                    if *registered {
                        return Poll::Pending;
                    }
                } else {
                    // One that fired has woken the task already: polled again below.
                    *registered = *registered && !fired;
                    sleep.as_mut().reset(deadline);
                    *armed = Some(deadline);
                    if *registered {
                        return Poll::Pending;
                    }
                }
                sleep
            }
            None => {
                *armed = Some(deadline);
                sleep.insert(Box::pin(tokio::time::sleep_until(deadline)))
            }
        };
        // Polled outside tokio's task budget: a `Pending` from a spent budget would leave the
        // task unregistered while taken as registered.
        match Pin::new(&mut tokio::task::unconstrained(sleep.as_mut())).poll(cx) {
            Poll::Pending => {
                *registered = true;
                Poll::Pending
            }
            // Set for `deadline` (or earlier) and fired: ours passed, or the next poll sets it
            // again (woken now).
            Poll::Ready(()) if *armed == Some(deadline) => {
                *registered = false;
                Poll::Ready(())
            }
            Poll::Ready(()) => {
                *registered = false;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Calls that never end, sharing one timer in one task (polled together, with one waker,
    /// as a per-name actor's round trips are), started 300 ms apart with a 400 ms limit: each
    /// ends at its own deadline, never before, and the second not at the third's (300 ms
    /// later). (The breaks, each seen failing: a timer moved to a later call's deadline while
    /// an earlier call is under way, or a deadline judged by the timer alone rather than the
    /// clock: either leaves the second call waiting for the third's deadline.)
    #[tokio::test]
    async fn each_call_ends_at_its_own_deadline_in_one_task() {
        let timer = SharedTimer::default();
        let limit = Duration::from_millis(400);
        let began = Instant::now();
        let call = |delay: u64| {
            let timer = &timer;
            async move {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                let start = Instant::now();
                let never = std::pin::pin!(std::future::pending::<()>());
                let res = timer.bound(never, limit).await;
                (delay, start, Instant::now(), res)
            }
        };
        // The second polled first: after the first deadline's firing it sets the timer again
        // before the first call is polled.
        let all = futures_util::future::join3(call(300), call(0), call(600));
        let (a, b, c) = tokio::time::timeout(Duration::from_secs(10), all)
            .await
            .expect("every call ended");
        let mut ended = vec![a, b, c];
        ended.sort_by_key(|(_, _, end, _)| *end);
        let order: Vec<u64> = ended.iter().map(|(delay, ..)| *delay).collect();
        assert_eq!(
            order,
            [0, 300, 600],
            "ended in the order of their deadlines"
        );
        for (delay, start, end, res) in &ended {
            assert_eq!(*res, Err(()), "call {delay} timed out");
            assert!(
                *end >= *start + limit,
                "call {delay} ended before its deadline"
            );
        }
        // The second ends before the third's deadline (300 ms of slack for a busy machine).
        let (_, _, second_end, _) = ended[1];
        let third_deadline = ended[2].1 + limit;
        assert!(
            second_end < third_deadline,
            "the second call waited for the third's deadline ({:?} after the start)",
            second_end - began
        );
    }

    /// A call that ends first is its reply, and the timer stays set for a later call without
    /// firing for it; a limit past what an instant holds is no limit (the break: an instant's
    /// overflow panics).
    #[tokio::test]
    async fn a_reply_before_the_deadline_is_the_outcome() {
        let timer = SharedTimer::default();
        let unbounded = std::pin::pin!(async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            6
        });
        assert_eq!(timer.bound(unbounded, Duration::MAX).await, Ok(6));
        let quick = std::pin::pin!(async { 7 });
        assert_eq!(timer.bound(quick, Duration::from_secs(5)).await, Ok(7));
        let slow = std::pin::pin!(async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            8
        });
        assert_eq!(timer.bound(slow, Duration::from_secs(5)).await, Ok(8));
    }
}
