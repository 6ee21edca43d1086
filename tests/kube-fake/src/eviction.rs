//! The `pods/eviction` subresource and the PodDisruptionBudget arithmetic
//! behind it.
//!
//! The real server checks the budget's `status`, which the disruption
//! controller keeps up to date. The fake has no controller, so it computes that
//! status from the pods it holds at the moment of the request, with the
//! controller's rules (`pkg/controller/disruption`):
//!
//! * healthy pods: matched by the selector, no `deletionTimestamp`, phase
//!   `Running` and condition `Ready=True`;
//! * `minAvailable: <int>`: expected = matched pods, desired healthy = the int;
//! * `minAvailable: "<n>%"` and `maxUnavailable`: expected = the sum of the
//!   scales of the pods' controllers (`spec.replicas` of a stored owner such as
//!   a ReplicaSet or StatefulSet, `status.desiredNumberScheduled` of a stored
//!   DaemonSet). Percentages round up, as the controller's
//!   `GetScaledValueFromIntOrPercent(.., true)` does. *Deviation:* a matched pod
//!   that has not completed and whose controller is not stored in the fake, or
//!   that has no controller, counts as one expected pod (the real controller
//!   would fail, or ignore it);
//! * disruptions allowed = healthy - desired, and 0 when negative or when no pod is expected.
//!
//! The eviction itself follows `pkg/registry/core/pod/storage/eviction.go`:
//! pods that are `Pending`, `Succeeded`, `Failed` or already terminating are
//! deleted without looking at budgets; more than one matching budget is a 500;
//! a pod that is not ready is evicted when the budget is otherwise satisfied
//! (or when `unhealthyPodEvictionPolicy: AlwaysAllow`); otherwise an eviction
//! needs `disruptionsAllowed > 0` and is refused with a 429 that names the budget.

use serde_json::{Value, json};

use crate::selectors::LabelSelector;
use crate::status::{self, ApiError};
use crate::store::{DeleteOptions, Store, meta_str, now_rfc3339};

/// The status the disruption controller would write for one budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PdbStatus {
    pub expected: i64,
    pub desired: i64,
    pub current: i64,
    pub allowed: i64,
}

impl PdbStatus {
    /// Renders it as a `PodDisruptionBudgetStatus`.
    pub fn to_status(self, pdb: &Value) -> Value {
        let generation = pdb
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let since = meta_str(pdb, "creationTimestamp")
            .map(str::to_string)
            .unwrap_or_else(now_rfc3339);
        let (cond_status, reason) = if self.allowed > 0 {
            ("True", "SufficientPods")
        } else {
            ("False", "InsufficientPods")
        };
        json!({
            "observedGeneration": generation,
            "disruptionsAllowed": self.allowed,
            "currentHealthy": self.current,
            "desiredHealthy": self.desired,
            "expectedPods": self.expected,
            "conditions": [{
                "type": "DisruptionAllowed",
                "status": cond_status,
                "reason": reason,
                "message": "",
                "observedGeneration": generation,
                "lastTransitionTime": since,
            }],
        })
    }
}

fn has_condition(pod: &Value, kind: &str) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(kind)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `podutil.IsPodReady`.
pub(crate) fn pod_ready(pod: &Value) -> bool {
    has_condition(pod, "Ready")
}

/// Counted in `currentHealthy`.
pub(crate) fn pod_healthy(pod: &Value) -> bool {
    meta_str(pod, "deletionTimestamp").is_none() && phase(pod) == "Running" && pod_ready(pod)
}

/// `intstr.GetScaledValueFromIntOrPercent(v, total, roundUp=true)`.
fn scaled(v: &Value, total: i64) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => {
            let pct: i64 = s.strip_suffix('%')?.parse().ok()?;
            Some((pct * total + 99) / 100)
        }
        _ => None,
    }
}

impl Store {
    fn pods_index(&self) -> usize {
        self.pods.expect("the resource table always serves pods")
    }

    /// The pods a budget selects (a nil or empty selector selects nothing).
    fn pods_of_pdb(&self, pdb: &Value) -> Vec<&Value> {
        let ns = meta_str(pdb, "namespace").unwrap_or_default();
        let Some(selector) = pdb
            .pointer("/spec/selector")
            .and_then(|s| LabelSelector::from_object(s).ok())
            .filter(|s| !s.is_empty())
        else {
            return Vec::new();
        };
        self.objects_of(self.pods_index(), Some(ns))
            .filter(|p| selector.matches_object(p))
            .collect()
    }

    /// `getExpectedScale`, with the documented fallback for unknown controllers.
    fn expected_scale(&self, pods: &[&Value]) -> i64 {
        let mut controllers: Vec<(String, i64)> = Vec::new();
        let mut loose = 0;
        for pod in pods {
            let owner = pod
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .and_then(|refs| {
                    refs.iter()
                        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
                });
            let scale = owner.and_then(|o| {
                let uid = o.get("uid").and_then(Value::as_str).unwrap_or_default();
                if controllers.iter().any(|(u, _)| u == uid) {
                    return Some(None);
                }
                let idx = self.find_kind(
                    o.get("apiVersion").and_then(Value::as_str)?,
                    o.get("kind").and_then(Value::as_str)?,
                )?;
                let stored = self.get(
                    idx,
                    meta_str(pod, "namespace"),
                    o.get("name").and_then(Value::as_str)?,
                )?;
                if !uid.is_empty() && meta_str(&stored, "uid") != Some(uid) {
                    return None;
                }
                let scale = if stored.get("kind").and_then(Value::as_str) == Some("DaemonSet") {
                    stored.pointer("/status/desiredNumberScheduled")?.as_i64()?
                } else {
                    stored
                        .pointer("/spec/replicas")
                        .map_or(Some(1), Value::as_i64)?
                };
                Some(Some((uid.to_string(), scale)))
            });
            match scale {
                Some(Some(found)) => controllers.push(found),
                Some(None) => {}
                // Completed pods are no part of any controller's scale.
                None if matches!(phase(pod), "Succeeded" | "Failed") => {}
                None => loose += 1,
            }
        }
        controllers.iter().map(|(_, s)| s).sum::<i64>() + loose
    }

    /// What the disruption controller would compute for `pdb` right now.
    pub(crate) fn pdb_status(&self, pdb: &Value) -> PdbStatus {
        let pods = self.pods_of_pdb(pdb);
        let current = pods.iter().filter(|p| pod_healthy(p)).count() as i64;
        let spec = pdb.get("spec").cloned().unwrap_or(Value::Null);
        let computed = if let Some(max_unavailable) = spec.get("maxUnavailable") {
            let expected = self.expected_scale(&pods);
            scaled(max_unavailable, expected).map(|mu| (expected, (expected - mu).max(0)))
        } else if let Some(min_available) = spec.get("minAvailable") {
            match min_available {
                Value::Number(n) => n.as_i64().map(|d| (pods.len() as i64, d)),
                other => {
                    let expected = self.expected_scale(&pods);
                    scaled(other, expected).map(|d| (expected, d))
                }
            }
        } else {
            Some((0, 0))
        };
        // An unparsable budget fails safe, like the controller's failSafe.
        let Some((expected, desired)) = computed else {
            return PdbStatus {
                expected: 0,
                desired: 0,
                current,
                allowed: 0,
            };
        };
        let allowed = if expected <= 0 {
            0
        } else {
            (current - desired).max(0)
        };
        PdbStatus {
            expected,
            desired,
            current,
            allowed,
        }
    }

    /// `POST …/pods/{name}/eviction`. On success the pod is deleted (or starts a
    /// graceful deletion, which the store finishes when its time comes).
    pub(crate) fn evict(
        &mut self,
        namespace: &str,
        name: &str,
        body: &Value,
        dry_run: bool,
    ) -> Result<(), ApiError> {
        if !body.is_object() {
            return Err(status::bad_request("not a Eviction object"));
        }
        if let Some(kind) = body.get("kind").and_then(Value::as_str)
            && kind != "Eviction"
        {
            return Err(status::bad_request(format!(
                "not a Eviction object: {kind}"
            )));
        }
        if let Some(v) = body.get("apiVersion").and_then(Value::as_str)
            && v != "policy/v1"
            && v != "policy/v1beta1"
        {
            return Err(status::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version (policy/v1)"
            )));
        }
        if meta_str(body, "name") != Some(name) {
            return Err(status::bad_request(
                "name in URL does not match name in Eviction object",
            ));
        }
        let pods = self.pods_index();
        let pod = self.get_or_404(pods, Some(namespace), name)?;
        let options = DeleteOptions::from_body(body.get("deleteOptions"), None);

        let terminal_or_pending = matches!(phase(&pod), "Pending" | "Succeeded" | "Failed");
        if terminal_or_pending || meta_str(&pod, "deletionTimestamp").is_some() {
            return self.delete_evicted(namespace, name, &options, dry_run);
        }

        let pdbs_idx = self.find_kind("policy/v1", "PodDisruptionBudget");
        let matching: Vec<Value> = pdbs_idx
            .map(|idx| {
                self.objects_of(idx, Some(namespace))
                    .filter(|pdb| {
                        pdb.pointer("/spec/selector")
                            .and_then(|s| LabelSelector::from_object(s).ok())
                            .is_some_and(|s| !s.is_empty() && s.matches_object(&pod))
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let pdb = match matching.as_slice() {
            [] => return self.delete_evicted(namespace, name, &options, dry_run),
            [one] => one,
            _ => {
                return Err(status::plain(
                    500,
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                ));
            }
        };
        let budget = self.pdb_status(pdb);
        if !pod_ready(&pod) {
            let always_allow = pdb
                .pointer("/spec/unhealthyPodEvictionPolicy")
                .and_then(Value::as_str)
                == Some("AlwaysAllow");
            if always_allow || (budget.current >= budget.desired && budget.desired > 0) {
                return self.delete_evicted(namespace, name, &options, dry_run);
            }
        }
        if budget.allowed <= 0 {
            let pdb_name = meta_str(pdb, "name").unwrap_or_default();
            return Err(status::too_many_requests(
                "Cannot evict pod as it would violate the pod's disruption budget.",
                0,
                Some(vec![json!({
                    "reason": "DisruptionBudget",
                    "message": format!(
                        "The disruption budget {pdb_name} needs {} healthy pods and has {} currently",
                        budget.desired, budget.current
                    ),
                })]),
            ));
        }
        self.delete_evicted(namespace, name, &options, dry_run)
    }

    fn delete_evicted(
        &mut self,
        namespace: &str,
        name: &str,
        options: &DeleteOptions,
        dry_run: bool,
    ) -> Result<(), ApiError> {
        let pods = self.pods_index();
        self.delete(pods, Some(namespace), name, options, dry_run)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_resources;

    fn pod(name: &str, phase: &str, ready: bool) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "ns", "labels": {"app": "web"}},
               "spec": {"nodeName": "n1"},
               "status": {"phase": phase, "conditions": [
                   {"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
    }

    fn pdb(spec: Value) -> Value {
        let mut spec = spec;
        spec["selector"] = json!({"matchLabels": {"app": "web"}});
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "web", "namespace": "ns"}, "spec": spec})
    }

    fn store_with(pods: &[Value], budget: Value) -> Store {
        let mut s = Store::new(builtin_resources());
        for p in pods {
            s.seed(p.clone()).unwrap();
        }
        s.seed(budget).unwrap();
        s
    }

    fn eviction(name: &str) -> Value {
        json!({"apiVersion": "policy/v1", "kind": "Eviction",
               "metadata": {"name": name, "namespace": "ns"}})
    }

    #[test]
    fn percentages_round_up() {
        assert_eq!(scaled(&json!("50%"), 3), Some(2));
        assert_eq!(scaled(&json!("34%"), 3), Some(2));
        assert_eq!(scaled(&json!("100%"), 3), Some(3));
        assert_eq!(scaled(&json!(1), 3), Some(1));
        assert_eq!(scaled(&json!("50"), 3), None);
    }

    #[test]
    fn min_available_int_budget() {
        let budget = pdb(json!({"minAvailable": 2}));
        let s = store_with(
            &[
                pod("a", "Running", true),
                pod("b", "Running", true),
                pod("c", "Running", false),
            ],
            budget.clone(),
        );
        let status = s.pdb_status(&budget);
        assert_eq!(
            status,
            PdbStatus {
                expected: 3,
                desired: 2,
                current: 2,
                allowed: 0
            }
        );
    }

    #[test]
    fn max_unavailable_uses_the_controller_scale_when_the_owner_is_stored() {
        let budget = pdb(json!({"maxUnavailable": "50%"}));
        let mut s = store_with(&[], budget.clone());
        let rs = s
            .seed(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                         "metadata": {"name": "web", "namespace": "ns"}, "spec": {"replicas": 4}}))
            .unwrap();
        for name in ["a", "b", "c"] {
            let mut p = pod(name, "Running", true);
            p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "web", "uid": rs["metadata"]["uid"], "controller": true}]);
            s.seed(p).unwrap();
        }
        // expected 4 (the ReplicaSet's scale), max unavailable 2, desired 2, healthy 3.
        assert_eq!(
            s.pdb_status(&budget),
            PdbStatus {
                expected: 4,
                desired: 2,
                current: 3,
                allowed: 1
            }
        );
    }

    #[test]
    fn eviction_refused_when_no_disruption_is_allowed() {
        let mut s = store_with(
            &[pod("a", "Running", true), pod("b", "Running", true)],
            pdb(json!({"minAvailable": 2})),
        );
        let err = s.evict("ns", "a", &eviction("a"), false).unwrap_err();
        assert_eq!(err.code, 429);
        assert_eq!(
            err.body["details"]["causes"][0]["message"],
            "The disruption budget web needs 2 healthy pods and has 2 currently"
        );
        // A pending pod may always go.
        s.seed(pod("p", "Pending", false)).unwrap();
        s.evict("ns", "p", &eviction("p"), false).unwrap();
    }

    #[test]
    fn unready_running_pod_goes_when_the_budget_is_met() {
        let mut s = store_with(
            &[
                pod("a", "Running", true),
                pod("b", "Running", true),
                pod("c", "Running", false),
            ],
            pdb(json!({"minAvailable": 2})),
        );
        s.evict("ns", "c", &eviction("c"), false).unwrap();
        assert!(s.get(s.pods_index(), Some("ns"), "c").is_none());
    }

    #[test]
    fn eviction_body_must_name_the_pod() {
        let mut s = store_with(
            &[pod("a", "Running", true)],
            pdb(json!({"minAvailable": 0})),
        );
        let err = s.evict("ns", "a", &eviction("b"), false).unwrap_err();
        assert_eq!(err.code, 400);
        assert_eq!(
            err.body["message"],
            "name in URL does not match name in Eviction object"
        );
        let mut bad = eviction("a");
        bad["kind"] = json!("Pod");
        assert_eq!(s.evict("ns", "a", &bad, false).unwrap_err().code, 400);
    }
}
