//! Policies per node group: which action each event kind takes on the nodes a rule matches.
//!
//! A policy is YAML, from `--policy FILE`, the settings' policy file or the ConfigMap
//! `forewarn/forewarn-policy` (key `policy.yaml`; what it may ask is limited by the deployment:
//! see [`allow`]):
//!
//! ```yaml
//! rules:                          # first match wins; a node no rule matches keeps the defaults
//!   - name: batch                 # shown in reports and Events
//!     nodes: {karpenter.sh/nodepool: batch}   # node labels, all must match; {} matches every node
//!     actions:                    # per event kind; kinds not named keep the default
//!       rebalance-recommendation: none
//!       spot-interruption: cordon-drain
//!     delete-owned-on: []         # kinds deleting a NodeClaim's or Machine's node through it
//!     surge: [spot-interruption]  # kinds whose drains make room first (placeholders)
//!     exclude-from-load-balancers: false   # cordoned nodes stay in external load balancers
//!   - name: web
//!     nodes: {eks.amazonaws.com/nodegroup: web-spot}
//!     actions:
//!       rebalance-recommendation: adaptive
//!       scheduled-change: cordon-for 6h
//! rebalance:
//!   adaptive:
//!     window: 30m        # an interruption of the same instance within this time "follows" a recommendation
//!     threshold: 0.5     # drain when at least this share of the pool's recommendations were followed
//!     min-samples: 5     # fewer recommendations than this in the pool's history: act as `otherwise`
//!     days: 30           # how far back the history is read
//!     otherwise: cordon-for 30m
//! ```
//!
//! [`Policy::parse`] refuses a bad policy naming the field and the value
//! (`rules[0].actions.spot-interruption: unknown action "evaporate" (...)`).

pub mod adaptive;
pub mod allow;
mod parse;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use chrono::Duration;

use crate::domain::event::EventKind;

pub use adaptive::{Adaptive, Followed};
pub use allow::{ACTION_NAMES, BadAllow, PolicyAllow};
pub use parse::PolicyError;

/// What a rule says an event kind does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::VariantNames)]
#[strum(serialize_all = "kebab-case")]
pub enum PolicyAction {
    None,
    Cordon,
    CordonDrain,
    /// Delete the owner object (NodeClaim, Machine) when there is one, else the Node.
    Delete,
    /// A cordon undone after the duration unless another reason to keep it arrives.
    CordonFor(Duration),
    /// Rebalance recommendations only: drain where the pool's recommendations were mostly
    /// followed by interruptions, else [`Adaptive::otherwise`] (see [`adaptive`]).
    Adaptive,
}

/// A policy action that does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadAction {
    #[error("\"{0}\": `{1}` is not a positive duration (e.g. 30m, 6h)")]
    Duration(String, String),
    #[error("\"cordon-for\" needs a duration (e.g. cordon-for 30m)")]
    NoDuration,
    #[error(
        "unknown action \"{0}\" (none, cordon, cordon-drain, delete, cordon-for <duration>, adaptive)"
    )]
    Unknown(String),
}

impl PolicyAction {
    /// The action as written in a policy: `none`, `cordon`, `cordon-drain`, `delete`,
    /// `cordon-for <duration>` or `adaptive`.
    pub fn parse(text: &str) -> Result<PolicyAction, BadAction> {
        let text = text.trim();
        let words: Vec<&str> = text.split_whitespace().collect();
        match words.as_slice() {
            ["none"] => Ok(PolicyAction::None),
            ["cordon"] => Ok(PolicyAction::Cordon),
            ["cordon-drain"] => Ok(PolicyAction::CordonDrain),
            ["delete"] => Ok(PolicyAction::Delete),
            ["adaptive"] => Ok(PolicyAction::Adaptive),
            ["cordon-for", d] => crate::domain::time::parse_duration(d)
                .ok()
                .filter(|d| *d > Duration::zero())
                .map(PolicyAction::CordonFor)
                .ok_or_else(|| BadAction::Duration(text.to_string(), d.to_string())),
            ["cordon-for"] => Err(BadAction::NoDuration),
            _ => Err(BadAction::Unknown(text.to_string())),
        }
    }

    /// The action's name, its duration left out: `cordon-for` for every `cordon-for`.
    pub fn name(self) -> &'static str {
        self.into()
    }
}

impl fmt::Display for PolicyAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyAction::CordonFor(d) => write!(f, "cordon-for {}", short(*d)),
            other => f.write_str(other.name()),
        }
    }
}

/// `30m`, `6h`, `90s`, `2d`: the shortest exact form.
pub fn short(d: Duration) -> String {
    let s = d.num_seconds();
    match s {
        s if s != 0 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s != 0 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s != 0 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// One rule: the nodes it matches, what it says each event kind does there, and how its nodes
/// are treated besides (each `None`: the default, see [`crate::domain::config`]).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Rule {
    #[serde(deserialize_with = "parse::name")]
    pub name: String,
    /// Node labels that must all match (none: every node).
    #[serde(deserialize_with = "parse::labels")]
    pub nodes: BTreeMap<String, String>,
    #[serde(deserialize_with = "parse::actions")]
    pub actions: BTreeMap<EventKind, PolicyAction>,
    /// Kinds for which a node owned by a Karpenter NodeClaim or a Cluster API Machine is
    /// deleted through its owner (`delete-owned-on`).
    #[serde(deserialize_with = "parse::kinds")]
    pub delete_owned_on: Option<BTreeSet<EventKind>>,
    /// Kinds whose drains create placeholders first (`surge`; see [`crate::domain::surge`]).
    #[serde(deserialize_with = "parse::kinds")]
    pub surge: Option<BTreeSet<EventKind>>,
    /// Cordoned nodes are labelled out of external load balancers
    /// (`exclude-from-load-balancers`).
    pub exclude_from_load_balancers: Option<bool>,
}

impl Rule {
    /// Every label of the rule is on the node with the same value.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.nodes.iter().all(|(k, v)| labels.get(k) == Some(v))
    }
}

/// A policy: rules (first match wins) and the adaptive rebalance settings.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    #[serde(deserialize_with = "parse::rules")]
    pub rules: Vec<Rule>,
    /// `rebalance.adaptive`.
    #[serde(rename = "rebalance", deserialize_with = "parse::rebalance")]
    pub adaptive: Adaptive,
}

impl Policy {
    /// The rule matching a node with `labels` (the first); `None`: no rule does (the defaults).
    pub fn rule(&self, labels: &BTreeMap<String, String>) -> Option<&Rule> {
        self.rules.iter().find(|r| r.matches(labels))
    }

    /// Some rule is `adaptive`: the pools' history is needed to decide.
    pub fn uses_adaptive(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.actions.values().any(|a| *a == PolicyAction::Adaptive))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn actions_read_and_print_the_same() {
        for text in [
            "none",
            "cordon",
            "cordon-drain",
            "delete",
            "adaptive",
            "cordon-for 30m",
            "cordon-for 6h",
            "cordon-for 2d",
            "cordon-for 90s",
        ] {
            assert_eq!(PolicyAction::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(
            PolicyAction::parse("  cordon-for   45m ").unwrap(),
            PolicyAction::CordonFor(Duration::minutes(45))
        );
        let e = PolicyAction::parse("evaporate").unwrap_err().to_string();
        assert!(e.starts_with("unknown action \"evaporate\""), "{e}");
        assert!(PolicyAction::parse("cordon-for").is_err());
        assert!(PolicyAction::parse("cordon-for soon").is_err());
        assert!(PolicyAction::parse("cordon-for 0s").is_err());
        assert!(PolicyAction::parse("uncordon").is_err());
    }

    #[test]
    fn the_first_matching_rule_wins_and_unnamed_kinds_keep_the_defaults() {
        let policy = Policy::parse(
            "rules:\n\
             - name: batch\n  nodes: {pool: batch}\n  actions: {rebalance-recommendation: none}\n\
             - name: batch-too\n  nodes: {pool: batch}\n  actions: {spot-interruption: delete}\n\
             - name: all\n  nodes: {}\n  actions: {spot-interruption: cordon}\n",
        )
        .unwrap();
        let batch = labels(&[("pool", "batch"), ("zone", "a")]);
        // The first matching rule's name, and its action for `kind`.
        let choose = |p: &Policy, kind, labels| {
            let rule = p.rule(labels);
            let action = rule.and_then(|r| r.actions.get(&kind).copied());
            (rule.map(|r| r.name.clone()), action)
        };
        let rebalance = choose(&policy, EventKind::RebalanceRecommendation, &batch);
        assert_eq!(rebalance, (Some("batch".into()), Some(PolicyAction::None)));
        // The first match wins even for a kind it does not name: defaults, not `batch-too`.
        let spot = choose(&policy, EventKind::SpotInterruption, &batch);
        assert_eq!(spot, (Some("batch".into()), None));
        // `{}` matches every node.
        let web = labels(&[("pool", "web")]);
        let other = choose(&policy, EventKind::SpotInterruption, &web);
        assert_eq!(other, (Some("all".into()), Some(PolicyAction::Cordon)));
        // No rule: defaults.
        let none = choose(&Policy::default(), EventKind::SpotInterruption, &batch);
        assert_eq!(none, (None, None));
    }

    #[test]
    fn all_of_a_rules_labels_must_match() {
        let rule = Rule {
            name: "r".into(),
            nodes: labels(&[("a", "1"), ("b", "2")]),
            ..Rule::default()
        };
        assert!(rule.matches(&labels(&[("a", "1"), ("b", "2"), ("c", "3")])));
        assert!(!rule.matches(&labels(&[("a", "1")])));
        assert!(!rule.matches(&labels(&[("a", "1"), ("b", "3")])));
    }
}
