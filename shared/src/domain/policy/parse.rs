//! [`Policy::parse`]: YAML into a [`Policy`], every error naming the field and the value. The
//! domain types read themselves (serde derive, `deny_unknown_fields`); the functions here read
//! their fields as a policy writes them (`deserialize_with`), and check what one field cannot.

use std::collections::{BTreeMap, BTreeSet};

use chrono::Duration;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::{Adaptive, Policy, PolicyAction};
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

impl<'de> Deserialize<'de> for PolicyAction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PolicyAction, D::Error> {
        let Text(text) = Text::deserialize(d)?;
        PolicyAction::parse(&text).map_err(D::Error::custom)
    }
}

/// A field written as a `W` made a `T`; null or nothing: `T`'s default.
fn read<'de, D: Deserializer<'de>, W: Deserialize<'de>, T: Default>(
    d: D,
    into: impl FnOnce(W) -> T,
) -> Result<T, D::Error> {
    Ok(Option::<W>::deserialize(d)?.map(into).unwrap_or_default())
}

/// A field read (null or nothing: `default`), and refused when `bad` says why.
fn checked<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
    default: T,
    bad: impl FnOnce(&T) -> Option<String>,
) -> Result<T, D::Error> {
    let v = Option::<T>::deserialize(d)?.unwrap_or(default);
    bad(&v).map_or(Ok(v), |why| Err(D::Error::custom(why)))
}

/// The rules, each a mapping.
pub(super) fn rules<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<super::Rule>, D::Error> {
    read(d, |rules: Vec<Obj<super::Rule>>| {
        rules.into_iter().map(|Obj(r)| r).collect()
    })
}

/// `rebalance`, of which only `adaptive` is known.
pub(super) fn rebalance<'de, D: Deserializer<'de>>(d: D) -> Result<Adaptive, D::Error> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Rebalance {
        adaptive: Option<Obj<Adaptive>>,
    }
    read(d, |Obj(r): Obj<Rebalance>| {
        r.adaptive.map(|Obj(a)| a).unwrap_or_default()
    })
}

/// A rule's name, trimmed.
pub(super) fn name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    read(d, |Text(n)| n.trim().to_string())
}

/// Node labels, their values as text.
pub(super) fn labels<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    read(d, |m: BTreeMap<String, Text>| {
        m.into_iter().map(|(k, Text(v))| (k, v)).collect()
    })
}

pub(super) fn actions<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<EventKind, PolicyAction>, D::Error> {
    read(d, |m: BTreeMap<Kind, PolicyAction>| {
        m.into_iter().map(|(Kind(k), a)| (k, a)).collect()
    })
}

pub(super) fn kinds<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeSet<EventKind>>, D::Error> {
    read(d, |s: BTreeSet<Kind>| {
        Some(s.into_iter().map(|Kind(k)| k).collect())
    })
}

pub(super) fn window<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let Some(Text(t)) = Option::<Text>::deserialize(d)? else {
        return Ok(Adaptive::default().window);
    };
    (crate::domain::time::parse_duration(&t).ok())
        .filter(|w| *w > Duration::zero())
        .ok_or_else(|| D::Error::custom(format!("\"{t}\" is not a positive duration (e.g. 30m)")))
}

pub(super) fn threshold<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    checked(d, Adaptive::default().threshold, |t| {
        (!(0.0..=1.0).contains(t)).then(|| format!("{t} is not a share from 0 to 1"))
    })
}

pub(super) fn min_samples<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    checked(d, Adaptive::default().min_samples, |n| {
        (*n < 1).then(|| format!("{n} is not a whole number from 1"))
    })
}

pub(super) fn days<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    checked(d, Adaptive::default().days, |n| {
        (!(1..=365).contains(n)).then(|| format!("{n} is not a number of days from 1 to 365"))
    })
}

pub(super) fn otherwise<'de, D: Deserializer<'de>>(d: D) -> Result<PolicyAction, D::Error> {
    checked(d, Adaptive::default().otherwise, |o| {
        (*o == PolicyAction::Adaptive).then(|| "\"otherwise\" cannot be adaptive itself".into())
    })
}

impl Policy {
    /// The policy `yaml` says (an empty document: no rules, the adaptive defaults). Every rule
    /// has a name of its own, and only `rebalance-recommendation` is `adaptive`.
    pub fn parse(yaml: &str) -> Result<Policy, PolicyError> {
        let doc: Value = serde_saphyr::from_str::<Option<Value>>(yaml)
            .map_err(|e| err("policy", format!("not YAML: {e}")))?
            .unwrap_or(Value::Null);
        let policy: Option<Obj<Policy>> = serde_path_to_error::deserialize(&doc).map_err(|e| {
            let (path, message) = plain(e, "", ["nothing", "a list", "a mapping"]);
            err(if path.is_empty() { "policy" } else { &path }, message)
        })?;
        let policy = policy.map(|Obj(p)| p).unwrap_or_default();
        for (i, r) in policy.rules.iter().enumerate() {
            if r.name.is_empty() {
                return Err(err(&format!("rules[{i}].name"), "every rule needs a name"));
            }
            if let Some(kind) = r.actions.iter().find_map(|(k, a)| {
                (*a == PolicyAction::Adaptive && *k != EventKind::RebalanceRecommendation)
                    .then_some(k)
            }) {
                return Err(err(
                    &format!("rules[{i}].actions.{kind}"),
                    "\"adaptive\" is for rebalance-recommendation only",
                ));
            }
            if policy.rules[..i].iter().any(|o| o.name == r.name) {
                return Err(err(
                    &format!("rules[{i}].name"),
                    format!("\"{}\" names an earlier rule too", r.name),
                ));
            }
        }
        Ok(policy)
    }
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
        let b = &p.rules[0];
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
        assert_eq!(p.rule(&gpu), Some(b));
        assert_eq!(p.rule(&BTreeMap::new()), None, "no rule: the defaults");
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
            p.rules[0].surge,
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
        assert!(Policy::parse("rules:\n").unwrap().rules.is_empty());
        // A field written with no value keeps its default.
        let nulls = "rebalance:\n  adaptive:\n    threshold:\n    window:\n    otherwise:\n";
        assert_eq!(Policy::parse(nulls).unwrap(), Policy::default());
        let rule = Policy::parse("rules:\n- name: a\n  nodes:\n  actions:\n  surge:\n").unwrap();
        assert_eq!(rule.rules[0].nodes, BTreeMap::new());
        assert_eq!(rule.rules[0].surge, None);
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
