//! The world each fault test runs in: a pool table in DynamoDB (moto), an event queue with its
//! DLQ, EC2 instances and their nodes in the Kubernetes fake, the real handler fed by the SQS
//! poller, and the fault-injecting proxy between them and AWS; the events' bodies; and the checks
//! that every event was applied exactly once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_sdk_ec2::types::InstanceType;
use forewarn::adapters::autoscaling::AsgLifecycle;
use forewarn::adapters::dynamo::DynamoStore;
use forewarn::adapters::ec2::Ec2Directory;
use forewarn::adapters::kube::{ClusterClient, KubeExecutor};
use forewarn::adapters::sqs::SqsRedelivery;
use forewarn::app::fleet::{Cluster, Fleet};
use forewarn::app::handler::Handler;
use forewarn::app::pipeline::Passes;
use forewarn::domain::clusters::{ClusterId, Place};
use forewarn::domain::config::Config;
use forewarn::domain::event::{DT_REBALANCE, DT_SPOT, DT_STATE_CHANGE};
use forewarn::domain::fixtures::{app_pod, ec2_node};
use forewarn::domain::pool::{PoolQuery, PoolRecord};
use forewarn::domain::report::{Outcome, Report, Tally};
use forewarn::ports::PoolStore;
use forewarn_tests::ec2::{Launch, Launched as Instance, any_image, launch};
use forewarn_tests::moto::{create_pool_table, key_secret_of, shared, unique_name};
use forewarn_tests::proxy::AwsProxy;
use forewarn_tests::sqs::{Drained, EventQueue, Mapping, drain_patiently, drain_within};
use kube_fake::{KubeFake, Method};
use serde_json::{Value, json};

/// Receives before a message goes to the DLQ.
pub(crate) const MAX_RECEIVES: usize = 3;
pub(crate) const BATCH: i32 = 10;

/// One test's world: its table, queues, instances, cluster and handler.
pub(crate) struct World {
    pub(crate) sdk: aws_config::SdkConfig,
    pub(crate) proxy: AwsProxy,
    pub(crate) sqs: aws_sdk_sqs::Client,
    pub(crate) queue_url: String,
    pub(crate) queue_arn: String,
    pub(crate) dlq_url: String,
    pub(crate) table: String,
    pub(crate) fake: KubeFake,
    pub(crate) store: Arc<DynamoStore>,
    pub(crate) handler: Handler,
    pub(crate) instances: Vec<Instance>,
}

pub(crate) struct Options {
    /// One instance type per instance (each its own pool); all spot in us-east-1a.
    pub(crate) types: Vec<InstanceType>,
    /// Events handled at once within a batch.
    pub(crate) concurrency: usize,
    /// The Kubernetes client's read timeout.
    pub(crate) kube_read_timeout: Duration,
    /// The handler shortens the visibility of the messages it reports failed (as deployed).
    pub(crate) redelivery: bool,
    /// Receives before a message goes to the DLQ.
    pub(crate) max_receives: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            types: vec![InstanceType::M5Large, InstanceType::C5Large],
            concurrency: 4,
            kube_read_timeout: Duration::from_secs(15),
            redelivery: true,
            max_receives: MAX_RECEIVES,
        }
    }
}

/// Retries as the handler has them (several attempts), with backoff short enough for tests.
fn fast_retries(config: aws_config::SdkConfig) -> aws_config::SdkConfig {
    config
        .into_builder()
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(4)
                .with_initial_backoff(Duration::from_millis(10))
                .with_max_backoff(Duration::from_millis(50)),
        )
        .build()
}

impl World {
    pub(crate) async fn new(options: Options) -> World {
        let sdk = shared().sdk_config();
        let proxy = AwsProxy::start(&shared().endpoint()).await.unwrap();
        let through_proxy = fast_retries(proxy.sdk_config(&sdk));
        let cluster = unique_name("faults");
        let table = create_pool_table(&sdk, &cluster)
            .await
            .expect("the pool table");

        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let EventQueue {
            url: queue_url,
            arn: queue_arn,
            dlq_url,
        } = EventQueue::create(&sqs, &cluster, options.max_receives)
            .await
            .expect("the event queue");

        let ec2 = aws_sdk_ec2::Client::new(&sdk);
        let image = any_image(&ec2).await.unwrap();
        // As deployed: forewarn's manifests applied, its client in the handler's group.
        let fake = forewarn_tests::cluster::deployed().await;
        // Evicted pods take a second to go, as real ones take their grace period.
        fake.set_eviction_grace(Duration::from_secs(1));
        let mut instances = Vec::new();
        for (n, instance_type) in options.types.iter().enumerate() {
            let what = Launch::spot(&cluster).instance_type(instance_type.clone());
            let i = launch(&ec2, &image, &what).await.unwrap();
            fake.insert(node(&i));
            for p in 0..2 {
                fake.insert(app_pod(&format!("app-{n}-{p}"), &i.dns, "ReplicaSet"));
            }
            instances.push(i);
        }

        // Pods evicted at once: this fake has no scheduler, so placeholders would never run and
        // each pod would wait for its latest safe time, in real seconds. Surge through the
        // pipeline is tested in kube_actions, on the fake's scheduler and autoscaler models.
        let config = Config {
            cluster: Some(ClusterId::at(&Place::default(), &cluster)),
            surge_kinds: Default::default(),
            ..Config::default()
        };
        let mut kube_config =
            forewarn_tests::cluster::config_as(&fake, forewarn_tests::cluster::HANDLER_GROUP);
        kube_config.read_timeout = Some(options.kube_read_timeout);
        let clients = ClusterClient::new(kube::Client::try_from(kube_config).unwrap());
        let store = Arc::new(forewarn_tests::moto::keyed_store(
            &through_proxy,
            &table,
            &key_secret_of(&table),
        ));
        let handler = Handler {
            // The handler's SQS calls go through the proxy too, so that they can fail.
            redelivery: options.redelivery.then(|| {
                Arc::new(SqsRedelivery(aws_sdk_sqs::Client::new(&through_proxy)))
                    as Arc<dyn forewarn::ports::Redelivery>
            }),
            // Drains continue through the queue, as deployed.
            passes: Passes {
                interval: Duration::from_secs(1),
                queue: Some(Arc::new(SqsRedelivery(aws_sdk_sqs::Client::new(
                    &through_proxy,
                )))),
                kept: Some(Arc::default()),
                tenant: Default::default(),
            },
            instances: Arc::new(Ec2Directory::from_conf(&through_proxy)),
            fleet: Fleet::one(Cluster {
                // Lifecycle actions are completed in moto's Auto Scaling, through the proxy
                // (which records every call).
                executor: Some(Arc::new(
                    KubeExecutor::new(clients.clone(), &config)
                        .with_lifecycle(Arc::new(AsgLifecycle::new(&through_proxy)))
                        .with_keys(store.clone()),
                )),
                ..Cluster::new(None, Arc::new(clients))
            }),
            concurrency: options.concurrency,
            safety_margin: Duration::ZERO,
            ..Handler::new(config.clone(), store.clone())
        };
        World {
            sdk,
            proxy,
            sqs,
            queue_url,
            queue_arn,
            dlq_url,
            table,
            fake,
            store,
            handler,
            instances,
        }
    }

    /// A world of one spot instance, the other options as by default.
    pub(crate) async fn one() -> World {
        World::new(Options {
            types: vec![InstanceType::M5Large],
            ..Options::default()
        })
        .await
    }

    pub(crate) async fn send(&self, bodies: &[String]) {
        for body in bodies {
            self.sqs
                .send_message()
                .queue_url(&self.queue_url)
                .message_body(body)
                .send()
                .await
                .expect("SendMessage");
        }
    }

    /// Drains the queue (each batch given `budget` when set) and checks that the run's counts
    /// account for every message received.
    pub(crate) async fn drain(&self, batch: i32, budget: Option<Duration>) -> Drained {
        let drained = drain_within(self.mapping(), batch, 200, budget)
            .await
            .expect("draining the queue");
        let tally = Tally::of(&drained.reports);
        assert_eq!(
            drained.deleted + drained.returned,
            drained.reports.len(),
            "one report per message received: {drained:#?}"
        );
        assert_eq!(
            drained.returned, tally.failed,
            "exactly the failed messages are returned"
        );
        drained
    }

    /// Drains the queue, waiting at most `patience` in all for messages in flight to come back
    /// (a message left to the queue's 900 s visibility timeout is then still in flight).
    pub(crate) async fn drain_briefly(&self, patience: Duration) -> Drained {
        drain_patiently(self.mapping(), BATCH, 200, None, patience)
            .await
            .expect("draining the queue")
    }

    /// The event queue and this world's handler, as the event source mapping joins them.
    pub(crate) fn mapping(&self) -> Mapping<'_> {
        Mapping {
            sqs: &self.sqs,
            queue_url: &self.queue_url,
            queue_arn: &self.queue_arn,
            handler: &self.handler,
        }
    }

    /// Every body in a queue, taking them out (the DLQ after a scenario).
    pub(crate) async fn take_all(&self, url: &str) -> Vec<String> {
        let mut bodies = Vec::new();
        loop {
            let received = self
                .sqs
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(10)
                .wait_time_seconds(0)
                .send()
                .await
                .unwrap();
            if received.messages().is_empty() {
                return bodies;
            }
            for m in received.messages() {
                bodies.push(m.body().unwrap_or_default().to_string());
                self.sqs
                    .delete_message()
                    .queue_url(url)
                    .receipt_handle(m.receipt_handle().unwrap())
                    .send()
                    .await
                    .unwrap();
            }
        }
    }

    /// The DLQ's messages back on the queue (what an operator's redrive does).
    pub(crate) async fn redrive(&self) -> usize {
        let bodies = self.take_all(&self.dlq_url).await;
        self.send(&bodies).await;
        bodies.len()
    }

    /// The event ids in the pool table's ledger.
    pub(crate) async fn ledger(&self) -> BTreeSet<String> {
        let dynamodb = aws_sdk_dynamodb::Client::new(&self.sdk);
        let mut ids = BTreeSet::new();
        let mut start = None;
        loop {
            let page = dynamodb
                .scan()
                .table_name(&self.table)
                .set_exclusive_start_key(start)
                .send()
                .await
                .unwrap();
            for item in page.items() {
                if let Some(pk) = item.get("pk").and_then(|v| v.as_s().ok())
                    && let Some(id) = pk.strip_prefix("EVENT#")
                {
                    ids.insert(id.to_string());
                }
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return ids;
            }
        }
    }

    /// The pool records, by `spot#type#zone`.
    pub(crate) async fn pools(&self) -> BTreeMap<String, PoolRecord> {
        let query = PoolQuery {
            include_available: true,
            ..PoolQuery::default()
        };
        self.store
            .pools(&query, chrono::Utc::now())
            .await
            .unwrap()
            .into_iter()
            .map(|p| (p.pool.to_string(), p))
            .collect()
    }

    pub(crate) fn pool_key(&self, i: &Instance) -> String {
        format!("spot#{}#{}", i.instance_type, i.zone_id)
    }

    /// Successful cordons (writes setting `unschedulable`) of each node.
    pub(crate) fn cordons(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for w in self.fake.writes() {
            let ok = (200..300).contains(&w.status);
            let sets_unschedulable = w
                .body
                .as_ref()
                .is_some_and(|b| b.to_string().contains("\"unschedulable\":true"));
            if ok
                && sets_unschedulable
                && let Some(name) = w.path.strip_prefix("/api/v1/nodes/")
            {
                *out.entry(name.to_string()).or_insert(0) += 1;
            }
        }
        out
    }

    /// Successful cordons of each node, by the value of forewarn's taint they set.
    pub(crate) fn cordons_by_reason(&self) -> BTreeMap<(String, String), usize> {
        let mut out = BTreeMap::new();
        for w in self.fake.writes() {
            let Some(body) = w.body.as_ref() else {
                continue;
            };
            if !(200..300).contains(&w.status) || body["spec"]["unschedulable"] != json!(true) {
                continue;
            }
            let Some(name) = w.path.strip_prefix("/api/v1/nodes/") else {
                continue;
            };
            let reason = body["spec"]["taints"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["key"] == "forewarn.io/interruption")
                .and_then(|t| t["value"].as_str())
                .unwrap_or_default()
                .to_string();
            *out.entry((name.to_string(), reason)).or_insert(0) += 1;
        }
        out
    }

    /// Evictions the fake accepted, by pod.
    pub(crate) fn evictions(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for w in self.fake.writes() {
            if w.method == Method::POST
                && (200..300).contains(&w.status)
                && let Some(rest) = w.path.strip_suffix("/eviction")
            {
                let pod = rest.rsplit('/').next().unwrap_or_default().to_string();
                *out.entry(pod).or_insert(0) += 1;
            }
        }
        out
    }

    /// Every one of `bodies` applied once, its pool counted once, nothing in the DLQ.
    pub(crate) async fn assert_all_applied_once(&self, reports: &[Report], bodies: &[Body]) {
        self.assert_applied_once(reports, &bodies.iter().collect::<Vec<_>>())
            .await;
        assert_pools_counted_once(self).await;
        assert!(self.take_all(&self.dlq_url).await.is_empty());
    }

    /// Every event in `applied` was applied exactly once: one `acted` report, its id in the
    /// ledger, its node cordoned once, no pod evicted twice; the queue is empty.
    pub(crate) async fn assert_applied_once(&self, reports: &[Report], applied: &[&Body]) {
        let ledger = self.ledger().await;
        for body in applied {
            let ours = |r: &&Report| {
                r.event_id.as_deref() == Some(&body.id) && r.outcome == Outcome::Acted
            };
            // First deliveries; the drain's later passes are continuations (`pass` set).
            let acted = reports
                .iter()
                .filter(ours)
                .filter(|r| r.pass.is_none())
                .count();
            assert_eq!(acted, 1, "event {} acted once: {reports:#?}", body.id);
            assert!(ledger.contains(&body.id), "{} in the ledger", body.id);
            // Its drain ended: the last pass left nothing pending.
            let last = reports.iter().rev().find(ours).unwrap();
            let pending = last.actions.iter().any(|a| {
                a.drain.is_some_and(|d| d.pending)
                    || a.result
                        .as_deref()
                        .is_some_and(|r| r.contains("drain in the next pass"))
            });
            assert!(!pending, "event {}'s drain ended: {last:#?}", body.id);
        }
        for (node, n) in self.cordons() {
            assert_eq!(n, 1, "node {node} cordoned once: {:#?}", self.fake.writes());
        }
        for (pod, n) in self.evictions() {
            assert_eq!(n, 1, "pod {pod} evicted once");
        }
        // Kubernetes Events: each cordoned node has some, and no more than a handful per attempt
        // to handle an event (an event records one per step; a retried one may record again).
        let events = self.fake.events();
        let about = |e: &Value| {
            e["involvedObject"]["name"]
                .as_str()
                .or_else(|| e["regarding"]["name"].as_str())
                .unwrap_or_default()
                .to_string()
        };
        for node in self.cordons().keys() {
            assert!(
                events.iter().any(|e| about(e) == *node),
                "an Event about {node}: {events:#?}"
            );
        }
        assert!(events.len() <= 4 * reports.len(), "{events:#?}");
        assert!(
            forewarn_tests::sqs::peek_bodies(&self.sqs, &self.queue_url)
                .await
                .unwrap()
                .is_empty(),
            "nothing left on the queue"
        );
    }
}

pub(crate) fn node(i: &Instance) -> Value {
    ec2_node(&i.dns, &i.id, &i.zone)
}

/// An event as EventBridge delivers it to SQS.
pub(crate) struct Body {
    pub(crate) id: String,
    pub(crate) text: String,
}

fn event(detail_type: &str, instance: &str, detail: Value, minute: i64) -> Body {
    let id = format!("{}-{}", unique_name("ev"), detail_type.len());
    // Now, seconds apart in `minute`'s order: after the instances' launch (an event older than
    // the instance's launch is stale and ignored), and a spot warning's drain deadline is two
    // minutes after its time.
    let time = chrono::Utc::now() + chrono::Duration::seconds(minute);
    let mut detail = detail;
    detail["instance-id"] = json!(instance);
    let text = json!({
        "version": "0", "id": id, "detail-type": detail_type, "source": "aws.ec2",
        "account": "123456789012", "time": time.to_rfc3339(), "region": "us-east-1",
        "resources": [format!("arn:aws:ec2:us-east-1:123456789012:instance/{instance}")],
        "detail": detail
    })
    .to_string();
    Body { id, text }
}

pub(crate) fn spot(i: &Instance) -> Body {
    event(DT_SPOT, &i.id, json!({"instance-action": "terminate"}), 1)
}

pub(crate) fn rebalance(i: &Instance) -> Body {
    event(DT_REBALANCE, &i.id, json!({}), 0)
}

pub(crate) fn state_change(i: &Instance, state: &str) -> Body {
    event(DT_STATE_CHANGE, &i.id, json!({"state": state}), 3)
}

pub(crate) fn texts(bodies: &[&Body]) -> Vec<String> {
    bodies.iter().map(|b| b.text.clone()).collect()
}

/// Reports of first deliveries (a drain's later passes are continuations, `pass` set).
pub(crate) fn first_deliveries(reports: &[Report]) -> usize {
    reports.iter().filter(|r| r.pass.is_none()).count()
}

/// First deliveries of `outcome` (a drain's later passes are continuations, `pass` set).
pub(crate) fn count(reports: &[Report], outcome: Outcome) -> usize {
    reports
        .iter()
        .filter(|r| r.pass.is_none() && r.outcome == outcome)
        .count()
}

/// A spot warning for each instance; afterwards every instance's pool counted it once and every
/// node was cordoned and drained once.
pub(crate) async fn spot_warnings(world: &World) -> Vec<Body> {
    let bodies: Vec<Body> = world.instances.iter().map(spot).collect();
    world.send(&texts(&bodies.iter().collect::<Vec<_>>())).await;
    bodies
}

pub(crate) async fn assert_pools_counted_once(world: &World) {
    let pools = world.pools().await;
    for i in &world.instances {
        let pool = &pools[&world.pool_key(i)];
        assert_eq!(pool.interruptions(), 1, "{pool:#?}");
    }
    let cordons = world.cordons();
    for i in &world.instances {
        assert_eq!(cordons.get(&i.dns), Some(&1), "{} cordoned", i.dns);
    }
    assert_eq!(
        world.evictions().len(),
        2 * world.instances.len(),
        "every pod evicted"
    );
}

/// The accepted writes to the cluster about `node` (cordons, its pods' evictions are counted
/// apart by [`World::evictions`]).
pub(crate) fn writes_to_node(world: &World, node: &str) -> usize {
    world
        .fake
        .writes()
        .iter()
        .filter(|w| (200..300).contains(&w.status) && w.path.ends_with(&format!("/nodes/{node}")))
        .count()
}
