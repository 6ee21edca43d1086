//! The one backoff: how long to wait between two attempts of something that may pass by
//! itself, for every adapter that retries (the Kubernetes calls, the drain's evictions, the
//! DynamoDB store). The policy is a `backon` builder; the waits go through the [`Clock`]
//! ([`ClockSleeper`]), so that a test's manual clock lets them pass at once.
//!
//! A [`Backoff`] waits "equal jitter" pauses: the `n`th wait is between half and all of
//! `first × 2^(n-1)`, never more than `max` (between `max / 2` and `max` once there). In
//! `backon`'s terms: an exponential backoff from `first / 2` to `max / 2`, with jitter (each
//! delay plus a random part of itself).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder, Sleeper};

use crate::ports::Clock;

/// A retry policy: the waits between attempts, and how many there may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The longest first wait (the first wait is between half of it and all of it).
    first: Duration,
    /// The longest wait of all.
    max: Duration,
    /// How many waits (so retries) at most; `None`: as many as the caller allows.
    retries: Option<usize>,
}

impl Backoff {
    /// Waits of at most `first`, doubling up to `max`, as many as the caller allows (it stops
    /// on its own terms: a deadline, a count of its own).
    pub const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            retries: None,
        }
    }

    /// The same waits, at most `retries` of them (so `retries + 1` attempts).
    pub const fn with_retries(mut self, retries: usize) -> Backoff {
        self.retries = Some(retries);
        self
    }

    /// The policy as a `backon` builder (for [`backon::Retryable::retry`]).
    pub fn builder(&self) -> ExponentialBuilder {
        let max = self.max.max(self.first);
        let builder = ExponentialBuilder::new()
            .with_jitter()
            .with_factor(2.0)
            .with_min_delay(self.first / 2)
            .with_max_delay(max / 2);
        match self.retries {
            Some(n) => builder.with_max_times(n),
            None => builder.without_max_times(),
        }
    }

    /// The waits one after the other (`None` once the retries are spent), for a loop that
    /// waits only on some of its failures.
    pub fn delays(&self) -> impl Iterator<Item = Duration> + Send + use<> {
        self.builder().build()
    }
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
    use backon::Retryable;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn waits_are_equal_jitter_of_a_doubling_delay_up_to_the_max() {
        let backoff = Backoff::new(ms(200), ms(2000));
        for _ in 0..50 {
            let waits: Vec<Duration> = backoff.delays().take(7).collect();
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
        assert_eq!(
            Backoff::new(ms(10), ms(10))
                .with_retries(2)
                .delays()
                .count(),
            2
        );
        assert_eq!(Backoff::new(ms(10), ms(10)).delays().take(100).count(), 100);
    }

    #[test]
    fn a_max_below_the_first_wait_is_the_first_wait() {
        let waits: Vec<Duration> = Backoff::new(ms(100), ms(10)).delays().take(3).collect();
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
        .retry(Backoff::new(ms(100), ms(100)).with_retries(3).builder())
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
