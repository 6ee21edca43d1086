//! `forewarn pools`.

use std::io::Write;
use std::process::ExitCode;

use chrono::{DateTime, SecondsFormat, Utc};
use clap::{Args, ValueEnum};
use forewarn::domain::pool::{PoolQuery, PoolRecord};
use serde::Serialize;

use crate::{StoreArgs, stores, text};

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

pub async fn run(args: PoolsArgs) -> anyhow::Result<ExitCode> {
    let store = stores::open(&args.store).await?;
    let query = PoolQuery {
        include_available: args.all,
        zone: args.zone,
        instance_type: args.instance_type,
    };
    let now = Utc::now();
    let records = store.pools(&query, now).await?;
    let mut out = std::io::stdout().lock();
    match args.output {
        TableOrJson::Json => {
            let items: Vec<PoolJson<'_>> = records.iter().map(PoolJson::from).collect();
            serde_json::to_writer_pretty(&mut out, &items)?;
            writeln!(out)?;
        }
        TableOrJson::Table => text::pools(&mut out, &records, now)?,
    }
    Ok(ExitCode::SUCCESS)
}
