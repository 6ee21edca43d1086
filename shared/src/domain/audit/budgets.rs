//! The budgets to add ([`suggested_budgets`]), rendered as YAML ([`budgets_yaml`]).

use std::collections::BTreeSet;

use crate::domain::audit::model::{AuditNode, ClusterView, Selector};
use crate::domain::audit::rules::plural;

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

/// A YAML double-quoted scalar (JSON string syntax is valid YAML).
pub(super) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One budget as a YAML document (no `---`), ready for `kubectl apply -f`.
pub fn budget_yaml(b: &SuggestedBudget) -> String {
    let mut y = String::new();
    y.push_str(&format!(
        "# {}: {}, no PodDisruptionBudget selects them\n",
        b.workload.replace('\n', " "),
        plural(b.replicas.max(0) as usize, "replica")
    ));
    y.push_str("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n");
    y.push_str(&format!("  name: {}\n", quote(&b.name)));
    y.push_str(&format!("  namespace: {}\n", quote(&b.namespace)));
    y.push_str("  labels:\n    app.kubernetes.io/managed-by: \"forewarn\"\n");
    y.push_str("spec:\n");
    y.push_str(&format!("  maxUnavailable: {}\n", b.max_unavailable));
    y.push_str("  selector:\n");
    if !b.selector.match_labels.is_empty() {
        y.push_str("    matchLabels:\n");
        for (k, v) in &b.selector.match_labels {
            y.push_str(&format!("      {}: {}\n", quote(k), quote(v)));
        }
    }
    if !b.selector.match_expressions.is_empty() {
        y.push_str("    matchExpressions:\n");
        for r in &b.selector.match_expressions {
            y.push_str(&format!("      - key: {}\n", quote(&r.key)));
            y.push_str(&format!("        operator: {}\n", r.operator.as_str()));
            if !r.values.is_empty() {
                let values: Vec<String> = r.values.iter().map(|v| quote(v)).collect();
                y.push_str(&format!("        values: [{}]\n", values.join(", ")));
            }
        }
    }
    y
}

/// Every budget as one multi-document YAML stream.
pub fn budgets_yaml(budgets: &[SuggestedBudget]) -> String {
    budgets
        .iter()
        .map(|b| format!("---\n{}", budget_yaml(b)))
        .collect()
}
