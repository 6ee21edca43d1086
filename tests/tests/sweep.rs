//! The pool sweeper on moto's EC2 and DynamoDB and the Kubernetes fake: nodes whose instance is
//! terminated or unknown are found and handled through the same plan path; a sweep after a
//! handled event, and a second sweep, change nothing.
//!
//! (moto cannot give an instance the state reason `Server.SpotInstanceTermination`, so the
//! spot-termination finding is covered by the unit tests of `forewarn::domain::sweep`.)

use std::sync::Arc;

use forewarn::adapters::dynamo::DynamoStore;
use forewarn::adapters::ec2::Ec2Directory;
use forewarn::adapters::kube::{ClusterClient, KubeExecutor, KubeNodeDirectory};
use forewarn::app::handler::Handler;
use forewarn::app::sweeper::Sweeper;
use forewarn::domain::config::Config;
use forewarn::domain::event::EventKind;
use forewarn::domain::fixtures::node_object;
use forewarn::domain::pool::PoolQuery;
use forewarn::domain::report::Outcome;
use forewarn::ports::PoolStore;
use forewarn_tests::ec2::{Launch, any_image, launch};
use forewarn_tests::moto::{create_pool_table, runtime, shared, unique_name};
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

        let fake = KubeFake::start().await;
        fake.insert(node_object(&gone_dns, &gone).build());
        fake.insert(node_object(&running_dns, &running).build());
        fake.insert(node_object("ghost", unknown).build());
        // Karpenter's finalizer keeps the node of the handled instance after its NodeClaim goes.
        fake.insert(node_object(&handled_dns, &handled).nodeclaim("claim-h").build());
        fake.insert(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "claim-h", "finalizers": ["karpenter.sh/termination"]}, "spec": {}}));

        let config = Config {
            cluster_name: Some(cluster.clone()),
            ..Config::default()
        };
        let clients = ClusterClient::new(fake.client());
        let store = Arc::new(DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), table));
        let ec2_dir = Arc::new(Ec2Directory::from_conf(&sdk));
        let handler = Handler {
            instances: ec2_dir.clone(),
            nodes: Arc::new(KubeNodeDirectory::new(clients.clone())),
            executor: Some(Arc::new(KubeExecutor::new(clients, &config))),
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
        };
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
