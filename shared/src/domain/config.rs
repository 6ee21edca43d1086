//! Configuration, read from environment variables (documented in docs/reference/configuration.md, made from `crate::app::reference`).

use std::collections::{BTreeMap, BTreeSet};

use chrono::Duration;
use serde::{Deserialize, Serialize};

use crate::domain::event::EventKind;
use crate::domain::names::string_forms;
use crate::domain::vars::Vars;

/// What to do with the node of an affected instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(strum::IntoStaticStr, strum::Display, strum::VariantArray)]
#[strum(serialize_all = "kebab-case")]
pub enum Action {
    None,
    Cordon,
    CordonDrain,
    /// Delete the owner object (NodeClaim, Machine) when there is one, else the Node.
    Delete,
    /// Undo forewarn's cordon (the way back, see [`crate::domain::wayback`]): never configured,
    /// only planned when the reason of a cordon is gone.
    Uncordon,
}

string_forms!(Action, "an action", trim);

/// The taint effect forewarn puts on cordoned nodes.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

string_forms!(TaintEffect, "a taint effect", trim);

/// Which taint keys forewarn gives the nodes it cordons (`FOREWARN_TAINT_KEYS`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum TaintKeys {
    /// forewarn's own key, [`Config::taint_key`], whatever the kind.
    #[default]
    Forewarn,
    /// aws-node-termination-handler's key for the kinds NTH taints for ([`nth_taint_key`]),
    /// forewarn's own for the others: tolerations written for NTH keep matching.
    Nth,
}

string_forms!(TaintKeys, "a taint key scheme", trim);

/// NTH's taint of a spot interruption warning.
pub const NTH_TAINT_SPOT: &str = "aws-node-termination-handler/spot-itn";
/// NTH's taint of a rebalance recommendation.
pub const NTH_TAINT_REBALANCE: &str = "aws-node-termination-handler/rebalance-recommendation";
/// NTH's taint of a scheduled maintenance (an AWS Health scheduled change).
pub const NTH_TAINT_SCHEDULED: &str = "aws-node-termination-handler/scheduled-maintenance";
/// NTH's taint of an Auto Scaling termination lifecycle action.
pub const NTH_TAINT_ASG: &str = "aws-node-termination-handler/asg-lifecycle-termination";
/// Every NTH taint key forewarn may put (`FOREWARN_TAINT_KEYS=nth`).
pub const NTH_TAINT_KEYS: [&str; 4] = [
    NTH_TAINT_SPOT,
    NTH_TAINT_REBALANCE,
    NTH_TAINT_SCHEDULED,
    NTH_TAINT_ASG,
];

/// The key aws-node-termination-handler taints a node with for `kind`, if it taints for it at
/// all: it does for these four; for an instance state change it cordons and drains without a
/// taint, and it has no capacity reservation or impaired kind.
pub fn nth_taint_key(kind: EventKind) -> Option<&'static str> {
    match kind {
        EventKind::SpotInterruption => Some(NTH_TAINT_SPOT),
        EventKind::RebalanceRecommendation => Some(NTH_TAINT_REBALANCE),
        EventKind::ScheduledChange => Some(NTH_TAINT_SCHEDULED),
        EventKind::AsgTermination => Some(NTH_TAINT_ASG),
        EventKind::StateChange
        | EventKind::AsgLaunch
        | EventKind::CapacityReservationInterruption
        | EventKind::CapacityBlockExpiration
        | EventKind::CapacityBlockDelivered
        | EventKind::Impaired
        | EventKind::Unsupported => None,
    }
}

pub use crate::domain::vars::ConfigError;

/// forewarn's configuration. [`Config::default`] is the documented default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The cluster forewarn acts for; instances tagged for another cluster are never touched.
    pub cluster_name: Option<String>,
    /// The served cluster whole (account, region, name), when the deployment knows it: what
    /// reports, metrics and a drain's signed continuation name. Set by the fleet, never from
    /// a variable.
    pub cluster: Option<crate::domain::clusters::ClusterId>,
    /// Decisions for instances that are no served cluster's (see [`crate::domain::clusters`]):
    /// every node action is refused, pools are still recorded. Set by the handler for those
    /// instances only, never from a variable.
    pub unserved: bool,
    /// The node action per event kind.
    pub actions: BTreeMap<EventKind, Action>,
    /// Kinds for which a node owned by a Karpenter NodeClaim or a Cluster API Machine is
    /// deleted (through its owner) instead of getting the kind's action.
    pub delete_owned_on: BTreeSet<EventKind>,
    /// Kinds that mark their pool unavailable (every kind counts in the pool's history).
    pub unavailable_kinds: BTreeSet<EventKind>,
    /// Kinds whose drains create placeholders first and evict a pod once there is room for it
    /// (or at its latest safe time): see [`crate::domain::surge`].
    pub surge_kinds: BTreeSet<EventKind>,
    /// How long a pool stays unavailable after an event.
    pub pool_ttl: Duration,
    /// forewarn's own taint key (`FOREWARN_TAINT_KEY`).
    pub taint_key: String,
    /// Which key a cordon's taint has per kind (see [`Config::taint_key_for`]).
    pub taint_keys: TaintKeys,
    pub taint_effect: TaintEffect,
    /// Label cordoned nodes with `node.kubernetes.io/exclude-from-external-load-balancers`.
    pub exclude_from_load_balancers: bool,
    /// The warning a spot or reservation interruption gives before the instance goes.
    pub interruption_notice: Duration,
    /// Drains must end this long before the instance goes.
    pub deadline_margin: Duration,
    /// Drain deadline for events that give no time (rebalance, ASG lifecycle, Health without a
    /// start time): the event time plus this.
    pub drain_timeout: Duration,
    /// How long after a launch lifecycle action forewarn checks whether the instance's node is
    /// Ready (and keeps the hook alive meanwhile); past it, the hook is left to its own timeout
    /// and default result.
    pub launch_timeout: Duration,
    /// An instance whose EC2 status check has failed for this long (since its `ImpairedSince`)
    /// is `impaired`: the sweep's period by default, i.e. impaired at two consecutive sweeps.
    pub impaired_after: Duration,
    /// Complete the ASG lifecycle action after the drain.
    pub complete_lifecycle_action: bool,
    /// The lifecycle hooks forewarn answers (by hook name); `None`: any hook of this cluster's
    /// instances.
    pub lifecycle_hooks: Option<BTreeSet<String>>,
    /// The policy per node group (`--policy`, `FOREWARN_POLICY_FILE`, the ConfigMap
    /// `forewarn/forewarn-policy`): a matching rule's action for a kind replaces the
    /// default of `actions`.
    pub policy: crate::domain::policy::Policy,
}

/// The variables that are lists of event kinds: set blank, one names none (a value, not unset).
pub const KIND_LISTS: [&str; 3] = [
    "FOREWARN_DELETE_OWNED_ON",
    "FOREWARN_UNAVAILABLE_KINDS",
    "FOREWARN_SURGE",
];

/// The variables [`Config::from_lookup`] reads (`FOREWARN_ACTION_` stands for one per kind).
pub const VARIABLES: &[&str] = &[
    "FOREWARN_CLUSTER_NAME",
    "FOREWARN_ACTION_",
    "FOREWARN_DELETE_OWNED_ON",
    "FOREWARN_UNAVAILABLE_KINDS",
    "FOREWARN_SURGE",
    "FOREWARN_POOL_TTL",
    "FOREWARN_TAINT_KEY",
    "FOREWARN_TAINT_KEYS",
    "FOREWARN_TAINT_EFFECT",
    "FOREWARN_EXCLUDE_FROM_LB",
    "FOREWARN_INTERRUPTION_NOTICE",
    "FOREWARN_DEADLINE_MARGIN",
    "FOREWARN_DRAIN_TIMEOUT",
    "FOREWARN_LAUNCH_TIMEOUT",
    "FOREWARN_IMPAIRED_AFTER",
    "FOREWARN_COMPLETE_LIFECYCLE_ACTION",
    "FOREWARN_LIFECYCLE_HOOKS",
];

/// What a run may change: the one switch behind "dry run", wherever it is set
/// (`FOREWARN_DRY_RUN`, `forewarn replay` without `--execute`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Decide and record the pools; no node action is carried out or tried (captured state, a
    /// local replay). Events are `planned`.
    Plan,
    /// Read everything live, decide, and report what would be done; write nothing anywhere
    /// (neither the cluster nor the pool store). Events are `planned`.
    DryRun,
    /// Carry everything out. Events are `acted` when a cluster was acted on.
    Act,
}

impl Mode {
    /// Writes are allowed: to the pool store, and (in `Act`) to the cluster.
    pub fn writes_store(self) -> bool {
        self != Mode::DryRun
    }

    /// Node actions are tried (for real in `Act`, read-only in `DryRun`).
    pub fn runs_actions(self) -> bool {
        self != Mode::Plan
    }

    /// Node actions change the cluster.
    pub fn writes_cluster(self) -> bool {
        self == Mode::Act
    }
}

/// The namespace of forewarn's own objects (defined beside the placeholders it holds).
pub use crate::domain::surge::NAMESPACE;
pub const TAINT_KEY: &str = "forewarn.io/interruption";
pub const LABEL_EXCLUDE_LB: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

impl Default for Config {
    fn default() -> Self {
        Config {
            cluster_name: None,
            cluster: None,
            unserved: false,
            actions: BTreeMap::from([
                (EventKind::SpotInterruption, Action::CordonDrain),
                (EventKind::RebalanceRecommendation, Action::Cordon),
                (EventKind::StateChange, Action::Delete),
                (EventKind::ScheduledChange, Action::CordonDrain),
                (EventKind::AsgTermination, Action::CordonDrain),
                (
                    EventKind::CapacityReservationInterruption,
                    Action::CordonDrain,
                ),
                (EventKind::CapacityBlockExpiration, Action::CordonDrain),
                (EventKind::Impaired, Action::CordonDrain),
                (EventKind::Unsupported, Action::None),
            ]),
            delete_owned_on: BTreeSet::from([EventKind::SpotInterruption]),
            unavailable_kinds: BTreeSet::from([
                EventKind::SpotInterruption,
                EventKind::CapacityReservationInterruption,
                EventKind::CapacityBlockExpiration,
            ]),
            // The warnings whose instance goes at a known time (issue 27): the capacity
            // benchmark meets its goals at 1,000 nodes (docs/benchmarks/capacity.md, *Replacement
            // capacity*). The grant is infra/k8s/placeholders.yaml, which `forewarn deploy`
            // applies on Kubernetes 1.30 and later; without it every placeholder is refused and
            // its pod evicted at once, as without surge.
            surge_kinds: BTreeSet::from(crate::domain::surge::SURGE_KINDS),
            pool_ttl: Duration::hours(1),
            taint_key: TAINT_KEY.to_string(),
            taint_keys: TaintKeys::Forewarn,
            taint_effect: TaintEffect::NoSchedule,
            exclude_from_load_balancers: true,
            interruption_notice: Duration::seconds(120),
            deadline_margin: Duration::seconds(15),
            drain_timeout: Duration::minutes(5),
            launch_timeout: Duration::minutes(10),
            impaired_after: Duration::minutes(5),
            complete_lifecycle_action: true,
            lifecycle_hooks: None,
            policy: crate::domain::policy::Policy::default(),
        }
    }
}

impl Config {
    /// Reads the configuration through `lookup`, which stands for the environment (the
    /// settings, `crate::app::settings`, pass the process's); see [`Vars`] for how a value is
    /// read. `FOREWARN_DELETE_OWNED_ON`, `FOREWARN_UNAVAILABLE_KINDS` and `FOREWARN_SURGE` set
    /// blank name no kind.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        Config::from_vars(Vars::new(&lookup))
    }

    /// [`Config::from_lookup`], from variables already wrapped.
    pub fn from_vars(vars: Vars) -> Result<Config, ConfigError> {
        let mut config = Config {
            cluster_name: vars.get("FOREWARN_CLUSTER_NAME"),
            ..Config::default()
        };
        for kind in EventKind::ALL {
            if !kind.configurable() {
                continue;
            }
            let name = action_variable(kind);
            if let Some(action) = vars.parse(&name, configurable)? {
                config.actions.insert(kind, action);
            }
        }
        let [owned, unavailable, surge] = KIND_LISTS;
        let lists = [
            (owned, &mut config.delete_owned_on),
            (unavailable, &mut config.unavailable_kinds),
            (surge, &mut config.surge_kinds),
        ];
        for (name, target) in lists {
            if let Some(v) = vars.get_or_blank(name) {
                *target = kinds(name, &v)?;
            }
        }
        let durations = [
            ("FOREWARN_POOL_TTL", &mut config.pool_ttl),
            (
                "FOREWARN_INTERRUPTION_NOTICE",
                &mut config.interruption_notice,
            ),
            ("FOREWARN_DEADLINE_MARGIN", &mut config.deadline_margin),
            ("FOREWARN_DRAIN_TIMEOUT", &mut config.drain_timeout),
            ("FOREWARN_LAUNCH_TIMEOUT", &mut config.launch_timeout),
            ("FOREWARN_IMPAIRED_AFTER", &mut config.impaired_after),
        ];
        for (name, target) in durations {
            if let Some(d) = vars.duration(name)? {
                *target = d;
            }
        }
        // `nth`: aws-node-termination-handler's keys for the kinds NTH taints for, forewarn's
        // own for the others; any other value is forewarn's own key.
        match vars.get("FOREWARN_TAINT_KEY") {
            Some(key) if key == "nth" => config.taint_keys = TaintKeys::Nth,
            Some(key) => config.taint_key = key,
            None => {}
        }
        if let Some(keys) = vars.parse("FOREWARN_TAINT_KEYS", str::parse::<TaintKeys>)? {
            config.taint_keys = keys;
        }
        if let Some(effect) = vars.parse("FOREWARN_TAINT_EFFECT", str::parse::<TaintEffect>)? {
            config.taint_effect = effect;
        }
        let flags = [
            (
                "FOREWARN_EXCLUDE_FROM_LB",
                &mut config.exclude_from_load_balancers,
            ),
            (
                "FOREWARN_COMPLETE_LIFECYCLE_ACTION",
                &mut config.complete_lifecycle_action,
            ),
        ];
        for (name, target) in flags {
            if let Some(b) = vars.boolean(name)? {
                *target = b;
            }
        }
        // `off`: no lifecycle action is completed (the retired
        // FOREWARN_COMPLETE_LIFECYCLE_ACTION=false).
        match vars.get("FOREWARN_LIFECYCLE_HOOKS") {
            Some(off) if off == "off" => config.complete_lifecycle_action = false,
            _ => {
                if let Some(hooks) = vars.parse("FOREWARN_LIFECYCLE_HOOKS", hook_names)? {
                    config.lifecycle_hooks = (!hooks.is_empty()).then_some(hooks);
                }
            }
        }
        Ok(config)
    }

    /// The key of the taint a cordon for `kind` puts on its node: NTH's for the kinds NTH taints
    /// for under [`TaintKeys::Nth`], else forewarn's own ([`Config::taint_key`]).
    pub fn taint_key_for(&self, kind: EventKind) -> &str {
        match (self.taint_keys, nth_taint_key(kind)) {
            (TaintKeys::Nth, Some(key)) => key,
            _ => &self.taint_key,
        }
    }

    /// A node with `labels` owned by a NodeClaim or Machine is deleted through its owner for
    /// `kind`: its policy rule's `delete-owned-on`, else [`Config::delete_owned_on`].
    pub fn deletes_owned(&self, kind: EventKind, labels: &BTreeMap<String, String>) -> bool {
        let rule = self.policy.behaviour(labels).delete_owned_on.as_ref();
        rule.unwrap_or(&self.delete_owned_on).contains(&kind)
    }

    /// `kind`'s drains of a node with `labels` make room first: its policy rule's `surge`,
    /// else [`Config::surge_kinds`].
    pub fn surges(&self, kind: EventKind, labels: &BTreeMap<String, String>) -> bool {
        let rule = self.policy.behaviour(labels).surge.as_ref();
        rule.unwrap_or(&self.surge_kinds).contains(&kind)
    }

    /// A cordon labels a node with `labels` out of external load balancers: its policy rule's
    /// `exclude-from-load-balancers`, else [`Config::exclude_from_load_balancers`].
    pub fn excludes_from_load_balancers(&self, labels: &BTreeMap<String, String>) -> bool {
        let rule = self.policy.behaviour(labels).exclude_from_load_balancers;
        rule.unwrap_or(self.exclude_from_load_balancers)
    }

    /// The configured action for a kind.
    pub fn action(&self, kind: EventKind) -> Action {
        self.actions.get(&kind).copied().unwrap_or(Action::None)
    }
}

/// The (retired) variable of `kind`'s action: `FOREWARN_ACTION_SPOT_INTERRUPTION`.
pub fn action_variable(kind: EventKind) -> String {
    format!(
        "FOREWARN_ACTION_{}",
        kind.as_str().replace('-', "_").to_uppercase()
    )
}

/// An action a variable may not name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotConfigurable {
    #[error(transparent)]
    Unknown(#[from] crate::domain::names::UnknownName),
    #[error(
        "`uncordon` is not an action an event can be given (none, cordon, cordon-drain, delete)"
    )]
    Uncordon,
}

/// An action a variable may name: any but `uncordon`, which only the way back plans.
fn configurable(text: &str) -> Result<Action, NotConfigurable> {
    match text.parse::<Action>()? {
        Action::Uncordon => Err(NotConfigurable::Uncordon),
        a => Ok(a),
    }
}

/// An Auto Scaling lifecycle hook name: 1 to 255 of `[A-Za-z0-9-_/]`.
fn is_hook_name(name: &str) -> bool {
    (1..=255).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '/'))
}

/// A comma-separated list of event kinds (blank: none) of variable `name`.
fn kinds(name: &str, v: &str) -> Result<BTreeSet<EventKind>, ConfigError> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            EventKind::from_name(s)
                .filter(|k| k.configurable())
                .ok_or_else(|| ConfigError::new(name, v, format!("`{s}` is not an event kind")))
        })
        .collect()
}

/// A lifecycle hook name that is not one: 1 to 255 of `[A-Za-z0-9-_/]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a lifecycle hook name (1 to 255 letters, digits, '-', '_' or '/')")]
pub struct NotAHookName(pub String);

/// A comma-separated list of lifecycle hook names.
fn hook_names(v: &str) -> Result<BTreeSet<String>, NotAHookName> {
    let hooks: BTreeSet<String> = v
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_string)
        .collect();
    match hooks.iter().find(|h| !is_hook_name(h)) {
        Some(bad) => Err(NotAHookName(bad.clone())),
        None => Ok(hooks),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn lifecycle_hooks_are_a_list_of_names() {
        let config = |v: &str| {
            let v = v.to_string();
            Config::from_lookup(move |n| (n == "FOREWARN_LIFECYCLE_HOOKS").then(|| v.clone()))
        };
        assert_eq!(config("").unwrap().lifecycle_hooks, None);
        assert_eq!(
            config(" forewarn-drain, other ,").unwrap().lifecycle_hooks,
            Some(["forewarn-drain".to_string(), "other".to_string()].into())
        );
        let e = config("ok,bad name").unwrap_err();
        assert_eq!(e.variable, "FOREWARN_LIFECYCLE_HOOKS");
        assert!(e.message.contains("`bad name`"), "{}", e.message);
        // `off` completes none: what the retired FOREWARN_COMPLETE_LIFECYCLE_ACTION=false said.
        let off = config("off").unwrap();
        assert!(!off.complete_lifecycle_action);
        assert_eq!(off.lifecycle_hooks, None);
        let retired = Config::from_lookup(|n| {
            (n == "FOREWARN_COMPLETE_LIFECYCLE_ACTION").then(|| "false".to_string())
        })
        .unwrap();
        assert_eq!(off, retired);
    }

    #[test]
    fn defaults() {
        let c = from(&[]).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.action(EventKind::SpotInterruption), Action::CordonDrain);
        assert_eq!(c.action(EventKind::RebalanceRecommendation), Action::Cordon);
        assert_eq!(c.action(EventKind::StateChange), Action::Delete);
        assert_eq!(c.pool_ttl, Duration::hours(1));
    }

    #[test]
    fn overrides() {
        let c = from(&[
            ("FOREWARN_CLUSTER_NAME", "demo"),
            ("FOREWARN_ACTION_REBALANCE_RECOMMENDATION", "cordon-drain"),
            ("FOREWARN_POOL_TTL", "1h30m"),
            (
                "FOREWARN_UNAVAILABLE_KINDS",
                "spot-interruption, rebalance-recommendation",
            ),
            ("FOREWARN_DELETE_OWNED_ON", ""),
            ("FOREWARN_TAINT_EFFECT", "NoExecute"),
            ("FOREWARN_EXCLUDE_FROM_LB", "false"),
        ])
        .unwrap();
        assert_eq!(c.cluster_name.as_deref(), Some("demo"));
        assert_eq!(
            c.action(EventKind::RebalanceRecommendation),
            Action::CordonDrain
        );
        assert_eq!(c.pool_ttl, Duration::minutes(90));
        assert!(
            c.unavailable_kinds
                .contains(&EventKind::RebalanceRecommendation)
        );
        assert!(c.delete_owned_on.is_empty());
        assert_eq!(c.taint_effect, TaintEffect::NoExecute);
        assert!(!c.exclude_from_load_balancers);
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = from(&[("FOREWARN_ACTION_SPOT_INTERRUPTION", "evict")]).unwrap_err();
        assert_eq!(e.variable, "FOREWARN_ACTION_SPOT_INTERRUPTION");
        assert!(e.to_string().contains("`evict` is not an action"), "{e}");
        // Only the way back plans an uncordon.
        let e = from(&[("FOREWARN_ACTION_REBALANCE_RECOMMENDATION", "uncordon")]).unwrap_err();
        assert!(
            e.message
                .contains("`uncordon` is not an action an event can be given"),
            "{e}"
        );
        let e = from(&[("FOREWARN_POOL_TTL", "an hour")]).unwrap_err();
        assert_eq!(e.variable, "FOREWARN_POOL_TTL");
        let e = from(&[("FOREWARN_UNAVAILABLE_KINDS", "spot")]).unwrap_err();
        assert!(e.message.contains("`spot` is not an event kind"));
        let e = from(&[("FOREWARN_EXCLUDE_FROM_LB", "maybe")]).unwrap_err();
        assert_eq!(e.variable, "FOREWARN_EXCLUDE_FROM_LB");
    }

    #[test]
    fn durations_and_booleans_take_the_one_parser_of_their_type() {
        let e = from(&[("FOREWARN_DRAIN_TIMEOUT", "9223372036854775807")]).unwrap_err();
        assert_eq!(e.variable, "FOREWARN_DRAIN_TIMEOUT");
        assert!(
            e.to_string()
                .contains("`9223372036854775807` is longer than 10 years"),
            "{e}"
        );
        let c = from(&[
            ("FOREWARN_POOL_TTL", " 2d "),
            ("FOREWARN_EXCLUDE_FROM_LB", "No"),
            ("FOREWARN_COMPLETE_LIFECYCLE_ACTION", "OFF"),
        ])
        .unwrap();
        assert_eq!(c.pool_ttl, Duration::days(2));
        assert!(!c.exclude_from_load_balancers);
        assert!(!c.complete_lifecycle_action);
        let e = from(&[("FOREWARN_COMPLETE_LIFECYCLE_ACTION", "maybe")]).unwrap_err();
        assert_eq!(
            e.message,
            "`maybe` is not a boolean (true or false, 1 or 0, yes or no, on or off)"
        );
    }

    #[test]
    fn blank_values_are_unset_but_a_blank_kind_list_is_empty() {
        let blank = from(&[
            ("FOREWARN_CLUSTER_NAME", " "),
            ("FOREWARN_POOL_TTL", ""),
            ("FOREWARN_TAINT_EFFECT", "  "),
            ("FOREWARN_EXCLUDE_FROM_LB", ""),
            ("FOREWARN_ACTION_SPOT_INTERRUPTION", " "),
        ])
        .unwrap();
        assert_eq!(blank, Config::default());
        let none = from(&[("FOREWARN_UNAVAILABLE_KINDS", " ")]).unwrap();
        assert!(none.unavailable_kinds.is_empty());
    }

    #[test]
    fn the_taint_key_is_forewarns_or_nths_per_kind() {
        let forewarn = from(&[("FOREWARN_TAINT_KEY", "example.com/going")]).unwrap();
        assert_eq!(forewarn.taint_keys, TaintKeys::Forewarn);
        for kind in EventKind::ALL {
            assert_eq!(forewarn.taint_key_for(kind), "example.com/going", "{kind}");
        }
        let nth = from(&[
            ("FOREWARN_TAINT_KEY", "example.com/going"),
            ("FOREWARN_TAINT_KEYS", " nth "),
        ])
        .unwrap();
        assert_eq!(nth.taint_keys, TaintKeys::Nth);
        let expected = [
            (
                EventKind::SpotInterruption,
                "aws-node-termination-handler/spot-itn",
            ),
            (
                EventKind::RebalanceRecommendation,
                "aws-node-termination-handler/rebalance-recommendation",
            ),
            (
                EventKind::ScheduledChange,
                "aws-node-termination-handler/scheduled-maintenance",
            ),
            (
                EventKind::AsgTermination,
                "aws-node-termination-handler/asg-lifecycle-termination",
            ),
            // NTH puts no taint for these: forewarn's own key.
            (EventKind::StateChange, "example.com/going"),
            (
                EventKind::CapacityReservationInterruption,
                "example.com/going",
            ),
            (EventKind::Impaired, "example.com/going"),
            (EventKind::AsgLaunch, "example.com/going"),
            (EventKind::Unsupported, "example.com/going"),
        ];
        for (kind, key) in expected {
            assert_eq!(nth.taint_key_for(kind), key, "{kind}");
        }
        // The one variable now: `nth` there is the retired FOREWARN_TAINT_KEYS=nth.
        let merged = from(&[("FOREWARN_TAINT_KEY", "nth")]).unwrap();
        assert_eq!(merged.taint_keys, TaintKeys::Nth);
        assert_eq!(merged.taint_key, TAINT_KEY);
        assert_eq!(
            merged.taint_key_for(EventKind::SpotInterruption),
            "aws-node-termination-handler/spot-itn"
        );
        assert_eq!(merged.taint_key_for(EventKind::Impaired), TAINT_KEY);
        assert_eq!(
            from(&[("FOREWARN_TAINT_KEYS", "forewarn")]).unwrap(),
            Config::default()
        );
        assert_eq!(
            from(&[("FOREWARN_TAINT_KEYS", " ")]).unwrap(),
            Config::default()
        );
    }

    #[test]
    fn a_bad_taint_key_scheme_names_the_variable_and_the_value() {
        for bad in ["NTH", "aws-node-termination-handler", "forewarn,nth"] {
            let e = from(&[("FOREWARN_TAINT_KEYS", bad)]).unwrap_err();
            assert_eq!(e.variable, "FOREWARN_TAINT_KEYS");
            assert_eq!(e.value, bad);
            assert_eq!(
                e.to_string(),
                format!(
                    "configuration FOREWARN_TAINT_KEYS={bad:?}: `{bad}` is not a taint key \
                     scheme (forewarn, nth)"
                )
            );
        }
    }
}
