//! The samples of `events/` moved to the present, for the tests whose outcome depends on how old
//! the samples are.
//!
//! The samples are dated 2026-11-20/21. What a replay of them records expires 30 days after the
//! events (pool records and their history), and `forewarn pools` and `forewarn audit` read the
//! store as of now, so a test that replays the samples as they are and reads the store back
//! passes only until the records expire. [`Samples::near_now`] copies `events/` (with `state/`
//! and `malformed/`) into a temporary folder with every date moved forward by a whole number of
//! weeks, so that the samples' events are between 1 and 8 days old when the test runs: their
//! windows (an hour or two) are over and their records are kept, as when the samples were made.
//! Whole weeks keep RFC 1123 weekdays as they were: right, or (sample 21, as AWS writes them)
//! wrong.
//!
//! Moved: `YYYY-MM-DDTHH:MM:SS` (RFC 3339, and `YYYY-MM-DD HH:MM:SS` in text), RFC 1123's
//! `D Mon YYYY HH:MM:SS`, and epoch milliseconds (13 digits) and seconds (10 digits) within three
//! years of the samples (SQS's `SentTimestamp`). Fractions of a second, zones and weekdays are
//! kept as written. The SQS samples' `md5OfBody` is not recomputed: forewarn does not check it.

// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use chrono::{DateTime, Datelike, Duration, NaiveDate, NaiveDateTime, SecondsFormat, Utc};

/// When the samples' events begin.
pub const SAMPLES_AT: &str = "2026-11-20T10:00:00Z";

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn samples_at() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(SAMPLES_AT)
        .unwrap()
        .with_timezone(&Utc)
}

/// A copy of `events/` with its dates moved; removed when dropped.
pub struct Samples {
    dir: tempfile::TempDir,
    offset: Duration,
}

impl Samples {
    /// The samples moved forward by whole weeks to between 1 and 8 days before now.
    pub fn near_now() -> Samples {
        Samples::moved_by_weeks(weeks_to(Utc::now()))
    }

    /// The samples moved by `weeks` (back if negative).
    pub fn moved_by_weeks(weeks: i64) -> Samples {
        let offset = Duration::weeks(weeks);
        let dir = tempfile::tempdir().unwrap();
        copy_moved(
            &workspace_root().join("events"),
            &dir.path().join("events"),
            offset,
        );
        Samples { dir, offset }
    }

    /// The folder to run `forewarn` in: its `events/` is the moved copy, so the samples' paths
    /// (and the origins forewarn reports) are as in the workspace.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// How far the samples were moved.
    pub fn offset(&self) -> Duration {
        self.offset
    }

    /// A time of the samples (RFC 3339), moved like them, written as forewarn writes times.
    pub fn at(&self, rfc3339: &str) -> String {
        let t = DateTime::parse_from_rfc3339(rfc3339)
            .unwrap_or_else(|e| panic!("{rfc3339}: {e}"))
            .with_timezone(&Utc);
        (t + self.offset).to_rfc3339_opts(SecondsFormat::AutoSi, true)
    }
}

/// The whole weeks that put the samples' start between 1 and 8 days before `now`.
pub fn weeks_to(now: DateTime<Utc>) -> i64 {
    let age = now - Duration::days(1) - samples_at();
    age.num_seconds()
        .div_euclid(Duration::weeks(1).num_seconds())
}

/// Copies the folder `from` to `to`, every file's dates moved by `offset`.
fn copy_moved(from: &Path, to: &Path, offset: Duration) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_moved(&entry.path(), &target, offset);
        } else {
            let text = std::fs::read(entry.path()).unwrap();
            std::fs::write(&target, move_dates(&text, offset)).unwrap();
        }
    }
}

/// `text` with every date in it moved by `offset` (see the module's documentation), the rest
/// byte for byte as it was.
pub fn move_dates(text: &[u8], offset: Duration) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        // A date starts a run of digits.
        if i == 0 || !text[i - 1].is_ascii_digit() {
            let rest = &text[i..];
            if let Some((len, moved)) = iso(rest, offset)
                .or_else(|| rfc1123(rest, offset))
                .or_else(|| epoch(rest, offset))
            {
                out.extend_from_slice(moved.as_bytes());
                i += len;
                continue;
            }
        }
        out.push(text[i]);
        i += 1;
    }
    out
}

/// Whether `text` starts with `mask`, where `9` stands for a digit and `?` for any byte.
fn fits(text: &[u8], mask: &str) -> bool {
    text.len() >= mask.len()
        && mask.bytes().zip(text).all(|(m, &c)| match m {
            b'9' => c.is_ascii_digit(),
            b'?' => true,
            _ => m == c,
        })
}

fn number(digits: &[u8]) -> u32 {
    std::str::from_utf8(digits).unwrap().parse().unwrap()
}

/// `YYYY-MM-DDTHH:MM:SS` or `YYYY-MM-DD HH:MM:SS`: (its length, moved).
fn iso(text: &[u8], offset: Duration) -> Option<(usize, String)> {
    const MASK: &str = "9999-99-99?99:99:99";
    if !fits(text, MASK) || !matches!(text[10], b'T' | b' ') {
        return None;
    }
    let date = NaiveDate::from_ymd_opt(
        number(&text[..4]) as i32,
        number(&text[5..7]),
        number(&text[8..10]),
    )?;
    let t = date.and_hms_opt(
        number(&text[11..13]),
        number(&text[14..16]),
        number(&text[17..19]),
    )? + offset;
    let sep = text[10] as char;
    Some((
        MASK.len(),
        t.format(&format!("%Y-%m-%d{sep}%H:%M:%S")).to_string(),
    ))
}

/// RFC 1123's `D Mon YYYY HH:MM:SS`, the day of one or two digits: (its length, moved). The day
/// is padded to two digits if it was (`05`), else written as AWS writes it (`5`). The weekday
/// before it is left as it is: whole weeks keep it.
fn rfc1123(text: &[u8], offset: Duration) -> Option<(usize, String)> {
    let day_digits = text.iter().take_while(|c| c.is_ascii_digit()).count();
    if !(1..=2).contains(&day_digits) {
        return None;
    }
    let rest = &text[day_digits..];
    const MASK: &str = " ??? 9999 99:99:99";
    if !fits(rest, MASK) {
        return None;
    }
    let month = MONTHS.iter().position(|m| m.as_bytes() == &rest[1..4])? as u32 + 1;
    let date = NaiveDate::from_ymd_opt(
        number(&rest[5..9]) as i32,
        month,
        number(&text[..day_digits]),
    )?;
    let t: NaiveDateTime = date.and_hms_opt(
        number(&rest[10..12]),
        number(&rest[13..15]),
        number(&rest[16..18]),
    )? + offset;
    let day = if text[0] == b'0' {
        format!("{:02}", t.day())
    } else {
        t.day().to_string()
    };
    Some((
        day_digits + MASK.len(),
        format!(
            "{day} {} {}",
            MONTHS[t.month0() as usize],
            t.format("%Y %H:%M:%S")
        ),
    ))
}

/// A run of 13 (milliseconds) or 10 (seconds) digits that, since the Unix epoch, is within three
/// years of the samples: (its length, moved).
fn epoch(text: &[u8], offset: Duration) -> Option<(usize, String)> {
    let len = text.iter().take_while(|c| c.is_ascii_digit()).count();
    let unit = match len {
        13 => 1,
        10 => 1000,
        _ => return None,
    };
    let value: i64 = std::str::from_utf8(&text[..len]).unwrap().parse().ok()?;
    let around = samples_at().timestamp_millis();
    let three_years = Duration::days(3 * 365).num_milliseconds();
    if (value * unit - around).abs() > three_years {
        return None;
    }
    Some((len, (value + offset.num_milliseconds() / unit).to_string()))
}
