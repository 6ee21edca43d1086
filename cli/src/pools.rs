//! `forewarn pools`.

use std::process::ExitCode;
use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use clap::{Args, ValueEnum};
use forewarn::app::settings::Settings;
use forewarn::domain::pool::{PoolQuery, PoolRecord};
use forewarn::ports::Clock;
use serde::Serialize;

use crate::{StoreArgs, text};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods() {
        assert_eq!(parse_since("7d").unwrap(), chrono::Duration::days(7));
        assert_eq!(parse_since("2w").unwrap(), chrono::Duration::days(14));
        assert_eq!(parse_since("30m").unwrap(), chrono::Duration::minutes(30));
        for bad in ["", "0d", "-1d", "xw", "soon", "99999w"] {
            let e = parse_since(bad).unwrap_err().to_string();
            assert!(e.contains("--since"), "{e}");
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableOrJson {
    Table,
    Json,
}

#[derive(Args, Debug)]
pub struct PoolsArgs {
    #[arg(long, value_enum, default_value = "table")]
    output: TableOrJson,
    /// Also pools whose unavailability has ended (still within their retention).
    #[arg(long)]
    all: bool,
    /// Only this availability zone.
    #[arg(long, value_name = "ZONE")]
    zone: Option<String>,
    /// Only this instance type.
    #[arg(long, value_name = "TYPE")]
    instance_type: Option<String>,
    /// Statistics from the table's history instead: per pool the events by kind, the time since
    /// the last one and the share of the period it was unavailable; per zone and instance type.
    #[arg(long)]
    stats: bool,
    /// The period of --stats, back from now: 30m, 12h, 7d, 2w.
    #[arg(long, value_name = "DURATION", default_value = "7d", requires = "stats", value_parser = parse_since)]
    since: chrono::Duration,
    #[command(flatten)]
    store: StoreArgs,
}

/// One element of `forewarn pools --output json`.
#[derive(Serialize)]
pub struct PoolJson<'a> {
    pub capacity_type: &'a str,
    pub instance_type: &'a str,
    pub zone: &'a str,
    pub region: Option<&'a str>,
    pub unavailable_until: Option<String>,
    pub interruptions: u64,
    pub counters: &'a std::collections::BTreeMap<String, u64>,
    pub first_seen: String,
    pub last_seen: String,
    pub last_event_id: &'a str,
    pub last_reason: &'a str,
    pub last_instance_id: &'a str,
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

impl<'a> From<&'a PoolRecord> for PoolJson<'a> {
    fn from(r: &'a PoolRecord) -> Self {
        PoolJson {
            capacity_type: r.pool.capacity_type.as_str(),
            instance_type: &r.pool.instance_type,
            zone: &r.pool.zone,
            region: r.region.as_deref(),
            unavailable_until: r.unavailable_until.map(rfc3339),
            interruptions: r.interruptions(),
            counters: &r.counters,
            first_seen: rfc3339(r.first_seen),
            last_seen: rfc3339(r.last_seen),
            last_event_id: &r.last_event_id,
            last_reason: &r.last_reason,
            last_instance_id: &r.last_instance_id,
        }
    }
}

/// A `--since` that is not a period back from now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--since {given}: not a period back from now (e.g. 30m, 12h, 7d, 2w)")]
pub struct NotAPeriod {
    /// The text given.
    pub given: String,
}

/// `30m`, `12h`, `7d`, `2w`: what the settings' durations accept (humantime's forms), at most
/// ten years.
pub fn parse_since(text: &str) -> Result<chrono::Duration, NotAPeriod> {
    (forewarn::domain::time::parse_duration(text).ok())
        .filter(|d| *d > chrono::Duration::zero())
        .ok_or_else(|| NotAPeriod {
            given: text.to_string(),
        })
}

pub async fn run(
    args: PoolsArgs,
    settings: Settings,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<ExitCode> {
    let since = args.stats.then_some(args.since);
    let store = args.store.open(&settings, clock.clone()).await?;
    let now = clock.now();
    let mut out = std::io::stdout().lock();
    if let Some(since) = since {
        let entries = store.history(now - since, now).await?;
        let mut stats = forewarn::domain::stats::stats(&entries, now - since, now);
        if let Some(zone) = &args.zone {
            stats.pools.retain(|p| &p.zone == zone);
            stats.zones.retain(|g| &g.name == zone);
        }
        if let Some(t) = &args.instance_type {
            stats.pools.retain(|p| &p.instance_type == t);
            stats.instance_types.retain(|g| &g.name == t);
        }
        match args.output {
            TableOrJson::Json => text::json(&mut out, &stats)?,
            TableOrJson::Table => text::stats(&mut out, &stats)?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    let query = PoolQuery {
        include_available: args.all,
        zone: args.zone,
        instance_type: args.instance_type,
    };
    let records = store.pools(&query, now).await?;
    match args.output {
        TableOrJson::Json => {
            let items: Vec<PoolJson<'_>> = records.iter().map(PoolJson::from).collect();
            text::json(&mut out, &items)?
        }
        TableOrJson::Table => text::pools(&mut out, &records, now)?,
    }
    Ok(ExitCode::SUCCESS)
}
