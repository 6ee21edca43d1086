//! The optional webhook: one JSON message per node action, from a template, posted to a URL
//! (a Slack incoming webhook by default; any service that takes a JSON body).
//!
//! - The URL (the settings' webhook URL): where to post (`https://`); unset, nothing is sent. The
//!   URL is a secret (a Slack incoming webhook's path is its only credential): it is never logged,
//!   nor put in an error or a `Debug` form; only its host is ([`WebhookConfig::host`],
//!   [`redacted`]). An `http://` URL is taken for a loopback host only ([`check_url`]):
//!   elsewhere the secret URL and every message would cross the network in clear text.
//! - The template: the JSON body, with `{{field}}` placeholders inside its
//!   strings (default [`DEFAULT_TEMPLATE`], Slack's `{"text": ...}`). A value is put in
//!   JSON-escaped, so the body stays valid JSON whatever an event holds. The fields are
//!   [`Field`]; an unknown one, or a template that is not JSON, is a configuration error at
//!   cold start, never a surprise at 3 a.m.
//!
//! A message goes out for each action other than `none` of an event acted on, planned (a dry
//! run) or failed; duplicates and ignored events send nothing. Delivery is best effort: a
//! webhook that fails or is slow is logged and counted, and never fails or delays the event
//! past the batch's deadline (the event is applied; sending it again would not help).

use std::fmt;
use std::time::Duration;

use futures::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use strum::{Display, EnumString, IntoStaticStr, VariantArray};

use crate::domain::config::Action;
use crate::domain::report::{ActionReport, Outcome, Report};
use crate::ports::Notifier;

/// Slack's incoming-webhook body: one line of text per action.
pub const DEFAULT_TEMPLATE: &str = r#"{"text": "forewarn {{outcome}}: {{action}} node {{node}} ({{instance_id}}, {{pool}}) on {{summary}} event {{event_id}}. {{result}}"}"#;

/// The placeholders a template may use (`{{event_id}}`, ...), each with what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, IntoStaticStr, Display, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum Field {
    /// The EventBridge event id.
    EventId,
    /// The event kind (`spot-interruption`, ...).
    Kind,
    /// The event for people (`spot-interruption (terminate)`).
    Summary,
    /// `acted`, `planned` (a dry run) or `failed` (the event comes back).
    Outcome,
    /// The event's time (RFC 3339).
    Time,
    /// The instance.
    InstanceId,
    /// The node's name (empty when none).
    Node,
    /// `cordon`, `cordon-drain` or `delete`.
    Action,
    /// What a delete removes (`nodeclaim/x`), else empty.
    Target,
    /// When the drain must be over (RFC 3339), else empty.
    Deadline,
    /// What was done (`cordoned node/x; evicted 3 pods`), or why it failed.
    Result,
    /// Why this action.
    Reason,
    /// The pool marked (`spot/m5.large/us-east-1a`), else empty.
    Pool,
    /// The pool's capacity type.
    CapacityType,
    /// The pool's instance type.
    InstanceType,
    /// The pool's availability zone.
    Zone,
    /// The cluster the action was in, whole: `account/region/name` (one of the served
    /// clusters), else the lone cluster's name.
    Cluster,
}

/// A checked webhook configuration. Its `Debug` form shows the URL's host only.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// A secret: log [`WebhookConfig::host`] instead.
    pub url: String,
    pub template: Template,
}

impl fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("url", &redacted(&self.url))
            .field("template", &self.template)
            .finish()
    }
}

/// The host of `url` (no user, port, path or query): what may be logged of a webhook URL.
/// Empty when there is none (or `url` is no URL).
pub fn host_of(url: &str) -> String {
    match url::Url::parse(url).ok().as_ref().and_then(url::Url::host) {
        Some(url::Host::Domain(d)) => d.to_string(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        None => String::new(),
    }
}

/// What may be shown of a webhook URL: `https://hooks.slack.com/…` (its scheme and host).
pub fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => format!("{}://{}/…", u.scheme(), host_of(url)),
        Err(_) => "(not shown: a webhook URL is a secret)".to_string(),
    }
}

/// `text` as the webhook's URL: `https://` and a host, or `http://` to a loopback host (a
/// message to it never crosses the network). An error says what is wrong, and shows the host
/// at most.
pub fn check_url(text: &str) -> Result<String, String> {
    let has_authority = text
        .split_once("://")
        .is_some_and(|(_, rest)| !rest.starts_with('/'));
    let url = url::Url::parse(text)
        .ok()
        .filter(|_| has_authority && !text.chars().any(char::is_whitespace));
    let Some(url) = url else {
        return Err("not a valid URL with a host".into());
    };
    let host = host_of(text);
    if host.is_empty() {
        return Err("the URL has no host".into());
    }
    let ip = host.parse::<std::net::IpAddr>();
    let loopback = host.eq_ignore_ascii_case("localhost") || ip.is_ok_and(|ip| ip.is_loopback());
    match url.scheme() {
        "https" => Ok(text.to_string()),
        "http" if loopback => Ok(text.to_string()),
        "http" => Err(format!(
            "an http:// URL to {host} sends the URL (a secret) and every message in clear text: \
             use https:// (http:// is taken for a loopback host only)"
        )),
        scheme => Err(format!("not an https:// URL ({scheme}:// to {host})")),
    }
}

impl WebhookConfig {
    /// The URL's host: what logs and errors say of the webhook.
    pub fn host(&self) -> String {
        host_of(&self.url)
    }

    /// `error` with the URL, and its path and query, cut out (an answer may echo the request).
    fn scrub(&self, error: impl fmt::Display) -> String {
        let mut out = error.to_string().replace(&self.url, &redacted(&self.url));
        let rest = self.url.split_once("://").map_or("", |(_, r)| r);
        if let Some(i) = rest.find(['/', '?', '#']) {
            let path = &rest[i..];
            if path.len() > 1 {
                out = out.replace(path, "/…");
            }
        }
        out
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
                    .map(move |a| {
                        let cluster = r.cluster.as_deref().or(cluster);
                        self.template.render(&values(r, a, cluster))
                    })
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
    Field(Field),
}

/// What is wrong with a webhook template.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("the placeholder at byte {at} has no closing `}}}}`")]
    Unclosed { at: usize },
    #[error("unknown placeholder `{{{{{name}}}}}` (known: {})", known_fields())]
    UnknownField { name: String },
    #[error(
        "the template is not a JSON object once filled in (placeholders go inside JSON strings, \
         e.g. {{\"text\": \"{{{{node}}}} {{{{action}}}}\"}})"
    )]
    NotAnObject,
}

/// The placeholders a template may use, for messages.
fn known_fields() -> String {
    let names: Vec<&str> = Field::VARIANTS.iter().map(|f| f.into()).collect();
    names.join(", ")
}

impl Template {
    /// Checks every placeholder and that the template, filled in, is a JSON object.
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find("{{") {
            parts.push(Part::Text(rest[..start].to_string()));
            let after = &rest[start + 2..];
            let end = after.find("}}").ok_or(TemplateError::Unclosed {
                at: text.len() - rest.len() + start,
            })?;
            let name = after[..end].trim();
            let field = name.parse().map_err(|_| TemplateError::UnknownField {
                name: name.to_string(),
            })?;
            parts.push(Part::Field(field));
            rest = &after[end + 2..];
        }
        parts.push(Part::Text(rest.to_string()));
        let template = Template { parts };
        // Filled with values that need escaping, it must still be a JSON object.
        let probe = template.render(&|_| "\"quoted\" \\ back\nslash".to_string());
        if !probe.is_object() {
            return Err(TemplateError::NotAnObject);
        }
        Ok(template)
    }

    /// The body for the given field values (`Value::Null` if the template is not JSON, which
    /// [`Template::parse`] rules out).
    pub fn render(&self, value_of: &dyn Fn(Field) -> String) -> Value {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Field(f) => {
                    let quoted = Value::String(value_of(*f)).to_string();
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
) -> impl Fn(Field) -> String + 'a {
    move |field| {
        let pool = r.pools.first().map(|p| &p.pool);
        let text = |v: Option<&str>| v.unwrap_or_default().to_string();
        match field {
            Field::EventId => text(r.event_id.as_deref()),
            Field::Kind => text(r.kind.map(|k| k.as_str())),
            Field::Summary => text(r.summary.as_deref()),
            Field::Outcome => r.outcome.as_str().to_string(),
            Field::Time => r.time.map(|t| t.to_rfc3339()).unwrap_or_default(),
            Field::InstanceId => a.instance_id.clone(),
            Field::Node => text(a.node.as_deref()),
            Field::Action => a.action.as_str().to_string(),
            Field::Target => text(a.target.as_deref()),
            Field::Deadline => a.deadline.map(|t| t.to_rfc3339()).unwrap_or_default(),
            Field::Result => match r.outcome {
                Outcome::Failed => format!("failed: {}", text(r.reason.as_deref())),
                _ => text(a.result.as_deref()),
            },
            Field::Reason => a.reason.clone(),
            Field::Pool => pool
                .map(|p| format!("{}/{}/{}", p.capacity_type, p.instance_type, p.zone))
                .unwrap_or_default(),
            Field::CapacityType => text(pool.map(|p| p.capacity_type.as_str())),
            Field::InstanceType => text(pool.map(|p| p.instance_type.as_str())),
            Field::Zone => text(pool.map(|p| p.zone.as_str())),
            Field::Cluster => text(cluster),
        }
    }
}

/// Longest wait for one message.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Messages in flight at once.
const PARALLEL: usize = 8;

/// The webhook's HTTP client (HTTPS through rustls and the system's roots); cheap to clone.
type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The webhook's HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading the system's root certificates: {0}")]
    RootCertificates(#[source] std::io::Error),
}

/// The webhook as a [`Notifier`]: its configuration, the cluster its messages name, and its
/// HTTP client.
pub struct Webhook {
    config: WebhookConfig,
    cluster: Option<String>,
    client: HttpClient,
}

impl Webhook {
    /// The webhook, with its HTTP client (HTTPS through rustls and the system's roots) built
    /// now (at cold start, not in the first invocation), or why the client could not be built
    /// (no root certificates), so that setup fails loudly.
    pub fn new(config: WebhookConfig, cluster: Option<String>) -> Result<Webhook, ClientError> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(ClientError::RootCertificates)?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Webhook {
            config,
            cluster,
            client: Client::builder(TokioExecutor::new()).build(https),
        })
    }
}

#[async_trait::async_trait]
impl Notifier for Webhook {
    /// Posts the messages of `reports`, each within 5 s and within `time_left` (the batch's);
    /// failures are logged and counted.
    async fn notify(&self, reports: &[Report], time_left: Option<Duration>) {
        let config = &self.config;
        let messages = config.messages(reports, self.cluster.as_deref());
        if messages.is_empty() {
            return;
        }
        let results: Vec<bool> = futures::stream::iter(messages)
            .map(|body| async move {
                let limit = time_left.map_or(TIMEOUT, |left| TIMEOUT.min(left));
                match tokio::time::timeout(limit, post(&self.client, &config.url, body)).await {
                    Ok(Ok(())) => true,
                    Ok(Err(e)) => {
                        // Never the URL: it is a secret.
                        tracing::warn!(host = %config.host(), error = %config.scrub(&e),
                            "webhook failed");
                        false
                    }
                    Err(_) => {
                        tracing::warn!(host = %config.host(),
                            timeout_ms = limit.as_millis() as u64, "webhook timed out");
                        false
                    }
                }
            })
            .buffer_unordered(PARALLEL)
            .collect()
            .await;
        let sent = results.iter().filter(|ok| **ok).count();
        let failed = results.len() - sent;
        tracing::info!(sent, failed, "webhook messages");
    }
}

/// A message the webhook did not take. (Its text may hold the URL: log it scrubbed.)
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    #[error("bad request: {0}")]
    Request(#[source] hyper::http::Error),
    /// No answer: the connection failed (with its cause, which hyper's own text leaves out).
    #[error("{source}{}", cause(.source))]
    Send {
        #[source]
        source: hyper_util::client::legacy::Error,
    },
    /// An answer other than 2xx, with the start of its body.
    #[error("answered {status}: {answer}")]
    Status {
        status: hyper::StatusCode,
        answer: String,
    },
}

/// `: <the cause>` of `e`, when it has one.
fn cause(e: &hyper_util::client::legacy::Error) -> String {
    std::error::Error::source(e)
        .map(|c| format!(": {c}"))
        .unwrap_or_default()
}

async fn post(client: &HttpClient, url: &str, body: serde_json::Value) -> Result<(), PostError> {
    let request = hyper::Request::post(url)
        .header("content-type", "application/json")
        .header(
            "user-agent",
            concat!("forewarn/", env!("CARGO_PKG_VERSION")),
        )
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(PostError::Request)?;
    let response = client
        .request(request)
        .await
        .map_err(|source| PostError::Send { source })?;
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
        Err(PostError::Status {
            status,
            answer: String::from_utf8_lossy(&answer[..answer.len().min(200)]).into_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::report::PoolReport;

    /// The webhook of `url` and `template`, as the settings make it.
    fn config(url: &str, template: Option<&str>) -> Result<WebhookConfig, String> {
        let template = template.unwrap_or(DEFAULT_TEMPLATE);
        Ok(WebhookConfig {
            url: check_url(url)?,
            template: Template::parse(template).map_err(|e| e.to_string())?,
        })
    }

    fn report(outcome: Outcome, action: Action) -> Report {
        Report {
            event_id: Some("e-1".into()),
            kind: Some(crate::domain::event::EventKind::SpotInterruption),
            cluster: None,
            summary: Some("spot-interruption (terminate)".into()),
            origin: "sqs".into(),
            message_id: Some("m".into()),
            time: crate::domain::event::parse_time("2026-11-20T10:00:00Z"),
            instance_ids: vec!["i-1".into()],
            outcome,
            pools: vec![PoolReport {
                pool: "spot#m5.large#us-east-1a".parse().unwrap(),
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
            permanent: false,
            traffic: None,
            retry_not_before: None,
            account_unreachable: None,
        }
    }

    #[test]
    fn bad_urls_and_templates_say_what_is_wrong() {
        for url in ["ftp://x", "hooks.slack.com/x", "https://", "https:///path"] {
            assert!(config(url, None).is_err(), "{url}");
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
            let e = config("https://h/x", Some(template)).unwrap_err();
            assert!(e.contains(message), "{template}: {e}");
        }
    }

    #[test]
    fn the_default_template_is_slack_text_with_escaped_values() {
        let w = config("https://hooks.example/x", None).unwrap();
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
        let all: Vec<String> = Field::VARIANTS
            .iter()
            .map(|f| format!("\"{f}\": \"{{{{{f}}}}}\""))
            .collect();
        let template = format!("{{{}}}", all.join(", "));
        let w = config("https://127.0.0.1:9/hook", Some(&template)).unwrap();
        let m = w.messages(&[report(Outcome::Failed, Action::Cordon)], Some("demo"));
        assert_eq!(m[0]["cluster"], "demo");
        assert_eq!(m[0]["outcome"], "failed");
        assert_eq!(m[0]["result"], "failed: API answered 500");
        assert_eq!(m[0]["time"], "2026-11-20T10:00:00+00:00");
        assert_eq!(m[0]["zone"], "us-east-1a");
        // A report handled in one of several clusters names its own.
        let mut green = report(Outcome::Acted, Action::Cordon);
        green.cluster = Some("green".into());
        let m = w.messages(&[green], Some("demo"));
        assert_eq!(m[0]["cluster"], "green");
    }

    #[test]
    fn only_actions_worth_telling() {
        let w = config("https://h/x", None).unwrap();
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

    const SECRET_URL: &str = "https://hooks.example.com/services/T000/B000/XXXXsecret?token=abc";

    fn shows_no_secret(shown: &str) {
        for secret in ["services", "T000", "XXXXsecret", "token", "abc"] {
            assert!(!shown.contains(secret), "`{secret}` in {shown}");
        }
    }

    #[test]
    fn http_only_to_a_loopback_host() {
        let url = "http://hooks.example.com/services/T000/B000/XXXXsecret?token=abc";
        let e = config(url, None).unwrap_err();
        assert!(
            e.contains("http:// is taken for a loopback host only"),
            "{e}"
        );
        assert!(e.contains("hooks.example.com"), "{e}");
        shows_no_secret(&e);
        assert!(config(SECRET_URL, None).is_ok());
        for local in [
            "http://127.0.0.1:9/x",
            "http://localhost/x",
            "http://[::1]:8080/x",
        ] {
            assert!(config(local, None).is_ok(), "{local}");
        }
        assert!(config("http://10.0.0.1/x", None).is_err());
    }

    #[test]
    fn the_url_is_never_shown_only_its_host() {
        assert_eq!(host_of(SECRET_URL), "hooks.example.com");
        assert_eq!(host_of("https://user:pw@h.example:8443/x"), "h.example");
        assert_eq!(host_of("http://[::1]:8080/x?y"), "::1");
        assert_eq!(redacted(SECRET_URL), "https://hooks.example.com/…");
        // Errors, whatever is wrong with the URL, show its host at most.
        for url in [
            "ftp://hooks.example.com/services/T000/B000/XXXXsecret?token=abc",
            "https://hooks.example.com/services/T000/B000/XXXX secret?token=abc",
            "hooks.example.com/services/T000/B000/XXXXsecret?token=abc",
            "https://user:XXXXsecret@/services?token=abc",
        ] {
            let e = config(url, None).unwrap_err();
            shows_no_secret(&e);
            shows_no_secret(&redacted(url));
        }
        let w = config(SECRET_URL, None).unwrap();
        assert_eq!(w.host(), "hooks.example.com");
        let debug = format!("{w:?}");
        assert!(debug.contains("hooks.example.com"), "{debug}");
        shows_no_secret(&debug);
        // An answer that echoes the request is cut.
        assert_eq!(
            w.scrub("answered 404: no route for POST /services/T000/B000/XXXXsecret?token=abc"),
            "answered 404: no route for POST /…"
        );
        assert_eq!(
            w.scrub(format!("posting to {SECRET_URL} failed")),
            "posting to https://hooks.example.com/… failed"
        );
    }

    /// A writer that keeps what the log wrote.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A server on a loopback port that answers one request 404, echoing the request line.
    fn echoing_404() -> u16 {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            // The head, then the body its content-length announces.
            while let Ok(n) = stream.read(&mut buf) {
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request).to_string();
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().to_string())
                        })
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0);
                    if request.len() >= end + 4 + length {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            let text = String::from_utf8_lossy(&request).to_string();
            let body = format!("Cannot {}", text.lines().next().unwrap_or_default());
            let answer = format!(
                "HTTP/1.1 404 Not Found\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        });
        port
    }

    #[tokio::test]
    async fn a_failure_is_logged_with_the_host_and_without_the_path_or_query() {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer({
                let c = captured.clone();
                move || c.clone()
            })
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let urls = [
            // Answered 404 with the request line (the path and query) in the body.
            format!(
                "http://127.0.0.1:{}/services/T000/B000/XXXXsecret?token=abc",
                echoing_404()
            ),
            // Refused.
            format!("http://127.0.0.1:{closed}/services/T000/B000/XXXXsecret?token=abc"),
        ];
        for url in urls {
            let webhook = Webhook::new(config(&url, None).unwrap(), None).unwrap();
            webhook
                .notify(&[report(Outcome::Acted, Action::Cordon)], None)
                .await;
        }
        let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let counted = log.lines().filter(|l| l.contains("webhook messages"));
        let counted: Vec<&str> = counted.filter(|l| l.contains("sent=0 failed=1")).collect();
        assert_eq!(counted.len(), 2, "one message, failed, per webhook: {log}");
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("webhook failed"))
            .collect();
        assert_eq!(lines.len(), 2, "{log}");
        assert!(lines[0].contains("answered 404"), "{log}");
        for line in lines {
            assert!(line.contains("host=127.0.0.1"), "{line}");
            shows_no_secret(line);
        }
    }
}
