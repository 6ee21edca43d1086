//! `FOREWARN_TAINT_KEYS=nth` against the fake: a cordon's taint has NTH's key for its kind, the
//! drain passes take it as forewarn's, and the way back removes exactly the taints forewarn put,
//! never one NTH put itself.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use forewarn::domain::config::{Action, NTH_TAINT_SPOT, TaintKeys};
use forewarn::domain::cordon_record::{ANNOTATION_CORDON, CordonRecord, UndoOutcome};
use forewarn::domain::event::{Detail, EventKind, InstanceAction};
use forewarn::domain::fixtures;
use forewarn::ports::Clock;
use serde_json::json;

use crate::support::{ID, NODE, OTHER_NODE, TAINT, World, instance, passes, seed_pods, taints};

/// With NTH's keys, a spot warning (the instance to stop) taints its node
/// `aws-node-termination-handler/spot-itn` beside its other taint, and its drain passes go on
/// under that key (not refused as a removed taint); once the instance runs again, the way back
/// removes that taint, the cordon and the record, and leaves alone a node NTH itself tainted
/// with the same key.
#[tokio::test]
async fn with_nths_keys_a_spot_warnings_node_gets_nths_taint_is_drained_and_given_back() {
    let mut w = World::plain().await;
    w.config.taint_keys = TaintKeys::Nth;
    seed_pods(&w);
    // NTH, still running beside forewarn, cordoned and tainted the other node itself.
    let mut nths = w.node(OTHER_NODE).unwrap();
    nths["spec"]["unschedulable"] = json!(true);
    nths["spec"]["taints"].as_array_mut().unwrap().push(
        json!({"key": NTH_TAINT_SPOT, "value": "spot-itn-0123456789abcdef", "effect": "NoSchedule"}),
    );
    w.fake.insert(nths.clone());
    let nths = w.node(OTHER_NODE).unwrap();

    let event = fixtures::event(EventKind::SpotInterruption, "ev-nth-spot", ID)
        .time(w.clock.now())
        .detail(Detail::Spot {
            action: InstanceAction::Stop,
        })
        .build();
    let plan = w.plan(&event).await;
    assert_eq!(plan.actions[0].action, Action::CordonDrain);
    assert_eq!(plan.actions[0].taint_key, NTH_TAINT_SPOT);
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(forewarn::adapters::embedded::EmbeddedStore::open(dir.path()).unwrap());
    let executor = w.executor().with_keys(store.clone());
    let out = passes(&executor, &plan).await.unwrap().remove(0);

    // Tainted with NTH's key, the other taint kept; forewarn's own key not put.
    assert_eq!(out.result.refused, None, "{out:?}");
    let cordoned = w.node(NODE).unwrap();
    assert_eq!(cordoned["spec"]["unschedulable"], json!(true));
    assert_eq!(
        taints(&cordoned),
        vec![
            ("dedicated".into(), "batch".into(), "NoSchedule".into()),
            (
                NTH_TAINT_SPOT.into(),
                "spot-interruption".into(),
                "NoSchedule".into()
            ),
        ]
    );
    let record: CordonRecord = serde_json::from_str(
        cordoned["metadata"]["annotations"][ANNOTATION_CORDON]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(record.taints, vec![NTH_TAINT_SPOT]);
    // Drained: every pass verified the node still carries the taint of its cordon.
    let drain = out.drain.clone().unwrap();
    let evicted: BTreeSet<&str> = drain.evicted.iter().map(String::as_str).collect();
    assert_eq!(
        evicted,
        BTreeSet::from(["default/web-1", "default/web-2", "kube-system/coredns-1"]),
        "{out:?}"
    );
    assert!(w.pod("default", "web-1").is_none());

    // The instance runs again after its stop: the way back gives the node back.
    w.clock.advance(Duration::from_secs(60));
    let mut again = instance(ID, NODE);
    again.launch_time = Some(w.clock.now());
    let instances =
        forewarn::adapters::snapshot::SnapshotInstances(BTreeMap::from([(ID.to_string(), again)]));
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
    let undone = way_back.run(w.clock.now()).await.unwrap();
    assert_eq!(undone.len(), 1, "{undone:?}");
    assert_eq!(undone[0].node, NODE);
    assert_eq!(undone[0].outcome, Some(UndoOutcome::Undone));
    let back = w.node(NODE).unwrap();
    assert_eq!(back["spec"]["unschedulable"], json!(false));
    assert_eq!(
        taints(&back),
        vec![("dedicated".into(), "batch".into(), "NoSchedule".into())]
    );
    assert!(
        back["metadata"]["annotations"]
            .get(ANNOTATION_CORDON)
            .is_none()
    );
    assert!(taints(&back).iter().all(|t| t.0 != TAINT));
    // NTH's own taint and cordon: as they were.
    assert_eq!(w.node(OTHER_NODE).unwrap()["spec"], nths["spec"]);
    assert!(way_back.run(w.clock.now()).await.unwrap().is_empty());
}
