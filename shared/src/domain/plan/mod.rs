//! The decision core: event + facts + configuration → a plan. Pure: no I/O, no clock.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::config::{Action, Config};
use crate::domain::cordon_record::CordonRecord;
use crate::domain::event::{
    BLOCK_TERMINATION_LEAD, BLOCK_WARNING_LEAD, Detail, Event, EventKind, InstanceState,
    LifecycleAction,
};
pub use crate::domain::facts::Target;
use crate::domain::facts::{InstanceFacts, NodeFacts, resolve_node};
use crate::domain::policy::Followed;
use crate::domain::pool::{CapacityType, PoolKey, PoolMark};

mod choice;
#[cfg(test)]
mod launch;
pub mod pass;
pub mod pod_event;

/// What is known when deciding.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// Instances by id (those EC2 or a captured state knows).
    pub instances: &'a BTreeMap<String, InstanceFacts>,
    /// Candidate nodes of this cluster.
    pub nodes: &'a [NodeFacts],
    /// Per pool, how many of its rebalance recommendations an interruption followed (see
    /// [`crate::domain::policy::adaptive`]); read only when the policy has an `adaptive` rule.
    pub followed: &'a BTreeMap<PoolKey, Followed>,
}

/// No pool history: `adaptive` does `otherwise` everywhere.
pub static NO_HISTORY: BTreeMap<PoolKey, Followed> = BTreeMap::new();

impl<'a> Facts<'a> {
    /// What the instances and nodes say, without pool history.
    pub fn new(
        instances: &'a BTreeMap<String, InstanceFacts>,
        nodes: &'a [NodeFacts],
    ) -> Facts<'a> {
        Facts {
            instances,
            nodes,
            followed: &NO_HISTORY,
        }
    }
}

/// What to do for one instance of the event.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAction {
    pub instance_id: String,
    /// The node, when one was found.
    pub node: Option<String>,
    pub action: Action,
    /// For `delete`: the object to delete.
    pub target: Option<Target>,
    /// Why this action (or why none).
    pub reason: String,
    /// The key of the taint its cordon puts ([`Config::taint_key_for`] the kind; empty for an
    /// action that does not cordon).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub taint_key: String,
    /// Its cordon labels the node out of external load balancers: as its policy rule says
    /// (`exclude-from-load-balancers`), else as the configuration does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclude_from_load_balancers: bool,
    /// When a drain must be over.
    pub deadline: Option<DateTime<Utc>>,
    /// The ASG lifecycle action to complete once the node is handled.
    pub complete_lifecycle: Option<LifecycleAction>,
    /// The instance goes at the drain's deadline (plus the margin): a spot or capacity
    /// reservation warning, a scheduled change with a start time. An eviction whose pod's
    /// `terminationGracePeriodSeconds` would outlast it asks for what is left instead, so that
    /// the pod object is gone before the instance (and a StatefulSet can recreate it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub grace_to_deadline: bool,
    /// The drain creates placeholders first and evicts a pod once there is room for it, or at
    /// its latest safe time (a policy rule's `surge`; see [`crate::domain::surge`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub surge: bool,
    /// A cordon's record, written on the node with the cordon; for `uncordon`, the record the
    /// node must still carry (see [`crate::domain::wayback`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<CordonRecord>,
    /// For a drain: the instance's addresses (from EC2, see [`InstanceFacts::addresses`]), so
    /// that its pods leave IP-mode target groups before its first eviction, in whichever pass
    /// that comes (see [`crate::domain::traffic`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
}

/// The plan for one event.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub event_id: String,
    pub kind: EventKind,
    pub time: DateTime<Utc>,
    pub region: Option<String>,
    /// Set when the event is ignored as a whole (unsupported kind, a state not acted on).
    pub ignored: Option<String>,
    /// Pools to record.
    pub pools: Vec<PoolMark>,
    /// The pools of the event past [`crate::domain::pool::MAX_POOLS_PER_UPDATE`], not recorded,
    /// and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools_not_recorded: Option<String>,
    /// One entry per instance of the event.
    pub actions: Vec<NodeAction>,
    /// What the event is, for people (`spot-interruption (terminate)`).
    pub summary: String,
    /// The reason of the Kubernetes Event recorded on each node (`SpotInterrupted`, ...).
    pub event_reason: String,
    /// The reason of the Event recorded on each pod a drain evicts (`SpotInterruption`, ...).
    pub pod_event_reason: String,
    /// Further idempotence keys recorded in the ledger with the event id, in the same atomic
    /// write: the pool update is a duplicate when the event id or any of these was applied
    /// before. The sweeper's per-instance keys (`sweep:<kind>:<instance>`), so that a sweep
    /// after a handled event, or a handled event after a sweep, counts once.
    pub also_keys: Vec<String>,
    /// The cluster the plan's node actions are for (`None`: a deployment naming no cluster):
    /// a drain's continuation carries its plan, and with it where its passes run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

impl Plan {
    /// Whether any node action changes the cluster.
    pub fn has_node_work(&self) -> bool {
        self.actions
            .iter()
            .any(|a| a.action != Action::None || a.complete_lifecycle.is_some())
    }

    /// The ledger keys of its pool update: the event id and the further keys, without repeats.
    pub fn ledger_keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = vec![self.event_id.as_str()];
        for k in &self.also_keys {
            if !keys.contains(&k.as_str()) {
                keys.push(k);
            }
        }
        keys
    }
}

/// Decides what to do about `event`.
pub fn decide(event: &Event, facts: Facts<'_>, config: &Config) -> Plan {
    let [event_reason, pod_event_reason] = event_reasons(event).map(str::to_string);
    let mut plan = Plan {
        event_id: event.id.clone(),
        kind: event.kind,
        time: event.time,
        region: event.region.clone(),
        summary: summary(event),
        event_reason,
        pod_event_reason,
        also_keys: crate::domain::sweep::sweep_keys_of(event, facts.instances, config),
        cluster: config.cluster.as_ref().map(ToString::to_string),
        ..Plan::default()
    };
    plan.ignored = match &event.detail {
        Detail::Unsupported { why } => Some(why.clone()),
        Detail::StateChange { state } if !state.is_leaving() => Some(format!(
            "instance state `{state}` is not acted on (only stopping, stopped, shutting-down, terminated)"
        )),
        // Refused when EC2 says the reservation is another kind (an ODCR named by a forged or
        // mistaken warning would drain nodes that are not going).
        Detail::CapacityBlock {
            reservation_id,
            block: Some(block),
            ..
        } if block.capacity_block == Some(false) => Some(format!(
            "refused: EC2 says capacity reservation {reservation_id} is not a Capacity Block: \
             nothing is done"
        )),
        _ => None,
    };
    if plan.ignored.is_some() {
        return plan;
    }
    if let Detail::CapacityBlock {
        reservation_id,
        block,
        ..
    } = &event.detail
        && (event.kind == EventKind::CapacityBlockDelivered || event.instance_ids.is_empty())
    {
        // No instance to act on (a delivery, or a block with none left): the block's own pool
        // (its type and zone, as EC2 says them) is recorded: a delivery only counts (the pool
        // has capacity again); an expiration marks it as any interruption of its kind does.
        let pool = block.as_ref().and_then(|b| b.pool());
        plan.pools
            .extend(pool.map(|pool| mark(event, pool, reservation_id, config)));
        return plan;
    }
    for instance_id in &event.instance_ids {
        let instance = facts.instances.get(instance_id);
        if let Some(mark) = instance.and_then(|i| pool_mark(event, i, config))
            && !choice::closed(event, instance_id)
            && !plan.pools.iter().any(|m| m.pool == mark.pool)
        {
            plan.pools.push(mark);
        }
        plan.actions
            .push(node_action(event, instance_id, facts, config));
    }
    // One update records at most so many pools (the first, in the event's order); the node
    // actions matter more, and all go on.
    let max = crate::domain::pool::MAX_POOLS_PER_UPDATE;
    if plan.pools.len() > max {
        let left: Vec<String> = (plan.pools.split_off(max).iter())
            .map(|m| m.pool.to_string())
            .collect();
        plan.pools_not_recorded = Some(format!(
            "{} of the event's {} pools not recorded: one event records at most {max} (a \
             DynamoDB transaction holds 100 items), the first in the event's order; the node \
             actions are all planned. Not recorded: {}",
            left.len(),
            max + left.len(),
            left.join(", ")
        ));
    }
    plan
}

/// `pool` marked by `event` through `instance_id`: unavailable for a while when the event's
/// kind makes it so.
fn mark(event: &Event, pool: PoolKey, instance_id: &str, config: &Config) -> PoolMark {
    PoolMark {
        pool,
        instance_id: instance_id.to_string(),
        unavailable_until: config
            .unavailable_kinds
            .contains(&event.kind)
            .then(|| event.time + config.pool_ttl),
    }
}

/// What the event is, for people: its kind, and what it says of itself (`spot-interruption
/// (terminate)`, `asg-termination (<group>)`, ...).
fn summary(event: &Event) -> String {
    let what = match &event.detail {
        Detail::Spot { action } | Detail::CapacityReservation { action, .. } => action.to_string(),
        Detail::StateChange { state } => state.to_string(),
        Detail::Scheduled {
            event_type_code, ..
        } => event_type_code.clone(),
        Detail::AsgTermination(l) | Detail::AsgLaunch(l) => l.asg_name.clone(),
        Detail::Impaired { checks } => format!("{checks} status check"),
        Detail::CapacityBlock { reservation_id, .. } => reservation_id.clone(),
        Detail::Rebalance | Detail::Unsupported { .. } => String::new(),
    };
    match what.is_empty() {
        true => event.kind.to_string(),
        false => format!("{} ({what})", event.kind),
    }
}

/// The pool `event` marks through `instance`, if any.
fn pool_mark(event: &Event, instance: &InstanceFacts, config: &Config) -> Option<PoolMark> {
    let pool = match event.kind {
        // The event itself says what capacity the instance ran on.
        EventKind::SpotInterruption => instance.pool_as(CapacityType::Spot),
        EventKind::CapacityReservationInterruption => instance.pool_as(CapacityType::Reserved),
        EventKind::CapacityBlockExpiration | EventKind::CapacityBlockDelivered => {
            instance.pool_as(CapacityType::CapacityBlock)
        }
        // A launch is no capacity lost: no pool is marked, only the hook is answered.
        EventKind::AsgLaunch => None,
        _ => instance.pool(),
    };
    Some(mark(event, pool?, &instance.instance_id, config))
}

/// The reasons of the Kubernetes Events recorded for `event`: on each node
/// ([`Plan::event_reason`]) and on each pod a drain evicts ([`Plan::pod_event_reason`]), one of
/// each per kind (a state change: stopping or terminating).
fn event_reasons(event: &Event) -> [&'static str; 2] {
    match &event.detail {
        Detail::Spot { .. } => ["SpotInterrupted", "SpotInterruption"],
        Detail::Rebalance => ["RebalanceRecommendation"; 2],
        Detail::StateChange {
            state: InstanceState::Stopping | InstanceState::Stopped,
        } => ["InstanceStopping"; 2],
        Detail::StateChange { .. } => ["InstanceTerminating"; 2],
        Detail::Scheduled { .. } => ["ScheduledChange", "ScheduledMaintenance"],
        Detail::AsgTermination(_) => ["AutoScalingTermination", "ASGLifecycleTermination"],
        // A launch hook drains nothing, nor does a delivery; named all the same.
        Detail::AsgLaunch(_) => ["AutoScalingLaunch", "ASGLifecycleLaunch"],
        Detail::Impaired { .. } => ["InstanceImpaired"; 2],
        Detail::CapacityReservation { .. } => [
            "CapacityReservationInterrupted",
            "CapacityReservationInterruption",
        ],
        Detail::CapacityBlock { .. } => match event.kind {
            EventKind::CapacityBlockDelivered => {
                ["CapacityBlockExpiring", "CapacityBlockDelivered"]
            }
            _ => ["CapacityBlockExpiring", "CapacityBlockExpiration"],
        },
        Detail::Unsupported { .. } => ["Unsupported", "NodeDrained"],
    }
}

/// When a drain for this event must be over: the deadline margin before the instance goes, when
/// the event says when (see [`goes_at`]), else the drain timeout after the event.
pub fn drain_deadline(event: &Event, config: &Config) -> DateTime<Utc> {
    goes_at(event, config).map_or(event.time + config.drain_timeout, |goes| {
        goes - config.deadline_margin
    })
}

/// When the instance goes, from what `event` says: a spot or capacity reservation warning's
/// termination time (the usual notice when it says none), a scheduled change's start, or when a
/// Capacity Block's instances begin to terminate (30 minutes before its end, or, when the end is
/// not known, 10 minutes after the warning).
pub fn goes_at(event: &Event, config: &Config) -> Option<DateTime<Utc>> {
    let notice = event.time + config.interruption_notice;
    match &event.detail {
        Detail::Spot { .. } => Some(notice),
        Detail::CapacityReservation {
            termination_time, ..
        } => Some(termination_time.unwrap_or(notice)),
        Detail::Scheduled { start_time, .. } => *start_time,
        Detail::CapacityBlock { end_date, .. } => {
            Some(end_date.map_or(event.time + BLOCK_WARNING_LEAD, |end| {
                end - BLOCK_TERMINATION_LEAD
            }))
        }
        _ => None,
    }
}

/// What to do for `instance_id` of `event`: nothing for another cluster's instance (or, but for
/// a launch, a stale event) or a control-plane node; a launch hook's wait for its node; else the
/// node's action (see [`choice`]) and its lifecycle action.
///
/// A launch lifecycle hook's plan (`asg-launch`): the hook's action is completed with
/// `CONTINUE` once the instance's node is Ready, so that an instance counts as in service only
/// once it has joined the cluster. The plan changes no node: its action is `none`, with the
/// lifecycle action to complete and a deadline (the event time plus the launch timeout, 10
/// minutes). The executor reads the node in each pass (by the name planned here, else the
/// instance id) and completes the action when the node runs the instance and is Ready; until
/// then the passes go on, keeping the hook alive with heartbeats; past the deadline the hook is
/// left to its own timeout and default result.
///
/// The same rules as a terminate hook's decide whether the action is forewarn's to complete:
/// the settings' lifecycle hooks (`off`: none), and membership (the instance is tagged for this
/// cluster, or one of its nodes already runs on it). An instance tagged for another cluster, or
/// whose node is control-plane, is left alone. A launch event is not refused as older than the
/// instance's launch: Auto Scaling sends it as the instance starts, and leaving a launch hook
/// alone makes Auto Scaling take its default result, usually `ABANDON` (the instance is
/// terminated).
fn node_action(event: &Event, instance_id: &str, facts: Facts<'_>, config: &Config) -> NodeAction {
    let instance = facts.instances.get(instance_id);
    let mut out = NodeAction {
        instance_id: instance_id.to_string(),
        ..NodeAction::default()
    };
    let launch = matches!(event.detail, Detail::AsgLaunch(_));
    let refused = match launch {
        true => other_cluster(instance, config),
        false => refusal(event, instance, config),
    };
    if let Some(why) = refused {
        out.reason = why;
        return out;
    }
    let node = resolve_node(instance_id, instance, facts.nodes);
    out.node = node.map(|n| n.name.clone());
    if node.is_some_and(NodeFacts::is_control_plane) {
        out.reason = match launch {
            true => "control-plane node: never touched, its lifecycle action left alone",
            false => "control-plane node: never touched",
        }
        .into();
        return out;
    }
    // Its node is one of this cluster's: that is membership enough; with no node of this
    // cluster on it, only its lifecycle action may be completed, and only when the instance is
    // tagged for this cluster (positive membership).
    let member = node.is_some() || tagged_for_us(instance, config);
    if launch {
        // The node is usually not there yet: the name it will have is the instance's private
        // DNS name (the name EKS and Karpenter give nodes on EC2).
        let dns = instance.and_then(|i| i.private_dns.clone());
        out.node = out.node.or(dns.filter(|d| !d.is_empty()));
        let (what, deadline) = (summary(event), event.time + config.launch_timeout);
        out.reason = match lifecycle(event, config, member) {
            Ok(Some(action)) => {
                out.deadline = Some(deadline);
                out.complete_lifecycle = Some(action);
                format!(
                    "{what}: complete the lifecycle action once node {} runs the instance and is \
                     Ready (checked until {}, then left to the hook's own timeout)",
                    out.node.as_deref().unwrap_or(&out.instance_id),
                    deadline.to_rfc3339()
                )
            }
            Ok(None) => format!(
                "{what}: the lifecycle hooks setting is off, the hook is left to its timeout"
            ),
            Err(why) => why,
        };
        return out;
    }
    match node {
        None => out.reason = "no node of this cluster runs on the instance".into(),
        Some(node) if choice::closed(event, instance_id) => {
            choice::way_back(&mut out, event, node, config);
            return out;
        }
        Some(node) => choice::act(&mut out, event, node, instance, facts.followed, config),
    }
    match lifecycle(event, config, member) {
        Ok(action) => out.complete_lifecycle = action,
        Err(why) => out.reason = format!("{}; {why}", out.reason),
    }
    out
}

/// Why the event must not touch this instance at all, if it must not: the instance is another
/// cluster's, or the event is about an earlier run of it.
fn refusal(event: &Event, instance: Option<&InstanceFacts>, config: &Config) -> Option<String> {
    // Safety first: another cluster's instance is never touched, nor its lifecycle action.
    if config.unserved {
        let place = crate::domain::clusters::Place::of_event(event);
        return Some(crate::domain::clusters::refusal(instance, &place));
    }
    // Else another cluster's instance, else a stale event: one dated before the instance's
    // current launch is about an earlier run of it (a late `stopped` state change or stop
    // warning for an instance started again since).
    let launched = (instance.and_then(|i| i.launch_time)).filter(|l| event.time < *l);
    other_cluster(instance, config).or(launched.map(|launched| {
        format!(
            "stale: the event ({}) is older than the instance's current launch ({}): it is \
             about an earlier run of the instance",
            event.time.to_rfc3339(),
            launched.to_rfc3339()
        )
    }))
}

/// Why the instance is another cluster's, when it is tagged for others and not for this one.
fn other_cluster(instance: Option<&InstanceFacts>, config: &Config) -> Option<String> {
    let (ours, instance) = (config.cluster.as_ref()?.name.as_str(), instance?);
    let clusters = instance.clusters();
    (!clusters.is_empty() && !clusters.contains(&ours)).then(|| {
        format!(
            "instance belongs to cluster {} (this is {ours})",
            clusters.join(", ")
        )
    })
}

/// The instance is tagged for this cluster (positive membership: an untagged one is not).
fn tagged_for_us(instance: Option<&InstanceFacts>, config: &Config) -> bool {
    (config.cluster.as_ref().zip(instance))
        .is_some_and(|(ours, instance)| instance.clusters().contains(&ours.name.as_str()))
}

/// The lifecycle action to complete once the node is handled: only a hook of an instance of
/// this cluster (`member`: tagged for it, or running one of its nodes), and, when the settings
/// name hooks, one of those. Completing another group's hook would cut short whatever else waits
/// on it. `Err`: why it is left alone.
fn lifecycle(
    event: &Event,
    config: &Config,
    member: bool,
) -> Result<Option<LifecycleAction>, String> {
    let (Detail::AsgTermination(l) | Detail::AsgLaunch(l)) = &event.detail else {
        return Ok(None);
    };
    if !config.complete_lifecycle_action {
        return Ok(None);
    }
    let (asg, hook) = (&l.asg_name, &l.hook_name);
    if (config.lifecycle_hooks.as_ref()).is_some_and(|hooks| !hooks.contains(hook)) {
        return Err(format!(
            "lifecycle hook {asg}/{hook} left to its owner: not one of the lifecycle hooks \
             forewarn answers"
        ));
    }
    if !member {
        return Err(format!(
            "lifecycle action {asg}/{hook} left alone: the instance is not tagged for this cluster"
        ));
    }
    Ok(Some(l.clone()))
}

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::*;
    use crate::domain::clusters::{ClusterId, Place};
    use crate::domain::event::parse_time;
    use crate::domain::fixtures;

    const CLUSTER: &str = "demo";
    const ID: &str = "i-0a1b2c3d4e5f60001";

    fn t0() -> DateTime<Utc> {
        parse_time("2026-11-20T10:00:00Z").unwrap()
    }

    fn event(kind: EventKind) -> Event {
        fixtures::event(kind, &format!("ev-{kind}"), ID).build()
    }

    fn instance(cluster_tag: &str) -> InstanceFacts {
        fixtures::instance(ID)
            .typed("m5.large", "us-east-1a")
            .capacity(CapacityType::Spot)
            .dns("ip-10-0-1-11.ec2.internal")
            .cluster(cluster_tag)
            .build()
    }

    /// The node situations of the table.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Situation {
        Plain,
        Karpenter,
        Capi,
        ControlPlane,
        OtherCluster,
        AlreadyCordoned,
        NotFound,
    }

    const SITUATIONS: [Situation; 7] = [
        Situation::Plain,
        Situation::Karpenter,
        Situation::Capi,
        Situation::ControlPlane,
        Situation::OtherCluster,
        Situation::AlreadyCordoned,
        Situation::NotFound,
    ];

    fn world(s: Situation) -> (BTreeMap<String, InstanceFacts>, Vec<NodeFacts>) {
        let inst = instance(if s == Situation::OtherCluster {
            "other"
        } else {
            CLUSTER
        });
        let mut node = NodeFacts {
            name: "ip-10-0-1-11.ec2.internal".into(),
            provider_id: Some(format!("aws:///us-east-1a/{ID}")),
            ..NodeFacts::default()
        };
        match s {
            Situation::Karpenter => {
                node.owner = Some(Target::NodeClaim {
                    name: "nc-1".into(),
                })
            }
            Situation::Capi => {
                node.owner = Some(Target::Machine {
                    namespace: "capi".into(),
                    name: "m-1".into(),
                })
            }
            Situation::ControlPlane => {
                node.labels.insert(
                    "node-role.kubernetes.io/control-plane".into(),
                    String::new(),
                );
            }
            Situation::AlreadyCordoned => {
                node.unschedulable = true;
                node.taints.push(crate::domain::config::TAINT_KEY.into());
            }
            _ => {}
        }
        let nodes = if s == Situation::NotFound {
            vec![]
        } else {
            vec![node]
        };
        (BTreeMap::from([(ID.to_string(), inst)]), nodes)
    }

    fn config() -> Config {
        Config {
            cluster: Some(ClusterId::at(&Place::default(), CLUSTER)),
            ..Config::default()
        }
    }

    /// Expected (action, delete target) for each kind × situation, with default configuration.
    fn expected(kind: EventKind, s: Situation) -> (Action, Option<Target>) {
        use Situation::*;
        let node = || {
            Some(Target::Node {
                name: "ip-10-0-1-11.ec2.internal".into(),
            })
        };
        let nodeclaim = || {
            Some(Target::NodeClaim {
                name: "nc-1".into(),
            })
        };
        let machine = || {
            Some(Target::Machine {
                namespace: "capi".into(),
                name: "m-1".into(),
            })
        };
        match (kind, s) {
            (_, ControlPlane | OtherCluster | NotFound) => (Action::None, None),
            (EventKind::Unsupported | EventKind::AsgLaunch, _) => (Action::None, None),
            (EventKind::SpotInterruption, Karpenter) => (Action::Delete, nodeclaim()),
            (EventKind::SpotInterruption, Capi) => (Action::Delete, machine()),
            (EventKind::SpotInterruption, _) => (Action::CordonDrain, None),
            (EventKind::RebalanceRecommendation, AlreadyCordoned) => (Action::None, None),
            (EventKind::RebalanceRecommendation, _) => (Action::Cordon, None),
            (EventKind::StateChange, Karpenter) => (Action::Delete, nodeclaim()),
            (EventKind::StateChange, Capi) => (Action::Delete, machine()),
            (EventKind::StateChange, _) => (Action::Delete, node()),
            (
                EventKind::ScheduledChange
                | EventKind::AsgTermination
                | EventKind::CapacityReservationInterruption
                | EventKind::CapacityBlockExpiration
                | EventKind::Impaired,
                _,
            ) => (Action::CordonDrain, None),
            (EventKind::CapacityBlockDelivered, _) => (Action::None, None),
        }
    }

    #[test]
    fn every_kind_by_every_node_situation() {
        for &kind in EventKind::ALL {
            for s in SITUATIONS {
                let (instances, nodes) = world(s);
                let facts = Facts::new(&instances, &nodes);
                let p = decide(&event(kind), facts, &config());
                let ctx = format!("{kind} × {s:?}: {p:#?}");
                if kind == EventKind::Unsupported {
                    assert!(p.ignored.is_some(), "{ctx}");
                    assert!(p.actions.is_empty() && p.pools.is_empty(), "{ctx}");
                    continue;
                }
                if kind == EventKind::CapacityBlockDelivered {
                    // No node action: a delivery only records its block's pool.
                    assert!(p.actions.is_empty(), "{ctx}");
                    continue;
                }
                if kind == EventKind::AsgLaunch {
                    // No node action and no pool: its cases are `launch`'s tests.
                    assert!(p.pools.is_empty(), "{ctx}");
                    assert_eq!(p.actions[0].action, Action::None, "{ctx}");
                    continue;
                }
                assert_eq!(p.ignored, None, "{ctx}");
                assert_eq!(p.actions.len(), 1, "{ctx}");
                let a = &p.actions[0];
                let (action, target) = expected(kind, s);
                assert_eq!(a.action, action, "{ctx}");
                assert_eq!(a.target, target, "{ctx}");
                assert!(!a.reason.is_empty(), "{ctx}");
                assert_eq!(
                    a.node.is_some(),
                    !matches!(s, Situation::NotFound | Situation::OtherCluster),
                    "{ctx}"
                );
                assert_eq!(a.deadline.is_some(), action == Action::CordonDrain, "{ctx}");
                // pools are recorded whatever the node situation, even for other clusters
                assert_eq!(p.pools.len(), 1, "{ctx}");
                let marks = config().unavailable_kinds.contains(&kind);
                assert_eq!(p.pools[0].unavailable_until.is_some(), marks, "{ctx}");
                // lifecycle completion only for ASG events, never for unsafe nodes
                let completes = kind == EventKind::AsgTermination
                    && !matches!(s, Situation::ControlPlane | Situation::OtherCluster);
                assert_eq!(a.complete_lifecycle.is_some(), completes, "{ctx}");
            }
        }
    }

    #[test]
    fn a_cordon_carries_the_taint_key_of_its_kind() {
        use crate::domain::config::{NTH_TAINT_REBALANCE, NTH_TAINT_SPOT, TAINT_KEY, TaintKeys};
        let (instances, nodes) = world(Situation::Plain);
        let facts = Facts::new(&instances, &nodes);
        let nth = Config {
            taint_keys: TaintKeys::Nth,
            ..config()
        };
        for &kind in EventKind::ALL {
            for c in [&config(), &nth] {
                let p = decide(&event(kind), facts, c);
                let Some(a) = p.actions.first() else {
                    continue;
                };
                let cordons = matches!(a.action, Action::Cordon | Action::CordonDrain);
                let key = if cordons { c.taint_key_for(kind) } else { "" };
                assert_eq!(a.taint_key, key, "{kind}: {a:?}");
            }
        }
        let key = |kind, c: &Config| {
            let p = decide(&event(kind), facts, c);
            p.actions[0].taint_key.clone()
        };
        assert_eq!(key(EventKind::SpotInterruption, &nth), NTH_TAINT_SPOT);
        assert_eq!(key(EventKind::Impaired, &nth), TAINT_KEY);
        assert_eq!(key(EventKind::SpotInterruption, &config()), TAINT_KEY);

        // Already cordoned with the key of the kind: nothing to do; with another key, the
        // cordon runs again and puts its own.
        let rebalance = |nodes: &[NodeFacts], c: &Config| {
            let p = decide(
                &event(EventKind::RebalanceRecommendation),
                Facts::new(&instances, nodes),
                c,
            );
            p.actions[0].action
        };
        let (_, mut nodes) = world(Situation::AlreadyCordoned);
        assert_eq!(rebalance(&nodes, &config()), Action::None);
        assert_eq!(rebalance(&nodes, &nth), Action::Cordon);
        // NTH's key, put by NTH (no record of forewarn's lists it): not forewarn's cordon.
        nodes[0].taints[0] = NTH_TAINT_REBALANCE.into();
        assert_eq!(rebalance(&nodes, &nth), Action::Cordon);
        assert_eq!(rebalance(&nodes, &config()), Action::Cordon);
        // NTH's key, put by forewarn: its record lists it.
        let p = decide(
            &event(EventKind::RebalanceRecommendation),
            Facts::new(&instances, &nodes),
            &nth,
        );
        let record = CordonRecord {
            taints: vec![NTH_TAINT_REBALANCE.into()],
            ..p.actions[0].record.clone().unwrap()
        };
        nodes[0].annotations.insert(
            crate::domain::cordon_record::ANNOTATION_CORDON.into(),
            record.to_annotation(),
        );
        assert_eq!(rebalance(&nodes, &nth), Action::None);
    }

    #[test]
    fn pools_keys_and_windows() {
        let (instances, nodes) = world(Situation::Plain);
        let facts = Facts::new(&instances, &nodes);
        let p = decide(&event(EventKind::SpotInterruption), facts, &config());
        assert_eq!(p.pools[0].pool.to_string(), "spot#m5.large#us-east-1a");
        assert_eq!(
            p.pools[0].unavailable_until,
            Some(t0() + Duration::hours(1))
        );
        let p = decide(
            &event(EventKind::CapacityReservationInterruption),
            facts,
            &config(),
        );
        assert_eq!(p.pools[0].pool.to_string(), "reserved#m5.large#us-east-1a");
        let mut c = config();
        c.pool_ttl = Duration::minutes(10);
        let p = decide(&event(EventKind::SpotInterruption), facts, &c);
        assert_eq!(
            p.pools[0].unavailable_until,
            Some(t0() + Duration::minutes(10))
        );
    }

    #[test]
    fn without_facts_no_pool_and_no_node() {
        let instances = BTreeMap::new();
        let facts = Facts::new(&instances, &[]);
        let p = decide(&event(EventKind::SpotInterruption), facts, &config());
        assert!(p.pools.is_empty());
        assert_eq!(p.actions[0].action, Action::None);
        assert_eq!(p.actions[0].node, None);
    }

    #[test]
    fn deadlines_by_kind() {
        let c = config();
        let spot = event(EventKind::SpotInterruption);
        assert_eq!(drain_deadline(&spot, &c), t0() + Duration::seconds(105));
        let health = event(EventKind::ScheduledChange);
        assert_eq!(
            drain_deadline(&health, &c),
            t0() + Duration::hours(2) - Duration::seconds(15)
        );
        let asg = event(EventKind::AsgTermination);
        assert_eq!(drain_deadline(&asg, &c), t0() + Duration::minutes(5));
        let cr = event(EventKind::CapacityReservationInterruption);
        assert_eq!(drain_deadline(&cr, &c), t0() + Duration::seconds(105));
    }

    /// The pod Events' reason: one per kind (a state change: stopping or terminating, as the
    /// node's says), CamelCase as Kubernetes reasons are, at most the 128 characters allowed.
    #[test]
    fn every_kind_has_a_pod_event_reason_of_its_own() {
        let expected = [
            (EventKind::SpotInterruption, "SpotInterruption"),
            (
                EventKind::RebalanceRecommendation,
                "RebalanceRecommendation",
            ),
            (EventKind::StateChange, "InstanceTerminating"),
            (EventKind::ScheduledChange, "ScheduledMaintenance"),
            (EventKind::AsgTermination, "ASGLifecycleTermination"),
            (EventKind::AsgLaunch, "ASGLifecycleLaunch"),
            (
                EventKind::CapacityReservationInterruption,
                "CapacityReservationInterruption",
            ),
            (
                EventKind::CapacityBlockExpiration,
                "CapacityBlockExpiration",
            ),
            (EventKind::CapacityBlockDelivered, "CapacityBlockDelivered"),
            (EventKind::Impaired, "InstanceImpaired"),
            (EventKind::Unsupported, "NodeDrained"),
        ];
        assert_eq!(expected.len(), EventKind::ALL.len());
        let (instances, nodes) = world(Situation::Plain);
        let reason = |e: &Event| decide(e, Facts::new(&instances, &nodes), &config());
        for (kind, want) in expected {
            let p = reason(&event(kind));
            assert_eq!(p.pod_event_reason, want, "{kind}");
            for r in [want, &p.event_reason] {
                assert!(r.len() <= 128 && r.chars().all(|c| c.is_ascii_alphanumeric()));
                assert!(r.starts_with(|c: char| c.is_ascii_uppercase()));
            }
        }
        let mut all = expected.map(|(_, r)| r);
        all.sort_unstable();
        assert!(all.windows(2).all(|w| w[0] != w[1]), "one reason per kind");
        let mut stopping = event(EventKind::StateChange);
        stopping.detail = Detail::StateChange {
            state: InstanceState::Stopped,
        };
        let p = reason(&stopping);
        assert_eq!(
            [&*p.event_reason, &p.pod_event_reason],
            ["InstanceStopping"; 2]
        );
    }

    #[test]
    fn state_changes_not_leaving_are_ignored() {
        let (instances, nodes) = world(Situation::Plain);
        let facts = Facts::new(&instances, &nodes);
        for state in ["pending", "running"] {
            let mut e = event(EventKind::StateChange);
            e.detail = Detail::StateChange {
                state: state.parse().unwrap(),
            };
            let p = decide(&e, facts, &config());
            assert!(p.ignored.as_deref().unwrap().contains(state));
            assert!(p.actions.is_empty() && p.pools.is_empty());
        }
        // Stopping or shutting down: its containers may still run, so the node is drained, not
        // deleted; deleted once EC2 says stopped or terminated.
        for (state, reason) in [
            (InstanceState::Stopping, "InstanceStopping"),
            (InstanceState::ShuttingDown, "InstanceTerminating"),
        ] {
            let mut e = event(EventKind::StateChange);
            e.detail = Detail::StateChange { state };
            let p = decide(&e, facts, &config());
            assert_eq!(p.event_reason, reason);
            assert_eq!(p.actions[0].action, Action::CordonDrain);
            assert_eq!(p.actions[0].deadline, Some(t0() + Duration::minutes(5)));
            assert!(
                p.actions[0]
                    .reason
                    .contains("deleted once EC2 says stopped")
            );
        }
        for state in [InstanceState::Stopped, InstanceState::Terminated] {
            let mut e = event(EventKind::StateChange);
            e.detail = Detail::StateChange { state };
            let p = decide(&e, facts, &config());
            assert_eq!(p.actions[0].action, Action::Delete);
        }
    }

    #[test]
    fn an_event_older_than_the_instances_launch_is_stale() {
        let (mut instances, nodes) = world(Situation::Plain);
        // Launched before the event: acted on.
        instances.get_mut(ID).unwrap().launch_time = Some(t0() - Duration::hours(1));
        let spot = event(EventKind::SpotInterruption);
        assert_eq!(
            decide_with(&instances, &nodes, &spot).actions[0].action,
            Action::CordonDrain
        );
        // Started again after it (a late stop warning, a late `stopped`): nothing is done.
        instances.get_mut(ID).unwrap().launch_time = Some(t0() + Duration::seconds(1));
        for kind in [EventKind::SpotInterruption, EventKind::StateChange] {
            let mut e = event(kind);
            if kind == EventKind::StateChange {
                e.detail = Detail::StateChange {
                    state: InstanceState::Stopped,
                };
            }
            let p = decide_with(&instances, &nodes, &e);
            assert_eq!(p.actions[0].action, Action::None, "{kind}");
            assert!(p.actions[0].reason.starts_with("stale:"), "{kind}");
            assert_eq!(p.actions[0].complete_lifecycle, None);
        }
    }

    /// The plan of an event against these instances and nodes, with the test configuration.
    fn decide_with(
        instances: &BTreeMap<String, InstanceFacts>,
        nodes: &[NodeFacts],
        e: &Event,
    ) -> Plan {
        decide(e, Facts::new(instances, nodes), &config())
    }

    fn asg_termination(hook: &str) -> Event {
        let mut e = event(EventKind::AsgTermination);
        e.detail = Detail::AsgTermination(LifecycleAction {
            hook_name: hook.into(),
            asg_name: "eks-demo-ng".into(),
            token: "tok".into(),
            account: None,
            region: None,
        });
        e
    }

    #[test]
    fn lifecycle_actions_only_with_positive_membership_and_the_named_hooks() {
        let e = asg_termination("drain");
        // No node, and the instance is not tagged for this cluster (not tagged at all): left.
        let mut untagged = fixtures::instance(ID)
            .typed("m5.large", "us-east-1a")
            .build();
        untagged.tags.clear();
        let instances = BTreeMap::from([(ID.to_string(), untagged)]);
        let facts = Facts::new(&instances, &[]);
        let a = &decide(&e, facts, &config()).actions[0];
        assert_eq!(a.complete_lifecycle, None);
        assert!(
            a.reason.contains("not tagged for this cluster"),
            "{}",
            a.reason
        );
        // Not even known to EC2: left too.
        let empty = BTreeMap::new();
        let unknown = Facts::new(&empty, &[]);
        assert_eq!(
            decide(&e, unknown, &config()).actions[0].complete_lifecycle,
            None
        );
        // Tagged for this cluster, no node: completed.
        let (instances, _) = world(Situation::NotFound);
        let tagged = Facts::new(&instances, &[]);
        assert!(
            decide(&e, tagged, &config()).actions[0]
                .complete_lifecycle
                .is_some()
        );
        // Its node found: completed, unless the hook is not one forewarn answers.
        let (instances, nodes) = world(Situation::Plain);
        let found = Facts::new(&instances, &nodes);
        assert!(
            decide(&e, found, &config()).actions[0]
                .complete_lifecycle
                .is_some()
        );
        let mut only = config();
        only.lifecycle_hooks = Some(["forewarn-drain".to_string()].into());
        let a = &decide(&e, found, &only).actions[0];
        assert_eq!(a.complete_lifecycle, None);
        assert_eq!(a.action, Action::CordonDrain, "the node is still drained");
        assert!(
            a.reason.contains("the lifecycle hooks forewarn answers"),
            "{}",
            a.reason
        );
        let ours = asg_termination("forewarn-drain");
        assert!(
            decide(&ours, found, &only).actions[0]
                .complete_lifecycle
                .is_some()
        );
    }

    /// A rule matching every node replaces the defaults: its actions, and its owned deletes.
    #[test]
    fn a_rule_for_every_node_replaces_actions_and_owned_deletes() {
        let (instances, nodes) = world(Situation::Karpenter);
        let facts = Facts::new(&instances, &nodes);
        let mut c = config();
        c.policy = crate::domain::policy::Policy::parse(
            "rules:\n- name: all\n  nodes: {}\n  delete-owned-on: []\n  \
             actions: {rebalance-recommendation: cordon-drain}\n",
        )
        .unwrap();
        let p = decide(&event(EventKind::SpotInterruption), facts, &c);
        assert_eq!(p.actions[0].action, Action::CordonDrain);
        let p = decide(&event(EventKind::RebalanceRecommendation), facts, &c);
        assert_eq!(p.actions[0].action, Action::CordonDrain);
        c.policy = crate::domain::policy::Policy::parse(
            "rules:\n- name: all\n  nodes: {}\n  delete-owned-on: [spot-interruption]\n  \
             actions: {spot-interruption: none}\n",
        )
        .unwrap();
        let p = decide(&event(EventKind::SpotInterruption), facts, &c);
        assert_eq!(
            p.actions[0].action,
            Action::None,
            "none stays none even when owned"
        );
    }

    /// A policy rule says per node group what the defaults say for all: owned deletes,
    /// surge and the load-balancer exclusion of its nodes' cordons; other nodes keep the
    /// defaults.
    #[test]
    fn a_rules_behaviour_applies_to_its_nodes_only() {
        let (instances, mut nodes) = world(Situation::Karpenter);
        for node in &mut nodes {
            node.labels.insert("pool".into(), "gpu".into());
        }
        let facts = Facts::new(&instances, &nodes);
        let spot = event(EventKind::SpotInterruption);
        let defaults = decide(&spot, facts, &config());
        assert_eq!(defaults.actions[0].action, Action::Delete, "owned: deleted");
        let policy = |extra: &str, on: &str| {
            crate::domain::policy::Policy::parse(&format!(
                "rules:\n  - name: group\n    nodes: {{{on}}}\n    {extra}\n"
            ))
            .unwrap()
        };
        let mut c = config();
        c.policy = policy(
            "delete-owned-on: []\n    surge: [spot-interruption]\n    \
             exclude-from-load-balancers: false",
            "pool: gpu",
        );
        c.surge_kinds.clear();
        let p = decide(&spot, facts, &c);
        let a = &p.actions[0];
        assert_eq!(
            a.action,
            Action::CordonDrain,
            "the rule deletes no owned node"
        );
        assert!(a.surge, "the rule surges where the configuration does not");
        assert!(!a.exclude_from_load_balancers);
        // A rule matching other nodes changes nothing here.
        c.policy = policy("delete-owned-on: []", "pool: elsewhere");
        let p = decide(&spot, facts, &c);
        assert_eq!(p.actions[0].action, Action::Delete);
        // A rule not saying whether to exclude its nodes: they are excluded (the default).
        c.policy = policy("delete-owned-on: []", "pool: gpu");
        let p = decide(&spot, facts, &c);
        assert_eq!(p.actions[0].action, Action::CordonDrain);
        assert!(p.actions[0].exclude_from_load_balancers, "the default");
    }

    #[test]
    fn no_cluster_name_means_no_tag_check() {
        let (instances, nodes) = world(Situation::OtherCluster);
        let facts = Facts::new(&instances, &nodes);
        let p = decide(
            &event(EventKind::SpotInterruption),
            facts,
            &Config::default(),
        );
        assert_eq!(p.actions[0].action, Action::CordonDrain);
    }

    #[test]
    fn instance_tagged_for_several_clusters_including_ours_is_ours() {
        let (mut instances, nodes) = world(Situation::Plain);
        instances
            .get_mut(ID)
            .unwrap()
            .tags
            .insert("aws:eks:cluster-name".into(), "other".into());
        let facts = Facts::new(&instances, &nodes);
        let p = decide(&event(EventKind::SpotInterruption), facts, &config());
        assert_eq!(p.actions[0].action, Action::CordonDrain);
    }

    #[test]
    fn asg_completion_when_node_is_gone() {
        let (instances, nodes) = world(Situation::NotFound);
        let facts = Facts::new(&instances, &nodes);
        let p = decide(&event(EventKind::AsgTermination), facts, &config());
        assert!(p.actions[0].complete_lifecycle.is_some());
        assert!(p.has_node_work());
        let mut c = config();
        c.complete_lifecycle_action = false;
        let p = decide(&event(EventKind::AsgTermination), facts, &c);
        assert!(!p.has_node_work());
    }
}
