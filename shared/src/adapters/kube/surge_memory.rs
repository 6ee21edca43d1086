//! What a surge drain knows beyond its node's pods: the budgets' rounds a pod must leave time
//! for (listed once a minute per namespace), the order of a controller's pods, and the
//! namespaces whose placeholders the API did not make lately — what one execution
//! environment's drains remember from one pass to the next ([`SurgeMemory`]).

use std::collections::{BTreeMap, BTreeSet};

use ::kube::api::ListParams;
use ::kube::{Api, ResourceExt};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::api::rate_limit::Lane;
use super::api::retry::with_retry;
use super::connect::ClusterClient;
use crate::domain::admission::RefusedBy;
use crate::domain::budget::Budget;

/// The controller of `pod` (kind, name), unless it has none or it is a DaemonSet.
pub(crate) fn controller(pod: &Pod) -> Option<(&str, &str)> {
    (pod.owner_references().iter())
        .find(|r| r.controller == Some(true) && r.kind != "DaemonSet")
        .map(|r| (r.kind.as_str(), r.name.as_str()))
}

/// How long a namespace's budgets, once listed, are taken as they were: a budget's selector and
/// size change rarely, and a list per drain would cost the API server a request per node.
const BUDGETS_KEPT: chrono::Duration = chrono::Duration::seconds(60);

/// What an executor's surge drains remember from one pass to the next (one execution
/// environment's): the budgets that let their pods go only in rounds, per namespace, as last
/// listed and when (kept [`BUDGETS_KEPT`] by the executor's clock; one list at a time); and the
/// namespaces whose pods' placeholders the API did not make, until when (see [`REFUSED_KEPT`]).
#[derive(Debug, Default)]
pub(crate) struct SurgeMemory {
    budgets: tokio::sync::Mutex<KeptBudgets>,
    refused: std::sync::Mutex<BTreeMap<String, DateTime<Utc>>>,
    /// The (namespace, refusing step) pairs already reported (logged, an Event on a node): each
    /// once per execution environment.
    reported: std::sync::Mutex<BTreeSet<(String, RefusedBy)>>,
}

/// How long the pods of a namespace whose placeholder the API did not make (any answer but
/// AlreadyExists) get no other one asked for. The cause is seldom one pod's: no grant to create
/// pods in forewarn's namespace (a cluster before 1.30, where `forewarn deploy` applies no
/// placeholder grant), a Pod Security level or admission policy that refuses what the
/// namespace's pods copy into their placeholders, an admission webhook that is down. Asking
/// again for each pod of a mass interruption would cost the API server one request and the log
/// one warning per pod, for nothing. (A create that got no answer within the step's budget is
/// not remembered: the wait may be this environment's own rate limit.)
const REFUSED_KEPT: chrono::Duration = chrono::Duration::seconds(60);

impl SurgeMemory {
    /// Whether placeholders in `namespace` were refused less than [`REFUSED_KEPT`] before `now`.
    pub(crate) fn refuses(&self, namespace: &str, now: DateTime<Utc>) -> bool {
        let refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        refused.get(namespace).is_some_and(|until| now < *until)
    }

    /// Whether a refusal of a placeholder of `namespace` by `by` is the first this environment
    /// saw (then it is reported: the log, a Warning Event on the node); remembered.
    pub(crate) fn first_report(&self, namespace: &str, by: &RefusedBy) -> bool {
        let mut reported = self.reported.lock().unwrap_or_else(|p| p.into_inner());
        reported.insert((namespace.to_string(), by.clone()))
    }

    /// A placeholder for a pod of `namespace` was not made at `now`.
    pub(crate) fn refused_at(&self, namespace: &str, now: DateTime<Utc>) {
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        refused.insert(namespace.to_string(), now + REFUSED_KEPT);
    }
}

/// Per namespace: when its budgets were listed, and the ones that let their pods go in rounds.
type KeptBudgets = BTreeMap<String, (DateTime<Utc>, Vec<Budget>)>;

/// Per pod uid of `pods` (a drain's surging pods), one earlier round when a budget selects it
/// that cannot let all of its pods go at once (see [`crate::domain::surge`]). One list of
/// budgets per namespace, kept a minute; a list the API refuses (an RBAC without the grant)
/// counts no round, and is logged; one that fails otherwise counts none in this pass only.
pub(crate) async fn budget_rounds(
    clients: &ClusterClient,
    memory: &SurgeMemory,
    pods: &[(&Pod, &str)],
) -> BTreeMap<String, usize> {
    let namespaces: BTreeSet<&str> = pods
        .iter()
        .map(|(p, _)| p.metadata.namespace.as_deref().unwrap_or("default"))
        .collect();
    let mut serial: Vec<Budget> = Vec::new();
    let mut kept = memory.budgets.lock().await;
    for ns in namespaces {
        let now = clients.clock().now();
        if let Some((at, budgets)) = kept.get(ns)
            && now - *at < BUDGETS_KEPT
        {
            serial.extend(budgets.iter().cloned());
            continue;
        }
        let client = match clients.client().await {
            Ok(client) => client,
            Err(e) => {
                tracing::warn!(error = %e, "budgets not read: this pass's placeholders wait without their rounds");
                break;
            }
        };
        let api: Api<PodDisruptionBudget> = Api::namespaced(client, ns);
        let what = format!("poddisruptionbudgets in {ns}");
        let params = ListParams::default();
        let later = clients.in_lane(Lane::Later);
        let listed = match with_retry(&later, "list", &what, || api.list(&params)).await {
            Ok(list) => list.items,
            Err(e) if matches!(e.status, Some(401 | 403 | 404)) => {
                tracing::warn!(error = %e, "budgets not read: placeholders wait without their rounds");
                Vec::new()
            }
            // Anything else (the API server in trouble): this drain's placeholders go without
            // the rounds; nothing is kept, so the namespace's next drain lists again.
            Err(e) => {
                tracing::warn!(error = %e, "budgets not read: this pass's placeholders wait without their rounds");
                continue;
            }
        };
        let budgets: Vec<Budget> = listed
            .iter()
            .filter_map(|pdb| {
                let expected = pdb
                    .status
                    .as_ref()
                    .map_or(0, |s| i64::from(s.expected_pods));
                let budget = super::budget::budget(pdb).ok()?;
                (budget.allowed_when_healthy(expected) < expected).then_some(budget)
            })
            .collect();
        serial.extend(budgets.iter().cloned());
        kept.insert(ns.to_string(), (now, budgets));
    }
    drop(kept);
    pods.iter()
        .filter(|(pod, _)| {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            serial.iter().any(|b| b.selects(ns, pod.labels()))
        })
        .map(|(_, uid)| (uid.to_string(), 1))
        .collect()
}

/// Per pod uid, how many pods of the same controller come before it on the node (name order):
/// the rounds of a budget that lets one go at a time (see [`crate::domain::surge`]).
pub(crate) fn earlier_rounds(pods: &[&Pod]) -> BTreeMap<String, usize> {
    // ((namespace, controller kind and name), pod name, uid) of each pod, in that order.
    let mut pods: Vec<_> = (pods.iter())
        .filter_map(|p| {
            let (ns, name) = (p.metadata.namespace.as_deref(), p.metadata.name.as_deref());
            let owner = (ns.unwrap_or_default(), controller(p)?);
            Some((owner, name.unwrap_or_default(), p.metadata.uid.as_deref()?))
        })
        .collect();
    pods.sort();
    let mut before: BTreeMap<_, usize> = BTreeMap::new();
    (pods.into_iter())
        .map(|(owner, _, uid)| {
            let k = before.entry(owner).or_default();
            *k += 1;
            (uid.to_string(), *k - 1)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn rounds_count_the_pods_of_one_controller_before_each() {
        let p = |name: &str, owner: &str| {
            pod(
                json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}"),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": owner, "uid": "r", "controller": true}]}}),
            )
        };
        let (a, b, c) = (p("web-b", "web"), p("web-a", "web"), p("db-0", "db"));
        let rounds = earlier_rounds(&[&a, &b, &c]);
        assert_eq!(rounds["u-web-a"], 0);
        assert_eq!(rounds["u-web-b"], 1);
        assert_eq!(rounds["u-db-0"], 0);
    }
}
