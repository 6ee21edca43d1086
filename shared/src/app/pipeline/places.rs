//! The batch's instances looked up per place — the account and region an event comes from (an
//! organization's member accounts forward theirs) — one lookup each, each with its own result:
//! one account never fails another.
//!
//! - A place whose lookup failed fails its own events only, retryable or not as its error says
//!   (a throttle comes back soon; a role that denies `ec2:DescribeInstances` is permanent).
//! - A place of an account this deployment does not serve ([`NotServed`]: no member role, or
//!   no cluster of it named) acknowledges its events: ignored, with the account named, nothing
//!   done and no pool recorded.
//! - A place of a served account that cannot be reached ([`AccountUnreachable`]: its member role
//!   refused) fails its events as retryable, naming the account and the role: never
//!   acknowledged.
//!
//! The events of every other place are handled as if the batch held them alone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::domain::event::Event;
use crate::domain::facts::InstanceFacts;
use crate::domain::inbound::Record;
use crate::domain::report::{Outcome, Report};
use crate::ports::{AccountUnreachable, InstanceDirectory, NotServed, Place, PortError};

/// The report of `record`, an event of a place whose lookup met `error`: acknowledged when its
/// account is not served; else failed, retryable as the error says (an account that cannot be
/// reached named in the report, for its metric).
pub fn place_report(error: &PortError, record: &Record) -> Report {
    if let Some(not_served) = error.cause::<NotServed>() {
        let why = "the event is acknowledged: nothing is done, no pool recorded";
        return Report::new(record).ended(Outcome::Ignored, format!("{not_served}; {why}"));
    }
    Report {
        account_unreachable: (error.cause::<AccountUnreachable>()).map(|u| u.account.clone()),
        ..error.fail(Report::new(record))
    }
}

/// What the batch's lookups found: the facts of the instances of every place whose lookup
/// answered, and why each other place's did not — looked up once, handed to each cluster's share
/// of the batch as a value.
#[derive(Debug, Clone, Default)]
pub struct Described {
    pub found: BTreeMap<String, InstanceFacts>,
    /// What each failed place's lookup met, said again to each of its events.
    pub failed: BTreeMap<Place, Arc<PortError>>,
}

impl Described {
    /// A lookup that failed whole with `error`: every place of `events` failed as it says.
    pub fn failing(events: &[&Event], error: PortError) -> Described {
        let failure = Arc::new(error);
        let failed = events.iter().map(|e| (Place::of_event(e), failure.clone()));
        Described {
            found: BTreeMap::new(),
            failed: failed.collect(),
        }
    }

    /// Why `event`'s instances were not looked up, when its place's lookup failed (an event that
    /// names no instance was not looked up, and did not fail).
    pub fn failure_of(&self, event: &Event) -> Option<&PortError> {
        if event.instance_ids.is_empty() {
            return None;
        }
        self.failed.get(&Place::of_event(event)).map(|e| &**e)
    }

    /// The first passes of `lanes` whose place failed, taken out of them, each with its report
    /// ([`place_report`]); the lanes left.
    pub fn set_aside(
        &self,
        records: &[Record],
        lanes: Vec<Vec<usize>>,
    ) -> (Vec<Vec<usize>>, Vec<(usize, Report)>) {
        let failure = |i: usize| {
            let record = &records[i];
            let event = record.event.as_ref().ok()?;
            (record.continuation.is_none()).then(|| self.failure_of(event))?
        };
        let (aside, kept) = super::batch::split_lanes(lanes, |i| failure(i).is_some());
        let aside = aside.into_iter().flatten();
        let reports = aside.filter_map(|i| Some((i, place_report(failure(i)?, &records[i]))));
        (kept, reports.collect())
    }
}

/// The events of `records` whose instances are looked up: decoded, supported, and not a drain's
/// later pass (which carries its plan).
pub fn looked_up_events<'a>(records: impl IntoIterator<Item = &'a Record>) -> Vec<&'a Event> {
    (records.into_iter())
        .filter(|r| r.continuation.is_none())
        .filter_map(|r| r.event.as_ref().ok())
        .filter(|e| e.kind != crate::domain::event::EventKind::Unsupported)
        .collect()
}

/// The facts of the instances of `events`: one lookup per account and region the events come
/// from, at once, each with its own result ([`Described`]); none when they name no instance.
/// The instances `known` already (by place and id) are not looked up again.
pub async fn describe_events(
    instances: &dyn InstanceDirectory,
    events: &[&Event],
    known: &BTreeMap<(Place, String), InstanceFacts>,
) -> Described {
    let mut by_place: BTreeMap<Place, BTreeSet<String>> = BTreeMap::new();
    let wanted = (events.iter())
        .flat_map(|e| (e.instance_ids.iter()).map(|id| (Place::of_event(e), id.clone())));
    for (place, id) in wanted.filter(|key| !known.contains_key(key)) {
        by_place.entry(place).or_default().insert(id);
    }
    let lookups = by_place.into_iter().map(|(place, ids)| async move {
        let ids: Vec<String> = ids.into_iter().collect();
        let answer = instances.describe(&place, &ids).await;
        (place, answer)
    });
    let found = known.iter().map(|((_, id), f)| (id.clone(), f.clone()));
    let mut described = Described {
        found: found.collect(),
        ..Described::default()
    };
    for (place, answer) in futures::future::join_all(lookups).await {
        match answer {
            Ok(facts) => described.found.extend(facts),
            Err(e) => {
                match (e.cause::<NotServed>(), e.cause::<AccountUnreachable>()) {
                    (Some(not_served), _) => tracing::warn!(
                        account = %not_served.account,
                        why = %not_served.why,
                        "an account not served: its events are acknowledged, nothing done"
                    ),
                    (None, Some(unreachable)) => tracing::error!(
                        account = %unreachable.account,
                        role = %unreachable.role,
                        why = %unreachable.why,
                        "a served account cannot be reached through its member role: its events fail and come back"
                    ),
                    (None, None) => tracing::warn!(
                        account = place.account.as_deref().unwrap_or_default(),
                        region = place.region.as_deref().unwrap_or_default(),
                        error = %e,
                        "the instances of an account and region could not be described: \
                         its events fail, the others' are handled"
                    ),
                }
                described.failed.insert(place, Arc::new(e));
            }
        }
    }
    described
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::fixtures::spot_json;
    use crate::domain::inbound::decode_value;
    use crate::domain::report::Outcome;
    use crate::ports::{AccountUnreachable, FailureKind, NotServed};

    fn record(account: &str) -> Record {
        let mut event = spot_json("e1", "i-0a1b2c3d4e5f60001", "2026-11-20T10:00:00Z");
        event["account"] = serde_json::json!(account);
        decode_value("test", event, chrono::Utc::now())
            .unwrap()
            .remove(0)
    }

    /// A place's failure answers its events: an account not served acknowledged, a denial
    /// failed for good, a throttle failed to come back.
    #[test]
    fn a_places_failure_answers_its_events_as_its_error_says() {
        let not_served = NotServed {
            account: "222222222222".into(),
            why: "its member role cannot be assumed".into(),
        };
        let error = PortError::new(
            "ec2:DescribeInstances",
            FailureKind::Forbidden,
            not_served.clone(),
        );
        let report = place_report(&error, &record("222222222222"));
        assert_eq!(report.outcome, Outcome::Ignored);
        let why = report.reason.unwrap();
        assert!(
            why.starts_with("account 222222222222 is not served by this deployment: its member")
                && why.ends_with("nothing is done, no pool recorded"),
            "{why}"
        );

        for (kind, permanent) in [
            (FailureKind::Forbidden, true),
            (FailureKind::Throttled, false),
        ] {
            let mut error = PortError::new("ec2:DescribeInstances", kind, "refused");
            error.doing = Some("page 2".into());
            let report = place_report(&error, &record("111111111111"));
            assert_eq!(report.outcome, Outcome::Failed);
            assert_eq!(report.permanent, permanent);
            assert_eq!(
                report.reason.as_deref(),
                Some("ec2:DescribeInstances: page 2: refused")
            );
        }
    }

    /// A served account that cannot be reached fails its events as retryable, naming the
    /// account and the role, and the report carries the account for its metric.
    #[test]
    fn an_unreachable_accounts_events_fail_to_come_back() {
        let unreachable = AccountUnreachable {
            account: "222222222222".into(),
            role: "arn:aws:iam::222222222222:role/forewarn-member".into(),
            why: "sts:AssumeRole: AccessDenied".into(),
        };
        let error = PortError::new(
            "ec2:DescribeInstances",
            FailureKind::Unavailable,
            unreachable.clone(),
        );
        let report = place_report(&error, &record("222222222222"));
        assert_eq!(report.outcome, Outcome::Failed);
        assert!(!report.permanent, "retried within the window");
        assert_eq!(report.account_unreachable.as_deref(), Some("222222222222"));
        let why = report.reason.unwrap();
        assert!(
            why.contains("account 222222222222 is served but cannot be reached")
                && why.contains("role/forewarn-member")
                && why.contains("AccessDenied"),
            "{why}"
        );
    }

    /// An event of a place whose lookup failed is that place's failure; one naming no
    /// instance was not looked up, and is of no failed place.
    #[test]
    fn an_event_is_of_its_places_failure() {
        let failed = Place {
            account: Some("111111111111".into()),
            region: Some("us-east-1".into()),
        };
        let described = Described {
            found: BTreeMap::new(),
            failed: BTreeMap::from([(
                failed.clone(),
                Arc::new(PortError::new("ec2", FailureKind::Timeout, "late")),
            )]),
        };
        let own = record("222222222222");
        assert!(described.failure_of(own.event.as_ref().unwrap()).is_none());
        let theirs = record("111111111111");
        let event = theirs.event.as_ref().unwrap();
        assert!(described.failure_of(event).unwrap().kind.retryable());
        let quiet = Event {
            instance_ids: Vec::new(),
            ..event.clone()
        };
        assert!(described.failure_of(&quiet).is_none());
    }
}
