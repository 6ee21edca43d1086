//! The JSON logs of an event's work carry its span. A test binary of its own: tracing caches
//! each log site's interest process-wide, and other tests logging on other threads without a
//! subscriber would race the scoped one installed here.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use forewarn::adapters::embedded::EmbeddedStore;
use forewarn::adapters::snapshot::ClusterState;
use forewarn::app::pipeline::{Described, Pipeline};
use forewarn::domain::config::Config;
use forewarn::domain::facts::{InstanceFacts, NodeFacts};
use forewarn::domain::plan::Plan;
use forewarn::domain::pool::CapacityType;
use forewarn::domain::report::Outcome;
use forewarn::ports::{ActionResult, Clock, Executor, Pass, PortError, Work};

const ID: &str = "i-0a1b2c3d4e5f60001";

/// A `MakeWriter` into a shared buffer.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buffer {
    type Writer = Buffer;
    fn make_writer(&'a self) -> Buffer {
        self.clone()
    }
}

/// Logs one line from inside the event's work.
struct Logging;

#[async_trait]
impl Executor for Logging {
    async fn execute(&self, plan: &Plan, _: Pass, _: Work) -> Result<Vec<ActionResult>, PortError> {
        tracing::info!("executing");
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
    ) -> Result<BTreeMap<String, forewarn::domain::surge::RoomSeen>, PortError> {
        Ok(BTreeMap::new())
    }
}

#[test]
fn every_log_line_of_an_events_work_carries_the_event_span() {
    let buffer = Buffer::default();
    let subscriber = forewarn::app::telemetry::json_subscriber(
        tracing_subscriber::EnvFilter::new("debug"),
        buffer.clone(),
    );
    let found = BTreeMap::from([(
        ID.to_string(),
        InstanceFacts {
            instance_id: ID.into(),
            instance_type: Some("m5.large".into()),
            zone: Some("us-east-1a".into()),
            capacity_type: Some(CapacityType::Spot),
            ..InstanceFacts::default()
        },
    )]);
    let instances = Described {
        found,
        failed: BTreeMap::new(),
    };
    let nodes = ClusterState {
        nodes: vec![NodeFacts {
            name: "node-1".into(),
            provider_id: Some(format!("aws:///us-east-1a/{ID}")),
            ..NodeFacts::default()
        }],
        pods: vec![],
    };
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let config = Config::default();
    // A clock at the event's minute (no pass waits: the executor leaves no drain pending).
    let clock = forewarn::adapters::clock::SystemClock::starting_at(
        "2026-11-20T10:01:00Z".parse().unwrap(),
    );
    let passes = forewarn::app::pipeline::Passes {
        interval: forewarn::app::pipeline::PASS_INTERVAL,
        queue: None,
        kept: None,
        tenant: Default::default(),
    };
    let pipeline = Pipeline {
        passes: &passes,
        clock: &clock,
        traffic: None,
        mode: forewarn::domain::config::Mode::Act,
        config: &config,
        store: &store,
        instances: &instances,
        nodes: &nodes,
        executor: Some(&Logging),
        concurrency: forewarn::app::pipeline::CONCURRENCY,
        work: Default::default(),
    };
    let event = serde_json::json!({"id": "e-span", "source": "aws.ec2",
        "detail-type": "EC2 Spot Instance Interruption Warning", "time": "2026-11-20T10:00:00Z",
        "region": "us-east-1", "detail": {"instance-id": ID, "instance-action": "terminate"}});
    let records = forewarn::domain::inbound::decode_value("test", event, clock.now()).unwrap();

    let reports = tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(pipeline.process(&records))
    });

    assert_eq!(reports[0].outcome, Outcome::Acted);
    let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let messages: Vec<&str> = lines.iter().filter_map(|l| l["message"].as_str()).collect();
    assert_eq!(messages, ["planned", "executing"], "{text}");
    for line in &lines {
        let span = &line["span"];
        assert_eq!(span["name"], "event", "{line}");
        assert_eq!(span["event_id"], "e-span");
        assert_eq!(span["kind"], "spot-interruption");
        assert_eq!(span["instance"], ID);
        assert_eq!(span["node"], "node-1");
        assert_eq!(span["pool"], "spot#m5.large#us-east-1a");
    }
}
