//! The event model: typed EventBridge events for every kind forewarn handles, and the errors of
//! decoding them.
//!
//! This module is the model only: what an event is (its [`EventKind`], its [`Detail`], its
//! instances and times), where a record came from ([`Origin`]) and what was wrong with one
//! ([`DecodeError`]), plus the dates and ids every source uses ([`parse_time`],
//! [`is_instance_id`]). Each source's `detail` is read in a file of its own, with a real sample
//! event at its top: [`ec2`] (spot warnings, rebalance recommendations, state changes, capacity
//! reservation warnings), [`health`] (AWS Health scheduled changes) and [`autoscaling`]
//! (lifecycle actions, and the notifications a lifecycle hook sends straight to a queue). How a
//! message becomes records (the EventBridge envelope, SQS messages, a drain's continuations) is
//! [`crate::domain::inbound`]'s.
//!
//! Decoding never panics and never fails a whole input for one bad record: each record decodes to
//! its own `Result`, and an error names the record and the field that was wrong.

use std::fmt;

use chrono::{DateTime, Datelike, Timelike, Utc, Weekday};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use strum::VariantArray;

use crate::domain::names::string_forms;

pub mod autoscaling;
pub mod ec2;
pub(crate) mod fields;
pub mod health;

/// The kinds of event forewarn knows, by their stable names (`spot-interruption`, ...: serde,
/// [`fmt::Display`], [`std::str::FromStr`], `&'static str` and [`AsRef<str>`] agree).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
#[derive(strum::IntoStaticStr, strum::Display, strum::AsRefStr, VariantArray)]
#[strum(serialize_all = "kebab-case")]
pub enum EventKind {
    SpotInterruption,
    RebalanceRecommendation,
    StateChange,
    ScheduledChange,
    AsgTermination,
    /// A launch lifecycle hook's action: completed once the instance's node is Ready.
    AsgLaunch,
    CapacityReservationInterruption,
    /// A Capacity Block for ML ends in 40 minutes: its instances begin to terminate 10 minutes
    /// after the warning (`end-date` − 30 min). The event names the reservation, not its
    /// instances: they are looked up ([`Detail::CapacityBlock`]).
    CapacityBlockExpiration,
    /// A Capacity Block was delivered: its pool has capacity again (no node action).
    CapacityBlockDelivered,
    /// An instance whose EC2 status check fails (found by the sweeper, never sent by AWS as an
    /// event).
    Impaired,
    /// Anything else (the default: a kind no event names).
    #[default]
    Unsupported,
}

string_forms!(EventKind, "an event kind");

impl EventKind {
    /// Every kind, in a stable order (their declaration's).
    pub const ALL: &[EventKind] = Self::VARIANTS;

    /// Kinds whose node action is configured (a policy's `actions`): every
    /// kind but `asg-launch` (whose only action is completing its hook once the node is Ready),
    /// `capacity-block-delivered` (which only records its pool) and `unsupported`.
    pub fn configurable(self) -> bool {
        !matches!(
            self,
            EventKind::AsgLaunch | EventKind::CapacityBlockDelivered | EventKind::Unsupported
        )
    }

    /// Whether events of this kind name a Capacity Block, whose instances are looked up.
    pub fn is_capacity_block(self) -> bool {
        matches!(
            self,
            EventKind::CapacityBlockExpiration | EventKind::CapacityBlockDelivered
        )
    }

    /// The kind an EventBridge `source` and `detail-type` name; unsupported when none does.
    /// Capacity Blocks' events are known by both spellings AWS documents
    /// ([`DT_BLOCK_EXPIRATION_LONG`], [`DT_BLOCK_DELIVERED_LONG`]). `impaired` is found by the
    /// sweeper only: no event is classified as one.
    pub fn classify(source: &str, detail_type: &str) -> EventKind {
        match (source, detail_type) {
            (SOURCE_EC2, DT_SPOT) => EventKind::SpotInterruption,
            (SOURCE_EC2, DT_REBALANCE) => EventKind::RebalanceRecommendation,
            (SOURCE_EC2, DT_STATE_CHANGE) => EventKind::StateChange,
            (SOURCE_HEALTH, DT_HEALTH) => EventKind::ScheduledChange,
            (SOURCE_ASG, DT_ASG_TERMINATE) => EventKind::AsgTermination,
            (SOURCE_ASG, DT_ASG_LAUNCH) => EventKind::AsgLaunch,
            (SOURCE_EC2, DT_RESERVATION) => EventKind::CapacityReservationInterruption,
            (SOURCE_EC2, DT_BLOCK_EXPIRATION | DT_BLOCK_EXPIRATION_LONG) => {
                EventKind::CapacityBlockExpiration
            }
            (SOURCE_EC2, DT_BLOCK_DELIVERED | DT_BLOCK_DELIVERED_LONG) => {
                EventKind::CapacityBlockDelivered
            }
            _ => EventKind::Unsupported,
        }
    }
}

pub const SOURCE_EC2: &str = "aws.ec2";
pub const SOURCE_HEALTH: &str = "aws.health";
pub const SOURCE_ASG: &str = "aws.autoscaling";
pub const DT_SPOT: &str = "EC2 Spot Instance Interruption Warning";
pub const DT_REBALANCE: &str = "EC2 Instance Rebalance Recommendation";
pub const DT_STATE_CHANGE: &str = "EC2 Instance State-change Notification";
pub const DT_HEALTH: &str = "AWS Health Event";
pub const DT_ASG_TERMINATE: &str = "EC2 Instance-terminate Lifecycle Action";
pub const DT_ASG_LAUNCH: &str = "EC2 Instance-launch Lifecycle Action";
pub const DT_RESERVATION: &str = "EC2 Capacity Reservation Instance Interruption Warning";
/// A Capacity Block's expiration warning, as EC2's user guide names it in English; its other
/// pages (and translations) write [`DT_BLOCK_EXPIRATION_LONG`]: both are matched and accepted.
pub const DT_BLOCK_EXPIRATION: &str = "Capacity Block Expiration Warning";
pub const DT_BLOCK_EXPIRATION_LONG: &str = "Capacity Block Reservation Expiration Warning";
pub const DT_BLOCK_DELIVERED: &str = "Capacity Block Delivered";
pub const DT_BLOCK_DELIVERED_LONG: &str = "Capacity Block Reservation Delivered";
/// How long before its end a Capacity Block's instances begin to terminate.
pub const BLOCK_TERMINATION_LEAD: chrono::Duration = chrono::Duration::minutes(30);
/// How long after its expiration warning a Capacity Block's instances begin to terminate (the
/// warning comes 40 minutes before the end).
pub const BLOCK_WARNING_LEAD: chrono::Duration = chrono::Duration::minutes(10);

/// What a spot (or capacity reservation) interruption will do to the instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, strum::Display)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum InstanceAction {
    Terminate,
    Stop,
    Hibernate,
}

/// EC2 instance states as the state-change notification names them; a state of another name is
/// kept as it is written ([`InstanceState::Other`]).
#[derive(Debug, Clone, PartialEq, Eq, strum::Display, strum::EnumString, strum::AsRefStr)]
#[strum(serialize_all = "kebab-case")]
pub enum InstanceState {
    Pending,
    Running,
    Stopping,
    Stopped,
    ShuttingDown,
    Terminated,
    #[strum(default, transparent)]
    Other(String),
}

impl InstanceState {
    /// States in which the instance is going away (the ones forewarn acts on).
    pub fn is_leaving(&self) -> bool {
        matches!(
            self,
            InstanceState::Stopping
                | InstanceState::Stopped
                | InstanceState::ShuttingDown
                | InstanceState::Terminated
        )
    }
}

/// The ASG lifecycle action to complete once the node is drained (a terminate hook) or Ready (a
/// launch hook).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleAction {
    pub hook_name: String,
    pub asg_name: String,
    pub token: String,
    /// The account of the group, as the event's envelope says it: the action is completed (and
    /// kept alive) in that account. `None`: the deployment's own (a continuation written before
    /// this field existed reads as `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// The region of the group, as the event's envelope says it (`None`: the deployment's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

/// The kind-specific part of an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detail {
    Spot {
        action: InstanceAction,
    },
    Rebalance,
    StateChange {
        state: InstanceState,
    },
    Scheduled {
        event_type_code: String,
        event_arn: Option<String>,
        start_time: Option<DateTime<Utc>>,
        end_time: Option<DateTime<Utc>>,
        /// The instances whose scheduled change is over: every one when the update's
        /// `statusCode` is `closed`, else those whose entity `status` is `RESOLVED` or
        /// `CANCELLED`. Their cordon (forewarn's, for this `eventArn`) is undone.
        closed: Vec<String>,
    },
    AsgTermination(LifecycleAction),
    AsgLaunch(LifecycleAction),
    CapacityReservation {
        action: InstanceAction,
        termination_time: Option<DateTime<Utc>>,
    },
    /// A Capacity Block's warning or delivery: the reservation (`cr-…`) and its end. Its
    /// instances are not in the event: they are looked up in the event's account and region
    /// (and `block` says what EC2 says of the reservation), never taken from a message.
    CapacityBlock {
        reservation_id: String,
        end_date: Option<DateTime<Utc>>,
        block: Option<BlockFacts>,
        /// A part of a warning that forewarn queued for some of the block's instances
        /// (`detail.instance-ids`, see `crate::app::blocks`): its id is the warning's and its
        /// first instance's, and it acts only on those of its instances EC2 lists in the block.
        part: bool,
    },
    /// EC2 status checks failing (the sweeper's `DescribeInstanceStatus`): which (`system`,
    /// `instance`, or both).
    Impaired {
        checks: String,
    },
    /// Valid JSON forewarn does not handle; `why` says what it was.
    Unsupported {
        why: String,
    },
}

/// What EC2 says of a Capacity Block (`DescribeCapacityReservations`): its type of instance,
/// zone, end and state, and whether it is a Capacity Block at all (`reservationType`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockFacts {
    pub reservation_id: String,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub zone_id: Option<String>,
    pub end_date: Option<DateTime<Utc>>,
    /// `active`, `expired`, `scheduled`, ... (`None`: not known, a capture).
    pub state: Option<String>,
    /// `Some(false)`: EC2 says it is another kind of reservation (an ODCR); `None`: not known
    /// (a capture).
    pub capacity_block: Option<bool>,
}

/// One decoded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The EventBridge event id; the idempotence key.
    pub id: String,
    pub kind: EventKind,
    pub time: DateTime<Utc>,
    pub region: Option<String>,
    pub account: Option<String>,
    /// The EC2 instances the event is about (in event order, no duplicates).
    pub instance_ids: Vec<String>,
    pub detail: Detail,
}

/// Where a record came from inside an input: the file (or other label) and its position in the
/// envelope, as people read it (`b.json`, `b.json: [2]`, `b.json: Records[2] (messageId m)`),
/// and the SQS message id when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    at: String,
    pub message_id: Option<String>,
}

impl Origin {
    /// The origin of a bare event read from `source`.
    pub fn bare(source: impl Into<String>) -> Origin {
        let (at, message_id) = (source.into(), None);
        Origin { at, message_id }
    }

    /// The origin of the record at `index` of an SQS batch read from `source`.
    pub fn sqs(source: &str, index: usize, message_id: Option<String>) -> Origin {
        let id = (message_id.as_deref()).map_or(String::new(), |id| format!(" (messageId {id})"));
        let at = format!("{source}: Records[{index}]{id}");
        Origin { at, message_id }
    }

    /// The origin of the item at `index` of a JSON array read from `source`.
    pub fn array(source: &str, index: usize) -> Origin {
        Origin::bare(format!("{source}: [{index}]"))
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.at)
    }
}

/// A record that could not be decoded: where, which field, and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {}{message}", field.as_deref().map(|f| format!("field `{f}`: ")).unwrap_or_default())]
pub struct DecodeError {
    pub origin: Origin,
    /// The JSON path of the offending field, when one field is to blame.
    pub field: Option<String>,
    pub message: String,
}

impl DecodeError {
    /// What is wrong with the record from `origin`, and with which field if one is to blame.
    pub fn new(origin: &Origin, field: Option<&str>, message: impl Into<String>) -> DecodeError {
        DecodeError {
            origin: origin.clone(),
            field: field.map(str::to_string),
            message: message.into(),
        }
    }
}

/// `i-` followed by 8 or 17 lowercase hex digits.
pub fn is_instance_id(s: &str) -> bool {
    is_aws_id(s, "i-")
}

/// `prefix` followed by 8 or 17 lowercase hex digits.
fn is_aws_id(s: &str, prefix: &str) -> bool {
    s.strip_prefix(prefix).is_some_and(|hex| {
        (hex.len() == 8 || hex.len() == 17)
            && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Parses the time forms AWS events use: RFC 3339 ("2026-06-05T15:10:09Z") and RFC 1123 as AWS
/// Health writes it ("Sat, 05 Jun 2026 15:10:09 GMT").
///
/// Only years 0 to 9999 (in UTC) are times: the RFC 2822 parser takes years of any length, and
/// a time near chrono's limits would overflow (and panic) when a deadline is added to it.
///
/// RFC 1123 dates are also taken as AWS writes them in its own examples: a weekday that does not
/// match the date (the date is authoritative, the weekday redundant), single-digit days and
/// fractional seconds (`Thu, 3 Dec 2026 06:00:00.500 GMT`).
pub fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    let s = s.trim();
    DateTime::parse_from_rfc3339(s)
        .or_else(|_| DateTime::parse_from_rfc2822(s))
        .ok()
        .map(|t| t.with_timezone(&Utc))
        .or_else(|| parse_rfc1123_as_aws_writes_it(s))
        .filter(|t| (0..=9999).contains(&t.year()))
}

/// RFC 1123 with a weekday that may not match the date, and fractional seconds.
fn parse_rfc1123_as_aws_writes_it(s: &str) -> Option<DateTime<Utc>> {
    let (weekday, rest) = match s.split_once(',') {
        Some((w, rest)) => (Some(w.trim().parse::<Weekday>().ok()?), rest),
        None => (None, s),
    };
    let words: Vec<&str> = rest.split_ascii_whitespace().collect();
    let [day, month, year, time, zone] = words[..] else {
        return None;
    };
    // Its fraction of a second: 1 to 9 digits, the nanoseconds once padded to nine.
    let (hms, fraction) = time.split_once('.').unwrap_or((time, "0"));
    if !(1..=9).contains(&fraction.len()) || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nanos = format!("{fraction:0<9}").parse().ok()?;
    let t = DateTime::parse_from_rfc2822(&format!("{day} {month} {year} {hms} {zone}")).ok()?;
    let t = t.with_timezone(&Utc).with_nanosecond(nanos)?;
    if let Some(weekday) = weekday
        && weekday != t.weekday()
    {
        tracing::debug!(
            time = s,
            weekday = %weekday,
            date_weekday = %t.weekday(),
            "RFC 1123 time whose weekday does not match its date: the date is taken"
        );
    }
    Some(t)
}

/// A stable id for an unsupported event that carries none (FNV-1a of its canonical JSON).
pub(crate) fn synthetic_id(v: &Value) -> String {
    let hash = crate::domain::names::fnv1a(v.to_string().bytes());
    format!("unidentified-{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_times_in_rfc1123_and_rfc3339() {
        let t1 = parse_time("Sat, 21 Nov 2026 10:30:00 GMT").unwrap();
        let t2 = parse_time("2026-11-21T10:30:00Z").unwrap();
        assert_eq!(t1, t2);
        assert!(parse_time("yesterday").is_none());
    }

    #[test]
    fn rfc1123_as_aws_writes_it() {
        // 5 June 2016 was a Sunday: the weekday of AWS Health's own example is wrong.
        assert_eq!(
            parse_time("Sat, 05 Jun 2016 15:10:09 GMT"),
            parse_time("2016-06-05T15:10:09Z")
        );
        assert_eq!(
            parse_time("Thu, 3 Dec 2026 06:00:00 GMT"),
            parse_time("2026-12-03T06:00:00Z")
        );
        assert_eq!(
            parse_time("Sat, 3 Dec 2026 06:00:00.5 GMT"),
            parse_time("2026-12-03T06:00:00.500Z")
        );
        assert_eq!(
            parse_time("3 Dec 2026 06:00:00.123456789 +0100"),
            parse_time("2026-12-03T05:00:00.123456789Z")
        );
        for bad in [
            "Xyz, 3 Dec 2026 06:00:00 GMT",
            "Thu, 3 Dec 2026 06:00:00. GMT",
            "Thu, 3 Dec 2026 06:00:00.1234567890 GMT",
            "Thu, 3 Dec 2026 06:00:00.12a GMT",
            "Thu, 32 Dec 2026 06:00:00 GMT",
            "Sat, 21 Nov 20263 10:30:00.5 GMT",
            "{{start_time}}",
            "",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn instance_ids() {
        assert!(is_instance_id("i-0a1b2c3d4e5f60001"));
        assert!(is_instance_id("i-12345678"));
        assert!(!is_instance_id("i-0A1B2C3D4E5F60001"));
        assert!(!is_instance_id("i-123"));
        assert!(!is_instance_id("vol-0a1b2c3d4e5f60001"));
    }

    #[test]
    fn kinds_keep_their_names() {
        let names: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "spot-interruption",
                "rebalance-recommendation",
                "state-change",
                "scheduled-change",
                "asg-termination",
                "asg-launch",
                "capacity-reservation-interruption",
                "capacity-block-expiration",
                "capacity-block-delivered",
                "impaired",
                "unsupported",
            ]
        );
        for &kind in EventKind::ALL {
            assert_eq!(kind.to_string(), kind.as_str());
            assert_eq!(kind.as_str().parse(), Ok(kind));
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                Value::String(kind.as_str().into())
            );
        }
        assert_eq!(
            "Spot-Interruption"
                .parse::<EventKind>()
                .unwrap_err()
                .to_string(),
            format!(
                "`Spot-Interruption` is not an event kind ({})",
                names.join(", ")
            )
        );
    }
}
