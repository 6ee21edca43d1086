//! The pool sweeper on moto's EC2 and DynamoDB and the Kubernetes fake: nodes whose instance is
//! terminated or unknown are found and handled through the same plan path; a sweep after a
//! handled event, and a second sweep, change nothing.
//!
//! (moto cannot give an instance the state reason `Server.SpotInstanceTermination`, so the
//! spot-termination finding is covered by the unit tests of `forewarn::domain::sweep`.)

use std::sync::Arc;

use forewarn::adapters::ec2::Ec2Directory;
use forewarn::adapters::kube::{ClusterClient, KubeExecutor};
use forewarn::adapters::upkeep::live_cluster;
use forewarn::app::fleet::{Cluster, Fleet};
use forewarn::app::handler::Handler;
use forewarn::app::sweeper::Sweeper;
use forewarn::domain::clusters::{ClusterId, Place};
use forewarn::domain::config::Config;
use forewarn::domain::event::EventKind;
use forewarn::domain::fixtures::node_object;
use forewarn::domain::pool::PoolQuery;
use forewarn::domain::report::Outcome;
use forewarn::ports::{Clock, PoolStore};
use forewarn_tests::ec2::{Launch, any_image, launch};
use forewarn_tests::moto::{create_pool_table, key_secret_of, runtime, shared, unique_name};
use kube_fake::KubeFake;
use serde_json::json;

#[test]
fn sweeps_orphaned_nodes_once_and_never_after_a_handled_event() {
    runtime().block_on(async {
        let sdk = shared().sdk_config();
        let cluster = unique_name("sweep");
        let table = create_pool_table(&sdk, &unique_name("sweep-pools")).await.unwrap();
        let ec2 = aws_sdk_ec2::Client::new(&sdk);
        let image = any_image(&ec2).await.unwrap();
        // on-demand, tagged `eks:cluster-name` as EKS managed node groups tag theirs
        let what = Launch::spot(&cluster).on_demand().tag("eks:cluster-name", &cluster);
        let gone_i = launch(&ec2, &image, &what).await.unwrap();
        let (gone, gone_dns) = (gone_i.id, gone_i.dns);
        let running_i = launch(&ec2, &image, &what).await.unwrap();
        let (running, running_dns) = (running_i.id, running_i.dns);
        let handled_i = launch(&ec2, &image, &what).await.unwrap();
        let (handled, handled_dns) = (handled_i.id, handled_i.dns);
        ec2.terminate_instances()
            .instance_ids(&gone)
            .instance_ids(&handled)
            .send()
            .await
            .unwrap();
        let unknown = "i-0000000000000dead";

        // As deployed: forewarn's manifests applied, its client in the sweeper's group.
        let fake = forewarn_tests::cluster::deployed().await;
        fake.insert(node_object(&gone_dns, &gone).build());
        fake.insert(node_object(&running_dns, &running).build());
        fake.insert(node_object("ghost", unknown).build());
        // Karpenter's finalizer keeps the node of the handled instance after its NodeClaim goes.
        fake.insert(node_object(&handled_dns, &handled).nodeclaim("claim-h").build());
        fake.insert(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "claim-h", "finalizers": ["karpenter.sh/termination"]}, "spec": {}}));

        let config = Config {
            cluster: Some(ClusterId::at(&Place::default(), &cluster)),
            ..Config::default()
        };
        let clients = as_sweeper(&fake);
        let store = Arc::new(forewarn_tests::moto::keyed_store(&sdk, &table, &key_secret_of(&table)));
        let ec2_dir = Arc::new(Ec2Directory::from_conf(&sdk));
        let handler = Handler {
            instances: ec2_dir.clone(),
            fleet: Fleet::one(Cluster {
                executor: Some(Arc::new(KubeExecutor::new(clients.clone(), &config))),
                ..Cluster::new(None, Arc::new(clients))
            }),
            concurrency: 4,
            ..Handler::new(config.clone(), store.clone())
        };

        // EventBridge did deliver the termination of `handled`: the handler applied it.
        let event = json!({"id": "evt-handled", "source": "aws.ec2",
            "detail-type": "EC2 Instance State-change Notification", "time": chrono::Utc::now().to_rfc3339(),
            "region": "us-east-1", "detail": {"instance-id": handled, "state": "terminated"}});
        let inv = handler.invoke(event, None).await.unwrap();
        assert_eq!(inv.reports[0].outcome, Outcome::Acted, "{:#?}", inv.reports);
        let pools_after_event = store.pools(&PoolQuery { include_available: true, ..PoolQuery::default() }, chrono::Utc::now()).await.unwrap();
        assert_eq!(pools_after_event.len(), 1);
        assert_eq!(pools_after_event[0].counter(EventKind::StateChange), 1);

        let sweeper = Sweeper {
            handler,
            leaving: ec2_dir,
            region: Some("us-east-1".into()),
            priorities: None,
            preflight: Default::default(),
        };
        let sweeper = sweeper.cluster(None).await.unwrap();
        let writes_before = fake.writes().len();
        let reports = sweeper.sweep(None).await.unwrap();
        let gone_id = reports
            .iter()
            .filter_map(|r| r.event_id.as_deref())
            .find(|id| id.contains(&gone))
            .unwrap();
        assert!(gone_id.contains('@'), "a known instance's run is in the key: {gone_id}");
        let mut found: Vec<(String, &str)> = reports
            .iter()
            // ids are `sweep:<kind>:<instance>@<launch time>` (no launch time when unknown)
            .map(|r| {
                let id = r.event_id.clone().unwrap();
                (id.split('@').next().unwrap().to_string(), r.outcome.as_str())
            })
            .collect();
        found.sort();
        let mut want = vec![
            (format!("sweep:state-change:{gone}"), "acted"),
            (format!("sweep:state-change:{handled}"), "duplicate"),
            (format!("sweep:state-change:{unknown}"), "acted"),
        ];
        want.sort();
        assert_eq!(found, want, "{reports:#?}");
        assert!(fake.get("v1", "Node", None, &gone_dns).is_none(), "the orphaned node is deleted");
        assert!(fake.get("v1", "Node", None, "ghost").is_none(), "the node of an unknown instance is deleted");
        assert!(fake.get("v1", "Node", None, &running_dns).is_some(), "a running instance's node stays");
        let sweep_writes: Vec<String> = fake.writes()[writes_before..].iter().map(|r| r.path.clone()).collect();
        assert!(
            sweep_writes.iter().all(|p| !p.contains(&handled_dns) && !p.contains("claim-h")),
            "the sweep touched the handled node: {sweep_writes:?}"
        );
        let pools = store.pools(&PoolQuery { include_available: true, ..PoolQuery::default() }, chrono::Utc::now()).await.unwrap();
        assert_eq!(pools.len(), 1, "{pools:#?}");
        assert_eq!(pools[0].counter(EventKind::StateChange), 2, "the gone instance counts; the handled one not twice (the ghost's pool is unknown)");

        // A second sweep changes nothing.
        let writes = fake.writes().len();
        let again = sweeper.sweep(None).await.unwrap();
        assert!(again.iter().all(|r| r.outcome == Outcome::Duplicate), "{again:#?}");
        assert_eq!(fake.writes().len(), writes);
        let pools_again = store.pools(&PoolQuery { include_available: true, ..PoolQuery::default() }, chrono::Utc::now()).await.unwrap();
        assert_eq!(pools_again, pools);
    });
}

// ---------------------------------------------------------------------------------------------
// Status checks and scheduled events. moto answers every running instance's checks `ok` and
// lists no scheduled event (the sweep above goes through its DescribeInstanceStatus and finds
// nothing there), so an impaired instance and a scheduled retirement are served by a stub EC2
// answering DescribeInstanceStatus with a response recorded in the form EC2's Query API sends
// (two pages: the first with a `nextToken`).

/// The instances of the recorded response: impaired for 10 minutes, impaired for 1 minute (seen
/// once), scheduled for retirement, and another cluster's (no node here).
const IMPAIRED: &str = "i-0a1b2c3d4e5f61001";
const JUST_IMPAIRED: &str = "i-0a1b2c3d4e5f61002";
const RETIRING: &str = "i-0a1b2c3d4e5f61003";
const FOREIGN: &str = "i-0a1b2c3d4e5f61004";

fn recorded_statuses(now: chrono::DateTime<chrono::Utc>, page: u8, recovered: bool) -> String {
    let at = |minutes: i64| {
        (now - chrono::Duration::minutes(minutes))
            .format("%Y-%m-%dT%H:%M:%S.000Z")
            .to_string()
    };
    let status = |id: &str, system: &str, since: Option<String>, events: &str| {
        let (status, detail) = match since {
            Some(since) => (
                system,
                format!("<status>failed</status><impairedSince>{since}</impairedSince>"),
            ),
            None => ("ok", "<status>passed</status>".to_string()),
        };
        format!(
            "<item><instanceId>{id}</instanceId><availabilityZone>us-east-1a</availabilityZone>\
             <instanceState><code>16</code><name>running</name></instanceState>\
             <systemStatus><status>{status}</status><details><item><name>reachability</name>\
             {detail}</item></details></systemStatus>\
             <instanceStatus><status>ok</status><details><item><name>reachability</name>\
             <status>passed</status></item></details></instanceStatus>\
             <eventsSet>{events}</eventsSet></item>"
        )
    };
    let retirement = "<item><instanceEventId>instance-event-0d59937288b749b32</instanceEventId>\
        <code>instance-retirement</code>\
        <description>The instance is running on degraded hardware</description>\
        <notBefore>2030-01-05T00:00:00.000Z</notBefore></item>\
        <item><instanceEventId>instance-event-0a1b2c3d4e5f60718</instanceEventId>\
        <code>system-reboot</code><description>[Completed] scheduled reboot</description>\
        <notBefore>2026-11-01T00:00:00.000Z</notBefore></item>";
    let (items, next) = match page {
        1 => (
            status(IMPAIRED, "impaired", (!recovered).then(|| at(10)), "")
                + &status(JUST_IMPAIRED, "impaired", Some(at(1)), ""),
            "<nextToken>page-2</nextToken>",
        ),
        _ => (
            status(RETIRING, "ok", None, retirement)
                + &status(FOREIGN, "impaired", Some(at(60)), ""),
            "",
        ),
    };
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
         <DescribeInstanceStatusResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\
         <requestId>3be1508e-c444-4fef-89cc-0b1223c4f02f</requestId>\
         <instanceStatusSet>{items}</instanceStatusSet>{next}</DescribeInstanceStatusResponse>"
    )
}

/// A stub of EC2's Query API: DescribeInstanceStatus as recorded, DescribeInstances empty (no
/// instance is leaving). Records the actions asked.
/// `recovered` set: the impaired instance passes its checks again.
async fn ec2_stub(
    now: chrono::DateTime<chrono::Utc>,
    recovered: Arc<std::sync::atomic::AtomicBool>,
) -> (aws_sdk_ec2::Client, Arc<std::sync::Mutex<Vec<String>>>) {
    use axum::extract::State;
    let asked: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let app = axum::Router::new()
        .route(
            "/",
            axum::routing::post(
                move |State(asked): State<Arc<std::sync::Mutex<Vec<String>>>>, body: String| {
                    let recovered = recovered.load(std::sync::atomic::Ordering::SeqCst);
                    async move {
                    asked.lock().unwrap().push(body.clone());
                    let xml = if body.contains("Action=DescribeInstanceStatus") {
                        let page = if body.contains("NextToken=page-2") { 2 } else { 1 };
                        recorded_statuses(now, page, recovered)
                    } else {
                        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><DescribeInstancesResponse \
                         xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>r</requestId>\
                         <reservationSet/></DescribeInstancesResponse>"
                            .to_string()
                    };
                    ([("content-type", "text/xml")], xml)
                    }
                },
            ),
        )
        .with_state(asked.clone());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let config = aws_sdk_ec2::Config::builder()
        .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
        .region(aws_sdk_ec2::config::Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(aws_sdk_ec2::config::Credentials::new(
            "AKID", "secret", None, None, "test",
        ))
        .build();
    (aws_sdk_ec2::Client::from_conf(config), asked)
}

#[test]
fn impaired_instances_and_scheduled_retirements_are_drained_once() {
    use forewarn::adapters::embedded::EmbeddedStore;
    use forewarn::adapters::snapshot::SnapshotInstances;

    runtime().block_on(async {
        let now = chrono::Utc::now();
        let recovered = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (client, asked) = ec2_stub(now, recovered.clone()).await;
        // As deployed: forewarn's manifests applied, its client in the sweeper's group.
        let fake = forewarn_tests::cluster::deployed().await;
        // One manual clock for the sweeper, its drains' passes and the fake: the passes' waits
        // move it on instead of sleeping.
        let clock = forewarn::adapters::clock::ManualClock::at(now);
        let fakes = clock.clone();
        fake.set_clock(move || fakes.now());
        let known = seed_instances_and_nodes(&fake, now);
        let config = Config {
            cluster: Some(ClusterId::at(&Place::default(), "demo")),
            ..Config::default()
        };
        let clients = as_sweeper(&fake).with_clock(clock.shared());
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn forewarn::ports::PoolStore> =
            Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        let handler = Handler {
            clock: clock.shared(),
            instances: Arc::new(SnapshotInstances(known)),
            // Cordon records signed with the store's keys, as the wiring builds it.
            fleet: Fleet::one(live_cluster(
                None,
                clients.clone(),
                Some(Arc::new(
                    KubeExecutor::new(clients, &config).with_keys(store.clone()),
                )),
            )),
            ..Handler::new(config, store)
        };
        let sweeper = Sweeper {
            handler,
            leaving: Arc::new(Ec2Directory::new(client)),
            region: Some("us-east-1".into()),
            priorities: None,
            preflight: Default::default(),
        };
        let sweeper = sweeper.cluster(None).await.unwrap();
        let reports = sweeper.sweep(None).await.unwrap();
        assert_found_impaired_and_retiring_once(&reports);
        let statuses: Vec<String> = asked
            .lock()
            .unwrap()
            .iter()
            .filter(|b| b.contains("Action=DescribeInstanceStatus"))
            .cloned()
            .collect();
        assert_eq!(statuses.len(), 2, "one paged call, two pages: {statuses:?}");
        assert!(statuses[0].contains("MaxResults=1000"), "{statuses:?}");
        assert_impaired_and_retiring_drained(&fake);

        // The next sweep finds the same two again: duplicates, nothing written.
        let writes = fake.writes().len();
        let again = sweeper.sweep(None).await.unwrap();
        assert!(
            again.iter().all(|r| r.outcome == Outcome::Duplicate),
            "{again:#?}"
        );
        assert_eq!(fake.writes().len(), writes);

        // The way back keeps the impaired node cordoned while its check fails, and gives it back
        // once both checks pass; the retiring instance's cordon stays.
        assert!(sweeper.way_back().await.unwrap().is_empty());
        recovered.store(true, std::sync::atomic::Ordering::SeqCst);
        let undone = sweeper.way_back().await.unwrap();
        assert_eq!(undone.len(), 1, "{undone:#?}");
        assert_eq!(undone[0].instance_id, IMPAIRED);
        assert!(
            undone[0].why.contains("passes its status checks again"),
            "{undone:#?}"
        );
        let node = fake
            .get("v1", "Node", None, "ip-10-0-9-0.ec2.internal")
            .unwrap();
        assert_ne!(node["spec"]["unschedulable"], json!(true), "{node}");
        let node = fake
            .get("v1", "Node", None, "ip-10-0-9-2.ec2.internal")
            .unwrap();
        assert_eq!(node["spec"]["unschedulable"], json!(true), "{node}");
    });
}

/// The nodes of the impaired, just impaired and retiring instances, each with a `shop` pod, in
/// `fake`; and the instances as the directory knows them, launched three hours before `now`.
fn seed_instances_and_nodes(
    fake: &KubeFake,
    now: chrono::DateTime<chrono::Utc>,
) -> std::collections::BTreeMap<String, forewarn::domain::facts::InstanceFacts> {
    use forewarn::domain::fixtures::{self, pod_object};
    let mut known = std::collections::BTreeMap::new();
    for (n, id) in [IMPAIRED, JUST_IMPAIRED, RETIRING].into_iter().enumerate() {
        let dns = format!("ip-10-0-9-{n}.ec2.internal");
        fake.insert(node_object(&dns, id).kubelet().ready().build());
        fake.insert(pod_object(
            "shop",
            &format!("web-{n}"),
            &dns,
            "web",
            "ReplicaSet",
        ));
        let facts = fixtures::instance(id)
            .typed("m5.large", "us-east-1a")
            .dns(&dns)
            .state("running")
            .cluster("demo")
            .launched(now - chrono::Duration::hours(3))
            .build();
        known.insert(id.to_string(), facts);
    }
    known
}

/// The sweep's findings: the impaired instance and the retiring one, once each (not the one
/// impaired too recently, another cluster's, nor a completed reboot).
fn assert_found_impaired_and_retiring_once(reports: &[forewarn::domain::report::Report]) {
    let mut found: Vec<(String, &str, Option<EventKind>)> = reports
        .iter()
        .map(|r| {
            let id = r.event_id.clone().unwrap();
            (
                id.split('@').next().unwrap().to_string(),
                r.outcome.as_str(),
                r.kind,
            )
        })
        .collect();
    found.sort();
    assert_eq!(
        found,
        vec![
            (
                format!("sweep:impaired:{IMPAIRED}"),
                "acted",
                Some(EventKind::Impaired)
            ),
            (
                format!("sweep:scheduled-change:{RETIRING}"),
                "acted",
                Some(EventKind::ScheduledChange)
            ),
        ],
        "seen impaired once, another cluster's, a completed reboot: no finding. {reports:#?}"
    );
}

/// The impaired and the retiring instances' nodes cordoned and their pods evicted, the impaired
/// one's taint saying why; the just-impaired one's left alone.
fn assert_impaired_and_retiring_drained(fake: &KubeFake) {
    for (n, drained) in [(0, true), (1, false), (2, true)] {
        let node = fake
            .get("v1", "Node", None, &format!("ip-10-0-9-{n}.ec2.internal"))
            .unwrap();
        assert_eq!(
            node["spec"]["unschedulable"] == json!(true),
            drained,
            "{node}"
        );
        assert_eq!(
            fake.get("v1", "Pod", Some("shop"), &format!("web-{n}"))
                .is_none(),
            drained
        );
    }
    let node = fake
        .get("v1", "Node", None, "ip-10-0-9-0.ec2.internal")
        .unwrap();
    let taints = node["spec"]["taints"].to_string();
    assert!(taints.contains("\"value\":\"impaired\""), "{taints}");
}

/// Clients of `fake` in the sweeper's group, as deployed.
fn as_sweeper(fake: &KubeFake) -> ClusterClient {
    ClusterClient::new(forewarn_tests::cluster::client_as(
        fake,
        forewarn_tests::cluster::SWEEPER_GROUP,
    ))
}
