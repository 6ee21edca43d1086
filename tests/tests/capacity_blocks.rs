//! Capacity Blocks for ML on moto's EC2 and DynamoDB and the Kubernetes fake: a block's
//! expiration warning drains each of its instances' nodes as its node group's policy says, by
//! the block's termination start; the sweeper then finds the handled block a duplicate, and
//! catches another block whose warning never came.
//!
//! moto serves no capacity reservation: the recording proxy in front of it answers
//! `DescribeCapacityReservations`, and `DescribeInstances` filtered on `capacity-reservation-id`
//! (a filter moto refuses), with responses in the form EC2's Query API sends (its
//! documentation's shapes: `reservationType` `capacity-block`, `instanceLifecycle`
//! `capacity-block`). Every other call (the instances described by id, the pool table) is
//! moto's own.

use std::sync::Arc;

use aws_sdk_ec2::types::InstanceType;
use forewarn::adapters::dynamo::DynamoStore;
use forewarn::adapters::ec2::Ec2Directory;
use forewarn::adapters::kube::{ClusterClient, KubeExecutor};
use forewarn::app::fleet::{Cluster, Fleet};
use forewarn::app::handler::Handler;
use forewarn::app::sweeper::Sweeper;
use forewarn::domain::clusters::{ClusterId, Place};
use forewarn::domain::config::{Action, Config};
use forewarn::domain::fixtures::{node_object, pod_object};
use forewarn::domain::policy::Policy;
use forewarn::domain::pool::PoolQuery;
use forewarn::domain::report::Outcome;
use forewarn::ports::{Clock, PoolStore};
use forewarn_tests::ec2::{Launch, Launched, any_image, launch};
use forewarn_tests::moto::{create_pool_table, key_secret_of, runtime, shared, unique_name};
use forewarn_tests::proxy::{AwsFault, AwsProxy, FaultKind};
use kube_fake::KubeFake;
use serde_json::{Value, json};

/// The block warned of, and the one whose warning never came.
const WARNED: &str = "cr-0b1c2d3e4f5a60b01";
const MISSED: &str = "cr-0b1c2d3e4f5a60b02";

const POLICY: &str = "rules:
  - name: inference
    nodes: {eks.amazonaws.com/nodegroup: gpu-b}
    actions:
      capacity-block-expiration: cordon
";

type Time = chrono::DateTime<chrono::Utc>;

fn iso(t: Time) -> String {
    t.format("%Y-%m-%dT%H:%M:%S.000Z").to_string()
}

/// `DescribeCapacityReservations` as EC2 answers it, for `blocks` (id, end).
fn reservations_xml(blocks: &[(&str, Time)], zone_id: &str) -> String {
    let items: String = blocks
        .iter()
        .map(|(id, end)| {
            format!(
                "<item><capacityReservationId>{id}</capacityReservationId>\
                 <ownerId>123456789012</ownerId>\
                 <capacityReservationArn>arn:aws:ec2:us-east-1:123456789012:capacity-reservation/{id}</capacityReservationArn>\
                 <availabilityZoneId>{zone_id}</availabilityZoneId>\
                 <instanceType>p5.48xlarge</instanceType><instancePlatform>Linux/UNIX</instancePlatform>\
                 <availabilityZone>us-east-1a</availabilityZone><tenancy>default</tenancy>\
                 <totalInstanceCount>8</totalInstanceCount><availableInstanceCount>0</availableInstanceCount>\
                 <ebsOptimized>true</ebsOptimized><ephemeralStorage>false</ephemeralStorage>\
                 <state>active</state><startDate>{}</startDate><endDate>{}</endDate>\
                 <endDateType>limited</endDateType><instanceMatchCriteria>targeted</instanceMatchCriteria>\
                 <createDate>{}</createDate><tagSet/><reservationType>capacity-block</reservationType></item>",
                iso(*end - chrono::Duration::days(1)),
                iso(*end),
                iso(*end - chrono::Duration::days(2)),
            )
        })
        .collect();
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
         <DescribeCapacityReservationsResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\
         <requestId>5f0a8a3e-1b2c-4d3e-9f4a-6b7c8d9e0f1a</requestId>\
         <capacityReservationSet>{items}</capacityReservationSet></DescribeCapacityReservationsResponse>"
    )
}

/// `DescribeInstances` as EC2 answers it for a block's instances (`group` their node group).
fn instances_xml(block: &str, instances: &[(&Launched, &str)], cluster: &str) -> String {
    let items: String = instances
        .iter()
        .map(|(i, group)| {
            format!(
                "<item><reservationId>r-0{n}</reservationId><ownerId>123456789012</ownerId>\
                 <groupSet/><instancesSet><item><instanceId>{id}</instanceId>\
                 <imageId>ami-0a1b2c3d4e5f60001</imageId>\
                 <instanceState><code>16</code><name>running</name></instanceState>\
                 <privateDnsName>{dns}</privateDnsName><instanceType>p5.48xlarge</instanceType>\
                 <placement><availabilityZone>us-east-1a</availabilityZone><tenancy>default</tenancy></placement>\
                 <instanceLifecycle>capacity-block</instanceLifecycle>\
                 <capacityReservationId>{block}</capacityReservationId>\
                 <tagSet><item><key>eks:cluster-name</key><value>{cluster}</value></item>\
                 <item><key>eks:nodegroup-name</key><value>{group}</value></item></tagSet>\
                 </item></instancesSet></item>",
                n = &i.id[2..],
                id = i.id,
                dns = i.dns,
            )
        })
        .collect();
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
         <DescribeInstancesResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\
         <requestId>8c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f</requestId>\
         <reservationSet>{items}</reservationSet></DescribeInstancesResponse>"
    )
}

fn answer(proxy: &AwsProxy, operation: &str, naming: &str, xml: String) {
    proxy.inject(
        AwsFault::operation("ec2", operation, FaultKind::Answer(200, xml), 1_000).naming(naming),
    );
}

/// A node of `group` for `instance` with one training pod of 8 GPUs and a 600 s grace.
fn gpu_node(fake: &KubeFake, instance: &Launched, group: &str, n: usize) {
    fake.insert(
        node_object(&instance.dns, &instance.id)
            .label("eks.amazonaws.com/nodegroup", group)
            .kubelet()
            .ready()
            .build(),
    );
    let mut pod = pod_object(
        "ml",
        &format!("train-{n}"),
        &instance.dns,
        "train",
        "StatefulSet",
    );
    pod["spec"]["terminationGracePeriodSeconds"] = json!(600);
    pod["spec"]["containers"][0]["resources"] =
        json!({"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}});
    fake.insert(pod);
}

/// The grace periods the evictions of `ml` pods asked for.
fn asked_graces(fake: &KubeFake) -> Vec<i64> {
    fake.requests()
        .iter()
        .filter(|r| r.path.contains("/namespaces/ml/pods/") && r.path.ends_with("/eviction"))
        .filter_map(|r| {
            r.body
                .as_ref()
                .and_then(|b| b.pointer("/deleteOptions/gracePeriodSeconds"))
                .and_then(Value::as_i64)
        })
        .collect()
}

fn unschedulable(fake: &KubeFake, node: &str) -> bool {
    fake.get("v1", "Node", None, node).unwrap()["spec"]["unschedulable"] == json!(true)
}

/// The instances of both blocks in moto, their nodes in the fake, and the proxy answering for
/// the reservations.
struct World {
    proxy: AwsProxy,
    sdk: aws_config::SdkConfig,
    cluster: String,
    table: String,
    /// The warned block's eight instances (the first four of node group gpu-a, the fourth
    /// with no node; the others of gpu-b), and the missed block's two (gpu-a).
    warned: Vec<Launched>,
    missed: Vec<Launched>,
    zone_id: String,
    now: Time,
    end: Time,
    missed_end: Time,
    clock: forewarn::adapters::clock::ManualClock,
    fake: KubeFake,
}

fn group(n: usize) -> &'static str {
    if n < 4 { "gpu-a" } else { "gpu-b" }
}

async fn world() -> World {
    let moto = shared();
    let proxy = AwsProxy::start(&moto.endpoint()).await.unwrap();
    let sdk = proxy.sdk_config(&moto.sdk_config());
    let cluster = unique_name("blocks");
    let table = create_pool_table(&sdk, &unique_name("blocks-pools"))
        .await
        .unwrap();
    let ec2 = aws_sdk_ec2::Client::new(&sdk);
    let image = any_image(&ec2).await.unwrap();
    let what = Launch::spot(&cluster)
        .on_demand()
        .instance_type(InstanceType::P548xlarge)
        .tag("eks:cluster-name", &cluster);
    let mut launched = Vec::new();
    for _ in 0..10 {
        launched.push(launch(&ec2, &image, &what).await.unwrap());
    }
    let missed = launched.split_off(8);
    let warned = launched;
    let zone_id = warned[0].zone_id.clone();
    // One manual clock for the handler, its drains' passes and the fake.
    let now = chrono::Utc::now();
    let clock = forewarn::adapters::clock::ManualClock::at(now);
    let fake = forewarn_tests::cluster::deployed().await;
    let fakes = clock.clone();
    fake.set_clock(move || fakes.now());
    for (n, i) in warned.iter().enumerate().filter(|(n, _)| *n != 3) {
        gpu_node(&fake, i, group(n), n);
    }
    for (n, i) in missed.iter().enumerate() {
        gpu_node(&fake, i, "gpu-a", 10 + n);
    }
    let (end, missed_end) = (
        now + chrono::Duration::minutes(40),
        now + chrono::Duration::minutes(35),
    );
    let ops = "DescribeCapacityReservations";
    answer(
        &proxy,
        ops,
        WARNED,
        reservations_xml(&[(WARNED, end)], &zone_id),
    );
    answer(
        &proxy,
        ops,
        MISSED,
        reservations_xml(&[(MISSED, missed_end)], &zone_id),
    );
    let both = reservations_xml(&[(WARNED, end), (MISSED, missed_end)], &zone_id);
    answer(&proxy, ops, "Filter.1.Name=state", both);
    let block: Vec<(&Launched, &str)> = warned
        .iter()
        .enumerate()
        .map(|(n, i)| (i, group(n)))
        .collect();
    answer(
        &proxy,
        "DescribeInstances",
        WARNED,
        instances_xml(WARNED, &block, &cluster),
    );
    let other: Vec<(&Launched, &str)> = missed.iter().map(|i| (i, "gpu-a")).collect();
    answer(
        &proxy,
        "DescribeInstances",
        MISSED,
        instances_xml(MISSED, &other, &cluster),
    );
    World {
        proxy,
        sdk,
        cluster,
        table,
        warned,
        missed,
        zone_id,
        now,
        end,
        missed_end,
        clock,
        fake,
    }
}

/// The handler as deployed on `w` (its policy: gpu-b only cordoned), and its store and EC2.
fn handler(w: &World) -> (Handler, Arc<DynamoStore>, Arc<Ec2Directory>) {
    let config = Config {
        cluster: Some(ClusterId::at(&Place::default(), &w.cluster)),
        policy: Policy::parse(POLICY).unwrap(),
        ..Config::default()
    };
    let clients = ClusterClient::new(forewarn_tests::cluster::client_as(
        &w.fake,
        forewarn_tests::cluster::SWEEPER_GROUP,
    ))
    .with_clock(w.clock.shared());
    let store = Arc::new(forewarn_tests::moto::keyed_store(
        &w.sdk,
        &w.table,
        &key_secret_of(&w.table),
    ));
    let ec2_dir = Arc::new(Ec2Directory::from_conf(&w.sdk));
    let handler = Handler {
        clock: w.clock.shared(),
        instances: ec2_dir.clone(),
        fleet: Fleet::one(Cluster {
            executor: Some(Arc::new(
                KubeExecutor::new(clients.clone(), &config).with_keys(store.clone()),
            )),
            ..Cluster::new(None, Arc::new(clients))
        })
        // As the stack deploys it (FOREWARN_ACCOUNT_ID, AWS_REGION): the sweeper's findings
        // are of the cluster in this account and region, as the warning's events say.
        .at(forewarn::ports::Place::of("123456789012", "us-east-1")),
        concurrency: 4,
        ..Handler::new(config, store.clone())
    };
    (handler, store, ec2_dir)
}

/// The warning's report: every instance of the block, each node's action by its group's
/// policy, the drained pods' graces fitted to the termination start, the block's pool marked.
async fn assert_warning_handled(w: &World, handler: &Handler, store: &DynamoStore) {
    let warning = json!({"version": "0", "id": "cbw-1", "source": "aws.ec2",
        "detail-type": "Capacity Block Expiration Warning", "account": "123456789012",
        "time": w.now.to_rfc3339(), "region": "us-east-1",
        "resources": [format!("arn:aws:ec2:us-east-1:123456789012:capacity-reservation/{WARNED}")],
        "detail": {"capacity-reservation-id": WARNED, "end-date": w.end.to_rfc3339()}});
    let inv = handler.invoke(warning, None).await.unwrap();
    let calls = w.proxy.calls();
    let described = calls
        .iter()
        .filter(|c| c.operation == "DescribeInstances")
        .count();
    assert_eq!(
        described, 1,
        "the block's instances, described once: {calls:#?}"
    );
    let report = &inv.reports[0];
    assert_eq!(report.outcome, Outcome::Acted, "{:#?}", inv.reports);
    let mut ids: Vec<&str> = w.warned.iter().map(|i| i.id.as_str()).collect();
    ids.sort();
    assert_eq!(
        report.instance_ids, ids,
        "the block's instances, as EC2 lists them"
    );
    for (n, i) in w.warned.iter().enumerate() {
        let action = report
            .actions
            .iter()
            .find(|a| a.instance_id == i.id)
            .unwrap();
        let want = match (n, group(n)) {
            (3, _) => Action::None,
            (_, "gpu-a") => Action::CordonDrain,
            _ => Action::Cordon,
        };
        assert_eq!(action.action, want, "{n}: {action:#?}");
        if n == 3 {
            continue;
        }
        assert!(unschedulable(&w.fake, &i.dns), "{n}");
        let pod = w.fake.get("v1", "Pod", Some("ml"), &format!("train-{n}"));
        let going = pod.is_none_or(|p| p["metadata"]["deletionTimestamp"].is_string());
        assert_eq!(going, want == Action::CordonDrain, "{n}");
    }
    // Each training pod of gpu-a was given what was left of its 600 s before the termination
    // start (end - 30 min), less the margin: its grace ends before it.
    let graces = asked_graces(&w.fake);
    assert_eq!(graces.len(), 3, "{graces:?}");
    let left = (w.end - chrono::Duration::minutes(30) - w.now).num_seconds();
    assert!(
        graces.iter().all(|g| *g < left && *g > left - 60),
        "{graces:?} of {left}"
    );
    let all = PoolQuery {
        include_available: true,
        ..PoolQuery::default()
    };
    let pools = store.pools(&all, w.clock.now()).await.unwrap();
    assert_eq!(pools.len(), 1, "{pools:#?}");
    assert_eq!(
        pools[0].pool.to_string(),
        format!("capacity-block#p5.48xlarge#{}", w.zone_id)
    );
    assert!(pools[0].is_unavailable(w.clock.now()));
}

#[test]
fn a_blocks_warning_drains_each_instance_by_policy_and_the_sweeper_catches_a_missed_one() {
    runtime().block_on(async {
        let w = world().await;
        let (handler, store, ec2_dir) = handler(&w);
        assert_warning_handled(&w, &handler, &store).await;

        // The sweep: the warned block is a duplicate; the missed one is caught and drained.
        let sweeper = Sweeper {
            handler,
            leaving: ec2_dir,
            region: Some("us-east-1".into()),
            priorities: None,
            preflight: Default::default(),
        };
        let sweep = sweeper.cluster(None).await.unwrap();
        let reports = sweep.sweep(None).await.unwrap();
        let kind = Some(forewarn::domain::event::EventKind::CapacityBlockExpiration);
        let mut blocks: Vec<(String, &str)> = reports
            .iter()
            .filter(|r| r.kind == kind)
            .map(|r| (r.event_id.clone().unwrap(), r.outcome.as_str()))
            .collect();
        blocks.sort();
        let key = |cr: &str, end: Time| {
            format!(
                "sweep:capacity-block-expiration:{cr}/123456789012/us-east-1/{}@{}",
                w.cluster,
                end.timestamp()
            )
        };
        let mut want = vec![
            (key(WARNED, w.end), "duplicate"),
            (key(MISSED, w.missed_end), "acted"),
        ];
        want.sort();
        assert_eq!(blocks, want, "{reports:#?}");
        for (n, i) in w.missed.iter().enumerate() {
            assert!(unschedulable(&w.fake, &i.dns));
            let pod = w
                .fake
                .get("v1", "Pod", Some("ml"), &format!("train-{}", 10 + n));
            assert!(pod.is_none_or(|p| p["metadata"]["deletionTimestamp"].is_string()));
        }
        // One lookup of the reservations a sweep, and of each block once.
        let calls = w.proxy.calls();
        let reservations = calls
            .iter()
            .filter(|c| c.operation == "DescribeCapacityReservations")
            .count();
        assert_eq!(
            reservations,
            1 + 1 + 2,
            "the warning's block, the sweep's list, its two blocks"
        );

        // A second sweep finds both again: duplicates, nothing written.
        let writes = w.fake.writes().len();
        let again = sweep.sweep(None).await.unwrap();
        assert!(
            again.iter().all(|r| r.outcome == Outcome::Duplicate),
            "{again:#?}"
        );
        assert_eq!(w.fake.writes().len(), writes);
    });
}
