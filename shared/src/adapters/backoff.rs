//! The one backoff: how long to wait between two attempts of something that may pass by
//! itself, for every adapter that retries (the Kubernetes calls, the drain's evictions, the
//! DynamoDB store). The policy is a `backon` builder; the waits go through the [`Clock`]
//! ([`ClockSleeper`]), so that a test's manual clock lets them pass at once.
//!
//! [`backoff`] waits "equal jitter" pauses: the `n`th wait is between half and all of
//! `first × 2^(n-1)`, never more than `max` (between `max / 2` and `max` once there). In
//! `backon`'s terms: an exponential backoff from `first / 2` to `max / 2`, with jitter (each
//! delay plus a random part of itself).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Sleeper};

use crate::ports::Clock;

/// The retry policy of waits of at most `first`, doubling up to `max` (at least `first`), as
/// many as the caller allows: a `backon` builder, for [`backon::Retryable::retry`], or whose
/// `build()` gives the waits one after the other, for a loop that waits only on some of its
/// failures. `with_max_times(n)` bounds the waits (so the retries) to `n`.
pub const fn backoff(first: Duration, max: Duration) -> ExponentialBuilder {
    const fn half(d: Duration) -> Duration {
        Duration::from_nanos((d.as_nanos() / 2) as u64)
    }
    let max = if max.as_nanos() < first.as_nanos() {
        first
    } else {
        max
    };
    (ExponentialBuilder::new().with_jitter().with_factor(2.0))
        .with_min_delay(half(first))
        .with_max_delay(half(max))
        .without_max_times()
}

/// `backon`'s [`Sleeper`] over a [`Clock`]: every retry's wait is the clock's.
#[derive(Debug, Clone)]
pub struct ClockSleeper(pub Arc<dyn Clock>);

impl Sleeper for ClockSleeper {
    type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

    fn sleep(&self, dur: Duration) -> Self::Sleep {
        let clock = Arc::clone(&self.0);
        Box::pin(async move { clock.sleep(dur).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::clock::ManualClock;
    use backon::{BackoffBuilder, Retryable};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn waits_are_equal_jitter_of_a_doubling_delay_up_to_the_max() {
        let backoff = backoff(ms(200), ms(2000));
        for _ in 0..50 {
            let waits: Vec<Duration> = backoff.build().take(7).collect();
            let bounds = [200, 400, 800, 1600, 2000, 2000, 2000];
            for (wait, bound) in waits.iter().zip(bounds) {
                assert!(
                    *wait >= ms(bound / 2) && *wait <= ms(bound),
                    "{waits:?} against {bounds:?}"
                );
            }
        }
    }

    #[test]
    fn retries_are_counted_when_asked() {
        assert_eq!(backoff(ms(10), ms(10)).with_max_times(2).build().count(), 2);
        assert_eq!(backoff(ms(10), ms(10)).build().take(100).count(), 100);
    }

    #[test]
    fn a_max_below_the_first_wait_is_the_first_wait() {
        let waits: Vec<Duration> = backoff(ms(100), ms(10)).build().take(3).collect();
        assert!(
            waits.iter().all(|w| *w >= ms(50) && *w <= ms(100)),
            "{waits:?}"
        );
    }

    #[tokio::test]
    async fn retries_sleep_on_the_clock() {
        let t0 = "2026-11-24T10:00:00Z".parse().unwrap();
        let clock = ManualClock::at(t0);
        let mut calls = 0;
        let result: Result<(), &str> = (|| {
            calls += 1;
            async { Err("no") }
        })
        .retry(backoff(ms(100), ms(100)).with_max_times(3))
        .sleep(ClockSleeper(clock.shared()))
        .await;
        assert_eq!(result, Err("no"));
        assert_eq!(calls, 4);
        let slept = clock.slept();
        assert_eq!(slept.len(), 3);
        assert!(
            slept.iter().all(|d| *d >= ms(50) && *d <= ms(100)),
            "{slept:?}"
        );
    }
}
