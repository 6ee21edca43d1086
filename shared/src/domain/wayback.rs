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

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::event::EventKind;
use crate::domain::facts::{InstanceFacts, NodeFacts};
use crate::domain::status::InstanceStatus;

/// The annotation holding a node's [`CordonRecord`] (JSON).
pub const ANNOTATION_CORDON: &str = "forewarn.io/cordon";

/// Why forewarn cordoned a node, kept on the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct CordonRecord {
    /// The kind of the event the cordon is for.
    pub kind: EventKind,
    pub event_id: String,
    pub instance_id: String,
    /// The event's time.
    pub at: DateTime<Utc>,
    /// A `cordon-for`: the cordon is undone after this time unless another reason arrives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
    /// The policy rule that chose the action, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The AWS Health event (`eventArn`) of a scheduled change: its `closed` update undoes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_event: Option<String>,
    /// The instance was to stop or hibernate (not terminate): running again after it, it
    /// gets its node back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stops: bool,
    /// forewarn added the label excluding the node from external load balancers (it was not
    /// there before), so undoing the cordon removes it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub excluded_from_lb: bool,
}

impl CordonRecord {
    /// The record of `node`, if it has one that reads.
    pub fn of(node: &NodeFacts) -> Option<CordonRecord> {
        CordonRecord::from_annotations(&node.annotations)
    }

    /// The record in `annotations`, if there is one that reads.
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Option<CordonRecord> {
        serde_json::from_str(annotations.get(ANNOTATION_CORDON)?).ok()
    }

    /// The annotation's value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a cordon record is plain strings and times")
    }

    /// What a node cordoned for `earlier` keeps when `self`, a new reason, arrives: the reason
    /// that lasts longer (no `until` outlasts any), whole, so that a `cordon-for` never cuts
    /// short a cordon that had no end; the load-balancer label stays forewarn's to remove if
    /// either cordon added it.
    pub fn after(&self, earlier: Option<&CordonRecord>) -> CordonRecord {
        let Some(earlier) = earlier else {
            return self.clone();
        };
        let longer = match (self.until, earlier.until) {
            (None, _) => self,
            (Some(_), None) => earlier,
            (Some(new), Some(old)) if new >= old => self,
            _ => earlier,
        };
        CordonRecord {
            excluded_from_lb: self.excluded_from_lb || earlier.excluded_from_lb,
            ..longer.clone()
        }
    }
}

/// A cordon to undo: the node, the record it must still carry, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Undo {
    pub node: String,
    pub instance_id: String,
    /// The record read; the node is left alone if it carries another one when undone.
    pub record: CordonRecord,
    /// Why the reason is gone, for people and the node's Event.
    pub why: String,
}

/// What became of an [`Undo`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum UndoOutcome {
    /// The taint, the cordon, forewarn's load-balancer label and the record were removed.
    Undone,
    /// Dry run: would have been undone.
    WouldUndo,
    /// The node is gone.
    NodeGone,
    /// Left as it is: why (no forewarn taint any more, a new record, another instance's node,
    /// a control-plane node).
    Refused { why: String },
}

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
/// with forewarn's taint `taint_key` and a record, not control-plane. `instances` is what EC2
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
        .filter(|n| n.has_taint(taint_key) && !n.is_control_plane())
        .filter_map(|n| {
            let record = CordonRecord::of(n)?;
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
    use crate::domain::facts::Taint;

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
        }
    }

    fn node(name: &str, taint: bool, record: Option<&CordonRecord>) -> NodeFacts {
        let mut n = NodeFacts {
            name: name.into(),
            ..NodeFacts::default()
        };
        if taint {
            n.taints.push(Taint {
                key: crate::domain::config::TAINT_KEY.into(),
                value: Some("rebalance-recommendation".into()),
                effect: "NoSchedule".into(),
            });
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
}
