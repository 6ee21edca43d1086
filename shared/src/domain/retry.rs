//! When a failed message should come back.
//!
//! Lambda's SQS event source mapping leaves a message reported in `batchItemFailures` invisible
//! until the queue's visibility timeout ends (900 s in the stack: six times the function's
//! timeout) unless the function changes its visibility. A spot warning that failed once on a
//! transient error would come back long after its instance is gone. So the handler shortens the
//! visibility of every message it reports failed, by this policy:
//!
//! - while the event's window lasts (until its drain deadline, or the event time plus the drain
//!   timeout when it gives none): a few seconds, doubling with each receive, at most
//!   [`RetryPolicy::max_in_window`], and never past the window's end by more than the first delay;
//! - after the window: [`RetryPolicy::after_window`], slower retries until the queue's
//!   `maxReceiveCount` sends the message to the dead-letter queue, as before;
//! - a failure that will not pass by itself (the adapter's answer was a refusal: access denied,
//!   a request refused as invalid, a missing table; see `ports::FailureKind::retryable`):
//!   [`RetryPolicy::after_window`] from the first receive. Retrying it every few seconds would
//!   only spend the message's receives, sending it to the dead-letter queue within minutes;
//!   at this pace it stays in the queue for `maxReceiveCount` × 300 s (75 minutes in the
//!   stack), long enough for someone to fix the permission or the setting and see it pass
//!   without a redrive;
//! - a record that could not be decoded at once: it will never decode, so it comes back at once
//!   and reaches the dead-letter queue (and its alarm) after `maxReceiveCount` quick receives.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// The delays of [`RetryPolicy::delay`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The first retry within the window.
    pub first: Duration,
    /// The longest retry within the window.
    pub max_in_window: Duration,
    /// Every retry once the window is over.
    pub after_window: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            first: Duration::from_secs(2),
            max_in_window: Duration::from_secs(15),
            after_window: Duration::from_secs(300),
        }
    }
}

/// What is known of a failed record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    /// It could not be decoded.
    Undecodable,
    /// An event whose actions must be done by `window_end`.
    Event { window_end: DateTime<Utc> },
    /// An event whose failure the same call meets again (a refusal, not a fault).
    Permanent,
}

impl RetryPolicy {
    /// How long the message of `failed` stays invisible before its next delivery, after its
    /// `receive_count`-th receive (SQS's `ApproximateReceiveCount`, from 1), at `now`.
    pub fn delay(&self, failed: Failed, receive_count: u32, now: DateTime<Utc>) -> Duration {
        let window_end = match failed {
            Failed::Undecodable => return Duration::ZERO,
            Failed::Permanent => return self.after_window,
            Failed::Event { window_end } => window_end,
        };
        if now >= window_end {
            return self.after_window;
        }
        let doublings = receive_count.saturating_sub(1).min(16);
        let backoff = self
            .first
            .saturating_mul(1u32 << doublings)
            .min(self.max_in_window);
        // The last retry inside the window still comes before it ends.
        let left = (window_end - now).to_std().unwrap_or_default();
        backoff.min(left.max(self.first))
    }
}

/// `delay`, but no sooner than `not_before` (a record that would fail again without a request
/// before then), from `now`.
pub fn no_sooner(
    delay: Duration,
    now: DateTime<Utc>,
    not_before: Option<DateTime<Utc>>,
) -> Duration {
    let wait = not_before
        .and_then(|t| (t - now).to_std().ok())
        .unwrap_or_default();
    delay.max(wait)
}

/// SQS's limit on a message's visibility timeout: 12 hours.
pub const MAX_VISIBILITY: Duration = Duration::from_secs(12 * 3600);

/// The `VisibilityTimeout` a message brought back after `delay` is given: SQS takes whole
/// seconds up to [`MAX_VISIBILITY`]; a fraction is dropped.
pub fn visibility_seconds(delay: Duration) -> u32 {
    u32::try_from(delay.min(MAX_VISIBILITY).as_secs()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_left_alone_comes_back_no_sooner_than_its_time() {
        use chrono::TimeZone;
        let now = chrono::Utc.timestamp_opt(1_795_000_000, 0).unwrap();
        let two = Duration::from_secs(2);
        assert_eq!(no_sooner(two, now, None), two);
        let later = now + chrono::Duration::seconds(9);
        assert_eq!(no_sooner(two, now, Some(later)), Duration::from_secs(9));
        let past = now - chrono::Duration::seconds(9);
        assert_eq!(no_sooner(two, now, Some(past)), two);
        assert_eq!(
            no_sooner(Duration::from_secs(30), now, Some(later)),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn visibility_timeouts_are_whole_seconds_truncated_and_at_most_12_hours() {
        let ms = Duration::from_millis;
        assert_eq!(visibility_seconds(ms(0)), 0);
        assert_eq!(visibility_seconds(ms(2_900)), 2);
        assert_eq!(visibility_seconds(ms(15_000)), 15);
        assert_eq!(visibility_seconds(Duration::from_secs(100_000)), 43_200);
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn fast_inside_the_window_slow_after_it() {
        let p = RetryPolicy::default();
        let now = at("2026-11-20T10:00:00Z");
        let window = Failed::Event {
            window_end: at("2026-11-20T10:01:45Z"),
        };
        let delays: Vec<u64> = (1..=6).map(|n| p.delay(window, n, now).as_secs()).collect();
        assert_eq!(delays, vec![2, 4, 8, 15, 15, 15]);
        let late = at("2026-11-20T10:01:50Z");
        assert_eq!(p.delay(window, 1, late), Duration::from_secs(300));
        // close to the end, the retry still falls inside it
        let near = at("2026-11-20T10:01:42Z");
        assert_eq!(p.delay(window, 5, near), Duration::from_secs(3));
        let nearer = at("2026-11-20T10:01:44Z");
        assert_eq!(p.delay(window, 5, nearer), Duration::from_secs(2));
    }

    #[test]
    fn undecodable_records_come_back_at_once() {
        let p = RetryPolicy::default();
        let now = at("2026-11-20T10:00:00Z");
        assert_eq!(p.delay(Failed::Undecodable, 1, now), Duration::ZERO);
        assert_eq!(p.delay(Failed::Undecodable, 9, now), Duration::ZERO);
    }

    #[test]
    fn a_failure_that_will_not_pass_by_itself_comes_back_slowly_from_the_start() {
        let p = RetryPolicy::default();
        let now = at("2026-11-20T10:00:00Z");
        for receives in [1, 2, 9] {
            assert_eq!(
                p.delay(Failed::Permanent, receives, now),
                Duration::from_secs(300)
            );
        }
    }

    #[test]
    fn huge_receive_counts_do_not_overflow() {
        let p = RetryPolicy::default();
        let now = at("2026-11-20T10:00:00Z");
        let window = Failed::Event {
            window_end: at("2026-11-20T11:00:00Z"),
        };
        assert_eq!(p.delay(window, u32::MAX, now), Duration::from_secs(15));
        assert!(p.delay(window, 0, now) <= MAX_VISIBILITY);
    }
}
