//! The way back: what forewarn records on a node it cordons, and when that cordon is undone.
//!
//! Every cordon forewarn puts on a node carries, beside its taint, the annotation
//! [`ANNOTATION_CORDON`]: a [`CordonRecord`] in JSON saying for which event, instance and rule
//! the node was cordoned, until when (`cordon-for`), and what would end the reason (the AWS
//! Health event, a stop). So the way back needs no other state: `forewarn reconcile` and the
//! pool sweeper read the nodes that carry forewarn's taint and undo the cordons whose reason is
//! gone ([`why_undo`]); an AWS Health update with `statusCode` `closed` undoes the cordons it
//! made as it arrives. A node without forewarn's taint (cordoned by someone else) is never
//! touched, and a node whose record changed since it was read (a new reason) is left cordoned.
//!
//! **Signed.** A node's kubelet may rewrite its own Node's annotations (not its taints or
//! `spec.unschedulable`), so the record is signed with the continuation key
//! ([`crate::domain::keys::KeyRing`], its id in `key-id`, HMAC-SHA256 in `mac`): a
//! record that does not verify ([`read`]) is never acted on — never undone, never merged into a
//! new cordon, never used to decide — and is reported. The record also says whether the node
//! was already unschedulable before forewarn's first cordon (`already-unschedulable`): the way
//! back then leaves it so (an operator's cordon survives).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::domain::cordon_record::{CordonRecord, Undo};
use crate::domain::event::EventKind;
use crate::domain::facts::{InstanceFacts, NodeFacts};
use crate::domain::status::InstanceStatus;

/// Why the cordon `record` of a node should be undone at `now`, if its reason is gone:
/// a cordon whose `until` has passed (a `cordon-for`, `adaptive`'s drain after its window), or an instance that was to stop or hibernate and runs
/// again (launched after the event). `instance` is what EC2 says of the record's instance.
pub fn why_undo(
    record: &CordonRecord,
    instance: Option<&InstanceFacts>,
    now: DateTime<Utc>,
) -> Option<String> {
    if let Some(until) = record.until
        && until <= now
    {
        return Some(format!(
            "the cordon for {} ({}) ran until {} and no new reason came",
            record.kind,
            record.event_id,
            until.to_rfc3339()
        ));
    }
    if record.stops
        && let Some(instance) = instance
        && instance.state.as_deref() == Some("running")
        && let Some(launched) = instance.launch_time
        && launched > record.at
    {
        return Some(format!(
            "instance {} runs again (started {}) after the stop it was cordoned for ({})",
            record.instance_id,
            launched.to_rfc3339(),
            record.event_id
        ));
    }
    None
}

/// Why an `impaired` cordon should be undone, if it should: its instance passes both EC2 status
/// checks again (`status`, as the sweep just read it; unknown: kept). A cordon of another kind
/// is never undone for this.
pub fn why_undo_recovered(
    record: &CordonRecord,
    status: Option<&InstanceStatus>,
) -> Option<String> {
    let status = status.filter(|_| record.kind == EventKind::Impaired)?;
    let ok = |s: &Option<String>| s.as_deref() == Some("ok");
    (ok(&status.system) && ok(&status.instance)).then(|| {
        format!(
            "instance {} passes its status checks again (cordoned for {})",
            record.instance_id, record.event_id
        )
    })
}

/// The cordons among `nodes` to undo at `now` (see [`why_undo`], [`why_undo_recovered`]): nodes
/// with a record and a taint of it ([`CordonRecord::tainted`], forewarn's own key `taint_key`),
/// not control-plane. `instances` is what EC2
/// says of their instances, `statuses` their status checks (by instance id; empty when not read).
pub fn undos(
    nodes: &[NodeFacts],
    taint_key: &str,
    instances: &BTreeMap<String, InstanceFacts>,
    statuses: &BTreeMap<String, InstanceStatus>,
    now: DateTime<Utc>,
) -> Vec<Undo> {
    nodes
        .iter()
        .filter(|n| !n.is_control_plane())
        .filter_map(|n| {
            let record = CordonRecord::of(n).filter(|r| r.tainted(n, taint_key))?;
            let why = why_undo(&record, instances.get(&record.instance_id), now)
                .or_else(|| why_undo_recovered(&record, statuses.get(&record.instance_id)))?;
            Some(Undo {
                node: n.name.clone(),
                instance_id: record.instance_id.clone(),
                record,
                why,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::cordon_record::{ANNOTATION_CORDON, drop_unverified, read};
    use crate::domain::keys::{ContinuationKey, KeyRing};
    use serde_json::Value;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn record(until: Option<&str>) -> CordonRecord {
        CordonRecord {
            kind: EventKind::RebalanceRecommendation,
            event_id: "e-1".into(),
            instance_id: "i-0a1b2c3d4e5f60001".into(),
            at: at("2026-11-24T10:00:00Z"),
            until: until.map(at),
            rule: Some("web".into()),
            health_event: None,
            stops: false,
            excluded_from_lb: true,
            already_unschedulable: false,
            taints: Vec::new(),
            key_id: None,
            mac: None,
        }
    }

    fn node(name: &str, taint: bool, record: Option<&CordonRecord>) -> NodeFacts {
        let mut n = NodeFacts {
            name: name.into(),
            ..NodeFacts::default()
        };
        if taint {
            n.taints.push(crate::domain::config::TAINT_KEY.into());
            n.unschedulable = true;
        }
        if let Some(r) = record {
            n.annotations
                .insert(ANNOTATION_CORDON.into(), r.to_annotation());
        }
        n
    }

    #[test]
    fn a_record_reads_back_from_its_annotation() {
        let r = record(Some("2026-11-24T10:30:00Z"));
        let n = node("n", true, Some(&r));
        assert_eq!(CordonRecord::of(&n), Some(r));
        let mut bad = node("n", true, None);
        bad.annotations
            .insert(ANNOTATION_CORDON.into(), "{not json".into());
        assert_eq!(CordonRecord::of(&bad), None);
    }

    #[test]
    fn a_new_reason_never_shortens_a_cordon() {
        let short = record(Some("2026-11-24T10:30:00Z"));
        let long = CordonRecord {
            event_id: "e-2".into(),
            until: Some(at("2026-11-24T16:00:00Z")),
            excluded_from_lb: false,
            ..short.clone()
        };
        let forever = CordonRecord {
            event_id: "e-3".into(),
            until: None,
            excluded_from_lb: false,
            ..short.clone()
        };
        assert_eq!(short.after(None), short);
        // The longer one wins whole; the label stays forewarn's.
        assert_eq!(long.after(Some(&short)).event_id, "e-2");
        assert!(long.after(Some(&short)).excluded_from_lb);
        assert_eq!(short.after(Some(&long)).event_id, "e-2");
        assert_eq!(short.after(Some(&forever)).event_id, "e-3");
        assert_eq!(short.after(Some(&forever)).until, None);
        assert_eq!(forever.after(Some(&long)).until, None);
    }

    #[test]
    fn a_cordon_for_is_undone_after_its_time_not_before() {
        let r = record(Some("2026-11-24T10:30:00Z"));
        assert_eq!(why_undo(&r, None, at("2026-11-24T10:29:59Z")), None);
        let why = why_undo(&r, None, at("2026-11-24T10:30:00Z")).unwrap();
        assert!(why.contains("ran until 2026-11-24T10:30:00+00:00"), "{why}");
        // A cordon without an end is never undone by time.
        assert_eq!(
            why_undo(&record(None), None, at("2030-01-01T00:00:00Z")),
            None
        );
    }

    #[test]
    fn an_instance_running_again_after_its_stop_gets_its_node_back() {
        let r = CordonRecord {
            kind: EventKind::SpotInterruption,
            until: None,
            stops: true,
            ..record(None)
        };
        let mut instance = InstanceFacts {
            instance_id: r.instance_id.clone(),
            state: Some("stopped".into()),
            launch_time: Some(at("2026-11-24T08:00:00Z")),
            ..InstanceFacts::default()
        };
        let now = at("2026-11-24T12:00:00Z");
        assert_eq!(why_undo(&r, Some(&instance), now), None, "still stopped");
        instance.state = Some("running".into());
        assert_eq!(
            why_undo(&r, Some(&instance), now),
            None,
            "running, but the launch is the one before the stop"
        );
        instance.launch_time = Some(at("2026-11-24T11:00:00Z"));
        assert!(why_undo(&r, Some(&instance), now).is_some());
        // A terminating instance's cordon is not undone by a start.
        let terminate = CordonRecord {
            stops: false,
            ..r.clone()
        };
        assert_eq!(why_undo(&terminate, Some(&instance), now), None);
    }

    #[test]
    fn only_nodes_with_forewarns_taint_and_a_record_are_undone() {
        let r = record(Some("2026-11-24T10:30:00Z"));
        let mut control_plane = node("cp", true, Some(&r));
        control_plane
            .labels
            .insert(crate::domain::facts::LABEL_CONTROL_PLANE.into(), "".into());
        let nodes = vec![
            node("ours", true, Some(&r)),
            // Cordoned by someone else: a record left over, but not forewarn's taint.
            node("theirs", false, Some(&r)),
            node("no-record", true, None),
            control_plane,
        ];
        let now = at("2026-11-24T11:00:00Z");
        let undos = undos(
            &nodes,
            crate::domain::config::TAINT_KEY,
            &BTreeMap::new(),
            &BTreeMap::new(),
            now,
        );
        let names: Vec<&str> = undos.iter().map(|u| u.node.as_str()).collect();
        assert_eq!(names, vec!["ours"]);
        assert_eq!(undos[0].record, r);
    }

    #[test]
    fn the_taints_forewarn_put_are_its_own_key_and_those_its_record_lists() {
        use crate::domain::config::{NTH_TAINT_REBALANCE, NTH_TAINT_SPOT, TAINT_KEY};
        // A record of a rebalance cordon under `nth`, then a spot one: both keys stay listed,
        // each once, whichever reason wins.
        let rebalance = CordonRecord {
            taints: vec![NTH_TAINT_REBALANCE.into()],
            ..record(Some("2026-11-24T10:30:00Z"))
        };
        let spot = CordonRecord {
            kind: EventKind::SpotInterruption,
            until: None,
            taints: vec![NTH_TAINT_SPOT.into(), NTH_TAINT_REBALANCE.into()],
            ..record(None)
        };
        assert_eq!(
            spot.after(Some(&rebalance)).taints,
            vec![NTH_TAINT_REBALANCE, NTH_TAINT_SPOT]
        );
        assert_eq!(rebalance.after(Some(&spot)).taints, spot.taints);
        assert_eq!(
            rebalance.taint_keys(TAINT_KEY).collect::<Vec<_>>(),
            vec![TAINT_KEY, NTH_TAINT_REBALANCE]
        );

        let r = record(Some("2026-11-24T10:30:00Z"));
        let listed = CordonRecord {
            taints: vec![NTH_TAINT_REBALANCE.into()],
            ..r.clone()
        };
        let with = |name: &str, taint: &str, record: &CordonRecord| {
            let mut n = node(name, false, Some(record));
            n.unschedulable = true;
            n.taints.push(taint.into());
            n
        };
        let nodes = vec![
            // forewarn put NTH's key: its record lists it.
            with("ours", NTH_TAINT_REBALANCE, &listed),
            // NTH's key, put by NTH: forewarn's record does not list it (and forewarn's own
            // taint is gone): not forewarn's cordon any more.
            with("nths", NTH_TAINT_REBALANCE, &r),
        ];
        assert!(listed.tainted(&nodes[0], TAINT_KEY));
        assert!(!r.tainted(&nodes[1], TAINT_KEY));
        let found = undos(
            &nodes,
            TAINT_KEY,
            &BTreeMap::new(),
            &BTreeMap::new(),
            at("2026-11-24T11:00:00Z"),
        );
        let names: Vec<&str> = found.iter().map(|u| u.node.as_str()).collect();
        assert_eq!(names, vec!["ours"]);
    }

    #[test]
    fn a_record_without_taints_reads_and_verifies_as_before() {
        // Records written before `taints` was kept: the same text, the same signature.
        let ring = keys(5);
        let signed = record(None).signed(&ring.current);
        let text = signed.to_annotation();
        assert!(!text.contains("taints"), "{text}");
        assert_eq!(read(&annotated(text), Some(&ring)), Ok(Some(signed)));
    }

    #[test]
    fn an_impaired_cordon_goes_once_both_checks_pass_again() {
        let mut r = record(None);
        r.kind = EventKind::Impaired;
        let status = |system: &str, instance: &str| InstanceStatus {
            instance_id: r.instance_id.clone(),
            system: Some(system.into()),
            instance: Some(instance.into()),
            ..InstanceStatus::default()
        };
        assert_eq!(why_undo_recovered(&r, None), None, "unknown: kept");
        assert_eq!(
            why_undo_recovered(&r, Some(&status("impaired", "ok"))),
            None
        );
        assert_eq!(
            why_undo_recovered(&r, Some(&status("ok", "initializing"))),
            None
        );
        let why = why_undo_recovered(&r, Some(&status("ok", "ok"))).unwrap();
        assert!(why.contains("passes its status checks again"), "{why}");
        let spot = record(None);
        assert_ne!(spot.kind, EventKind::Impaired);
        assert_eq!(why_undo_recovered(&spot, Some(&status("ok", "ok"))), None);
    }

    fn keys(byte: u8) -> KeyRing {
        KeyRing::of(ContinuationKey::new([byte; 32]))
    }

    fn annotated(value: String) -> BTreeMap<String, String> {
        BTreeMap::from([(ANNOTATION_CORDON.to_string(), value)])
    }

    #[test]
    fn only_a_record_forewarn_signed_is_read_as_one() {
        let ring = keys(7);
        let r = record(Some("2026-11-24T10:30:00Z"));
        let signed = r.signed(&ring.current);
        assert_eq!(signed.key_id, Some(1));
        assert_eq!(
            read(&annotated(signed.to_annotation()), Some(&ring)),
            Ok(Some(signed.clone()))
        );
        assert_eq!(read(&BTreeMap::new(), Some(&ring)), Ok(None));
        // What a kubelet could write: the end moved, the operator's cordon claimed as
        // forewarn's, another key, no signature, not a record; or no key to verify with.
        let mut later: Value = serde_json::from_str(&signed.to_annotation()).unwrap();
        later["until"] = "2026-11-24T10:00:01Z".into();
        let mut claimed: Value = serde_json::from_str(&signed.to_annotation()).unwrap();
        claimed["already-unschedulable"] = true.into();
        let forged = [
            later.to_string(),
            claimed.to_string(),
            r.signed(&keys(8).current).to_annotation(),
            r.to_annotation(),
            "{not json".to_string(),
        ];
        for value in forged {
            let got = read(&annotated(value.clone()), Some(&ring));
            assert!(
                matches!(&got, Err(why) if why.contains(ANNOTATION_CORDON)),
                "{value}: {got:?}"
            );
        }
        assert!(read(&annotated(signed.to_annotation()), None).is_err());
        // Signed before a rotation: still read after it, not after a second.
        let once = ring.rotated([9; 32]).unwrap();
        let twice = once.rotated([10; 32]).unwrap();
        assert!(matches!(
            read(&annotated(signed.to_annotation()), Some(&once)),
            Ok(Some(_))
        ));
        assert!(read(&annotated(signed.to_annotation()), Some(&twice)).is_err());
        // What the pipeline and the way back decide from: the records that verify, only.
        let mut nodes = vec![
            node("ours", true, Some(&signed)),
            node("forged", true, Some(&r)),
        ];
        let dropped = drop_unverified(&mut nodes, Some(&ring));
        assert_eq!(dropped.len(), 1);
        assert_eq!(dropped[0].0, "forged");
        assert_eq!(CordonRecord::of(&nodes[0]), Some(signed));
        assert_eq!(CordonRecord::of(&nodes[1]), None);
        let undone = undos(
            &nodes,
            crate::domain::config::TAINT_KEY,
            &BTreeMap::new(),
            &BTreeMap::new(),
            at("2026-11-24T11:00:00Z"),
        );
        let names: Vec<&str> = undone.iter().map(|u| u.node.as_str()).collect();
        assert_eq!(names, vec!["ours"]);
    }

    #[test]
    fn whether_the_node_was_unschedulable_before_is_the_first_records() {
        let operators = CordonRecord {
            already_unschedulable: true,
            until: Some(at("2026-11-24T10:30:00Z")),
            ..record(None)
        }
        .signed(&keys(1).current);
        let longer = CordonRecord {
            event_id: "e-2".into(),
            until: None,
            already_unschedulable: false,
            ..record(None)
        };
        let merged = longer.after(Some(&operators));
        assert_eq!(merged.event_id, "e-2");
        assert!(merged.already_unschedulable, "the earliest record knew");
        assert_eq!(
            merged.mac, None,
            "a merged record is signed anew by its writer"
        );
        let first = longer.after(None);
        assert!(!first.already_unschedulable);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..Default::default() })]

        /// Whatever a node's annotations hold — any text, or a record of any fields and times,
        /// signed or not — the way back (parsing, verification, `why_undo`) never panics, and
        /// only a record signed by an accepted key is ever a candidate.
        #[test]
        fn arbitrary_node_annotations_through_the_way_back_never_panic(
            text in ".{0,200}",
            kind in proptest::sample::select(vec![
                "spot-interruption", "rebalance-recommendation", "impaired", "x", "",
            ]),
            at_s in proptest::prelude::any::<i64>(),
            until_s in proptest::option::of(proptest::prelude::any::<i64>()),
            now_s in -100_000_000_000i64..100_000_000_000i64,
            launched_s in proptest::option::of(-100_000_000_000i64..100_000_000_000i64),
            flags in proptest::prelude::any::<(bool, bool, bool)>(),
            key_id in proptest::option::of(proptest::prelude::any::<u64>()),
            mac in proptest::option::of("[0-9a-f]{0,70}"),
            sign in proptest::prelude::any::<bool>(),
        ) {
            let time = |s: i64| serde_json::json!(
                DateTime::from_timestamp(s.clamp(-8_000_000_000_000, 8_000_000_000_000), 0)
                    .map(|t| t.to_rfc3339())
                    .unwrap_or_else(|| s.to_string())
            );
            let mut value = serde_json::json!({
                "kind": kind, "event-id": "e", "instance-id": "i-1", "at": time(at_s),
                "stops": flags.0, "excluded-from-lb": flags.1, "already-unschedulable": flags.2,
            });
            if let Some(u) = until_s { value["until"] = time(u); }
            if let Some(k) = key_id { value["key-id"] = k.into(); }
            if let Some(m) = &mac { value["mac"] = m.clone().into(); }
            let ring = keys(3);
            let now = DateTime::from_timestamp(now_s, 0).unwrap();
            let instance = InstanceFacts {
                instance_id: "i-1".into(),
                state: Some("running".into()),
                launch_time: launched_s.and_then(|s| DateTime::from_timestamp(s, 0)),
                ..InstanceFacts::default()
            };
            let mut candidates = vec![text.clone(), value.to_string()];
            if sign && let Ok(r) = serde_json::from_value::<CordonRecord>(value.clone()) {
                candidates.push(r.signed(&ring.current).to_annotation());
            }
            for annotation in candidates {
                let mut n = node("n", true, None);
                n.annotations.insert(ANNOTATION_CORDON.into(), annotation.clone());
                let verified = matches!(
                    read(&n.annotations, Some(&ring)),
                    Ok(Some(_))
                );
                if let Ok(Some(r)) = read(&n.annotations, Some(&ring)) {
                    let _ = why_undo(&r, Some(&instance), now);
                    let _ = why_undo_recovered(&r, None);
                }
                let mut nodes = vec![n];
                drop_unverified(&mut nodes, Some(&ring));
                let instances = BTreeMap::from([("i-1".to_string(), instance.clone())]);
                let found = undos(
                    &nodes,
                    crate::domain::config::TAINT_KEY,
                    &instances,
                    &BTreeMap::new(),
                    now,
                );
                proptest::prop_assert!(verified || found.is_empty(), "{annotation}");
            }
        }
    }
}
