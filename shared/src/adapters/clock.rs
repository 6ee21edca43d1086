//! The clocks behind [`Clock`]: the system's, and one that tests set and move on.
//!
//! This is one of the few places that read the wall clock (see `docs/architecture.md`): every
//! other "now" in the crate comes from a [`Clock`] it was given.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::ports::Clock;

/// The system clock: `now` is the wall clock (or a time set apart from it by a fixed offset:
/// `forewarn replay --now`), waits are the runtime's timers.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock {
    offset: chrono::Duration,
}

impl SystemClock {
    /// The system clock as the `Arc` everything holds.
    pub fn shared() -> Arc<dyn Clock> {
        Arc::new(SystemClock::default())
    }

    /// A clock that says `start` now and runs on from it at the wall clock's pace.
    pub fn starting_at(start: DateTime<Utc>) -> SystemClock {
        SystemClock {
            offset: start - SystemClock::default().now(),
        }
    }
}

#[async_trait]
impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + self.offset
    }

    async fn sleep(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }

    async fn alarm(&self, at: DateTime<Utc>) {
        // Timers run on the runtime's monotonic clock; the wall clock only says how far off
        // `at` is (checked again on waking, in case the wall clock was stepped meanwhile).
        loop {
            match (at - self.now()).to_std() {
                Ok(left) if !left.is_zero() => tokio::time::sleep(left).await,
                _ => return,
            }
        }
    }
}

/// A clock that stands still until it is moved: by [`ManualClock::advance`] or
/// [`ManualClock::set`], or by a [`Clock::sleep`] (which moves it on by the time slept, at once).
/// An [`Clock::alarm`] rings when the clock has been moved to or past its time. Clones share one
/// time.
/// Test support, compiled for tests and the `fixtures` feature only.
#[cfg(any(test, feature = "fixtures"))]
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<tokio::sync::watch::Sender<DateTime<Utc>>>,
    /// Sleeps so far, for tests that check the pacing.
    slept: Arc<std::sync::Mutex<Vec<Duration>>>,
}

#[cfg(any(test, feature = "fixtures"))]
impl ManualClock {
    /// A clock standing at `at`.
    pub fn at(at: DateTime<Utc>) -> ManualClock {
        ManualClock {
            now: Arc::new(tokio::sync::watch::Sender::new(at)),
            slept: Arc::default(),
        }
    }

    /// The same clock as the `Arc` everything holds.
    pub fn shared(&self) -> Arc<dyn Clock> {
        Arc::new(self.clone())
    }

    /// Moves the clock on by `d`.
    pub fn advance(&self, d: Duration) {
        self.now.send_modify(|t| *t += crate::ports::span(d));
    }

    /// Moves the clock to `at`, when that is later than now (a clock never goes back).
    pub fn set(&self, at: DateTime<Utc>) {
        self.now.send_if_modified(|t| {
            let later = at > *t;
            if later {
                *t = at;
            }
            later
        });
    }

    /// Every sleep so far, in order.
    pub fn slept(&self) -> Vec<Duration> {
        self.slept.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

#[cfg(any(test, feature = "fixtures"))]
#[async_trait]
impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.borrow()
    }

    async fn sleep(&self, d: Duration) {
        if let Ok(mut slept) = self.slept.lock() {
            slept.push(d);
        }
        self.advance(d);
        // Let whatever the new time wakes (an alarm) run before the sleeper goes on.
        tokio::task::yield_now().await;
    }

    async fn alarm(&self, at: DateTime<Utc>) {
        let mut rx = self.now.subscribe();
        // `wait_for` fails only when the sender is gone, which a live clock never is.
        let _ = rx.wait_for(|now| *now >= at).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::until;

    fn t0() -> DateTime<Utc> {
        "2026-11-24T10:00:00Z".parse().unwrap()
    }

    #[tokio::test]
    async fn a_manual_clock_moves_only_when_moved_and_never_back() {
        let clock = ManualClock::at(t0());
        assert_eq!(clock.now(), t0());
        clock.sleep(Duration::from_secs(5)).await;
        assert_eq!(clock.now(), t0() + chrono::Duration::seconds(5));
        clock.set(t0());
        assert_eq!(clock.now(), t0() + chrono::Duration::seconds(5));
        clock.advance(Duration::from_millis(1500));
        assert_eq!(clock.now(), t0() + chrono::Duration::milliseconds(6500));
        assert_eq!(clock.slept(), vec![Duration::from_secs(5)]);
    }

    #[tokio::test]
    async fn a_deadline_rings_when_sleeps_pass_it_not_before() {
        let clock = ManualClock::at(t0());
        let deadline = t0() + chrono::Duration::seconds(12);
        let passes = std::sync::atomic::AtomicU32::new(0);
        let work = async {
            loop {
                passes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                clock.sleep(Duration::from_secs(5)).await;
            }
        };
        assert_eq!(until(&clock, deadline, work).await, None::<()>);
        // Passes at 0 s, 5 s and 10 s; the sleep to 15 s passed the deadline.
        assert_eq!(passes.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert_eq!(clock.now(), t0() + chrono::Duration::seconds(15));
        // Work that is done when first asked is not cut, even past its deadline.
        assert_eq!(until(&clock, deadline, async { 7 }).await, Some(7));
    }

    #[tokio::test]
    async fn the_system_clock_rings_an_alarm_in_the_past_at_once() {
        let clock = SystemClock::default();
        let past = clock.now() - chrono::Duration::seconds(1);
        assert_eq!(
            until(&clock, past, std::future::pending::<()>()).await,
            None
        );
    }

    #[test]
    fn a_system_clock_can_start_at_another_time_and_runs_on_from_it() {
        let clock = SystemClock::starting_at(t0());
        let now = clock.now();
        assert!(
            now >= t0() && now - t0() < chrono::Duration::seconds(5),
            "{now}"
        );
    }
}
