//! API Priority and Fairness (`flowcontrol.apiserver.k8s.io/v1`), modelled on the fake's clock
//! as a throughput rather than as seats held for a request's real duration.
//!
//! Served with [`crate::KubeFakeBuilder::flow_control`]: the FlowSchemas and
//! PriorityLevelConfigurations are stored objects, seeded with the mandatory and suggested ones
//! of a Kubernetes 1.29+ server ([`suggested`]), and any a test or a deploy writes is used from
//! the next request on. Enforced once [`crate::KubeFake::set_server_capacity`] gives the
//! server a capacity.
//!
//! Faithful:
//!
//! * **Classification**: the FlowSchemas in `matchingPrecedence` order (ties by name), the first
//!   one a rule of which matches: a subject (`User` by name, `Group` by name, `ServiceAccount` as
//!   `system:serviceaccount:<ns>:<name>`, `*` for any) and a resource rule (verbs, API groups,
//!   resources with their subresource as `pods/eviction`, `clusterScope`, `namespaces`) or, for
//!   a path that names no resource, a non-resource rule (`nonResourceURLs` exact or `/prefix/*`).
//!   No match: the `catch-all` schema. The user is the `Impersonate-User` header's, in
//!   `system:authenticated` plus its `Impersonate-Group`s; without it, `system:anonymous` in
//!   `system:unauthenticated`. A schema naming a missing level counts as no match.
//! * **The levels' limits**: `Exempt` levels are never limited. Each `Limited` level's nominal
//!   limit is `capacity × nominalConcurrencyShares / Σ shares` (the share defaulting to 30 when
//!   absent, as in v1), its lendable part `lendablePercent` of it, its borrowing limit
//!   `borrowingLimitPercent` of it (absent: the server's whole capacity). The current limits are
//!   computed as the API server's borrowing computes them (`updateBorrowingLocked` and
//!   `computeConcurrencyAllocation` in `k8s.io/apiserver/pkg/util/flowcontrol`, KEP-1040's
//!   borrowing): each level's lower bound is its nominal less what it lends, raised to its seat
//!   demand up to its nominal (a level is never made to lend what it is using of its own
//!   share), its upper bound its nominal plus its borrowing limit, its target its demand (at
//!   least its lower bound), and one proportion `fairProp` is found with
//!   `Σ clamp(fairProp × target, lower, upper) = capacity`.
//! * **Flows**: fair queuing dispatches a request whenever its level has a free seat: a flow
//!   may take all of its level's limit that the level's other flows do not use, and when they
//!   all want more than there is, the limit is shared max-min fairly between them (the
//!   `distinguisherMethod`: `ByUser`, `ByNamespace`, none: one flow).
//! * **Answers**: beyond its flow's share a request waits in its queue (`Queue`: at most
//!   `queueLengthLimit` requests ahead of it) or is refused at once (`Reject`, or a full queue)
//!   with the real `429` (`Too many requests, please try again later.`, `Retry-After: 1`).
//!
//! Approximated (say so in what a test concludes):
//!
//! * A seat is one request per second: a level of limit `L` starts `L` requests a second, `L` at
//!   once after an idle second (a flow's share `r` as `⌈r⌉` seats each held `⌈r⌉ / r` seconds).
//!   The real server's limits are requests executing at once, each for its real duration; the
//!   fake answers at once. A server of `S` seats whose requests take `d` seconds is a capacity
//!   of `S / d` here.
//! * A queued request is answered at once too (the fake cannot hold an answer on a test's manual
//!   clock): [`FlowStats::waited`] adds up how long the real server would have held it, and
//!   [`FlowStats::last_start`] is when the last one would have started. Its client is not held
//!   meanwhile, so a client that waits for its answers sends sooner than against the real
//!   server. Shuffle sharding is not modelled: a flow may have `handSize × queueLengthLimit`
//!   requests waiting (as if its hand's queues were its own), and no other flow's requests share
//!   them.
//! * A level's seat demand is its flows' requests executing (started less than a second ago) or
//!   waiting, the arriving one included, plus its foreign load's rate; the limits take its high
//!   watermark over the last ten seconds, for the lower bound as the real server does and for
//!   the target too. The real server's target is smoothed (`avg + stddev` over ten seconds,
//!   decaying with a five-minute half-life) and it recomputes the limits every ten seconds; the
//!   fake recomputes them at every request, so it follows a rising demand at once where the real
//!   server takes up to ten seconds, and lets a level's limit fall ten seconds after its demand
//!   did rather than over minutes.
//! * **Other clients' load** ([`ForeignLoad`]) is declared, never sent: a level's foreign load is
//!   a rate (a share of the capacity) spread over a number of flows, each demanding its part all
//!   the time.
//! * Width estimation (list requests taking more seats), watches, and the `exempt` level's
//!   own nominal share (0 in 1.29+) are not modelled; neither are the PriorityLevelConfigurations'
//!   and FlowSchemas' status conditions.

use std::collections::{BTreeMap, VecDeque};

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};

use crate::admission::UserInfo;
use crate::resources::{ResourceDef, StatusOnCreate};
use crate::store::Store;

/// The API group of the flow-control kinds.
pub const GROUP: &str = "flowcontrol.apiserver.k8s.io";
const API_VERSION: &str = "flowcontrol.apiserver.k8s.io/v1";

/// The rows of the two kinds, served from `flowcontrol.apiserver.k8s.io/v1` (Kubernetes 1.29).
pub(crate) fn resources() -> [ResourceDef; 2] {
    let def = |kind, plural| ResourceDef {
        group: GROUP,
        version: "v1",
        kind,
        plural,
        singular: "",
        namespaced: false,
        short_names: &[],
        custom: false,
        status_subresource: true,
        status_on_create: StatusOnCreate::Drop,
        delete_returns_object: false,
        create_on_update: true,
        field_labels: None,
        list_merge: &[],
    };
    [
        def("FlowSchema", "flowschemas"),
        def("PriorityLevelConfiguration", "prioritylevelconfigurations"),
    ]
}

/// Other clients' load in one priority level: `share` of the server's capacity (0.8: 80 %),
/// demanded all the time by `flows` distinct flows (users, for a `ByUser` schema) alike.
#[derive(Debug, Clone, PartialEq)]
pub struct ForeignLoad {
    pub level: String,
    pub share: f64,
    pub flows: u32,
}

impl ForeignLoad {
    /// `share` of the capacity in `level`, from ten flows (controllers, CI jobs, ...).
    pub fn new(level: impl Into<String>, share: f64) -> Self {
        Self {
            level: level.into(),
            share,
            flows: 10,
        }
    }

    /// The number of flows the load comes from (at least one).
    pub fn flows(mut self, flows: u32) -> Self {
        self.flows = flows.max(1);
        self
    }
}

/// What one priority level did with the requests sent over HTTP.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlowStats {
    /// Requests started at once.
    pub served: u64,
    /// Requests that waited in their queue (then started, or are still waiting).
    pub queued: u64,
    /// Of those, the ones still waiting (to start later than the fake's clock says now).
    pub waiting: u64,
    /// Requests refused with a 429.
    pub rejected: u64,
    /// How long, added up, the queued requests waited.
    pub waited: std::time::Duration,
    /// When the last request admitted would have started (a queued one after its wait).
    pub last_start: Option<DateTime<Utc>>,
    /// The level's limit (requests a second) when it last answered.
    pub limit: f64,
}

/// Where a request was classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Classified {
    pub schema: String,
    pub level: String,
    pub flow: String,
}

/// A request as APF sees it.
pub(crate) struct RequestInfo<'a> {
    pub verb: &'static str,
    /// `None`: a non-resource request (`/version`, discovery).
    pub resource: Option<ResourceInfo>,
    pub path: &'a str,
}

/// The resource a request is about.
pub(crate) struct ResourceInfo {
    pub group: String,
    /// With its subresource: `pods/eviction`.
    pub resource: String,
    pub namespace: Option<String>,
}

impl<'a> RequestInfo<'a> {
    /// From the method, path and query, as the API server's request info factory reads them.
    pub fn of(method: &axum::http::Method, path: &'a str, watch: bool) -> RequestInfo<'a> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, rest) = match segments.as_slice() {
            ["api", _version, rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => ("", &[][..]),
        };
        let (namespace, rest) = match rest {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_string()), rest),
            other => (None, other),
        };
        let (resource, named) = match rest {
            [] => (None, false),
            [r] => (Some((*r).to_string()), false),
            [r, _name] => (Some((*r).to_string()), true),
            [r, _name, sub, ..] => (Some(format!("{r}/{sub}")), true),
        };
        let verb = match (method.as_str(), named) {
            ("GET", _) if watch => "watch",
            ("GET", true) => "get",
            ("GET", false) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", true) => "delete",
            ("DELETE", false) => "deletecollection",
            _ => "get",
        };
        let verb = if resource.is_none() {
            match method.as_str() {
                "GET" => "get",
                "POST" => "post",
                "PUT" => "put",
                "PATCH" => "patch",
                "DELETE" => "delete",
                _ => "get",
            }
        } else {
            verb
        };
        RequestInfo {
            verb,
            resource: resource.map(|resource| ResourceInfo {
                group: group.to_string(),
                resource,
                namespace,
            }),
            path,
        }
    }
}

/// The user and groups APF matches subjects against.
fn identity(user: &UserInfo) -> (String, Vec<String>) {
    if user.username == "anonymous" && user.groups.is_empty() {
        return (
            "system:anonymous".into(),
            vec!["system:unauthenticated".into()],
        );
    }
    let mut groups = user.groups.clone();
    groups.push("system:authenticated".into());
    (user.username.clone(), groups)
}

fn listed(values: Option<&Value>, want: &str) -> bool {
    values
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == "*" || v == want))
}

fn subject_matches(subject: &Value, user: &str, groups: &[String]) -> bool {
    let name = |field: &str| subject.pointer(field).and_then(Value::as_str);
    match subject.get("kind").and_then(Value::as_str) {
        Some("User") => name("/user/name").is_some_and(|n| n == "*" || n == user),
        Some("Group") => {
            name("/group/name").is_some_and(|n| n == "*" || groups.iter().any(|g| g == n))
        }
        Some("ServiceAccount") => {
            let (Some(ns), Some(sa)) = (
                name("/serviceAccount/namespace"),
                name("/serviceAccount/name"),
            ) else {
                return false;
            };
            let prefix = format!("system:serviceaccount:{ns}:");
            user.strip_prefix(&prefix)
                .is_some_and(|rest| sa == "*" || rest == sa)
        }
        _ => false,
    }
}

fn resource_rule_matches(rule: &Value, verb: &str, r: &ResourceInfo) -> bool {
    let scope = match &r.namespace {
        None => rule.get("clusterScope").and_then(Value::as_bool) == Some(true),
        Some(ns) => listed(rule.get("namespaces"), ns),
    };
    listed(rule.get("verbs"), verb)
        && listed(rule.get("apiGroups"), &r.group)
        && listed(rule.get("resources"), &r.resource)
        && scope
}

fn non_resource_rule_matches(rule: &Value, verb: &str, path: &str) -> bool {
    let url = rule
        .get("nonResourceURLs")
        .and_then(Value::as_array)
        .is_some_and(|urls| {
            urls.iter().filter_map(Value::as_str).any(|u| {
                u == "*"
                    || u == path
                    || u.strip_suffix('*')
                        .is_some_and(|prefix| path.starts_with(prefix))
            })
        });
    listed(rule.get("verbs"), verb) && url
}

fn schema_matches(schema: &Value, info: &RequestInfo<'_>, user: &str, groups: &[String]) -> bool {
    let rules = schema.pointer("/spec/rules").and_then(Value::as_array);
    rules.into_iter().flatten().any(|rule| {
        let subjects = rule.get("subjects").and_then(Value::as_array);
        let who = subjects
            .into_iter()
            .flatten()
            .any(|s| subject_matches(s, user, groups));
        let what = match &info.resource {
            Some(r) => rule
                .get("resourceRules")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|rr| resource_rule_matches(rr, info.verb, r)),
            None => rule
                .get("nonResourceRules")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|nr| non_resource_rule_matches(nr, info.verb, info.path)),
        };
        who && what
    })
}

fn name_of(v: &Value) -> String {
    v.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The stored objects of one of the two kinds.
fn stored(store: &Store, kind: &str) -> Vec<Value> {
    store
        .find_kind(API_VERSION, kind)
        .map(|idx| store.objects_of(idx, None).cloned().collect())
        .unwrap_or_default()
}

/// The schema, level and flow of a request.
pub(crate) fn classify(store: &Store, info: &RequestInfo<'_>, user: &UserInfo) -> Classified {
    let (username, groups) = identity(user);
    let levels: Vec<String> = stored(store, "PriorityLevelConfiguration")
        .iter()
        .map(name_of)
        .collect();
    let mut schemas = stored(store, "FlowSchema");
    schemas.sort_by_key(|s| {
        (
            s.pointer("/spec/matchingPrecedence")
                .and_then(Value::as_u64)
                .unwrap_or(1000),
            name_of(s),
        )
    });
    let level_of = |s: &Value| {
        s.pointer("/spec/priorityLevelConfiguration/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let chosen = schemas
        .iter()
        .find(|s| levels.contains(&level_of(s)) && schema_matches(s, info, &username, &groups));
    let Some(schema) = chosen else {
        return Classified {
            schema: "catch-all".into(),
            level: "catch-all".into(),
            flow: username,
        };
    };
    let flow = match schema
        .pointer("/spec/distinguisherMethod/type")
        .and_then(Value::as_str)
    {
        Some("ByUser") => username,
        Some("ByNamespace") => info
            .resource
            .as_ref()
            .and_then(|r| r.namespace.clone())
            .unwrap_or_default(),
        _ => String::new(),
    };
    Classified {
        schema: name_of(schema),
        level: level_of(schema),
        flow,
    }
}

/// One `Limited` level, as its object says.
#[derive(Debug, Clone, PartialEq)]
struct Level {
    name: String,
    shares: f64,
    lendable: f64,
    /// `None`: may borrow without limit.
    borrowing: Option<f64>,
    /// `None`: `Reject`; else how many requests of one flow may wait.
    queue: Option<u32>,
}

/// The `Limited` levels, and the names of the `Exempt` ones.
fn levels(store: &Store) -> (Vec<Level>, Vec<String>) {
    let mut limited = Vec::new();
    let mut exempt = Vec::new();
    for pl in stored(store, "PriorityLevelConfiguration") {
        let name = name_of(&pl);
        if pl.pointer("/spec/type").and_then(Value::as_str) == Some("Exempt") {
            exempt.push(name);
            continue;
        }
        let number = |p: &str| pl.pointer(p).and_then(Value::as_f64);
        let queue = match pl
            .pointer("/spec/limited/limitResponse/type")
            .and_then(Value::as_str)
        {
            Some("Queue") => {
                let queuing = |field: &str, default: u64| {
                    pl.pointer(&format!("/spec/limited/limitResponse/queuing/{field}"))
                        .and_then(Value::as_u64)
                        .unwrap_or(default) as u32
                };
                // One flow's requests go to the shortest of its hand's queues: at most
                // `handSize` queues of `queueLengthLimit` each (never more than `queues`).
                let hand = queuing("handSize", 8).min(queuing("queues", 64)).max(1);
                Some(hand * queuing("queueLengthLimit", 50))
            }
            _ => None,
        };
        limited.push(Level {
            name,
            shares: number("/spec/limited/nominalConcurrencyShares").unwrap_or(30.0),
            lendable: number("/spec/limited/lendablePercent").unwrap_or(0.0),
            borrowing: number("/spec/limited/borrowingLimitPercent"),
            queue,
        });
    }
    (limited, exempt)
}

/// One class of the borrowing's allocation problem.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Item {
    pub lower: f64,
    pub upper: f64,
    pub target: f64,
}

/// The allocations summing to `total`: each `clamp(fair × target, lower, upper)` for the one
/// `fair` that makes them sum to `total` (every upper bound when even they fall short, every
/// lower bound when even they exceed it), as the API server's `computeConcurrencyAllocation`.
pub(crate) fn allocate(total: f64, items: &[Item]) -> Vec<f64> {
    let at = |fair: f64| -> Vec<f64> {
        items
            .iter()
            .map(|i| (fair * i.target.max(1e-3)).clamp(i.lower, i.upper.max(i.lower)))
            .collect()
    };
    let sum = |v: &[f64]| v.iter().sum::<f64>();
    let (mut low, mut high) = (0.0_f64, 1.0_f64);
    if sum(&at(low)) >= total {
        return at(low);
    }
    while sum(&at(high)) < total {
        high *= 2.0;
        if high > 1e12 {
            return at(high);
        }
    }
    for _ in 0..100 {
        let mid = (low + high) / 2.0;
        if sum(&at(mid)) < total {
            low = mid;
        } else {
            high = mid;
        }
    }
    at(high)
}

/// Max-min fair shares of `total` between demands: none gets more than it asks, and what one
/// leaves goes to the others alike.
pub(crate) fn fair_shares(total: f64, demands: &[f64]) -> Vec<f64> {
    let mut shares = vec![0.0; demands.len()];
    let mut open: Vec<usize> = (0..demands.len()).collect();
    let mut left = total;
    while !open.is_empty() && left > 1e-9 {
        let each = left / open.len() as f64;
        let (full, rest): (Vec<usize>, Vec<usize>) =
            open.iter().partition(|&&i| demands[i] - shares[i] <= each);
        if full.is_empty() {
            for &i in &rest {
                shares[i] += each;
            }
            break;
        }
        for &i in &full {
            left -= demands[i] - shares[i];
            shares[i] = demands[i];
        }
        open = rest;
    }
    shares
}

/// How long a request holds its seat: a level of limit `L` starts `L` requests a second.
const SEAT: Duration = Duration::seconds(1);

/// How often the API server adjusts the levels' limits (`borrowingAdjustmentPeriod`): the seat
/// demand's high watermark is taken over this long.
const BORROWING_PERIOD: Duration = Duration::seconds(10);

/// One flow of HTTP requests: those started, kept while they may still hold a seat, and those
/// waiting in its queue.
#[derive(Debug, Default)]
struct Flow {
    /// When each started (in order).
    started: VecDeque<DateTime<Utc>>,
    /// Each waiting request's arrival and planned start, first in first out.
    waiting: VecDeque<(DateTime<Utc>, DateTime<Utc>)>,
}

impl Flow {
    /// Moves the waiting requests whose planned start has come to the started, and answers
    /// them (arrival, start); forgets the starts that hold no seat any more.
    fn settle(&mut self, now: DateTime<Utc>) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
        let mut done = Vec::new();
        while let Some(&(arrival, start)) = self.waiting.front() {
            if start > now {
                break;
            }
            self.waiting.pop_front();
            let at = self.started.partition_point(|s| *s <= start);
            self.started.insert(at, start);
            done.push((arrival, start));
        }
        // A seat is held at most two seconds (`Seats`), save by the last request of a flow of
        // less than one seat, which is always kept.
        while self.started.len() > 1 && self.started.front().is_some_and(|s| *s + SEAT * 2 <= now) {
            self.started.pop_front();
        }
        done
    }

    /// Requests executing (started less than a seat ago) or waiting to start, at `now`: the
    /// flow's seat demand.
    fn demand(&self, now: DateTime<Utc>) -> f64 {
        let executing = self.started.iter().filter(|s| **s + SEAT > now).count();
        (executing + self.waiting.len()) as f64
    }
}

/// A flow's share `rate` (seats of a second) as `n = ⌈rate⌉` seats each held `n / rate` seconds,
/// and when each is free next, from `now` on.
struct Seats {
    hold: Duration,
    free_now: usize,
    /// When the busy seats free, in order.
    busy: VecDeque<DateTime<Utc>>,
}

impl Seats {
    fn of(flow: &Flow, rate: f64, now: DateTime<Utc>) -> Seats {
        let n = rate.ceil().max(1.0);
        let hold = Duration::nanoseconds((1e9 * n / rate) as i64);
        let n = n as usize;
        let mut busy: VecDeque<DateTime<Utc>> = flow
            .started
            .iter()
            .rev()
            .take(n)
            .map(|s| *s + hold)
            .filter(|free| *free > now)
            .collect();
        busy.make_contiguous().reverse();
        Seats {
            hold,
            free_now: n - busy.len(),
            busy,
        }
    }

    /// When the next request in order starts: on the seat that frees first.
    fn take(&mut self, now: DateTime<Utc>) -> DateTime<Utc> {
        let start = if self.free_now > 0 {
            self.free_now -= 1;
            now
        } else {
            self.busy.pop_front().map_or(now, |free| free.max(now))
        };
        self.busy.push_back(start + self.hold);
        start
    }
}

/// The model's state: the capacity, the declared load and each flow's queue.
#[derive(Debug, Default)]
pub(crate) struct FlowControl {
    /// Requests a second the server starts in all; `None`: not enforced.
    pub capacity: Option<f64>,
    pub foreign: Vec<ForeignLoad>,
    /// Per (level, flow).
    flows: BTreeMap<(String, String), Flow>,
    /// Per level, the HTTP flows' seat demand over the last borrowing period: a monotonic queue
    /// of (when, demand) whose front is the period's high watermark.
    peaks: BTreeMap<String, VecDeque<(DateTime<Utc>, f64)>>,
    pub stats: BTreeMap<String, FlowStats>,
}

/// What the model answers a request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Admission {
    Start,
    Refuse,
}

impl FlowControl {
    /// Each level's statistics, with the requests still waiting at `now` counted.
    pub fn stats_at(&self, now: DateTime<Utc>) -> BTreeMap<String, FlowStats> {
        let mut stats = self.stats.clone();
        for ((level, _), flow) in &self.flows {
            let Some(s) = stats.get_mut(level) else {
                continue;
            };
            for &(arrival, start) in &flow.waiting {
                s.waiting += u64::from(start > now);
                s.waited += (start - arrival).to_std().unwrap_or_default();
                s.last_start = Some(s.last_start.map_or(start, |l| l.max(start)));
            }
        }
        stats
    }

    /// Admits or refuses a request of `class` arriving `now`, and counts it.
    pub fn admit(&mut self, store: &Store, class: &Classified, now: DateTime<Utc>) -> Admission {
        let Some(capacity) = self.capacity else {
            return Admission::Start;
        };
        let (limited, exempt) = levels(store);
        if exempt.contains(&class.level) {
            self.stats.entry(class.level.clone()).or_default().served += 1;
            return Admission::Start;
        }
        let Some(pos) = limited.iter().position(|l| l.name == class.level) else {
            // A level deleted since the schema was read: refused, as the real server does
            // while its configuration catches up.
            self.stats.entry(class.level.clone()).or_default().rejected += 1;
            return Admission::Refuse;
        };
        // Every flow's seat demand now, the arriving request's seat counted in its flow's.
        let key = (class.level.clone(), class.flow.clone());
        self.flows.entry(key.clone()).or_default();
        let mut demands: Vec<(String, f64)> = Vec::with_capacity(self.flows.len());
        for ((level, flow), f) in &mut self.flows {
            for (arrival, start) in f.settle(now) {
                let stats = self.stats.entry(level.clone()).or_default();
                stats.waited += (start - arrival).to_std().unwrap_or_default();
                stats.last_start = Some(stats.last_start.map_or(start, |l| l.max(start)));
            }
            let mine = *level == key.0 && *flow == key.1;
            demands.push((level.clone(), f.demand(now) + if mine { 1.0 } else { 0.0 }));
        }
        let peaks = self.peaks(&demands, now);
        let limits = self.limits(capacity, &limited, &peaks);
        let rate = self.flow_rate(&limited[pos], limits[pos], &key, &demands, capacity);
        self.start_or_refuse(&limited[pos], limits[pos], rate, key, now)
    }

    /// Each level's HTTP seat demand now (`demands`: the level and demand of each HTTP flow),
    /// noted; the answer is each level's high watermark over the last borrowing period
    /// ([`BORROWING_PERIOD`]).
    fn peaks(&mut self, demands: &[(String, f64)], now: DateTime<Utc>) -> BTreeMap<String, f64> {
        let mut per_level: BTreeMap<String, f64> = BTreeMap::new();
        for (level, d) in demands {
            *per_level.entry(level.clone()).or_default() += d;
        }
        per_level
            .into_iter()
            .map(|(level, d)| {
                let q = self.peaks.entry(level.clone()).or_default();
                while q.back().is_some_and(|(_, v)| *v <= d) {
                    q.pop_back();
                }
                q.push_back((now, d));
                while q.front().is_some_and(|(t, _)| *t + BORROWING_PERIOD <= now) {
                    q.pop_front();
                }
                let peak = q.front().map_or(d, |(_, v)| *v);
                (level, peak)
            })
            .collect()
    }

    /// The current limit of each `Limited` level (requests a second), from each level's HTTP
    /// seat demand (`http`: its high watermark over the last borrowing period), as the
    /// API server's `updateBorrowingLocked` computes it: a level's lower bound is what it does
    /// not lend, raised to its seat demand up to its nominal limit (its demand's high
    /// watermark there: a level is never made to lend what it is using of its own share), its
    /// upper bound its nominal limit plus what it may borrow (the server's whole limit when
    /// `borrowingLimitPercent` is absent), and its target its demand, at least its lower bound.
    fn limits(&self, capacity: f64, limited: &[Level], http: &BTreeMap<String, f64>) -> Vec<f64> {
        let total_shares: f64 = limited.iter().map(|l| l.shares).sum::<f64>().max(1e-9);
        let items: Vec<Item> = limited
            .iter()
            .map(|l| {
                let nominal = capacity * l.shares / total_shares;
                let min_cl = nominal - nominal * l.lendable / 100.0;
                let upper = nominal + l.borrowing.map_or(capacity, |b| nominal * b / 100.0);
                let http = http.get(&l.name).copied().unwrap_or_default();
                let demand = self.foreign_rate(&l.name, capacity) + http;
                let lower = min_cl.max(demand.min(nominal));
                Item {
                    lower,
                    upper,
                    target: demand.max(lower),
                }
            })
            .collect();
        allocate(capacity, &items)
    }

    fn foreign_rate(&self, level: &str, capacity: f64) -> f64 {
        self.foreign
            .iter()
            .filter(|f| f.level == level)
            .map(|f| f.share * capacity)
            .sum()
    }

    /// What the flow `key` may use of its level's `limit`: its max-min fair share when it asks
    /// for all it can get and the level's other flows (declared or HTTP) ask their demand. Fair
    /// queuing dispatches whenever the level has a free seat, so a flow is held back only by the
    /// seats the other flows use, never by its own past demand.
    fn flow_rate(
        &self,
        level: &Level,
        limit: f64,
        key: &(String, String),
        demands: &[(String, f64)],
        capacity: f64,
    ) -> f64 {
        let mut all: Vec<f64> = Vec::new();
        for f in self.foreign.iter().filter(|f| f.level == level.name) {
            let each = f.share * capacity / f64::from(f.flows);
            all.extend(std::iter::repeat_n(each, f.flows as usize));
        }
        let mine = all.len();
        all.push(f64::INFINITY);
        for ((lv, flow), (_, demand)) in self.flows.keys().zip(demands) {
            let is_mine = *lv == key.0 && *flow == key.1;
            if *lv == level.name && !is_mine && *demand > 0.0 {
                all.push(*demand);
            }
        }
        fair_shares(limit, &all)[mine]
    }

    /// Starts the request now or later, or refuses it. The flow's share `rate` is [`Seats`]; its
    /// requests start first in, first out (fair queuing serves a queue in order), each on the
    /// seat that frees first. The waiting requests' starts are planned anew at every request,
    /// with the share of the moment: a queue whose share grew is served sooner, as the real
    /// server dispatches a queued request as soon as its level has a free seat (the fake answered
    /// it already: only its books change).
    fn start_or_refuse(
        &mut self,
        level: &Level,
        limit: f64,
        rate: f64,
        key: (String, String),
        now: DateTime<Utc>,
    ) -> Admission {
        let stats = self.stats.entry(key.0.clone()).or_default();
        stats.limit = limit;
        let flow = self.flows.entry(key).or_default();
        if rate <= 1e-9 {
            stats.rejected += 1;
            return Admission::Refuse;
        }
        let mut seats = Seats::of(flow, rate, now);
        for (_, start) in flow.waiting.iter_mut() {
            *start = seats.take(now);
        }
        let start = seats.take(now);
        let at_once = start <= now;
        let queued = !at_once
            && level
                .queue
                .is_some_and(|room| flow.waiting.len() < room as usize);
        if !(at_once || queued) {
            stats.rejected += 1;
            return Admission::Refuse;
        }
        if at_once {
            stats.served += 1;
            let at = flow.started.partition_point(|s| *s <= now);
            flow.started.insert(at, now);
            stats.last_start = Some(stats.last_start.map_or(now, |l| l.max(now)));
        } else {
            stats.queued += 1;
            flow.waiting.push_back((now, start));
        }
        Admission::Start
    }
}

/// The mandatory and suggested configuration of a Kubernetes 1.29+ API server: its eight
/// PriorityLevelConfigurations and the FlowSchemas that send requests to them (those matching
/// the control plane's own users are kept by name and subject; forewarn's requests match none of
/// them).
pub fn suggested() -> Vec<Value> {
    let limited = |name: &str, shares: u32, lendable: u32, queues: Option<(u32, u32)>| {
        let response = match queues {
            Some((queues, hand)) => json!({"type": "Queue", "queuing": {
                "queues": queues, "handSize": hand, "queueLengthLimit": 50}}),
            None => json!({"type": "Reject"}),
        };
        json!({"apiVersion": API_VERSION, "kind": "PriorityLevelConfiguration",
            "metadata": {"name": name},
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": shares,
                "lendablePercent": lendable, "limitResponse": response}}})
    };
    let mut objects = vec![
        json!({"apiVersion": API_VERSION, "kind": "PriorityLevelConfiguration",
            "metadata": {"name": "exempt"},
            "spec": {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}}}),
        limited("system", 30, 33, Some((64, 6))),
        limited("node-high", 40, 25, Some((64, 6))),
        limited("leader-election", 10, 0, Some((16, 4))),
        limited("workload-high", 40, 50, Some((128, 6))),
        limited("workload-low", 100, 90, Some((128, 6))),
        limited("global-default", 20, 50, Some((128, 6))),
        limited("catch-all", 5, 0, None),
    ];
    let all = json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
        "clusterScope": true, "namespaces": ["*"]}]);
    let any_url = json!([{"verbs": ["*"], "nonResourceURLs": ["*"]}]);
    let schema = |name: &str, level: &str, precedence: u32, subjects: Value, by: Option<&str>| {
        let mut spec = json!({"matchingPrecedence": precedence,
            "priorityLevelConfiguration": {"name": level},
            "rules": [{"subjects": subjects, "resourceRules": all, "nonResourceRules": any_url}]});
        if let Some(by) = by {
            spec["distinguisherMethod"] = json!({"type": by});
        }
        json!({"apiVersion": API_VERSION, "kind": "FlowSchema", "metadata": {"name": name},
            "spec": spec})
    };
    let group = |g: &str| json!({"kind": "Group", "group": {"name": g}});
    let user = |u: &str| json!({"kind": "User", "user": {"name": u}});
    let everyone = json!([
        group("system:authenticated"),
        group("system:unauthenticated")
    ]);
    objects.extend([
        schema("exempt", "exempt", 1, json!([group("system:masters")]), None),
        schema(
            "system-leader-election",
            "leader-election",
            100,
            json!([user("system:kube-controller-manager"), user("system:kube-scheduler")]),
            Some("ByUser"),
        ),
        schema("system-nodes", "system", 500, json!([group("system:nodes")]), Some("ByUser")),
        schema(
            "kube-controller-manager",
            "workload-high",
            800,
            json!([user("system:kube-controller-manager")]),
            Some("ByNamespace"),
        ),
        schema(
            "kube-scheduler",
            "workload-high",
            800,
            json!([user("system:kube-scheduler")]),
            Some("ByNamespace"),
        ),
        schema(
            "kube-system-service-accounts",
            "workload-high",
            900,
            json!([{"kind": "ServiceAccount", "serviceAccount": {"namespace": "kube-system", "name": "*"}}]),
            Some("ByNamespace"),
        ),
        schema(
            "service-accounts",
            "workload-low",
            9000,
            json!([group("system:serviceaccounts")]),
            Some("ByUser"),
        ),
        schema("global-default", "global-default", 9900, everyone.clone(), Some("ByUser")),
        schema("catch-all", "catch-all", 10000, everyone, Some("ByUser")),
    ]);
    objects
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allocation_gives_each_its_lower_bound_and_shares_the_rest_by_target() {
        let items = [
            Item {
                lower: 10.0,
                upper: 100.0,
                target: 10.0,
            },
            Item {
                lower: 5.0,
                upper: 100.0,
                target: 80.0,
            },
            Item {
                lower: 5.0,
                upper: 20.0,
                target: 60.0,
            },
        ];
        let a = allocate(100.0, &items);
        assert!((a.iter().sum::<f64>() - 100.0).abs() < 1e-6, "{a:?}");
        assert_eq!(a[2], 20.0, "at its upper bound: {a:?}");
        // fairProp 0.875: the first below its lower bound keeps it, the second 0.875 × 80.
        assert_eq!(a[0], 10.0, "at its lower bound: {a:?}");
        assert!((a[1] - 70.0).abs() < 1e-6, "{a:?}");
        // Nothing asked: each at its lower bound's proportion, summing to the total.
        let idle = allocate(
            40.0,
            &[
                Item {
                    lower: 10.0,
                    upper: 40.0,
                    target: 10.0,
                },
                Item {
                    lower: 10.0,
                    upper: 40.0,
                    target: 10.0,
                },
            ],
        );
        assert_eq!(idle, [20.0, 20.0]);
    }

    #[test]
    fn fair_shares_give_no_flow_more_than_it_asks() {
        assert_eq!(fair_shares(10.0, &[2.0, 100.0, 100.0]), [2.0, 4.0, 4.0]);
        assert_eq!(fair_shares(10.0, &[1.0, 1.0]), [1.0, 1.0]);
        assert_eq!(fair_shares(9.0, &[100.0, 100.0, 100.0]), [3.0, 3.0, 3.0]);
    }

    #[test]
    fn requests_are_read_as_the_api_server_reads_them() {
        let m = |s: &str| s.parse::<axum::http::Method>().unwrap();
        let info = RequestInfo::of(&m("PATCH"), "/api/v1/nodes/n1", false);
        assert_eq!(info.verb, "patch");
        let r = info.resource.unwrap();
        assert_eq!(
            (r.group.as_str(), r.resource.as_str(), r.namespace),
            ("", "nodes", None)
        );
        let info = RequestInfo::of(&m("POST"), "/api/v1/namespaces/a/pods/p/eviction", false);
        let r = info.resource.unwrap();
        assert_eq!(
            (info.verb, r.resource.as_str(), r.namespace.as_deref()),
            ("create", "pods/eviction", Some("a"))
        );
        let info = RequestInfo::of(&m("GET"), "/apis/karpenter.sh/v1/nodeclaims", true);
        assert_eq!(
            (info.verb, info.resource.unwrap().group.as_str()),
            ("watch", "karpenter.sh")
        );
        let info = RequestInfo::of(&m("GET"), "/version", false);
        assert!(info.resource.is_none());
    }

    #[test]
    fn subjects_match_users_groups_and_service_accounts() {
        let groups = vec!["ops".to_string(), "system:authenticated".to_string()];
        let g = json!({"kind": "Group", "group": {"name": "ops"}});
        assert!(subject_matches(&g, "someone", &groups));
        assert!(!subject_matches(&g, "someone", &groups[1..]));
        let u = json!({"kind": "User", "user": {"name": "*"}});
        assert!(subject_matches(&u, "anyone", &[]));
        let sa = json!({"kind": "ServiceAccount", "serviceAccount": {"namespace": "kube-system", "name": "*"}});
        assert!(subject_matches(
            &sa,
            "system:serviceaccount:kube-system:x",
            &[]
        ));
        assert!(!subject_matches(
            &sa,
            "system:serviceaccount:default:x",
            &[]
        ));
    }
}
