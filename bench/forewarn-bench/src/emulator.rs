//! A local Lambda Runtime API (the part a custom runtime talks to): `GET .../invocation/next`
//! hands out one queued invocation with the headers Lambda sends, `POST .../{id}/response` and
//! `.../{id}/error` answer it, `POST .../init/error` reports a failed start. HTTP/1.1 on
//! 127.0.0.1; the moment of the first `/next` is recorded (the function is ready).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

pub const PREFIX: &str = "/2018-06-01/runtime";

/// How the function's start went, as the emulator saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    Starting,
    /// The first `GET /next` arrived at this moment.
    Ready(Instant),
    /// `POST /init/error`, with its body.
    Failed(String),
}

/// The function's answer to one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Response(Vec<u8>),
    Error(Vec<u8>),
}

struct Invocation {
    id: String,
    payload: Vec<u8>,
    deadline_ms: u64,
}

struct Shared {
    function_arn: String,
    queue: tokio::sync::Mutex<mpsc::UnboundedReceiver<Invocation>>,
    pending: Mutex<HashMap<String, oneshot::Sender<(Answer, Instant)>>>,
    start: watch::Sender<Start>,
}

/// A running emulator; the server stops on drop.
pub struct Emulator {
    addr: SocketAddr,
    shared: Arc<Shared>,
    queue: mpsc::UnboundedSender<Invocation>,
    next_id: AtomicU64,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Emulator {
    /// Serves on a free loopback port for the function `name`.
    pub async fn start(name: &str) -> anyhow::Result<Emulator> {
        let (queue, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            function_arn: format!("arn:aws:lambda:us-east-1:123456789012:function:{name}"),
            queue: tokio::sync::Mutex::new(rx),
            pending: Mutex::new(HashMap::new()),
            start: watch::Sender::new(Start::Starting),
        });
        let app = Router::new()
            .route(&format!("{PREFIX}/invocation/next"), get(next))
            .route(
                &format!("{PREFIX}/invocation/{{id}}/response"),
                post(response),
            )
            .route(&format!("{PREFIX}/invocation/{{id}}/error"), post(error))
            .route(&format!("{PREFIX}/init/error"), post(init_error))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .context("binding the runtime API emulator")?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Emulator {
            addr,
            shared,
            queue,
            next_id: AtomicU64::new(1),
            server,
        })
    }

    /// `AWS_LAMBDA_RUNTIME_API`: `127.0.0.1:PORT`.
    pub fn runtime_api(&self) -> String {
        self.addr.to_string()
    }

    /// Waits until the function asks for its first invocation (or says its start failed).
    pub async fn started(&self) -> Start {
        let mut rx = self.shared.start.subscribe();
        match rx.wait_for(|s| *s != Start::Starting).await {
            Ok(s) => s.clone(),
            Err(_) => Start::Failed("the emulator stopped".into()),
        }
    }

    /// Queues one invocation and waits for its answer; returns the answer and when it
    /// arrived. The deadline Lambda would send is `timeout` from now (epoch milliseconds).
    pub async fn invoke(
        &self,
        payload: &[u8],
        timeout: Duration,
    ) -> anyhow::Result<(Answer, Instant)> {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let id = format!("00000000-0000-4000-8000-{n:012x}");
        let (tx, rx) = oneshot::channel();
        lock(&self.shared.pending).insert(id.clone(), tx);
        let deadline_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0)
            + u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX / 2);
        self.queue
            .send(Invocation {
                id: id.clone(),
                payload: payload.to_vec(),
                deadline_ms,
            })
            .map_err(|_| anyhow!("the emulator stopped"))?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => bail!("invocation {id}: the emulator stopped"),
            Err(_) => {
                lock(&self.shared.pending).remove(&id);
                bail!("invocation {id}: no answer within {timeout:?}")
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn next(State(shared): State<Arc<Shared>>) -> Response {
    let now = Instant::now();
    shared.start.send_if_modified(|s| {
        if *s == Start::Starting {
            *s = Start::Ready(now);
            true
        } else {
            false
        }
    });
    // One runtime, one /next at a time: the lock is held while waiting, as Lambda does.
    let invocation = shared.queue.lock().await.recv().await;
    let Some(inv) = invocation else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "emulator stopped").into_response();
    };
    let mut headers = HeaderMap::new();
    let mut put = |name: &'static str, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(name, v);
        }
    };
    put("lambda-runtime-aws-request-id", inv.id.clone());
    put("lambda-runtime-deadline-ms", inv.deadline_ms.to_string());
    put(
        "lambda-runtime-invoked-function-arn",
        shared.function_arn.clone(),
    );
    put(
        "lambda-runtime-trace-id",
        format!(
            "Root=1-{:08x}-{:024x};Parent={:016x};Sampled=0",
            chrono::Utc::now().timestamp(),
            1u128,
            1u64
        ),
    );
    put("content-type", "application/json".into());
    (StatusCode::OK, headers, inv.payload).into_response()
}

fn answer(shared: &Shared, id: &str, answer: Answer) -> Response {
    let now = Instant::now();
    match lock(&shared.pending).remove(id) {
        Some(tx) => {
            let _ = tx.send((answer, now));
            (StatusCode::ACCEPTED, r#"{"status":"OK"}"#).into_response()
        }
        None => (
            StatusCode::BAD_REQUEST,
            r#"{"errorType":"InvalidRequestID","errorMessage":"unknown request id"}"#,
        )
            .into_response(),
    }
}

async fn response(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    answer(&shared, &id, Answer::Response(body.to_vec()))
}

async fn error(State(shared): State<Arc<Shared>>, Path(id): Path<String>, body: Bytes) -> Response {
    answer(&shared, &id, Answer::Error(body.to_vec()))
}

async fn init_error(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let text = String::from_utf8_lossy(&body).into_owned();
    shared.start.send_replace(Start::Failed(text));
    (StatusCode::ACCEPTED, r#"{"status":"OK"}"#).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One HTTP/1.1 exchange on a fresh connection: (status, headers in lower case, body).
    async fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String, String) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, head.to_ascii_lowercase(), body.to_string())
    }

    fn header<'a>(head: &'a str, name: &str) -> &'a str {
        head.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no {name} in {head}"))
    }

    #[tokio::test]
    async fn an_invocation_goes_out_on_next_and_comes_back_on_response() {
        let emu = Emulator::start("f").await.unwrap();
        let api = emu.runtime_api();
        let runtime = tokio::spawn({
            let api = api.clone();
            async move {
                let (status, head, body) =
                    http(&api, "GET", &format!("{PREFIX}/invocation/next"), "").await;
                assert_eq!(status, 200);
                assert_eq!(body, r#"{"x":1}"#);
                let id = header(&head, "lambda-runtime-aws-request-id").to_string();
                let deadline: u64 = header(&head, "lambda-runtime-deadline-ms").parse().unwrap();
                assert!(
                    deadline > 1_000_000_000_000,
                    "an epoch deadline: {deadline}"
                );
                assert_eq!(
                    header(&head, "lambda-runtime-invoked-function-arn"),
                    "arn:aws:lambda:us-east-1:123456789012:function:f"
                );
                assert!(header(&head, "lambda-runtime-trace-id").starts_with("root=1-"));
                let (status, _, _) = http(
                    &api,
                    "POST",
                    &format!("{PREFIX}/invocation/{id}/response"),
                    "{}",
                )
                .await;
                assert_eq!(status, 202);
                // A second answer to the same invocation is refused.
                let (again, _, _) = http(
                    &api,
                    "POST",
                    &format!("{PREFIX}/invocation/{id}/response"),
                    "{}",
                )
                .await;
                assert_eq!(again, 400);
            }
        });
        assert!(matches!(emu.started().await, Start::Ready(_)));
        let (answer, _) = emu
            .invoke(br#"{"x":1}"#, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(answer, Answer::Response(b"{}".to_vec()));
        runtime.await.unwrap();
    }

    #[tokio::test]
    async fn errors_of_an_invocation_and_of_the_start() {
        let emu = Emulator::start("f").await.unwrap();
        let api = emu.runtime_api();
        let runtime = tokio::spawn({
            let api = api.clone();
            async move {
                let (_, head, _) =
                    http(&api, "GET", &format!("{PREFIX}/invocation/next"), "").await;
                let id = header(&head, "lambda-runtime-aws-request-id").to_string();
                http(
                    &api,
                    "POST",
                    &format!("{PREFIX}/invocation/{id}/error"),
                    "boom",
                )
                .await;
            }
        });
        let (answer, _) = emu.invoke(b"{}", Duration::from_secs(30)).await.unwrap();
        assert_eq!(answer, Answer::Error(b"boom".to_vec()));
        runtime.await.unwrap();

        let failing = Emulator::start("g").await.unwrap();
        let (status, _, _) = http(
            &failing.runtime_api(),
            "POST",
            &format!("{PREFIX}/init/error"),
            "no config",
        )
        .await;
        assert_eq!(status, 202);
        assert_eq!(failing.started().await, Start::Failed("no config".into()));
    }
}
