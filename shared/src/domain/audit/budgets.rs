//! The budgets to add ([`suggested_budgets`]), rendered as YAML ([`budgets_yaml`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::domain::audit::findings::plural;
use crate::domain::audit::model::{AuditNode, ClusterView, Selector};

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
    let mut taken: BTreeSet<(String, String)> = view
        .budgets
        .iter()
        .map(|b| (b.namespace.clone(), b.name.clone()))
        .collect();
    for w in &view.workloads {
        let Some(selector) = w.selector.as_ref().filter(|s| !s.is_empty()) else {
            continue;
        };
        let on_spot = w.pods.iter().any(|p| {
            p.node
                .as_ref()
                .and_then(|n| view.nodes.get(n))
                .is_some_and(AuditNode::is_spot)
        });
        let selected = view
            .budgets
            .iter()
            .any(|b| w.pods.iter().any(|p| b.selects(&w.namespace, &p.labels)));
        if !on_spot || selected {
            continue;
        }
        let mut name = w.name.clone();
        if taken.contains(&(w.namespace.clone(), name.clone())) {
            name = format!("{}-pdb", w.name);
        }
        taken.insert((w.namespace.clone(), name.clone()));
        out.push(SuggestedBudget {
            workload: w.id(),
            namespace: w.namespace.clone(),
            name,
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
    selector: SelectorDocument<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SelectorDocument<'a> {
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    match_labels: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    match_expressions: Vec<RequirementDocument<'a>>,
}

#[derive(Serialize)]
struct RequirementDocument<'a> {
    key: &'a str,
    operator: &'static str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    values: &'a [String],
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
            selector: SelectorDocument {
                match_labels: &b.selector.match_labels,
                match_expressions: b
                    .selector
                    .match_expressions
                    .iter()
                    .map(|r| RequirementDocument {
                        key: &r.key,
                        operator: r.operator.as_str(),
                        values: &r.values,
                    })
                    .collect(),
            },
        },
    };
    format!(
        "# {}: {}, no PodDisruptionBudget selects them\n{}",
        b.workload.replace('\n', " "),
        plural(b.replicas.max(0) as usize, "replica"),
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
