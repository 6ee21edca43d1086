//! Test builders shared by the store's files.

use aws_config::BehaviorVersion;
use aws_sdk_dynamodb::Client;
use chrono::{DateTime, TimeZone, Utc};

use super::DynamoStore;
use crate::domain::event::EventKind;
use crate::domain::plan::Plan;
use crate::domain::pool::{CapacityType, PoolKey, PoolMark};

pub(super) fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap()
}

/// An update recorded at `at(1)`.
pub(super) fn update(marks: usize) -> Plan {
    Plan {
        event_id: "e-1".into(),
        kind: EventKind::SpotInterruption,
        time: at(0) + chrono::Duration::milliseconds(700),
        region: Some("us-east-1".into()),
        summary: "r".into(),
        pools: (0..marks)
            .map(|i| PoolMark {
                pool: PoolKey::new(CapacityType::Spot, &format!("m{i}.large"), "us-east-1a"),
                instance_id: format!("i-{i}"),
                unavailable_until: Some(at(60) + chrono::Duration::milliseconds(1)),
            })
            .collect(),
        ..Plan::default()
    }
}

pub(super) fn store() -> DynamoStore {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .build();
    DynamoStore::new(Client::from_conf(config), "t")
}
