//! The decision core's configuration: [`Config`], made from the settings (`crate::app::settings`).

use std::collections::BTreeSet;

use chrono::Duration;
use serde::{Deserialize, Serialize};

use crate::domain::event::EventKind;
use crate::domain::names::string_forms;

/// What to do with the node of an affected instance.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
#[derive(strum::IntoStaticStr, strum::Display, strum::VariantArray)]
#[strum(serialize_all = "kebab-case")]
pub enum Action {
    #[default]
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
    strum::Display,
)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

string_forms!(TaintEffect, "a taint effect", trim);

/// Which taint keys forewarn gives the nodes it cordons (`nth` as the taint key setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(strum::IntoStaticStr, strum::VariantArray)]
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
/// The key aws-node-termination-handler taints a node with for `kind`, if it taints for it at
/// all: it does for these four; for an instance state change it cordons and drains without a
/// taint, and it has no capacity reservation or impaired kind.
pub fn nth_taint_key(kind: EventKind) -> Option<&'static str> {
    match kind {
        EventKind::SpotInterruption => Some(NTH_TAINT_SPOT),
        EventKind::RebalanceRecommendation => Some(NTH_TAINT_REBALANCE),
        EventKind::ScheduledChange => Some(NTH_TAINT_SCHEDULED),
        EventKind::AsgTermination => Some(NTH_TAINT_ASG),
        _ => None,
    }
}

/// forewarn's configuration. [`Config::default`] is the documented default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The cluster forewarn acts for (its name: instances tagged for another cluster are never
    /// touched), whole (account, region, name) when the deployment knows it: what reports,
    /// metrics and a drain's signed continuation name. Set by the fleet, never from a variable.
    pub cluster: Option<crate::domain::clusters::ClusterId>,
    /// Decisions for instances that are no served cluster's (see [`crate::domain::clusters`]):
    /// every node action is refused, pools are still recorded. Set by the handler for those
    /// instances only, never from a variable.
    pub unserved: bool,
    /// Kinds that mark their pool unavailable (every kind counts in the pool's history).
    pub unavailable_kinds: BTreeSet<EventKind>,
    /// Kinds whose drains create placeholders first and evict a pod once there is room for it
    /// (or at its latest safe time): see [`crate::domain::surge`].
    pub surge_kinds: BTreeSet<EventKind>,
    /// How long a pool stays unavailable after an event.
    pub pool_ttl: Duration,
    /// forewarn's own taint key (the settings').
    pub taint_key: String,
    /// Which key a cordon's taint has per kind (see [`Config::taint_key_for`]).
    pub taint_keys: TaintKeys,
    pub taint_effect: TaintEffect,
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
    /// The policy per node group (`--policy`, the settings' policy file, the ConfigMap
    /// `forewarn/forewarn-policy`): a matching rule's action for a kind replaces the
    /// default ([`default_action`]).
    pub policy: crate::domain::policy::Policy,
}

/// What a run may change: the one switch behind "dry run", wherever it is set
/// (the settings' dry run, `forewarn replay` without `--execute`).
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
            cluster: None,
            unserved: false,
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
    /// The key of the taint a cordon for `kind` puts on its node: NTH's for the kinds NTH taints
    /// for under [`TaintKeys::Nth`], else forewarn's own ([`Config::taint_key`]).
    pub fn taint_key_for(&self, kind: EventKind) -> &str {
        match (self.taint_keys, nth_taint_key(kind)) {
            (TaintKeys::Nth, Some(key)) => key,
            _ => &self.taint_key,
        }
    }
}

/// The node action of `kind` on a node whose policy rule names none for it: every kind a
/// policy may configure drains, but a rebalance recommendation cordons and a state change
/// deletes; the others (a launch, a Capacity Block's delivery) touch no node.
pub fn default_action(kind: EventKind) -> Action {
    match kind {
        EventKind::RebalanceRecommendation => Action::Cordon,
        EventKind::StateChange => Action::Delete,
        _ if kind.configurable() => Action::CordonDrain,
        _ => Action::None,
    }
}

/// The kinds for which a node owned by a Karpenter NodeClaim or a Cluster API Machine is
/// deleted (through its owner) instead of getting the kind's action, where its policy rule's
/// `delete-owned-on` does not say.
pub const DELETE_OWNED_ON: &[EventKind] = &[EventKind::SpotInterruption];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let c = Config::default();
        assert_eq!(
            default_action(EventKind::SpotInterruption),
            Action::CordonDrain
        );
        assert_eq!(
            default_action(EventKind::RebalanceRecommendation),
            Action::Cordon
        );
        assert_eq!(default_action(EventKind::StateChange), Action::Delete);
        assert_eq!(c.pool_ttl, Duration::hours(1));
    }

    #[test]
    fn the_taint_key_is_forewarns_or_nths_per_kind() {
        let forewarn = Config {
            taint_key: "example.com/going".into(),
            ..Config::default()
        };
        for &kind in EventKind::ALL {
            assert_eq!(forewarn.taint_key_for(kind), "example.com/going", "{kind}");
        }
        let nth = Config {
            taint_keys: TaintKeys::Nth,
            ..forewarn
        };
        let expected = [
            (EventKind::SpotInterruption, NTH_TAINT_SPOT),
            (EventKind::RebalanceRecommendation, NTH_TAINT_REBALANCE),
            (EventKind::ScheduledChange, NTH_TAINT_SCHEDULED),
            (EventKind::AsgTermination, NTH_TAINT_ASG),
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
    }
}
