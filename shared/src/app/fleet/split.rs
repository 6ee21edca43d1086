//! A batch split by cluster: which records (or which part of a record) go to which served
//! cluster, and the reports of the parts joined back into one report per record, in order.
//!
//! - A first-pass event goes where its instances' home is ([`home`]); an event whose instances
//!   live in several clusters (an AWS Health event may name several) is split into one part
//!   per cluster, each recorded under its own idempotence key (`<event id>#<cluster>`), so
//!   that a part done in one cluster never stands for a part left undone in another.
//! - A drain's later pass goes to the cluster its (signed) plan names.
//! - Undecodable and unsupported records, and instances of no served cluster, go to
//!   [`Destination::Elsewhere`]: nothing is acted on, pools are recorded.
//! - When the batch's instances could not be looked up, its first-pass events naming some
//!   cannot be routed: [`Destination::Unrouted`] fails them (they come back). So are the events
//!   of one account and region whose lookup failed, alone: the pipeline answers each as its place's
//!   lookup said (failed, or acknowledged for an account not served; see
//!   [`crate::app::pipeline::Described`]).

use std::collections::BTreeMap;

use crate::app::pipeline::Described;
pub use crate::domain::clusters::Destination;
use crate::domain::clusters::{ClusterId, Place, home};
use crate::domain::event::{Event, EventKind};
use crate::domain::inbound::Record;
use crate::domain::report::{Outcome, Report};

/// The records of one destination, each with the position in the batch of the record it is
/// (a part of).
#[derive(Debug, Default, Clone)]
pub struct Share {
    pub records: Vec<Record>,
    pub positions: Vec<usize>,
}

/// The batch's `records` by destination. `instances`: what the lookup found, place by place
/// (a lookup that failed whole: every place failed); `served`: the served clusters, whole (empty: one cluster,
/// named by nobody); `own`: the deployment's own account and region.
pub fn split(
    records: &[Record],
    instances: &Described,
    (served, own): (&[ClusterId], &Place),
) -> BTreeMap<Destination, Share> {
    let mut shares: BTreeMap<Destination, Share> = BTreeMap::new();
    for (position, record) in records.iter().enumerate() {
        for (to, record) in destinations(record, instances, (served, own)) {
            let share = shares.entry(to).or_default();
            share.records.push(record);
            share.positions.push(position);
        }
    }
    shares
}

/// Where `record` goes (see [`split`]): whole, or split into parts, one per home of its
/// instances.
fn destinations(
    record: &Record,
    instances: &Described,
    (served, own): (&[ClusterId], &Place),
) -> Vec<(Destination, Record)> {
    let whole = |to| vec![(to, record.clone())];
    let event = match &record.event {
        Ok(event) if event.kind != EventKind::Unsupported => event,
        _ => return whole(Destination::Elsewhere),
    };
    if let Some(c) = &record.continuation {
        let named = c.plan.cluster.as_deref().map(ClusterId::parse);
        let id = named.and_then(Result::ok);
        let found = id.and_then(|id| served.iter().find(|s| **s == id.or(own)));
        return whole(match found {
            _ if served.is_empty() => Destination::Cluster(None),
            Some(id) => Destination::Cluster(Some(id.clone())),
            None => Destination::NotServed(c.plan.cluster.clone()),
        });
    }
    if instances.failure_of(event).is_some() {
        return whole(Destination::Unrouted);
    }
    // The event's instances by home.
    let place = Place::of_event(event);
    let mut homes: BTreeMap<Destination, Vec<String>> = BTreeMap::new();
    for id in &event.instance_ids {
        let h = home(instances.found.get(id), &place, served, own);
        homes.entry(h).or_default().push(id.clone());
    }
    if homes.len() <= 1 {
        return whole(homes.into_keys().next().unwrap_or(Destination::Elsewhere));
    }
    let parts = homes
        .iter()
        .map(|(home, ids)| (home.clone(), part(record, event, home, ids)));
    parts.collect()
}

/// The part of `record` about `ids`, the instances of `home`: its own idempotence key.
fn part(record: &Record, event: &Event, home: &Destination, ids: &[String]) -> Record {
    let suffix = match home {
        Destination::Cluster(Some(id)) => id.to_string(),
        Destination::Cluster(None) => "cluster".to_string(),
        _ => "elsewhere".to_string(),
    };
    let mut part = record.clone();
    part.event = Ok(Event {
        id: format!("{}#{suffix}", event.id),
        instance_ids: ids.to_vec(),
        ..event.clone()
    });
    part
}

/// One report per record of the batch (`count`), in order, from each share's reports (one per
/// share record, in the share's order); the parts of a split record joined ([`join_parts`]).
pub fn join(records: &[Record], shares: Vec<(Share, Vec<Report>)>) -> Vec<Report> {
    let mut parts: Vec<Vec<Report>> = vec![Vec::new(); records.len()];
    for (share, reports) in shares {
        for (position, report) in share.positions.into_iter().zip(reports) {
            // A position past the batch (a share built wrong) is dropped, never a panic: its
            // record then reports "not processed", failed, and comes back.
            if let Some(slot) = parts.get_mut(position) {
                slot.push(report);
            }
        }
    }
    records.iter().zip(parts).map(join_parts).collect()
}

/// The report of `record` from its parts' reports: one part, as it is; several, their pools
/// and actions together, the worst outcome (failed, then acted, planned, duplicate, ignored),
/// each part's reason under its cluster.
fn join_parts((record, mut parts): (&Record, Vec<Report>)) -> Report {
    if parts.len() <= 1 {
        return parts.pop().unwrap_or_else(|| {
            Report::new(record).failed("internal: record not processed".into())
        });
    }
    let mut joined = Report::new(record);
    joined.outcome = parts.iter().map(|p| p.outcome).max().unwrap_or_default();
    joined.summary = parts[0].summary.clone();
    let mut failed = parts.iter().filter(|p| p.outcome == Outcome::Failed);
    joined.permanent = failed.all(|p| p.permanent);
    let mut reasons = Vec::new();
    for part in parts {
        if let Some(reason) = &part.reason {
            reasons.push(match &part.cluster {
                Some(cluster) => format!("cluster {cluster}: {reason}"),
                None => reason.clone(),
            });
        }
        joined.pools.extend(part.pools);
        joined.actions.extend(part.actions);
    }
    joined.reason = (!reasons.is_empty()).then(|| reasons.join("; "));
    joined
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::facts::InstanceFacts;
    use crate::domain::fixtures;
    use crate::domain::inbound::decode_value;
    use crate::ports::{FailureKind, PortError};

    const I1: &str = "i-0a1b2c3d4e5f60001";
    const I2: &str = "i-0a1b2c3d4e5f60002";
    const I3: &str = "i-0a1b2c3d4e5f60003";

    fn instance(id: &str, cluster: &str) -> (String, InstanceFacts) {
        (
            id.to_string(),
            fixtures::instance(id).cluster(cluster).build(),
        )
    }

    fn spot(id: &str, instance: &str) -> Record {
        let event = fixtures::spot_json(id, instance, "2026-11-26T10:00:00Z");
        decode_value("test", event, chrono::Utc::now())
            .unwrap()
            .remove(0)
    }

    fn health(id: &str, instances: &[&str]) -> Record {
        let mut event = fixtures::event_json(
            "AWS Health Event",
            id,
            instances[0],
            "2026-11-26T10:00:00Z",
            fixtures::health_detail(instances, "Thu, 26 Nov 2026 12:00:00 GMT"),
        );
        event["source"] = serde_json::json!("aws.health");
        decode_value("test", event, chrono::Utc::now())
            .unwrap()
            .remove(0)
    }

    /// The deployment's own account and region: the fixtures' events'.
    fn own() -> Place {
        Place::of("123456789012", "us-east-1")
    }

    /// The cluster written `s`, whole.
    fn c(s: &str) -> ClusterId {
        ClusterId::parse(s).unwrap().or(&own())
    }

    fn served() -> Vec<ClusterId> {
        vec![c("blue"), c("green")]
    }

    /// A drain's continuation of a spot warning for `instance`, its plan naming `cluster`
    /// (signed with a key the test makes up: routing reads no signature).
    fn continuation(id: &str, instance: &str, cluster: Option<&str>) -> Record {
        use crate::domain::inbound::continuation::Continuation;
        use crate::domain::keys::ContinuationKey;
        let now = chrono::Utc::now();
        let body = fixtures::spot_json(id, instance, "2026-11-26T10:00:00Z").to_string();
        let event = decode_value("test", serde_json::from_str(&body).unwrap(), now)
            .unwrap()
            .remove(0)
            .event
            .unwrap();
        let none = BTreeMap::new();
        let mut plan = crate::domain::plan::decide(
            &event,
            crate::domain::plan::Facts::new(&none, &[]),
            &crate::domain::config::Config::default(),
        );
        plan.cluster = cluster.map(str::to_string);
        let c = Continuation::first(now, now, plan, &body);
        let message = serde_json::json!({"messageId": id,
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q",
            "body": c.body(&ContinuationKey::new([1; 32]))});
        let record = decode_value("test", serde_json::json!({"Records": [message]}), now)
            .unwrap()
            .remove(0);
        assert!(record.continuation.is_some(), "a continuation");
        record
    }

    /// A continuation goes only to a served cluster: one naming another, or none in a
    /// deployment of several, is refused (see the handler's test) — before its signature is
    /// read and without a client of that cluster being made.
    #[test]
    fn a_continuation_goes_only_to_a_served_cluster() {
        let records = vec![
            continuation("a", I1, Some("blue")),
            continuation("b", I2, Some("attacker")),
            continuation("c", I3, None),
        ];
        let shares = split(&records, &Described::default(), (&served(), &own()));
        assert_eq!(
            shares[&Destination::Cluster(Some(c("blue")))].positions,
            [0]
        );
        assert_eq!(
            shares[&Destination::NotServed(Some("attacker".into()))].positions,
            [1]
        );
        assert_eq!(shares[&Destination::NotServed(None)].positions, [2]);
        // A cluster of the same name in another account is another cluster; the own one
        // written whole is the own one.
        let records = vec![
            continuation("d", I1, Some("111111111111/us-east-1/blue")),
            continuation("e", I2, Some("123456789012/us-east-1/green")),
            continuation("f", I3, Some("not/a/cluster/at/all")),
        ];
        let shares = split(&records, &Described::default(), (&served(), &own()));
        assert_eq!(
            shares[&Destination::NotServed(Some("111111111111/us-east-1/blue".into()))].positions,
            [0]
        );
        assert_eq!(
            shares[&Destination::Cluster(Some(c("green")))].positions,
            [1]
        );
        assert_eq!(
            shares[&Destination::NotServed(Some("not/a/cluster/at/all".into()))].positions,
            [2]
        );
        // One cluster named by nobody: every continuation is its.
        let shares = split(&records, &Described::default(), (&[], &own()));
        assert_eq!(shares[&Destination::Cluster(None)].positions, [0, 1, 2]);
    }

    fn found(instances: impl IntoIterator<Item = (String, InstanceFacts)>) -> Described {
        Described {
            found: instances.into_iter().collect(),
            ..Described::default()
        }
    }

    #[test]
    fn records_go_to_their_instances_cluster() {
        let instances = found([
            instance(I1, "blue"),
            instance(I2, "green"),
            instance(I3, "red"),
        ]);
        let records = vec![spot("a", I1), spot("b", I2), spot("c", I3)];
        let shares = split(&records, &instances, (&served(), &own()));
        let blue = &shares[&Destination::Cluster(Some(c("blue")))];
        assert_eq!(blue.positions, [0]);
        assert_eq!(
            shares[&Destination::Cluster(Some(c("green")))].positions,
            [1]
        );
        assert_eq!(shares[&Destination::Elsewhere].positions, [2]);
        // Nothing to route without the lookup.
        let events: Vec<&Event> = records
            .iter()
            .filter_map(|r| r.event.as_ref().ok())
            .collect();
        let failure = PortError::new("ec2", FailureKind::Timeout, "out of time");
        let failing = Described::failing(&events, failure);
        let shares = split(&records, &failing, (&served(), &own()));
        assert_eq!(shares[&Destination::Unrouted].positions, [0, 1, 2]);
        // One cluster named by nobody: everything is its.
        let shares = split(&records, &instances, (&[], &own()));
        assert_eq!(shares[&Destination::Cluster(None)].positions, [0, 1, 2]);
    }

    #[test]
    fn an_event_of_two_clusters_is_split_and_joined_back() {
        let instances = found([instance(I1, "blue"), instance(I2, "green")]);
        let records = vec![health("h", &[I1, I2])];
        let shares = split(&records, &instances, (&served(), &own()));
        let blue = &shares[&Destination::Cluster(Some(c("blue")))];
        let event = blue.records[0].event.as_ref().unwrap();
        assert_eq!(event.id, "h#123456789012/us-east-1/blue");
        assert_eq!(event.instance_ids, [I1]);
        let green = &shares[&Destination::Cluster(Some(c("green")))];
        assert_eq!(
            green.records[0].event.as_ref().unwrap().id,
            "h#123456789012/us-east-1/green"
        );

        let mut acted = Report::new(&blue.records[0]);
        acted.outcome = Outcome::Acted;
        acted.cluster = Some("blue".into());
        let mut failed = Report::new(&green.records[0]).failed("API answered 503".into());
        failed.cluster = Some("green".into());
        let reports = join(
            &records,
            shares
                .into_values()
                .zip([vec![acted], vec![failed]])
                .collect(),
        );
        assert_eq!(reports.len(), 1);
        assert_eq!(reports[0].event_id.as_deref(), Some("h"));
        assert_eq!(
            reports[0].outcome,
            Outcome::Failed,
            "the part left undone comes back"
        );
        assert_eq!(
            reports[0].reason.as_deref(),
            Some("cluster green: API answered 503")
        );
        assert!(!reports[0].permanent);
    }

    /// The events of an account and region whose lookup failed cannot be routed, and only
    /// they: the same batch's other records go to their clusters.
    #[test]
    fn only_the_events_of_a_failed_place_are_unrouted() {
        let mut instances = found([instance(I1, "blue")]);
        let failure = PortError::new("ec2:DescribeInstances", FailureKind::Forbidden, "no");
        let member = Place {
            account: Some("111111111111".into()),
            region: Some("us-east-1".into()),
        };
        instances
            .failed
            .insert(member, std::sync::Arc::new(failure));
        let mut theirs = spot("b", I2);
        if let Ok(event) = &mut theirs.event {
            event.account = Some("111111111111".into());
        }
        let records = vec![spot("a", I1), theirs];
        let shares = split(&records, &instances, (&served(), &own()));
        assert_eq!(
            shares[&Destination::Cluster(Some(c("blue")))].positions,
            [0]
        );
        assert_eq!(shares[&Destination::Unrouted].positions, [1]);
    }

    /// An instance goes to the served cluster of its own account and region only: a member
    /// account's instance tagged `blue` is the member's `blue`, never the own one's; a member
    /// instance whose cluster is not served goes nowhere.
    #[test]
    fn an_instance_goes_to_the_cluster_of_its_own_account() {
        let instances = found([
            instance(I1, "blue"),
            instance(I2, "blue"),
            instance(I3, "green"),
        ]);
        let of = |id: &str, instance: &str, account: &str| {
            let mut r = spot(id, instance);
            if let Ok(event) = &mut r.event {
                event.account = Some(account.into());
            }
            r
        };
        let records = vec![
            of("a", I1, "123456789012"),
            of("b", I2, "111111111111"),
            of("c", I3, "111111111111"),
        ];
        let served = vec![c("blue"), c("green"), c("111111111111/blue")];
        let shares = split(&records, &instances, (&served, &own()));
        assert_eq!(
            shares[&Destination::Cluster(Some(c("blue")))].positions,
            [0]
        );
        assert_eq!(
            shares[&Destination::Cluster(Some(c("111111111111/blue")))].positions,
            [1]
        );
        assert_eq!(shares[&Destination::Elsewhere].positions, [2]);
        // One cluster named by nobody is of the own account only.
        let shares = split(&records, &instances, (&[], &own()));
        assert_eq!(shares[&Destination::Cluster(None)].positions, [0]);
        assert_eq!(shares[&Destination::Elsewhere].positions, [1, 2]);
    }
}
