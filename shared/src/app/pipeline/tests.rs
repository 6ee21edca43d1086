//! The pipeline's unit tests (`mod.rs`), on fakes of every port.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration as StdDuration;

use serde_json::json;

use super::*;
use crate::adapters::clock::ManualClock;
use crate::adapters::embedded::EmbeddedStore;
use crate::domain::clusters::ClusterId;
use crate::domain::facts::{InstanceFacts, NodeFacts};
use crate::domain::fixtures::{event_json, spot_json as spot};
use crate::domain::inbound::decode_value;
use crate::domain::plan::Plan;
use crate::domain::pool::CapacityType;
use crate::ports::InstanceDirectory;
use crate::ports::{ActionResult, Place, PortError, RecordingQueue};
use async_trait::async_trait;

const A: &str = "i-0a1b2c3d4e5f60001";
const B: &str = "i-0a1b2c3d4e5f60002";

fn world() -> (Described, crate::adapters::snapshot::ClusterState) {
    let mut instances = BTreeMap::new();
    let mut nodes = Vec::new();
    for id in [A, B] {
        instances.insert(
            id.to_string(),
            InstanceFacts {
                instance_id: id.into(),
                instance_type: Some("m5.large".into()),
                zone: Some("us-east-1a".into()),
                capacity_type: Some(CapacityType::Spot),
                ..InstanceFacts::default()
            },
        );
        nodes.push(NodeFacts {
            name: format!("node-{id}"),
            provider_id: Some(format!("aws:///us-east-1a/{id}")),
            ..NodeFacts::default()
        });
    }
    (
        Described {
            found: instances,
            failed: BTreeMap::new(),
        },
        crate::adapters::snapshot::ClusterState {
            nodes,
            pods: vec![],
        },
    )
}

/// The tests' clock: the events of 2026-11-20 10:00 were received a minute later.
fn clock() -> ManualClock {
    ManualClock::at("2026-11-20T10:01:00Z".parse().unwrap())
}

/// Records the order of calls; fails or takes time (on `clock`) for chosen event ids.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<String>>,
    plans: Mutex<Vec<Plan>>,
    /// Per call, the event id and the pass.
    passes: Mutex<Vec<(String, Pass)>>,
    fail: Vec<String>,
    /// Event ids whose execution panics (a bug, or an input the code did not expect).
    panic: Vec<String>,
    sleep: Option<(StdDuration, ManualClock)>,
    /// The work each call was given.
    works: Mutex<Vec<Work>>,
}

#[async_trait]
impl Executor for Recorder {
    async fn execute(
        &self,
        plan: &Plan,
        pass: Pass,
        work: Work,
    ) -> Result<Vec<ActionResult>, PortError> {
        self.works.lock().unwrap().push(work);
        self.calls.lock().unwrap().push(plan.event_id.clone());
        self.passes
            .lock()
            .unwrap()
            .push((plan.event_id.clone(), pass));
        self.plans.lock().unwrap().push(plan.clone());
        if let Some((d, clock)) = &self.sleep {
            clock.sleep(*d).await;
        }
        assert!(
            !self.panic.contains(&plan.event_id),
            "attempt to subtract with overflow"
        );
        if self.fail.contains(&plan.event_id) {
            return Err(PortError::new(
                plan.actions[0].instance_id.clone(),
                crate::ports::FailureKind::Unavailable,
                "API answered 500",
            ));
        }
        Ok(vec![ActionResult {
            instance_id: plan.actions[0].instance_id.clone(),
            detail: "done".into(),
            ..ActionResult::default()
        }])
    }

    async fn room(
        &self,
        _: &[String],
        _: Work,
    ) -> Result<BTreeMap<String, crate::domain::surge::RoomSeen>, PortError> {
        Ok(BTreeMap::new())
    }
}

fn records(batch: serde_json::Value, clock: &ManualClock) -> Vec<Record> {
    decode_value("batch", batch, clock.now()).unwrap()
}

async fn run(
    store: &EmbeddedStore,
    exec: &Recorder,
    batch: serde_json::Value,
    work: Work,
    clock: &ManualClock,
) -> Vec<Report> {
    run_with(&Config::default(), store, exec, batch, work, clock).await
}

/// [`run`] with `config`.
async fn run_with(
    config: &Config,
    store: &EmbeddedStore,
    exec: &Recorder,
    batch: serde_json::Value,
    work: Work,
    clock: &ManualClock,
) -> Vec<Report> {
    let (instances, nodes) = world();
    let p = Pipeline {
        passes: &Passes::in_process(PASS_INTERVAL),
        clock,
        traffic: None,
        concurrency: CONCURRENCY,
        work,
        mode: Mode::Act,
        config,
        store,
        instances: &instances,
        nodes: &nodes,
        executor: Some(exec),
    };
    p.process(&records(batch, clock)).await
}

/// A batch's rebalance recommendation for instance A, whose zone's ID is `zone_id` (`None`:
/// not known), after five recommendations each followed by an interruption in A's pool,
/// recorded with the zone `zone_of(n)` (a zone ID, or a zone's name): what was decided, and
/// why.
async fn adaptive_after_five_followed(
    zone_id: Option<&str>,
    zone_of: fn(i64) -> &'static str,
) -> (crate::domain::config::Action, String) {
    use crate::domain::pool::PoolMark;
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let clock = clock();
    let update = |id: String, kind: EventKind, at: DateTime<Utc>, instance: String, zone| Plan {
        event_id: id,
        kind,
        time: at,
        summary: kind.to_string(),
        pools: vec![PoolMark {
            pool: PoolKey::new(CapacityType::Spot, "m5.large", zone),
            instance_id: instance,
            unavailable_until: None,
        }],
        ..Plan::default()
    };
    for n in 0..5 {
        let at = clock.now() - chrono::Duration::days(n + 1);
        let instance = format!("i-0a1b2c3d4e5f700{n}0");
        let zone = zone_of(n);
        let rebalance = EventKind::RebalanceRecommendation;
        let spot = EventKind::SpotInterruption;
        let later = at + chrono::Duration::minutes(5);
        for u in [
            update(format!("r{n}"), rebalance, at, instance.clone(), zone),
            update(format!("s{n}"), spot, later, instance, zone),
        ] {
            store.apply(&u, u.time).await.unwrap();
        }
    }
    let config = Config {
        policy: crate::domain::policy::Policy::parse(
            "rules:\n- name: all\n  nodes: {}\n  actions: {rebalance-recommendation: adaptive}\n",
        )
        .unwrap(),
        ..Config::default()
    };
    let exec = Recorder::default();
    let (mut instances, nodes) = world();
    if let Some(facts) = instances.found.get_mut(A) {
        facts.zone_id = zone_id.map(str::to_string);
    }
    let p = Pipeline {
        passes: &Passes::in_process(PASS_INTERVAL),
        clock: &clock,
        traffic: None,
        concurrency: CONCURRENCY,
        work: Work::default(),
        mode: Mode::Act,
        config: &config,
        store: &store,
        instances: &instances,
        nodes: &nodes,
        executor: Some(&exec),
    };
    let rebalance = json!({"id": "rb", "source": "aws.ec2",
        "detail-type": crate::domain::event::DT_REBALANCE, "time": "2026-11-20T10:00:00Z",
        "detail": {"instance-id": A}});
    let reports = p.process(&records(rebalance, &clock)).await;
    let action = &reports[0].actions[0];
    (action.action, action.reason.clone())
}

/// `adaptive` on the hot path: the batch reads its recommendations' pools' history from the
/// store and drains where recommendations were followed by interruptions.
#[tokio::test]
async fn adaptive_reads_the_pools_history_and_drains_a_hot_pool() {
    let (action, reason) = adaptive_after_five_followed(None, |_| "us-east-1a").await;
    assert_eq!(action, crate::domain::config::Action::CordonDrain);
    assert!(reason.contains("5 of 5 recommendations"), "{reason}");
}

/// Pools are keyed by zone ID: another zone's ID (another physical zone, whatever its name in
/// another account), or a zone's name, is another pool, whose history does not count.
#[tokio::test]
async fn adaptive_counts_the_history_of_the_pools_zone_id_alone() {
    let others: [fn(i64) -> &'static str; 2] = [|_| "use1-az1", |_| "us-east-1a"];
    for other in others {
        let (action, reason) = adaptive_after_five_followed(Some("use1-az6"), other).await;
        assert_ne!(
            action,
            crate::domain::config::Action::CordonDrain,
            "{reason}"
        );
    }
    let (action, reason) = adaptive_after_five_followed(Some("use1-az6"), |_| "use1-az6").await;
    assert_eq!(action, crate::domain::config::Action::CordonDrain);
    assert!(reason.contains("5 of 5 recommendations"), "{reason}");
}

#[tokio::test]
async fn duplicates_in_a_batch_act_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let exec = Recorder::default();
    let batch = json!([
        spot("e1", A, "2026-11-20T10:00:00Z"),
        spot("e1", A, "2026-11-20T10:00:00Z")
    ]);
    let reports = run(&store, &exec, batch.clone(), Work::default(), &clock()).await;
    assert_eq!(reports[0].outcome, Outcome::Acted);
    assert_eq!(reports[0].actions[0].result.as_deref(), Some("done"));
    assert_eq!(reports[1].outcome, Outcome::Duplicate);
    assert_eq!(exec.calls.lock().unwrap().len(), 1);
    // and across batches
    let again = run(&store, &exec, batch, Work::default(), &clock()).await;
    assert!(again.iter().all(|r| r.outcome == Outcome::Duplicate));
    assert_eq!(exec.calls.lock().unwrap().len(), 1);
}

/// A panic in one record's work (here the executor's) fails that record alone: the batch's
/// other events are acted on and answered, within a deadline or without one.
#[tokio::test]
async fn a_panic_fails_its_record_alone() {
    for deadline in [None, Some(clock().now() + chrono::Duration::seconds(60))] {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let exec = Recorder {
            panic: vec!["e1".into()],
            ..Recorder::default()
        };
        let batch = json!([
            spot("e1", A, "2026-11-20T10:00:00Z"),
            spot("e2", B, "2026-11-20T10:00:00Z")
        ]);
        let work = Work {
            deadline,
            ..Work::default()
        };
        let reports = run(&store, &exec, batch, work, &clock()).await;
        assert_eq!(reports[0].outcome, Outcome::Failed);
        let why = reports[0].reason.as_deref().unwrap();
        assert!(
            why.contains("panicked") && why.contains("overflow"),
            "{why}"
        );
        assert!(!reports[0].permanent, "it comes back (and ends in the DLQ)");
        assert_eq!(reports[1].outcome, Outcome::Acted, "{:?}", reports[1]);
        // The panicked event is not recorded: it comes back whole.
        let applied = store.applied(&["e1".into(), "e2".into()]).await.unwrap();
        assert_eq!(applied, HashSet::from(["e2".to_string()]));
    }
}

#[tokio::test]
async fn a_failed_action_is_not_recorded_and_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let exec = Recorder {
        fail: vec!["e1".into()],
        ..Recorder::default()
    };
    let batch = json!([
        spot("e1", A, "2026-11-20T10:00:00Z"),
        spot("e1", A, "2026-11-20T10:00:00Z"),
        spot("e2", B, "2026-11-20T10:00:00Z")
    ]);
    let reports = run(&store, &exec, batch.clone(), Work::default(), &clock()).await;
    assert_eq!(reports[0].outcome, Outcome::Failed);
    assert!(
        reports[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("API answered 500")
    );
    assert_eq!(
        reports[1].outcome,
        Outcome::Failed,
        "its twin must come back too"
    );
    assert_eq!(reports[2].outcome, Outcome::Acted);
    let applied = store.applied(&["e1".into(), "e2".into()]).await.unwrap();
    assert_eq!(applied, HashSet::from(["e2".to_string()]));
    // redelivered after the fault: it is applied now
    let ok = Recorder::default();
    let reports = run(&store, &ok, batch, Work::default(), &clock()).await;
    assert_eq!(reports[0].outcome, Outcome::Acted);
    assert_eq!(reports[2].outcome, Outcome::Duplicate);
}

#[tokio::test]
async fn events_of_one_instance_run_in_event_time_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let exec = Recorder::default();
    let batch = json!([
        spot("late", A, "2026-11-20T10:00:09Z"),
        event_json(
            crate::domain::event::DT_REBALANCE,
            "early",
            A,
            "2026-11-20T10:00:01Z",
            json!({"instance-action": "terminate"})
        ),
    ]);
    let reports = run(&store, &exec, batch, Work::default(), &clock()).await;
    assert!(
        reports.iter().all(|r| r.outcome == Outcome::Acted),
        "{reports:#?}"
    );
    assert_eq!(*exec.calls.lock().unwrap(), vec!["early", "late"]);
}

#[tokio::test]
async fn work_past_the_deadline_is_failed_and_not_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let clock = clock();
    let exec = Recorder {
        sleep: Some((StdDuration::from_millis(300), clock.clone())),
        ..Recorder::default()
    };
    let batch = json!([
        spot("s1", A, "2026-11-20T10:00:00Z"),
        spot("s2", A, "2026-11-20T10:00:01Z")
    ]);
    let work = Work {
        deadline: Some(clock.now() + chrono::Duration::milliseconds(100)),
        fail_fast: false,
    };
    let reports = run(&store, &exec, batch, work, &clock).await;
    assert_eq!(reports[0].outcome, Outcome::Failed);
    assert!(
        reports[0]
            .reason
            .as_deref()
            .unwrap()
            .starts_with("not finished")
    );
    assert_eq!(reports[1].outcome, Outcome::Failed);
    assert!(
        reports[1]
            .reason
            .as_deref()
            .unwrap()
            .starts_with("not started")
    );
    assert!(
        store
            .applied(&["s1".into(), "s2".into()])
            .await
            .unwrap()
            .is_empty()
    );
}

struct Broken;

#[async_trait]
impl InstanceDirectory for Broken {
    async fn describe(
        &self,
        _place: &Place,
        _ids: &[String],
    ) -> Result<BTreeMap<String, InstanceFacts>, PortError> {
        Err(PortError::new(
            "ec2:DescribeInstances",
            crate::ports::FailureKind::Throttled,
            "throttled",
        ))
    }
}

#[tokio::test]
async fn a_failed_lookup_fails_the_events_but_not_the_unsupported() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let (_, nodes) = world();
    let config = Config::default();
    let clock = clock();
    let batch = json!({"Records": [
        {"messageId": "m1", "body": spot("e1", A, "2026-11-20T10:00:00Z").to_string()},
        {"messageId": "m2", "body": "{\"hello\": 1}"},
        {"messageId": "m3", "body": "nope"},
    ]});
    let records = records(batch, &clock);
    let described = describe_events(&Broken, &looked_up_events(&records), &BTreeMap::new()).await;
    let p = Pipeline {
        passes: &Passes::in_process(PASS_INTERVAL),
        clock: &clock,
        traffic: None,
        concurrency: CONCURRENCY,
        work: Work::default(),
        mode: Mode::Act,
        config: &config,
        store: &store,
        instances: &described,
        nodes: &nodes,
        executor: None,
    };
    let reports = p.process(&records).await;
    let outcomes: Vec<Outcome> = reports.iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        vec![Outcome::Failed, Outcome::Ignored, Outcome::Failed]
    );
    assert!(
        reports[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("ec2:DescribeInstances: throttled")
    );
    assert_eq!(reports[0].message_id.as_deref(), Some("m1"));
}

/// The accounts of an organization, each answering its own lookup: the deployment's own
/// (the world's instances); one whose role denies `ec2:DescribeInstances`; one that
/// throttles; one whose member role cannot be assumed (not served).
struct Accounts((Described, crate::adapters::snapshot::ClusterState));

const DENIED: &str = "111111111111";
const UNSERVED: &str = "222222222222";
const THROTTLING: &str = "333333333333";

#[async_trait]
impl InstanceDirectory for Accounts {
    async fn describe(
        &self,
        place: &Place,
        ids: &[String],
    ) -> Result<BTreeMap<String, InstanceFacts>, PortError> {
        use crate::ports::{FailureKind, NotServed};
        let service = "ec2:DescribeInstances";
        match place.account.as_deref() {
            Some(DENIED) => Err(PortError::new(
                service,
                FailureKind::Forbidden,
                "UnauthorizedOperation: not authorized",
            )),
            Some(THROTTLING) => Err(PortError::new(
                service,
                FailureKind::Throttled,
                "RequestLimitExceeded",
            )),
            Some(UNSERVED) => Err(PortError::new(
                service,
                FailureKind::Forbidden,
                NotServed {
                    account: UNSERVED.into(),
                    why: "its member role cannot be assumed".into(),
                },
            )),
            _ => Ok(crate::adapters::snapshot::known_of(&self.0.0.found, ids)),
        }
    }
}

/// A spot warning for `instance` from `account`, as a queue message.
fn spot_from(id: &str, instance: &str, account: &str) -> serde_json::Value {
    let mut event = spot(id, instance, "2026-11-20T10:00:00Z");
    event["account"] = json!(account);
    json!({"messageId": id, "body": event.to_string()})
}

/// One account never fails another: the own account's warning is acted on as if alone; a
/// denied account's fails alone, permanent; a throttled one's fails alone, retryable; an
/// account not served is acknowledged, ignored with the account named, nothing done and
/// nothing recorded (a repeat of it too).
#[tokio::test]
async fn a_failed_account_fails_only_its_own_events() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let accounts = Accounts(world());
    let config = Config::default();
    let clock = clock();
    let exec = Recorder::default();
    let own = spot("own", A, "2026-11-20T10:00:00Z");
    let batch = json!({"Records": [
        spot_from("denied", B, DENIED),
        {"messageId": "own", "body": own.to_string()},
        spot_from("unserved", B, UNSERVED),
        spot_from("throttled", B, THROTTLING),
        spot_from("unserved", B, UNSERVED),
    ]});
    let records = records(batch, &clock);
    let described = describe_events(&accounts, &looked_up_events(&records), &BTreeMap::new()).await;
    let p = Pipeline {
        passes: &Passes::in_process(PASS_INTERVAL),
        clock: &clock,
        traffic: None,
        concurrency: CONCURRENCY,
        work: Work::default(),
        mode: Mode::Act,
        config: &config,
        store: &store,
        instances: &described,
        nodes: &accounts.0.1,
        executor: Some(&exec),
    };
    let reports = p.process(&records).await;
    let outcomes: Vec<(Outcome, bool)> = reports.iter().map(|r| (r.outcome, r.permanent)).collect();
    assert_eq!(
        outcomes,
        [
            (Outcome::Failed, true),
            (Outcome::Acted, false),
            (Outcome::Ignored, false),
            (Outcome::Failed, false),
            (Outcome::Ignored, false),
        ],
        "{reports:#?}"
    );
    assert_eq!(*exec.calls.lock().unwrap(), ["own"]);
    let why = |i: usize| reports[i].reason.clone().unwrap_or_default();
    assert!(why(0).contains("UnauthorizedOperation"), "{}", why(0));
    assert!(why(3).contains("RequestLimitExceeded"), "{}", why(3));
    assert!(
        why(2).contains("account 222222222222 is not served")
            && why(2).contains("no pool recorded"),
        "{}",
        why(2)
    );
    let ids = ["own", "denied", "unserved", "throttled"].map(String::from);
    let applied = store.applied(&ids).await.unwrap();
    assert_eq!(applied, HashSet::from(["own".to_string()]));
    let query = crate::domain::pool::PoolQuery {
        include_available: true,
        ..Default::default()
    };
    let pools = store.pools(&query, clock.now()).await.unwrap();
    assert_eq!(pools.len(), 1, "the own account's pool alone: {pools:#?}");
    assert_eq!(pools[0].interruptions(), 1);
}

/// A signed continuation message of a spot warning for instance `A`, sent three minutes
/// before `now`, with the default plan: `shape` changes the plan and says the pass.
fn late_continuation(
    key: &crate::domain::keys::ContinuationKey,
    id: &str,
    now: DateTime<Utc>,
    shape: impl FnOnce(&mut Plan) -> u32,
) -> serde_json::Value {
    use crate::domain::inbound::continuation::Continuation;
    let (instances, nodes) = world();
    let time = (now - chrono::Duration::minutes(3)).to_rfc3339();
    let body = spot(id, A, &time).to_string();
    let event = decode_value("b", serde_json::from_str(&body).unwrap(), now)
        .unwrap()
        .remove(0)
        .event
        .unwrap();
    let facts = Facts::new(&instances.found, &nodes.nodes);
    let mut plan = decide(&event, facts, &Config::default());
    let pass = shape(&mut plan);
    let started = now - chrono::Duration::minutes(3);
    let mut c = Continuation::first(started, started, plan, &body);
    while c.pass < pass {
        c = c.next(None);
    }
    json!({"messageId": id, "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q",
           "body": c.body(key)})
}

/// A pipeline acting with `exec`, its drains carried on by `passes`.
fn queued<'a>(
    passes: &'a Passes,
    clock: &'a ManualClock,
    config: &'a Config,
    store: &'a EmbeddedStore,
    (instances, nodes): &'a (Described, crate::adapters::snapshot::ClusterState),
    exec: &'a Recorder,
) -> Pipeline<'a> {
    Pipeline {
        passes,
        clock,
        traffic: None,
        concurrency: CONCURRENCY,
        work: Work::default(),
        mode: Mode::Act,
        config,
        store,
        instances,
        nodes,
        executor: Some(exec),
    }
}

/// A drain's continuation in a run that acts but holds no client of its cluster (the served
/// clusters could not be listed) fails, to come back; in a dry run it ends the chain.
#[tokio::test]
async fn a_continuation_with_no_client_of_its_cluster_fails_and_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let key = store.continuation_keys().await.unwrap().current;
    let (world, config, clock) = (world(), Config::default(), clock());
    let (exec, passes) = (Recorder::default(), Passes::in_process(PASS_INTERVAL));
    for (mode, outcome, permanent) in [
        (Mode::Act, Outcome::Failed, false),
        (Mode::DryRun, Outcome::Ignored, false),
    ] {
        let p = Pipeline {
            executor: None,
            mode,
            ..queued(&passes, &clock, &config, &store, &world, &exec)
        };
        let batch = json!({"Records": [drain_continuation(&key, "ev-1", clock.now(), 2)]});
        let reports = p.process(&records(batch, &clock)).await;
        assert_eq!(reports[0].outcome, outcome, "{mode:?}: {reports:#?}");
        assert_eq!(reports[0].permanent, permanent, "{mode:?}");
    }
}

#[tokio::test]
async fn a_late_continuation_touches_no_node_and_lets_its_lifecycle_action_go() {
    use crate::domain::config::Action;
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let key = store.continuation_keys().await.unwrap().current;
    let world = world();
    let config = Config::default();
    let clock = clock();
    let now = clock.now();
    // A drain whose deadline passed a minute ago (its passes came late), with and without a
    // lifecycle action waiting on it.
    let continuation = |id: &str, lifecycle: bool| {
        late_continuation(&key, id, now, |plan| {
            assert_eq!(plan.actions[0].action, Action::CordonDrain);
            plan.actions[0].deadline = Some(now - chrono::Duration::minutes(1));
            if lifecycle {
                plan.actions[0].complete_lifecycle =
                    Some(crate::domain::fixtures::lifecycle("asg", "hook"));
            }
            1
        })
    };
    let exec = Recorder::default();
    let queue = Arc::new(RecordingQueue::default());
    let passes = Passes {
        interval: PASS_INTERVAL,
        queue: Some(queue.clone()),
        kept: None,
        tenant: Tenant::Cluster,
    };
    let p = queued(&passes, &clock, &config, &store, &world, &exec);
    let batch = json!({"Records": [continuation("late-hook", true), continuation("late", false)]});
    let reports = p.process(&records(batch, &clock)).await;
    // With a lifecycle action: the executor is asked for it alone, no node action.
    let plans = exec.plans.lock().unwrap().clone();
    assert_eq!(plans.len(), 1, "{reports:#?}");
    assert_eq!(plans[0].event_id, "late-hook");
    assert_eq!(plans[0].actions[0].action, Action::None);
    assert!(plans[0].actions[0].complete_lifecycle.is_some());
    assert_eq!(reports[0].outcome, Outcome::Acted);
    assert!(
        reports[0].actions[0].reason.contains("deadline"),
        "{reports:#?}"
    );
    // Without one: refused, nothing asked of the executor.
    assert_eq!(reports[1].outcome, Outcome::Ignored);
    let why = reports[1].reason.as_deref().unwrap();
    assert!(why.starts_with("refused: the drain's deadline"), "{why}");
    // Neither chain goes on.
    assert!(queue.sent.lock().unwrap().is_empty());
}

/// A spot drain's passes are taken until its instance goes (the deadline is the notice's
/// end less the margin): an eviction then still starts the pod's replacement. Later, a pass
/// is refused; the second pass, which owes the Events its first pass left, records them
/// alone (`Pass::Announce`); a later one does nothing.
#[tokio::test]
async fn late_passes_drain_until_the_instance_goes_then_only_record_the_events_left() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let key = store.continuation_keys().await.unwrap().current;
    let world = world();
    let config = Config::default();
    let clock = clock();
    let now = clock.now();
    // (id, how long ago its deadline passed, its pass number)
    let continuation = |id: &str, past: i64, pass: u32| {
        late_continuation(&key, id, now, |plan| {
            assert!(plan.actions[0].grace_to_deadline);
            plan.actions[0].deadline = Some(now - chrono::Duration::seconds(past));
            pass
        })
    };
    let exec = Recorder::default();
    let queue = Arc::new(RecordingQueue::default());
    let passes = Passes {
        interval: PASS_INTERVAL,
        queue: Some(queue.clone()),
        kept: None,
        tenant: Tenant::Cluster,
    };
    let p = queued(&passes, &clock, &config, &store, &world, &exec);
    // 10 s past the deadline: more than a pass interval (5 s), within the margin (15 s).
    let batch = json!({"Records": [
        continuation("within", 10, 1),
        continuation("late-second", 20, 2),
        continuation("late-third", 20, 3),
    ]});
    let reports = p.process(&records(batch, &clock)).await;
    let asked = exec.passes.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(
        asked.iter().any(|(id, pass)| id == "within"
            && matches!(
                pass,
                Pass::Drain {
                    role: DrainRole::First,
                    ..
                }
            )),
        "{asked:?}"
    );
    assert!(
        asked.contains(&("late-second".to_string(), Pass::Announce)),
        "{asked:?}"
    );
    assert_eq!(reports[0].outcome, Outcome::Acted, "{reports:#?}");
    for r in &reports[1..] {
        assert_eq!(r.outcome, Outcome::Ignored, "{r:#?}");
        let why = r.reason.as_deref().unwrap();
        assert!(why.contains("the instance's notice has ended"), "{why}");
    }
    let why = reports[1].reason.as_deref().unwrap();
    assert!(
        why.contains("Events of the decision, left to this pass, are recorded"),
        "{why}"
    );
    assert!(!reports[2].reason.as_deref().unwrap().contains("Events"));
}

/// Answers each round as told, recording who was doomed and how many executor calls had
/// been made by then; `hang`: never answers (after telling `called`).
struct Balancers {
    exec: Arc<Recorder>,
    rounds: Mutex<Vec<(String, Vec<crate::domain::traffic::Doomed>, usize)>>,
    hang: bool,
    /// Answer that a group's call was throttled to the end.
    throttle: std::sync::atomic::AtomicBool,
    called: tokio::sync::Notify,
}

impl Balancers {
    fn new(exec: &Arc<Recorder>, hang: bool) -> Arc<Balancers> {
        Arc::new(Balancers {
            exec: exec.clone(),
            rounds: Mutex::default(),
            hang,
            throttle: Default::default(),
            called: tokio::sync::Notify::new(),
        })
    }
}

#[async_trait]
impl crate::ports::LoadBalancers for Balancers {
    async fn deregister(
        &self,
        key: &crate::domain::clusters::ClusterId,
        doomed: &[crate::domain::traffic::Doomed],
        _seed: &[String],
    ) -> Result<crate::domain::traffic::Deregistered, crate::ports::PortError> {
        let executed = self.exec.calls.lock().unwrap().len();
        self.rounds
            .lock()
            .unwrap()
            .push((key.name.clone(), doomed.to_vec(), executed));
        self.called.notify_one();
        if self.hang {
            std::future::pending::<()>().await;
        }
        let mut done = crate::domain::traffic::Deregistered {
            arns: vec!["arn:tg-web".into(), "arn:tg-api".into()],
            describes: 2,
            deregisters: 1,
            ..Default::default()
        };
        if self.throttle.load(std::sync::atomic::Ordering::Relaxed) {
            done.throttled = true;
            done.failed.push("arn:tg-api: ThrottlingException".into());
        }
        for d in doomed {
            done.left
                .insert(d.instance_id.clone(), ["arn:tg-web".into()].into());
        }
        Ok(done)
    }
}

/// A signed continuation of a spot warning for `A`, whose drain is still on, asking for
/// pass `pass`; the instance has an address.
fn drain_continuation(
    key: &crate::domain::keys::ContinuationKey,
    id: &str,
    now: DateTime<Utc>,
    pass: u32,
) -> serde_json::Value {
    late_continuation(key, id, now, |plan| {
        plan.actions[0].deadline = Some(now + chrono::Duration::minutes(1));
        plan.actions[0].addresses = vec!["10.0.0.5".into()];
        pass
    })
}

fn blue() -> Config {
    Config {
        cluster: Some(ClusterId::at(&Place::default(), "blue")),
        ..Config::default()
    }
}

/// A drain's first pass takes its instance off the load balancers of its cluster before the
/// executor is asked for any eviction, and its report says so; a later pass, a continuation
/// forewarn did not sign and a dry run leave the load balancers alone.
#[tokio::test]
async fn a_drains_first_pass_takes_its_instance_off_the_load_balancers_before_evicting() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let key = store.continuation_keys().await.unwrap().current;
    let forged = crate::domain::keys::ContinuationKey::new([7; 32]);
    let world = world();
    let config = blue();
    let clock = clock();
    let now = clock.now();
    let exec = Arc::new(Recorder::default());
    let balancers = Balancers::new(&exec, false);
    let traffic = Traffic {
        balancers: balancers.clone(),
        budget: DEREGISTER_BUDGET,
    };
    let passes = Passes::in_process(PASS_INTERVAL);
    let run = |batch: serde_json::Value, mode: Mode| {
        let p = Pipeline {
            traffic: Some(&traffic),
            mode,
            ..queued(&passes, &clock, &config, &store, &world, &exec)
        };
        let records = records(batch, &clock);
        async move { p.process(&records).await }
    };
    let first = drain_continuation(&key, "ev-1", now, 1);
    let reports = run(json!({"Records": [first]}), Mode::Act).await;
    let rounds = balancers.rounds.lock().unwrap().clone();
    assert_eq!(rounds.len(), 1, "{reports:#?}");
    let (cluster, doomed, executed_before) = &rounds[0];
    assert_eq!(cluster, "blue");
    assert_eq!(doomed.len(), 1);
    assert_eq!(doomed[0].instance_id, A);
    assert_eq!(doomed[0].addresses, vec!["10.0.0.5".to_string()]);
    assert_eq!(*executed_before, 0, "nothing was executed before the round");
    assert!(
        matches!(exec.passes.lock().unwrap()[0].1, Pass::Drain { .. }),
        "the drain pass ran after it"
    );
    let note = reports[0].traffic.as_deref().unwrap_or_default();
    assert!(
        note.contains("out of 1 of the cluster's 2 target groups before the first eviction"),
        "{note}"
    );
    // A second pass, a forged first pass, a dry run: no round.
    let later = drain_continuation(&key, "ev-2", now, 2);
    let forged = drain_continuation(&forged, "ev-3", now, 1);
    let reports = run(json!({"Records": [later, forged]}), Mode::Act).await;
    assert!(reports.iter().all(|r| r.traffic.is_none()), "{reports:#?}");
    let dry = drain_continuation(&key, "ev-4", now, 1);
    run(json!({"Records": [dry]}), Mode::DryRun).await;
    assert_eq!(balancers.rounds.lock().unwrap().len(), 1);
    // A genuine first pass replayed after its drain's deadline: refused, and no round.
    let late = late_continuation(&key, "ev-late", now, |plan| {
        plan.actions[0].deadline = Some(now - chrono::Duration::minutes(1));
        1
    });
    let reports = run(json!({"Records": [late]}), Mode::Act).await;
    assert!(reports[0].traffic.is_none(), "{reports:#?}");
    assert_eq!(balancers.rounds.lock().unwrap().len(), 1);
    // Another drain of the instance a second later: the round that took it off answers it.
    clock.advance(StdDuration::from_secs(1));
    let again = drain_continuation(&key, "ev-again", now, 1);
    let reports = run(json!({"Records": [again]}), Mode::Act).await;
    assert_eq!(balancers.rounds.lock().unwrap().len(), 1, "{reports:#?}");
    let note = reports[0].traffic.as_deref().unwrap_or_default();
    assert!(
        note.contains("out of 1 of the cluster's 2 target groups"),
        "{note}"
    );
    // An hour on, a drain whose instance stays a while (a scheduled change): only its
    // instance-mode targets leave, its pods keep theirs until their evictions are through.
    clock.advance(crate::ports::OUTCOME_KEPT);
    let now = clock.now();
    let scheduled = late_continuation(&key, "ev-sched", now, |plan| {
        plan.kind = crate::domain::event::EventKind::ScheduledChange;
        plan.actions[0].deadline = Some(now + chrono::Duration::days(2));
        plan.actions[0].addresses = vec!["10.0.0.5".into()];
        1
    });
    let reports = run(json!({"Records": [scheduled]}), Mode::Act).await;
    let rounds = balancers.rounds.lock().unwrap().clone();
    assert_eq!(rounds.len(), 2, "{reports:#?}");
    assert_eq!(rounds[1].1[0].instance_id, A);
    assert!(rounds[1].1[0].addresses.is_empty(), "{:?}", rounds[1]);
    // A spot warning's drain a second later wants the pods' addresses off too: a round of
    // its own, throttled: the account's limits are spent, the next batch's drains do not
    // ask (for 30 s) and evict at once.
    clock.advance(StdDuration::from_secs(1));
    balancers
        .throttle
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let throttled = drain_continuation(&key, "ev-5", now, 1);
    let reports = run(json!({"Records": [throttled]}), Mode::Act).await;
    let note = reports[0].traffic.as_deref().unwrap_or_default();
    assert!(note.contains("not deregistered from: arn:tg-api"), "{note}");
    clock.advance(StdDuration::from_secs(1));
    let next = drain_continuation(&key, "ev-6", now, 1);
    let reports = run(json!({"Records": [next]}), Mode::Act).await;
    assert_eq!(balancers.rounds.lock().unwrap().len(), 3);
    let note = reports[0].traffic.as_deref().unwrap_or_default();
    assert!(note.contains("throttled or did not answer"), "{note}");
}

/// A load balancer API that does not answer holds the evictions back for the budget, not
/// longer: once the clock has moved on by the budget, the drain's pass runs, and the report
/// says the instance was not taken off.
#[tokio::test]
async fn load_balancers_that_do_not_answer_hold_evictions_back_for_the_budget_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let key = store.continuation_keys().await.unwrap().current;
    let world = world();
    let config = blue();
    let clock = clock();
    let now = clock.now();
    let exec = Arc::new(Recorder::default());
    let balancers = Balancers::new(&exec, true);
    let traffic = Traffic {
        balancers: balancers.clone(),
        budget: StdDuration::from_secs(3),
    };
    let passes = Passes::in_process(PASS_INTERVAL);
    let p = Pipeline {
        traffic: Some(&traffic),
        ..queued(&passes, &clock, &config, &store, &world, &exec)
    };
    let batch = json!({"Records": [drain_continuation(&key, "ev-1", now, 1)]});
    let first = records(batch, &clock);
    let (reports, ()) = tokio::join!(p.process(&first), async {
        balancers.called.notified().await;
        assert!(exec.calls.lock().unwrap().is_empty(), "nothing evicted yet");
        clock.advance(StdDuration::from_secs(3));
    });
    assert_eq!(exec.calls.lock().unwrap().len(), 1, "{reports:#?}");
    assert_eq!(
        reports[0].traffic.as_deref(),
        Some(
            format!(
                "{A}: not taken off the load balancers (the load balancers did not answer \
                 within 3 s): evicting anyway"
            )
            .as_str()
        )
    );
    // For the next 30 s the drains of this account, region and cluster do not wait for
    // them: no round, evicted at once, and said so.
    let batch = json!({"Records": [drain_continuation(&key, "ev-2", clock.now(), 1)]});
    let reports = p.process(&records(batch, &clock)).await;
    assert_eq!(balancers.rounds.lock().unwrap().len(), 1);
    assert_eq!(exec.calls.lock().unwrap().len(), 2);
    let note = reports[0].traffic.as_deref().unwrap_or_default();
    assert!(note.contains("are not asked again for 30 s"), "{note}");
    clock.advance(QUIET_FOR);
    let batch = json!({"Records": [drain_continuation(&key, "ev-3", clock.now(), 1)]});
    let third = records(batch, &clock);
    let (_, ()) = tokio::join!(p.process(&third), async {
        balancers.called.notified().await;
        clock.advance(StdDuration::from_secs(3));
    });
    assert_eq!(balancers.rounds.lock().unwrap().len(), 2, "asked again");
}

/// The node directory of [`world`], recording the work each lookup was given.
struct NodesIn(crate::adapters::snapshot::ClusterState, Mutex<Vec<Work>>);

#[async_trait]
impl NodeDirectory for NodesIn {
    async fn nodes(&self, i: &[InstanceFacts], work: Work) -> Result<Vec<NodeFacts>, PortError> {
        self.1.lock().unwrap().push(work);
        self.0.nodes(i, work).await
    }

    async fn all(&self) -> Result<Vec<NodeFacts>, PortError> {
        self.0.all().await
    }
}

/// Every call of a batch through the directory and the executor is given the batch's work (its
/// deadline, and whether outages are ridden out), so that the adapters retry inside the batch.
#[tokio::test]
async fn every_call_carries_the_batchs_work() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let clock = clock();
    let exec = Recorder::default();
    let world = world();
    let nodes = NodesIn(world.1.clone(), Mutex::default());
    let work = Work {
        deadline: Some(clock.now() + chrono::Duration::seconds(60)),
        fail_fast: true,
    };
    let (passes, config) = (Passes::in_process(PASS_INTERVAL), Config::default());
    let p = Pipeline {
        concurrency: 2,
        work,
        nodes: &nodes,
        ..queued(&passes, &clock, &config, &store, &world, &exec)
    };
    let batch = json!([
        spot("s1", A, "2026-11-20T10:00:00Z"),
        spot("s2", B, "2026-11-20T10:00:00Z")
    ]);
    let reports = p.process(&records(batch, &clock)).await;
    assert!(
        reports.iter().all(|r| r.outcome == Outcome::Acted),
        "{reports:#?}"
    );
    assert_eq!(*nodes.1.lock().unwrap(), [work]);
    assert_eq!(*exec.works.lock().unwrap(), [work, work]);
}
