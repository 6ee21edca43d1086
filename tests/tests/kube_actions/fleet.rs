//! One deployment serving several clusters (issue 38): each instance handled in the cluster its
//! tags name, on that cluster's own client; the same node name in two clusters never confused;
//! an instance of no served cluster acknowledged with its pool recorded and nothing done; one
//! cluster down failing only its own records, while the other's are answered; the sweeper
//! visiting each cluster.

use forewarn::domain::clusters::{ClusterId, Place};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use forewarn::adapters::clock::ManualClock;
use forewarn::adapters::kube::{ClusterClient, KubeExecutor};
use forewarn::adapters::upkeep::live_cluster;
use forewarn::app::fleet::{Connector, unreachable};
use forewarn::app::handler::Handler;
use forewarn::domain::config::Config;
use forewarn::domain::facts::InstanceFacts;
use forewarn::domain::fixtures;
use forewarn::domain::pool::PoolQuery;
use forewarn::domain::report::Outcome;
use forewarn::ports::{Clock, PortError};
use kube_fake::{Fault, KubeFake};

use crate::support::{Fleet, Instances, config, node};

/// The node name both clusters use: their VPCs reuse the same private addresses.
const SHARED_NAME: &str = "ip-10-0-1-11.ec2.internal";
const BLUE_ID: &str = "i-0b1e0000000000001";
const GREEN_ID: &str = "i-06ee0000000000002";
const RED_ID: &str = "i-0ed00000000000003";

/// Two API servers, blue and green, each with a node of the same name on its own instance; the
/// clients of a deployment serving both (each cluster its own client), on one clock.
struct Two {
    blue: KubeFake,
    green: KubeFake,
    clock: ManualClock,
}

impl Two {
    async fn start() -> Two {
        let clock = ManualClock::at(chrono::Utc::now());
        let two = Two {
            blue: KubeFake::start().await,
            green: KubeFake::start().await,
            clock,
        };
        for (fake, id) in [(&two.blue, BLUE_ID), (&two.green, GREEN_ID)] {
            let c = two.clock.clone();
            fake.set_clock(move || c.now());
            fake.insert(node(SHARED_NAME, id));
        }
        two
    }

    fn fake(&self, name: &str) -> Option<&KubeFake> {
        match name {
            "blue" => Some(&self.blue),
            "green" => Some(&self.green),
            _ => None,
        }
    }

    /// The instances: each cluster's on the shared node name, and one of cluster red.
    fn instances() -> Instances {
        let on = |id: &str, cluster: &str| {
            fixtures::instance(id)
                .typed("m5.large", "us-east-1a")
                .capacity(forewarn::domain::pool::CapacityType::Spot)
                .dns(SHARED_NAME)
                .state("running")
                .cluster(cluster)
                .build()
        };
        let all: BTreeMap<String, InstanceFacts> = [
            (BLUE_ID, on(BLUE_ID, "blue")),
            (GREEN_ID, on(GREEN_ID, "green")),
            (RED_ID, on(RED_ID, "red")),
        ]
        .into_iter()
        .map(|(id, facts)| (id.to_string(), facts))
        .collect();
        Instances(all)
    }
}

/// Connects each served cluster to its own fake, as the wiring connects each to its own API
/// server: a client (and rate limit) of its own.
struct ToFakes {
    clients: BTreeMap<String, ClusterClient>,
    config: Config,
}

#[async_trait]
impl Connector for ToFakes {
    async fn connect(&self, id: &ClusterId) -> Result<forewarn::app::fleet::Cluster, PortError> {
        let clients = self.clients.get(&id.name).ok_or_else(|| {
            unreachable(id, forewarn::ports::FailureKind::Invalid, "no such cluster")
        })?;
        let executor = Arc::new(KubeExecutor::new(clients.clone(), &self.config));
        let cluster = live_cluster(Some(id.clone()), clients.clone(), Some(executor));
        Ok(cluster)
    }
}

/// The two served clusters, of the own account and region.
fn blue_and_green() -> Vec<ClusterId> {
    ["blue", "green"]
        .map(|n| ClusterId::parse(n).unwrap())
        .to_vec()
}

fn handler(two: &Two, dir: &std::path::Path) -> Handler {
    limited(two, dir, None)
}

/// [`handler`], its clients of each cluster under this rate limit (`(requests/s, burst)`).
fn limited(two: &Two, dir: &std::path::Path, limit: Option<(f64, u32)>) -> Handler {
    let base = Config {
        cluster: None,
        ..config()
    };
    let clients = ["blue", "green"]
        .into_iter()
        .map(|name| {
            let fake = two.fake(name).unwrap();
            let c = ClusterClient::new(fake.client()).with_clock(two.clock.shared());
            (name.to_string(), c.with_rate_limit(limit))
        })
        .collect();
    let connector = ToFakes {
        clients,
        config: base.clone(),
    };
    let store = forewarn::adapters::embedded::EmbeddedStore::open(dir).unwrap();
    Handler {
        instances: Arc::new(Two::instances()),
        fleet: Fleet::many(None, blue_and_green(), Arc::new(connector)),
        clock: two.clock.shared(),
        passes: forewarn::app::pipeline::Passes::in_process(Duration::from_secs(5)),
        concurrency: 4,
        ..Handler::new(base, Arc::new(store))
    }
}

/// [`limited`], triaging (issue 59): its continuations, and what triage sends back, on the
/// queue returned; 11 messages of a cluster taken on in an invocation.
fn triaging(
    two: &Two,
    dir: &std::path::Path,
    limit: Option<(f64, u32)>,
) -> (Handler, Arc<crate::support::Continuations>) {
    let queue = Arc::new(crate::support::Continuations::default());
    let mut handler = limited(two, dir, limit);
    handler.passes.queue = Some(queue.clone());
    handler.takes_per_cluster = Some(11);
    (handler, queue)
}

fn rebalance(id: &str, instance: &str, clock: &ManualClock) -> serde_json::Value {
    fixtures::event_json(
        "EC2 Instance Rebalance Recommendation",
        id,
        instance,
        &clock.now().to_rfc3339(),
        serde_json::json!({}),
    )
}

fn unschedulable(fake: &KubeFake) -> bool {
    fake.get("v1", "Node", None, SHARED_NAME).unwrap()["spec"]["unschedulable"] == true
}

/// The same node name in both clusters: a warning for green's instance cordons green's node
/// and never blue's (and blue's API server is not even asked); a warning for red's instance
/// (a cluster not served) is acknowledged, its pool recorded, and neither cluster touched.
#[tokio::test]
async fn each_instance_is_handled_in_its_own_cluster_only() {
    let two = Two::start().await;
    let dir = tempfile::tempdir().unwrap();
    let handler = handler(&two, dir.path());
    let payload = forewarn_tests::sqs::lambda_batch(&[
        rebalance("ev-green", GREEN_ID, &two.clock),
        rebalance("ev-red", RED_ID, &two.clock),
    ]);
    let inv = handler.invoke(payload, None).await.unwrap();

    let green = &inv.reports[0];
    assert_eq!(green.outcome, Outcome::Acted, "{green:#?}");
    assert_eq!(green.cluster.as_deref(), Some("green"));
    assert!(unschedulable(&two.green), "green's node is cordoned");
    assert!(
        !unschedulable(&two.blue),
        "blue's node of the same name is not"
    );
    assert!(
        two.blue.writes().is_empty(),
        "nothing was written to blue: {:?}",
        two.blue.writes()
    );

    let red = &inv.reports[1];
    assert_eq!(red.outcome, Outcome::Planned, "acknowledged: {red:#?}");
    assert!(
        red.actions[0]
            .reason
            .contains("of cluster red, not exactly one cluster this deployment serves"),
        "{red:#?}"
    );
    assert_eq!(
        red.actions[0].action,
        forewarn::domain::config::Action::None
    );
    assert_eq!(inv.response["batchItemFailures"], serde_json::json!([]));
    let pools = handler
        .store
        .pools(
            &PoolQuery {
                include_available: true,
                ..PoolQuery::default()
            },
            two.clock.now(),
        )
        .await
        .unwrap();
    assert_eq!(pools.len(), 1, "one pool, m5.large in us-east-1a");
    assert_eq!(
        pools[0].counter(forewarn::domain::event::EventKind::RebalanceRecommendation),
        2,
        "both recommendations counted, the unserved one too"
    );
    // Red's instance never reached either API server.
    for fake in [&two.blue, &two.green] {
        assert!(
            fake.requests().iter().all(|r| !r.path.contains(RED_ID)),
            "{:?}",
            fake.requests()
        );
    }
}

/// Blue's API server fails every request: blue's record fails at once (it comes back from the
/// queue; the batch does not wait the outage out, which would hold green's next records up)
/// while green's, in the same batch, is cordoned and answered; the batch's answer names only
/// blue's message. Blue is then left alone for a while — its records fail without a request —
/// and tried again by one share once the while is over.
#[tokio::test]
async fn one_cluster_down_fails_only_its_own_records() {
    let two = Two::start().await;
    two.blue.inject(Fault::new(503).times(10_000));
    let dir = tempfile::tempdir().unwrap();
    let handler = handler(&two, dir.path());
    let payload = forewarn_tests::sqs::lambda_batch(&[
        rebalance("ev-blue", BLUE_ID, &two.clock),
        rebalance("ev-green", GREEN_ID, &two.clock),
    ]);
    let start = two.clock.now();
    let deadline = start + chrono::Duration::seconds(60);
    let inv = handler.invoke(payload, Some(deadline)).await.unwrap();

    assert_eq!(
        inv.reports[0].outcome,
        Outcome::Failed,
        "{:#?}",
        inv.reports
    );
    assert_eq!(
        inv.reports[0].cluster, None,
        "never planned: blue's nodes could not be read"
    );
    assert_eq!(inv.reports[1].outcome, Outcome::Acted, "{:#?}", inv.reports);
    assert!(unschedulable(&two.green));
    assert_eq!(
        inv.response["batchItemFailures"],
        serde_json::json!([{"itemIdentifier": "m0"}])
    );
    assert_eq!(two.clock.now(), start, "the outage was not waited out");

    // The next mixed batch: blue is left alone, green is served.
    let asked = two.blue.requests().len();
    let again = forewarn_tests::sqs::lambda_batch(&[
        rebalance("ev-blue", BLUE_ID, &two.clock),
        rebalance("ev-green-2", GREEN_ID, &two.clock),
    ]);
    let inv = handler.invoke(again.clone(), Some(deadline)).await.unwrap();
    assert_eq!(two.blue.requests().len(), asked, "no request to blue");
    let why = inv.reports[0].reason.as_deref().unwrap();
    assert!(why.contains("left alone for a few seconds"), "{why}");
    assert_ne!(
        inv.reports[1].outcome,
        Outcome::Failed,
        "{:#?}",
        inv.reports
    );

    // A batch of blue's records alone is not waited out either (the pollers are green's too),
    // and comes back no sooner than the while is over.
    let alone = forewarn_tests::sqs::lambda_batch(&[rebalance("ev-blue", BLUE_ID, &two.clock)]);
    let inv = handler.invoke(alone, Some(deadline)).await.unwrap();
    assert_eq!(two.clock.now(), start, "the outage was not waited out");
    assert_eq!(two.blue.requests().len(), asked, "no request to blue");
    assert_eq!(inv.reports[0].outcome, Outcome::Failed);
    let back = inv.reports[0].retry_not_before.unwrap();
    assert!(back > start + chrono::Duration::seconds(9), "{back}");

    // Blue is back; after the while, one share tries it again, and it is served.
    two.blue.clear_faults();
    two.clock.advance(Duration::from_secs(11));
    let inv = handler.invoke(again, Some(deadline)).await.unwrap();
    assert_eq!(inv.reports[0].outcome, Outcome::Acted, "{:#?}", inv.reports);
    assert!(unschedulable(&two.blue));
}

/// A served cluster that cannot be connected to at all fails its own records (retryable: it is
/// tried again with the next batch) and no other's; they are labelled with the cluster's id in
/// the deployment's place, as a reached cluster's reports are.
#[tokio::test]
async fn a_cluster_that_cannot_be_reached_fails_only_its_own_records() {
    let two = Two::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut handler = handler(&two, dir.path());
    let here = Place {
        account: Some("123456789012".into()),
        region: Some("us-east-1".into()),
    };
    for (own, blue_id) in [
        (Place::default(), "blue"),
        (here, "123456789012/us-east-1/blue"),
    ] {
        // "blue" is served but unknown to the connector: it cannot be reached.
        let green = ClusterClient::new(two.green.client()).with_clock(two.clock.shared());
        let connector = ToFakes {
            clients: BTreeMap::from([("green".to_string(), green)]),
            config: handler.config.clone(),
        };
        handler.fleet = Fleet::many(None, blue_and_green(), Arc::new(connector)).at(own);
        let payload = forewarn_tests::sqs::lambda_batch(&[
            rebalance(&format!("ev-blue-{blue_id}"), BLUE_ID, &two.clock),
            rebalance(&format!("ev-green-{blue_id}"), GREEN_ID, &two.clock),
        ]);
        let inv = handler.invoke(payload, None).await.unwrap();
        let blue = &inv.reports[0];
        assert_eq!(blue.outcome, Outcome::Failed);
        assert_eq!(
            blue.reason.as_deref(),
            Some(format!("cluster {blue_id}: no such cluster").as_str())
        );
        assert_eq!(blue.cluster.as_deref(), Some(blue_id));
        assert_eq!(inv.reports[1].outcome, Outcome::Acted, "{blue_id}");
    }
}

/// The sweeper visits each served cluster: a node whose instance EC2 no longer knows is found
/// in its own cluster only.
#[tokio::test]
async fn the_sweeper_visits_each_cluster() {
    use forewarn::app::sweeper::Sweeper;
    let two = Two::start().await;
    // Green's node runs on an instance EC2 no longer knows (it is gone).
    two.green
        .insert(node("ip-10-0-9-9.ec2.internal", "i-09000000000000009"));
    let dir = tempfile::tempdir().unwrap();
    let sweeper = Sweeper {
        handler: handler(&two, dir.path()),
        leaving: Arc::new(crate::support::Leaving(Vec::new())),
        region: Some("us-east-1".into()),
        priorities: None,
        preflight: Default::default(),
    };
    let runs = sweeper.run(None).await;
    assert!(runs.failures().is_empty(), "{:?}", runs.failures());
    let clusters: Vec<Option<&str>> = runs.runs.iter().map(|r| r.cluster.as_deref()).collect();
    assert_eq!(clusters, [Some("blue"), Some("green")]);
    let found = |i: usize| runs.runs[i].findings.as_ref().unwrap().len();
    assert_eq!(found(0), 0, "blue's node runs");
    assert_eq!(found(1), 1, "green's gone instance");
    assert!(
        two.green
            .get("v1", "Node", None, "ip-10-0-9-9.ec2.internal")
            .is_none(),
        "deleted in green"
    );
    assert!(two.blue.get("v1", "Node", None, SHARED_NAME).is_some());
    let answer = runs.answer();
    assert!(
        answer["clusters"]["green"]["findings"]["count"] == 1,
        "{answer}"
    );
}

/// A batch of SQS messages from the queue with these bodies, as Lambda hands them over.
fn from_queue(bodies: &[String]) -> serde_json::Value {
    let records: Vec<serde_json::Value> = (bodies.iter().enumerate())
        .map(|(i, body)| {
            serde_json::json!({"messageId": format!("m{i}"), "body": body,
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:forewarn"})
        })
        .collect();
    serde_json::json!({ "Records": records })
}

/// The instances, with the ids of every lookup made (each call's).
struct Lookups(Instances, std::sync::Mutex<Vec<Vec<String>>>);

impl Lookups {
    /// The lookups made since the last look.
    fn take(&self) -> Vec<Vec<String>> {
        std::mem::take(&mut *self.1.lock().unwrap())
    }
}

#[async_trait]
impl forewarn::ports::InstanceDirectory for Lookups {
    async fn describe(
        &self,
        place: &Place,
        ids: &[String],
    ) -> Result<BTreeMap<String, InstanceFacts>, forewarn::ports::PortError> {
        self.1.lock().unwrap().push(ids.to_vec());
        self.0.describe(place, ids).await
    }

    async fn cluster_instances(
        &self,
        place: &Place,
        cluster: &str,
        at_once: usize,
        found: &(dyn Fn(BTreeMap<String, InstanceFacts>) + Send + Sync),
    ) -> Result<(), forewarn::ports::PortError> {
        self.0
            .cluster_instances(place, cluster, at_once, found)
            .await
    }
}

/// While its cluster is busy, a share keeps the new warnings the execution environment's rate
/// limit of the cluster lets out at once (two requests a cordon), so that the environment's
/// share of the API server is not idle while a burst is read; the rest go back (issue 59).
#[tokio::test]
async fn a_busy_cluster_keeps_the_new_warnings_its_rate_limit_lets_out_at_once() {
    let two = Two::start().await;
    let dir = tempfile::tempdir().unwrap();
    // A burst of 4 requests, refilled within 100 ms: two cordons' requests free at once.
    let (handler, queue) = triaging(&two, dir.path(), Some((1000.0, 4)));
    let warning = |id: &str| rebalance(id, BLUE_ID, &two.clock).to_string();
    let requeued = |inv: &forewarn::app::handler::Invocation| -> Vec<bool> {
        assert_eq!(inv.response["batchItemFailures"], serde_json::json!([]));
        (inv.reports.iter())
            .map(|r| r.outcome == Outcome::Requeued)
            .collect()
    };
    let burst = [warning("b1"), warning("b2")];
    let inv = handler.invoke(from_queue(&burst), None).await.unwrap();
    assert_eq!(requeued(&inv), [false, false], "{inv:#?}");
    // Blue busy (its burst less than HOLD ago), its bucket full again.
    two.clock.advance(Duration::from_millis(100));
    let four = ["b3", "b4", "b5", "b6"].map(warning);
    let inv = handler.invoke(from_queue(&four), None).await.unwrap();
    assert_eq!(requeued(&inv), [false, false, true, true], "{inv:#?}");
    let sent: Vec<String> = (queue.sent.lock().unwrap().iter())
        .map(|s| s.1.clone())
        .collect();
    let blue = ClusterId::parse("blue").unwrap().to_string();
    let triaged = |b: &str| forewarn::domain::inbound::sqs::triaged_body(b, &blue);
    assert_eq!(sent, [triaged(&four[2]), triaged(&four[3])]);
}

/// Triage of a busy cluster (issue 59): after a burst of blue's new warnings (more than one in
/// a batch), blue's new warnings go back to the queue at once, marked triaged, in blue's
/// message group, while green's of the same batch are worked on; read again, they are worked
/// on, blue still busy; once blue's burst is [`HOLD`] past, its new warnings are worked on again.
/// Two bursts of ten make a mass interruption (`MASS`): blue's instances are listed, and answer
/// the lookups of its next warnings.
#[tokio::test]
async fn a_busy_clusters_new_warnings_go_back_to_its_group_and_are_worked_on_when_read_again() {
    use forewarn::app::fleet::{MASS, triage::HOLD};
    let two = Two::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut handler, queue) = triaging(&two, dir.path(), None);
    let warning = |id: &str, instance: &str| rebalance(id, instance, &two.clock).to_string();
    let outcomes = |inv: &forewarn::app::handler::Invocation| -> Vec<Outcome> {
        assert_eq!(inv.response["batchItemFailures"], serde_json::json!([]));
        inv.reports.iter().map(|r| r.outcome).collect()
    };
    let lookups = Arc::new(Lookups(Two::instances(), Default::default()));
    handler.instances = lookups.clone();
    for burst in [0, 1] {
        let ten = (0..MASS / 2).map(|n| warning(&format!("b{burst}-{n}"), BLUE_ID));
        let inv = handler
            .invoke(from_queue(&ten.collect::<Vec<_>>()), None)
            .await;
        assert!(!outcomes(&inv.unwrap()).contains(&Outcome::Requeued));
        assert_eq!(lookups.take(), [vec![BLUE_ID.to_string()]]);
        two.clock.advance(HOLD);
    }
    // The lists run in the background: this test's (in memory) at the first turn.
    tokio::task::yield_now().await;
    assert!(queue.sent.lock().unwrap().is_empty());
    let inv = handler
        .invoke(from_queue(&[warning("s1", BLUE_ID)]), None)
        .await;
    assert!(
        !outcomes(&inv.unwrap()).contains(&Outcome::Requeued),
        "not busy"
    );
    assert!(
        lookups.take().is_empty(),
        "blue's instances listed: no lookup"
    );
    let burst = [warning("s2", BLUE_ID), warning("s3", BLUE_ID)];
    let inv = handler.invoke(from_queue(&burst), None).await.unwrap();
    assert!(!outcomes(&inv).contains(&Outcome::Requeued), "{inv:#?}");

    let (b3, b4) = (warning("b3", BLUE_ID), warning("b4", BLUE_ID));
    let mixed = [b3.clone(), warning("g1", GREEN_ID), b4.clone()];
    let inv = handler.invoke(from_queue(&mixed), None).await.unwrap();
    let outcomes_then = outcomes(&inv);
    assert_eq!(outcomes_then[0], Outcome::Requeued, "{inv:#?}");
    assert_eq!(outcomes_then[2], Outcome::Requeued);
    assert_eq!(outcomes_then[1], Outcome::Acted, "green is not busy");
    assert!(unschedulable(&two.green));
    let why = inv.reports[0].reason.as_deref().unwrap_or_default();
    assert!(why.contains("a burst of its new warnings"), "{why}");
    // Blue's instances, listed in the mass interruption, answer its lookups: only green's.
    assert_eq!(lookups.take(), [vec![GREEN_ID.to_string()]]);
    let sent: Vec<String> = queue
        .sent
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.1.clone())
        .collect();
    let blue = ClusterId::parse("blue").unwrap().to_string();
    let triaged = |b: &str| forewarn::domain::inbound::sqs::triaged_body(b, &blue);
    assert_eq!(sent, [triaged(&b3), triaged(&b4)]);
    assert_eq!(*queue.groups.lock().unwrap(), [blue.clone(), blue.clone()]);

    // Read again (blue still busy), they are worked on; a new one of blue still goes back.
    let again = [sent[0].clone(), sent[1].clone(), warning("b5", BLUE_ID)];
    let inv = handler.invoke(from_queue(&again), None).await.unwrap();
    let outcomes_again = outcomes(&inv);
    assert!(
        !outcomes_again[..2].contains(&Outcome::Requeued),
        "{inv:#?}"
    );
    assert!(
        inv.reports[..2]
            .iter()
            .all(|r| r.cluster.as_deref() == Some(&*blue))
    );
    assert_eq!(outcomes_again[2], Outcome::Requeued);

    two.clock.advance(HOLD);
    let quiet = [warning("b6", BLUE_ID), warning("b7", BLUE_ID)];
    let inv = handler.invoke(from_queue(&quiet), None).await.unwrap();
    assert!(!outcomes(&inv).contains(&Outcome::Requeued), "{inv:#?}");
}

/// While its triaged warnings are worked on in an execution environment (its last share there
/// had some, less than [`HOLD`] ago), a cluster's drains' continuations read there go back as
/// they came, in its group, behind the triaged warnings still queued: its cordons come before
/// its drains (issue 59). Not once that is over, nor a drain with less than half its window left.
#[tokio::test]
async fn a_clusters_drains_wait_behind_its_triaged_warnings_while_half_their_window_is_left() {
    use forewarn::app::fleet::triage::HOLD;
    let two = Two::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (handler, queue) = triaging(&two, dir.path(), None);
    let blue = ClusterId::parse("blue").unwrap().to_string();
    let sent = || std::mem::take(&mut *queue.sent.lock().unwrap());
    let spot = fixtures::spot_json("s1", BLUE_ID, &two.clock.now().to_rfc3339());
    let inv = handler
        .invoke(from_queue(&[spot.to_string()]), None)
        .await
        .unwrap();
    assert_eq!(inv.reports[0].outcome, Outcome::Acted, "{inv:#?}");
    let drain = sent().pop().expect("the drain's first pass is queued").1;
    let triaged = |id: &str| {
        let body = rebalance(id, BLUE_ID, &two.clock).to_string();
        forewarn::domain::inbound::sqs::triaged_body(&body, &blue)
    };
    let outcome = |inv: forewarn::app::handler::Invocation| {
        assert_eq!(inv.response["batchItemFailures"], serde_json::json!([]));
        (inv.reports[0].outcome, inv.reports[0].reason.clone())
    };
    let run = |bodies: &[String]| handler.invoke(from_queue(bodies), None);
    let inv = run(&[triaged("t1")]).await;
    assert_ne!(outcome(inv.unwrap()).0, Outcome::Requeued, "worked on");
    queue.groups.lock().unwrap().clear();

    let (outcome_then, why) = outcome(run(std::slice::from_ref(&drain)).await.unwrap());
    assert_eq!(outcome_then, Outcome::Requeued);
    let why = why.unwrap_or_default();
    assert!(why.contains("its triaged warnings are worked on"), "{why}");
    let back: Vec<String> = sent().into_iter().map(|s| s.1).collect();
    assert_eq!(back, std::slice::from_ref(&drain), "as it came");
    assert_eq!(*queue.groups.lock().unwrap(), std::slice::from_ref(&blue));

    // A share of blue without triaged warnings ended it (the head of blue's group is past
    // them); so does HOLD after a share with some.
    let inv = run(std::slice::from_ref(&drain)).await;
    assert_ne!(outcome(inv.unwrap()).0, Outcome::Requeued, "backlog over");
    assert_ne!(
        outcome(run(&[triaged("t2")]).await.unwrap()).0,
        Outcome::Requeued
    );
    two.clock.advance(HOLD);
    let inv = run(std::slice::from_ref(&drain)).await;
    assert_ne!(outcome(inv.unwrap()).0, Outcome::Requeued, "HOLD over");

    // 60 s into a spot warning's 105 s window: less than half left, its drain waits no longer.
    two.clock.advance(Duration::from_secs(59));
    assert_ne!(
        outcome(run(&[triaged("t3")]).await.unwrap()).0,
        Outcome::Requeued
    );
    let inv = run(&[drain]).await;
    assert_ne!(
        outcome(inv.unwrap()).0,
        Outcome::Requeued,
        "half its window over"
    );
}
