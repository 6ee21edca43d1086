//! Cordon: one JSON merge patch of the node (`application/merge-patch+json`) that sets
//! `spec.unschedulable`, the forewarn taint and, when configured, the label excluding the node
//! from external load balancers, and the annotation recording why (the way back,
//! [`crate::domain::wayback`]); [`uncordon`] undoes all of it.
//!
//! Why a merge patch: the fields changed are a boolean, a map entry and `spec.taints`. The map
//! merges the same way under JSON merge patch and strategic merge patch; `spec.taints` has no
//! patch merge key, so both replace the whole list. Strategic merge would add nothing but
//! server-side type knowledge, so the plain, standard RFC 7386 merge patch is sent, with the
//! complete taint list read from the node and `metadata.resourceVersion` for optimistic
//! concurrency: a taint added by someone else between the read and the write makes the patch a
//! 409 Conflict, and the node is read again, instead of that taint being lost.

use ::kube::api::{Patch, PatchParams};
use ::kube::{Api, ResourceExt};
use k8s_openapi::api::core::v1::{Node, Taint};
use serde_json::{Value, json};

use super::api::FIELD_MANAGER;
use super::api::retry::with_retry;
use super::connect::ClusterClient;
use super::error::{KubeError, Refusal};
use super::events::{EventType, Said};
use super::executor::{CONFLICT_ATTEMPTS, KubeExecutor};
use super::node_facts::node_facts;
use super::outcome::NodeOutcome;
use crate::domain::config::{LABEL_EXCLUDE_LB, TaintEffect};
use crate::domain::cordon_record::{
    ANNOTATION_CORDON, CordonRecord, Undo, UndoOutcome, read, read_unverified,
};
use crate::domain::event::EventKind;
use crate::domain::keys::KeyRing;
use crate::domain::plan::NodeAction;
use crate::domain::surge::LABEL_CORDONED;

/// The state a cordon puts a node in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CordonSpec {
    /// The key of the taint to put: the action's ([`NodeAction::taint_key`]).
    pub taint_key: String,
    /// forewarn's own key (the settings' taint key): a taint of it on the node is forewarn's, any
    /// other key (NTH's) only when a verified record lists it.
    pub own_key: String,
    pub taint_value: String,
    pub taint_effect: TaintEffect,
    pub exclude_from_load_balancers: bool,
    /// Why: recorded on the node (merged with a record already there, see
    /// [`CordonRecord::after`]).
    pub record: Option<CordonRecord>,
    /// The keys the record is signed with (the current one) and a record already there is
    /// verified with (see [`RecordKeys`]).
    pub keys: RecordKeys,
}

/// How a cordon treats records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKeys {
    /// Signs the record with the current key; a record already there counts only if it
    /// verifies.
    Signed(KeyRing),
    /// The keys could not be read (a dry run on a store without one, a failed read): the record
    /// is written unsigned (never acted on, replaced by the next cordon) and none already there
    /// counts.
    Unreadable,
    /// An executor given no key source (tests, tools without a store): records unsigned, and a
    /// record already there taken as written. The way back verifies with the store's keys
    /// whatever the executor does, so such records are never undone.
    Unsigned,
}

/// The node's taints with forewarn's: an existing taint with the forewarn key is replaced in
/// place (further ones with that key dropped), every other taint is kept as it is. `theirs`:
/// the node already carries a taint of that key that is not forewarn's (NTH's): all are kept.
fn desired_taints(existing: &[Taint], spec: &CordonSpec, theirs: bool) -> Vec<Taint> {
    if theirs {
        return existing.to_vec();
    }
    let first = existing.iter().position(|t| t.key == spec.taint_key);
    let mut out: Vec<Taint> = (existing.iter())
        .filter(|t| t.key != spec.taint_key)
        .cloned()
        .collect();
    // Every taint before the first of that key is kept: forewarn's goes where that one was.
    let at = first.map_or(out.len(), |i| i.min(out.len()));
    let taint = Taint {
        key: spec.taint_key.clone(),
        value: Some(spec.taint_value.clone()),
        effect: spec.taint_effect.as_str().to_string(),
        time_added: None,
    };
    out.insert(at, taint);
    out
}

/// The merge patch that cordons `node` as `spec` says, or `None` when the node is already in
/// exactly that state. The patch carries the node's `resourceVersion` and its complete taint
/// list.
pub fn cordon_patch(node: &Node, spec: &CordonSpec) -> Option<Value> {
    let existing = taints_of(node);
    let unschedulable = node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
    let labels = node.labels();
    let labelled = labels.get(LABEL_EXCLUDE_LB).is_some_and(|v| v == "true");
    let marked = labels.contains_key(LABEL_CORDONED);
    let label_ok = (!spec.exclude_from_load_balancers || labelled) && marked;
    let annotations = node.annotations();
    // Only a record forewarn signed counts: one that does not verify (the node's kubelet may
    // write its annotations) is treated as no record, and replaced.
    let read = match &spec.keys {
        RecordKeys::Signed(keys) => read(annotations, Some(keys)),
        RecordKeys::Unreadable => read(annotations, None),
        RecordKeys::Unsigned => {
            (read_unverified(annotations).transpose()).map_err(|e| e.to_string())
        }
    };
    let before = read.unwrap_or_else(|why| {
        let node = node.metadata.name.as_deref().unwrap_or_default();
        tracing::warn!(%node, %why, "a cordon record that does not verify is replaced");
        None
    });
    // A node forewarn cordoned before records were kept (or whose record does not verify) has a
    // reason not known: the new record gives it no end.
    let unrecorded = before.is_none() && existing.iter().any(|t| t.key == spec.own_key);
    // A taint of another key than forewarn's own (NTH's) already there, that no verified record
    // of forewarn's lists, is someone else's (NTH's own): left as it is, never forewarn's.
    let other_key = spec.taint_key != spec.own_key;
    let theirs = other_key
        && existing.iter().any(|t| t.key == spec.taint_key)
        && !before
            .as_ref()
            .is_some_and(|b| b.taints.contains(&spec.taint_key));
    let taints = desired_taints(existing, spec, theirs);
    // Keys that cannot be read verify nothing: a record already on the node is left as it is
    // (it may be forewarn's, signed; replaced unsigned it would lose its reason for good).
    let keep =
        matches!(spec.keys, RecordKeys::Unreadable) && annotations.contains_key(ANNOTATION_CORDON);
    let other_taint = (other_key && !theirs).then(|| spec.taint_key.clone());
    let record = spec.record.as_ref().filter(|_| !keep).map(|r| {
        CordonRecord {
            // The label is forewarn's to remove only if forewarn adds it; so is a taint of
            // another key than its own.
            excluded_from_lb: spec.exclude_from_load_balancers && !labelled,
            taints: other_taint.into_iter().collect(),
            until: r.until.filter(|_| !unrecorded),
            // Whether the node was unschedulable before forewarn's first cordon: a record
            // already there knew ([`CordonRecord::after`] keeps it); else the node as read —
            // but a node carrying forewarn's own taint is unschedulable by forewarn's cordon
            // (whose record could not be verified: a key rotation), never "before" it, or the
            // way back would leave it cordoned for good.
            already_unschedulable: unschedulable && !existing.iter().any(|t| t.key == spec.own_key),
            ..r.clone()
        }
        .after(before.as_ref())
    });
    let record_ok =
        record.is_none() || record.as_ref() == before.as_ref().map(|b| b.unsigned()).as_ref();
    if unschedulable && taints.as_slice() == existing && label_ok && record_ok {
        return None;
    }
    let record = record.map(|r| match &spec.keys {
        RecordKeys::Signed(keys) => r.signed(&keys.current),
        RecordKeys::Unreadable | RecordKeys::Unsigned => r,
    });
    // Every node forewarn cordons carries its label: placeholders never count it as room.
    let mut metadata = json!({"labels": { LABEL_CORDONED: "true" }});
    if spec.exclude_from_load_balancers {
        metadata["labels"][LABEL_EXCLUDE_LB] = json!("true");
    }
    if let Some(record) = record {
        metadata["annotations"] = json!({ ANNOTATION_CORDON: record.to_annotation() });
    }
    Some(node_patch(
        node,
        metadata,
        json!({"unschedulable": true, "taints": taints}),
    ))
}

/// The merge patch of `node` setting `metadata` and `spec`, with the node's `resourceVersion`.
fn node_patch(node: &Node, mut metadata: Value, spec: Value) -> Value {
    if let Some(rv) = &node.metadata.resource_version {
        metadata["resourceVersion"] = json!(rv);
    }
    json!({"metadata": metadata, "spec": spec})
}

/// The merge patch that undoes forewarn's cordon of `node` (its taints: forewarn's own key
/// `taint_key` and those `record` lists, [`CordonRecord::taint_keys`]; the cordon unless the
/// record says the node was unschedulable before forewarn; the record; and — when `record` says
/// forewarn added it — the load-balancer label), or why it must not: the node carries no taint of
/// forewarn's cordon (cordoned by someone else, or undone already) or another record than
/// `record` (a new reason arrived).
pub fn uncordon_patch(
    node: &Node,
    taint_key: &str,
    record: &CordonRecord,
) -> Result<Value, Refusal> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let existing = taints_of(node);
    let ours: Vec<&str> = record.taint_keys(taint_key).collect();
    if !existing.iter().any(|t| ours.contains(&t.key.as_str())) {
        return Err(Refusal::NoTaint {
            node: name.to_string(),
            taint: ours.join(" or "),
        });
    }
    // Exactly the record read and verified, signature included.
    let on_node = read_unverified(node.annotations()).and_then(Result::ok);
    if on_node.as_ref() != Some(record) {
        return Err(Refusal::NewRecord {
            node: name.to_string(),
        });
    }
    let taints: Vec<&Taint> = existing
        .iter()
        .filter(|t| !ours.contains(&t.key.as_str()))
        .collect();
    let mut metadata = json!({"annotations": { ANNOTATION_CORDON: null },
        "labels": { LABEL_CORDONED: null }});
    if record.excluded_from_lb {
        metadata["labels"][LABEL_EXCLUDE_LB] = Value::Null;
    }
    let mut spec = json!({ "taints": taints });
    // A node that was unschedulable before forewarn (an operator's cordon) stays so.
    if !record.already_unschedulable {
        spec["unschedulable"] = json!(false);
    }
    Ok(node_patch(node, metadata, spec))
}

/// The node, or `None` when there is none of that name.
pub(crate) async fn get_node(
    clients: &ClusterClient,
    name: &str,
) -> Result<Option<Node>, KubeError> {
    let nodes: Api<Node> = Api::all(clients.client().await?);
    let object = format!("node/{name}");
    Ok(with_retry(clients, "get", &object, || nodes.get_opt(name)).await?)
}

/// The node's taints.
fn taints_of(node: &Node) -> &[Taint] {
    (node.spec.as_ref().and_then(|s| s.taints.as_deref())).unwrap_or_default()
}

/// What a node write did.
enum Written {
    /// Patched (after more than one try when the node changed under us), or found so on a
    /// later try (someone made the same change in between).
    Patched,
    /// The node already had exactly that state: nothing sent.
    Already,
    /// Dry run: a patch would be sent.
    Would,
    /// The node is gone.
    Gone,
    /// The node as read does not pass verification, or the write is not forewarn's to make.
    Refused(Refusal),
}

impl KubeExecutor {
    /// Writes `node` (as read) by the merge patch `patch` makes of it (`None`: already so),
    /// once the node is verified to still run `instance_id` and not be control-plane; on a 409
    /// Conflict reads it again, verifies it again and asks `patch` again, at most
    /// [`CONFLICT_ATTEMPTS`] in all. `what` names the write in the logs (`cordoned`).
    async fn write_node(
        &self,
        mut node: Node,
        (instance_id, what): (&str, &str),
        patch: impl Fn(&Node) -> Result<Option<Value>, Refusal>,
    ) -> Result<Written, KubeError> {
        let clients = &self.clients;
        let name = node.metadata.name.clone().unwrap_or_default();
        let object = format!("node/{name}");
        // A merge patch, sent as forewarn's field manager.
        let params = PatchParams::apply(FIELD_MANAGER);
        for attempt in 1..=CONFLICT_ATTEMPTS {
            let verified = node_facts(&node).verify_runs(instance_id);
            let patch = match verified.map_err(Refusal::from).and_then(|()| patch(&node)) {
                Err(why) => return Ok(Written::Refused(why)),
                Ok(None) if attempt == 1 => return Ok(Written::Already),
                Ok(None) => return Ok(Written::Patched),
                Ok(Some(_)) if self.settings.dry_run => return Ok(Written::Would),
                Ok(Some(patch)) => patch,
            };
            let nodes: Api<Node> = Api::all(clients.client().await?);
            let merge = Patch::Merge(&patch);
            let result = with_retry(clients, "patch", &object, || {
                nodes.patch(&name, &params, &merge)
            })
            .await;
            match result {
                Ok(_) => {
                    tracing::info!(node = %name, attempt, "{what}");
                    return Ok(Written::Patched);
                }
                Err(e) if e.is_not_found() => return Ok(Written::Gone),
                Err(e) if e.is_conflict() => {
                    tracing::info!(node = %name, attempt, "{what}: the node changed under the write, reading it again");
                    match get_node(clients, &name).await? {
                        Some(fresh) => node = fresh,
                        None => return Ok(Written::Gone),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(KubeError::Conflicts { node: name })
    }

    /// How cordons of `node` treat records (see [`RecordKeys`]); keys that cannot be read are
    /// logged and the cordon still goes on, a record already on the node left as it is. A record
    /// signed by a key id the keys read do not hold (a rotation this process has not seen) makes
    /// them be read again, once, as a continuation's signature does.
    async fn record_keys(&self, node: &Node) -> RecordKeys {
        let Some(store) = &self.keys else {
            return RecordKeys::Unsigned;
        };
        let keys = match store.continuation_keys().await {
            Ok(keys) => keys,
            Err(e) => {
                tracing::warn!(error = %e, "the continuation keys cannot be read: a record on the node is left as it is, a new one written unsigned");
                return RecordKeys::Unreadable;
            }
        };
        let signed_by = read_unverified(node.annotations()).and_then(Result::ok);
        let signed_by = signed_by.and_then(|r| r.key_id);
        match signed_by {
            Some(id) if keys.get(id).is_none() => match store.reread_continuation_keys().await {
                Ok(fresh) => RecordKeys::Signed(fresh.unwrap_or(keys)),
                Err(e) => {
                    tracing::warn!(error = %e, key_id = id, "the continuation keys cannot be read again for a record of an unknown key: it is left as it is");
                    RecordKeys::Unreadable
                }
            },
            _ => RecordKeys::Signed(keys),
        }
    }

    /// Cordons and taints the node `a` acts on, read as `node` (in a dry run, says what it would
    /// send); on a 409 Conflict reads it again, verifies it again (it must still run `a`'s
    /// instance and not be control-plane) and retries. Says whether it was gone (or the cordon
    /// refused: nothing more is done to it), and whether a `Cordoned` Event is to be recorded: the
    /// cordon changed it (or, with `already_ours`, it was found cordoned with forewarn's taint).
    pub(super) async fn cordon_node(
        &self,
        kind: EventKind,
        a: &NodeAction,
        node: &Node,
        already_ours: bool,
        out: &mut NodeOutcome,
    ) -> Result<(bool, bool), KubeError> {
        // The cordon of `a` for an event of `kind`: its taint (its key, with the kind as value),
        // the configured effect and label, and its record as the reason.
        let spec = CordonSpec {
            taint_key: a.taint_key.clone(),
            own_key: self.config.taint_key.clone(),
            taint_value: kind.to_string(),
            taint_effect: self.config.taint_effect,
            exclude_from_load_balancers: a.exclude_from_load_balancers,
            record: a.record.clone(),
            keys: self.record_keys(node).await,
        };
        let write = self.write_node(node.clone(), (&a.instance_id, "cordoned"), |node| {
            Ok(cordon_patch(node, &spec))
        });
        let name = a.node.as_deref().unwrap_or_default();
        // What is said, and whether the Event is owed.
        let (said, event) = match write.await? {
            // Gone, or changed and refused: nothing more is done to it.
            Written::Gone => {
                out.say(format!("node/{name} is gone"));
                return Ok((true, false));
            }
            Written::Refused(why) => {
                tracing::warn!(%why, "the node changed: refusing to cordon it");
                out.refuse(why.to_string());
                return Ok((true, false));
            }
            Written::Would => {
                out.say(format!("would cordon and taint node/{name}"));
                return Ok((false, false));
            }
            Written::Already if !already_ours => (format!("node/{name} already cordoned"), false),
            // Or found cordoned with forewarn's taint when announced: the event's first pass (or
            // an earlier delivery) did it for this event.
            Written::Patched | Written::Already => (format!("cordoned node/{name}"), true),
        };
        out.say(said);
        out.result.cordoned_at = Some(self.clients.clock().now());
        Ok((false, event))
    }

    /// Undoes forewarn's cordon of `node` (read live) as `undo` says, with an `Uncordoned`
    /// Event saying why (see [`crate::app::upkeep::ClusterUpkeep::undo`]).
    pub(crate) async fn undo_cordon(
        &self,
        node: Node,
        undo: &Undo,
    ) -> Result<UndoOutcome, KubeError> {
        let key = &self.config.taint_key;
        let write = self.write_node(node.clone(), (&undo.instance_id, "cordon undone"), |node| {
            uncordon_patch(node, key, &undo.record).map(Some)
        });
        let outcome = match write.await? {
            Written::Patched | Written::Already => UndoOutcome::Undone,
            Written::Would => UndoOutcome::WouldUndo,
            Written::Gone => return Ok(UndoOutcome::NodeGone),
            Written::Refused(why) => {
                return Ok(UndoOutcome::Refused {
                    why: why.to_string(),
                });
            }
        };
        let note = format!("forewarn's cordon undone: {}", undo.why);
        let said = Said(EventType::Normal, "Uncordoned", "Uncordon", note);
        let out = &mut NodeOutcome::default();
        self.event(&undo.record.event_id, &node, said, out).await;
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(value: Value) -> Node {
        serde_json::from_value(value).unwrap()
    }

    fn spec(exclude: bool) -> CordonSpec {
        CordonSpec {
            taint_key: "forewarn.io/interruption".into(),
            own_key: "forewarn.io/interruption".into(),
            taint_value: "spot-interruption".into(),
            taint_effect: TaintEffect::NoSchedule,
            exclude_from_load_balancers: exclude,
            record: None,
            keys: RecordKeys::Unsigned,
        }
    }

    #[test]
    fn keeps_other_taints_and_sends_the_whole_list() {
        let n = node(json!({
            "metadata": {"name": "n1", "resourceVersion": "42"},
            "spec": {"taints": [
                {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}
            ]}
        }));
        let patch = cordon_patch(&n, &spec(true)).unwrap();
        assert_eq!(
            patch,
            json!({
                "metadata": {"resourceVersion": "42",
                             "labels": {LABEL_EXCLUDE_LB: "true", LABEL_CORDONED: "true"}},
                "spec": {"unschedulable": true, "taints": [
                    {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"},
                    {"key": "forewarn.io/interruption", "value": "spot-interruption", "effect": "NoSchedule"}
                ]}
            })
        );
    }

    #[test]
    fn replaces_only_an_existing_forewarn_taint() {
        let n = node(json!({
            "metadata": {"name": "n1", "resourceVersion": "7"},
            "spec": {"unschedulable": true, "taints": [
                {"key": "forewarn.io/interruption", "value": "rebalance-recommendation", "effect": "NoSchedule"},
                {"key": "a", "effect": "NoSchedule"},
                {"key": "forewarn.io/interruption", "value": "x", "effect": "NoExecute"}
            ]}
        }));
        let patch = cordon_patch(&n, &spec(false)).unwrap();
        assert_eq!(
            patch["spec"]["taints"],
            json!([
                {"key": "forewarn.io/interruption", "value": "spot-interruption", "effect": "NoSchedule"},
                {"key": "a", "effect": "NoSchedule"}
            ])
        );
        assert_eq!(
            patch["metadata"]["labels"],
            json!({LABEL_CORDONED: "true"}),
            "forewarn's own label only"
        );
    }

    #[test]
    fn nothing_to_send_when_already_in_that_state() {
        let done = json!({
            "metadata": {"name": "n1", "resourceVersion": "9",
                         "labels": {LABEL_EXCLUDE_LB: "true", LABEL_CORDONED: "true"}},
            "spec": {"unschedulable": true, "taints": [
                {"key": "a", "effect": "NoSchedule"},
                {"key": "forewarn.io/interruption", "value": "spot-interruption", "effect": "NoSchedule"}
            ]}
        });
        assert_eq!(cordon_patch(&node(done.clone()), &spec(true)), None);
        assert_eq!(cordon_patch(&node(done.clone()), &spec(false)), None);
        // Any one difference makes a patch.
        let mut v = done.clone();
        v["spec"]["unschedulable"] = json!(false);
        assert!(cordon_patch(&node(v), &spec(true)).is_some());
        let mut v = done.clone();
        v["metadata"]["labels"] = json!({});
        assert!(cordon_patch(&node(v), &spec(true)).is_some());
        // A node cordoned without forewarn's label (by an older forewarn) gets it.
        let mut v = done.clone();
        v["metadata"]["labels"] = json!({LABEL_EXCLUDE_LB: "true"});
        let patch = cordon_patch(&node(v), &spec(false)).unwrap();
        assert_eq!(patch["metadata"]["labels"], json!({LABEL_CORDONED: "true"}));
        let mut v = done;
        v["spec"]["taints"][1]["effect"] = json!("NoExecute");
        assert!(cordon_patch(&node(v), &spec(true)).is_some());
    }

    fn record(until: Option<&str>) -> CordonRecord {
        CordonRecord {
            until: until.map(|u| u.parse().unwrap()),
            rule: Some("web".into()),
            ..CordonRecord::new(
                crate::domain::event::EventKind::RebalanceRecommendation,
                "e-1",
                "i-0a1b2c3d4e5f60001",
                "2026-11-24T10:00:00Z".parse().unwrap(),
            )
        }
    }

    #[test]
    fn a_cordon_records_why_and_whether_it_added_the_label() {
        let fresh = node(json!({"metadata": {"name": "n1", "resourceVersion": "7"}}));
        let spec = CordonSpec {
            record: Some(record(Some("2026-11-24T10:30:00Z"))),
            ..spec(true)
        };
        let patch = cordon_patch(&fresh, &spec).unwrap();
        let written: CordonRecord = serde_json::from_str(
            patch["metadata"]["annotations"][ANNOTATION_CORDON]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert!(written.excluded_from_lb, "forewarn adds the label");
        assert_eq!(written.until, record(Some("2026-11-24T10:30:00Z")).until);
        // Someone else's label stays theirs.
        let labelled =
            node(json!({"metadata": {"name": "n1", "labels": {LABEL_EXCLUDE_LB: "true"}}}));
        let patch = cordon_patch(&labelled, &spec).unwrap();
        let written: CordonRecord = serde_json::from_str(
            patch["metadata"]["annotations"][ANNOTATION_CORDON]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert!(!written.excluded_from_lb);
        // Already cordoned with a record that lasts longer: nothing to send.
        let forever = CordonRecord {
            until: None,
            excluded_from_lb: true,
            ..record(None)
        };
        let spec = CordonSpec {
            keys: RecordKeys::Signed(ring()),
            ..spec
        };
        let done = node(json!({
            "metadata": {"name": "n1", "labels": {LABEL_EXCLUDE_LB: "true", LABEL_CORDONED: "true"},
                         "annotations": {ANNOTATION_CORDON: forever.signed(&ring().current).to_annotation()}},
            "spec": {"unschedulable": true, "taints": [
                {"key": "forewarn.io/interruption", "value": "spot-interruption", "effect": "NoSchedule"}
            ]}
        }));
        assert_eq!(cordon_patch(&done, &spec), None);
        // Cordoned by forewarn before records were kept: the record it gets has no end.
        let legacy = node(json!({
            "metadata": {"name": "n1", "labels": {LABEL_EXCLUDE_LB: "true"}},
            "spec": {"unschedulable": true, "taints": [
                {"key": "forewarn.io/interruption", "value": "spot-interruption", "effect": "NoSchedule"}
            ]}
        }));
        let patch = cordon_patch(&legacy, &spec).unwrap();
        let written: CordonRecord = serde_json::from_str(
            patch["metadata"]["annotations"][ANNOTATION_CORDON]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(written.until, None);
    }

    #[test]
    fn an_uncordon_removes_only_what_forewarn_put() {
        let r = CordonRecord {
            excluded_from_lb: true,
            ..record(Some("2026-11-24T10:30:00Z"))
        };
        let cordoned = json!({
            "metadata": {"name": "n1", "resourceVersion": "12",
                         "labels": {LABEL_EXCLUDE_LB: "true", "pool": "web"},
                         "annotations": {ANNOTATION_CORDON: r.to_annotation(), "other": "x"}},
            "spec": {"unschedulable": true, "taints": [
                {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                {"key": "forewarn.io/interruption", "value": "rebalance-recommendation", "effect": "NoSchedule"}
            ]}
        });
        let patch =
            uncordon_patch(&node(cordoned.clone()), "forewarn.io/interruption", &r).unwrap();
        assert_eq!(
            patch,
            json!({
                "metadata": {"resourceVersion": "12", "annotations": {ANNOTATION_CORDON: null},
                             "labels": {LABEL_EXCLUDE_LB: null, LABEL_CORDONED: null}},
                "spec": {"unschedulable": false, "taints": [
                    {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
                ]}
            })
        );
        // A label someone else put stays.
        let theirs = CordonRecord {
            excluded_from_lb: false,
            ..r.clone()
        };
        let mut v = cordoned.clone();
        v["metadata"]["annotations"][ANNOTATION_CORDON] = json!(theirs.to_annotation());
        let patch = uncordon_patch(&node(v), "forewarn.io/interruption", &theirs).unwrap();
        assert_eq!(patch["metadata"]["labels"], json!({LABEL_CORDONED: null}));
        // Not forewarn's taint, or a new record: left alone.
        let mut v = cordoned.clone();
        v["spec"]["taints"] = json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]);
        assert!(matches!(
            uncordon_patch(&node(v), "forewarn.io/interruption", &r),
            Err(Refusal::NoTaint { .. })
        ));
        let newer = CordonRecord {
            event_id: "e-2".into(),
            ..r.clone()
        };
        assert!(matches!(
            uncordon_patch(&node(cordoned), "forewarn.io/interruption", &newer),
            Err(Refusal::NewRecord { .. })
        ));
    }

    fn ring() -> KeyRing {
        KeyRing::of(crate::domain::keys::ContinuationKey::new([5; 32]))
    }

    /// The record a patch writes.
    fn written(patch: &Value) -> CordonRecord {
        serde_json::from_str(
            patch["metadata"]["annotations"][ANNOTATION_CORDON]
                .as_str()
                .unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn an_operators_cordon_is_recorded_and_survives_the_way_back() {
        let spec = CordonSpec {
            record: Some(record(Some("2026-11-24T10:30:00Z"))),
            keys: RecordKeys::Signed(ring()),
            ..spec(false)
        };
        // Cordoned by an operator before forewarn came: recorded, and signed.
        let operators = node(json!({
            "metadata": {"name": "n1", "resourceVersion": "3"},
            "spec": {"unschedulable": true}
        }));
        let r = written(&cordon_patch(&operators, &spec).unwrap());
        assert!(r.already_unschedulable);
        assert_eq!(r.key_id, Some(1));
        assert!(r.verify(&ring()).is_ok());
        let fresh = node(json!({"metadata": {"name": "n1"}}));
        assert!(!written(&cordon_patch(&fresh, &spec).unwrap()).already_unschedulable);
        // The way back removes forewarn's taint and record, and leaves the operator's cordon.
        let cordoned = |r: &CordonRecord| {
            node(json!({
                "metadata": {"name": "n1", "resourceVersion": "4",
                             "annotations": {ANNOTATION_CORDON: r.to_annotation()}},
                "spec": {"unschedulable": true, "taints": [
                    {"key": "forewarn.io/interruption", "value": "rebalance-recommendation", "effect": "NoSchedule"}
                ]}
            }))
        };
        let patch = uncordon_patch(&cordoned(&r), "forewarn.io/interruption", &r).unwrap();
        assert_eq!(
            patch,
            json!({
                "metadata": {"resourceVersion": "4", "annotations": {ANNOTATION_CORDON: null},
                             "labels": {LABEL_CORDONED: null}},
                "spec": {"taints": []}
            })
        );
        let ours = CordonRecord {
            already_unschedulable: false,
            ..r.clone()
        }
        .signed(&ring().current);
        let patch = uncordon_patch(&cordoned(&ours), "forewarn.io/interruption", &ours).unwrap();
        assert_eq!(patch["spec"]["unschedulable"], json!(false));
    }

    #[test]
    fn a_record_that_does_not_verify_is_never_merged() {
        let spec = CordonSpec {
            record: Some(record(Some("2026-11-24T10:30:00Z"))),
            keys: RecordKeys::Signed(ring()),
            ..spec(false)
        };
        // An operator's cordon, and a record the kubelet wrote claiming the node was
        // schedulable before forewarn: ignored, the node as read decides.
        let forged = CordonRecord {
            already_unschedulable: false,
            ..record(None)
        };
        let claimed = node(json!({
            "metadata": {"name": "n1",
                         "annotations": {ANNOTATION_CORDON: forged.to_annotation()}},
            "spec": {"unschedulable": true}
        }));
        let r = written(&cordon_patch(&claimed, &spec).unwrap());
        assert!(r.already_unschedulable);
        assert_eq!(r.until, record(Some("2026-11-24T10:30:00Z")).until);
        // Signed by the key, the same record is merged (a new reason keeps the first's fact).
        let genuine = node(json!({
            "metadata": {"name": "n1",
                         "annotations": {ANNOTATION_CORDON: forged.signed(&ring().current).to_annotation()}},
            "spec": {"unschedulable": true, "taints": [
                {"key": "forewarn.io/interruption", "value": "rebalance-recommendation", "effect": "NoSchedule"}
            ]}
        }));
        let r = written(&cordon_patch(&genuine, &spec).unwrap());
        assert!(!r.already_unschedulable);
    }

    /// A key rotation this process has not seen leaves forewarn's record unverifiable: a node
    /// carrying forewarn's own taint is unschedulable by forewarn's cordon, so the new record
    /// never says "already unschedulable" (the way back would keep it cordoned for good); and
    /// with keys that cannot be read at all, the record on the node is left as it is.
    #[test]
    fn a_record_forewarn_cannot_verify_never_keeps_a_node_cordoned_for_good() {
        let spec = CordonSpec {
            record: Some(record(None)),
            keys: RecordKeys::Signed(ring()),
            ..spec(false)
        };
        let other_key = KeyRing::of(crate::domain::keys::ContinuationKey::with_id(9, [7; 32]));
        let ours_unverifiable = node(json!({
            "metadata": {"name": "n1", "annotations": {
                ANNOTATION_CORDON: record(None).signed(&other_key.current).to_annotation()}},
            "spec": {"unschedulable": true, "taints": [
                {"key": "forewarn.io/interruption", "value": "spot-interruption", "effect": "NoSchedule"}
            ]}
        }));
        let r = written(&cordon_patch(&ours_unverifiable, &spec).unwrap());
        assert!(
            !r.already_unschedulable,
            "forewarn's own taint: its own cordon"
        );
        // Keys unreadable: the annotation is not in the patch (the node keeps its record).
        let unreadable = CordonSpec {
            keys: RecordKeys::Unreadable,
            ..spec.clone()
        };
        let patch = cordon_patch(&ours_unverifiable, &unreadable);
        assert!(
            patch
                .as_ref()
                .is_none_or(|p| p["metadata"].get("annotations").is_none()),
            "{patch:?}"
        );
        // Without a record on the node, an unreadable key still writes one (unsigned).
        let bare = node(json!({"metadata": {"name": "n2"}, "spec": {}}));
        let patch = cordon_patch(&bare, &unreadable).unwrap();
        assert!(patch["metadata"]["annotations"][ANNOTATION_CORDON].is_string());
    }

    #[test]
    fn an_nth_key_is_forewarns_only_when_forewarn_put_it() {
        use crate::domain::config::{NTH_TAINT_REBALANCE, NTH_TAINT_SPOT};
        let spot = CordonSpec {
            taint_key: NTH_TAINT_SPOT.into(),
            record: Some(record(None)),
            keys: RecordKeys::Signed(ring()),
            ..spec(false)
        };
        // A fresh node: NTH's key put beside the other taints, and listed in the record.
        let fresh = node(json!({"metadata": {"name": "n1"},
            "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}));
        let patch = cordon_patch(&fresh, &spot).unwrap();
        assert_eq!(
            patch["spec"]["taints"],
            json!([{"key": "a", "effect": "NoSchedule"},
                   {"key": NTH_TAINT_SPOT, "value": "spot-interruption", "effect": "NoSchedule"}])
        );
        let ours = written(&patch);
        assert_eq!(ours.taints, vec![NTH_TAINT_SPOT]);
        // NTH's own taint already there (NTH tainted first, no record of forewarn's lists it):
        // left exactly as it is, and not forewarn's to remove.
        let nths = json!({"key": NTH_TAINT_SPOT, "value": "nth-event-id", "effect": "NoSchedule"});
        let tainted = node(json!({"metadata": {"name": "n1"},
            "spec": {"unschedulable": true, "taints": [nths.clone()]}}));
        let patch = cordon_patch(&tainted, &spot).unwrap();
        assert_eq!(patch["spec"]["taints"], json!([nths]));
        let record = written(&patch);
        assert!(record.taints.is_empty(), "{record:?}");
        assert_eq!(record.until, None);
        // Then the way back removes none of it (nor forewarn's own, absent): not its cordon.
        let after = node(json!({"metadata": {"name": "n1",
                "annotations": {ANNOTATION_CORDON: record.to_annotation()}},
            "spec": {"unschedulable": true, "taints": [nths]}}));
        assert!(matches!(
            uncordon_patch(&after, "forewarn.io/interruption", &record),
            Err(Refusal::NoTaint { taint, .. })
                if taint == "forewarn.io/interruption"
        ));
        // forewarn's NTH key (its record lists it) is forewarn's: a rebalance then puts its own
        // and keeps both listed.
        let signed = ours.signed(&ring().current);
        let cordoned = node(json!({"metadata": {"name": "n1",
                "labels": {LABEL_CORDONED: "true"},
                "annotations": {ANNOTATION_CORDON: signed.to_annotation()}},
            "spec": {"unschedulable": true, "taints": [
                {"key": "a", "effect": "NoSchedule"},
                {"key": NTH_TAINT_SPOT, "value": "spot-interruption", "effect": "NoSchedule"}]}}));
        assert_eq!(cordon_patch(&cordoned, &spot), None, "already so");
        let rebalance = CordonSpec {
            taint_key: NTH_TAINT_REBALANCE.into(),
            taint_value: "rebalance-recommendation".into(),
            ..spot.clone()
        };
        let patch = cordon_patch(&cordoned, &rebalance).unwrap();
        assert_eq!(patch["spec"]["taints"].as_array().unwrap().len(), 3);
        assert_eq!(
            written(&patch).taints,
            vec![NTH_TAINT_SPOT, NTH_TAINT_REBALANCE]
        );
        // The way back removes forewarn's NTH key, and every other taint stays.
        let patch = uncordon_patch(&cordoned, "forewarn.io/interruption", &signed).unwrap();
        assert_eq!(
            patch["spec"]["taints"],
            json!([{"key": "a", "effect": "NoSchedule"}])
        );
        assert_eq!(patch["spec"]["unschedulable"], json!(false));
    }
}
