//! The optional webhook: one JSON message per node action, from a template, posted to a URL
//! (a Slack incoming webhook by default; any service that takes a JSON body).
//!
//! - `FOREWARN_WEBHOOK_URL`: where to post (`http://` or `https://`); unset, nothing is sent.
//! - `FOREWARN_WEBHOOK_TEMPLATE`: the JSON body, with `{{field}}` placeholders inside its
//!   strings (default [`DEFAULT_TEMPLATE`], Slack's `{"text": ...}`). A value is put in
//!   JSON-escaped, so the body stays valid JSON whatever an event holds. The fields are
//!   [`FIELDS`]; an unknown one, or a template that is not JSON, is a configuration error at
//!   cold start, never a surprise at 3 a.m.
//!
//! A message goes out for each action other than `none` of an event acted on, planned (a dry
//! run) or failed; duplicates and ignored events send nothing. Delivery is best effort: a
//! webhook that fails or is slow is logged and counted, and never fails or delays the event
//! past the batch's deadline (the event is applied; sending it again would not help).

use std::fmt;

use serde_json::Value;

use crate::domain::config::{Action, ConfigError};
use crate::domain::report::{ActionReport, Outcome, Report};
use crate::ports::{Delivery, Notifier};

/// The environment variable with the URL.
pub const ENV_URL: &str = "FOREWARN_WEBHOOK_URL";
/// The environment variable with the template.
pub const ENV_TEMPLATE: &str = "FOREWARN_WEBHOOK_TEMPLATE";

/// Slack's incoming-webhook body: one line of text per action.
pub const DEFAULT_TEMPLATE: &str = r#"{"text": "forewarn {{outcome}}: {{action}} node {{node}} ({{instance_id}}, {{pool}}) on {{summary}} event {{event_id}}. {{result}}"}"#;

/// The placeholders a template may use, with what each holds.
pub const FIELDS: &[(&str, &str)] = &[
    ("event_id", "the EventBridge event id"),
    ("kind", "the event kind (`spot-interruption`, ...)"),
    (
        "summary",
        "the event for people (`spot-interruption (terminate)`)",
    ),
    (
        "outcome",
        "`acted`, `planned` (a dry run) or `failed` (the event comes back)",
    ),
    ("time", "the event's time (RFC 3339)"),
    ("instance_id", "the instance"),
    ("node", "the node's name (empty when none)"),
    ("action", "`cordon`, `cordon-drain` or `delete`"),
    (
        "target",
        "what a delete removes (`nodeclaim/x`), else empty",
    ),
    (
        "deadline",
        "when the drain must be over (RFC 3339), else empty",
    ),
    (
        "result",
        "what was done (`cordoned node/x; evicted 3 pods`), or why it failed",
    ),
    ("reason", "why this action"),
    (
        "pool",
        "the pool marked (`spot/m5.large/us-east-1a`), else empty",
    ),
    ("capacity_type", "the pool's capacity type"),
    ("instance_type", "the pool's instance type"),
    ("zone", "the pool's availability zone"),
    (
        "cluster",
        "the cluster forewarn acts for (`FOREWARN_CLUSTER_NAME`)",
    ),
];

/// A checked webhook configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    pub url: String,
    pub template: Template,
}

impl WebhookConfig {
    /// The webhook of `FOREWARN_WEBHOOK_URL` / `FOREWARN_WEBHOOK_TEMPLATE`, if a URL is set.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<WebhookConfig>, ConfigError> {
        let Some(url) = lookup(ENV_URL).filter(|v| !v.trim().is_empty()) else {
            return Ok(None);
        };
        let url = url.trim().to_string();
        let bad = |variable: &str, value: &str, message: String| ConfigError {
            variable: variable.into(),
            value: value.into(),
            message,
        };
        let rest = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"))
            .ok_or_else(|| bad(ENV_URL, &url, "not an http:// or https:// URL".into()))?;
        if rest.is_empty() || rest.starts_with('/') || url.chars().any(char::is_whitespace) {
            return Err(bad(ENV_URL, &url, "the URL has no host".into()));
        }
        let template = match lookup(ENV_TEMPLATE).filter(|v| !v.trim().is_empty()) {
            Some(t) => Template::parse(&t).map_err(|m| bad(ENV_TEMPLATE, &t, m))?,
            None => Template::parse(DEFAULT_TEMPLATE).expect("the default template is valid"),
        };
        Ok(Some(WebhookConfig { url, template }))
    }

    /// The bodies to post for `reports`: one per action worth telling.
    pub fn messages(&self, reports: &[Report], cluster: Option<&str>) -> Vec<Value> {
        reports
            .iter()
            .filter(|r| {
                matches!(
                    r.outcome,
                    Outcome::Acted | Outcome::Planned | Outcome::Failed
                )
            })
            .flat_map(|r| {
                r.actions
                    .iter()
                    .filter(|a| a.action != Action::None)
                    .map(move |a| self.template.render(&values(r, a, cluster)))
            })
            .collect()
    }
}

/// A JSON template with `{{field}}` placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// Literal text and field names, alternately (the text first).
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Field(&'static str),
}

impl Template {
    /// Checks every placeholder and that the template, filled in, is a JSON object.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find("{{") {
            parts.push(Part::Text(rest[..start].to_string()));
            let after = &rest[start + 2..];
            let end = after.find("}}").ok_or_else(|| {
                format!(
                    "the placeholder at byte {} has no closing `}}}}`",
                    text.len() - rest.len() + start
                )
            })?;
            let name = after[..end].trim();
            let field = FIELDS
                .iter()
                .map(|(f, _)| *f)
                .find(|f| *f == name)
                .ok_or_else(|| {
                    let known: Vec<&str> = FIELDS.iter().map(|(f, _)| *f).collect();
                    format!(
                        "unknown placeholder `{{{{{name}}}}}` (known: {})",
                        known.join(", ")
                    )
                })?;
            parts.push(Part::Field(field));
            rest = &after[end + 2..];
        }
        parts.push(Part::Text(rest.to_string()));
        let template = Template { parts };
        // Filled with values that need escaping, it must still be a JSON object.
        let probe = template.render(&|_: &str| "\"quoted\" \\ back\nslash".to_string());
        if !probe.is_object() {
            return Err(
                "the template is not a JSON object once filled in (placeholders go inside \
                 JSON strings, e.g. {\"text\": \"{{node}} {{action}}\"})"
                    .into(),
            );
        }
        Ok(template)
    }

    /// The body for the given field values (`Value::Null` if the template is not JSON, which
    /// [`Template::parse`] rules out).
    pub fn render(&self, value_of: &dyn Fn(&str) -> String) -> Value {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Field(f) => {
                    let quoted = Value::String(value_of(f)).to_string();
                    out.push_str(&quoted[1..quoted.len() - 1]);
                }
            }
        }
        serde_json::from_str(&out).unwrap_or(Value::Null)
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for part in &self.parts {
            match part {
                Part::Text(t) => f.write_str(t)?,
                Part::Field(name) => write!(f, "{{{{{name}}}}}")?,
            }
        }
        Ok(())
    }
}

fn values<'a>(
    r: &'a Report,
    a: &'a ActionReport,
    cluster: Option<&'a str>,
) -> impl Fn(&str) -> String + 'a {
    move |field: &str| {
        let pool = r.pools.first();
        let text = |v: Option<&str>| v.unwrap_or_default().to_string();
        match field {
            "event_id" => text(r.event_id.as_deref()),
            "kind" => text(r.kind.map(|k| k.as_str())),
            "summary" => text(r.summary.as_deref()),
            "outcome" => r.outcome.as_str().to_string(),
            "time" => r.time.map(|t| t.to_rfc3339()).unwrap_or_default(),
            "instance_id" => a.instance_id.clone(),
            "node" => text(a.node.as_deref()),
            "action" => a.action.as_str().to_string(),
            "target" => text(a.target.as_deref()),
            "deadline" => a.deadline.map(|t| t.to_rfc3339()).unwrap_or_default(),
            "result" => match r.outcome {
                Outcome::Failed => format!("failed: {}", text(r.reason.as_deref())),
                _ => text(a.result.as_deref()),
            },
            "reason" => a.reason.clone(),
            "pool" => pool
                .map(|p| format!("{}/{}/{}", p.capacity_type, p.instance_type, p.zone))
                .unwrap_or_default(),
            "capacity_type" => text(pool.map(|p| p.capacity_type.as_str())),
            "instance_type" => text(pool.map(|p| p.instance_type.as_str())),
            "zone" => text(pool.map(|p| p.zone.as_str())),
            "cluster" => text(cluster),
            _ => String::new(),
        }
    }
}

pub use self::post::{deliver, warm_up};

/// The webhook as a [`Notifier`]: its configuration and the cluster its messages name.
pub struct Webhook {
    config: WebhookConfig,
    cluster: Option<String>,
}

impl Webhook {
    pub fn new(config: WebhookConfig, cluster: Option<String>) -> Webhook {
        Webhook { config, cluster }
    }
}

#[async_trait::async_trait]
impl Notifier for Webhook {
    async fn notify(&self, reports: &[Report], deadline: Option<tokio::time::Instant>) -> Delivery {
        deliver(&self.config, reports, self.cluster.as_deref(), deadline).await
    }
}

mod post {
    use std::sync::OnceLock;
    use std::time::Duration;

    use futures::StreamExt;
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;

    use super::WebhookConfig;
    use crate::domain::report::Report;
    use crate::ports::Delivery;

    /// Longest wait for one message.
    const TIMEOUT: Duration = Duration::from_secs(5);
    /// Messages in flight at once.
    const PARALLEL: usize = 8;

    type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

    /// The process's HTTP client (HTTPS through rustls and the system's roots), built once.
    static CLIENT: OnceLock<Result<HttpClient, String>> = OnceLock::new();

    fn client() -> Result<&'static HttpClient, String> {
        CLIENT
            .get_or_init(|| {
                let https = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_native_roots()
                    .map_err(|e| format!("reading the system's root certificates: {e}"))?
                    .https_or_http()
                    .enable_http1()
                    .build();
                Ok(Client::builder(TokioExecutor::new()).build(https))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Builds the HTTP client now (at cold start, not in the first invocation); an error
    /// (no root certificates) is returned so that setup fails loudly.
    pub fn warm_up() -> Result<(), String> {
        client().map(|_| ())
    }

    /// Posts the messages of `reports` to the webhook, each within 5 s and all before
    /// `deadline`; failures are logged and counted.
    pub async fn deliver(
        config: &WebhookConfig,
        reports: &[Report],
        cluster: Option<&str>,
        deadline: Option<tokio::time::Instant>,
    ) -> Delivery {
        let messages = config.messages(reports, cluster);
        if messages.is_empty() {
            return Delivery::default();
        }
        let results: Vec<bool> = futures::stream::iter(messages)
            .map(|body| async move {
                let limit = match deadline {
                    Some(d) => {
                        TIMEOUT.min(d.saturating_duration_since(tokio::time::Instant::now()))
                    }
                    None => TIMEOUT,
                };
                match tokio::time::timeout(limit, post(&config.url, body)).await {
                    Ok(Ok(())) => true,
                    Ok(Err(e)) => {
                        tracing::warn!(url = %config.url, error = %e, "webhook failed");
                        false
                    }
                    Err(_) => {
                        tracing::warn!(url = %config.url, timeout_ms = limit.as_millis() as u64,
                            "webhook timed out");
                        false
                    }
                }
            })
            .buffer_unordered(PARALLEL)
            .collect()
            .await;
        let sent = results.iter().filter(|ok| **ok).count();
        Delivery {
            sent,
            failed: results.len() - sent,
        }
    }

    async fn post(url: &str, body: serde_json::Value) -> Result<(), String> {
        let request = hyper::Request::post(url)
            .header("content-type", "application/json")
            .header(
                "user-agent",
                concat!("forewarn/", env!("CARGO_PKG_VERSION")),
            )
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| format!("bad request: {e}"))?;
        let response =
            client()?
                .request(request)
                .await
                .map_err(|e| match std::error::Error::source(&e) {
                    Some(cause) => format!("{e}: {cause}"),
                    None => e.to_string(),
                })?;
        let status = response.status();
        // read the answer, so that the connection can be used again
        let answer = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        if status.is_success() {
            Ok(())
        } else {
            Err(format!(
                "answered {status}: {}",
                String::from_utf8_lossy(&answer[..answer.len().min(200)])
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::report::PoolReport;

    fn lookup(url: &str, template: Option<&str>) -> impl Fn(&str) -> Option<String> {
        let (url, template) = (url.to_string(), template.map(str::to_string));
        move |n| match n {
            ENV_URL => Some(url.clone()),
            ENV_TEMPLATE => template.clone(),
            _ => None,
        }
    }

    fn report(outcome: Outcome, action: Action) -> Report {
        Report {
            event_id: Some("e-1".into()),
            kind: Some(crate::domain::event::EventKind::SpotInterruption),
            summary: Some("spot-interruption (terminate)".into()),
            origin: "sqs".into(),
            message_id: Some("m".into()),
            time: crate::domain::event::parse_time("2026-11-20T10:00:00Z"),
            instance_ids: vec!["i-1".into()],
            outcome,
            pools: vec![PoolReport {
                capacity_type: "spot".into(),
                instance_type: "m5.large".into(),
                zone: "us-east-1a".into(),
                unavailable_until: None,
            }],
            actions: vec![ActionReport {
                instance_id: "i-1".into(),
                node: Some("ip-10-0-0-1 \"quoted\"".into()),
                action,
                target: None,
                deadline: None,
                reason: "spot".into(),
                complete_lifecycle: None,
                result: Some("cordoned node/ip-10-0-0-1".into()),
                cordoned_at: None,
                drain: None,
                heartbeat_at: None,
            }],
            reason: Some("API answered 500".into()),
            pass: None,
        }
    }

    #[test]
    fn no_url_no_webhook() {
        assert_eq!(WebhookConfig::from_lookup(|_| None).unwrap(), None);
        assert_eq!(WebhookConfig::from_lookup(lookup(" ", None)).unwrap(), None);
    }

    #[test]
    fn bad_urls_and_templates_name_the_variable() {
        for url in ["ftp://x", "hooks.slack.com/x", "https://", "https:///path"] {
            let e = WebhookConfig::from_lookup(lookup(url, None)).unwrap_err();
            assert_eq!(e.variable, ENV_URL, "{url}");
        }
        let cases = [
            (
                r#"{"text": "{{nodes}}"}"#,
                "unknown placeholder `{{nodes}}`",
            ),
            (r#"{"text": "{{node"}"#, "no closing"),
            (r#"{"text": {{node}}}"#, "not a JSON object"),
            (r#"["{{node}}"]"#, "not a JSON object"),
        ];
        for (template, message) in cases {
            let e = WebhookConfig::from_lookup(lookup("https://h/x", Some(template))).unwrap_err();
            assert_eq!(e.variable, ENV_TEMPLATE);
            assert!(e.message.contains(message), "{template}: {}", e.message);
        }
    }

    #[test]
    fn the_default_template_is_slack_text_with_escaped_values() {
        let w = WebhookConfig::from_lookup(lookup("https://hooks.example/x", None))
            .unwrap()
            .unwrap();
        let m = w.messages(&[report(Outcome::Acted, Action::CordonDrain)], Some("demo"));
        assert_eq!(m.len(), 1);
        assert_eq!(
            m[0]["text"],
            "forewarn acted: cordon-drain node ip-10-0-0-1 \"quoted\" (i-1, spot/m5.large/us-east-1a) \
             on spot-interruption (terminate) event e-1. cordoned node/ip-10-0-0-1"
        );
        assert_eq!(w.template.to_string(), DEFAULT_TEMPLATE);
    }

    #[test]
    fn a_custom_template_sees_every_field() {
        let all: Vec<String> = FIELDS
            .iter()
            .map(|(f, _)| format!("\"{f}\": \"{{{{{f}}}}}\""))
            .collect();
        let template = format!("{{{}}}", all.join(", "));
        let w = WebhookConfig::from_lookup(lookup("http://127.0.0.1:9/hook", Some(&template)))
            .unwrap()
            .unwrap();
        let m = w.messages(&[report(Outcome::Failed, Action::Cordon)], Some("demo"));
        assert_eq!(m[0]["cluster"], "demo");
        assert_eq!(m[0]["outcome"], "failed");
        assert_eq!(m[0]["result"], "failed: API answered 500");
        assert_eq!(m[0]["time"], "2026-11-20T10:00:00+00:00");
        assert_eq!(m[0]["zone"], "us-east-1a");
    }

    #[test]
    fn only_actions_worth_telling() {
        let w = WebhookConfig::from_lookup(lookup("https://h/x", None))
            .unwrap()
            .unwrap();
        let reports = [
            report(Outcome::Duplicate, Action::Cordon),
            report(Outcome::Ignored, Action::Cordon),
            report(Outcome::Acted, Action::None),
            report(Outcome::Planned, Action::Delete),
        ];
        let m = w.messages(&reports, None);
        assert_eq!(m.len(), 1);
        assert!(m[0]["text"].as_str().unwrap().contains("planned: delete"));
    }
}
