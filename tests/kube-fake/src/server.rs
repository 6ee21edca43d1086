//! The HTTP side: routing, content types, fault injection and the request log.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use serde_json::Value;
use tokio::sync::watch;

use crate::admission::{self, Review, UserInfo};
use crate::apply;
use crate::chain;
use crate::discovery;
use crate::flow_control::{self, Admission, FlowControl, RequestInfo};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::sim::Sim;
use crate::status::{self, ApiError};
use crate::store::{DeleteOptions, DeleteOutcome, ObjectRef, PatchKind, Store, Target};
use crate::{Counters, Fault, RecordedRequest};

/// Largest request body the fake reads.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// The media type of a server-side apply.
const APPLY: &str = "application/apply-patch+yaml";

const PATCH_TYPES_BUILTIN: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];
const PATCH_TYPES_CUSTOM: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
];
const BODY_TYPES_BUILTIN: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
];
const BODY_TYPES_CUSTOM: &[&str] = &["application/json", "application/yaml"];

/// A token bucket: `rate` tokens a second, at most `burst` banked.
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: DateTime<Utc>,
}

impl TokenBucket {
    pub fn new(rate: f64, burst: u32, now: DateTime<Utc>) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            rate: rate.max(0.0),
            burst,
            tokens: burst,
            last: now,
        }
    }

    fn try_take(&mut self, now: DateTime<Utc>) -> bool {
        let elapsed = (now - self.last).to_std().unwrap_or_default().as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Test-controlled behaviour and observations.
#[derive(Debug, Default)]
pub(crate) struct Control {
    pub log: Vec<RecordedRequest>,
    pub faults: Vec<Fault>,
    pub hangs: Vec<(String, usize)>,
    pub latency: Duration,
    /// Objects stored once a request of this method to exactly this path is answered.
    pub after_answer: Vec<(Method, String, Value)>,
    pub rate_limit: Option<TokenBucket>,
    /// API Priority and Fairness, when a capacity is set.
    pub flow: FlowControl,
    pub counters: Counters,
}

pub(crate) struct FakeState {
    pub store: Store,
    pub control: Control,
    /// The cluster simulation, when the builder turned it on.
    pub sim: Option<Sim>,
}

/// What the server task and the [`crate::KubeFake`] handle share.
pub(crate) struct Shared {
    pub state: Mutex<FakeState>,
    pub shutdown: watch::Receiver<bool>,
    pub server_address: String,
    /// The (major, minor) `/version` answers.
    pub version: (u32, u32),
    /// Whether ValidatingAdmissionPolicies are enforced.
    pub admission: bool,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, FakeState> {
        // A panic while holding the lock cannot leave the store half-written in a way
        // that matters to a test double; keep serving.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let FakeState { store, sim, .. } = &mut *state;
        match sim {
            Some(sim) => sim.advance(store),
            None => store.reap(),
        }
        state
    }
}

/// An answer ready to be rendered.
struct Answer {
    code: u16,
    body: Value,
    retry_after: Option<u32>,
}

impl Answer {
    fn ok(code: u16, body: Value) -> Self {
        Self {
            code,
            body,
            retry_after: None,
        }
    }
}

impl From<ApiError> for Answer {
    fn from(e: ApiError) -> Self {
        Self {
            code: e.code,
            body: e.body,
            retry_after: e.retry_after,
        }
    }
}

/// The parsed query string.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(raw: &str) -> Self {
        Self(
            form_urlencoded::parse(raw.as_bytes())
                .into_owned()
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The media type without parameters, lowercased.
fn media_type(content_type: Option<&str>) -> Option<String> {
    content_type
        .map(|ct| {
            ct.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .filter(|ct| !ct.is_empty())
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Err(status::bad_request(
            "couldn't get version/kind; json parse error: unexpected end of JSON input",
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        status::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })
}

/// A request addressed to one resource type.
struct ResourceRoute {
    idx: usize,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

enum Route {
    Version,
    ApiVersions,
    ApiGroups,
    ApiGroup(String),
    ResourceList(String, String),
    Resource(ResourceRoute),
}

fn route(store: &Store, path: &str) -> Result<Route, ApiError> {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segments.as_slice() {
        ["version"] => return Ok(Route::Version),
        ["api"] => return Ok(Route::ApiVersions),
        ["apis"] => return Ok(Route::ApiGroups),
        ["apis", group] => return Ok(Route::ApiGroup((*group).to_string())),
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(status::path_not_found()),
    };
    let (namespace, plural, tail) = match rest {
        [] => return Ok(Route::ResourceList(group.into(), version.into())),
        // The core group's Namespaces themselves (served when a Namespace row is):
        // `/api/v1/namespaces`, `/api/v1/namespaces/<name>`, `/api/v1/namespaces/<name>/status`.
        ["namespaces", tail @ ..]
            if group.is_empty()
                && (tail.len() <= 1 || (tail.len() == 2 && tail[1] == "status")) =>
        {
            (None, "namespaces", tail)
        }
        ["namespaces", ns, plural, tail @ ..] => (Some(*ns), *plural, tail),
        [plural, tail @ ..] if *plural != "namespaces" => (None, *plural, tail),
        _ => return Err(status::path_not_found()),
    };
    let idx = store
        .find_path(group, version, plural)
        .ok_or_else(status::path_not_found)?;
    let res = &store.resources[idx];
    let valid = match (res.namespaced, namespace.is_some(), tail.len()) {
        (_, _, n) if n > 2 => false,
        // A namespaced type is reachable without a namespace only as a collection.
        (true, false, n) => n == 0,
        (false, true, _) => false,
        _ => true,
    };
    let sub = tail.get(1).map(|s| (*s).to_string());
    let sub_ok = match sub.as_deref() {
        None => true,
        Some("status") => res.status_subresource,
        Some("eviction") => res.group.is_empty() && res.kind == "Pod",
        Some(_) => false,
    };
    if !valid || !sub_ok {
        return Err(status::path_not_found());
    }
    Ok(Route::Resource(ResourceRoute {
        idx,
        namespace: namespace.map(str::to_string),
        name: tail.first().map(|s| (*s).to_string()),
        sub,
    }))
}

fn check_body_type(store: &Store, idx: usize, media: Option<&str>) -> Result<(), ApiError> {
    match media {
        None | Some("application/json") => Ok(()),
        Some(_) => Err(status::unsupported_media_type(
            if store.resources[idx].custom {
                BODY_TYPES_CUSTOM
            } else {
                BODY_TYPES_BUILTIN
            },
        )),
    }
}

fn patch_kind(store: &Store, idx: usize, media: Option<&str>) -> Result<PatchKind, ApiError> {
    let custom = store.resources[idx].custom;
    let accepted = if custom {
        PATCH_TYPES_CUSTOM
    } else {
        PATCH_TYPES_BUILTIN
    };
    match media {
        Some("application/json-patch+json") => Ok(PatchKind::Json),
        Some("application/merge-patch+json") => Ok(PatchKind::Merge),
        Some("application/strategic-merge-patch+json") if !custom => Ok(PatchKind::Strategic),
        Some(APPLY) => {
            let mut err = status::unsupported_media_type(accepted);
            err.body["message"] = Value::String(
                "kube-fake implements server-side apply of the main resource only, not of \
                 /status"
                    .into(),
            );
            Err(err)
        }
        _ => Err(status::unsupported_media_type(accepted)),
    }
}

struct Incoming<'a> {
    method: &'a Method,
    path: &'a str,
    query: &'a Query,
    media: Option<&'a str>,
    body: &'a [u8],
    /// Who sent it (for admission), when admission is enforced.
    user: Option<&'a UserInfo>,
    /// Who sent it, for API Priority and Fairness.
    identity: &'a UserInfo,
    /// Its `User-Agent`, which names the field manager of a write without `fieldManager`.
    agent: Option<&'a str>,
}

impl Incoming<'_> {
    /// The field manager of a non-apply write: `fieldManager`, else the `User-Agent` up to its
    /// first `/`, as the API server defaults it.
    fn manager(&self) -> String {
        self.query
            .get("fieldManager")
            .or_else(|| self.agent.and_then(|a| a.split('/').next()))
            .filter(|m| !m.is_empty())
            .unwrap_or("unknown")
            .to_string()
    }
}

fn dispatch(
    store: &mut Store,
    (server_address, version): (&str, (u32, u32)),
    req: &Incoming<'_>,
) -> Result<Answer, ApiError> {
    let found = route(store, req.path)?;
    let is_get = *req.method == Method::GET;
    let r = match found {
        Route::Version if is_get => return Ok(Answer::ok(200, discovery::version(version))),
        Route::ApiVersions if is_get => {
            return Ok(Answer::ok(200, discovery::api_versions(server_address)));
        }
        Route::ApiGroups if is_get => {
            return Ok(Answer::ok(200, discovery::api_group_list(&store.resources)));
        }
        Route::ApiGroup(group) if is_get => {
            return discovery::api_group(&store.resources, &group)
                .map(|d| Answer::ok(200, d))
                .ok_or_else(status::path_not_found);
        }
        Route::ResourceList(group, version) if is_get => {
            return discovery::api_resource_list(&store.resources, &group, &version)
                .map(|d| Answer::ok(200, d))
                .ok_or_else(status::path_not_found);
        }
        Route::Resource(r) => r,
        _ => return Err(status::method_not_allowed()),
    };

    let dry_run = req.query.get("dryRun").is_some_and(|v| v == "All");
    let ns = r.namespace.as_deref();
    let idx = r.idx;
    let method = req.method.clone();
    match (r.name.as_deref(), r.sub.as_deref()) {
        (None, _) => collection_verb(store, req, idx, ns, dry_run),
        (Some(name), None) => match method {
            Method::GET | Method::PUT | Method::PATCH => object_verb(
                store,
                req,
                ObjectRef::new(idx, ns, name),
                Target::Main,
                dry_run,
            ),
            Method::DELETE => delete_object(store, req, ObjectRef::new(idx, ns, name), dry_run),
            _ => Err(status::method_not_allowed()),
        },
        (Some(name), Some("status")) => match method {
            Method::GET | Method::PUT | Method::PATCH => object_verb(
                store,
                req,
                ObjectRef::new(idx, ns, name),
                Target::Status,
                dry_run,
            ),
            _ => Err(status::method_not_allowed()),
        },
        (Some(name), Some(_eviction)) => match method {
            Method::POST => {
                check_body_type(store, idx, req.media)?;
                let body = parse_json(req.body)?;
                store.evict(ns.unwrap_or_default(), name, &body, dry_run)?;
                Ok(Answer::ok(201, status::success(Some(201), None)))
            }
            _ => Err(status::method_not_allowed()),
        },
    }
}

/// GET (a list) or POST (a create) of a collection.
fn collection_verb(
    store: &mut Store,
    req: &Incoming<'_>,
    idx: usize,
    ns: Option<&str>,
    dry_run: bool,
) -> Result<Answer, ApiError> {
    match req.method.clone() {
        Method::GET => {
            if req
                .query
                .get("watch")
                .is_some_and(|w| w == "true" || w == "1")
            {
                return Err(status::method_not_allowed());
            }
            let labels = LabelSelector::parse(req.query.get("labelSelector").unwrap_or(""))
                .map_err(status::bad_request)?;
            let fields = FieldSelector::parse(
                req.query.get("fieldSelector").unwrap_or(""),
                &store.resources[idx],
            )
            .map_err(status::bad_request)?;
            Ok(Answer::ok(200, store.list(idx, ns, &labels, &fields)))
        }
        Method::POST if ns.is_some() || !store.resources[idx].namespaced => {
            check_body_type(store, idx, req.media)?;
            let body = parse_json(req.body)?;
            let create = chain::Create {
                idx,
                namespace: ns,
                user: req.user,
                dry_run,
            };
            Ok(Answer::ok(201, chain::create(store, &create, body)?))
        }
        _ => Err(status::method_not_allowed()),
    }
}

/// DELETE of one object (its grace period from the query or the body's options), admitted
/// first when admission is enforced.
fn delete_object(
    store: &mut Store,
    req: &Incoming<'_>,
    object: ObjectRef<'_>,
    dry_run: bool,
) -> Result<Answer, ApiError> {
    let ObjectRef {
        idx,
        namespace: ns,
        name,
    } = object;
    let body = if req.body.is_empty() {
        None
    } else {
        Some(parse_json(req.body)?)
    };
    let dry_run = dry_run
        || body
            .as_ref()
            .and_then(|b| b.get("dryRun"))
            .and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|v| v == "All"));
    let grace = req
        .query
        .get("gracePeriodSeconds")
        .and_then(|g| g.parse().ok());
    let options = DeleteOptions::from_body(body.as_ref(), grace);
    if let Some(user) = req.user
        && admission::any_applies(store, "DELETE", idx)
        && let Some(old) = store.get(idx, ns, name)
    {
        let review = Review {
            operation: "DELETE",
            idx,
            namespace: ns,
            name,
            object: None,
            old_object: Some(&old),
            user,
        };
        admission::admit(store, &review)?;
    }
    Ok(match store.delete(idx, ns, name, &options, dry_run)? {
        DeleteOutcome::Deleted(body) | DeleteOutcome::Pending(body) => Answer::ok(200, body),
    })
}

/// GET, PUT or PATCH of one object, or of its `/status` subresource (`target`).
fn object_verb(
    store: &mut Store,
    req: &Incoming<'_>,
    object: ObjectRef<'_>,
    target: Target,
    dry_run: bool,
) -> Result<Answer, ApiError> {
    let ObjectRef {
        idx,
        namespace: ns,
        name,
    } = object;
    if *req.method == Method::PATCH {
        match (req.media, req.query.get("force")) {
            (Some(APPLY), _) if target == Target::Main => {
                return apply_object(store, req, object, dry_run);
            }
            (Some(APPLY), _) => {}
            (_, Some(_)) => return Err(apply::force_without_apply()),
            _ => {}
        }
    }
    let manager = req.manager();
    let how = (target, manager.as_str());
    if target == Target::Main
        && matches!(*req.method, Method::PUT | Method::PATCH)
        && chain::update_is_checked(store, idx, ns, req.user)
        && let Some(old) = store.get(idx, ns, name)
    {
        // What the write would store, computed as a dry run, then admitted or denied.
        let new = match *req.method {
            Method::PUT => {
                check_body_type(store, idx, req.media)?;
                store.replace(object, parse_json(req.body)?, how, true)?.1
            }
            _ => {
                let kind = patch_kind(store, idx, req.media)?;
                store.patch(object, kind, &parse_json(req.body)?, how, true)?
            }
        };
        chain::validate_update(store, idx, ns, (&new, &old), req.user)?;
    }
    match *req.method {
        Method::PUT => {
            check_body_type(store, idx, req.media)?;
            let body = parse_json(req.body)?;
            let (code, obj) = store.replace(object, body, how, dry_run)?;
            Ok(Answer::ok(code, obj))
        }
        Method::PATCH => {
            let kind = patch_kind(store, idx, req.media)?;
            let patch = parse_json(req.body)?;
            Ok(Answer::ok(
                200,
                store.patch(object, kind, &patch, how, dry_run)?,
            ))
        }
        _ => Ok(Answer::ok(200, store.get_or_404(idx, ns, name)?)),
    }
}

/// A server-side apply of one object: created when absent (through the create's chain, as
/// the API server's patch handler does), else merged with what is stored (see the `apply`
/// module) and written as an update, admitted first when admission checks updates.
fn apply_object(
    store: &mut Store,
    req: &Incoming<'_>,
    object: ObjectRef<'_>,
    dry_run: bool,
) -> Result<Answer, ApiError> {
    let ObjectRef {
        idx,
        namespace: ns,
        name,
    } = object;
    let applier = apply::Applier::new(
        req.query.get("fieldManager"),
        req.query.get("force"),
        store.now_rfc3339(),
    )?;
    let config = apply::parse(req.body)?;
    let res = store.resources[idx].clone();
    apply::check(&res, &config, name)?;
    let Some(live) = store.get(idx, ns, name) else {
        let create = chain::Create {
            idx,
            namespace: ns,
            user: req.user,
            dry_run,
        };
        let obj = apply::created(&res, &applier, &config);
        return Ok(Answer::ok(201, chain::create(store, &create, obj)?));
    };
    let new = apply::merged(&res, &applier, &live, &config)?;
    if chain::update_is_checked(store, idx, ns, req.user) {
        chain::validate_update(store, idx, ns, (&new, &live), req.user)?;
    }
    Ok(Answer::ok(200, store.apply_update(object, new, dry_run)?))
}

fn matches_fault(fault: &Fault, method: &Method, path: &str) -> bool {
    fault.method.as_ref().is_none_or(|m| m == method)
        && fault
            .path_contains
            .as_deref()
            .is_none_or(|p| path.contains(p))
}

/// Takes one use of the first matching entry; drops entries that are used up.
fn take_hang(control: &mut Control, path: &str) -> bool {
    let Some(pos) = control
        .hangs
        .iter()
        .position(|(p, times)| *times > 0 && path.contains(p.as_str()))
    else {
        return false;
    };
    control.hangs[pos].1 -= 1;
    if control.hangs[pos].1 == 0 {
        control.hangs.remove(pos);
    }
    true
}

fn take_fault(control: &mut Control, method: &Method, path: &str) -> Option<u16> {
    let pos = control
        .faults
        .iter()
        .position(|f| f.times > 0 && matches_fault(f, method, path))?;
    let status = control.faults[pos].status;
    control.faults[pos].times -= 1;
    if control.faults[pos].times == 0 {
        control.faults.remove(pos);
    }
    Some(status)
}

fn render(answer: &Answer) -> Response {
    let body = serde_json::to_vec(&answer.body).unwrap_or_default();
    let mut response = Response::new(Body::from(body));
    *response.status_mut() =
        StatusCode::from_u16(answer.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(seconds) = answer.retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// The one handler behind every path.
pub(crate) async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let user = UserInfo::from_headers(&parts.headers);
    let method = parts.method;
    let path = parts.uri.path().to_string();
    let raw_query = parts.uri.query().unwrap_or_default().to_string();
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let agent = parts
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bearer = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let bytes = to_bytes(body, MAX_BODY).await.unwrap_or_default();
    let recorded_body = if bytes.is_empty() {
        None
    } else {
        Some(
            serde_json::from_slice::<Value>(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned())),
        )
    };
    let arrived = shared.lock().store.now();
    let record = |status: u16| RecordedRequest {
        method: method.clone(),
        path: path.clone(),
        query: raw_query.clone(),
        content_type: content_type.clone(),
        body: recorded_body.clone(),
        bearer: bearer.clone(),
        status,
        at: arrived,
    };

    let (latency, hang) = {
        let mut state = shared.lock();
        state.control.counters.requests += 1;
        let hang = take_hang(&mut state.control, &path);
        if hang {
            state.control.counters.hung += 1;
            state.control.log.push(record(0));
        }
        (state.control.latency, hang)
    };
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if hang {
        tracing::debug!("kube-fake: hanging {method} {path}");
        let mut shutdown = shared.shutdown.clone();
        // Never answers while the fake runs; released on shutdown.
        let _ = shutdown.wait_for(|stopped| *stopped).await;
        return render(&status::for_code(503, "kube-fake is shutting down").into());
    }

    let query = Query::parse(&raw_query);
    let media = media_type(content_type.as_deref());
    let incoming = Incoming {
        method: &method,
        path: &path,
        query: &query,
        media: media.as_deref(),
        body: &bytes,
        user: shared.admission.then_some(&user),
        identity: &user,
        agent: agent.as_deref(),
    };
    let answer = answer_and_record(&shared, &incoming, &record);
    tracing::debug!("kube-fake: {method} {path}?{raw_query} -> {}", answer.code);
    render(&answer)
}

/// The answer to `incoming`, under one lock of the fake: 429 when the rate limit is spent, a
/// fault injected, or what the store answers; then the write asked to follow this answer is
/// applied and the request is logged (`record`).
fn answer_and_record(
    shared: &Shared,
    incoming: &Incoming<'_>,
    record: &impl Fn(u16) -> RecordedRequest,
) -> Answer {
    let (method, path) = (incoming.method, incoming.path);
    let mut state = shared.lock();
    let state = &mut *state;
    let now = state.store.now();
    let limited = state
        .control
        .rate_limit
        .as_mut()
        .is_some_and(|bucket| !bucket.try_take(now));
    let answer: Answer = if !limited && !flow_admits(state, incoming, now) {
        status::too_many_requests("Too many requests, please try again later.", 1, None).into()
    } else if limited {
        state.control.counters.rate_limited += 1;
        status::too_many_requests("Too many requests, please try again later.", 1, None).into()
    } else if let Some(code) = take_fault(&mut state.control, method, path) {
        state.control.counters.faults_injected += 1;
        status::for_code(code, "fault injected by kube-fake").into()
    } else {
        dispatch(
            &mut state.store,
            (&shared.server_address, shared.version),
            incoming,
        )
        .unwrap_or_else(Answer::from)
    };
    if answer.code == 429 {
        state.control.counters.too_many_requests += 1;
    }
    if let Some(i) = state
        .control
        .after_answer
        .iter()
        .position(|(m, p, _)| m == method && p == path)
    {
        let (_, _, obj) = state.control.after_answer.remove(i);
        if let Err(e) = state.store.seed(obj) {
            tracing::error!("kube-fake: after answer: {e}");
        }
    }
    state.control.log.push(record(answer.code));
    answer
}

/// Whether API Priority and Fairness lets the request start (always, when it is not enforced).
fn flow_admits(state: &mut FakeState, incoming: &Incoming<'_>, now: DateTime<Utc>) -> bool {
    if state.control.flow.capacity.is_none() {
        return true;
    }
    let watch = incoming
        .query
        .get("watch")
        .is_some_and(|w| w == "true" || w == "1");
    let info = RequestInfo::of(incoming.method, incoming.path, watch);
    let class = flow_control::classify(&state.store, &info, incoming.identity);
    state.control.flow.admit(&state.store, &class, now) == Admission::Start
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_resources;

    #[test]
    fn routes_follow_the_real_url_layout() {
        let store = Store::new(builtin_resources());
        let check = |path: &str| match route(&store, path) {
            Ok(Route::Resource(r)) => {
                Some((store.resources[r.idx].kind, r.namespace, r.name, r.sub))
            }
            Ok(_) => None,
            Err(e) => panic!("{path}: {}", e.body),
        };
        assert_eq!(check("/api/v1/nodes"), Some(("Node", None, None, None)));
        assert_eq!(
            check("/api/v1/nodes/n1/status"),
            Some(("Node", None, Some("n1".into()), Some("status".into())))
        );
        assert_eq!(check("/api/v1/pods"), Some(("Pod", None, None, None)));
        assert_eq!(
            check("/api/v1/namespaces/ns/pods/p/eviction"),
            Some((
                "Pod",
                Some("ns".into()),
                Some("p".into()),
                Some("eviction".into())
            ))
        );
        assert_eq!(
            check("/apis/karpenter.sh/v1/nodeclaims/c"),
            Some(("NodeClaim", None, Some("c".into()), None))
        );
        assert_eq!(
            check("/apis/cluster.x-k8s.io/v1beta1/namespaces/ns/machines/m"),
            Some(("Machine", Some("ns".into()), Some("m".into()), None))
        );
        for bad in [
            "/api/v1/pods/p",
            "/api/v1/namespaces/ns/nodes/n",
            "/api/v1/nodes/n/eviction",
            "/api/v1/namespaces/ns/finalize",
            "/api/v2/nodes",
            "/apis/karpenter.sh/v1beta1/nodeclaims",
            "/healthz",
        ] {
            assert!(route(&store, bad).is_err(), "{bad}");
        }
    }

    /// The Namespaces (served by default) are reached as on the real server; the namespaced
    /// paths are as before.
    #[test]
    fn namespaces_are_reached_at_their_own_paths() {
        let resources = builtin_resources();
        let store = Store::new(resources);
        let check = |path: &str| match route(&store, path) {
            Ok(Route::Resource(r)) => {
                Some((store.resources[r.idx].kind, r.namespace, r.name, r.sub))
            }
            Ok(_) => None,
            Err(e) => panic!("{path}: {}", e.body),
        };
        assert_eq!(
            check("/api/v1/namespaces"),
            Some(("Namespace", None, None, None))
        );
        assert_eq!(
            check("/api/v1/namespaces/forewarn"),
            Some(("Namespace", None, Some("forewarn".into()), None))
        );
        assert_eq!(
            check("/api/v1/namespaces/forewarn/status"),
            Some((
                "Namespace",
                None,
                Some("forewarn".into()),
                Some("status".into())
            ))
        );
        assert_eq!(
            check("/api/v1/namespaces/forewarn/pods"),
            Some(("Pod", Some("forewarn".into()), None, None))
        );
        assert_eq!(
            check("/api/v1/namespaces/forewarn/configmaps/c"),
            Some(("ConfigMap", Some("forewarn".into()), Some("c".into()), None))
        );
    }

    #[test]
    fn token_bucket_allows_a_burst_then_refuses_until_its_clock_moves_on() {
        let t0: DateTime<Utc> = "2026-11-24T10:00:00Z".parse().unwrap();
        let mut bucket = TokenBucket::new(2.0, 2, t0);
        assert!(bucket.try_take(t0));
        assert!(bucket.try_take(t0));
        assert!(!bucket.try_take(t0));
        let later = t0 + chrono::Duration::milliseconds(500);
        assert!(bucket.try_take(later), "one token a half second at 2/s");
        assert!(!bucket.try_take(later));
    }

    #[test]
    fn faults_are_used_up() {
        let mut control = Control::default();
        control.faults.push(Fault {
            method: Some(Method::PATCH),
            path_contains: Some("/nodes/".into()),
            status: 500,
            times: 2,
        });
        assert_eq!(
            take_fault(&mut control, &Method::GET, "/api/v1/nodes/a"),
            None
        );
        assert_eq!(
            take_fault(&mut control, &Method::PATCH, "/api/v1/nodes/a"),
            Some(500)
        );
        assert_eq!(
            take_fault(&mut control, &Method::PATCH, "/api/v1/nodes/a"),
            Some(500)
        );
        assert_eq!(
            take_fault(&mut control, &Method::PATCH, "/api/v1/nodes/a"),
            None
        );
    }
}
