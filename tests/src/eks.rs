//! A small EKS on a loopback port, for what moto (5.2.5) does not serve: access entries. It
//! answers `ListClusters`, `DescribeCluster` (its endpoint as the test sets it), `CreateAccessEntry`, `DescribeAccessEntry`, `UpdateAccessEntry` and
//! `ListAssociatedAccessPolicies` (one page)
//! as EKS's REST-JSON API does (the paths, the bodies and the errors of the EKS API reference:
//! `200` with `{"accessEntry": {...}}`, `409 ResourceInUseException` for an entry that exists,
//! `404 ResourceNotFoundException` for a cluster or an entry that does not), keeps the entries
//! in memory, and records every request (its operation, cluster, decoded path and JSON body) for
//! the tests to check. The SDK reaches it through `AWS_ENDPOINT_URL_EKS`.
//!
//! Accounts: told apart as moto tells them, by the caller's access key (when the fake is
//! given moto's URL with [`EksFake::in_accounts`], it asks moto's STS `GetCallerIdentity` with
//! that key: moto reads the key, not the signature). A cluster of the default account
//! ([`OWN_ACCOUNT`]) is named as it is; one of another account `<account>/<name>` in every
//! method of the fake (`set_endpoint("111111111111/prod", ...)`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The account of requests whose caller the fake does not tell apart: moto's default.
pub const OWN_ACCOUNT: &str = "123456789012";

/// One request the fake answered.
#[derive(Debug, Clone)]
pub struct EksRequest {
    /// The caller's account (see the module's documentation).
    pub account: String,
    /// The access key that signed it (from the SigV4 credential scope), if any.
    pub access_key: Option<String>,
    /// `ListClusters`, `CreateAccessEntry`, `DescribeAccessEntry`, `UpdateAccessEntry`, or
    /// `Unknown`.
    pub operation: &'static str,
    pub method: String,
    /// The path, percent-decoded (`/clusters/a/access-entries/arn:aws:iam::...:role/x`).
    pub path: String,
    /// The cluster of the path, if any.
    pub cluster: Option<String>,
    /// The JSON body (`Null` when empty).
    pub body: Value,
}

#[derive(Default)]
struct State {
    clusters: Vec<String>,
    /// (cluster, principal ARN) → Kubernetes groups.
    entries: BTreeMap<(String, String), Vec<String>>,
    /// Cluster → its API server endpoint (`DescribeCluster`).
    endpoints: BTreeMap<String, String>,
    /// (cluster, principal ARN) → the access policies associated with the entry.
    policies: BTreeMap<(String, String), Vec<String>>,
    requests: Vec<EksRequest>,
    /// moto's URL, to tell callers' accounts apart; `None`: every caller is [`OWN_ACCOUNT`].
    moto: Option<String>,
    /// Each access key's account, as moto said.
    accounts: BTreeMap<String, String>,
}

/// The fake; it serves until dropped.
pub struct EksFake {
    url: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for EksFake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl EksFake {
    /// A fake EKS of the account and region with these clusters, on a loopback port, served on
    /// the current runtime.
    pub async fn start(clusters: &[&str]) -> EksFake {
        let state = Arc::new(Mutex::new(State {
            clusters: clusters.iter().map(|c| c.to_string()).collect(),
            ..State::default()
        }));
        let shared = state.clone();
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let state = shared.clone();
                async move {
                    let key = access_key(&headers);
                    let account = account_of(&state, key.as_deref()).await;
                    answer(&state, (&account, key), &method, &uri, &body)
                }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        EksFake { url, state, task }
    }

    /// A fake EKS of these clusters, each `DescribeCluster` answering its API server endpoint.
    pub async fn at(clusters: &[(&str, &str)]) -> EksFake {
        let names: Vec<&str> = clusters.iter().map(|(name, _)| *name).collect();
        let eks = EksFake::start(&names).await;
        for (name, endpoint) in clusters {
            eks.set_endpoint(name, endpoint);
        }
        eks
    }

    /// Tells callers' accounts apart through moto at `moto_url` (see the module's
    /// documentation).
    pub fn in_accounts(self, moto_url: &str) -> EksFake {
        self.state.lock().unwrap().moto = Some(moto_url.to_string());
        self
    }

    /// A cluster more, `<account>/<name>` for another account's, whose `DescribeCluster`
    /// answers `endpoint`.
    pub fn add(&self, cluster: &str, endpoint: &str) {
        let mut state = self.state.lock().unwrap();
        state.clusters.push(cluster.to_string());
        state
            .endpoints
            .insert(cluster.to_string(), endpoint.to_string());
    }

    /// Its endpoint, for `AWS_ENDPOINT_URL_EKS`.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// An entry that exists before the test, as another deploy (or a person) made it.
    pub fn insert_entry(&self, cluster: &str, principal: &str, groups: &[&str]) {
        self.state.lock().unwrap().entries.insert(
            (cluster.to_string(), principal.to_string()),
            groups.iter().map(|g| g.to_string()).collect(),
        );
    }

    /// The API server endpoint `DescribeCluster` answers for `cluster` (the test's Kubernetes
    /// fake, as a kubeconfig made for the cluster names it).
    pub fn set_endpoint(&self, cluster: &str, endpoint: &str) {
        self.state
            .lock()
            .unwrap()
            .endpoints
            .insert(cluster.to_string(), endpoint.to_string());
    }

    /// An access policy associated with an entry (`AssociateAccessPolicy`, cluster scope), as
    /// a person may have done.
    pub fn associate(&self, cluster: &str, principal: &str, policy_arn: &str) {
        self.state
            .lock()
            .unwrap()
            .policies
            .entry((cluster.to_string(), principal.to_string()))
            .or_default()
            .push(policy_arn.to_string());
    }

    /// The groups of an entry, if it exists.
    pub fn entry(&self, cluster: &str, principal: &str) -> Option<Vec<String>> {
        let state = self.state.lock().unwrap();
        state
            .entries
            .get(&(cluster.to_string(), principal.to_string()))
            .cloned()
    }

    /// Every request answered, in order.
    pub fn requests(&self) -> Vec<EksRequest> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The requests that change something (`Create…`, `Update…`).
    pub fn writes(&self) -> Vec<EksRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.operation.starts_with("Create") || r.operation.starts_with("Update"))
            .collect()
    }

    /// Whether every request answered was `operation`.
    pub fn only_asked(&self, operation: &str) -> bool {
        self.requests().iter().all(|r| r.operation == operation)
    }

    pub fn clear_requests(&self) {
        self.state.lock().unwrap().requests.clear();
    }
}

/// `%XX` decoded (the SDK encodes a principal ARN's `:` and `/` in the path).
fn decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An EKS error: its type in `x-amzn-ErrorType`, as EKS sends it, and a JSON message.
fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    (
        status,
        [
            ("x-amzn-ErrorType", kind.to_string()),
            ("content-type", "application/json".to_string()),
        ],
        json!({ "message": message }).to_string(),
    )
        .into_response()
}

fn ok(body: Value) -> Response {
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// An access entry as EKS describes it.
fn entry_json(cluster: &str, principal: &str, groups: &[String]) -> Value {
    let role = principal.rsplit('/').next().unwrap_or_default();
    json!({"accessEntry": {
        "clusterName": cluster,
        "principalArn": principal,
        "kubernetesGroups": groups,
        "accessEntryArn": format!(
            "arn:aws:eks:us-east-1:123456789012:access-entry/{cluster}/role/123456789012/{role}/a0c7b2d6-0000-4000-8000-000000000000"
        ),
        "createdAt": 1_767_225_600.0,
        "modifiedAt": 1_767_225_600.0,
        "tags": {"app": "forewarn"},
        "username": format!("arn:aws:sts::123456789012:assumed-role/{role}/{{{{SessionName}}}}"),
        "type": "STANDARD"
    }})
}

/// `ListAssociatedAccessPolicies` of an entry (one page, cluster scope).
fn associated(state: &State, cluster: &str, principal: &str) -> Response {
    let key = (cluster.to_string(), principal.to_string());
    if !state.entries.contains_key(&key) {
        return error(
            StatusCode::NOT_FOUND,
            "ResourceNotFoundException",
            "The specified principalArn could not be found.",
        );
    }
    let policies: Vec<Value> = state
        .policies
        .get(&key)
        .into_iter()
        .flatten()
        .map(|arn| {
            json!({"policyArn": arn, "accessScope": {"type": "cluster"},
                   "associatedAt": 1_767_225_600.0, "modifiedAt": 1_767_225_600.0})
        })
        .collect();
    ok(json!({"clusterName": cluster, "principalArn": principal,
              "associatedAccessPolicies": policies}))
}

/// The access key of a SigV4 `Authorization` header (`Credential=<key>/<scope>`).
fn access_key(headers: &HeaderMap) -> Option<String> {
    let auth = headers.get("authorization")?.to_str().ok()?;
    let scope = auth.split("Credential=").nth(1)?;
    Some(scope.split('/').next()?.to_string())
}

/// The account of the caller whose access key is `key`: [`OWN_ACCOUNT`] without moto (or a
/// key); else moto's answer to `GetCallerIdentity` with that key, kept.
async fn account_of(state: &Mutex<State>, key: Option<&str>) -> String {
    let (moto, known) = {
        let state = state.lock().unwrap();
        let known = key.and_then(|k| state.accounts.get(k).cloned());
        (state.moto.clone(), known)
    };
    let (Some(moto), Some(key)) = (moto, key) else {
        return OWN_ACCOUNT.to_string();
    };
    if let Some(account) = known {
        return account;
    }
    let account = caller_account(&moto, key)
        .await
        .unwrap_or_else(|| OWN_ACCOUNT.to_string());
    state
        .lock()
        .unwrap()
        .accounts
        .insert(key.to_string(), account.clone());
    account
}

/// The account of the access key `key`, as moto at `moto_url` says (`GetCallerIdentity` with
/// that key: moto reads the key, not the signature).
pub async fn caller_account(moto_url: &str, key: &str) -> Option<String> {
    let credentials = aws_credential_types::Credentials::new(key, "unused", None, None, "eks-fake");
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(moto_url)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(credentials)
        .load()
        .await;
    let identity = aws_sdk_sts::Client::new(&sdk)
        .get_caller_identity()
        .send()
        .await;
    identity.ok()?.account().map(str::to_string)
}

/// A cluster of `account` as the fake keeps it: its name in the default account, else
/// `<account>/<name>`.
fn scoped(account: &str, name: &str) -> String {
    if account == OWN_ACCOUNT {
        name.to_string()
    } else {
        format!("{account}/{name}")
    }
}

/// The names of `account`'s clusters among `clusters` (kept as [`scoped`] says).
fn of_account(clusters: &[String], account: &str) -> Vec<String> {
    clusters
        .iter()
        .filter_map(|c| match c.split_once('/') {
            Some((a, name)) if a == account => Some(name.to_string()),
            None if account == OWN_ACCOUNT => Some(c.clone()),
            _ => None,
        })
        .collect()
}

/// The operation a request's method and path segments name, with its cluster and principal.
fn operation_of<'a>(
    method: &Method,
    parts: &[&'a str],
) -> (&'static str, Option<&'a str>, Option<&'a str>) {
    match (method.as_str(), parts) {
        ("GET", ["clusters"]) => ("ListClusters", None, None),
        ("GET", ["clusters", c]) => ("DescribeCluster", Some(*c), None),
        ("POST", ["clusters", c, "access-entries"]) => ("CreateAccessEntry", Some(*c), None),
        ("GET", ["clusters", c, "access-entries", p]) => {
            ("DescribeAccessEntry", Some(*c), Some(*p))
        }
        ("POST", ["clusters", c, "access-entries", p]) => ("UpdateAccessEntry", Some(*c), Some(*p)),
        ("GET", ["clusters", c, "access-entries", p, "access-policies"]) => {
            ("ListAssociatedAccessPolicies", Some(*c), Some(*p))
        }
        _ => ("Unknown", None, None),
    }
}

fn answer(
    state: &Mutex<State>,
    (account, access_key): (&str, Option<String>),
    method: &Method,
    uri: &Uri,
    body: &[u8],
) -> Response {
    let segments: Vec<String> = uri
        .path()
        .trim_start_matches('/')
        .split('/')
        .map(decode)
        .collect();
    let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let parts: Vec<&str> = segments.iter().map(String::as_str).collect();
    let (operation, cluster, principal) = operation_of(method, &parts);
    let mut state = state.lock().unwrap();
    state.requests.push(EksRequest {
        account: account.to_string(),
        access_key,
        operation,
        method: method.to_string(),
        path: format!("/{}", segments.join("/")),
        cluster: cluster.map(str::to_string),
        body: body.clone(),
    });
    if let Some(c) = cluster
        && !state.clusters.iter().any(|k| *k == scoped(account, c))
    {
        return error(
            StatusCode::NOT_FOUND,
            "ResourceNotFoundException",
            &format!("No cluster found for name: {c}."),
        );
    }
    let name = cluster.unwrap_or_default().to_string();
    // The fake's own key of the cluster (`<account>/<name>` for another account's).
    let cluster = scoped(account, &name);
    let text = |field: &str| body[field].as_str().unwrap_or_default().to_string();
    let groups = |body: &Value| -> Vec<String> {
        body["kubernetesGroups"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|g| g.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    match operation {
        "ListClusters" => ok(json!({"clusters": of_account(&state.clusters, account)})),
        "DescribeCluster" => ok(json!({"cluster": {
            "name": name,
            "arn": format!("arn:aws:eks:us-east-1:{account}:cluster/{name}"),
            "endpoint": state.endpoints.get(&cluster),
            "certificateAuthority": {"data": ""},
            "status": "ACTIVE",
            "version": "1.33"
        }})),
        "CreateAccessEntry" => {
            let key = (cluster.clone(), text("principalArn"));
            if state.entries.contains_key(&key) {
                return error(
                    StatusCode::CONFLICT,
                    "ResourceInUseException",
                    "The specified access entry resource is already in use on this cluster.",
                );
            }
            state.entries.insert(key.clone(), groups(&body));
            ok(entry_json(&name, &key.1, &groups(&body)))
        }
        "ListAssociatedAccessPolicies" => {
            associated(&state, &cluster, principal.unwrap_or_default())
        }
        "DescribeAccessEntry" | "UpdateAccessEntry" => {
            let key = (cluster.clone(), principal.unwrap_or_default().to_string());
            let Some(existing) = state.entries.get(&key).cloned() else {
                return error(
                    StatusCode::NOT_FOUND,
                    "ResourceNotFoundException",
                    "The specified principalArn could not be found. You can view your available \
                     access entries with 'list-access-entries'.",
                );
            };
            if operation == "DescribeAccessEntry" {
                return ok(entry_json(&name, &key.1, &existing));
            }
            state.entries.insert(key.clone(), groups(&body));
            ok(entry_json(&name, &key.1, &groups(&body)))
        }
        _ => error(
            StatusCode::BAD_REQUEST,
            "InvalidRequestException",
            &format!(
                "{method} {} is not an operation this fake serves",
                uri.path()
            ),
        ),
    }
}

/// `sdk` with its EKS calls sent to `eks_url` (as `AWS_ENDPOINT_URL_EKS` would: a service's
/// own endpoint before the configuration's), every other service's where they were.
pub fn with_eks(sdk: &aws_config::SdkConfig, eks_url: &str) -> aws_config::SdkConfig {
    sdk.clone()
        .into_builder()
        .service_config(EksEndpoint(eks_url.to_string()))
        .build()
}

/// The EKS endpoint of [`with_eks`].
#[derive(Debug)]
struct EksEndpoint(String);

impl aws_types::service_config::LoadServiceConfig for EksEndpoint {
    fn load_config(&self, key: aws_types::service_config::ServiceConfigKey<'_>) -> Option<String> {
        (key.service_id() == "EKS" && key.profile() == "endpoint_url").then(|| self.0.clone())
    }
}
