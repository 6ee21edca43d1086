//! The ReplicaSet controller, for what forewarn depends on: a pod of a stored ReplicaSet that
//! starts terminating, turns `Succeeded`/`Failed` or is deleted is replaced at once from the
//! ReplicaSet's template (the controller does not count terminating pods).

use serde_json::{Value, json};

use super::Sim;
use super::cluster::{PodEntry, PodKey};
use crate::store::{Store, meta_str};

impl Sim {
    /// Creates the replacement of `left`, which belonged to the ReplicaSet owning it, if that
    /// ReplicaSet is stored, not being deleted, and (when it says how many) short of replicas.
    pub(super) fn replace_pod(&mut self, store: &mut Store, key: &PodKey, left: &PodEntry) {
        let Some(owner) = &left.controller else {
            return;
        };
        let Some(rs_idx) = self.kinds.replicaset else {
            return;
        };
        if owner.kind != "ReplicaSet" || !owner.api_version.starts_with("apps/") {
            return;
        }
        let namespace = key.0.as_str();
        let Some(rs) = store.object(&store.key_of(rs_idx, Some(namespace), &owner.name)) else {
            return;
        };
        let rs_uid = meta_str(rs, "uid").unwrap_or_default().to_string();
        if (!owner.uid.is_empty() && owner.uid != rs_uid)
            || meta_str(rs, "deletionTimestamp").is_some()
        {
            return;
        }
        if let Some(replicas) = rs.pointer("/spec/replicas").and_then(Value::as_i64)
            && self.cluster.active_of(namespace, "ReplicaSet", &owner.name) >= replicas
        {
            return;
        }
        let template = rs.pointer("/spec/template").cloned().unwrap_or(json!({}));
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": format!("{}-", owner.name),
                "namespace": namespace,
                "labels": template.pointer("/metadata/labels"),
                "annotations": template.pointer("/metadata/annotations"),
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner.name,
                    "uid": rs_uid, "controller": true, "blockOwnerDeletion": true,
                }],
            },
            "spec": template.get("spec").cloned().unwrap_or(json!({})),
        });
        if let Err(e) = store.create(self.kinds.pod, Some(namespace), pod, false) {
            tracing::warn!(
                "kube-fake: ReplicaSet {namespace}/{}: replacement refused: {}",
                owner.name,
                e.body
            );
        }
    }
}
