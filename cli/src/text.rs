//! Human-readable output.

use std::io::{self, Write};

use chrono::{DateTime, Utc};
use forewarn::domain::config::Action;
use forewarn::domain::event::EventKind;
use forewarn::domain::pool::PoolRecord;
use forewarn::domain::report::{Outcome, Report, Tally};

/// One JSON object per item, one per line (`--output json`).
pub fn json_lines<T: serde::Serialize>(out: &mut impl Write, items: &[T]) -> io::Result<()> {
    for item in items {
        serde_json::to_writer(&mut *out, item)?;
        writeln!(out)?;
    }
    Ok(())
}

/// One pretty JSON document and a newline (`--output json`).
pub fn json(out: &mut impl Write, value: &impl serde::Serialize) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)
}

/// `2026-11-20 10:00:00Z`.
pub fn absolute(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%SZ").to_string()
}

/// `in 42m`, `3h 5m ago`, `2d 4h ago`.
pub fn relative(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (t - now).num_seconds();
    let a = secs.unsigned_abs();
    let span = match a {
        0..60 => format!("{a}s"),
        60..3600 => format!("{}m", a / 60),
        3600..86400 => match (a % 3600) / 60 {
            0 => format!("{}h", a / 3600),
            m => format!("{}h {m}m", a / 3600),
        },
        _ => match (a % 86400) / 3600 {
            0 => format!("{}d", a / 86400),
            h => format!("{}d {h}h", a / 86400),
        },
    };
    if secs >= 0 {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}

pub fn replay(
    out: &mut impl Write,
    reports: &[Report],
    store: &str,
    now: DateTime<Utc>,
) -> io::Result<()> {
    for r in reports {
        let what = r.summary.as_deref().unwrap_or("undecodable");
        let when = r
            .time
            .map(|t| format!("  {}", absolute(t)))
            .unwrap_or_default();
        let tag = format!("[{}]", r.outcome.as_str());
        writeln!(out, "{tag:<12}{}  {what}{when}", r.origin)?;
        if let Some(id) = &r.event_id {
            writeln!(out, "            event {id}")?;
        }
        if let Some(reason) = &r.reason {
            // Planned or acted, with a note (pools not recorded).
            let label = match r.outcome {
                Outcome::Ignored | Outcome::Failed | Outcome::Duplicate => r.outcome.as_str(),
                _ => "note",
            };
            writeln!(out, "            {label}: {reason}")?;
        }
        for p in &r.pools {
            let window = match p.unavailable_until {
                Some(u) => format!("unavailable until {} ({})", absolute(u), relative(u, now)),
                None => "counted (not marked unavailable)".to_string(),
            };
            writeln!(out, "            pool {}  {window}", p.pool)?;
        }
        for a in &r.actions {
            let node = a.node.as_deref().unwrap_or("no node");
            let mut line = format!("            {} → {node}: ", a.instance_id);
            // A launch hook changes no node: its action waits for the node to be Ready.
            let launch_hook =
                (a.complete_lifecycle.as_ref()).filter(|_| r.kind == Some(EventKind::AsgLaunch));
            if let Some(hook) = launch_hook {
                line.push_str(&format!(
                    "complete lifecycle action {hook} once the node is Ready"
                ));
                if let Some(deadline) = a.deadline {
                    line.push_str(&format!(" (looked at until {})", absolute(deadline)));
                }
            } else {
                line.push_str(&a.action.to_string());
                if let Some(target) = &a.target {
                    line.push_str(&format!(" {target}"));
                }
                if let Some(deadline) = a.deadline {
                    line.push_str(&format!(" by {}", absolute(deadline)));
                }
                if let Some(hook) = &a.complete_lifecycle {
                    line.push_str(&format!(", then complete lifecycle action {hook}"));
                }
            }
            if a.action == Action::None && launch_hook.is_none() {
                line.push_str(&format!(" ({})", a.reason));
            }
            if let Some(result) = &a.result {
                line.push_str(&format!(" — {result}"));
            }
            writeln!(out, "{line}")?;
        }
    }
    let t = Tally::of(reports);
    writeln!(
        out,
        "\n{} records: {} planned, {} acted, {} ignored, {} duplicate, {} failed · pools recorded in {store}",
        reports.len(),
        t.planned,
        t.acted,
        t.ignored,
        t.duplicate,
        t.failed
    )
}

/// The aligned pool table of `forewarn pools`.
pub fn pools(out: &mut impl Write, records: &[PoolRecord], now: DateTime<Utc>) -> io::Result<()> {
    if records.is_empty() {
        return writeln!(out, "no pools");
    }
    let header = [
        "POOL",
        "UNAVAILABLE UNTIL",
        "INTERRUPTIONS",
        "REBALANCES",
        "LAST SEEN",
        "LAST EVENT",
        "LAST REASON",
    ];
    let rows: Vec<[String; 7]> = records
        .iter()
        .map(|r| {
            [
                r.pool.to_string(),
                match r.unavailable_until {
                    Some(u) => format!("{} ({})", absolute(u), relative(u, now)),
                    None => "-".into(),
                },
                r.interruptions().to_string(),
                r.counter(forewarn::domain::event::EventKind::RebalanceRecommendation)
                    .to_string(),
                relative(r.last_seen, now),
                r.last_event_id.clone(),
                r.last_reason.clone(),
            ]
        })
        .collect();
    table(out, &header, &rows)
}

/// Columns padded to their widest cell, two spaces apart.
fn table<const N: usize>(
    out: &mut impl Write,
    header: &[&str; N],
    rows: &[[String; N]],
) -> io::Result<()> {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    writeln!(out, "{}", line(header.to_vec()))?;
    for row in rows {
        writeln!(out, "{}", line(row.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}

/// `forewarn pools --stats`: per pool, then per zone and per instance type.
pub fn stats(out: &mut impl Write, stats: &forewarn::domain::stats::Stats) -> io::Result<()> {
    let now = stats.now;
    writeln!(
        out,
        "pool statistics from {} to {}",
        absolute(stats.since),
        absolute(now)
    )?;
    if stats.pools.is_empty() {
        return writeln!(out, "no pool events in the period");
    }
    let events = |e: &std::collections::BTreeMap<String, u64>| match e.is_empty() {
        true => "-".to_string(),
        false => e
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
    };
    let share = |s: f64| format!("{:.1} %", 100.0 * s);
    let last = |t: Option<DateTime<Utc>>| t.map_or("-".to_string(), |t| relative(t, now));
    writeln!(out)?;
    let rows: Vec<[String; 5]> = stats
        .pools
        .iter()
        .map(|p| {
            [
                p.pool.clone(),
                p.interruptions.to_string(),
                events(&p.events),
                last(p.last_event),
                share(p.unavailable_share),
            ]
        })
        .collect();
    table(
        out,
        &[
            "POOL",
            "INTERRUPTIONS",
            "EVENTS",
            "LAST EVENT",
            "UNAVAILABLE",
        ],
        &rows,
    )?;
    for (title, groups) in [
        ("ZONE", &stats.zones),
        ("INSTANCE TYPE", &stats.instance_types),
    ] {
        writeln!(out)?;
        let rows: Vec<[String; 6]> = groups
            .iter()
            .map(|g| {
                [
                    g.name.clone(),
                    g.pools.to_string(),
                    g.interruptions.to_string(),
                    events(&g.events),
                    last(g.last_event),
                    share(g.unavailable_share),
                ]
            })
            .collect();
        table(
            out,
            &[
                title,
                "POOLS",
                "INTERRUPTIONS",
                "EVENTS",
                "LAST EVENT",
                "UNAVAILABLE (MEAN)",
            ],
            &rows,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    #[test]
    fn relative_times() {
        let now = Utc::now();
        assert_eq!(
            relative(now + Duration::seconds(42 * 60 + 5), now),
            "in 42m"
        );
        assert_eq!(
            relative(now - Duration::seconds(3 * 3600 + 300), now),
            "3h 5m ago"
        );
        assert_eq!(relative(now - Duration::days(2), now), "2d ago");
        assert_eq!(relative(now, now), "in 0s");
    }
}
