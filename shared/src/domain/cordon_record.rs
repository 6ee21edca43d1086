//! What forewarn records on a node it cordons ([`CordonRecord`], in the annotation
//! [`ANNOTATION_CORDON`], signed with the continuation key and verified before anything reads
//! it), and a cordon to undo ([`Undo`]) with what became of it. When a cordon's reason is gone,
//! and so which to undo, is the way back's ([`crate::domain::wayback`]).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::event::EventKind;
use crate::domain::facts::NodeFacts;
use crate::domain::keys::{ContinuationKey, KeyId, KeyRing, Unverified};

/// The annotation holding a node's [`CordonRecord`] (JSON).
pub const ANNOTATION_CORDON: &str = "forewarn.io/cordon";

/// Why forewarn cordoned a node, kept on the node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    /// The node was already unschedulable (`spec.unschedulable`) when forewarn first cordoned it
    /// (an operator's cordon, or one of unknown origin): undoing forewarn's cordon leaves it so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub already_unschedulable: bool,
    /// The taint keys besides forewarn's own (the settings' taint key) that forewarn put on the
    /// node with its cordons: NTH's, under the taint key `nth`. Undoing the cordon removes
    /// them with forewarn's own. A key of NTH's the node already carried when forewarn cordoned
    /// it is not forewarn's: never listed, never removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<String>,
    /// The id of the key the record is signed with (none: not signed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<KeyId>,
    /// HMAC-SHA256 of the record without it, in hex (see [`CordonRecord::signing_input`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

/// Reads the record in `annotations` (`None`: there is none) and verifies its signature with
/// `keys` (`None`: the keys could not be read, and no record verifies). `Err`: why it is not a
/// record forewarn signed, never acted on (for the report).
pub fn read(
    annotations: &BTreeMap<String, String>,
    keys: Option<&KeyRing>,
) -> Result<Option<CordonRecord>, String> {
    let Some(record) = read_unverified(annotations) else {
        return Ok(None);
    };
    let record = record
        .map_err(|e| format!("its {ANNOTATION_CORDON} annotation is not a cordon record: {e}"))?;
    let keys = keys.ok_or_else(|| {
        format!(
            "its {ANNOTATION_CORDON} record cannot be verified: the continuation key could not be \
             read"
        )
    })?;
    record.verify(keys).map_err(|why| {
        format!("its {ANNOTATION_CORDON} record is not one forewarn signed ({why}): not acted on")
    })?;
    Ok(Some(record))
}

/// Removes from `nodes` every [`ANNOTATION_CORDON`] that does not verify with `keys`, so that
/// nothing decides from it; the nodes whose record was removed, and why.
pub fn drop_unverified(nodes: &mut [NodeFacts], keys: Option<&KeyRing>) -> Vec<(String, String)> {
    let mut dropped = Vec::new();
    for node in nodes {
        if let Err(why) = read(&node.annotations, keys) {
            node.annotations.remove(ANNOTATION_CORDON);
            dropped.push((node.name.clone(), why));
        }
    }
    dropped
}

impl CordonRecord {
    /// The plain record of a cordon for event `event_id` of `kind` (at `at`) on `instance_id`'s
    /// node: no end, rule or Health event, and what the cordon itself learns from the node
    /// (the label, an earlier cordon, other keys' taints) and the signature not yet known.
    pub fn new(kind: EventKind, event_id: &str, instance_id: &str, at: DateTime<Utc>) -> Self {
        CordonRecord {
            kind,
            event_id: event_id.to_string(),
            instance_id: instance_id.to_string(),
            at,
            ..CordonRecord::default()
        }
    }

    /// The record of `node` as the pipeline looked it up: its records were verified there and
    /// those that do not verify removed ([`drop_unverified`]), so only a verified record is
    /// found. Anything reading a node elsewhere uses [`read`].
    pub fn of(node: &NodeFacts) -> Option<CordonRecord> {
        read_unverified(&node.annotations)?.ok()
    }

    /// The annotation's value (signed when the record is: see [`CordonRecord::signed`]).
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a cordon record is plain strings and times")
    }

    /// What the signature covers: the record without `mac`, as compact JSON (its fields in
    /// their declared order; a decoded record gives the same text as the one that was signed).
    pub fn signing_input(&self) -> String {
        CordonRecord {
            mac: None,
            ..self.clone()
        }
        .to_annotation()
    }

    /// The record signed with `key` (its id in `key-id`).
    pub fn signed(&self, key: &ContinuationKey) -> CordonRecord {
        let mut signed = CordonRecord {
            key_id: Some(key.id()),
            ..self.clone()
        };
        signed.mac = Some(key.sign(&signed.signing_input()));
        signed
    }

    /// The record without its signature: what two records are compared on.
    pub fn unsigned(&self) -> CordonRecord {
        CordonRecord {
            key_id: None,
            mac: None,
            ..self.clone()
        }
    }

    /// Whether the record is signed by a key of `keys`, or why not.
    pub fn verify(&self, keys: &KeyRing) -> Result<(), Unverified> {
        keys.verify(self.key_id.zip(self.mac.as_deref()), &self.signing_input())
    }

    /// What a node cordoned for `earlier` keeps when `self`, a new reason, arrives: the reason
    /// that lasts longer (no `until` outlasts any), whole, so that a `cordon-for` never cuts
    /// short a cordon that had no end; the load-balancer label stays forewarn's to remove if
    /// either cordon added it, and so do the taints either put.
    /// The merged record is unsigned (the caller signs what it writes).
    pub fn after(&self, earlier: Option<&CordonRecord>) -> CordonRecord {
        let Some(earlier) = earlier else {
            return self.unsigned();
        };
        let longer = match (self.until, earlier.until) {
            (None, _) => self,
            (Some(_), None) => earlier,
            (Some(new), Some(old)) if new >= old => self,
            _ => earlier,
        };
        // Every taint either cordon put stays forewarn's to remove.
        let added = self.taints.iter().filter(|k| !earlier.taints.contains(k));
        CordonRecord {
            excluded_from_lb: self.excluded_from_lb || earlier.excluded_from_lb,
            taints: earlier.taints.iter().chain(added).cloned().collect(),
            // Whether the node was unschedulable before forewarn: the first cordon knew.
            already_unschedulable: earlier.already_unschedulable,
            ..longer.unsigned()
        }
    }

    /// The keys of the taints of forewarn's cordon: its own, `own_key` (the settings' taint key),
    /// and those the record lists.
    pub fn taint_keys<'a>(&'a self, own_key: &'a str) -> impl Iterator<Item = &'a str> {
        std::iter::once(own_key).chain(self.taints.iter().map(String::as_str))
    }

    /// Whether `node` still carries a taint of this cordon (see [`CordonRecord::taint_keys`]).
    pub fn tainted(&self, node: &NodeFacts, own_key: &str) -> bool {
        self.taint_keys(own_key).any(|k| node.has_taint(k))
    }
}

/// The record in `annotations` as written, unverified: only to compare with one that was
/// verified, never to decide from. `Err`: the annotation is not a record's JSON.
pub fn read_unverified(
    annotations: &BTreeMap<String, String>,
) -> Option<Result<CordonRecord, serde_json::Error>> {
    Some(serde_json::from_str(annotations.get(ANNOTATION_CORDON)?))
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
