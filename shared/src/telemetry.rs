//! Telemetry in one place: JSON logs through `tracing-subscriber` for the Lambda functions.

use tracing_subscriber::EnvFilter;

/// JSON logs on stdout (CloudWatch Logs reads them as structured fields), filtered by
/// `FOREWARN_LOG` or `RUST_LOG` (default `info`). Safe to call twice: the second call is a no-op.
pub fn init_json() {
    let filter = EnvFilter::try_from_env("FOREWARN_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(true)
        .with_span_list(false)
        .flatten_event(true)
        .with_target(false)
        .without_time()
        .try_init();
}

/// CloudWatch Embedded Metric Format: the metric documents one handled record emits, as JSON
/// lines for stdout (CloudWatch Logs turns them into metrics in namespace `forewarn`).
///
/// - `EventsReceived` (Count) by `Kind`, and by `Kind`, `Outcome`;
/// - `Actions` (Count) by `Kind`, `Action`, `Result` (`done`, `planned`, `failed`) for every
///   node action other than `none`;
/// - `PoolsMarked` (Count) by `CapacityType`, `InstanceType`, `Zone` (interruptions per pool);
/// - `EventToActionLatency` (Milliseconds) by `Kind`: from the event's time to `now`, the end
///   of the batch that carried it out (so it includes the wait in the queue and the batch's
///   other events), for events acted on.
pub fn emf_documents(
    report: &crate::pipeline::Report,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<serde_json::Value> {
    use crate::pipeline::Outcome;
    use serde_json::json;

    let timestamp = now.timestamp_millis();
    let kind = report.kind.map(|k| k.as_str()).unwrap_or("undecodable");
    let doc = |dimensions: &[&str], metrics: serde_json::Value, fields: serde_json::Value| {
        let mut d = json!({
            "_aws": {
                "Timestamp": timestamp,
                "CloudWatchMetrics": [{
                    "Namespace": NAMESPACE,
                    "Dimensions": [dimensions],
                    "Metrics": metrics,
                }]
            }
        });
        if let (Some(d), Some(fields)) = (d.as_object_mut(), fields.as_object()) {
            d.extend(fields.clone());
        }
        d
    };
    let mut docs = vec![
        doc(
            &["Kind"],
            json!([{"Name": "EventsReceived", "Unit": "Count"}]),
            json!({"Kind": kind, "EventsReceived": 1}),
        ),
        doc(
            &["Kind", "Outcome"],
            json!([{"Name": "EventsReceived", "Unit": "Count"}]),
            json!({"Kind": kind, "Outcome": report.outcome.as_str(), "EventsReceived": 1}),
        ),
    ];
    let result = match report.outcome {
        Outcome::Acted => Some("done"),
        Outcome::Planned => Some("planned"),
        Outcome::Failed => Some("failed"),
        Outcome::Ignored | Outcome::Duplicate => None,
    };
    if let Some(result) = result {
        for action in report
            .actions
            .iter()
            .filter(|a| a.action != crate::config::Action::None)
        {
            docs.push(doc(
                &["Kind", "Action", "Result"],
                json!([{"Name": "Actions", "Unit": "Count"}]),
                json!({"Kind": kind, "Action": action.action.as_str(), "Result": result, "Actions": 1,
                       "InstanceId": action.instance_id, "Node": action.node}),
            ));
        }
    }
    if matches!(report.outcome, Outcome::Acted | Outcome::Planned) {
        for pool in report
            .pools
            .iter()
            .filter(|p| p.unavailable_until.is_some())
        {
            docs.push(doc(
                &["CapacityType", "InstanceType", "Zone"],
                json!([{"Name": "PoolsMarked", "Unit": "Count"}]),
                json!({"CapacityType": pool.capacity_type, "InstanceType": pool.instance_type,
                       "Zone": pool.zone, "PoolsMarked": 1}),
            ));
        }
    }
    if report.outcome == Outcome::Acted
        && let Some(time) = report.time
    {
        let latency = (now - time).num_milliseconds().max(0);
        docs.push(doc(
            &["Kind"],
            json!([{"Name": "EventToActionLatency", "Unit": "Milliseconds"}]),
            json!({"Kind": kind, "EventToActionLatency": latency, "EventId": report.event_id}),
        ));
    }
    docs
}

/// The CloudWatch namespace of forewarn's metrics.
pub const NAMESPACE: &str = "forewarn";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Action;
    use crate::event::EventKind;
    use crate::pipeline::{ActionReport, Outcome, PoolReport, Report};

    fn report(outcome: Outcome) -> Report {
        Report {
            event_id: Some("e1".into()),
            kind: Some(EventKind::SpotInterruption),
            summary: None,
            origin: "sqs".into(),
            message_id: Some("m1".into()),
            time: crate::event::parse_time("2026-11-20T10:00:00Z"),
            instance_ids: vec!["i-0a1b2c3d4e5f60001".into()],
            outcome,
            pools: vec![PoolReport {
                capacity_type: "spot".into(),
                instance_type: "m5.large".into(),
                zone: "us-east-1a".into(),
                unavailable_until: crate::event::parse_time("2026-11-20T11:00:00Z"),
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
            }],
            reason: None,
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
        let now = crate::event::parse_time("2026-11-20T10:00:07Z").unwrap();
        let docs = emf_documents(&report(Outcome::Acted), now);
        assert_eq!(
            metric_names(&docs),
            [
                "EventsReceived",
                "EventsReceived",
                "Actions",
                "PoolsMarked",
                "EventToActionLatency"
            ]
        );
        for d in &docs {
            assert_eq!(d["_aws"]["Timestamp"], now.timestamp_millis());
            assert_eq!(d["_aws"]["CloudWatchMetrics"][0]["Namespace"], "forewarn");
            // every dimension named has a value in the document (else CloudWatch drops it)
            for dim in d["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]
                .as_array()
                .unwrap()
            {
                assert!(d[dim.as_str().unwrap()].is_string(), "{dim} missing in {d}");
            }
        }
        assert_eq!(docs[1]["Outcome"], "acted");
        assert_eq!(docs[2]["Action"], "cordon-drain");
        assert_eq!(docs[2]["Result"], "done");
        assert_eq!(docs[3]["InstanceType"], "m5.large");
        assert_eq!(docs[4]["EventToActionLatency"], 7000);
    }

    #[test]
    fn duplicates_count_as_received_only() {
        let docs = emf_documents(&report(Outcome::Duplicate), chrono::Utc::now());
        assert_eq!(metric_names(&docs), ["EventsReceived", "EventsReceived"]);
        let failed = emf_documents(&report(Outcome::Failed), chrono::Utc::now());
        assert_eq!(
            metric_names(&failed),
            ["EventsReceived", "EventsReceived", "Actions"]
        );
        assert_eq!(failed[2]["Result"], "failed");
    }
}
