//! The budgets to add ([`suggested_budgets`]), rendered as YAML ([`budgets_yaml`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::domain::audit::findings::plural;
use crate::domain::audit::model::{AuditNode, ClusterView};
use crate::domain::budget::Selector;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuggestedBudget {
    /// The workload it protects (`namespace/Kind/name`).
    pub workload: String,
    pub namespace: String,
    pub name: String,
    pub selector: Selector,
    pub max_unavailable: i32,
    pub replicas: i32,
}

/// The `maxUnavailable` of a suggested budget: a quarter of the replicas, at least 1, so that a
/// drain can always evict and never takes more than a quarter at once.
pub fn suggested_max_unavailable(replicas: i32) -> i32 {
    (replicas / 4).max(1)
}

/// One budget per workload with a pod on spot that no budget selects and whose selector is
/// known (bare pods get none: a budget cannot bring them back). The name is the workload's,
/// or `<name>-pdb` when a budget of that name exists in the namespace.
pub fn suggested_budgets(view: &ClusterView) -> Vec<SuggestedBudget> {
    let mut out = Vec::new();
    let mut taken: BTreeSet<(&str, String)> = view
        .budgets
        .iter()
        .map(|b| (b.namespace.as_str(), b.name.clone()))
        .collect();
    for w in &view.workloads {
        let Some(selector) = w.selector.as_ref().filter(|s| !s.is_empty()) else {
            continue;
        };
        let on_spot = w
            .pods
            .iter()
            .any(|p| view.node_of(p).is_some_and(AuditNode::is_spot));
        if !on_spot || !view.budgets_of(w).is_empty() {
            continue;
        }
        let mut key = (w.namespace.as_str(), w.name.clone());
        if taken.contains(&key) {
            key.1 += "-pdb";
        }
        taken.insert(key.clone());
        out.push(SuggestedBudget {
            workload: w.id(),
            namespace: w.namespace.clone(),
            name: key.1,
            selector: selector.clone(),
            max_unavailable: suggested_max_unavailable(w.replicas),
            replicas: w.replicas,
        });
    }
    out
}

/// A `policy/v1` PodDisruptionBudget, as `kubectl apply -f` reads it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PdbDocument<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: PdbMetadata<'a>,
    spec: PdbSpec<'a>,
}

#[derive(Serialize)]
struct PdbMetadata<'a> {
    name: &'a str,
    namespace: &'a str,
    labels: BTreeMap<&'static str, &'static str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PdbSpec<'a> {
    max_unavailable: i32,
    selector: &'a Selector,
}

/// One budget as a YAML document (no `---`), ready for `kubectl apply -f`.
pub fn budget_yaml(b: &SuggestedBudget) -> String {
    let document = PdbDocument {
        api_version: "policy/v1",
        kind: "PodDisruptionBudget",
        metadata: PdbMetadata {
            name: &b.name,
            namespace: &b.namespace,
            labels: BTreeMap::from([("app.kubernetes.io/managed-by", "forewarn")]),
        },
        spec: PdbSpec {
            max_unavailable: b.max_unavailable,
            selector: &b.selector,
        },
    };
    format!(
        "# {}: {}, no PodDisruptionBudget selects them\n{}",
        b.workload.replace('\n', " "),
        plural(b.replicas.max(0), "replica"),
        serde_saphyr::to_string(&document).expect("a budget is plain strings and numbers")
    )
}

/// Every budget as one multi-document YAML stream.
pub fn budgets_yaml(budgets: &[SuggestedBudget]) -> String {
    budgets
        .iter()
        .map(|b| format!("---\n{}", budget_yaml(b)))
        .collect()
}
