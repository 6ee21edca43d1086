//! The connection to the API server: kubeconfig inference, or EKS with an IAM token.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::adapters::clock::SystemClock;

use ::kube::config::{KubeConfigOptions, Kubeconfig};
use aws_config::SdkConfig;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use k8s_openapi::api::core::v1::Node;
use tokio::sync::Mutex;

use super::api::rate_limit::{Lane, RateLimiter};
use super::eks::{TOKEN_CACHE_LIFETIME, eks_token};
use crate::adapters::accounts::Accounts;
use crate::adapters::aws::{AwsError, AwsSettings, call_error};
use crate::adapters::backoff::ClockSleeper;
use crate::domain::clusters::{ClusterId, Place};
use crate::ports::{BoxError, Clock, FailureKind, PortError, Work, span};

/// forewarn's share of each API server, across every execution environment of a function:
/// requests per second, and burst. The deployed default of the client-side limit is this
/// divided by the function's execution environments (the settings'); the benchmarks assume
/// the same.
pub const KUBE_SHARE: (f64, u32) = (200.0, 20);

/// Timeouts of forewarn's clients: a call that hangs fails (and the event comes back) well
/// within a Lambda invocation.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const READ_TIMEOUT: Duration = Duration::from_secs(30);
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// How forewarn reaches the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterAccess {
    /// kube's standard inference: `$KUBECONFIG` or `~/.kube/config`, else in-cluster.
    Kubeconfig,
    /// The context of this name in the kubeconfig (`$KUBECONFIG` or `~/.kube/config`): one of
    /// several clusters served, each reached through the context named after it.
    Context(String),
    /// EKS, authenticated with an IAM token (the Lambda case).
    Eks(EksAccess),
}

/// An EKS cluster (its endpoint and CA come from `DescribeCluster`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EksAccess {
    pub cluster: String,
    /// The region the token is signed for (and `DescribeCluster` asked in); the AWS
    /// configuration's when not set.
    pub region: Option<String>,
}

/// A connection to the EKS cluster `cluster` that could not be made: `source`, of kind `kind`.
fn eks_error(cluster: &str, kind: FailureKind, source: impl Into<BoxError>) -> PortError {
    PortError::new(format!("EKS cluster {cluster}"), kind, source)
}

/// A Kubernetes client that could not be built from its configuration.
fn client_error(e: ::kube::Error) -> PortError {
    PortError::new("building the Kubernetes client", FailureKind::Invalid, e)
}

/// A source of `kube::Client`s: one fixed client, or (EKS) a client whose token is made anew
/// when the cached one is about to expire. Cheap to clone.
#[derive(Clone)]
pub struct ClusterClient {
    inner: Arc<Inner>,
    /// Nodes the node directory has just read, for the cordon pass to use instead of reading
    /// them again (see [`ClusterClient::take_recent_node`]).
    recent: Arc<std::sync::Mutex<RecentNodes>>,
    /// The clock every wait and every "now" of the adapter comes from (the system's unless
    /// [`ClusterClient::with_clock`] says otherwise).
    clock: Arc<dyn Clock>,
    /// The client-side rate limit of every request made through this client and its clones
    /// (see [`ClusterClient::with_rate_limit`]); `None`: no limit.
    limiter: Option<Arc<RateLimiter>>,
    /// The lane of the client's requests under the rate limit ([`Lane::Later`]: every request
    /// of the work it is used for, see [`ClusterClient::in_lane`]).
    lane: Lane,
    /// The work the client is used for: when it must be over, if it must, and whether it rides
    /// out no outage (see [`ClusterClient::for_work`]).
    pub(crate) work: Work,
}

type RecentNodes = HashMap<String, (DateTime<Utc>, Node)>;

/// How long a node read by the directory may stand in for a fresh read.
const RECENT_NODE: Duration = Duration::from_secs(10);

enum Inner {
    Fixed(::kube::Client),
    Eks(Box<EksClients>),
}

/// EKS: clients for `base` (endpoint and CA, no credentials) carrying a token for `cluster`
/// signed in `region` with `credentials`, each token used for [`TOKEN_CACHE_LIFETIME`] at most and
/// never past the credentials' expiry.
struct EksClients {
    base: ::kube::Config,
    cluster: String,
    region: String,
    credentials: SharedCredentialsProvider,
    cached: Mutex<Option<(::kube::Client, DateTime<Utc>)>>,
}

impl std::fmt::Debug for ClusterClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.inner {
            Inner::Fixed(_) => f.write_str("ClusterClient::Fixed"),
            Inner::Eks(e) => {
                let (cluster, region, url) = (&e.cluster, &e.region, &e.base.cluster_url);
                write!(f, "ClusterClient::Eks({cluster}, {region}, {url})")
            }
        }
    }
}

impl ClusterClient {
    /// Keeps `node`, just read, for [`ClusterClient::take_recent_node`]; entries older than
    /// a few seconds are dropped.
    pub(crate) fn remember_node(&self, node: &Node) {
        let Some(name) = node.metadata.name.clone() else {
            return;
        };
        let now = self.clock.now();
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        recent.retain(|_, (at, _)| now - *at < span(RECENT_NODE));
        recent.insert(name, (now, node.clone()));
    }

    /// The node `name` as the directory read it a few seconds ago at most, taken (used once).
    /// A write based on it carries its `resourceVersion`, so a change since answers 409 and the
    /// node is read again.
    pub(crate) fn take_recent_node(&self, name: &str) -> Option<Node> {
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let (at, node) = recent.remove(name)?;
        (self.clock.now() - at < span(RECENT_NODE)).then_some(node)
    }

    /// The same clients, with every wait and "now" taken from `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> ClusterClient {
        self.clock = clock;
        self
    }

    /// The adapter's clock.
    pub fn clock(&self) -> &dyn Clock {
        self.clock.as_ref()
    }

    /// Always this client (kubeconfig, in-cluster, tests).
    pub fn new(client: ::kube::Client) -> ClusterClient {
        ClusterClient::of(Inner::Fixed(client))
    }

    fn of(inner: Inner) -> ClusterClient {
        ClusterClient {
            inner: Arc::new(inner),
            recent: Arc::default(),
            clock: SystemClock::shared(),
            limiter: None,
            lane: Lane::First,
            work: Work::default(),
        }
    }

    /// The same clients under a client-side rate limit of their own: `qps` requests per second
    /// on average, `burst` at once (as the settings say; the
    /// wiring sets it from the settings), shared by every clone of the result — every request
    /// the process makes when its clients are clones of one. A 429 with `Retry-After` then also
    /// holds back every request under the limit until it has passed. `None`: no limit. (A
    /// benchmark that plays several Lambda execution environments in one process gives each its
    /// own client, each with a limit of its own, as each environment has in Lambda.)
    pub fn with_rate_limit(mut self, limit: Option<(f64, u32)>) -> ClusterClient {
        self.limiter = limit.map(|(qps, burst)| Arc::new(RateLimiter::new(qps, burst)));
        self
    }

    /// The same clients for `work`: its deadline (a Lambda invocation's deadline less its margin:
    /// their calls retry transient failures until then instead of giving up after a few
    /// attempts, see [`super::api::retry::with_retry`]; `None`: no deadline is known, a
    /// replay, the command line, and calls keep their few attempts), and whether it
    /// rides out an outage ([`Work::fail_fast`]: when not, a failure of the API
    /// server is not retried — the event comes back instead — while a throttle is still waited).
    pub fn for_work(&self, work: Work) -> ClusterClient {
        ClusterClient {
            work,
            ..self.clone()
        }
    }

    /// The same clients with every request in `lane`: [`Lane::Later`] for a drain's passes,
    /// whose pod lists, evictions, placeholders, node reads and Events must not go before other
    /// nodes' cordons.
    pub(crate) fn in_lane(&self, lane: Lane) -> ClusterClient {
        ClusterClient {
            lane,
            ..self.clone()
        }
    }

    /// Waits for the client's rate limit (if any) before a request goes out, in the client's
    /// lane. Every request to the API server calls it once per attempt.
    pub(crate) async fn throttle(&self) {
        if let Some(limiter) = &self.limiter {
            limiter.wait(self.clock(), self.lane).await;
        }
    }

    /// The idle turn of the client's rate limit (see
    /// [`super::api::rate_limit::RateLimiter::idle_turn`]), waited for until `until` at the
    /// latest, for a request that may be given up (a pod's Event): `false` when it is to be given
    /// up. Without a limit, always `true`.
    pub(crate) async fn idle_turn(&self, until: DateTime<Utc>) -> bool {
        match &self.limiter {
            Some(limiter) => limiter.idle_turn(self.clock(), until).await,
            None => true,
        }
    }

    /// The requests the client's rate limit lets out at once now (see
    /// [`super::api::rate_limit::RateLimiter::free`]); `None`: no limit.
    pub(crate) fn free_requests(&self) -> Option<f64> {
        Some(self.limiter.as_ref()?.free(self.clock.now()))
    }

    /// A `Retry-After` seen by one request holds back every request under the client's rate
    /// limit (when it has one) for `after`.
    pub(crate) fn pause_all(&self, after: Duration) {
        if let Some(limiter) = &self.limiter {
            limiter.pause_until(self.clock.now() + span(after));
        }
    }

    /// The retries' sleeper: the client's clock.
    pub(crate) fn sleeper(&self) -> ClockSleeper {
        ClockSleeper(Arc::clone(&self.clock))
    }

    /// A client to send requests with now (for EKS, with a token valid for a while yet).
    pub async fn client(&self) -> Result<::kube::Client, PortError> {
        match &*self.inner {
            Inner::Fixed(client) => Ok(client.clone()),
            Inner::Eks(eks) => eks.client(self.clock.now()).await,
        }
    }
}

impl EksClients {
    async fn client(&self, now: DateTime<Utc>) -> Result<::kube::Client, PortError> {
        let mut cached = self.cached.lock().await;
        if let Some((client, until)) = cached.as_ref()
            && now < *until
        {
            return Ok(client.clone());
        }
        // Fetching credentials or signing a token may pass.
        let credentials = self.credentials.provide_credentials().await.map_err(|e| {
            eks_error(&self.cluster, FailureKind::Unknown, AwsError(e.into()))
                .doing("AWS credentials")
        })?;
        let signed_at = std::time::SystemTime::from(now);
        let token = eks_token(&self.cluster, &self.region, &credentials, signed_at)
            .map_err(|e| PortError::new("EKS token", FailureKind::Unknown, e))?;
        // A token is good for the cache lifetime, and not past the credentials' expiry.
        let left = (credentials.expiry()).map(|e| e.duration_since(signed_at).unwrap_or_default());
        let lifetime = TOKEN_CACHE_LIFETIME.min(left.unwrap_or(Duration::MAX));
        let mut config = self.base.clone();
        config.auth_info.token = Some(token.into());
        let client = ::kube::Client::try_from(config).map_err(client_error)?;
        tracing::debug!(cluster = %self.cluster, ?lifetime, "made a new EKS token");
        *cached = Some((client.clone(), now + span(lifetime)));
        Ok(client)
    }
}

/// Who requests are sent as when not the credentials' own identity: the API server's
/// impersonation (`Impersonate-User`, `Impersonate-Group` headers), which the credentials'
/// identity must be granted (`impersonate` on users and groups). `forewarn check --kube` sends
/// its dry runs as each of forewarn's groups this way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Impersonation {
    pub user: String,
    pub groups: Vec<String>,
}

/// Connects as `access` says, every request sent as `identity` when one is given. For EKS the
/// AWS configuration (region, credentials) is loaded from the environment, as the SDK does, with
/// `aws` (the settings'). The client-side rate limit is set apart
/// ([`ClusterClient::with_rate_limit`]; the wiring does it from the settings).
///
/// A connection that cannot be made fails with its kind: a configuration that cannot work (no
/// kubeconfig, a bad endpoint or CA, no region or credentials provider) is
/// [`FailureKind::Invalid`], not retried; `DescribeCluster` says its own; a cluster without an
/// endpoint may be still being created ([`FailureKind::Unavailable`]); fetching credentials or
/// signing a token may pass ([`FailureKind::Unknown`]).
#[tracing::instrument(skip_all, err)]
pub async fn connect(
    access: &ClusterAccess,
    aws: AwsSettings,
    identity: Option<&Impersonation>,
) -> Result<ClusterClient, PortError> {
    let mut config = match access {
        ClusterAccess::Kubeconfig => ::kube::Config::infer().await.map_err(|e| {
            let none = "no Kubernetes configuration found (KUBECONFIG, ~/.kube/config, in-cluster)";
            PortError::new(none, FailureKind::Invalid, e)
        })?,
        ClusterAccess::Context(name) => {
            let options = KubeConfigOptions {
                context: Some(name.clone()),
                ..KubeConfigOptions::default()
            };
            let config = ::kube::Config::from_kubeconfig(&options).await;
            config.map_err(|source| {
                PortError::new(format!("cluster {name}"), FailureKind::Invalid, source)
                    .doing("the kubeconfig (KUBECONFIG, ~/.kube/config)")
            })?
        }
        ClusterAccess::Eks(eks) => {
            return connect_eks(eks, &crate::adapters::aws::load(aws).await, identity).await;
        }
    };
    tune(&mut config, identity);
    let client = ::kube::Client::try_from(config).map_err(client_error)?;
    Ok(ClusterClient::new(client))
}

/// Whether the kubeconfig (`KUBECONFIG`, else `~/.kube/config`) has a context named `name`
/// (false when there is no kubeconfig to read).
pub fn has_context(name: &str) -> bool {
    Kubeconfig::read().is_ok_and(|k| k.contexts.iter().any(|c| c.name == name))
}

/// Every context of the kubeconfig (`KUBECONFIG`, else `~/.kube/config`): the clusters of
/// every cluster served (`*`) when a kubeconfig is given (tests, self-managed clusters). A context
/// named `name` is a cluster of the own place; one named `account/region/name` (or
/// `account/name`) of that place; seen from a deployment whose own account and region are the
/// place it holds.
#[derive(Debug, Clone, Default)]
pub struct KubeconfigContexts(pub Place);

#[async_trait::async_trait]
impl crate::ports::ClusterCatalog for KubeconfigContexts {
    async fn clusters(&self, place: &Place) -> Result<Vec<String>, PortError> {
        let kubeconfig = Kubeconfig::read()
            .map_err(|e| PortError::new("kubeconfig", FailureKind::Invalid, e))?;
        Ok(kubeconfig
            .contexts
            .into_iter()
            .filter_map(|c| ClusterId::parse(&c.name).ok())
            .filter(|id| id.place.or(&self.0) == place.or(&self.0))
            .map(|id| id.name)
            .collect())
    }
}

/// Every EKS cluster of an account and region (`ListClusters`, every page, with that account's
/// credentials from the accounts it holds: the member role's for a member account): the clusters
/// of `*` served.
#[derive(Debug, Clone)]
pub struct EksClusters(pub Accounts);

impl EksClusters {
    /// The clusters of the account and region of `sdk`.
    pub async fn of(sdk: &SdkConfig) -> Result<Vec<String>, PortError> {
        let client = aws_sdk_eks::Client::new(sdk);
        let names = client.list_clusters().into_paginator().items().send();
        let names = names.collect::<Result<Vec<String>, _>>().await;
        names.map_err(|e| call_error("eks", e))
    }
}

#[async_trait::async_trait]
impl crate::ports::ClusterCatalog for EksClusters {
    async fn clusters(&self, place: &Place) -> Result<Vec<String>, PortError> {
        let sdk = self.0.config_for(place).await;
        EksClusters::of(&sdk.map_err(|e| e.for_lookup("eks"))?).await
    }
}

/// Connects to an EKS cluster with this AWS configuration's region and credentials, every
/// request sent as `identity` when one is given (its errors: see [`connect`]).
#[tracing::instrument(skip_all, fields(cluster = %access.cluster), err)]
pub async fn connect_eks(
    access: &EksAccess,
    sdk: &SdkConfig,
    identity: Option<&Impersonation>,
) -> Result<ClusterClient, PortError> {
    let cluster = access.cluster.clone();
    let missing = |what: &str| eks_error(&cluster, FailureKind::Invalid, what.to_string());
    let region = access
        .region
        .clone()
        .or_else(|| sdk.region().map(|r| r.to_string()))
        .ok_or_else(|| missing("no AWS region configured (AWS_REGION)"))?;
    let credentials = sdk
        .credentials_provider()
        .ok_or_else(|| missing("no AWS credentials provider configured"))?;
    let eks = aws_sdk_eks::Client::new(sdk);
    let described = eks.describe_cluster().name(&cluster).send().await;
    let described =
        described.map_err(|e| call_error(format!("EKS DescribeCluster {cluster}"), e))?;
    let found = described.cluster();
    let endpoint = found.and_then(|c| c.endpoint()).ok_or_else(|| {
        let why = "the cluster has no endpoint (is it still being created?)";
        eks_error(&cluster, FailureKind::Unavailable, why)
    })?;
    let ca = found.and_then(|c| c.certificate_authority()?.data());
    let eks = EksClients {
        base: base_config(&cluster, endpoint, ca, identity).await?,
        cluster,
        region,
        credentials,
        cached: Mutex::default(),
    };
    Ok(ClusterClient::of(Inner::Eks(Box::new(eks))))
}

/// The kube configuration of an endpoint and CA (base64 PEM), without credentials, tuned (see
/// [`tune`]).
pub(crate) async fn base_config(
    cluster: &str,
    endpoint: &str,
    ca_base64: Option<&str>,
    identity: Option<&Impersonation>,
) -> Result<::kube::Config, PortError> {
    let failed = |source: ::kube::config::KubeconfigError| {
        eks_error(cluster, FailureKind::Invalid, source)
            .doing("bad endpoint or certificate authority")
    };
    // One cluster, and one user without credentials (JSON is YAML: every value is escaped).
    let kubeconfig = serde_json::json!({
        "clusters": [{"name": cluster,
            "cluster": {"server": endpoint, "certificate-authority-data": ca_base64}}],
        "users": [{"name": "forewarn", "user": {}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": "forewarn"}}],
        "current-context": cluster,
    });
    let kubeconfig = Kubeconfig::from_yaml(&kubeconfig.to_string()).map_err(failed)?;
    let options = KubeConfigOptions::default();
    let config = ::kube::Config::from_custom_kubeconfig(kubeconfig, &options).await;
    let mut config = config.map_err(failed)?;
    tune(&mut config, identity);
    Ok(config)
}

/// forewarn's clients: kube's retry layer off (it retries 429s, eviction refusals included, for
/// minutes; forewarn retries itself, within the drain deadline), bounded timeouts, and every
/// request sent as `identity` when one is given.
fn tune(config: &mut ::kube::Config, identity: Option<&Impersonation>) {
    config.default_retry = false;
    if let Some(identity) = identity {
        config.auth_info.impersonate = Some(identity.user.clone());
        config.auth_info.impersonate_groups = Some(identity.groups.clone());
    }
    for (timeout, most) in [
        (&mut config.connect_timeout, CONNECT_TIMEOUT),
        (&mut config.read_timeout, READ_TIMEOUT),
        (&mut config.write_timeout, WRITE_TIMEOUT),
    ] {
        *timeout = Some(timeout.map_or(most, |t| t.min(most)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn base_config_reads_the_ca_and_turns_kube_retries_off() {
        // A throwaway self-signed certificate (any valid PEM certificate will do).
        let pem = include_str!("testdata/ca.pem");
        let ca = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, pem);
        let config = base_config("demo", "https://demo.example.com", Some(&ca), None)
            .await
            .unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://demo.example.com/");
        assert_eq!(config.root_cert.as_ref().map(Vec::len), Some(1));
        assert!(!config.default_retry);
        assert_eq!(config.read_timeout, Some(READ_TIMEOUT));
        assert!(config.auth_info.token.is_none());
        let bad = base_config(
            "demo",
            "https://demo.example.com",
            Some("not base64!"),
            None,
        )
        .await;
        let bad = bad.unwrap_err();
        assert_eq!(bad.kind, FailureKind::Invalid);
        let text = "EKS cluster demo: bad endpoint or certificate authority: ";
        assert!(bad.to_string().starts_with(text), "{bad}");
    }

    #[tokio::test]
    async fn a_configuration_that_cannot_work_is_not_retried() {
        let access = EksAccess {
            cluster: "demo".into(),
            ..EksAccess::default()
        };
        let no_region = connect_eks(&access, &SdkConfig::builder().build(), None).await;
        let no_region = no_region.unwrap_err();
        assert_eq!(
            no_region.to_string(),
            "EKS cluster demo: no AWS region configured (AWS_REGION)"
        );
        assert!(!no_region.kind.retryable());
    }
}
