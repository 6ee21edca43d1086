//! The one place that builds forewarn's services from its [`Settings`]: both Lambda functions
//! (once per cold start) and the `forewarn` command call [`services_with_clock`]. The AWS SDK
//! configuration is loaded at most once per call, with one retry policy for every client
//! ([`crate::adapters::aws::load`]), and only when a service needs AWS.

use std::sync::Arc;

use crate::adapters::accounts::Accounts;
use crate::adapters::autoscaling::{AsgLifecycle, AsgNodeGroups};
use crate::adapters::aws::{self, AwsSettings};
use crate::adapters::clock::SystemClock;
use crate::adapters::dynamo::{DynamoStore, SecretKeys};
use crate::adapters::ec2::Ec2Directory;
use crate::adapters::elb::ElbTargets;
use crate::adapters::embedded::EmbeddedStore;
use crate::adapters::kube::{
    ClusterAccess, EksClusters, KubeExecutor, KubePolicy, KubeconfigContexts, connect, connect_eks,
};
use crate::adapters::read_only::ReadOnlyStore;
use crate::adapters::snapshot::{
    SnapshotInstances, SnapshotWorkloads, load_cluster_state, load_groups, load_instances,
    load_workloads,
};
use crate::adapters::sqs::SqsRedelivery;
use crate::adapters::upkeep::live_cluster;
use crate::adapters::webhook::{ClientError, Webhook};
use crate::adapters::workloads::KubeWorkloads;
use crate::app::audit::WorkloadSource;
use crate::app::fleet::{Cluster, Connector, Fleet, unreachable};
use crate::app::handler::Handler;
use crate::app::leaving::LeavingInstances;
use crate::app::pipeline::{PASS_INTERVAL, Passes, Traffic};
use crate::app::policy::PolicyCache;
use crate::app::priorities::NodeGroupSource;
use crate::app::settings::ConfigError;
use crate::app::settings::{
    ClusterChoice, ClusterSelection, InstanceChoice, Settings, StoreChoice,
};
use crate::app::sweeper::{SweepPriorities, Sweeper};
use crate::domain::clusters::{ClusterId, Place};
use crate::domain::config::Mode;
use crate::domain::inbound::continuation::Tenant;
use crate::ports::{
    Clock, ClusterCatalog, ContinuationQueue, InstanceDirectory, Notifier, PoolStore, PortError,
    Redelivery,
};

/// The services could not be set up (a cold start fails loudly rather than drop events).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] PortError),
    #[error(transparent)]
    Snapshot(#[from] crate::adapters::snapshot::SnapshotError),
    #[error("connecting to the cluster: {0}")]
    Cluster(#[source] PortError),
    #[error(
        "connecting to the cluster: no cluster to read: give a live cluster or a captured state"
    )]
    NoCluster,
    #[error("setting up the webhook: {0}")]
    Webhook(#[source] ClientError),
}

/// Everything a run talks through, built from [`Settings`]: the handler (store, directories,
/// executor, notifier, redelivery) and what the sweeper needs besides.
pub struct Services {
    pub handler: Handler,
    /// EC2, for the sweeper's leaving instances (`None` when no AWS configuration was needed).
    pub leaving: Option<Arc<dyn LeavingInstances>>,
    /// The AWS region, when an AWS configuration was loaded.
    pub region: Option<String>,
    /// Auto Scaling, for the node groups (`None` when no AWS configuration was needed).
    pub node_groups: Option<Arc<dyn NodeGroupSource>>,
}

/// Builds the services `settings` describe:
///
/// - the pool store (DynamoDB or embedded), read only in [`Mode::DryRun`];
/// - the instance directory: a capture, EC2, or none;
/// - the clusters served ([`Fleet`]), each with its nodes and executor: a captured cluster
///   (never acted on), live clusters (the executor writes only in [`Mode::Act`]; in
///   [`Mode::Plan`] there is none), or none;
/// - the webhook notifier, when configured;
/// - the process's client-side Kubernetes rate limit.
///
/// Every "now" and every wait is taken from `clock` (the system clock; a test's, `forewarn
/// replay --now`).
pub async fn services_with_clock(
    settings: &Settings,
    clock: Arc<dyn Clock>,
) -> Result<Services, SetupError> {
    let needs_aws = matches!(settings.store, StoreChoice::Dynamo { .. })
        || settings.instances == InstanceChoice::Ec2
        || matches!(settings.cluster, ClusterChoice::Live(_));
    let sdk = if needs_aws {
        Some(aws::load(settings.aws).await)
    } else {
        None
    };
    // Boxed: the functions' main futures stay within the compiler's layout depth.
    Box::pin(services_on(settings, sdk, clock)).await
}

/// [`services_with_clock`] over the AWS configuration `sdk` (`None`: no AWS at all), as given
/// rather than loaded from the environment (the tests' moto).
pub async fn services_on(
    settings: &Settings,
    sdk: Option<aws_config::SdkConfig>,
    clock: Arc<dyn Clock>,
) -> Result<Services, SetupError> {
    let store = store(
        &settings.store,
        settings.mode,
        sdk.as_ref(),
        settings.aws,
        clock.clone(),
    )
    .await?;
    // One view of the accounts for every service: each member account's role is assumed once.
    let accounts = sdk
        .as_ref()
        .map(|sdk| Accounts::new(sdk, settings.accounts.clone()));
    let aws = sdk.as_ref().zip(accounts.as_ref());
    let instances: Arc<dyn InstanceDirectory> = match (&settings.instances, aws) {
        (InstanceChoice::File(path), _) => Arc::new(SnapshotInstances(load_instances(path)?)),
        (InstanceChoice::Ec2, Some((sdk, accounts))) => {
            Arc::new(Ec2Directory::from_conf(sdk).with_accounts(accounts.clone()))
        }
        // No instance facts at all: an empty capture.
        _ => Arc::new(SnapshotInstances::default()),
    };
    let fleet = fleet(settings, aws, &clock, &store).await?;
    let traffic = traffic(settings, aws, &clock);
    let notifier = notifier(settings)?;
    let sqs = sdk
        .as_ref()
        .map(|sdk| Arc::new(SqsRedelivery(aws_sdk_sqs::Client::new(sdk))));
    // `off`: the passes run in process.
    let queue = sqs
        .clone()
        .filter(|_| settings.drain_pass_interval.is_some());
    let queue = queue.map(|q| q as Arc<dyn ContinuationQueue>);
    let several = fleet.several();
    let handler = Handler {
        config: settings.config.clone(),
        mode: settings.mode,
        store,
        instances,
        fleet,
        notifier,
        redelivery: sqs.clone().map(|q| q as Arc<dyn Redelivery>),
        passes: Passes {
            interval: settings.drain_pass_interval.unwrap_or(PASS_INTERVAL),
            // With continuations queued, budget refusals are also retried from here.
            kept: queue.is_some().then(Arc::default),
            queue,
            tenant: tenant_of(settings),
        },
        clock,
        concurrency: settings.concurrency,
        takes_per_cluster: crate::app::fleet::triage::takes(settings.kube_rate_limit, several),
        safety_margin: crate::app::settings::SAFETY_MARGIN,
        // Logs only: a Lambda function's main sets its metrics (see `telemetry::init_json`).
        telemetry: Default::default(),
        traffic,
    };
    Ok(Services {
        handler,
        // In each cluster's own account and region (the sweeper's member role is read-only).
        leaving: aws.map(|(sdk, accounts)| {
            Arc::new(Ec2Directory::from_conf(sdk).with_accounts(accounts.clone()))
                as Arc<dyn LeavingInstances>
        }),
        region: sdk.as_ref().and_then(|s| s.region()).map(|r| r.to_string()),
        // Each cluster's in its own account and region.
        node_groups: aws.map(|(sdk, accounts)| {
            Arc::new(AsgNodeGroups::new(sdk).with_accounts(accounts.clone()))
                as Arc<dyn NodeGroupSource>
        }),
    })
}

/// Where drains' instances leave their load balancers: Elastic Load Balancing, in each event's
/// account and region, when instances come from EC2 and live clusters are acted on (and the
/// budget is not `off`).
fn traffic(settings: &Settings, aws: Aws<'_>, clock: &Arc<dyn Clock>) -> Option<Traffic> {
    let live = matches!(settings.cluster, ClusterChoice::Live(_))
        && settings.instances == InstanceChoice::Ec2
        && settings.mode == Mode::Act;
    let (Some((sdk, accounts)), Some(budget), true) = (aws, settings.deregister_budget, live)
    else {
        return None;
    };
    let balancers = ElbTargets::from_conf(sdk, clock.clone()).with_accounts(accounts.clone());
    let balancers = Arc::new(balancers);
    Some(Traffic { balancers, budget })
}

/// The clusters the settings serve: a capture (one cluster, never acted on); live clusters
/// (`sdk` given) — one connected now (a cold start fails loudly when it cannot be), or several
/// (the clusters setting), each connected when first needed (a list is tried at once, its
/// failures logged: a cluster down at a cold start fails only its own records); or none.
async fn fleet(
    settings: &Settings,
    aws: Aws<'_>,
    clock: &Arc<dyn Clock>,
    store: &Arc<dyn PoolStore>,
) -> Result<Fleet, SetupError> {
    let own = own_place(settings, aws.map(|(sdk, _)| sdk));
    let lone = settings.clusters.lone();
    let lone_id = lone.flatten().cloned();
    let (access, (sdk, accounts)) = match (&settings.cluster, aws) {
        (ClusterChoice::Snapshot(path), _) => {
            let state = load_cluster_state(path)?;
            return Ok(Fleet::one(Cluster::new(lone_id, Arc::new(state))).at(own));
        }
        (ClusterChoice::Live(access), Some(aws)) => (access, aws),
        _ => return Ok(Fleet::one(Cluster::none()).at(own)),
    };
    let live = LiveClusters {
        settings: settings.clone(),
        sdk: sdk.clone(),
        accounts: accounts.clone(),
        clock: clock.clone(),
        store: store.clone(),
    };
    // One cluster of the own place: connected now, as the settings reach it.
    let own_lone = lone.is_some_and(|id| id.is_none_or(|id| id.place == Place::default()));
    if own_lone {
        let cluster = live
            .build(lone_id.map(|id| id.or(&own)), access)
            .await
            .map_err(SetupError::Cluster)?;
        return Ok(Fleet::one(cluster).at(own));
    }
    let connector = Arc::new(live);
    Ok(match &settings.clusters {
        ClusterSelection::Every { places, also } => {
            let catalog: Arc<dyn ClusterCatalog> = if settings.kubeconfig_given {
                Arc::new(KubeconfigContexts(own.clone()))
            } else {
                Arc::new(EksClusters(accounts.clone()))
            };
            Fleet::many(Some((catalog, places.clone())), also.clone(), connector).at(own)
        }
        ClusterSelection::Named(ids) => {
            let fleet = Fleet::many(None, ids.clone(), connector).at(own);
            let tries = ids.iter().map(|n| fleet.cluster(Some(n)));
            for failed in futures::future::join_all(tries)
                .await
                .into_iter()
                .filter_map(Result::err)
            {
                tracing::error!(error = %failed, "a served cluster cannot be reached: its events fail until it can");
            }
            fleet
        }
        ClusterSelection::Unnamed => Fleet::one(Cluster::none()).at(own),
    })
}

/// Connects to live clusters, each with services of its own: a client with its own rate limit
/// (and so its own retry budget), the executor, the policy ConfigMap, the expander.
struct LiveClusters {
    settings: Settings,
    sdk: aws_config::SdkConfig,
    /// The accounts lifecycle actions are completed in (each event's own).
    accounts: Accounts,
    clock: Arc<dyn Clock>,
    store: Arc<dyn PoolStore>,
}

impl LiveClusters {
    /// The services of the cluster `id`, reached as `access` says: an EKS cluster through
    /// `DescribeCluster` and an IAM token in its own account (the member role's credentials
    /// for a member account's) and region.
    async fn build(
        &self,
        id: Option<ClusterId>,
        access: &ClusterAccess,
    ) -> Result<Cluster, PortError> {
        let settings = &self.settings;
        // One client, cloned into every adapter over it: one rate limit for the cluster.
        let clients = match access {
            ClusterAccess::Eks(eks) => {
                let place = id.as_ref().map(|id| id.place.clone()).unwrap_or_default();
                let sdk = self.accounts.config_for(&place).await.map_err(|e| {
                    PortError::new(format!("EKS cluster {}", eks.cluster), e.kind(), e)
                })?;
                connect_eks(eks, &sdk, None).await
            }
            other => connect(other, settings.aws, None).await,
        }?
        .with_clock(self.clock.clone())
        .with_rate_limit(settings.kube_rate_limit);
        let executor = settings.mode.runs_actions().then(|| {
            Arc::new(
                KubeExecutor::new(clients.clone(), &settings.config)
                    .with_settings(settings.executor.clone())
                    .with_lifecycle(Arc::new(
                        AsgLifecycle::new(&self.sdk).with_accounts(self.accounts.clone()),
                    ))
                    .with_keys(self.store.clone())
                    .dry_run(!settings.mode.writes_cluster()),
            )
        });
        let policy = KubePolicy::new(clients.clone(), &settings.executor.reporting_instance);
        let policies = Arc::new(PolicyCache::new(
            Arc::new(policy),
            settings.config.policy.clone(),
            settings.policy_allow.clone(),
        ));
        Ok(Cluster {
            policies: Some(policies),
            ..live_cluster(id, clients, executor)
        })
    }
}

#[async_trait::async_trait]
impl Connector for LiveClusters {
    async fn connect(&self, id: &ClusterId) -> Result<Cluster, PortError> {
        let access = self
            .settings
            .access_of(id, &own_place(&self.settings, Some(&self.sdk)));
        let built = self.build(Some(id.clone()), &access).await;
        built.map_err(|e| unreachable(id, e.kind, e))
    }
}

/// The AWS configuration and the accounts' view over it (`None`: no AWS at all).
type Aws<'a> = Option<(&'a aws_config::SdkConfig, &'a Accounts)>;

/// The deployment's own account (the settings') and region (the AWS configuration's):
/// what a cluster, place or event that names none is of.
fn own_place(settings: &Settings, sdk: Option<&aws_config::SdkConfig>) -> Place {
    Place {
        account: settings.accounts.own.clone(),
        region: sdk.and_then(|s| s.region()).map(|r| r.to_string()),
    }
}

/// The webhook the settings name, if any (its TLS stack warmed up here, once per cold start).
fn notifier(settings: &Settings) -> Result<Option<Arc<dyn Notifier>>, SetupError> {
    let cluster = settings.config.cluster.as_ref().map(|c| c.name.clone());
    let webhook = settings.webhook.as_ref();
    let webhook = webhook.map(|config| Webhook::new(config.clone(), cluster.clone()));
    let webhook = webhook.transpose().map_err(SetupError::Webhook)?;
    Ok(webhook.map(|w| Arc::new(w) as Arc<dyn Notifier>))
}

/// The pool store `choice` names, read only in [`Mode::DryRun`]. `sdk` is the AWS
/// configuration for DynamoDB (loaded here with `aws` when not given).
pub async fn store(
    choice: &StoreChoice,
    mode: Mode,
    sdk: Option<&aws_config::SdkConfig>,
    aws: AwsSettings,
    clock: Arc<dyn Clock>,
) -> Result<Arc<dyn PoolStore>, SetupError> {
    let store: Arc<dyn PoolStore> = match choice {
        StoreChoice::Dynamo { table, key_secret } => {
            let sdk = match sdk {
                Some(sdk) => sdk.clone(),
                None => aws::load(aws).await,
            };
            let client = aws_sdk_dynamodb::Client::new(&sdk);
            let mut store = DynamoStore::new(client, table.clone()).with_clock(clock);
            if let Some(secret) = key_secret {
                let secrets = aws_sdk_secretsmanager::Client::new(&sdk);
                store = store.with_key_secret(SecretKeys::new(secrets, secret.clone()));
            }
            Arc::new(store)
        }
        StoreChoice::Embedded { dir } => Arc::new(EmbeddedStore::open(dir)?.with_clock(clock)),
    };
    Ok(if mode.writes_store() {
        store
    } else {
        Arc::new(ReadOnlyStore(store))
    })
}

/// Where `forewarn audit` reads the workloads: a capture, or the live cluster (read only; for
/// EKS the AWS configuration is loaded with `aws`).
pub async fn workload_source(
    choice: &ClusterChoice,
    aws: AwsSettings,
) -> Result<Arc<dyn WorkloadSource>, SetupError> {
    Ok(match choice {
        ClusterChoice::Snapshot(path) => Arc::new(SnapshotWorkloads(load_workloads(path)?)),
        ClusterChoice::Live(access) => {
            let clients = connect(access, aws, None)
                .await
                .map_err(SetupError::Cluster)?;
            Arc::new(KubeWorkloads::new(clients))
        }
        ClusterChoice::None => return Err(SetupError::NoCluster),
    })
}

/// Where node groups come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupsChoice {
    /// A capture of `aws autoscaling describe-auto-scaling-groups --output json`.
    File(std::path::PathBuf),
    /// Auto Scaling (and EC2 for launch templates) through the standard AWS configuration.
    AutoScaling,
}

/// The node group source `choice` names; `sdk` is the AWS configuration for Auto Scaling
/// (loaded here with `aws` when not given).
pub async fn node_groups(
    choice: &GroupsChoice,
    sdk: Option<&aws_config::SdkConfig>,
    aws: AwsSettings,
) -> Result<Arc<dyn NodeGroupSource>, SetupError> {
    Ok(match choice {
        GroupsChoice::File(path) => Arc::new(load_groups(path)?),
        GroupsChoice::AutoScaling => match sdk {
            Some(sdk) => Arc::new(AsgNodeGroups::new(sdk)),
            None => Arc::new(AsgNodeGroups::new(&aws::load(aws).await)),
        },
    })
}

impl Handler {
    /// The handler `settings` describe (once per cold start).
    pub async fn from_settings(settings: &Settings) -> Result<Handler, SetupError> {
        if settings.cluster == ClusterChoice::None {
            tracing::warn!(
                "no cluster configured (no clusters named, no KUBECONFIG, no cluster state file): planning without nodes"
            );
        }
        Ok(services_with_clock(settings, SystemClock::shared())
            .await?
            .handler)
    }
}

impl Sweeper {
    /// The sweeper `settings` describe: the handler's services with EC2 for the leaving
    /// instances, and with a live cluster (unless the priorities are off) Auto Scaling and
    /// the expander ConfigMap for the priorities; a cluster name is required (checked
    /// when it sweeps).
    pub async fn from_settings(settings: &Settings) -> Result<Sweeper, SetupError> {
        if settings.cluster == ClusterChoice::None {
            tracing::warn!("no cluster configured: sweeping without nodes");
        }
        let mut services = services_with_clock(settings, SystemClock::shared()).await?;
        let leaving = match services.leaving {
            Some(leaving) => leaving,
            None => Arc::new(Ec2Directory::from_conf(&aws::load(settings.aws).await)),
        };
        let region = services.region.take();
        let priorities = match (settings.priorities.enabled, services.node_groups.take()) {
            (true, Some(groups)) => Some(SweepPriorities {
                groups,
                settings: settings.priorities.settings,
            }),
            (true, None) => {
                tracing::info!("no live cluster: the sweeper leaves the priority expander alone");
                None
            }
            (false, _) => None,
        };
        Ok(Sweeper {
            handler: services.handler,
            leaving,
            region,
            priorities,
            preflight: Default::default(),
        })
    }
}

/// Whose tenant of the fair queue a drain's continuations are: with an organization (the
/// member role set, as the stack sets it with `OrganizationId`), their account's, the message
/// group every event of the account comes in, so that an account's cordons still come before
/// its drains; else their cluster's (see [`Tenant`]).
pub fn tenant_of(settings: &Settings) -> Tenant {
    match settings.accounts.member_role {
        Some(_) => Tenant::Account,
        None => Tenant::Cluster,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuations_are_their_accounts_tenant_with_an_organization_else_their_clusters() {
        let settings = |vars: &'static [(&'static str, &'static str)]| {
            Settings::from_vars(vars.iter().copied()).unwrap()
        };
        assert_eq!(tenant_of(&settings(&[])), Tenant::Cluster);
        let organization = settings(&[
            ("FOREWARN_MEMBER_ROLE", "forewarn-member"),
            ("FOREWARN_ACCOUNT_ID", "123456789012"),
        ]);
        assert_eq!(tenant_of(&organization), Tenant::Account);
    }

    /// A deployment of one cluster takes on its whole batch whatever its share of the API
    /// server (20 environments: 10 requests/s and a burst of 1 each, 5 cordons a second): no
    /// other cluster waits behind it, and what it sent back would wait behind its own messages.
    #[tokio::test]
    async fn a_deployment_of_one_cluster_sends_nothing_back_for_its_share() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().to_str().unwrap();
        let vars = [
            ("FOREWARN_ENVIRONMENTS", "20"),
            ("FOREWARN_STATE_DIR", state),
        ];
        let settings = Settings::from_vars(vars).unwrap();
        assert_eq!(settings.kube_rate_limit, Some((10.0, 1)));
        let clock = crate::adapters::clock::ManualClock::at(chrono::Utc::now()).shared();
        let services = services_on(&settings, None, clock).await.unwrap();
        assert!(!services.handler.fleet.several());
        assert_eq!(services.handler.takes_per_cluster, None);
    }
}
