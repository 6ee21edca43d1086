//! EC2 status checks and scheduled events, as the pool sweeper reads them
//! (`DescribeInstanceStatus`), into findings: an instance whose system or instance status check
//! has failed for 5 minutes (the configuration's `impaired_after`) is `impaired`; an instance whose EC2 scheduled event
//! retires or stops it is a `scheduled-change`, for when AWS Health's event was missed.
//!
//! A status as `DescribeInstanceStatus` answers it (abridged):
//!
//! ```json
//! {
//!   "InstanceId": "i-0a1b2c3d4e5f60002",
//!   "AvailabilityZone": "us-east-1b",
//!   "InstanceState": {"Code": 16, "Name": "running"},
//!   "SystemStatus": {"Status": "impaired",
//!     "Details": [{"Name": "reachability", "Status": "failed",
//!                  "ImpairedSince": "2026-11-20T09:51:00.000Z"}]},
//!   "InstanceStatus": {"Status": "ok",
//!     "Details": [{"Name": "reachability", "Status": "passed"}]},
//!   "Events": [{"InstanceEventId": "instance-event-0d59937288b749b32",
//!     "Code": "instance-retirement",
//!     "Description": "The instance is running on degraded hardware",
//!     "NotBefore": "2026-11-27T00:00:00.000Z"}]
//! }
//! ```
//!
//! Only the instances of this cluster's nodes count (the sweeper reads all of the region's and
//! keeps those). An impaired instance is a finding once its earliest failed check's
//! `ImpairedSince` is at least `impaired_after` old: with the default, the sweep's period, it was
//! already impaired at the previous sweep, so one failed check seen once is not enough; an
//! impaired status without `ImpairedSince` is not acted on (nothing says for how long). Only
//! `instance-retirement` and `instance-stop` events are findings (the instance goes away); the
//! reboots and maintenance keep it, and events whose description starts `[Completed]` or
//! `[Canceled]` are over. Ids are sweep keys (see [`crate::domain::sweep`]): one `impaired` and
//! one `scheduled-change` per run of an instance, the latter the key an applied AWS Health event
//! records too, so a handled Health event makes the sweep's finding a duplicate.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::clusters::Place;
use crate::domain::event::{Detail, Event, EventKind};
use crate::domain::facts::InstanceFacts;
use crate::domain::findings::synthetic;

/// One instance's status, as `DescribeInstanceStatus` answers it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct InstanceStatus {
    pub instance_id: String,
    /// `SystemStatus.Status` (`ok`, `impaired`, `insufficient-data`, `not-applicable`,
    /// `initializing`).
    pub system: Option<String>,
    /// `InstanceStatus.Status`.
    pub instance: Option<String>,
    /// The earliest `ImpairedSince` of the failed checks' details.
    pub impaired_since: Option<DateTime<Utc>>,
    pub events: Vec<ScheduledEvent>,
}

/// An EC2 scheduled event of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ScheduledEvent {
    pub id: Option<String>,
    /// `instance-reboot`, `system-reboot`, `system-maintenance`, `instance-retirement`,
    /// `instance-stop`.
    pub code: String,
    pub description: String,
    pub not_before: Option<DateTime<Utc>>,
    pub not_after: Option<DateTime<Utc>>,
}

/// The codes of the scheduled events after which the instance is gone.
pub const LEAVING_EVENT_CODES: [&str; 2] = ["instance-retirement", "instance-stop"];

impl InstanceStatus {
    /// Which checks are failing (`system`, `instance`, `system and instance`), if any.
    pub fn failing(&self) -> Option<&'static str> {
        let bad = |s: &Option<String>| s.as_deref() == Some("impaired");
        match (bad(&self.system), bad(&self.instance)) {
            (true, true) => Some("system and instance"),
            (true, false) => Some("system"),
            (false, true) => Some("instance"),
            (false, false) => None,
        }
    }
}

impl ScheduledEvent {
    /// The event will retire or stop the instance and is not over.
    pub fn leaving(&self) -> bool {
        LEAVING_EVENT_CODES.contains(&self.code.as_str())
            && !["[Completed]", "[Canceled]"]
                .iter()
                .any(|p| self.description.starts_with(p))
    }
}

/// The findings of `statuses` for the instances of this cluster's nodes (`node_instances`, by
/// id, with their launch times) at `now`.
pub fn status_findings(
    statuses: &[InstanceStatus],
    node_instances: &BTreeMap<String, InstanceFacts>,
    impaired_after: Duration,
    now: DateTime<Utc>,
    place: &Place,
) -> Vec<Event> {
    let mut events = Vec::new();
    for s in statuses {
        let Some(instance) = node_instances.get(&s.instance_id) else {
            continue;
        };
        let run = (s.instance_id.as_str(), instance.launch_time);
        if let (Some(checks), Some(since)) = (s.failing(), s.impaired_since)
            && now - since >= impaired_after
        {
            events.push(synthetic(
                EventKind::Impaired,
                run,
                Detail::Impaired {
                    checks: checks.to_string(),
                },
                now,
                place,
            ));
        }
        if let Some(scheduled) = s.events.iter().find(|e| e.leaving()) {
            events.push(synthetic(
                EventKind::ScheduledChange,
                run,
                Detail::Scheduled {
                    event_type_code: scheduled.code.clone(),
                    event_arn: None,
                    start_time: scheduled.not_before,
                    end_time: scheduled.not_after,
                    closed: Vec::new(),
                },
                now,
                place,
            ));
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::event::parse_time;
    use crate::domain::fixtures;

    fn t(s: &str) -> DateTime<Utc> {
        parse_time(s).unwrap()
    }

    fn now() -> DateTime<Utc> {
        t("2026-11-20T10:00:00Z")
    }

    fn ours() -> BTreeMap<String, InstanceFacts> {
        ["i-00000001", "i-00000002", "i-00000003", "i-00000004"]
            .into_iter()
            .map(|id| {
                let i = fixtures::instance(id)
                    .launched(t("2026-11-20T09:00:00Z"))
                    .build();
                (id.to_string(), i)
            })
            .collect()
    }

    fn impaired(id: &str, since: Option<&str>) -> InstanceStatus {
        InstanceStatus {
            instance_id: id.into(),
            system: Some("impaired".into()),
            instance: Some("ok".into()),
            impaired_since: since.map(t),
            events: Vec::new(),
        }
    }

    fn findings(statuses: &[InstanceStatus]) -> Vec<Event> {
        status_findings(
            statuses,
            &ours(),
            Duration::minutes(5),
            now(),
            &Place {
                account: None,
                region: Some("us-east-1".into()),
            },
        )
    }

    #[test]
    fn impaired_once_it_was_impaired_at_the_previous_sweep() {
        let events = findings(&[
            impaired("i-00000001", Some("2026-11-20T09:54:00Z")),
            // Seen impaired for the first time: 2 minutes is less than a sweep's period.
            impaired("i-00000002", Some("2026-11-20T09:58:00Z")),
            // Nothing says for how long.
            impaired("i-00000003", None),
            // Not one of this cluster's nodes.
            impaired("i-000000ff", Some("2026-11-20T08:00:00Z")),
            InstanceStatus {
                instance_id: "i-00000004".into(),
                system: Some("ok".into()),
                instance: Some("initializing".into()),
                ..InstanceStatus::default()
            },
        ]);
        assert_eq!(events.len(), 1, "{events:#?}");
        let e = &events[0];
        assert_eq!(e.kind, EventKind::Impaired);
        assert_eq!(e.id, "sweep:impaired:i-00000001@1795165200");
        assert_eq!(
            e.detail,
            Detail::Impaired {
                checks: "system".into()
            }
        );
        let mut both = impaired("i-00000002", Some("2026-11-20T09:50:00Z"));
        both.instance = Some("impaired".into());
        assert!(matches!(
            &findings(&[both])[0].detail,
            Detail::Impaired { checks, .. } if checks == "system and instance"
        ));
    }

    #[test]
    fn scheduled_retirements_and_stops_not_reboots_or_finished_ones() {
        let event = |code: &str, description: &str| ScheduledEvent {
            id: Some("instance-event-0d59937288b749b32".into()),
            code: code.into(),
            description: description.into(),
            not_before: Some(t("2026-11-27T00:00:00Z")),
            not_after: None,
        };
        let status = |id: &str, events: Vec<ScheduledEvent>| InstanceStatus {
            instance_id: id.into(),
            system: Some("ok".into()),
            instance: Some("ok".into()),
            impaired_since: None,
            events,
        };
        let events = findings(&[
            status(
                "i-00000001",
                vec![event("instance-retirement", "degraded hardware")],
            ),
            status(
                "i-00000002",
                vec![event("system-reboot", "scheduled reboot")],
            ),
            status(
                "i-00000003",
                vec![event(
                    "instance-stop",
                    "[Completed] The instance is running on degraded hardware",
                )],
            ),
            status(
                "i-00000004",
                vec![event("instance-stop", "[Canceled] stop")],
            ),
        ]);
        assert_eq!(events.len(), 1, "{events:#?}");
        let e = &events[0];
        assert_eq!(e.kind, EventKind::ScheduledChange);
        assert_eq!(e.id, "sweep:scheduled-change:i-00000001@1795165200");
        let config = crate::domain::config::Config::default();
        assert_eq!(
            crate::domain::plan::goes_at(e, &config),
            Some(t("2026-11-27T00:00:00Z"))
        );
    }

    #[test]
    fn a_handled_health_event_records_the_key_of_the_sweeps_finding() {
        let health = fixtures::event(EventKind::ScheduledChange, "h1", "i-00000001").build();
        let keys = crate::domain::sweep::sweep_keys_of(&health, &ours(), &Default::default());
        let finding = status_findings(
            &[InstanceStatus {
                instance_id: "i-00000001".into(),
                events: vec![ScheduledEvent {
                    code: "instance-retirement".into(),
                    ..ScheduledEvent::default()
                }],
                ..InstanceStatus::default()
            }],
            &ours(),
            Duration::minutes(5),
            now(),
            &Place::default(),
        );
        assert_eq!(keys, [finding[0].id.clone()]);
    }
}
