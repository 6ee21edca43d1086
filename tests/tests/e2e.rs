//! End to end on loopback: the `infra/forewarn.yaml` stack on moto (through CloudFormation),
//! instances in moto's EC2, events put on moto's EventBridge and routed by the stack's rules to
//! its SQS queue, the handler consuming the batches exactly as the event source mapping would
//! (the poller of `forewarn_tests::sqs`), the pool table in moto's DynamoDB and the cluster in
//! the Kubernetes API fake.
//!
//! moto quirks this test works with: its CloudFormation ignores the table's TTL (the harness
//! calls UpdateTimeToLive), and once the sweeper's schedule rule exists PutEvents answers 500,
//! so the stack is deployed with `FunctionsDeployed=false` (no event source mapping: the poller
//! plays it).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::types::InstanceType;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use forewarn::adapters::dynamo::DynamoStore;
use forewarn::adapters::ec2::Ec2Directory;
use forewarn::adapters::kube::{ClusterClient, KubeExecutor};
use forewarn::adapters::sqs::SqsRedelivery;
use forewarn::app::handler::Handler;
use forewarn::app::pipeline::Passes;
use forewarn::domain::clusters::{ClusterId, Place};
use forewarn::domain::config::Config;
use forewarn::domain::fixtures::{app_pod as pod, ec2_node};
use forewarn::domain::pool::PoolQuery;
use forewarn::domain::report::Outcome;
use forewarn::ports::PoolStore;
use forewarn_tests::ec2::{Launch, Launched, any_image, launch};
use forewarn_tests::moto::{deploy_stack, runtime, shared, unique_name, workspace_root};
use forewarn_tests::sqs::{drain, peek_bodies};
use kube_fake::KubeFake;
use serde_json::{Value, json};

/// The node of `l` (tainted `dedicated=batch`, which forewarn must keep), with `extra`'s fields
/// merged in (`metadata` key by key).
fn node(l: &Launched, extra: Value) -> Value {
    let mut n = ec2_node(&l.dns, &l.id, &l.zone);
    n["spec"]["taints"] = json!([{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]);
    if let (Some(n), Some(extra)) = (n.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            match (
                k.as_str(),
                n.get_mut("metadata").and_then(Value::as_object_mut),
                v.as_object(),
            ) {
                ("metadata", Some(meta), Some(fields)) => meta.extend(fields.clone()),
                _ => {
                    n.insert(k.clone(), v.clone());
                }
            }
        }
    }
    n
}

fn entry(
    detail_type: &str,
    source: &str,
    detail: Value,
    resources: &[String],
) -> PutEventsRequestEntry {
    PutEventsRequestEntry::builder()
        .source(source)
        .detail_type(detail_type)
        .detail(detail.to_string())
        .set_resources(Some(resources.to_vec()))
        .build()
}

fn arn(id: &str) -> String {
    format!("arn:aws:ec2:us-east-1:123456789012:instance/{id}")
}

/// The instances the events are about: two spot instances warned (one of them Karpenter's),
/// one recommended a rebalance, one stopping, one scheduled for retirement.
struct Fleet {
    spot: Launched,
    karpenter: Launched,
    rebalance: Launched,
    stopping: Launched,
    retiring: Launched,
}

/// The pool table after the batch: the spot pool interrupted twice and unavailable, the
/// rebalance's pool counted, the on-demand pools recorded; pools keyed by zone ID (moto's, for
/// the account's zone names).
async fn assert_the_pool_table(
    store: &DynamoStore,
    sdk: &aws_config::SdkConfig,
) -> (
    chrono::DateTime<chrono::Utc>,
    Vec<forewarn::domain::pool::PoolRecord>,
) {
    let now = chrono::Utc::now();
    let pools = store
        .pools(
            &PoolQuery {
                include_available: true,
                ..PoolQuery::default()
            },
            now,
        )
        .await
        .unwrap();
    let by_key: BTreeMap<String, &forewarn::domain::pool::PoolRecord> =
        pools.iter().map(|p| (p.pool.to_string(), p)).collect();
    let ec2 = aws_sdk_ec2::Client::new(sdk);
    let mut ids = BTreeMap::new();
    for zone in ["us-east-1a", "us-east-1b", "us-east-1c"] {
        ids.insert(
            zone,
            forewarn_tests::ec2::zone_id(&ec2, zone).await.unwrap(),
        );
    }
    let key = |kind: &str, zone: &str| format!("{kind}#{}", ids[zone]);
    let hot = by_key[&key("spot#m5.large", "us-east-1a")];
    assert_eq!(hot.interruptions(), 2);
    assert!(hot.is_unavailable(now));
    assert_eq!(
        by_key[&key("spot#c5.large", "us-east-1b")]
            .counter(forewarn::domain::event::EventKind::RebalanceRecommendation),
        1
    );
    assert!(
        !by_key[&key("spot#c5.large", "us-east-1b")].is_unavailable(now),
        "rebalances only count"
    );
    assert!(by_key.contains_key(&key("on-demand#t3.large", "us-east-1c")));
    assert!(by_key.contains_key(&key("on-demand#m5.xlarge", "us-east-1a")));
    let unavailable = store.pools(&PoolQuery::default(), now).await.unwrap();
    assert_eq!(unavailable.len(), 1, "only the spot pool is unavailable");
    (now, pools)
}

#[test]
fn events_flow_from_eventbridge_to_the_pool_table_and_the_cluster() {
    runtime().block_on(async {
        let sdk = shared().sdk_config();
        let cluster = unique_name("e2e");
        let template = std::fs::read_to_string(workspace_root().join("infra/forewarn.yaml")).unwrap();
        let outputs = deploy_stack(
            &sdk,
            &cluster,
            &template,
            &[("Clusters", &cluster), ("FunctionsDeployed", "false"), ("CreateAccessEntry", "false")],
        )
        .await
        .expect("the stack deploys to moto");
        let table = outputs["TableName"].clone();
        let queue_url = outputs["QueueUrl"].clone();
        let queue_arn = outputs["QueueArn"].clone();
        let dlq_url = outputs["DeadLetterQueueUrl"].clone();

        // EC2: the instances the events are about.
        let fleet = launch_fleet(&sdk, &cluster).await;
        let Fleet { spot, .. } = &fleet;

        // The cluster.
        // As deployed: forewarn's manifests applied, its client in the handler's group.
        let fake = forewarn_tests::cluster::deployed().await;
        seed_cluster(&fake, &fleet);

        // Pods evicted at once: this fake has no scheduler, so placeholders would never run and
        // each pod would wait for its latest safe time, in real seconds. Surge through the
        // pipeline is tested in kube_actions, on the fake's scheduler and autoscaler models.
        let config = Config {
            cluster: Some(ClusterId::at(&Place::default(), &cluster)),
            surge_kinds: Default::default(),
            ..Config::default()
        };
        let clients = ClusterClient::new(forewarn_tests::cluster::client_as(
            &fake,
            forewarn_tests::cluster::HANDLER_GROUP,
        ));
        // The stack's secret, `<stack>-continuation-key`.
        let secret = format!("{cluster}-continuation-key");
        let store = Arc::new(forewarn_tests::moto::keyed_store(&sdk, &table, &secret));
        // Drains continue through the queue, as deployed; evicted pods take 2 s to go.
        fake.set_eviction_grace(Duration::from_secs(2));
        let queue = Arc::new(SqsRedelivery(aws_sdk_sqs::Client::new(&sdk)));
        let handler = Handler {
            redelivery: Some(queue.clone()),
            passes: Passes { interval: Duration::from_secs(1), queue: Some(queue.clone()), kept: Some(Arc::default()), tenant: Default::default() },
            instances: Arc::new(Ec2Directory::from_conf(&sdk)),
            fleet: forewarn::app::fleet::Fleet::one(forewarn::app::fleet::Cluster {
                executor: Some(Arc::new(KubeExecutor::new(clients.clone(), &config))),
                ..forewarn::app::fleet::Cluster::new(None, Arc::new(clients))
            }),
            concurrency: 4,
            ..Handler::new(config.clone(), store.clone())
        };

        // EventBridge: the events as AWS emits them; the rules route them to the queue.
        put_events(&sdk, &fleet).await;

        let sqs = aws_sdk_sqs::Client::new(&sdk);
        // The stack's receives before the dead-letter queue, as the queue's redrive policy holds it.
        let (max_receives, redrive) = redrive_max_receives(&sqs, &queue_url).await;
        assert_eq!(max_receives, 15, "the stack's: {redrive}");
        let first = drain(&sqs, &queue_url, &queue_arn, &handler, 10, 60).await.unwrap();
        // First deliveries (later passes of the drains are continuations: `pass` is set).
        let by_kind = |kind: &str, outcome: Outcome| {
            first.reports.iter().filter(|r| r.pass.is_none() && r.kind.map(|k| k.as_str()) == Some(kind) && r.outcome == outcome).count()
        };
        assert_eq!(by_kind("spot-interruption", Outcome::Acted), 2, "{:#?}", first.reports);
        assert_eq!(by_kind("rebalance-recommendation", Outcome::Acted), 1);
        assert_eq!(by_kind("state-change", Outcome::Acted), 1);
        assert_eq!(by_kind("scheduled-change", Outcome::Acted), 1);
        // The drains went on in continuation passes (the pods take 2 s to go), and each ended
        // complete in its last pass.
        let passes: Vec<&forewarn::domain::report::Report> = first.reports.iter().filter(|r| r.pass.is_some()).collect();
        assert!(!passes.is_empty(), "{:#?}", first.reports);
        assert!(passes.iter().all(|r| r.outcome == Outcome::Acted), "{passes:#?}");
        let ended = passes.iter().filter(|r| r.actions.iter().any(|a| a.drain.is_some_and(|d| !d.pending && d.complete))).count();
        assert_eq!(ended, 3, "the spot warning's, the retirement's and the stopping instance's drains ended: {passes:#?}");
        let failures = first.reports.iter().filter(|r| r.outcome == Outcome::Failed).count();
        assert_eq!(failures, max_receives, "the malformed message is tried maxReceiveCount times");
        assert!(first.reports.iter().filter(|r| r.outcome == Outcome::Failed).all(|r| r.reason.as_deref().unwrap().contains("detail.instance-id")));

        // The malformed message ended in the DLQ; nothing is left in the queue.
        let dead = peek_bodies(&sqs, &dlq_url).await.unwrap();
        assert_eq!(dead.len(), 1, "{dead:?}");
        assert!(!dead[0].contains("instance-id"));
        assert!(peek_bodies(&sqs, &queue_url).await.unwrap().is_empty());

        // The pool table.
        let (now, pools) = assert_the_pool_table(store.as_ref(), &sdk).await;

        // The cluster.
        assert_cluster_acted_on(&fake, &fleet);

        // At-least-once delivery: the spot warning again, as SQS redelivers it. Nothing changes.
        let spot_report = first
            .reports
            .iter()
            .find(|r| r.pass.is_none() && r.instance_ids == vec![spot.id.clone()])
            .unwrap();
        let writes_before = fake.writes().len();
        let body = forewarn::domain::fixtures::spot_json(
            spot_report.event_id.as_deref().unwrap(),
            &spot.id,
            &spot_report.time.unwrap().to_rfc3339(),
        );
        sqs.send_message().queue_url(&queue_url).message_body(body.to_string()).send().await.unwrap();
        let again = drain(&sqs, &queue_url, &queue_arn, &handler, 10, 5).await.unwrap();
        assert_eq!(again.reports.len(), 1);
        assert_eq!(again.reports[0].outcome, Outcome::Duplicate, "{:#?}", again.reports);
        assert_eq!(fake.writes().len(), writes_before, "a duplicate writes nothing to the cluster");
        let after = store.pools(&PoolQuery { include_available: true, ..PoolQuery::default() }, now).await.unwrap();
        assert_eq!(after, pools, "a duplicate changes no counter");
    });
}

/// Launches the instances the events are about, in moto's EC2.
async fn launch_fleet(sdk: &aws_config::SdkConfig, cluster: &str) -> Fleet {
    let ec2 = aws_sdk_ec2::Client::new(sdk);
    let image = any_image(&ec2).await.unwrap();
    let spot = launch(&ec2, &image, &Launch::spot(cluster)).await.unwrap();
    let karpenter = launch(&ec2, &image, &Launch::spot(cluster)).await.unwrap();
    let rebalance = launch(
        &ec2,
        &image,
        &Launch::spot(cluster)
            .instance_type(InstanceType::C5Large)
            .zone("us-east-1b"),
    )
    .await
    .unwrap();
    let stopping = launch(
        &ec2,
        &image,
        &Launch::spot(cluster)
            .instance_type(InstanceType::T3Large)
            .zone("us-east-1c")
            .on_demand(),
    )
    .await
    .unwrap();
    let retiring = launch(
        &ec2,
        &image,
        &Launch::spot(cluster)
            .instance_type(InstanceType::M5Xlarge)
            .on_demand(),
    )
    .await
    .unwrap();
    Fleet {
        spot,
        karpenter,
        rebalance,
        stopping,
        retiring,
    }
}

/// The fleet's nodes and pods: the spot node with two web pods and a DaemonSet pod, Karpenter's
/// node and its NodeClaim, the other nodes, a pod on the retiring one.
fn seed_cluster(fake: &KubeFake, fleet: &Fleet) {
    let Fleet {
        spot,
        karpenter,
        rebalance,
        stopping,
        retiring,
    } = fleet;
    fake.insert(node(spot, json!({})));
    fake.insert(pod("web-1", &spot.dns, "ReplicaSet"));
    fake.insert(pod("web-2", &spot.dns, "ReplicaSet"));
    fake.insert(pod("agent", &spot.dns, "DaemonSet"));
    fake.insert(node(karpenter, json!({"metadata": {"ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "default-abc12", "uid": "nc-uid"}]}})));
    fake.insert(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "default-abc12", "uid": "nc-uid"}, "spec": {},
            "status": {"providerID": format!("aws:///{}/{}", karpenter.zone, karpenter.id), "nodeName": karpenter.dns}}));
    fake.insert(node(rebalance, json!({})));
    fake.insert(node(stopping, json!({})));
    fake.insert(node(retiring, json!({})));
    fake.insert(pod("cart-1", &retiring.dns, "ReplicaSet"));
}

/// The events about the fleet as AWS emits them (and a malformed one), put on EventBridge,
/// whose rules route them to the queue.
async fn put_events(sdk: &aws_config::SdkConfig, fleet: &Fleet) {
    let Fleet {
        spot,
        karpenter,
        rebalance,
        stopping,
        retiring,
    } = fleet;
    let events = aws_sdk_eventbridge::Client::new(sdk);
    let soon = (chrono::Utc::now() + chrono::Duration::hours(2)).to_rfc3339();
    let entries = vec![
        entry(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            json!({"instance-id": spot.id, "instance-action": "terminate"}),
            &[arn(&spot.id)],
        ),
        entry(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            json!({"instance-id": karpenter.id, "instance-action": "terminate"}),
            &[arn(&karpenter.id)],
        ),
        entry(
            "EC2 Instance Rebalance Recommendation",
            "aws.ec2",
            json!({"instance-id": rebalance.id}),
            &[arn(&rebalance.id)],
        ),
        entry(
            "EC2 Instance State-change Notification",
            "aws.ec2",
            json!({"instance-id": stopping.id, "state": "stopping"}),
            &[arn(&stopping.id)],
        ),
        entry(
            "AWS Health Event",
            "aws.health",
            forewarn::domain::fixtures::health_detail(&[&retiring.id], &soon),
            std::slice::from_ref(&retiring.id),
        ),
        // malformed: a spot warning without its instance id
        entry(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            json!({"instance-action": "terminate"}),
            &[],
        ),
    ];
    let put = events
        .put_events()
        .set_entries(Some(entries))
        .send()
        .await
        .expect("PutEvents");
    assert_eq!(put.failed_entry_count(), 0, "{put:?}");
}

/// The queue's maxReceiveCount, as its redrive policy holds it; and the policy.
async fn redrive_max_receives(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> (usize, Value) {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .unwrap();
    let redrive: Value = serde_json::from_str(
        &attributes.attributes().unwrap()[&aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy],
    )
    .unwrap();
    let max_receives: usize = match &redrive["maxReceiveCount"] {
        Value::String(n) => n.parse().unwrap(),
        n => n.as_u64().unwrap().try_into().unwrap(),
    };
    (max_receives, redrive)
}

/// The cluster after the events: the spot node cordoned and tainted (its other taint kept), its
/// evictable pods evicted, the NodeClaim deleted, the other nodes cordoned, Events recorded.
fn assert_cluster_acted_on(fake: &KubeFake, fleet: &Fleet) {
    let Fleet {
        spot,
        rebalance,
        stopping,
        retiring,
        ..
    } = fleet;
    let spot_node = fake.get("v1", "Node", None, &spot.dns).unwrap();
    assert_eq!(spot_node["spec"]["unschedulable"], true);
    let taints: Vec<&str> = spot_node["spec"]["taints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    assert!(
        taints.contains(&"forewarn.io/interruption") && taints.contains(&"dedicated"),
        "{taints:?}"
    );
    let pods: Vec<String> = fake
        .list("v1", "Pod")
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        pods,
        vec!["agent".to_string()],
        "evictable pods evicted, the DaemonSet pod left"
    );
    assert!(
        fake.get("karpenter.sh/v1", "NodeClaim", None, "default-abc12")
            .is_none(),
        "the NodeClaim is deleted"
    );
    assert_eq!(
        fake.get("v1", "Node", None, &rebalance.dns).unwrap()["spec"]["unschedulable"],
        true
    );
    // Stopping: its containers may still run, so its node is drained and kept; it is deleted
    // once EC2 says stopped.
    assert_eq!(
        fake.get("v1", "Node", None, &stopping.dns).unwrap()["spec"]["unschedulable"],
        true,
        "the stopping instance's node is cordoned, not deleted"
    );
    assert_eq!(
        fake.get("v1", "Node", None, &retiring.dns).unwrap()["spec"]["unschedulable"],
        true
    );
    assert!(!fake.events().is_empty(), "Kubernetes Events recorded");
}
