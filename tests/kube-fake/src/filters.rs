//! The scheduler's node filters that do not count resources: `NodeUnschedulable`,
//! `TaintToleration` and `NodeAffinity` (nodeSelector and required node affinity), with their
//! real failure reasons. The resource filter (`NodeResourcesFit`) is in `scheduler`.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value;

/// `node(s) were unschedulable` (NodeUnschedulable).
pub(crate) const UNSCHEDULABLE: &str = "node(s) were unschedulable";
/// NodeAffinity's reason, for nodeSelector and required affinity alike.
pub(crate) const AFFINITY: &str = "node(s) didn't match Pod's node affinity/selector";
/// The taint a cordoned node carries (the pod must tolerate it to go there).
pub(crate) const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// One node taint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

impl Taint {
    pub fn from_value(v: &Value) -> Self {
        let s = |f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_string();
        Self {
            key: s("key"),
            value: s("value"),
            effect: s("effect"),
        }
    }

    /// TaintToleration's reason for a node whose taint the pod does not tolerate.
    pub fn reason(&self) -> String {
        format!(
            "node(s) had untolerated taint {{{}: {}}}",
            self.key, self.value
        )
    }
}

/// One pod toleration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Toleration {
    pub key: String,
    pub operator: String,
    pub value: String,
    pub effect: String,
}

impl Toleration {
    fn from_value(v: &Value) -> Self {
        let s = |f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_string();
        Self {
            key: s("key"),
            operator: s("operator"),
            value: s("value"),
            effect: s("effect"),
        }
    }

    /// `Toleration.ToleratesTaint`: an empty effect matches all effects, an empty key (with
    /// `Exists`) all keys.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if !self.effect.is_empty() && self.effect != taint.effect {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator.as_str() {
            "" | "Equal" => self.value == taint.value,
            "Exists" => true,
            _ => false,
        }
    }
}

/// One `NodeSelectorRequirement`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    operator: String,
    values: Vec<String>,
}

impl Requirement {
    fn from_value(v: &Value) -> Self {
        Self {
            key: v
                .get("key")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            operator: v
                .get("operator")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            values: crate::selectors::string_list(v.get("values")),
        }
    }

    /// Against a value that may be absent (a label, or a field).
    fn matches(&self, value: Option<&str>) -> bool {
        let number = |s: &str| s.parse::<i64>().ok();
        match self.operator.as_str() {
            "In" => value.is_some_and(|v| self.values.iter().any(|w| w == v)),
            "NotIn" => value.is_none_or(|v| self.values.iter().all(|w| w != v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            "Gt" | "Lt" => {
                let (Some(have), [want]) = (value.and_then(number), self.values.as_slice()) else {
                    return false;
                };
                let Some(want) = number(want) else {
                    return false;
                };
                if self.operator == "Gt" {
                    have > want
                } else {
                    have < want
                }
            }
            _ => false,
        }
    }
}

/// One `NodeSelectorTerm`: its expressions and fields are ANDed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Term {
    expressions: Vec<Requirement>,
    fields: Vec<Requirement>,
}

impl Term {
    fn from_value(v: &Value) -> Self {
        let reqs = |f: &str| {
            v.get(f)
                .and_then(Value::as_array)
                .map(|rs| rs.iter().map(Requirement::from_value).collect())
                .unwrap_or_default()
        };
        Self {
            expressions: reqs("matchExpressions"),
            fields: reqs("matchFields"),
        }
    }

    /// An empty term matches nothing, as in `nodeaffinity`.
    fn matches(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        if self.expressions.is_empty() && self.fields.is_empty() {
            return false;
        }
        self.expressions
            .iter()
            .all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
            && self.fields.iter().all(|r| {
                // `metadata.name` is the only field node selectors support.
                r.key == "metadata.name" && r.matches(Some(name))
            })
    }
}

/// Where a pod may go: what the non-resource filters read from its spec.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Placement {
    node_selector: Vec<(String, String)>,
    /// The required affinity's terms (ORed), when it has one.
    required: Option<Vec<Term>>,
    tolerations: Vec<Toleration>,
}

impl Placement {
    pub fn from_spec(spec: &Value) -> Self {
        let node_selector = crate::selectors::string_map(spec.get("nodeSelector"));
        let required = spec
            .pointer("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution")
            .filter(|r| !r.is_null())
            .map(|r| {
                r.get("nodeSelectorTerms")
                    .and_then(Value::as_array)
                    .map(|ts| ts.iter().map(Term::from_value).collect())
                    .unwrap_or_default()
            });
        let tolerations = spec
            .get("tolerations")
            .and_then(Value::as_array)
            .map(|ts| ts.iter().map(Toleration::from_value).collect())
            .unwrap_or_default();
        Self {
            node_selector,
            required,
            tolerations,
        }
    }

    /// Whether some toleration tolerates the taint.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        self.tolerations.iter().any(|t| t.tolerates(taint))
    }

    /// NodeUnschedulable: may the pod go to a cordoned node?
    pub fn tolerates_unschedulable(&self) -> bool {
        self.tolerates(&Taint {
            key: UNSCHEDULABLE_TAINT.into(),
            value: String::new(),
            effect: "NoSchedule".into(),
        })
    }

    /// TaintToleration: the first `NoSchedule` or `NoExecute` taint the pod does not tolerate.
    pub fn untolerated<'a>(&self, taints: &'a [Taint]) -> Option<&'a Taint> {
        taints
            .iter()
            .find(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute") && !self.tolerates(t))
    }

    /// NodeAffinity: the nodeSelector and the required node affinity.
    pub fn matches_node(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        let selector_ok = self
            .node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v));
        selector_ok
            && self
                .required
                .as_ref()
                .is_none_or(|terms| terms.iter().any(|t| t.matches(name, labels)))
    }

    /// The three filters in the scheduler's order; the failing one's reason.
    pub fn check(&self, node: &NodeShape<'_>) -> Result<(), Cow<'static, str>> {
        if node.unschedulable && !self.tolerates_unschedulable() {
            return Err(Cow::Borrowed(UNSCHEDULABLE));
        }
        if let Some(taint) = self.untolerated(node.taints) {
            return Err(Cow::Owned(taint.reason()));
        }
        if !self.matches_node(node.name, node.labels) {
            return Err(Cow::Borrowed(AFFINITY));
        }
        Ok(())
    }
}

/// What the non-resource filters read from a node.
pub(crate) struct NodeShape<'a> {
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub taints: &'a [Taint],
    pub unschedulable: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    fn affinity(terms: Value) -> Placement {
        Placement::from_spec(&json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}))
    }

    #[test]
    fn required_affinity_ors_terms_and_ands_expressions() {
        let p = affinity(json!([
            {"matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a", "b"]},
                {"key": "spot", "operator": "DoesNotExist"}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["special"]}]},
        ]));
        assert!(p.matches_node("n", &labels(&[("zone", "a")])));
        assert!(!p.matches_node("n", &labels(&[("zone", "a"), ("spot", "")])));
        assert!(!p.matches_node("n", &labels(&[("zone", "c")])));
        assert!(p.matches_node("special", &labels(&[("zone", "c")])));
    }

    #[test]
    fn operators_follow_the_label_selector_rules() {
        let one = |op: &str, values: Value, l: &[(&str, &str)]| {
            affinity(
                json!([{"matchExpressions": [{"key": "k", "operator": op, "values": values}]}]),
            )
            .matches_node("n", &labels(l))
        };
        assert!(one("NotIn", json!(["x"]), &[]));
        assert!(!one("NotIn", json!(["x"]), &[("k", "x")]));
        assert!(one("Exists", json!([]), &[("k", "")]));
        assert!(one("Gt", json!(["3"]), &[("k", "4")]));
        assert!(!one("Gt", json!(["3"]), &[("k", "3")]));
        assert!(one("Lt", json!(["3"]), &[("k", "-1")]));
        assert!(!one("Lt", json!(["3"]), &[("k", "x")]));
        assert!(!one("Lt", json!(["3"]), &[]));
        // No terms, or an empty term, matches nothing.
        assert!(!affinity(json!([])).matches_node("n", &labels(&[])));
        assert!(!affinity(json!([{}])).matches_node("n", &labels(&[])));
    }

    #[test]
    fn tolerations_match_taints_like_the_api_helpers() {
        let taint = Taint {
            key: "spot".into(),
            value: "true".into(),
            effect: "NoSchedule".into(),
        };
        let tol = |v: Value| Toleration::from_value(&v).tolerates(&taint);
        assert!(tol(
            json!({"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"})
        ));
        assert!(tol(json!({"key": "spot", "value": "true"})));
        assert!(!tol(json!({"key": "spot", "value": "false"})));
        assert!(tol(json!({"key": "spot", "operator": "Exists"})));
        assert!(!tol(
            json!({"key": "spot", "operator": "Exists", "effect": "NoExecute"})
        ));
        assert!(tol(json!({"operator": "Exists"})));
        assert!(!tol(json!({"key": "other", "operator": "Exists"})));
        let p = Placement::from_spec(&json!({}));
        let soft = Taint {
            effect: "PreferNoSchedule".into(),
            ..taint.clone()
        };
        assert_eq!(p.untolerated(std::slice::from_ref(&soft)), None);
        assert_eq!(p.untolerated(&[soft, taint.clone()]), Some(&taint));
        assert_eq!(taint.reason(), "node(s) had untolerated taint {spot: true}");
    }
}
