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
//!   [`MAX_IN_WINDOW`], and never past the window's end by more than the first delay;
//! - after the window: [`AFTER_WINDOW`], slower retries until the queue's
//!   `maxReceiveCount` sends the message to the dead-letter queue, as before;
//! - a failure that will not pass by itself (the adapter's answer was a refusal: access denied,
//!   a request refused as invalid, a missing table; see `ports::FailureKind::retryable`):
//!   [`AFTER_WINDOW`] from the first receive. Retrying it every few seconds would
//!   only spend the message's receives, sending it to the dead-letter queue within minutes;
//!   at this pace it stays in the queue for `maxReceiveCount` × 300 s (75 minutes in the
//!   stack), long enough for someone to fix the permission or the setting and see it pass
//!   without a redrive;
//! - a record that could not be decoded at once: it will never decode, so it comes back at once
//!   and reaches the dead-letter queue (and its alarm) after `maxReceiveCount` quick receives.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::config::Config;
use super::event::EventKind;
use super::report::Report;

/// The first retry within the window.
pub const FIRST: Duration = Duration::from_secs(2);
/// The longest retry within the window.
pub const MAX_IN_WINDOW: Duration = Duration::from_secs(15);
/// Every retry once the window is over.
pub const AFTER_WINDOW: Duration = Duration::from_secs(300);

/// How long the message of the failed `report` stays invisible before its next delivery,
/// after its `receive_count`-th receive (SQS's `ApproximateReceiveCount`, from 1), at `now`:
/// at once when it could not be decoded, slowly when it failed for good (`permanent`: the
/// same call meets the same refusal), else by its window (see the module doc); and no sooner
/// than its `retry_not_before` (a record that would fail again without a request before it).
pub fn delay(report: &Report, config: &Config, receive_count: u32, now: DateTime<Utc>) -> Duration {
    let delay = match window_end(config, report) {
        Some(_) if report.permanent => AFTER_WINDOW,
        Some(end) => in_window(end, receive_count, now),
        None => Duration::ZERO,
    };
    let not_before = report
        .retry_not_before
        .and_then(|t| (t - now).to_std().ok());
    delay.max(not_before.unwrap_or_default())
}

/// The delay of an event whose actions must be done by `window_end`.
fn in_window(window_end: DateTime<Utc>, receive_count: u32, now: DateTime<Utc>) -> Duration {
    if now >= window_end {
        return AFTER_WINDOW;
    }
    let doublings = receive_count.saturating_sub(1).min(16);
    let backoff = FIRST.saturating_mul(1u32 << doublings).min(MAX_IN_WINDOW);
    // The last retry inside the window still comes before it ends.
    let left = (window_end - now).to_std().unwrap_or_default();
    backoff.min(left.max(FIRST))
}

/// When the work of a failed event stops being worth doing soon: its earliest drain deadline;
/// else, for a spot or reservation warning, when the instance goes less the margin; else the
/// event time plus the drain timeout. `None`: the record could not be decoded.
fn window_end(config: &Config, report: &Report) -> Option<DateTime<Utc>> {
    let (kind, time) = (report.kind?, report.time?);
    let deadline = report.actions.iter().filter_map(|a| a.deadline).min();
    Some(deadline.unwrap_or_else(|| match kind {
        EventKind::SpotInterruption | EventKind::CapacityReservationInterruption => {
            time + config.interruption_notice - config.deadline_margin
        }
        _ => time + config.drain_timeout,
    }))
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

    /// A failed report of `kind` at `time` (none: undecodable), retryable or not.
    fn failed(kind: Option<EventKind>, time: &str, permanent: bool) -> Report {
        Report {
            kind,
            time: kind.map(|_| at(time)),
            permanent,
            ..Report::default()
        }
    }

    #[test]
    fn a_record_left_alone_comes_back_no_sooner_than_its_time() {
        let now = at("2026-11-20T10:00:00Z");
        let later = now + chrono::Duration::seconds(9);
        let past = now - chrono::Duration::seconds(9);
        // An event 10 s ago, its first receive: 2 s, unless it is left alone longer.
        let event = failed(
            Some(EventKind::RebalanceRecommendation),
            "2026-11-20T09:59:50Z",
            false,
        );
        let delay = |report: &Report, not_before| {
            let report = Report {
                retry_not_before: not_before,
                ..report.clone()
            };
            delay(&report, &Config::default(), 1, now)
        };
        let two = Duration::from_secs(2);
        assert_eq!(delay(&event, None), two);
        assert_eq!(delay(&event, Some(later)), Duration::from_secs(9));
        assert_eq!(delay(&event, Some(past)), two);
        let slow = failed(event.kind, "2026-11-20T09:59:50Z", true);
        assert_eq!(delay(&slow, Some(later)), Duration::from_secs(300));
        assert_eq!(
            delay(&failed(None, "", false), Some(later)),
            Duration::from_secs(9)
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
        let now = at("2026-11-20T10:00:00Z");
        let window = at("2026-11-20T10:01:45Z");
        let delays: Vec<u64> = (1..=6)
            .map(|n| in_window(window, n, now).as_secs())
            .collect();
        assert_eq!(delays, vec![2, 4, 8, 15, 15, 15]);
        let late = at("2026-11-20T10:01:50Z");
        assert_eq!(in_window(window, 1, late), Duration::from_secs(300));
        // close to the end, the retry still falls inside it
        let near = at("2026-11-20T10:01:42Z");
        assert_eq!(in_window(window, 5, near), Duration::from_secs(3));
        let nearer = at("2026-11-20T10:01:44Z");
        assert_eq!(in_window(window, 5, nearer), Duration::from_secs(2));
    }

    /// An event's window: its earliest drain deadline; else a warning's notice less the margin;
    /// else the drain timeout.
    #[test]
    fn an_events_window_is_its_deadline_its_notice_or_the_drain_timeout() {
        let config = Config::default();
        let time = at("2026-11-20T10:00:00Z");
        let spot = failed(
            Some(EventKind::SpotInterruption),
            "2026-11-20T10:00:00Z",
            false,
        );
        assert_eq!(
            window_end(&config, &spot),
            Some(time + config.interruption_notice - config.deadline_margin)
        );
        assert_eq!(window_end(&config, &failed(None, "", false)), None);
        let health = failed(
            Some(EventKind::ScheduledChange),
            "2026-11-20T10:00:00Z",
            false,
        );
        assert_eq!(
            window_end(&config, &health),
            Some(time + config.drain_timeout)
        );
        let deadline = at("2026-11-20T10:00:30Z");
        let mut drained = spot.clone();
        drained.actions.push(crate::domain::report::ActionReport {
            deadline: Some(deadline),
            ..Default::default()
        });
        assert_eq!(window_end(&config, &drained), Some(deadline));
    }

    #[test]
    fn undecodable_records_come_back_at_once() {
        let now = at("2026-11-20T10:00:00Z");
        let undecodable = failed(None, "", false);
        assert_eq!(
            delay(&undecodable, &Config::default(), 1, now),
            Duration::ZERO
        );
        assert_eq!(
            delay(&undecodable, &Config::default(), 9, now),
            Duration::ZERO
        );
    }

    #[test]
    fn a_failure_that_will_not_pass_by_itself_comes_back_slowly_from_the_start() {
        let now = at("2026-11-20T10:00:00Z");
        // Inside its window (an event of now), a refusal still comes back slowly.
        let refused = failed(
            Some(EventKind::SpotInterruption),
            "2026-11-20T10:00:00Z",
            true,
        );
        for receives in [1, 2, 9] {
            assert_eq!(
                delay(&refused, &Config::default(), receives, now),
                Duration::from_secs(300)
            );
        }
    }

    #[test]
    fn huge_receive_counts_do_not_overflow() {
        let now = at("2026-11-20T10:00:00Z");
        let window = at("2026-11-20T11:00:00Z");
        assert_eq!(in_window(window, u32::MAX, now), Duration::from_secs(15));
        assert!(in_window(window, 0, now) <= MAX_VISIBILITY);
    }
}
