//! What a policy read from the cluster may ask: the deployment's allowance
//! (the settings' allowance), and [`Policy::limited`], which refuses every rule asking more.
//!
//! The policy ConfigMap belongs to whoever may write ConfigMaps in forewarn's namespace; the
//! allowance belongs to whoever deploys forewarn. By default a ConfigMap may ask every action
//! but `delete` (a rule of `delete` on rebalance recommendations would delete every node that
//! gets one) and `none` (a rule of `none` on spot warnings would leave every node to lose its
//! pods unwarned). A policy file (the settings'), which the deployment sets itself, is
//! not limited.
//!
//! **A refused rule.** A rule that asks an action the allowance does not allow, for any event
//! kind, is refused whole: it stays where it is, still matching its nodes (first match wins, so
//! no later rule takes them), but it names no action, so on its nodes every event kind takes the
//! kinds' default actions. The other rules apply as written. A rule's `adaptive`
//! asks `adaptive` and the policy's `rebalance.adaptive.otherwise` both: it is refused when
//! either is not allowed.

use std::fmt;

use super::{Policy, PolicyAction, PolicyError, Rule};

/// The names an allowance lists: one per kind of [`PolicyAction`] (`cordon-for` whatever its
/// duration).
pub const ACTION_NAMES: &[&str] = <PolicyAction as strum::VariantNames>::VARIANTS;

/// The actions a policy read from the cluster may ask: their names, in [`ACTION_NAMES`]' order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyAllow(Vec<&'static str>);

/// An allowance that does not read: what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not an action a policy may ask (a list of: none, cordon, cordon-drain, delete, \
     cordon-for, adaptive; or all)"
)]
pub struct BadAllow(pub String);

impl Default for PolicyAllow {
    /// Every action but `delete` and `none`.
    fn default() -> PolicyAllow {
        PolicyAllow::of(|name| !["delete", "none"].contains(&name))
    }
}

impl PolicyAllow {
    /// The action names `keep` keeps.
    fn of(keep: impl Fn(&str) -> bool) -> PolicyAllow {
        PolicyAllow(ACTION_NAMES.iter().copied().filter(|n| keep(n)).collect())
    }

    /// A list of action names separated by commas or spaces (`cordon,cordon-drain`,
    /// `cordon cordon-for`), or `all`. A name twice is the name once.
    pub fn parse(text: &str) -> Result<PolicyAllow, BadAllow> {
        let words: Vec<&str> = (text.split(|c: char| c == ',' || c.is_whitespace()))
            .filter(|w| !w.is_empty())
            .collect();
        let unknown = words
            .iter()
            .find(|w| **w != "all" && !ACTION_NAMES.contains(w));
        match unknown {
            Some(word) => Err(BadAllow(word.to_string())),
            None if words.is_empty() => Err(BadAllow(text.trim().to_string())),
            None => Ok(PolicyAllow::of(|n| {
                words.iter().any(|w| [n, "all"].contains(w))
            })),
        }
    }

    /// Whether a rule may ask `action`.
    pub fn allows(&self, action: PolicyAction) -> bool {
        self.0.contains(&action.name())
    }
}

impl fmt::Display for PolicyAllow {
    /// The names, in [`ACTION_NAMES`]' order, comma-separated.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(", "))
    }
}

impl Policy {
    /// The policy as `allow` lets it apply, and a refusal per rule asking more (naming the
    /// field, `rules[2].actions.rebalance-recommendation`, and the action): each such rule is
    /// kept in its place with no action, so its nodes keep the defaults (see the module's
    /// documentation).
    pub fn limited(mut self, allow: &PolicyAllow) -> (Policy, Vec<PolicyError>) {
        let otherwise = self.adaptive.otherwise;
        let mut refused = Vec::new();
        for (i, rule) in self.rules.iter_mut().enumerate() {
            let asked = rule.actions.iter().find_map(|(kind, action)| {
                let what = if !allow.allows(*action) {
                    format!("\"{action}\"")
                } else if *action == PolicyAction::Adaptive && !allow.allows(otherwise) {
                    format!("\"adaptive\", whose rebalance.adaptive.otherwise is \"{otherwise}\"")
                } else {
                    return None;
                };
                Some((format!("rules[{i}].actions.{}", kind.as_str()), what))
            });
            let deletes = (rule.delete_owned_on.as_ref()).is_some_and(|k| !k.is_empty());
            let asked = asked.or_else(|| {
                (deletes && !allow.allows(PolicyAction::Delete)).then(|| {
                    let path = format!("rules[{i}].delete-owned-on");
                    (path, "\"delete\" (through the owner)".to_string())
                })
            });
            if let Some((path, what)) = asked {
                refused.push(PolicyError {
                    path,
                    message: format!(
                        "rule \"{}\" asks {what}, which the deployment does not let a policy \
                         ConfigMap ask (the deployment's PolicyAllow: {allow}): the rule is refused, \
                         its nodes keep the defaults",
                        rule.name
                    ),
                });
                let Rule { name, nodes, .. } = std::mem::take(rule);
                *rule = Rule {
                    name,
                    nodes,
                    ..Rule::default()
                };
            }
        }
        (self, refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::event::EventKind;
    use std::collections::BTreeMap;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A ConfigMap rule deleting owned nodes asks `delete`: refused unless allowed, its
    /// behaviour dropped with its actions.
    #[test]
    fn delete_owned_on_asks_delete() {
        let yaml = "rules:\n  - name: k\n    delete-owned-on: [spot-interruption]\n    surge: []\n";
        let (limited, refused) = Policy::parse(yaml)
            .unwrap()
            .limited(&PolicyAllow::default());
        assert_eq!(refused[0].path, "rules[0].delete-owned-on");
        assert!(
            refused[0]
                .message
                .contains("\"delete\" (through the owner)")
        );
        let k = Rule {
            name: "k".into(),
            ..Rule::default()
        };
        assert_eq!(limited.rules[0], k);
        let (kept, refused) = Policy::parse(yaml).unwrap().limited(&all());
        assert!(refused.is_empty());
        assert!(kept.rules[0].delete_owned_on.is_some());
        let none = "rules:\n  - name: k\n    delete-owned-on: []\n";
        let (_, refused) = Policy::parse(none)
            .unwrap()
            .limited(&PolicyAllow::default());
        assert!(refused.is_empty(), "deleting for no kind asks nothing");
    }

    #[test]
    fn the_default_allows_every_action_but_delete_and_none() {
        let allow = PolicyAllow::default();
        for text in ["cordon", "cordon-drain", "cordon-for 30m", "adaptive"] {
            assert!(allow.allows(PolicyAction::parse(text).unwrap()), "{text}");
        }
        assert!(!allow.allows(PolicyAction::Delete));
        assert!(!allow.allows(PolicyAction::None));
        assert_eq!(
            allow.to_string(),
            "cordon, cordon-drain, cordon-for, adaptive"
        );
        assert!(all().allows(PolicyAction::Delete));
    }

    fn all() -> PolicyAllow {
        PolicyAllow::parse("all").unwrap()
    }

    #[test]
    fn an_allowance_is_a_list_of_names_or_all() {
        let allow = PolicyAllow::parse("cordon, cordon-for  delete").unwrap();
        assert_eq!(allow.to_string(), "cordon, delete, cordon-for");
        assert_eq!(
            PolicyAllow::parse("all").unwrap().to_string(),
            "none, cordon, cordon-drain, delete, cordon-for, adaptive"
        );
        assert_eq!(
            PolicyAllow::parse("cordon cordon-drain cordon-for adaptive").unwrap(),
            PolicyAllow::default()
        );
        let e = PolicyAllow::parse("cordon,drain").unwrap_err().to_string();
        assert!(e.starts_with("`drain` is not an action"), "{e}");
        assert!(PolicyAllow::parse(" , ").is_err());
    }

    const ASKING: &str = "rules:\n\
        - name: batch\n  nodes: {pool: batch}\n  actions: {spot-interruption: cordon-drain}\n\
        - name: web\n  nodes: {pool: web}\n  actions: {spot-interruption: cordon, rebalance-recommendation: delete}\n\
        - name: quiet\n  nodes: {}\n  actions: {spot-interruption: none}\n";

    /// A rule asking more than the allowance is refused naming its field; its nodes keep the
    /// defaults for every kind (no later rule takes them); the other rules apply.
    #[test]
    fn a_rule_asking_more_is_refused_and_its_nodes_keep_the_defaults() {
        let policy = Policy::parse(ASKING).unwrap();
        let (limited, refused) = policy.clone().limited(&PolicyAllow::default());
        let fields: Vec<&str> = refused.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            fields,
            [
                "rules[1].actions.rebalance-recommendation",
                "rules[2].actions.spot-interruption"
            ]
        );
        assert!(
            refused[0].to_string().contains(
                "rule \"web\" asks \"delete\", which the deployment does not let a policy \
                 ConfigMap ask (the deployment's PolicyAllow: cordon, cordon-drain, cordon-for, adaptive)"
            ),
            "{}",
            refused[0]
        );
        // The allowed rule as written.
        let batch = labels(&[("pool", "batch")]);
        assert_eq!(
            (limited.rule(&batch)).and_then(|r| r.actions.get(&EventKind::SpotInterruption)),
            Some(&PolicyAction::CordonDrain)
        );
        // The refused rule's nodes: defaults for every kind, its allowed `cordon` too, and
        // not the catch-all's.
        let web = labels(&[("pool", "web")]);
        for kind in [
            EventKind::SpotInterruption,
            EventKind::RebalanceRecommendation,
        ] {
            let rule = limited.rule(&web).unwrap();
            assert_eq!(rule.name, "web");
            assert_eq!(rule.actions.get(&kind), None, "{kind:?}");
        }
        let other = limited.rule(&labels(&[("pool", "x")])).unwrap();
        assert_eq!(other.name, "quiet");
        assert_eq!(other.actions.get(&EventKind::SpotInterruption), None);
        // All allowed: as written.
        let (all, none) = policy.clone().limited(&all());
        assert!(none.is_empty());
        assert_eq!(all, policy);
    }

    #[test]
    fn adaptive_asks_its_otherwise_too() {
        let yaml = "rules:\n- name: r\n  nodes: {}\n  actions: {rebalance-recommendation: adaptive}\n\
                    rebalance: {adaptive: {otherwise: delete}}\n";
        let (limited, refused) = Policy::parse(yaml)
            .unwrap()
            .limited(&PolicyAllow::default());
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].path, "rules[0].actions.rebalance-recommendation");
        assert!(
            refused[0]
                .message
                .contains("\"adaptive\", whose rebalance.adaptive.otherwise is \"delete\""),
            "{}",
            refused[0]
        );
        assert!(limited.rules[0].actions.is_empty());
        let (_, refused) = Policy::parse(&yaml.replace("delete", "cordon-for 1h"))
            .unwrap()
            .limited(&PolicyAllow::default());
        assert!(refused.is_empty());
    }
}
