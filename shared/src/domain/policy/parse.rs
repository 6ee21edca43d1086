//! [`Policy::parse`]: YAML into a [`Policy`], every error naming the field and the value.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{Adaptive, Behaviour, Policy, PolicyAction, Rule};
use crate::domain::event::EventKind;

/// A policy refused: where (`rules[0].actions.spot-interruption`) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct PolicyError {
    pub path: String,
    pub message: String,
}

fn err(path: &str, message: impl Into<String>) -> PolicyError {
    PolicyError {
        path: path.to_string(),
        message: message.into(),
    }
}

fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// The mapping at `path`, refusing keys other than `known`.
fn mapping<'v>(
    v: &'v Value,
    path: &str,
    known: &[&str],
) -> Result<&'v serde_json::Map<String, Value>, PolicyError> {
    let Value::Object(map) = v else {
        return Err(err(
            path,
            format!("expected a mapping, found {}", type_of(v)),
        ));
    };
    if let Some(k) = map.keys().find(|k| !known.contains(&k.as_str())) {
        let at = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        return Err(err(
            &at,
            format!("unknown field (known: {})", known.join(", ")),
        ));
    }
    Ok(map)
}

/// A scalar as text (label values may be written as numbers or booleans).
fn text(v: &Value, path: &str) -> Result<String, PolicyError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        other => Err(err(
            path,
            format!("expected text, found {}", type_of(other)),
        )),
    }
}

impl Policy {
    /// The policy `yaml` says (an empty document: no rules, the adaptive defaults).
    pub fn parse(yaml: &str) -> Result<Policy, PolicyError> {
        let doc: Value = serde_saphyr::from_str::<Option<Value>>(yaml)
            .map_err(|e| err("policy", format!("not YAML: {e}")))?
            .unwrap_or(Value::Null);
        if doc.is_null() {
            return Ok(Policy::default());
        }
        let top = mapping(&doc, "", &["rules", "rebalance"])?;
        let adaptive = match top.get("rebalance") {
            None | Some(Value::Null) => Adaptive::default(),
            Some(r) => match mapping(r, "rebalance", &["adaptive"])?.get("adaptive") {
                None | Some(Value::Null) => Adaptive::default(),
                Some(a) => adaptive(a)?,
            },
        };
        let rules = match top.get("rules") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, r)| rule(r, &format!("rules[{i}]")))
                .collect::<Result<Vec<_>, _>>()?,
            Some(other) => {
                return Err(err(
                    "rules",
                    format!("expected a list, found {}", type_of(other)),
                ));
            }
        };
        for (i, r) in rules.iter().enumerate() {
            if rules[..i].iter().any(|o| o.name == r.name) {
                return Err(err(
                    &format!("rules[{i}].name"),
                    format!("\"{}\" names an earlier rule too", r.name),
                ));
            }
        }
        Ok(Policy { rules, adaptive })
    }
}

fn rule(v: &Value, path: &str) -> Result<Rule, PolicyError> {
    let map = mapping(
        v,
        path,
        &[
            "name",
            "nodes",
            "actions",
            "delete-owned-on",
            "surge",
            "exclude-from-load-balancers",
        ],
    )?;
    let name = match map.get("name") {
        Some(n) => text(n, &format!("{path}.name"))?.trim().to_string(),
        None => String::new(),
    };
    if name.is_empty() {
        return Err(err(&format!("{path}.name"), "every rule needs a name"));
    }
    let mut nodes = BTreeMap::new();
    match map.get("nodes") {
        None | Some(Value::Null) => {}
        Some(n) => {
            let Value::Object(labels) = n else {
                return Err(err(
                    &format!("{path}.nodes"),
                    format!("expected a mapping of node labels, found {}", type_of(n)),
                ));
            };
            for (k, v) in labels {
                nodes.insert(k.clone(), text(v, &format!("{path}.nodes.{k}"))?);
            }
        }
    }
    let mut actions = BTreeMap::new();
    match map.get("actions") {
        None | Some(Value::Null) => {}
        Some(a) => {
            let Value::Object(by_kind) = a else {
                return Err(err(
                    &format!("{path}.actions"),
                    format!("expected a mapping of event kinds, found {}", type_of(a)),
                ));
            };
            for (k, v) in by_kind {
                let at = format!("{path}.actions.{k}");
                let kind = kind_at(k, &at)?;
                let action =
                    PolicyAction::parse(&text(v, &at)?).map_err(|m| err(&at, m.to_string()))?;
                if action == PolicyAction::Adaptive && kind != EventKind::RebalanceRecommendation {
                    return Err(err(
                        &at,
                        "\"adaptive\" is for rebalance-recommendation only",
                    ));
                }
                actions.insert(kind, action);
            }
        }
    }
    let kinds_at = |key: &str| {
        map.get(key)
            .filter(|v| !v.is_null())
            .map(|v| kinds(v, &format!("{path}.{key}")))
            .transpose()
    };
    let behaviour = Behaviour {
        delete_owned_on: kinds_at("delete-owned-on")?,
        surge: kinds_at("surge")?,
        exclude_from_load_balancers: match map.get("exclude-from-load-balancers") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(other) => {
                return Err(err(
                    &format!("{path}.exclude-from-load-balancers"),
                    format!("expected true or false, found {}", type_of(other)),
                ));
            }
        },
    };
    Ok(Rule {
        name,
        nodes,
        actions,
        behaviour,
    })
}

/// An event kind a rule may name (`at` names the field).
fn kind_at(k: &str, at: &str) -> Result<EventKind, PolicyError> {
    k.parse::<EventKind>()
        .ok()
        .filter(|k| k.configurable())
        .ok_or_else(|| {
            let kinds: Vec<&str> = EventKind::ALL
                .iter()
                .filter(|k| k.configurable())
                .map(|k| k.as_str())
                .collect();
            err(
                at,
                format!("unknown event kind (known: {})", kinds.join(", ")),
            )
        })
}

/// A list of event kinds (`[]`: none).
fn kinds(v: &Value, path: &str) -> Result<BTreeSet<EventKind>, PolicyError> {
    let Value::Array(items) = v else {
        return Err(err(
            path,
            format!("expected a list of event kinds, found {}", type_of(v)),
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let at = format!("{path}[{i}]");
            kind_at(&text(k, &at)?, &at)
        })
        .collect()
}

fn adaptive(v: &Value) -> Result<Adaptive, PolicyError> {
    let path = "rebalance.adaptive";
    let map = mapping(
        v,
        path,
        &["window", "threshold", "min-samples", "days", "otherwise"],
    )?;
    let mut a = Adaptive::default();
    if let Some(w) = map.get("window") {
        let at = format!("{path}.window");
        let t = text(w, &at)?;
        a.window = crate::domain::time::parse_duration(&t)
            .ok()
            .filter(|d| *d > chrono::Duration::zero())
            .ok_or_else(|| {
                err(
                    &at,
                    format!("\"{t}\" is not a positive duration (e.g. 30m)"),
                )
            })?;
    }
    if let Some(t) = map.get("threshold") {
        let at = format!("{path}.threshold");
        a.threshold = t
            .as_f64()
            .filter(|x| (0.0..=1.0).contains(x))
            .ok_or_else(|| err(&at, format!("{t} is not a share from 0 to 1")))?;
    }
    if let Some(n) = map.get("min-samples") {
        let at = format!("{path}.min-samples");
        a.min_samples = n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n >= 1)
            .ok_or_else(|| err(&at, format!("{n} is not a whole number from 1")))?;
    }
    if let Some(n) = map.get("days") {
        let at = format!("{path}.days");
        a.days = n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| (1..=365).contains(n))
            .ok_or_else(|| err(&at, format!("{n} is not a number of days from 1 to 365")))?;
    }
    if let Some(o) = map.get("otherwise") {
        let at = format!("{path}.otherwise");
        a.otherwise = PolicyAction::parse(&text(o, &at)?).map_err(|m| err(&at, m.to_string()))?;
        if a.otherwise == PolicyAction::Adaptive {
            return Err(err(&at, "\"otherwise\" cannot be adaptive itself"));
        }
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    const EXAMPLE: &str = r#"
rules:                          # first match wins; a node no rule matches keeps the defaults
  - name: batch                 # shown in reports and Events
    nodes: {karpenter.sh/nodepool: batch}   # node labels, all must match; {} matches every node
    actions:                    # per event kind; kinds not named keep the default
      rebalance-recommendation: none
      spot-interruption: cordon-drain
    delete-owned-on: []         # kinds whose owned nodes go through their NodeClaim or Machine
    surge: [spot-interruption]  # kinds whose drains make room first (placeholders)
    exclude-from-load-balancers: false   # its cordoned nodes stay in external load balancers
  - name: web
    nodes: {eks.amazonaws.com/nodegroup: web-spot}
    actions:
      rebalance-recommendation: adaptive
      scheduled-change: cordon-for 6h
rebalance:
  adaptive:
    window: 30m        # an interruption of the same instance within this time "follows" a recommendation
    threshold: 0.5     # drain when at least this share of the pool's recommendations were followed
    min-samples: 5     # fewer recommendations than this in the pool's history: act as `otherwise`
    days: 30           # how far back the history is read
    otherwise: cordon-for 30m
"#;

    /// A rule's behaviour fields are read, and a bad one names its field.
    #[test]
    fn a_rules_behaviour() {
        let p = Policy::parse(
            "rules:\n  - name: gpu\n    nodes: {pool: gpu}\n    delete-owned-on: []\n    \
             surge: [spot-interruption, capacity-block-expiration]\n    \
             exclude-from-load-balancers: false\n",
        )
        .unwrap();
        let b = &p.rules[0].behaviour;
        assert_eq!(b.delete_owned_on, Some(BTreeSet::new()));
        assert_eq!(
            b.surge,
            Some(BTreeSet::from([
                EventKind::SpotInterruption,
                EventKind::CapacityBlockExpiration
            ]))
        );
        assert_eq!(b.exclude_from_load_balancers, Some(false));
        let gpu = BTreeMap::from([("pool".to_string(), "gpu".to_string())]);
        assert_eq!(p.behaviour(&gpu), b);
        assert_eq!(p.behaviour(&BTreeMap::new()), &Behaviour::default());
        for (yaml, says) in [
            (
                "surge: spot-interruption",
                "rules[0].surge: expected a list of event kinds, found a string",
            ),
            (
                "surge: [evaporate]",
                "rules[0].surge[0]: unknown event kind",
            ),
            (
                "exclude-from-load-balancers: maybe",
                "rules[0].exclude-from-load-balancers: expected true or false, found a string",
            ),
            ("taint: x", "rules[0].taint: unknown field"),
        ] {
            let e = Policy::parse(&format!("rules:\n  - name: r\n    {yaml}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(says), "{yaml}: {e}");
        }
    }

    #[test]
    fn the_documented_example_reads() {
        let p = Policy::parse(EXAMPLE).unwrap();
        assert_eq!(p.rules.len(), 2);
        assert_eq!(p.rules[0].name, "batch");
        assert_eq!(p.rules[0].nodes["karpenter.sh/nodepool"], "batch");
        assert_eq!(
            p.rules[0].actions[&EventKind::RebalanceRecommendation],
            PolicyAction::None
        );
        assert_eq!(
            p.rules[1].actions[&EventKind::ScheduledChange],
            PolicyAction::CordonFor(Duration::hours(6))
        );
        assert_eq!(
            p.rules[0].behaviour.surge,
            Some(BTreeSet::from([EventKind::SpotInterruption]))
        );
        assert_eq!(p.adaptive, Adaptive::default());
        assert!(p.uses_adaptive());
        let page = include_str!("../../../../docs/concepts/policies.md");
        assert!(
            page.contains(EXAMPLE.trim()),
            "docs/concepts/policies.md shows this example"
        );
    }

    #[test]
    fn empty_policies_have_no_rules() {
        assert_eq!(Policy::parse("").unwrap(), Policy::default());
        assert_eq!(Policy::parse("rules: []\n").unwrap(), Policy::default());
        assert!(Policy::parse("rules:\n").unwrap().is_empty());
    }

    #[test]
    fn bad_policies_name_the_field_and_the_value() {
        let cases: &[(&str, &str)] = &[
            (
                "rules:\n- name: a\n  actions: {spot-interruption: evaporate}\n",
                "rules[0].actions.spot-interruption: unknown action \"evaporate\"",
            ),
            (
                "rules:\n- name: a\n  actions: {spot-interuption: cordon}\n",
                "rules[0].actions.spot-interuption: unknown event kind",
            ),
            (
                "rules:\n- name: a\n  actions: {spot-interruption: adaptive}\n",
                "rules[0].actions.spot-interruption: \"adaptive\" is for rebalance-recommendation only",
            ),
            (
                "rules:\n- name: a\n  actions: {scheduled-change: cordon-for soon}\n",
                "rules[0].actions.scheduled-change: \"cordon-for soon\": `soon` is not a positive duration",
            ),
            (
                "rules:\n- nodes: {}\n",
                "rules[0].name: every rule needs a name",
            ),
            (
                "rules:\n- name: a\n- name: a\n",
                "rules[1].name: \"a\" names an earlier rule too",
            ),
            (
                "rules:\n- name: a\n  node: {x: y}\n",
                "rules[0].node: unknown field (known: name, nodes, actions, delete-owned-on, surge, \
                 exclude-from-load-balancers)",
            ),
            (
                "rules:\n- name: a\n  nodes: [x]\n",
                "rules[0].nodes: expected a mapping of node labels, found a list",
            ),
            ("rules: {}\n", "rules: expected a list, found a mapping"),
            (
                "rule: []\n",
                "rule: unknown field (known: rules, rebalance)",
            ),
            (
                "rebalance: {adaptive: {threshold: 1.5}}\n",
                "rebalance.adaptive.threshold: 1.5 is not a share from 0 to 1",
            ),
            (
                "rebalance: {adaptive: {min-samples: 0}}\n",
                "rebalance.adaptive.min-samples: 0 is not a whole number from 1",
            ),
            (
                "rebalance: {adaptive: {days: 400}}\n",
                "rebalance.adaptive.days: 400 is not a number of days from 1 to 365",
            ),
            (
                "rebalance: {adaptive: {window: 0s}}\n",
                "rebalance.adaptive.window: \"0s\" is not a positive duration",
            ),
            (
                "rebalance: {adaptive: {otherwise: adaptive}}\n",
                "rebalance.adaptive.otherwise: \"otherwise\" cannot be adaptive itself",
            ),
            (
                "rebalance: {adaptive: {windw: 5m}}\n",
                "rebalance.adaptive.windw: unknown field",
            ),
            ("rules: [\n", "policy: not YAML"),
        ];
        for (yaml, want) in cases {
            let e = Policy::parse(yaml).unwrap_err().to_string();
            assert!(e.starts_with(want), "{yaml:?}: {e}");
        }
    }

    #[test]
    fn label_values_written_as_numbers_or_booleans_are_text() {
        let p = Policy::parse("rules:\n- name: a\n  nodes: {tier: 1, spot: true}\n").unwrap();
        assert_eq!(p.rules[0].nodes["tier"], "1");
        assert_eq!(p.rules[0].nodes["spot"], "true");
    }

    proptest::proptest! {
        /// No text makes the parser panic: a policy or an error naming where.
        #[test]
        fn any_text_is_a_policy_or_an_error(text in "\\PC{0,200}") {
            let _ = Policy::parse(&text);
        }

        /// Policies made of the grammar's own pieces, with any values, parse or fail naming a
        /// field of theirs.
        #[test]
        fn shaped_policies_parse_or_name_their_field(
            name in "[a-z]{0,6}",
            label in "[a-z./-]{1,12}",
            value in "[a-z0-9-]{0,8}",
            kind in proptest::sample::select(vec![
                "spot-interruption", "rebalance-recommendation", "state-change",
                "scheduled-change", "asg-termination", "capacity-reservation-interruption",
                "unsupported", "spot",
            ]),
            action in "(none|cordon|cordon-drain|delete|adaptive|cordon-for [0-9a-z]{0,4}|[a-z]{0,6})",
            threshold in -1.0f64..2.0,
        ) {
            let yaml = format!(
                "rules:\n- name: '{name}'\n  nodes: {{'{label}': '{value}'}}\n  actions: {{{kind}: '{action}'}}\nrebalance:\n  adaptive: {{threshold: {threshold}}}\n"
            );
            match Policy::parse(&yaml) {
                Ok(p) => {
                    proptest::prop_assert_eq!(p.rules.len(), 1);
                    proptest::prop_assert!((0.0..=1.0).contains(&p.adaptive.threshold));
                }
                Err(e) => proptest::prop_assert!(
                    e.path.starts_with("rules[0]") || e.path.starts_with("rebalance.adaptive"),
                    "{e}"
                ),
            }
        }
    }
}
