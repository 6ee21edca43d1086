//! The policy ConfigMap: read from forewarn's namespace only, a bad update keeps the good
//! policy, a rule asking more than the deployment allows is refused.

use std::collections::BTreeMap;
use std::time::Duration;

use forewarn::domain::config::Action;
use forewarn::domain::event::EventKind;
use serde_json::{Value, json};

use crate::support::{Cluster, Fleet, World, event};

pub(crate) fn policy_configmap(namespace: &str, yaml: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "forewarn-policy", "namespace": namespace},
        "data": {"policy.yaml": yaml}})
}

/// The PolicyRefused Events recorded so far.
fn policy_refusals(w: &World) -> Vec<Value> {
    w.fake
        .list("events.k8s.io/v1", "Event")
        .into_iter()
        .filter(|e| e["reason"] == json!("PolicyRefused"))
        .collect()
}

/// The functions read the policy from the ConfigMap in forewarn's namespace (never
/// kube-system's): a rule applies to the next event; a bad update keeps the good policy, with a
/// Warning Event on the ConfigMap.
#[tokio::test]
async fn the_functions_read_the_policy_configmap_and_keep_the_good_one() {
    let w = World::plain().await;
    // Whoever writes ConfigMaps in kube-system: not read.
    w.fake.insert(policy_configmap(
        "kube-system",
        "rules:\n- name: planted\n  nodes: {}\n  actions: {rebalance-recommendation: cordon-drain}\n",
    ));
    let dir = tempfile::tempdir().unwrap();
    let handler = forewarn::app::handler::Handler {
        fleet: Fleet::one(Cluster {
            policies: Some(w.policies()),
            ..Cluster::none()
        }),
        ..w.handler(dir.path())
    };
    assert!(
        config_in(&handler).await.policy.rules.is_empty(),
        "kube-system's ConfigMap is not forewarn's policy"
    );
    w.fake.insert(policy_configmap(
        "forewarn",
        "rules:\n- name: quiet\n  nodes: {}\n  actions: {rebalance-recommendation: cordon}\n",
    ));
    w.clock.advance(Duration::from_secs(61));
    assert_eq!(
        config_in(&handler).await.policy.rules[0].name,
        "quiet",
        "read from forewarn's namespace"
    );
    w.fake.insert(policy_configmap(
        "forewarn",
        "rules:\n- name: quiet\n  nodes: {}\n  actions: {rebalance-recommendation: evaporate}\n",
    ));
    w.clock.advance(Duration::from_secs(61));
    let config = config_in(&handler).await;
    assert_eq!(
        config.policy.rules[0].name, "quiet",
        "the good policy is kept"
    );
    let refused = policy_refusals(&w);
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert_eq!(refused[0]["regarding"]["name"], json!("forewarn-policy"));
    assert_eq!(refused[0]["regarding"]["namespace"], json!("forewarn"));
    assert_eq!(refused[0]["metadata"]["namespace"], json!("forewarn"));
    assert!(
        refused[0]["note"].as_str().unwrap().contains(
            "the last good one is kept: rules[0].actions.rebalance-recommendation: unknown \
             action \"evaporate\""
        ),
        "{}",
        refused[0]["note"]
    );
    assert!(
        w.fake
            .requests()
            .iter()
            .all(|r| !r.path.contains("/namespaces/kube-system/")),
        "kube-system is never read for the policy"
    );
}

/// A ConfigMap writer asks more than the deployment allows (FOREWARN_POLICY_ALLOW, default every
/// action but `delete` and `none`): that rule is refused naming its field, with a PolicyRefused
/// Event, and its nodes keep the defaults — the node is cordoned as the defaults say, never
/// deleted — while the policy's other rules apply.
#[tokio::test]
async fn a_configmap_rule_asking_delete_is_refused_and_its_nodes_keep_the_defaults() {
    let w = World::plain().await;
    w.fake.insert(policy_configmap(
        "forewarn",
        "rules:\n\
         - name: others\n  nodes: {pool: elsewhere}\n  actions: {rebalance-recommendation: cordon-for 1h}\n\
         - name: everything\n  nodes: {}\n  actions: {rebalance-recommendation: delete, spot-interruption: none}\n",
    ));
    let dir = tempfile::tempdir().unwrap();
    let handler = forewarn::app::handler::Handler {
        fleet: Fleet::one(Cluster {
            policies: Some(w.policies()),
            ..Cluster::none()
        }),
        ..w.handler(dir.path())
    };
    let config = config_in(&handler).await;
    // One refusal for the rule (naming its first field asking too much).
    let refused = policy_refusals(&w);
    assert_eq!(refused.len(), 1, "{refused:#?}");
    let note = refused[0]["note"].as_str().unwrap();
    assert!(
        note.starts_with("rules[1].actions.spot-interruption: rule \"everything\" asks \"none\"")
            && note.contains("its nodes keep the defaults"),
        "{note}"
    );
    assert_eq!(refused[0]["type"], json!("Warning"));
    // The other rule as written; the refused rule's nodes: the defaults, for every kind.
    let elsewhere = BTreeMap::from([("pool".to_string(), "elsewhere".to_string())]);
    assert_eq!(
        (config.policy.rule(&elsewhere))
            .and_then(|r| r.actions.get(&EventKind::RebalanceRecommendation))
            .map(|a| a.to_string())
            .as_deref(),
        Some("cordon-for 1h")
    );
    for kind in [
        EventKind::RebalanceRecommendation,
        EventKind::SpotInterruption,
    ] {
        assert_eq!(
            (config.policy.rule(&BTreeMap::new())).and_then(|r| r.actions.get(&kind)),
            None,
            "{kind:?}"
        );
    }
    // The plans of the node under the policy read: the defaults' actions, never a delete.
    let mut w = w;
    w.config.policy = config.policy.clone();
    let default = forewarn::domain::config::default_action;
    for kind in [
        EventKind::RebalanceRecommendation,
        EventKind::SpotInterruption,
    ] {
        let plan = w.plan(&event(kind, &format!("ev-policy-{kind:?}"))).await;
        assert_eq!(plan.actions[0].action, default(kind), "{kind:?}");
        assert_ne!(plan.actions[0].action, Action::Delete);
    }
    // The `none` it asked on spot warnings is refused too: the node is drained.
    assert_eq!(default(EventKind::SpotInterruption), Action::CordonDrain);
}

/// The configuration `handler` decides by now in its lone cluster.
async fn config_in(handler: &forewarn::app::handler::Handler) -> forewarn::domain::config::Config {
    let cluster = handler.fleet.cluster(None).await.unwrap();
    cluster
        .config(&handler.config, handler.clock.as_ref())
        .await
}
