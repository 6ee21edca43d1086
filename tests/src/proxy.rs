//! A fault-injecting HTTP/1.1 reverse proxy in front of the moto server.
//!
//! Every request is recorded as an [`AwsCall`] (service from the SigV4 credential scope,
//! operation from `X-Amz-Target` or the form body's `Action=`). Faults ([`AwsFault`]) are
//! consulted in the order they were injected; the first that matches a request and has uses
//! left answers it instead of moto: a throttling error the SDK classifies as throttling, a
//! connection closed without an answer, a hang, or a bare status.
//!
//! The proxy answers every request with `Connection: close`, so each request is its own TCP
//! connection (cheap on loopback, and a closed connection is never a stale pooled one).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request the proxy saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsCall {
    /// `dynamodb`, `ec2`, `sqs`, ... (from the SigV4 credential scope; `unknown` without one).
    pub service: String,
    /// `TransactWriteItems`, `DescribeInstances`, ... (`unknown` when neither header nor body
    /// names it).
    pub operation: String,
    /// The status answered; 0 when the connection was closed without an answer.
    pub status: u16,
    /// Whether an injected fault answered instead of moto.
    pub faulted: bool,
    /// The access key id and the region the request was signed with (from the SigV4
    /// credential scope; empty without one): whose credentials made it, and where.
    pub access_key: String,
    pub region: String,
}

/// What an injected fault does to a matching request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultKind {
    /// The service's own throttling error (DynamoDB: 400
    /// `ProvisionedThroughputExceededException`; EC2: 503 `RequestLimitExceeded`; Elastic Load
    /// Balancing: 400 `Throttling` in its XML error document; others: 400
    /// `ThrottlingException`).
    Throttle,
    /// The connection is closed without an answer.
    Unreachable,
    /// Nothing is answered for this long, then the connection is closed.
    Hang(Duration),
    /// This status with a small JSON body naming an internal error.
    Status(u16),
    /// This status with this XML body: an answer of an operation moto does not serve (Auto
    /// Scaling's `CompleteLifecycleAction`), the request recorded all the same.
    Answer(u16, String),
}

/// A fault for requests to `service` (and `operation` when given; and whose body contains
/// `naming`, when given), used `times` times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsFault {
    pub service: String,
    pub operation: Option<String>,
    /// Only requests whose body contains this text (as sent: a form body is URL-encoded), e.g.
    /// an account id in an `AssumeRole`'s `RoleArn`, or an instance id in a `DescribeInstances`.
    pub naming: Option<String>,
    pub kind: FaultKind,
    pub times: usize,
}

impl AwsFault {
    /// A fault on every operation of `service`.
    pub fn service(service: &str, kind: FaultKind, times: usize) -> AwsFault {
        AwsFault {
            service: service.to_string(),
            operation: None,
            naming: None,
            kind,
            times,
        }
    }

    /// A fault on one operation of `service`.
    pub fn operation(service: &str, operation: &str, kind: FaultKind, times: usize) -> AwsFault {
        AwsFault {
            service: service.to_string(),
            operation: Some(operation.to_string()),
            naming: None,
            kind,
            times,
        }
    }

    /// The fault only for requests whose body contains `text` (see [`AwsFault::naming`]).
    pub fn naming(mut self, text: &str) -> AwsFault {
        self.naming = Some(text.to_string());
        self
    }

    fn matches(&self, service: &str, operation: &str, body: &[u8]) -> bool {
        self.times > 0
            && self.service.eq_ignore_ascii_case(service)
            && self
                .operation
                .as_deref()
                .is_none_or(|op| op.eq_ignore_ascii_case(operation))
            && self
                .naming
                .as_deref()
                .is_none_or(|text| !text.is_empty() && find(body, text.as_bytes()).is_some())
    }
}

#[derive(Default)]
struct State {
    calls: Vec<AwsCall>,
    faults: Vec<AwsFault>,
}

/// The proxy; it serves until dropped.
pub struct AwsProxy {
    port: u16,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for AwsProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl AwsProxy {
    /// Listens on a free loopback port and forwards to `upstream` (`http://127.0.0.1:PORT`).
    pub async fn start(upstream: &str) -> anyhow::Result<AwsProxy> {
        let upstream = upstream_addr(upstream)?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = shared.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    if let Err(error) = serve(stream, &upstream, &state).await {
                        tracing::debug!(%error, "aws proxy connection");
                    }
                });
            }
        });
        Ok(AwsProxy { port, state, task })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `base` with its endpoint URL pointing at the proxy.
    pub fn sdk_config(&self, base: &aws_config::SdkConfig) -> aws_config::SdkConfig {
        base.to_builder().endpoint_url(self.endpoint()).build()
    }

    /// Every request seen since start (or the last [`reset`](Self::reset)), in order.
    pub fn calls(&self) -> Vec<AwsCall> {
        self.lock().calls.clone()
    }

    /// The number of requests seen, by service.
    pub fn counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for call in &self.lock().calls {
            *counts.entry(call.service.clone()).or_insert(0) += 1;
        }
        counts
    }

    /// Forgets the calls seen (faults stay).
    pub fn reset(&self) {
        self.lock().calls.clear();
    }

    /// Adds a fault after those already injected.
    pub fn inject(&self, fault: AwsFault) {
        self.lock().faults.push(fault);
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn upstream_addr(upstream: &str) -> anyhow::Result<String> {
    let rest = upstream
        .strip_prefix("http://")
        .with_context(|| format!("upstream {upstream} is not http://host:port"))?;
    let addr = rest.trim_end_matches('/');
    if addr.contains('/') || !addr.contains(':') {
        bail!("upstream {upstream} is not http://host:port");
    }
    Ok(addr.to_string())
}

/// A parsed HTTP/1.1 message: the start line, the headers, the (de-chunked) body.
struct Message {
    start: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Message {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The message with `Content-Length` for its body and `Connection: close`.
    fn encode(&self, host: Option<&str>) -> Vec<u8> {
        let mut out = format!("{}\r\n", self.start);
        for (name, value) in &self.headers {
            let skip = [
                "content-length",
                "transfer-encoding",
                "connection",
                "keep-alive",
            ]
            .iter()
            .any(|h| name.eq_ignore_ascii_case(h))
                || (host.is_some() && name.eq_ignore_ascii_case("host"));
            if !skip {
                out.push_str(&format!("{name}: {value}\r\n"));
            }
        }
        if let Some(host) = host {
            out.push_str(&format!("Host: {host}\r\n"));
        }
        out.push_str(&format!(
            "Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.body.len()
        ));
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

async fn serve(mut client: TcpStream, upstream: &str, state: &Mutex<State>) -> anyhow::Result<()> {
    let mut buffer = Vec::new();
    let Some(request) = read_message(&mut client, &mut buffer, true).await? else {
        return Ok(());
    };
    let authorization = request.header("authorization").unwrap_or_default();
    let service = service_of(authorization);
    let (access_key, region) = signer_of(authorization);
    let operation = operation_of(request.header("x-amz-target"), &request.body);
    let fault = {
        let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
        let found = state
            .faults
            .iter_mut()
            .find(|f| f.matches(&service, &operation, &request.body));
        found.map(|f| {
            f.times -= 1;
            f.kind.clone()
        })
    };
    let record = |status: u16, faulted: bool| {
        state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .calls
            .push(AwsCall {
                service: service.clone(),
                operation: operation.clone(),
                status,
                faulted,
                access_key: access_key.clone(),
                region: region.clone(),
            });
    };
    let response = match fault {
        Some(FaultKind::Unreachable) => {
            record(0, true);
            return Ok(());
        }
        Some(FaultKind::Hang(duration)) => {
            record(0, true);
            tokio::time::sleep(duration).await;
            return Ok(());
        }
        Some(FaultKind::Throttle) => {
            let (status, content_type, body) = throttle(&service);
            record(status, true);
            canned(status, content_type, body)
        }
        Some(FaultKind::Status(status)) => {
            record(status, true);
            let body =
                format!(r#"{{"__type":"InternalFailure","message":"injected status {status}"}}"#);
            canned(status, "application/x-amz-json-1.0", body)
        }
        Some(FaultKind::Answer(status, body)) => {
            record(status, true);
            canned(status, "text/xml", body)
        }
        None => {
            let answer = forward(&request, upstream).await;
            match answer {
                Ok(answer) => {
                    record(status_of(&answer.start), false);
                    answer.encode(None)
                }
                Err(error) => {
                    record(0, false);
                    return Err(error);
                }
            }
        }
    };
    client.write_all(&response).await?;
    client.flush().await?;
    let _ = client.shutdown().await;
    Ok(())
}

async fn forward(request: &Message, upstream: &str) -> anyhow::Result<Message> {
    let mut stream = TcpStream::connect(upstream).await?;
    stream.write_all(&request.encode(Some(upstream))).await?;
    stream.flush().await?;
    let mut buffer = Vec::new();
    read_message(&mut stream, &mut buffer, false)
        .await?
        .context("upstream closed without answering")
}

fn canned(status: u16, content_type: &str, body: String) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Fault",
    };
    let message = Message {
        start: format!("HTTP/1.1 {status} {reason}"),
        headers: vec![
            ("Content-Type".into(), content_type.into()),
            ("x-amzn-RequestId".into(), "forewarn-proxy-fault".into()),
        ],
        body: body.into_bytes(),
    };
    message.encode(None)
}

/// What the real service answers when it throttles: (status, content type, body).
pub fn throttle(service: &str) -> (u16, &'static str, String) {
    match service {
        "dynamodb" => (
            400,
            "application/x-amz-json-1.0",
            r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"The level of configured provisioned throughput for the table was exceeded (injected by the test proxy)"}"#.to_string(),
        ),
        "ec2" => (
            503,
            "text/xml;charset=UTF-8",
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded (injected by the test proxy).</Message></Error></Errors><RequestID>forewarn-proxy-fault</RequestID></Response>".to_string(),
        ),
        // The query protocol's error document, as Elastic Load Balancing sends it.
        "elasticloadbalancing" => (
            400,
            "text/xml",
            "<ErrorResponse xmlns=\"http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/\"><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded (injected by the test proxy)</Message></Error><RequestId>forewarn-proxy-fault</RequestId></ErrorResponse>".to_string(),
        ),
        _ => (
            400,
            "application/x-amz-json-1.0",
            r#"{"__type":"com.amazonaws.coral.availability#ThrottlingException","message":"Rate exceeded (injected by the test proxy)"}"#.to_string(),
        ),
    }
}

/// The service named in a SigV4 `Authorization` header's credential scope.
pub fn service_of(authorization: &str) -> String {
    authorization
        .split("Credential=")
        .nth(1)
        .and_then(|scope| scope.split([',', ' ']).next())
        .and_then(|scope| {
            let parts: Vec<&str> = scope.split('/').collect();
            // AKID/date/region/service/aws4_request
            (parts.len() >= 5).then(|| parts[parts.len() - 2].to_ascii_lowercase())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// The access key id and the region of a SigV4 `Authorization` header's credential scope
/// (`AKID/date/region/service/aws4_request`); empty strings without one.
pub fn signer_of(authorization: &str) -> (String, String) {
    let scope = authorization
        .split("Credential=")
        .nth(1)
        .and_then(|scope| scope.split([',', ' ']).next())
        .unwrap_or_default();
    let parts: Vec<&str> = scope.split('/').collect();
    match parts.as_slice() {
        [key, _date, region, _service, _request] => (key.to_string(), region.to_string()),
        _ => (String::new(), String::new()),
    }
}

/// The operation named by `X-Amz-Target` (`Prefix.Operation`) or the form body's `Action=`.
pub fn operation_of(target: Option<&str>, body: &[u8]) -> String {
    if let Some(target) = target.filter(|t| !t.is_empty()) {
        return target.rsplit('.').next().unwrap_or(target).to_string();
    }
    String::from_utf8_lossy(body)
        .split('&')
        .find_map(|pair| pair.strip_prefix("Action="))
        .map(str::to_string)
        .unwrap_or_else(|| "unknown".to_string())
}

fn status_of(start: &str) -> u16 {
    start
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Reads one message. `None` when the peer closed before sending anything. A request without
/// a length has no body; a response without one runs to the end of the stream.
async fn read_message<S: AsyncRead + Unpin>(
    stream: &mut S,
    buffer: &mut Vec<u8>,
    is_request: bool,
) -> anyhow::Result<Option<Message>> {
    let head_end = loop {
        if let Some(at) = find(buffer, b"\r\n\r\n") {
            break at;
        }
        if !fill(stream, buffer).await? {
            if buffer.is_empty() {
                return Ok(None);
            }
            bail!("connection closed inside the head");
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let start = lines.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    buffer.drain(..head_end + 4);
    let mut message = Message {
        start,
        headers,
        body: Vec::new(),
    };
    let chunked = message
        .header("transfer-encoding")
        .is_some_and(|t| t.to_ascii_lowercase().contains("chunked"));
    let length = message
        .header("content-length")
        .and_then(|l| l.parse::<usize>().ok());
    let status = status_of(&message.start);
    if chunked {
        loop {
            let line_end = loop {
                if let Some(at) = find(buffer, b"\r\n") {
                    break at;
                }
                if !fill(stream, buffer).await? {
                    bail!("connection closed inside a chunk size");
                }
            };
            let size_text = String::from_utf8_lossy(&buffer[..line_end]).to_string();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .with_context(|| format!("bad chunk size {size_text:?}"))?;
            buffer.drain(..line_end + 2);
            if size == 0 {
                // Trailers (ignored) up to the blank line.
                loop {
                    if let Some(at) = find(buffer, b"\r\n") {
                        let blank = at == 0;
                        buffer.drain(..at + 2);
                        if blank {
                            break;
                        }
                    } else if !fill(stream, buffer).await? {
                        break;
                    }
                }
                break;
            }
            while buffer.len() < size + 2 {
                if !fill(stream, buffer).await? {
                    bail!("connection closed inside a chunk");
                }
            }
            message.body.extend_from_slice(&buffer[..size]);
            buffer.drain(..size + 2);
        }
    } else if let Some(length) = length {
        while buffer.len() < length {
            if !fill(stream, buffer).await? {
                bail!("connection closed inside the body");
            }
        }
        message.body = buffer.drain(..length).collect();
    } else if !is_request && status != 204 && status != 304 && !(100..200).contains(&status) {
        while fill(stream, buffer).await? {}
        message.body = std::mem::take(buffer);
    }
    Ok(Some(message))
}

async fn fill<S: AsyncRead + Unpin>(stream: &mut S, buffer: &mut Vec<u8>) -> anyhow::Result<bool> {
    let mut chunk = [0u8; 16 * 1024];
    let n = stream.read(&mut chunk).await?;
    buffer.extend_from_slice(&chunk[..n]);
    Ok(n > 0)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_comes_from_the_credential_scope() {
        let auth = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261121/us-east-1/dynamodb/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc";
        assert_eq!(service_of(auth), "dynamodb");
        let auth = "AWS4-HMAC-SHA256 Credential=testing/20261121/us-east-1/ec2/aws4_request,SignedHeaders=host,Signature=x";
        assert_eq!(service_of(auth), "ec2");
        assert_eq!(service_of(""), "unknown");
        assert_eq!(service_of("Bearer token"), "unknown");
    }

    #[test]
    fn signer_comes_from_the_credential_scope() {
        let auth = "AWS4-HMAC-SHA256 Credential=ASIAEXAMPLE/20261121/eu-west-1/autoscaling/aws4_request, SignedHeaders=host, Signature=abc";
        assert_eq!(
            signer_of(auth),
            ("ASIAEXAMPLE".to_string(), "eu-west-1".to_string())
        );
        assert_eq!(signer_of(""), (String::new(), String::new()));
        assert_eq!(
            signer_of("Credential=a/b/c"),
            (String::new(), String::new())
        );
    }

    #[test]
    fn operation_comes_from_the_target_or_the_action() {
        assert_eq!(
            operation_of(Some("DynamoDB_20120810.TransactWriteItems"), b"{}"),
            "TransactWriteItems"
        );
        assert_eq!(
            operation_of(Some("AmazonSQS.ReceiveMessage"), b""),
            "ReceiveMessage"
        );
        assert_eq!(
            operation_of(None, b"Action=DescribeInstances&Version=2016-11-15"),
            "DescribeInstances"
        );
        assert_eq!(
            operation_of(None, b"Version=2016-11-15&Action=DescribeInstances"),
            "DescribeInstances"
        );
        assert_eq!(operation_of(None, b"{}"), "unknown");
    }

    #[test]
    fn a_fault_matches_its_service_and_operation_only_while_it_has_uses() {
        let mut fault = AwsFault::operation("dynamodb", "GetItem", FaultKind::Throttle, 1);
        assert!(fault.matches("dynamodb", "GetItem", b""));
        assert!(!fault.matches("dynamodb", "PutItem", b""));
        assert!(!fault.matches("ec2", "GetItem", b""));
        fault.times = 0;
        assert!(!fault.matches("dynamodb", "GetItem", b""));
        let any = AwsFault::service("ec2", FaultKind::Unreachable, 2);
        assert!(any.matches("ec2", "DescribeInstances", b""));
        // Only the requests naming it.
        let one = AwsFault::operation("sts", "AssumeRole", FaultKind::Status(403), 1)
            .naming("222222222222");
        let body = |account: &str| {
            format!("Action=AssumeRole&RoleArn=arn%3Aaws%3Aiam%3A%3A{account}%3Arole%2Fr")
        };
        assert!(one.matches("sts", "AssumeRole", body("222222222222").as_bytes()));
        assert!(!one.matches("sts", "AssumeRole", body("111111111111").as_bytes()));
    }

    #[tokio::test]
    async fn chunked_and_sized_messages_are_read_whole() {
        let raw = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
        let mut reader = &raw[..];
        let mut buffer = Vec::new();
        let message = read_message(&mut reader, &mut buffer, true)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(message.body, b"hello world");
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc";
        let mut reader = &raw[..];
        let mut buffer = Vec::new();
        let message = read_message(&mut reader, &mut buffer, false)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(message.body, b"abc");
        assert_eq!(status_of(&message.start), 200);
        let encoded = String::from_utf8(message.encode(None)).unwrap();
        assert!(encoded.contains("Content-Length: 3\r\n"));
        assert!(encoded.contains("Connection: close\r\n"));
    }
}
