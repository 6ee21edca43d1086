//! Small arithmetic of the reports: percentiles, the rate bound, /proc figures.

use std::time::Duration;

/// The nearest-rank percentile `p` (0–100) of `samples`; `None` when there are none.
pub fn percentile(samples: &[Duration], p: f64) -> Option<Duration> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// The least time `requests` can take through a token bucket of `rps` per second that starts
/// full with `burst` tokens: the first `burst` go at once, the rest one every `1/rps`.
pub fn rate_bound(requests: u64, rps: f64, burst: u64) -> Duration {
    if rps <= 0.0 || requests <= burst {
        return Duration::ZERO;
    }
    Duration::from_secs_f64((requests - burst) as f64 / rps)
}

/// A `kB` field (`VmHWM`, `VmRSS`) of `/proc/<pid>/status` (`self` when `pid` is `None`).
pub fn proc_status_kb(pid: Option<u32>, field: &str) -> Option<u64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/status"),
        None => "/proc/self/status".to_string(),
    };
    let text = std::fs::read_to_string(path).ok()?;
    parse_status_kb(&text, field)
}

fn parse_status_kb(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

pub fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

pub fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

pub fn mib_of_kb(kb: u64) -> String {
    format!("{:.1} MiB", kb as f64 / 1024.0)
}

pub fn mib_of_bytes(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// `a / b` as `1.23×`.
pub fn ratio(a: Duration, b: Duration) -> String {
    if b.is_zero() {
        return "n/a".into();
    }
    format!("{:.2}×", a.as_secs_f64() / b.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=10).rev().map(ms).collect();
        assert_eq!(percentile(&samples, 50.0), Some(ms(5)));
        assert_eq!(percentile(&samples, 90.0), Some(ms(9)));
        assert_eq!(percentile(&samples, 100.0), Some(ms(10)));
        assert_eq!(percentile(&samples, 0.0), Some(ms(1)));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn the_rate_bound_counts_the_burst_as_free() {
        assert_eq!(rate_bound(7000, 200.0, 50), Duration::from_secs_f64(34.75));
        assert_eq!(rate_bound(10, 200.0, 50), Duration::ZERO);
        assert_eq!(rate_bound(10, 0.0, 0), Duration::ZERO);
    }

    #[test]
    fn proc_status_fields() {
        let text = "Name:\tx\nVmHWM:\t   12345 kB\nVmRSS:\t  1000 kB\n";
        assert_eq!(parse_status_kb(text, "VmHWM"), Some(12345));
        assert_eq!(parse_status_kb(text, "VmRSS"), Some(1000));
        assert_eq!(parse_status_kb(text, "VmSwap"), None);
        assert!(proc_status_kb(None, "VmHWM").is_some());
    }
}
