//! PodDisruptionBudgets as the disruption controller reads them: their label selectors, their
//! int-or-percent numbers and the evictions they allow: what the audit checks workloads against.
//! (A drain's surge reads a budget's status as the controller wrote it, not these: see
//! `adapters::kube::surge::budget_rounds`.)

use std::collections::BTreeMap;

use serde::Serialize;

use crate::domain::names::string_forms;

/// A label selector operator.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, strum::IntoStaticStr, strum::VariantArray,
)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

string_forms!(Operator, "a selector operator");

/// One `matchExpressions` requirement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// A `metav1.LabelSelector` (serialized as the API writes it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Selector {
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<Requirement>,
}

impl Selector {
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Whether the labels match every term.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator {
                    Operator::In => value.is_some_and(|v| r.values.contains(v)),
                    Operator::NotIn => value.is_none_or(|v| !r.values.contains(v)),
                    Operator::Exists => value.is_some(),
                    Operator::DoesNotExist => value.is_none(),
                }
            })
    }
}

/// An int-or-percent field of a budget, displayed in its string form (`2`, `50%`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::Display)]
pub enum IntOrPercent {
    #[strum(to_string = "{0}")]
    Int(i32),
    #[strum(to_string = "{0}%")]
    Percent(i32),
}

/// The string form of an int-or-string that is neither.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is neither an integer nor a percentage")]
pub struct NotIntOrPercent(pub String);

impl IntOrPercent {
    /// Parses the string form (`"50%"`, `"2"`) of an int-or-string.
    pub fn parse(s: &str) -> Result<IntOrPercent, NotIntOrPercent> {
        let t = s.trim();
        let bad = || NotIntOrPercent(s.to_string());
        match t.strip_suffix('%') {
            Some(p) => p
                .parse::<i32>()
                .ok()
                .filter(|p| *p >= 0)
                .map(IntOrPercent::Percent)
                .ok_or_else(bad),
            None => t.parse::<i32>().map(IntOrPercent::Int).map_err(|_| bad()),
        }
    }

    /// `GetScaledValueFromIntOrPercent(v, total, roundUp=true)`.
    pub fn scaled(self, total: i64) -> i64 {
        match self {
            IntOrPercent::Int(n) => i64::from(n),
            IntOrPercent::Percent(p) => (i64::from(p) * total + 99) / 100,
        }
    }
}

/// A PodDisruptionBudget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    pub namespace: String,
    pub name: String,
    /// `None` (or empty) selects nothing, as in `policy/v1`.
    pub selector: Option<Selector>,
    pub min_available: Option<IntOrPercent>,
    pub max_unavailable: Option<IntOrPercent>,
}

impl Budget {
    /// Whether it selects a pod of `namespace` with these labels.
    pub fn selects(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.namespace == namespace
            && self
                .selector
                .as_ref()
                .is_some_and(|s| !s.is_empty() && s.matches(labels))
    }

    /// The evictions it allows when all `expected` pods are healthy (the disruption
    /// controller's arithmetic: `maxUnavailable` wins over `minAvailable`; neither allows
    /// everything).
    pub fn allowed_when_healthy(&self, expected: i64) -> i64 {
        if expected <= 0 {
            return 0;
        }
        let desired = match (self.max_unavailable, self.min_available) {
            (Some(mu), _) => (expected - mu.scaled(expected)).max(0),
            (None, Some(ma)) => ma.scaled(expected),
            (None, None) => 0,
        };
        (expected - desired).max(0)
    }
}
