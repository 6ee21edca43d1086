//! Capacity pools and the pool store port.
//!
//! A capacity pool is (capacity type, instance type, zone). Events mark pools as unavailable for
//! a while and count what happened to them. The store applies each event at most once (the event
//! id is the idempotence key) and never loses a concurrent increment.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::event::EventKind;
use crate::domain::names::{UnknownName, string_forms};

/// How an instance is paid for, as Karpenter names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(strum::IntoStaticStr, strum::Display, strum::VariantArray)]
#[strum(serialize_all = "kebab-case")]
pub enum CapacityType {
    Spot,
    OnDemand,
    /// Capacity reservations (ODCRs, interruptible reservations).
    Reserved,
    /// Capacity Blocks for ML: reserved for a fixed time, taken back at its end.
    CapacityBlock,
}

string_forms!(CapacityType, "a capacity type");

impl CapacityType {
    /// The capacity type EC2's fields imply: `InstanceLifecycle` spot → spot, capacity-block →
    /// capacity-block, a capacity reservation → reserved, otherwise on-demand.
    pub fn of_ec2(lifecycle: Option<&str>, capacity_reservation_id: Option<&str>) -> CapacityType {
        match lifecycle {
            Some("spot") => CapacityType::Spot,
            Some("capacity-block") => CapacityType::CapacityBlock,
            _ if capacity_reservation_id.is_some_and(|id| !id.is_empty()) => CapacityType::Reserved,
            _ => CapacityType::OnDemand,
        }
    }
}

/// A capacity pool. Its string form `capacity_type#instance_type#zone` is the store key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PoolKey {
    pub capacity_type: CapacityType,
    pub instance_type: String,
    /// The zone's ID (`use1-az1`: the same physical zone in every account), or its name
    /// (`us-east-1a`) where the ID is not known (a capture; a record written before pools were
    /// keyed by zone ID).
    pub zone: String,
}

/// One account's zone names (`us-east-1a`) in a region, and their zone IDs (`use1-az1`): each
/// account maps names to physical zones in its own way.
pub type ZoneIds = BTreeMap<String, String>;

impl PoolKey {
    pub fn new(capacity_type: CapacityType, instance_type: &str, zone: &str) -> PoolKey {
        PoolKey {
            capacity_type,
            instance_type: instance_type.to_string(),
            zone: zone.to_string(),
        }
    }
}

impl fmt::Display for PoolKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}#{}#{}",
            self.capacity_type, self.instance_type, self.zone
        )
    }
}

/// Text that is not a pool key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadPoolKey {
    #[error("`{0}` is not a pool key (capacity_type#instance_type#zone)")]
    Shape(String),
    #[error(transparent)]
    CapacityType(#[from] UnknownName),
}

impl FromStr for PoolKey {
    type Err = BadPoolKey;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split('#').collect::<Vec<_>>()[..] {
            [ct, it, z] if !it.is_empty() && !z.is_empty() => Ok(PoolKey::new(ct.parse()?, it, z)),
            _ => Err(BadPoolKey::Shape(s.to_string())),
        }
    }
}

/// The most pools one event's update records. The DynamoDB store writes an update in one
/// transaction, which holds at most 100 items: the ledger entries (the event id, and for a
/// single-instance spot warning or state change its sweep key: at most 2), one update per pool
/// and one history item per pool (`2 + 2 × 49 = 100`). [`crate::domain::plan::decide`] records
/// the first this many pools of an event and says which it left out; every store refuses an
/// update that marks more ([`crate::domain::fold::validate`]).
pub const MAX_POOLS_PER_UPDATE: usize = 49;

/// What one event does to one pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolMark {
    pub pool: PoolKey,
    /// The instance of the event that lives in this pool.
    pub instance_id: String,
    /// Until when the pool is unavailable; `None` when the event only counts (does not mark).
    pub unavailable_until: Option<DateTime<Utc>>,
}

/// The result of applying an update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// First time this event id was applied.
    Applied,
    /// The event id was applied before; nothing changed.
    Duplicate,
}

/// The per-kind counter names of a pool record.
pub fn counter_name(kind: EventKind) -> &'static str {
    match kind {
        EventKind::SpotInterruption => "interruptions",
        EventKind::RebalanceRecommendation => "rebalances",
        EventKind::StateChange => "state_changes",
        EventKind::ScheduledChange => "scheduled_changes",
        EventKind::AsgTermination => "asg_terminations",
        EventKind::AsgLaunch => "asg_launches",
        EventKind::Impaired => "impaired",
        EventKind::CapacityReservationInterruption => "reservation_interruptions",
        EventKind::CapacityBlockExpiration => "block_expirations",
        EventKind::CapacityBlockDelivered => "block_deliveries",
        EventKind::Unsupported => "unsupported",
    }
}

/// A pool as the store knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRecord {
    pub pool: PoolKey,
    pub region: Option<String>,
    /// Latest of the unavailability windows recorded (never shortened by a late event).
    pub unavailable_until: Option<DateTime<Utc>>,
    /// When the store may forget the pool (the table's TTL attribute).
    pub expires_at: DateTime<Utc>,
    /// Per-kind counters, keyed by [`counter_name`].
    pub counters: BTreeMap<String, u64>,
    pub first_seen: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
    pub last_event_id: String,
    pub last_reason: String,
    pub last_instance_id: String,
}

impl PoolRecord {
    /// Spot interruptions counted for this pool.
    pub fn interruptions(&self) -> u64 {
        self.counter(EventKind::SpotInterruption)
    }

    pub fn counter(&self, kind: EventKind) -> u64 {
        self.counters
            .get(counter_name(kind))
            .copied()
            .unwrap_or_default()
    }

    /// Whether the pool is unavailable at `now`: within its window, unless the latest event on
    /// it is a Capacity Block's delivery ([`PoolRecord::delivered_since`]).
    pub fn is_unavailable(&self, now: DateTime<Utc>) -> bool {
        self.unavailable_until.is_some_and(|until| until > now) && !self.delivered_since()
    }

    /// Whether the latest event recorded on the pool (by its own time) is a Capacity Block's
    /// delivery: the pool has capacity again, whatever window an earlier expiration set (windows
    /// only grow, so a delivery answers by being the latest word on the pool). Read from the
    /// latest event's reason, which begins with its kind.
    pub fn delivered_since(&self) -> bool {
        let kind = self.last_reason.split(' ').next();
        kind == Some(EventKind::CapacityBlockDelivered.as_str())
    }
}

/// A query over the pools.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PoolQuery {
    /// Also pools whose unavailability has ended (still within their retention).
    pub include_available: bool,
    pub zone: Option<String>,
    pub instance_type: Option<String>,
}

impl PoolQuery {
    /// Whether a record answers the query at `now`. Every store filters with this, so that
    /// records past their TTL (which DynamoDB deletes lazily) are never shown.
    pub fn matches(&self, record: &PoolRecord, now: DateTime<Utc>) -> bool {
        record.expires_at > now
            && (self.include_available || record.is_unavailable(now))
            && self.zone.as_ref().is_none_or(|z| *z == record.pool.zone)
            && self
                .instance_type
                .as_ref()
                .is_none_or(|t| *t == record.pool.instance_type)
    }

    /// The records of `records` that answer the query at `now`, newest first (by `last_seen`,
    /// then by key for a stable order): every store's last step.
    pub fn select(&self, mut records: Vec<PoolRecord>, now: DateTime<Utc>) -> Vec<PoolRecord> {
        records.retain(|r| self.matches(r, now));
        records.sort_by(|a, b| b.last_seen.cmp(&a.last_seen).then(a.pool.cmp(&b.pool)));
        records
    }
}

/// How long the store keeps what it records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// How long an applied event id is remembered (the idempotence window). SQS keeps a message
    /// at most 14 days, so a redelivery can come that late.
    pub ledger: chrono::Duration,
    /// How long a pool's history is kept after its last event or the end of its window.
    pub history: chrono::Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            ledger: chrono::Duration::days(14),
            history: chrono::Duration::days(30),
        }
    }
}

impl Retention {
    /// The TTL of a pool record after `update` touched it.
    pub fn pool_expiry(
        &self,
        last_seen: DateTime<Utc>,
        unavailable_until: Option<DateTime<Utc>>,
    ) -> DateTime<Utc> {
        unavailable_until.map_or(last_seen, |u| u.max(last_seen)) + self.history
    }
}

/// One event's mark (or count) on one pool, as the history keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub pool: PoolKey,
    pub kind: EventKind,
    pub event_id: String,
    pub instance_id: String,
    /// The event's time.
    pub at: DateTime<Utc>,
    /// The end of the window it marked; `None` when it only counts.
    pub unavailable_until: Option<DateTime<Utc>>,
    /// When the entry may be deleted (the table's TTL).
    pub expires_at: DateTime<Utc>,
}

impl HistoryEntry {
    /// Whether the entry matters for the period `[since, now]`: its event is in it, or its
    /// window overlaps it; and it has not expired.
    pub fn in_period(&self, since: DateTime<Utc>, now: DateTime<Utc>) -> bool {
        let touches = self.at >= since || self.unavailable_until.is_some_and(|u| u > since);
        touches && self.at <= now && self.expires_at > now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_key_round_trips() {
        let k = PoolKey::new(CapacityType::Spot, "m5.large", "us-east-1a");
        assert_eq!(k.to_string(), "spot#m5.large#us-east-1a");
        assert_eq!("spot#m5.large#us-east-1a".parse::<PoolKey>().unwrap(), k);
        assert_eq!(
            "spot#m5.large".parse::<PoolKey>().unwrap_err().to_string(),
            "`spot#m5.large` is not a pool key (capacity_type#instance_type#zone)"
        );
        assert_eq!(
            "cheap#m5.large#us-east-1a"
                .parse::<PoolKey>()
                .unwrap_err()
                .to_string(),
            "`cheap` is not a capacity type (spot, on-demand, reserved, capacity-block)"
        );
        assert!("spot#a#b#c".parse::<PoolKey>().is_err());
    }

    #[test]
    fn query_filters_expired_and_available() {
        let now = Utc::now();
        let mut r = PoolRecord {
            pool: PoolKey::new(CapacityType::Spot, "m5.large", "us-east-1a"),
            region: None,
            unavailable_until: Some(now + chrono::Duration::minutes(5)),
            expires_at: now + chrono::Duration::days(1),
            counters: BTreeMap::new(),
            first_seen: now,
            last_seen: now,
            last_event_id: "e".into(),
            last_reason: "r".into(),
            last_instance_id: "i".into(),
        };
        let q = PoolQuery::default();
        assert!(q.matches(&r, now));
        r.unavailable_until = Some(now - chrono::Duration::seconds(1));
        assert!(!q.matches(&r, now));
        let all = PoolQuery {
            include_available: true,
            ..PoolQuery::default()
        };
        assert!(all.matches(&r, now));
        r.expires_at = now;
        assert!(
            !all.matches(&r, now),
            "past its TTL, even if not yet deleted"
        );
        let by_zone = PoolQuery {
            include_available: true,
            zone: Some("us-east-1b".into()),
            ..PoolQuery::default()
        };
        r.expires_at = now + chrono::Duration::days(1);
        assert!(!by_zone.matches(&r, now));
    }
}
