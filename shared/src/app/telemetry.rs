//! Telemetry: JSON logs through `tracing-subscriber` for the Lambda functions, and the EMF metric
//! documents of each record (a preflight's lines and metric are beside its judgement, in
//! [`crate::app::preflight`]).

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tracing_subscriber::EnvFilter;

use crate::app::settings::Settings;

use crate::domain::config::Action;
use crate::domain::report::{Outcome, PoolReport, Report};
use tracing_subscriber::util::SubscriberInitExt;

/// What is written of each report besides its log line: with `metrics`, its EMF metric
/// documents. [`init_json`] answers the one of a Lambda function (metrics when running as one,
/// or under cargo-lambda's emulator); the handler holds it (`Handler::telemetry`), logs only
/// by default: the tests and the command line get the logs only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Telemetry {
    /// [`Telemetry::observe`] writes EMF metric documents.
    pub metrics: bool,
}

impl Telemetry {
    /// Logs each record and, with metrics, writes its EMF metric documents. `done` is when the
    /// work was over (the metrics' latencies end there).
    pub fn observe(&self, reports: &[Report], done: DateTime<Utc>) {
        for report in reports {
            log_report(report);
            if self.metrics {
                for doc in emf_documents(report, done) {
                    // EMF documents are log lines of their own, on stdout.
                    println!("{doc}");
                }
            }
        }
    }
}

/// JSON logs on stdout (CloudWatch Logs reads them as structured fields), filtered by the
/// settings' `RUST_LOG`, else `info`. Answers the telemetry of the
/// process: running as a Lambda function (`AWS_LAMBDA_FUNCTION_NAME`), with the EMF metrics
/// of [`Telemetry::observe`]. Safe to call twice: the second call's subscriber is a no-op.
pub fn init_json(settings: &Settings) -> Telemetry {
    // try_init also routes the `log` records of dependencies (rustls, hyper-rustls) to tracing
    let _ = json_subscriber(filter(settings, "info"), std::io::stdout).try_init();
    Telemetry {
        metrics: settings.lambda_function.is_some(),
    }
}

/// The filter the settings' `RUST_LOG` names (`tracing` env-filter syntax), else `default`
/// (also when it does not parse): the functions' and the `forewarn` command's.
pub fn filter(settings: &Settings, default: &str) -> EnvFilter {
    settings
        .rust_log
        .as_deref()
        .and_then(|log| EnvFilter::try_new(log).ok())
        .unwrap_or_else(|| EnvFilter::new(default))
}

/// The subscriber of [`init_json`], writing to `writer`: one JSON object per line, the event's
/// fields flattened, its innermost span as `span` and all its spans as `spans`.
pub fn json_subscriber<W>(
    filter: EnvFilter,
    writer: W,
) -> impl tracing::Subscriber + Send + Sync + 'static
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(true)
        .with_span_list(true)
        .flatten_event(true)
        .with_target(false)
        .without_time()
        .with_writer(writer)
        .finish()
}

/// One log line per record, with the fields that identify it.
fn log_report(report: &Report) {
    let kind = report.kind.map(|k| k.as_str()).unwrap_or("undecodable");
    let event_id = report.event_id.as_deref().unwrap_or("");
    let instances = report.instance_ids.join(",");
    let nodes = report.actions.iter().filter_map(|a| a.node.as_deref());
    let nodes = nodes.collect::<Vec<_>>().join(",");
    let pools = report.pools.iter().map(|p| p.pool.to_string());
    let pools = pools.collect::<Vec<_>>().join(",");
    let actions = report.actions.iter().map(|a| a.action.as_str());
    let actions = actions.collect::<Vec<_>>().join(",");
    let reason = report.reason.as_deref().unwrap_or("");
    let drains = || report.actions.iter().filter_map(|a| a.drain);
    let pod_events: usize = drains().map(|d| d.pod_events).sum();
    let pod_events_given_up: usize = drains().map(|d| d.pod_events_given_up).sum();
    let (outcome, message_id) = (report.outcome.as_str(), report.message_id.as_deref());
    let message_id = message_id.unwrap_or("");
    macro_rules! log {
        ($level:expr, $message:literal) => {
            tracing::event!(
                $level,
                event_id,
                kind,
                instances,
                nodes,
                pools,
                actions,
                outcome,
                message_id,
                reason,
                pod_events,
                pod_events_given_up,
                $message
            )
        };
    }
    match report.outcome {
        Outcome::Failed => log!(tracing::Level::WARN, "event failed"),
        _ => log!(tracing::Level::INFO, "event handled"),
    }
}

/// CloudWatch Embedded Metric Format: the metric documents one handled record emits, as JSON
/// lines for stdout (CloudWatch Logs turns them into metrics in namespace `forewarn`).
///
/// - `EventsReceived` (Count) by `Kind`, and by `Kind`, `Outcome`;
/// - `Actions` (Count) by `Kind`, `Action`, `Result` (`done`, `planned`, `failed`) for every
///   node action other than `none`;
/// - `PoolsMarked` (Count) by `CapacityType`, `InstanceType`, `Zone` (interruptions per pool);
/// - `Evictions` (Count) by `Kind`: evictions the API accepted, and `EvictionsRefused` (Count)
///   by `Kind`: pods still refused at the drain's deadline (a disruption budget);
///   `PodEventsRecorded` and `PodEventsGivenUp` (Count) by `Kind`, in the same document: the
///   Events recorded on the pods the pass evicted, and those given up (its budget, a busy rate
///   limit, a failure); `PlaceholdersRefused` (Count) by `Kind`, likewise: surge placeholders
///   the API server refused (admission, RBAC), whose pods were evicted at once;
/// - `Drains` (Count) by `Kind`, `Result` (`complete`, `incomplete`): drains that ended (a drain
///   that does not wait ends in a later pass; each pass counts the evictions it sent);
/// - `DrainPasses` (Count) by `Kind`, `Outcome`: later passes of drains (continuations), which
///   count no event, action or pool again;
/// - `EventToActionLatency` (Milliseconds) by `Kind`, and by `CapacityType`, `InstanceType`,
///   `Zone`: from the event's time to the node's cordon (for a `delete`, which cordons
///   nothing, to `now`, the end of the batch), for events acted on. It includes the wait in
///   the queue.
/// - `AccountUnreachable` (Count), without dimensions (what the stack's alarm watches) and by
///   `Account`: records of a served member account that failed because its member role could
///   not be assumed or was refused the lookups.
///
/// A record handled in a named cluster (a deployment serving several) is counted under each
/// dimension set as it is and once more with `Cluster` first (`Cluster`, `Kind`, ...): the
/// totals stay where they were, and each cluster's can be seen apart.
pub fn emf_documents(report: &Report, now: DateTime<Utc>) -> Vec<Value> {
    let mut emf = Emf::new(now, report.cluster.as_deref());
    let kind = report.kind.map(|k| k.as_str()).unwrap_or("undecodable");
    let outcome = report.outcome.as_str();
    // The node actions other than `none`.
    let acting = || report.actions.iter().filter(|a| a.action != Action::None);
    if report.pass.is_some() {
        // A later pass of a drain: the event was counted (and its pools) by its first pass.
        emf.add(
            &[&["Kind", "Outcome"]],
            json!({"DrainPasses": 1}),
            json!({"Kind": kind, "Outcome": outcome, "EventId": report.event_id,
                   "Pass": report.pass}),
        );
    } else {
        emf.add(
            &[&["Kind"], &["Kind", "Outcome"]],
            json!({"EventsReceived": 1}),
            json!({"Kind": kind, "Outcome": outcome}),
        );
        let result = match report.outcome {
            Outcome::Acted => Some("done"),
            Outcome::Planned | Outcome::Failed => Some(outcome),
            Outcome::Ignored | Outcome::Duplicate | Outcome::Requeued => None,
        };
        for action in acting().filter(|_| result.is_some()) {
            emf.add(
                &[&["Kind", "Action", "Result"]],
                json!({"Actions": 1}),
                json!({"Kind": kind, "Action": action.action.as_str(), "Result": result,
                       "InstanceId": action.instance_id, "Node": action.node}),
            );
        }
        if let Some(account) = &report.account_unreachable {
            emf.add(
                &[&[], &["Account"]],
                json!({"AccountUnreachable": 1}),
                json!({"Account": account}),
            );
        }
        let marking = matches!(report.outcome, Outcome::Acted | Outcome::Planned);
        let marked = (report.pools.iter()).filter(|p| marking && p.unavailable_until.is_some());
        for pool in marked {
            emf.add(
                &[POOL],
                json!({"PoolsMarked": 1}),
                with_pool(json!({}), pool),
            );
        }
    }
    if report.outcome != Outcome::Acted {
        return emf.docs;
    }
    // `Evictions` per drain pass that ran; `EvictionsRefused` and `Drains` per drain that ended.
    for action in acting() {
        let Some(drain) = action.drain else { continue };
        let mut fields = json!({"Kind": kind, "InstanceId": action.instance_id,
                                "Node": action.node});
        let mut counts = json!({"Evictions": drain.evicted, "PodEventsRecorded": drain.pod_events,
                                "PodEventsGivenUp": drain.pod_events_given_up,
                                "PlaceholdersRefused": drain.placeholders_refused});
        if drain.pending {
            emf.add(&[&["Kind"]], counts, fields);
            continue;
        }
        counts["EvictionsRefused"] = json!(drain.left);
        emf.add(&[&["Kind"]], counts, fields.clone());
        fields["Result"] = json!(if drain.complete {
            "complete"
        } else {
            "incomplete"
        });
        emf.add(&[&["Kind", "Result"]], json!({"Drains": 1}), fields);
    }
    // From the event's time to the first node cordoned for it (a delete, which cordons
    // nothing, ends with the batch: `now`), by kind and by pool.
    let Some(time) = report.time.filter(|_| report.pass.is_none()) else {
        return emf.docs;
    };
    let acted_at = acting().filter_map(|a| a.cordoned_at).min().unwrap_or(now);
    let latency = json!({"EventToActionLatency": (acted_at - time).num_milliseconds().max(0)});
    let fields = json!({"Kind": kind, "EventId": report.event_id});
    // one pool per event in practice: its dimensions let latency be seen per pool
    let (dimensions, fields): (&[&[&str]], _) = match report.pools.first() {
        Some(pool) => (&[&["Kind"], POOL], with_pool(fields, pool)),
        None => (&[&["Kind"]], fields),
    };
    emf.add(dimensions, latency, fields);
    emf.docs
}

/// The metric documents of one record, or one preflight, as they are added.
pub(crate) struct Emf<'a> {
    timestamp: i64,
    /// The cluster the record was handled in, when named.
    cluster: Option<&'a str>,
    pub(crate) docs: Vec<Value>,
}

impl<'a> Emf<'a> {
    pub(crate) fn new(now: DateTime<Utc>, cluster: Option<&'a str>) -> Self {
        let (timestamp, docs) = (now.timestamp_millis(), Vec::new());
        Emf {
            timestamp,
            cluster,
            docs,
        }
    }

    /// Adds one EMF document: `metrics`, each by its name with its value (counts, and latencies
    /// in milliseconds), beside `fields` (their dimensions' values, and other properties).
    pub(crate) fn add(&mut self, dimensions: &[&[&str]], metrics: Value, mut fields: Value) {
        let unit = |m: &str| match m.ends_with("Latency") {
            true => "Milliseconds",
            false => "Count",
        };
        let mut named = Vec::new();
        for (name, value) in metrics.as_object().into_iter().flatten() {
            named.push(json!({"Name": name, "Unit": unit(name)}));
            fields[name] = value.clone();
        }
        let mut sets: Vec<Vec<&str>> = dimensions.iter().map(|set| set.to_vec()).collect();
        if let Some(cluster) = self.cluster {
            sets.extend(
                dimensions
                    .iter()
                    .map(|set| [&["Cluster"][..], *set].concat()),
            );
            fields["Cluster"] = json!(cluster);
        }
        fields["_aws"] = json!({
            "Timestamp": self.timestamp,
            "CloudWatchMetrics": [{"Namespace": NAMESPACE, "Dimensions": sets, "Metrics": named}]
        });
        self.docs.push(fields);
    }
}

/// The dimensions of a pool.
const POOL: &[&str] = &["CapacityType", "InstanceType", "Zone"];

/// `fields` with the values of `pool`'s dimensions ([`POOL`]).
fn with_pool(mut fields: Value, PoolReport { pool, .. }: &PoolReport) -> Value {
    let values: [&str; 3] = [pool.capacity_type.as_str(), &pool.instance_type, &pool.zone];
    for (name, value) in POOL.iter().zip(values) {
        fields[*name] = json!(value);
    }
    fields
}

/// The CloudWatch namespace of forewarn's metrics.
pub const NAMESPACE: &str = "forewarn";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::config::Action;
    use crate::domain::event::EventKind;
    use crate::domain::report::{ActionReport, DrainSummary, Outcome, PoolReport, Report};

    fn report(outcome: Outcome) -> Report {
        Report {
            event_id: Some("e1".into()),
            kind: Some(EventKind::SpotInterruption),
            cluster: None,
            summary: None,
            origin: "sqs".into(),
            message_id: Some("m1".into()),
            time: crate::domain::event::parse_time("2026-11-20T10:00:00Z"),
            instance_ids: vec!["i-0a1b2c3d4e5f60001".into()],
            outcome,
            pools: vec![PoolReport {
                pool: "spot#m5.large#us-east-1a".parse().unwrap(),
                unavailable_until: crate::domain::event::parse_time("2026-11-20T11:00:00Z"),
            }],
            actions: vec![ActionReport {
                instance_id: "i-0a1b2c3d4e5f60001".into(),
                node: Some("n1".into()),
                action: Action::CordonDrain,
                target: None,
                deadline: None,
                reason: String::new(),
                complete_lifecycle: None,
                result: Some("cordoned".into()),
                cordoned_at: crate::domain::event::parse_time("2026-11-20T10:00:04Z"),
                drain: Some(DrainSummary {
                    evicted: 3,
                    left: 1,
                    complete: false,
                    pending: false,
                    pod_events: 2,
                    pod_events_given_up: 1,
                    placeholders_refused: 0,
                }),
                heartbeat_at: None,
            }],
            reason: None,
            pass: None,
            permanent: false,
            traffic: None,
            retry_not_before: None,
            account_unreachable: None,
        }
    }

    fn metric_names(docs: &[serde_json::Value]) -> Vec<String> {
        docs.iter()
            .map(|d| {
                d["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn an_acted_event_emits_every_metric_with_its_dimensions() {
        let now = crate::domain::event::parse_time("2026-11-20T10:00:07Z").unwrap();
        let docs = emf_documents(&report(Outcome::Acted), now);
        assert_eq!(
            metric_names(&docs),
            [
                "EventsReceived",
                "Actions",
                "PoolsMarked",
                "Evictions",
                "Drains",
                "EventToActionLatency"
            ]
        );
        for d in &docs {
            assert_eq!(d["_aws"]["Timestamp"], now.timestamp_millis());
            assert_eq!(d["_aws"]["CloudWatchMetrics"][0]["Namespace"], "forewarn");
            // every dimension named has a value in the document (else CloudWatch drops it)
            for set in d["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
                .as_array()
                .unwrap()
            {
                for dim in set.as_array().unwrap() {
                    assert!(d[dim.as_str().unwrap()].is_string(), "{dim} missing in {d}");
                }
            }
            // every metric named has a value in the document
            for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]
                .as_array()
                .unwrap()
            {
                assert!(d[m["Name"].as_str().unwrap()].is_number(), "{m} in {d}");
            }
        }
        assert_eq!(docs[0]["Outcome"], "acted");
        assert_eq!(
            docs[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            serde_json::json!([["Kind"], ["Kind", "Outcome"]])
        );
        assert_eq!(docs[1]["Action"], "cordon-drain");
        assert_eq!(docs[1]["Result"], "done");
        assert_eq!(docs[2]["InstanceType"], "m5.large");
        assert_eq!(docs[3]["Evictions"], 3);
        assert_eq!(docs[3]["EvictionsRefused"], 1);
        assert_eq!(docs[3]["PodEventsRecorded"], 2);
        assert_eq!(docs[3]["PodEventsGivenUp"], 1);
        assert_eq!(docs[4]["Result"], "incomplete");
        // to the cordon, not to the end of the batch
        assert_eq!(docs[5]["EventToActionLatency"], 4000);
        assert_eq!(
            docs[5]["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            serde_json::json!([["Kind"], ["CapacityType", "InstanceType", "Zone"]])
        );
    }

    #[test]
    fn a_delete_is_timed_to_the_end_of_the_batch() {
        let mut r = report(Outcome::Acted);
        r.actions[0].action = Action::Delete;
        r.actions[0].cordoned_at = None;
        r.actions[0].drain = None;
        let now = crate::domain::event::parse_time("2026-11-20T10:00:09Z").unwrap();
        let docs = emf_documents(&r, now);
        assert_eq!(
            metric_names(&docs),
            [
                "EventsReceived",
                "Actions",
                "PoolsMarked",
                "EventToActionLatency"
            ]
        );
        assert_eq!(docs[3]["EventToActionLatency"], 9000);
    }

    #[test]
    fn duplicates_count_as_received_only() {
        let docs = emf_documents(&report(Outcome::Duplicate), chrono::Utc::now());
        assert_eq!(metric_names(&docs), ["EventsReceived"]);
        let failed = emf_documents(&report(Outcome::Failed), chrono::Utc::now());
        assert_eq!(metric_names(&failed), ["EventsReceived", "Actions"]);
        assert_eq!(failed[1]["Result"], "failed");
    }

    /// A record of a served account that could not be reached is counted in
    /// `AccountUnreachable`, in all (the alarm's) and by account.
    #[test]
    fn an_unreachable_accounts_records_are_counted_by_account() {
        let mut r = report(Outcome::Failed);
        r.account_unreachable = Some("222222222222".into());
        let docs = emf_documents(&r, chrono::Utc::now());
        assert_eq!(
            metric_names(&docs),
            ["EventsReceived", "Actions", "AccountUnreachable"]
        );
        let doc = &docs[2];
        assert_eq!(doc["AccountUnreachable"], 1);
        assert_eq!(doc["Account"], "222222222222");
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([[], ["Account"]])
        );
    }

    #[test]
    fn a_named_clusters_records_are_counted_also_by_cluster() {
        let mut r = report(Outcome::Acted);
        let plain = emf_documents(&r, chrono::Utc::now());
        r.cluster = Some("green".into());
        let docs = emf_documents(&r, chrono::Utc::now());
        assert_eq!(metric_names(&docs), metric_names(&plain));
        for (doc, plain) in docs.iter().zip(&plain) {
            assert_eq!(doc["Cluster"], "green");
            let sets = doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
                .as_array()
                .unwrap();
            let before = plain["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
                .as_array()
                .unwrap();
            // The sets as they were, then each with the cluster first.
            assert_eq!(sets.len(), 2 * before.len());
            assert_eq!(&sets[..before.len()], before.as_slice());
            for (with, without) in sets[before.len()..].iter().zip(before) {
                let with = with.as_array().unwrap();
                assert_eq!(with[0], "Cluster");
                assert_eq!(&with[1..], without.as_array().unwrap().as_slice());
            }
        }
        assert!(plain.iter().all(|d| d.get("Cluster").is_none()));
    }

    #[test]
    fn later_passes_count_passes_and_evictions_not_events() {
        let now = chrono::Utc::now();
        let mut first = report(Outcome::Acted);
        let drain = first.actions[0].drain.as_mut().unwrap();
        drain.pending = true;
        drain.left = 0;
        let docs = emf_documents(&first, now);
        let names = metric_names(&docs);
        assert!(names.iter().any(|n| n == "EventsReceived"), "{names:?}");
        assert!(
            !names.iter().any(|n| n == "Drains"),
            "the drain has not ended"
        );

        let mut later = report(Outcome::Acted);
        later.pass = Some(2);
        let docs = emf_documents(&later, now);
        assert_eq!(metric_names(&docs), ["DrainPasses", "Evictions", "Drains"]);
        assert_eq!(docs[0]["Pass"], 2);
        later.actions[0].drain.as_mut().unwrap().pending = true;
        assert_eq!(
            metric_names(&emf_documents(&later, now)),
            ["DrainPasses", "Evictions"]
        );
    }
}
