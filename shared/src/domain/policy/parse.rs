//! [`Policy::parse`]: YAML into a [`Policy`], every error naming the field and the value.

use std::collections::{BTreeMap, BTreeSet};

use chrono::Duration;
use serde::Deserialize;
use serde_json::Value;

use super::{Adaptive, BadAction, Behaviour, Policy, PolicyAction, Rule};
use crate::domain::event::EventKind;
use crate::domain::event::fields::{Obj, plain};

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

/// A policy document as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Doc {
    rules: Option<Vec<Obj<RuleDoc>>>,
    rebalance: Option<Obj<RebalanceDoc>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RebalanceDoc {
    adaptive: Option<Obj<AdaptiveDoc>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RuleDoc {
    name: Option<Text>,
    nodes: Option<BTreeMap<String, Text>>,
    actions: Option<BTreeMap<Kind, Action>>,
    delete_owned_on: Option<BTreeSet<Kind>>,
    surge: Option<BTreeSet<Kind>>,
    exclude_from_load_balancers: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct AdaptiveDoc {
    window: Option<Text>,
    threshold: Option<f64>,
    min_samples: Option<u32>,
    days: Option<u32>,
    otherwise: Option<Action>,
}

/// A scalar as text (label values may be written as numbers or booleans).
#[derive(Deserialize)]
#[serde(try_from = "Value")]
struct Text(String);

impl TryFrom<Value> for Text {
    type Error = &'static str;
    fn try_from(v: Value) -> Result<Text, &'static str> {
        match v {
            Value::String(s) => Ok(Text(s)),
            Value::Number(n) => Ok(Text(n.to_string())),
            Value::Bool(b) => Ok(Text(b.to_string())),
            _ => Err("expected text (a string, a number or a boolean)"),
        }
    }
}

/// An event kind a rule may name.
#[derive(Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(try_from = "String")]
struct Kind(EventKind);

impl TryFrom<String> for Kind {
    type Error = String;
    fn try_from(name: String) -> Result<Kind, String> {
        let kinds = || EventKind::ALL.iter().copied().filter(|k| k.configurable());
        let known = || {
            kinds()
                .map(EventKind::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        };
        (kinds().find(|k| k.as_str() == name).map(Kind))
            .ok_or_else(|| format!("unknown event kind (known: {})", known()))
    }
}

#[derive(Deserialize)]
#[serde(try_from = "Text")]
struct Action(PolicyAction);

impl TryFrom<Text> for Action {
    type Error = BadAction;
    fn try_from(Text(text): Text) -> Result<Action, BadAction> {
        PolicyAction::parse(&text).map(Action)
    }
}

impl Policy {
    /// The policy `yaml` says (an empty document: no rules, the adaptive defaults).
    pub fn parse(yaml: &str) -> Result<Policy, PolicyError> {
        let doc: Value = serde_saphyr::from_str::<Option<Value>>(yaml)
            .map_err(|e| err("policy", format!("not YAML: {e}")))?
            .unwrap_or(Value::Null);
        let doc: Option<Obj<Doc>> = serde_path_to_error::deserialize(&doc).map_err(|e| {
            let (path, message) = plain(e, "", ["nothing", "a list", "a mapping"]);
            err(if path.is_empty() { "policy" } else { &path }, message)
        })?;
        let Doc { rules, rebalance } = doc.map(|Obj(d)| d).unwrap_or_default();
        let adaptive = match rebalance.and_then(|Obj(r)| r.adaptive) {
            Some(Obj(a)) => adaptive(a)?,
            None => Adaptive::default(),
        };
        let rules = (rules.unwrap_or_default().into_iter().enumerate())
            .map(|(i, Obj(r))| rule(i, r))
            .collect::<Result<Vec<_>, _>>()?;
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

/// Rule `i` as written, checked: it has a name, and only `rebalance-recommendation` is
/// `adaptive`.
fn rule(i: usize, r: RuleDoc) -> Result<Rule, PolicyError> {
    let name = r
        .name
        .map(|Text(n)| n.trim().to_string())
        .unwrap_or_default();
    if name.is_empty() {
        return Err(err(&format!("rules[{i}].name"), "every rule needs a name"));
    }
    let actions: BTreeMap<EventKind, PolicyAction> = (r.actions.unwrap_or_default().into_iter())
        .map(|(Kind(k), Action(a))| (k, a))
        .collect();
    if let Some(kind) = actions.iter().find_map(|(k, a)| {
        (*a == PolicyAction::Adaptive && *k != EventKind::RebalanceRecommendation).then_some(k)
    }) {
        return Err(err(
            &format!("rules[{i}].actions.{kind}"),
            "\"adaptive\" is for rebalance-recommendation only",
        ));
    }
    let kinds = |set: Option<BTreeSet<Kind>>| set.map(|s| s.into_iter().map(|Kind(k)| k).collect());
    Ok(Rule {
        name,
        nodes: (r.nodes.unwrap_or_default().into_iter())
            .map(|(k, Text(v))| (k, v))
            .collect(),
        actions,
        behaviour: Behaviour {
            delete_owned_on: kinds(r.delete_owned_on),
            surge: kinds(r.surge),
            exclude_from_load_balancers: r.exclude_from_load_balancers,
        },
    })
}

/// `rebalance.adaptive` as written, checked; what it leaves out is the default.
fn adaptive(a: AdaptiveDoc) -> Result<Adaptive, PolicyError> {
    let at = |field: &str| format!("rebalance.adaptive.{field}");
    let d = Adaptive::default();
    let window = match a.window {
        None => d.window,
        Some(Text(t)) => crate::domain::time::parse_duration(&t)
            .ok()
            .filter(|w| *w > Duration::zero())
            .ok_or_else(|| {
                err(
                    &at("window"),
                    format!("\"{t}\" is not a positive duration (e.g. 30m)"),
                )
            })?,
    };
    let threshold = a.threshold.unwrap_or(d.threshold);
    if !(0.0..=1.0).contains(&threshold) {
        let message = format!("{threshold} is not a share from 0 to 1");
        return Err(err(&at("threshold"), message));
    }
    let min_samples = a.min_samples.unwrap_or(d.min_samples);
    if min_samples < 1 {
        let message = format!("{min_samples} is not a whole number from 1");
        return Err(err(&at("min-samples"), message));
    }
    let days = a.days.unwrap_or(d.days);
    if !(1..=365).contains(&days) {
        let message = format!("{days} is not a number of days from 1 to 365");
        return Err(err(&at("days"), message));
    }
    let otherwise = a.otherwise.map_or(d.otherwise, |Action(o)| o);
    if otherwise == PolicyAction::Adaptive {
        let message = "\"otherwise\" cannot be adaptive itself";
        return Err(err(&at("otherwise"), message));
    }
    Ok(Adaptive {
        window,
        threshold,
        min_samples,
        days,
        otherwise,
    })
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
        assert_eq!(p.behaviour(&gpu), Some(b));
        assert_eq!(p.behaviour(&BTreeMap::new()), None, "no rule: the defaults");
        for (yaml, says) in [
            (
                "surge: spot-interruption",
                "rules[0].surge: expected a list, found a string",
            ),
            (
                "surge: [evaporate]",
                "rules[0].surge[0]: unknown event kind",
            ),
            (
                "exclude-from-load-balancers: maybe",
                "rules[0].exclude-from-load-balancers: expected a boolean, found a string",
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
                "rules[0].nodes: expected a mapping, found a list",
            ),
            ("rules: {}\n", "rules: expected a list, found a mapping"),
            // A mapping is never read from a list (serde reads a struct from one, by position).
            (
                "rules: [[a, b, c, d, e, f]]\n",
                "rules[0]: expected a mapping, found a list",
            ),
            ("- rules\n", "policy: expected a mapping, found a list"),
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
