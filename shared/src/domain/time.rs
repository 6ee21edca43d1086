//! The sane range of times and durations that arrive as input.
//!
//! chrono represents years up to ±262,143, and adding a duration to a time near those limits
//! panics. A time that arrives in a message (an event's `time`, a Health `startTime`, a
//! continuation's `startedAt`, ...) or a duration in the configuration is therefore taken only
//! within a sane range: a time at most [`SANE_YEARS`] years before or after *now* (the time of
//! receipt the caller passes in, never the clock read here), a duration of at most
//! [`SANE_YEARS`] years. Anything else is malformed input.
//!
//! Why that is enough: every date computed from input is such a time plus or minus a few such
//! durations (a deadline is an event time plus a notice minus a margin, a window an event time
//! plus a TTL, an expiry a window plus a retention), so it stays within some tens of years of
//! now, far inside chrono's range: no `DateTime + Duration` of the domain can overflow.

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};

/// How far from now (either way) a time, and how long a duration, may be.
pub const SANE_YEARS: i64 = 10;

/// [`SANE_YEARS`] as a duration: 3,653 days, so that ten calendar years always fit.
pub const SANE_SPAN: TimeDelta = TimeDelta::days(SANE_YEARS * 366 - 7);

/// Text that is not a duration forewarn takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadDuration {
    #[error("`{0}` is not a duration (e.g. 90s, 15m, 1h, 1h30m)")]
    NotADuration(String),
    #[error("`{0}` is longer than {SANE_YEARS} years, the longest duration taken")]
    TooLong(String),
}

/// The one duration parser: a whole number of seconds (`90`) or humantime's forms (`90s`,
/// `15m`, `1h30m`, `2d`), at most [`SANE_YEARS`] years, so that a time plus a configured
/// duration cannot overflow. An error names the value.
pub fn parse_duration(s: &str) -> Result<TimeDelta, BadDuration> {
    let s = s.trim();
    let too_long = || BadDuration::TooLong(s.to_string());
    let d = match s.parse::<u64>() {
        Ok(secs) => std::time::Duration::from_secs(secs),
        Err(_) => humantime::parse_duration(s).map_err(|e| match e {
            humantime::DurationError::NumberOverflow => too_long(),
            _ => BadDuration::NotADuration(s.to_string()),
        })?,
    };
    TimeDelta::from_std(d)
        .ok()
        .filter(|d| *d <= SANE_SPAN)
        .ok_or_else(too_long)
}

/// A time too far from now to be taken (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OutOfRange {
    #[error("{} is more than {SANE_YEARS} years from now", show(*.0))]
    Ahead(DateTime<Utc>),
    #[error("{} is more than {SANE_YEARS} years ago", show(*.0))]
    Behind(DateTime<Utc>),
}

/// `t` when it is at most [`SANE_YEARS`] years from `now` (either way); otherwise why not, e.g.
/// ``2999-01-01T00:00:00Z is more than 10 years from now``. The caller names the field.
pub fn within_sane_range(
    t: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>, OutOfRange> {
    // The difference of two times never overflows: chrono's whole range is ±262,143 years, and a
    // `TimeDelta` holds ±292 million years.
    let offset = t.signed_duration_since(now);
    if offset > SANE_SPAN {
        Err(OutOfRange::Ahead(t))
    } else if offset < -SANE_SPAN {
        Err(OutOfRange::Behind(t))
    } else {
        Ok(t)
    }
}

/// RFC 3339 in UTC with `Z` (whole seconds when there is no fraction).
fn show(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 20, 10, 0, 0).unwrap()
    }

    #[test]
    fn ten_years_either_way_are_times() {
        let at = |y, m, d| Utc.with_ymd_and_hms(y, m, d, 10, 0, 0).unwrap();
        for t in [now(), at(2036, 11, 20), at(2016, 11, 20), at(2026, 1, 1)] {
            assert_eq!(within_sane_range(t, now()), Ok(t));
        }
        assert_eq!(
            within_sane_range(Utc.with_ymd_and_hms(2999, 1, 1, 0, 0, 0).unwrap(), now())
                .unwrap_err()
                .to_string(),
            "2999-01-01T00:00:00Z is more than 10 years from now"
        );
        assert_eq!(
            within_sane_range(at(2016, 11, 17), now())
                .unwrap_err()
                .to_string(),
            "2016-11-17T10:00:00Z is more than 10 years ago"
        );
        assert!(within_sane_range(at(2036, 11, 24), now()).is_err());
    }

    #[test]
    fn chronos_limits_are_refused_without_panicking() {
        for t in [DateTime::<Utc>::MAX_UTC, DateTime::<Utc>::MIN_UTC] {
            let e = within_sane_range(t, now()).unwrap_err().to_string();
            assert!(e.contains("more than 10 years"), "{e}");
            // Whatever now is.
            assert!(
                within_sane_range(t, DateTime::<Utc>::MIN_UTC).is_ok()
                    == (t == DateTime::<Utc>::MIN_UTC)
            );
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Ok(TimeDelta::seconds(90)));
        assert_eq!(parse_duration("15m"), Ok(TimeDelta::minutes(15)));
        assert_eq!(parse_duration(" 1h30m "), Ok(TimeDelta::minutes(90)));
        assert_eq!(parse_duration("2d"), Ok(TimeDelta::days(2)));
        assert_eq!(parse_duration("3650d"), Ok(TimeDelta::days(3650)));
        for bad in ["", "m", "1x", "-5", "1h30"] {
            assert_eq!(
                parse_duration(bad),
                Err(BadDuration::NotADuration(bad.to_string()))
            );
        }
    }

    #[test]
    fn huge_durations_are_errors_naming_the_value_not_panics() {
        // Found in review: a whole number of seconds past i64::MAX / 1000 panicked.
        for huge in [
            "9223372036854775807",
            "9223372036854775807s",
            "106751991167301d",
            "99999999999999999999d",
            "3654d",
            "315619201",
            "1d9223372036854775807s",
        ] {
            assert_eq!(
                parse_duration(huge).unwrap_err().to_string(),
                format!("`{huge}` is longer than 10 years, the longest duration taken")
            );
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn parse_duration_never_panics_and_stays_sane(
                s in prop_oneof![
                    "[0-9]{0,22}",
                    "([0-9]{0,20}[smhd]){0,4}",
                    any::<i64>().prop_map(|n| n.to_string()),
                    ".{0,24}",
                ]
            ) {
                if let Ok(d) = parse_duration(&s) {
                    prop_assert!(d >= TimeDelta::zero());
                    prop_assert!(d <= SANE_SPAN);
                }
            }
        }
    }
}
