//! Which action an event takes on a node: the default of its kind,
//! or what the policy's first rule matching the node says (an `adaptive` recommendation
//! decided from its pool's history); the cordon record that goes with it; and the way back
//! an AWS Health `closed` update starts.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::NodeAction;
use crate::domain::config::{Action, Config, DELETE_OWNED_ON, default_action};
use crate::domain::cordon_record::CordonRecord;
use crate::domain::event::{Detail, Event, InstanceAction, InstanceState};
use crate::domain::facts::{InstanceFacts, NodeFacts, Target};
use crate::domain::policy::{Followed, PolicyAction};
use crate::domain::pool::PoolKey;

/// Sets `out`'s action for `event` on `node` (of `instance`): the policy's, else the default;
/// its target, deadline and reason (the policy's why first), and for a cordon its record, taint
/// key and load balancer exclusion.
pub(super) fn act(
    out: &mut NodeAction,
    event: &Event,
    node: &NodeFacts,
    instance: Option<&InstanceFacts>,
    followed: &BTreeMap<PoolKey, Followed>,
    config: &Config,
) {
    let rule = config.policy.rule(&node.labels);
    let asked = rule.and_then(|r| r.actions.get(&event.kind).copied());
    let adaptive = &config.policy.adaptive;
    // The rule's action and why (`adaptive` decided from the pool's history).
    let chosen = asked.map(|a| match a {
        // Rebalance recommendations only (as parsed): the pool is the instance's own.
        PolicyAction::Adaptive => {
            adaptive.choose(instance.and_then(InstanceFacts::pool).as_ref(), followed)
        }
        a => (a, a.to_string()),
    });
    // The node action it carries out, and how long a cordon lasts (`cordon-for`).
    let (mut action, lasts) = match chosen.as_ref().map(|(a, _)| *a) {
        None => (default_action(event.kind), None),
        // A drain for a recommendation lasts its window: no interruption by then, the reason
        // is gone and the way back gives the node back.
        Some(PolicyAction::CordonDrain) if asked == Some(PolicyAction::Adaptive) => {
            (Action::CordonDrain, Some(adaptive.window))
        }
        Some(PolicyAction::None | PolicyAction::Adaptive) => (Action::None, None),
        Some(PolicyAction::Cordon) => (Action::Cordon, None),
        Some(PolicyAction::CordonFor(d)) => (Action::Cordon, Some(d)),
        Some(PolicyAction::CordonDrain) => (Action::CordonDrain, None),
        Some(PolicyAction::Delete) => (Action::Delete, None),
    };
    // A rule's action is what the user chose for these nodes; the default goes through the
    // owner where its rule's `delete-owned-on` says so, else where [`DELETE_OWNED_ON`] does.
    let owned = rule.and_then(|r| r.delete_owned_on.as_ref());
    let owned = owned.map_or(DELETE_OWNED_ON.contains(&event.kind), |k| {
        k.contains(&event.kind)
    });
    if asked.is_none() && action != Action::None && node.owner.is_some() && owned {
        action = Action::Delete;
    }
    let stopping = matches!(
        &event.detail,
        Detail::StateChange {
            state: InstanceState::Stopping | InstanceState::ShuttingDown
        }
    );
    if action == Action::Delete && stopping {
        // Its containers may still run: deleting the Node now would let a StatefulSet start a
        // second copy of a pod while the first still runs. Drain it; the Node is deleted once EC2
        // says `stopped` or `terminated`.
        action = Action::CordonDrain;
    }
    // Only a rule's cordon or drain lasts, and neither becomes another action above.
    let until = lasts.map(|d| event.time + d);
    let record = record(event, &out.instance_id, until, rule.map(|r| r.name.clone()));
    let already = action == Action::Cordon && cordoned(node, event, &record, config);
    let what = super::summary(event);
    out.reason = match action {
        _ if already => "already cordoned by forewarn".into(),
        Action::None | Action::Uncordon => format!("{} is configured to do nothing", event.kind),
        Action::Cordon => {
            let until = (until.map(|u| format!(" until {}", u.to_rfc3339()))).unwrap_or_default();
            format!("{what}: keep new pods off the node{until}")
        }
        Action::CordonDrain => {
            out.deadline = Some(super::drain_deadline(event, config));
            out.grace_to_deadline = super::goes_at(event, config).is_some();
            // Its rule's `surge` kinds, else the configuration's.
            let surges = rule.and_then(|r| r.surge.as_ref());
            out.surge = surges.unwrap_or(&config.surge_kinds).contains(&event.kind);
            out.addresses = instance.map(|i| i.addresses.clone()).unwrap_or_default();
            match stopping {
                true => format!(
                    "{what}: move pods off while it shuts down; the node is deleted once EC2 says \
                     stopped or terminated"
                ),
                false => format!("{what}: move pods off before the instance goes"),
            }
        }
        Action::Delete => {
            out.target = Some(node.owner.clone().unwrap_or_else(|| Target::Node {
                name: node.name.clone(),
            }));
            match &node.owner {
                Some(owner) => {
                    format!("{what}: delete {owner} so its controller drains and replaces the node")
                }
                None => format!("{what}: the instance is going away"),
            }
        }
    };
    // `none` and `uncordon` leave the node as it is.
    if action != Action::Uncordon && !already {
        out.action = action;
    }
    if matches!(out.action, Action::Cordon | Action::CordonDrain) {
        out.record = Some(record);
        out.taint_key = config.taint_key_for(event.kind).to_string();
        // Out of external load balancers unless its rule says otherwise.
        out.exclude_from_load_balancers =
            (rule.and_then(|r| r.exclude_from_load_balancers)).unwrap_or(true);
    }
    if let Some((_, why)) = chosen {
        let rule = rule.map_or("", |r| &r.name);
        out.reason = format!("rule {rule}: {why}; {}", out.reason);
    }
}

/// The record a cordon for `event` on `instance_id`'s node writes: until when, for which rule.
fn record(
    event: &Event,
    instance_id: &str,
    until: Option<DateTime<Utc>>,
    rule: Option<String>,
) -> CordonRecord {
    CordonRecord {
        until,
        rule,
        health_event: match &event.detail {
            Detail::Scheduled { event_arn, .. } => event_arn.clone(),
            _ => None,
        },
        stops: match &event.detail {
            Detail::Spot { action } | Detail::CapacityReservation { action, .. } => {
                matches!(action, InstanceAction::Stop | InstanceAction::Hibernate)
            }
            Detail::StateChange { state } => {
                matches!(state, InstanceState::Stopping | InstanceState::Stopped)
            }
            _ => false,
        },
        // The rest is the cordon's to know, from the node as it writes it.
        ..CordonRecord::new(event.kind, &event.id, instance_id, event.time)
    }
}

/// `node` is already as a cordon for `event` writing `new` would leave it: unschedulable, with
/// forewarn's taint of the kind's key (forewarn's own key is forewarn's whoever put it; another,
/// NTH's, only when the node's cordon record lists it), and a record that already says what
/// `new` would (otherwise the cordon runs again to record the new reason).
fn cordoned(node: &NodeFacts, event: &Event, new: &CordonRecord, config: &Config) -> bool {
    let (key, existing) = (config.taint_key_for(event.kind), CordonRecord::of(node));
    let listed = existing.iter().any(|r| r.taints.iter().any(|k| k == key));
    node.unschedulable
        && node.has_taint(key)
        && (key == config.taint_key || listed)
        // No record: cordoned by forewarn before records were kept, for a reason not known, it
        // keeps its cordon as it is (a `cordon-for` must not give it an end).
        && existing.is_none_or(|e| new.after(Some(&e)) == e.unsigned())
}

/// The update of an AWS Health scheduled change says it is over for this instance.
pub(super) fn closed(event: &Event, instance_id: &str) -> bool {
    matches!(&event.detail, Detail::Scheduled { closed, .. } if closed.iter().any(|c| c == instance_id))
}

/// A `closed` Health update cordons nothing: it undoes the cordon forewarn put on `node` for
/// the same Health event (its `eventArn`), and leaves any other alone.
pub(super) fn way_back(out: &mut NodeAction, event: &Event, node: &NodeFacts, config: &Config) {
    let Detail::Scheduled { event_arn, .. } = &event.detail else {
        return;
    };
    let record = CordonRecord::of(node).filter(|r| {
        r.tainted(node, &config.taint_key)
            && r.health_event.is_some()
            && r.health_event == *event_arn
    });
    out.reason = match record {
        // A closed update older than the cordon it would undo is stale (a replay, or a late
        // delivery after a newer update cordoned again).
        Some(record) if event.time < record.at => format!(
            "stale: the closed update ({}) is older than the cordon it would undo ({}): left \
             cordoned",
            event.time.to_rfc3339(),
            record.at.to_rfc3339()
        ),
        Some(record) => {
            out.action = Action::Uncordon;
            out.record = Some(record);
            format!(
                "AWS Health closed the scheduled change {}: undo forewarn's cordon",
                event_arn.as_deref().unwrap_or_default()
            )
        }
        None => "AWS Health closed the scheduled change; the node carries no cordon of forewarn's \
                 for it: nothing to undo"
            .into(),
    };
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use chrono::Duration;

    use super::super::{Facts, decide};
    use super::*;
    use crate::domain::config::TAINT_KEY;
    use crate::domain::event::EventKind;
    use crate::domain::facts::Target;
    use crate::domain::fixtures::{self, t0};
    use crate::domain::policy::Policy;
    use crate::domain::pool::CapacityType;

    const ID: &str = "i-0a1b2c3d4e5f60001";
    const POLICY: &str = "rules:\n\
        - name: batch\n  nodes: {pool: batch}\n  actions: {rebalance-recommendation: none, spot-interruption: cordon-drain}\n\
        - name: web\n  nodes: {pool: web}\n  actions: {rebalance-recommendation: adaptive, scheduled-change: cordon-for 6h}\n";

    fn config() -> Config {
        Config {
            policy: Policy::parse(POLICY).unwrap(),
            ..Config::default()
        }
    }

    fn instances() -> BTreeMap<String, InstanceFacts> {
        let i = fixtures::instance(ID)
            .typed("m5.large", "us-east-1a")
            .capacity(CapacityType::Spot)
            .build();
        BTreeMap::from([(ID.to_string(), i)])
    }

    fn node(pool: &str) -> NodeFacts {
        let mut n = fixtures::node_facts("n1", ID);
        n.labels.insert("pool".into(), pool.into());
        n
    }

    fn plan_for(
        kind: EventKind,
        node: NodeFacts,
        followed: &BTreeMap<PoolKey, Followed>,
    ) -> NodeAction {
        let event = fixtures::event(kind, "e-1", ID).build();
        let instances = instances();
        let nodes = vec![node];
        let facts = Facts {
            followed,
            ..Facts::new(&instances, &nodes)
        };
        decide(&event, facts, &config()).actions.remove(0)
    }

    #[test]
    fn a_rule_replaces_the_default_of_the_kinds_it_names() {
        let none = BTreeMap::new();
        let a = plan_for(EventKind::RebalanceRecommendation, node("batch"), &none);
        assert_eq!(a.action, Action::None);
        assert!(a.reason.starts_with("rule batch: none; "), "{}", a.reason);
        // A node no rule matches keeps the default (rebalance: cordon).
        let a = plan_for(EventKind::RebalanceRecommendation, node("other"), &none);
        assert_eq!(a.action, Action::Cordon);
        assert!(!a.reason.contains("rule"), "{}", a.reason);
        // A rule's action is the user's: not turned into a delete through the owner.
        let mut karpenter = node("batch");
        karpenter.owner = Some(Target::NodeClaim { name: "c".into() });
        let a = plan_for(EventKind::SpotInterruption, karpenter.clone(), &none);
        assert_eq!(a.action, Action::CordonDrain);
        // Without a rule for it, the default goes through the owner as before.
        karpenter.labels.insert("pool".into(), "other".into());
        let a = plan_for(EventKind::SpotInterruption, karpenter, &none);
        assert_eq!(a.action, Action::Delete);
    }

    #[test]
    fn cordon_for_records_when_it_ends() {
        let a = plan_for(EventKind::ScheduledChange, node("web"), &BTreeMap::new());
        assert_eq!(a.action, Action::Cordon);
        let record = a.record.unwrap();
        assert_eq!(record.until, Some(t0() + Duration::hours(6)));
        assert_eq!(record.rule.as_deref(), Some("web"));
        assert_eq!(record.kind, EventKind::ScheduledChange);
        assert!(
            a.reason.starts_with("rule web: cordon-for 6h; "),
            "{}",
            a.reason
        );
    }

    #[test]
    fn adaptive_drains_where_the_pool_history_says_so() {
        let pool = PoolKey::new(CapacityType::Spot, "m5.large", "us-east-1a");
        let hot = BTreeMap::from([(
            pool.clone(),
            Followed {
                recommendations: 8,
                followed: 6,
            },
        )]);
        let a = plan_for(EventKind::RebalanceRecommendation, node("web"), &hot);
        assert_eq!(a.action, Action::CordonDrain);
        assert_eq!(
            a.record.as_ref().unwrap().until,
            Some(t0() + Duration::minutes(30)),
            "the drain lasts the window: no interruption by then, the node comes back"
        );
        assert!(
            a.reason
                .contains("rule web: adaptive: pool spot#m5.large#us-east-1a: 6 of 8"),
            "{}",
            a.reason
        );
        let cold = BTreeMap::from([(
            pool,
            Followed {
                recommendations: 8,
                followed: 1,
            },
        )]);
        let a = plan_for(EventKind::RebalanceRecommendation, node("web"), &cold);
        assert_eq!(a.action, Action::Cordon);
        assert_eq!(
            a.record.unwrap().until,
            Some(t0() + Duration::minutes(30)),
            "otherwise: cordon-for 30m"
        );
    }

    #[test]
    fn a_node_cordoned_for_longer_is_not_cordoned_again_a_shorter_one_is_extended() {
        let mut n = node("web");
        n.unschedulable = true;
        n.taints.push(TAINT_KEY.into());
        let forever = CordonRecord::new(EventKind::SpotInterruption, "e-0", ID, t0());
        n.annotations.insert(
            crate::domain::cordon_record::ANNOTATION_CORDON.into(),
            forever.to_annotation(),
        );
        let a = plan_for(EventKind::ScheduledChange, n.clone(), &BTreeMap::new());
        assert_eq!(a.action, Action::None);
        assert_eq!(
            a.reason,
            "rule web: cordon-for 6h; already cordoned by forewarn"
        );
        let short = CordonRecord {
            until: Some(t0() + Duration::minutes(5)),
            ..forever
        };
        n.annotations.insert(
            crate::domain::cordon_record::ANNOTATION_CORDON.into(),
            short.to_annotation(),
        );
        let a = plan_for(EventKind::ScheduledChange, n, &BTreeMap::new());
        assert_eq!(a.action, Action::Cordon, "the new reason lasts longer");
    }

    #[test]
    fn a_node_forewarn_cordoned_before_records_keeps_its_cordon_as_it_is() {
        let mut n = node("web");
        n.unschedulable = true;
        n.taints.push(TAINT_KEY.into());
        let a = plan_for(EventKind::ScheduledChange, n, &BTreeMap::new());
        assert_eq!(
            a.action,
            Action::None,
            "a cordon-for must not give it an end"
        );
        assert_eq!(
            a.reason,
            "rule web: cordon-for 6h; already cordoned by forewarn"
        );
    }

    #[test]
    fn a_closed_health_update_undoes_only_the_cordon_it_made() {
        let arn = "arn:aws:health:us-east-1::event/EC2/RETIREMENT/x";
        let closed = |closed: Vec<String>| {
            fixtures::event(EventKind::ScheduledChange, "e-closed", ID)
                .detail(Detail::Scheduled {
                    event_type_code: "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED".into(),
                    event_arn: Some(arn.into()),
                    start_time: None,
                    end_time: None,
                    closed,
                })
                .build()
        };
        let record = CordonRecord {
            kind: EventKind::ScheduledChange,
            event_id: "e-upcoming".into(),
            instance_id: ID.into(),
            at: t0(),
            until: None,
            rule: None,
            health_event: Some(arn.into()),
            stops: false,
            excluded_from_lb: true,
            already_unschedulable: false,
            taints: Vec::new(),
            key_id: None,
            mac: None,
        };
        let mut n = node("other");
        n.unschedulable = true;
        n.taints.push(TAINT_KEY.into());
        n.annotations.insert(
            crate::domain::cordon_record::ANNOTATION_CORDON.into(),
            record.to_annotation(),
        );
        let instances = instances();
        let nodes = vec![n.clone()];
        let plan = decide(
            &closed(vec![ID.into()]),
            Facts::new(&instances, &nodes),
            &config(),
        );
        assert_eq!(plan.actions[0].action, Action::Uncordon);
        assert_eq!(plan.actions[0].record.as_ref(), Some(&record));
        // A closed update older than the cordon (a replay, a late delivery) undoes nothing.
        let mut old = closed(vec![ID.into()]);
        old.time = t0() - Duration::hours(1);
        let plan = decide(&old, Facts::new(&instances, &nodes), &config());
        assert_eq!(plan.actions[0].action, Action::None);
        assert!(
            plan.actions[0].reason.starts_with("stale: "),
            "{}",
            plan.actions[0].reason
        );
        assert!(
            plan.pools.is_empty(),
            "a closed update is not counted again"
        );
        // Another Health event's cordon (or someone else's) is left alone.
        let other = CordonRecord {
            health_event: Some("arn:other".into()),
            ..record
        };
        let mut n2 = n.clone();
        n2.annotations.insert(
            crate::domain::cordon_record::ANNOTATION_CORDON.into(),
            other.to_annotation(),
        );
        let nodes = vec![n2];
        let plan = decide(
            &closed(vec![ID.into()]),
            Facts::new(&instances, &nodes),
            &config(),
        );
        assert_eq!(plan.actions[0].action, Action::None);
        // Still open: it cordons as before (the default drains a scheduled change).
        let nodes = vec![node("other")];
        let plan = decide(&closed(vec![]), Facts::new(&instances, &nodes), &config());
        assert_eq!(plan.actions[0].action, Action::CordonDrain);
        assert_eq!(
            plan.actions[0]
                .record
                .as_ref()
                .unwrap()
                .health_event
                .as_deref(),
            Some(arn)
        );
    }
}
