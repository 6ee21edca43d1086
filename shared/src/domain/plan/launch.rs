//! A launch lifecycle hook's plan (`asg-launch`): the hook's action is completed with
//! `CONTINUE` once the instance's node is Ready, so that an instance counts as in service only
//! once it has joined the cluster.
//!
//! The plan changes no node: its action is `none`, with the lifecycle action to complete and a
//! deadline (the event time plus the launch timeout, 10 minutes). The executor reads the node in
//! each pass (by the name planned here, else the instance id) and completes the action when the
//! node runs the instance and is Ready; until then the passes go on, keeping the hook alive with
//! heartbeats; past the deadline the hook is left to its own timeout and default result.
//!
//! The same rules as a terminate hook's decide whether the action is forewarn's to complete:
//! the settings' lifecycle hooks (`off`: none), and membership (the
//! instance is tagged for this cluster, or one of its nodes already runs on it). An instance
//! tagged for another cluster, or whose node is control-plane, is left alone. A launch event is
//! not refused as older than the instance's launch: Auto Scaling sends it as the instance
//! starts, and leaving a launch hook alone makes Auto Scaling take its default result, usually
//! `ABANDON` (the instance is terminated).

use super::{NodeAction, lifecycle};
use crate::domain::config::Config;
use crate::domain::event::Event;
use crate::domain::facts::InstanceFacts;

/// `out`, the node action of a launch hook's instance (no other cluster's, no control-plane
/// node's): the lifecycle action to complete once its node is Ready, when it is forewarn's to
/// complete (`member`: the instance is tagged for this cluster, or runs one of its nodes).
pub(super) fn wait(
    mut out: NodeAction,
    event: &Event,
    instance: Option<&InstanceFacts>,
    member: bool,
    config: &Config,
) -> NodeAction {
    // The node is usually not there yet: the name it will have is the instance's private DNS
    // name (the name EKS and Karpenter give nodes on EC2).
    out.node = out.node.or_else(|| {
        instance
            .and_then(|i| i.private_dns.clone())
            .filter(|d| !d.is_empty())
    });
    match lifecycle(event, config, member) {
        Ok(Some(action)) => {
            let deadline = event.time + config.launch_timeout;
            out.deadline = Some(deadline);
            out.reason = format!(
                "{}: complete the lifecycle action once node {} runs the instance and is Ready \
                 (checked until {}, then left to the hook's own timeout)",
                super::summary(event),
                out.node.as_deref().unwrap_or(&out.instance_id),
                deadline.to_rfc3339()
            );
            out.complete_lifecycle = Some(action);
        }
        Ok(None) => {
            out.reason = format!(
                "{}: the lifecycle hooks setting is off, the hook is left to its timeout",
                super::summary(event)
            );
        }
        Err(why) => out.reason = why.to_string(),
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::{Facts, decide};
    use super::*;
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
            cluster_name: Some("demo".into()),
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
        p.actions.into_iter().next().unwrap()
    }

    #[test]
    fn a_tagged_instance_waits_for_its_node_by_its_dns_name() {
        let a = plan(&instances(Some("demo")), &[], &config());
        assert_eq!(a.action, Action::None);
        assert_eq!(a.node.as_deref(), Some(DNS));
        assert_eq!(a.event_reason, "AutoScalingLaunch");
        let l = a.complete_lifecycle.expect("completed once Ready");
        assert!(l.is_launch());
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
}
