//! The tests of a launch lifecycle hook's plan (`asg-launch`: see [`super::decide`], the
//! `launch` case of its node actions).

use std::collections::BTreeMap;

use super::*;
use crate::domain::clusters::{ClusterId, Place};
use crate::domain::config::Action;
use crate::domain::event::EventKind;
use crate::domain::facts::{InstanceFacts, NodeFacts};
use crate::domain::fixtures;

const ID: &str = "i-0a1b2c3d4e5f60001";
const DNS: &str = "ip-10-0-1-11.ec2.internal";

fn event() -> Event {
    fixtures::event(EventKind::AsgLaunch, "launch-1", ID).build()
}

fn config() -> Config {
    Config {
        cluster: Some(ClusterId::at(&Place::default(), "demo")),
        ..Config::default()
    }
}

fn instances(cluster: Option<&str>) -> BTreeMap<String, InstanceFacts> {
    let mut b = fixtures::instance(ID).dns(DNS);
    if let Some(c) = cluster {
        b = b.cluster(c);
    }
    BTreeMap::from([(ID.to_string(), b.build())])
}

fn plan(
    instances: &BTreeMap<String, InstanceFacts>,
    nodes: &[NodeFacts],
    config: &Config,
) -> NodeAction {
    let p = decide(&event(), Facts::new(instances, nodes), config);
    assert!(p.pools.is_empty(), "a launch marks no pool: {p:?}");
    assert!(p.ignored.is_none());
    assert_eq!(p.event_reason, "AutoScalingLaunch");
    p.actions.into_iter().next().unwrap()
}

#[test]
fn a_tagged_instance_waits_for_its_node_by_its_dns_name() {
    let a = plan(&instances(Some("demo")), &[], &config());
    assert_eq!(a.action, Action::None);
    assert_eq!(a.node.as_deref(), Some(DNS));
    assert!(a.complete_lifecycle.is_some(), "completed once Ready");
    assert_eq!(
        a.deadline,
        Some(fixtures::t0() + chrono::Duration::minutes(10))
    );
    assert!(a.reason.contains("once node ip-10-0-1-11"), "{}", a.reason);
}

#[test]
fn an_untagged_or_foreign_instance_is_left_alone() {
    let a = plan(&instances(None), &[], &config());
    assert!(a.complete_lifecycle.is_none());
    assert!(
        a.reason.contains("not tagged for this cluster"),
        "{}",
        a.reason
    );
    let a = plan(&instances(Some("other")), &[], &config());
    assert!(a.complete_lifecycle.is_none());
    assert!(
        a.reason.contains("belongs to cluster other"),
        "{}",
        a.reason
    );
}

#[test]
fn a_node_already_there_makes_it_a_member_unless_control_plane() {
    let mut node = NodeFacts {
        name: "custom-name".into(),
        provider_id: Some(format!("aws:///us-east-1a/{ID}")),
        ..NodeFacts::default()
    };
    let a = plan(&instances(None), std::slice::from_ref(&node), &config());
    assert_eq!(a.node.as_deref(), Some("custom-name"));
    assert!(a.complete_lifecycle.is_some(), "{}", a.reason);
    node.labels.insert(
        "node-role.kubernetes.io/control-plane".into(),
        String::new(),
    );
    let a = plan(&instances(Some("demo")), &[node], &config());
    assert!(a.complete_lifecycle.is_none());
    assert!(a.reason.contains("control-plane"), "{}", a.reason);
}

#[test]
fn hooks_and_the_switch_are_those_of_terminate_hooks() {
    let mut c = config();
    c.lifecycle_hooks = Some(["other-hook".to_string()].into());
    let a = plan(&instances(Some("demo")), &[], &c);
    assert!(a.complete_lifecycle.is_none());
    assert!(
        a.reason
            .contains("not one of the lifecycle hooks forewarn answers"),
        "{}",
        a.reason
    );
    c.lifecycle_hooks = Some(["hook".to_string()].into());
    assert!(
        plan(&instances(Some("demo")), &[], &c)
            .complete_lifecycle
            .is_some()
    );
    c.complete_lifecycle_action = false;
    let a = plan(&instances(Some("demo")), &[], &c);
    assert!(a.complete_lifecycle.is_none());
    assert!(
        a.reason.contains("the lifecycle hooks setting is off"),
        "{}",
        a.reason
    );
}

#[test]
fn a_launch_older_than_the_instance_is_still_answered() {
    let mut inst = instances(Some("demo"));
    inst.get_mut(ID).unwrap().launch_time = Some(fixtures::t0() + chrono::Duration::seconds(3));
    assert!(plan(&inst, &[], &config()).complete_lifecycle.is_some());
}
