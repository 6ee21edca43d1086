//! What is undone later: the way back of a `cordon-for` (after its time, keeping an operator's
//! cordon, refusing a rewritten record), and the sweeper's clean-up of the placeholders drains
//! left behind.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use forewarn::app::upkeep::ClusterUpkeep;
use forewarn::domain::config::{Action, LABEL_EXCLUDE_LB};
use forewarn::domain::event::EventKind;
use forewarn::domain::facts::InstanceFacts;
use forewarn::domain::fixtures::{self, pod_object};
use forewarn::ports::{Clock, DrainRole, Pass};
use kube_fake::{Fault, Method};
use serde_json::{Value, json};

use crate::support::{Fleet, ID, NODE, OTHER_NODE, World, event, instance, passes, taints};
use crate::surge::{first_drain_pass, placeholders, surging};

#[tokio::test]
async fn the_sweeper_deletes_placeholders_that_outlived_their_drain() {
    let w = surging().await;
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-surge-left"))
        .await;
    let executor = w.executor();
    // The first drain pass creates the placeholder; then the drain's chain is lost.
    executor.run(&plan, Pass::Cordon).await.unwrap();
    let drain = Pass::Drain {
        started_at: w.clock.now(),
        role: DrainRole::First,
        heartbeat: false,
    };
    executor.run(&plan, drain).await.unwrap();
    assert_eq!(placeholders(&w).len(), 1);
    // A tenant's pod dressed as a placeholder (forewarn's labels, name, class and annotations,
    // expired) in its own namespace: not forewarn's, never deleted.
    let mut forged = placeholders(&w).into_values().next().unwrap();
    forged["metadata"]["namespace"] = json!("default");
    forged["metadata"]["annotations"]["forewarn.io/pod"] = json!("default/forged");
    forged["metadata"].as_object_mut().unwrap().remove("uid");
    forged["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    w.fake.insert(forged);
    // Not expired yet: nothing goes.
    assert!(
        executor
            .clean_placeholders(w.clock.now())
            .await
            .unwrap()
            .is_empty()
    );
    let later = plan.actions[0].deadline.unwrap() + chrono::Duration::seconds(1);
    let dry = w.executor().dry_run(true);
    assert_eq!(dry.clean_placeholders(later).await.unwrap().len(), 1);
    assert_eq!(placeholders(&w).len(), 2, "a dry run deletes nothing");
    let gone = executor.clean_placeholders(later).await.unwrap();
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert!(
        gone[0].starts_with("forewarn/forewarn-placeholder-"),
        "{gone:?}"
    );
    // Only the tenant's look-alike is left: forewarn never deletes it.
    let left = placeholders(&w);
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(
        left.values().next().unwrap()["metadata"]["namespace"],
        "default"
    );
}

/// EC2 does not answer: the sweep cannot look.
struct LeavingDown;

#[async_trait]
impl forewarn::app::leaving::LeavingInstances for LeavingDown {
    async fn leaving(
        &self,
        _place: &forewarn::ports::Place,
        _cluster: &str,
    ) -> Result<Vec<InstanceFacts>, forewarn::ports::PortError> {
        Err(forewarn::ports::PortError::new(
            "ec2",
            forewarn::ports::FailureKind::Unavailable,
            "DescribeInstances: 503 Service Unavailable",
        ))
    }
    async fn statuses(
        &self,
        _place: &forewarn::ports::Place,
    ) -> Result<Vec<forewarn::domain::status::InstanceStatus>, forewarn::ports::PortError> {
        Ok(Vec::new())
    }
}

/// A sweeper run whose sweep cannot look (EC2 down) still cleans up the placeholders drains
/// left, and a delete that fails does not stop the others: the run reports both failures after
/// every step ran.
#[tokio::test]
async fn the_sweepers_clean_up_runs_whatever_else_failed_and_every_delete_is_tried() {
    let w = surging().await;
    // A second controller's pod: two placeholders.
    w.fake
        .insert(pod_object("default", "api-1", NODE, "api", "ReplicaSet"));
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-surge-sweep"))
        .await;
    let executor = w.executor();
    executor.run(&plan, Pass::Cordon).await.unwrap();
    first_drain_pass(&w, &executor, &plan).await;
    let made = placeholders(&w);
    assert_eq!(made.len(), 2, "{made:?}");
    // The drain's chain is lost; later, the first delete is answered 500.
    let later = plan.actions[0].deadline.unwrap() + chrono::Duration::seconds(1);
    w.clock
        .sleep((later - w.clock.now()).to_std().unwrap())
        .await;
    w.fake.inject(
        Fault::new(500)
            .method(Method::DELETE)
            .path_contains("/api/v1/namespaces/forewarn/pods/"),
    );
    let dir = tempfile::tempdir().unwrap();
    let sweeper = forewarn::app::sweeper::Sweeper {
        handler: forewarn::app::handler::Handler {
            fleet: Fleet::one(w.cluster()),
            ..w.handler(dir.path())
        },
        leaving: Arc::new(LeavingDown),
        region: Some("us-east-1".into()),
        priorities: None,
        preflight: Default::default(),
    };
    let run = sweeper.run(None).await;
    assert!(
        run.runs[0].findings.is_err(),
        "EC2 is down: the sweep cannot look"
    );
    // The hourly preflight ran whatever else failed: each of the sweeper's writes proved.
    let proofs = run.runs[0]
        .preflight
        .as_ref()
        .expect("the first run proves");
    assert_eq!(proofs.len(), 7, "{proofs:?}");
    let answer = run.answer();
    let cluster = answer["clusters"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap();
    assert!(cluster["preflight"]["cordon"].is_string(), "{answer}");
    let failures = run.failures();
    assert!(failures[0].contains("503"), "{failures:?}");
    assert!(
        failures
            .iter()
            .any(|f| f.contains("placeholders: 1 of 2 failed")),
        "{failures:?}"
    );
    assert_eq!(placeholders(&w).len(), 1, "the other delete went through");
    // The next run deletes what is left.
    let again = sweeper.run(None).await;
    assert_eq!(again.runs[0].placeholders.as_ref().unwrap().len(), 1);
    assert!(again.runs[0].preflight.is_none(), "once an hour");
    assert!(placeholders(&w).is_empty());
}

/// The way back against the fake: a `cordon-for` of seconds is undone after its time and not
/// before (taint, cordon, record and the load-balancer label forewarn added all go; the other
/// taint stays), with an `Uncordoned` Event; a node cordoned by someone else is never touched.
#[tokio::test]
async fn a_cordon_for_is_undone_after_its_time_and_anothers_cordon_is_kept() {
    let mut w = World::plain().await;
    w.config.policy = forewarn::domain::policy::Policy::parse(
        "rules:\n- name: all\n  nodes: {}\n  actions: {rebalance-recommendation: cordon-for 30s}\n",
    )
    .unwrap();
    // Someone else cordoned the other node.
    let mut theirs = w.node(OTHER_NODE).unwrap();
    theirs["spec"]["unschedulable"] = json!(true);
    w.fake.insert(theirs.clone());
    let event = fixtures::event(EventKind::RebalanceRecommendation, "ev-for", ID)
        .time(w.clock.now())
        .build();
    let plan = w.plan(&event).await;
    assert_eq!(plan.actions[0].action, Action::Cordon);
    assert!(
        plan.actions[0]
            .reason
            .starts_with("rule all: cordon-for 30s"),
        "{}",
        plan.actions[0].reason
    );
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(forewarn::adapters::embedded::EmbeddedStore::open(dir.path()).unwrap());
    let executor = w.executor().with_keys(store.clone());
    passes(&executor, &plan).await.unwrap();
    let cordoned = w.node(NODE).unwrap();
    assert_eq!(cordoned["spec"]["unschedulable"], json!(true));
    assert!(
        cordoned["metadata"]["annotations"][forewarn::domain::cordon_record::ANNOTATION_CORDON]
            .is_string()
    );

    let instances = forewarn::adapters::snapshot::SnapshotInstances(BTreeMap::from([(
        ID.to_string(),
        instance(ID, NODE),
    )]));
    let directory = w.clients.clone();
    let way_back = forewarn::app::wayback::WayBack {
        nodes: &directory,
        instances: &instances,
        store: store.as_ref(),
        upkeep: Some(&executor),
        taint_key: &w.config.taint_key,
        statuses: None,
        place: &forewarn::ports::Place::default(),
    };
    // Before its time: nothing undone.
    w.clock.advance(Duration::from_secs(29));
    assert!(way_back.run(w.clock.now()).await.unwrap().is_empty());
    assert_eq!(w.node(NODE).unwrap()["spec"]["unschedulable"], json!(true));

    w.clock.advance(Duration::from_secs(2));
    let undone = way_back.run(w.clock.now()).await.unwrap();
    assert_eq!(undone.len(), 1, "{undone:?}");
    assert_eq!(undone[0].node, NODE);
    assert_eq!(
        undone[0].outcome,
        Some(forewarn::domain::cordon_record::UndoOutcome::Undone)
    );
    let back = w.node(NODE).unwrap();
    assert_eq!(back["spec"]["unschedulable"], json!(false));
    let taint_keys: Vec<String> = taints(&back).into_iter().map(|t| t.0).collect();
    assert_eq!(taint_keys, vec!["dedicated"]);
    assert!(
        back["metadata"]["annotations"]
            .get(forewarn::domain::cordon_record::ANNOTATION_CORDON)
            .is_none()
    );
    assert!(back["metadata"]["labels"].get(LABEL_EXCLUDE_LB).is_none());
    assert!(
        w.fake
            .events()
            .iter()
            .any(|e| e["reason"] == json!("Uncordoned")
                && e["note"].as_str().unwrap_or_default().contains("ran until")),
        "{:#?}",
        w.fake.events()
    );
    // Someone else's cordon is as it was.
    assert_eq!(w.node(OTHER_NODE).unwrap()["spec"], theirs["spec"]);
    // Run again: nothing left to undo.
    assert!(way_back.run(w.clock.now()).await.unwrap().is_empty());
}

/// The way back undoes only what forewarn did: a node an operator cordoned before forewarn's
/// cordon-for stays cordoned when forewarn's goes (its taint and record removed); a record the
/// node's kubelet rewrote (a shorter cordon) does not verify, is reported refused and leaves
/// the node as it is.
#[tokio::test]
async fn an_operators_cordon_survives_the_way_back_and_a_rewritten_record_is_refused() {
    use forewarn::domain::cordon_record::{ANNOTATION_CORDON, UndoOutcome};
    let mut w = World::plain().await;
    w.config.policy = forewarn::domain::policy::Policy::parse(
        "rules:\n- name: all\n  nodes: {}\n  actions: {rebalance-recommendation: cordon-for 30s}\n",
    )
    .unwrap();
    let mut operators = w.node(NODE).unwrap();
    operators["spec"]["unschedulable"] = json!(true);
    w.fake.insert(operators);
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(forewarn::adapters::embedded::EmbeddedStore::open(dir.path()).unwrap());
    let executor = w.executor().with_keys(store.clone());
    let cordon = |id: &str| {
        fixtures::event(EventKind::RebalanceRecommendation, id, ID)
            .time(w.clock.now())
            .build()
    };
    let plan = w.plan(&cordon("ev-1")).await;
    passes(&executor, &plan).await.unwrap();
    let instances = forewarn::adapters::snapshot::SnapshotInstances(BTreeMap::from([(
        ID.to_string(),
        instance(ID, NODE),
    )]));
    let directory = w.clients.clone();
    let way_back = forewarn::app::wayback::WayBack {
        nodes: &directory,
        instances: &instances,
        store: store.as_ref(),
        upkeep: Some(&executor),
        taint_key: &w.config.taint_key,
        statuses: None,
        place: &forewarn::ports::Place::default(),
    };
    w.clock.advance(Duration::from_secs(31));
    let undone = way_back.run(w.clock.now()).await.unwrap();
    assert_eq!(undone.len(), 1, "{undone:?}");
    assert_eq!(undone[0].outcome, Some(UndoOutcome::Undone));
    let back = w.node(NODE).unwrap();
    assert_eq!(
        back["spec"]["unschedulable"],
        json!(true),
        "the operator's cordon stays"
    );
    assert!(taints(&back).iter().all(|t| t.0 != w.config.taint_key));
    assert!(
        back["metadata"]["annotations"]
            .get(ANNOTATION_CORDON)
            .is_none()
    );

    // Cordoned again by forewarn (the node schedulable now), for 30 s; the kubelet moves the
    // record's end to the past.
    let mut schedulable = w.node(NODE).unwrap();
    schedulable["spec"]["unschedulable"] = json!(false);
    w.fake.insert(schedulable);
    let plan = w.plan(&cordon("ev-2")).await;
    passes(&executor, &plan).await.unwrap();
    let mut node = w.node(NODE).unwrap();
    let mut record: Value = serde_json::from_str(
        node["metadata"]["annotations"][ANNOTATION_CORDON]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    record["until"] = json!((w.clock.now() - chrono::Duration::seconds(1)).to_rfc3339());
    node["metadata"]["annotations"][ANNOTATION_CORDON] = json!(record.to_string());
    w.fake.insert(node.clone());
    let reports = way_back.run(w.clock.now()).await.unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(
        matches!(&reports[0].outcome, Some(UndoOutcome::Refused { why }) if why.contains("does not verify")),
        "{reports:?}"
    );
    assert!(
        reports[0].why.contains("not one forewarn signed"),
        "{reports:?}"
    );
    let after = w.node(NODE).unwrap();
    assert_eq!(after["spec"], node["spec"], "left as it was");
    assert_eq!(
        after["metadata"]["annotations"],
        node["metadata"]["annotations"]
    );
}
