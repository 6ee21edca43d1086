//! The priority expander from the pool table, end to end: node groups in moto's Auto Scaling
//! (a mixed-instances spot group over two types in two zones, a spot launch-template group, an
//! on-demand group, another cluster's group), pools marked unavailable by interruption events
//! through the pool store, the ConfigMap written to the Kubernetes fake (created, left alone
//! when nothing changes, rewritten after a conflicting write, restored when the windows end),
//! and a ConfigMap forewarn did not create left alone unless taken over. The sweeper never creates
//! the ConfigMap: it reports it missing until it is created from infra/k8s/priority-expander.yaml,
//! then keeps it up to date.

use std::sync::Arc;

use aws_sdk_autoscaling::types::{
    InstancesDistribution, LaunchTemplate, LaunchTemplateOverrides, LaunchTemplateSpecification,
    MixedInstancesPolicy, Tag,
};
use aws_sdk_ec2::types::{
    InstanceType, LaunchTemplateInstanceMarketOptionsRequest, MarketType, RequestLaunchTemplateData,
};
use chrono::{Duration, Utc};
use forewarn::adapters::autoscaling::AsgNodeGroups;
use forewarn::adapters::embedded::EmbeddedStore;
use forewarn::adapters::expander::KubeExpander;
use forewarn::adapters::kube::ClusterClient;
use forewarn::app::priorities::NodeGroupSource;
use forewarn::app::priorities::{
    BaseSource, Change, Priorities, PriorityRunError, PrioritySettings,
};
use forewarn::app::priorities::{ExpanderError, ExpanderStore, StoredExpander};
use forewarn::domain::clusters::{ClusterId, Place};
use forewarn::domain::event::EventKind;
use forewarn::domain::expander::ANNOTATION;
use forewarn::domain::plan::Plan;
use forewarn::domain::pool::{CapacityType, PoolKey, PoolMark};
use forewarn::domain::priorities::BasePriorities;
use forewarn::ports::PoolStore;
use forewarn_tests::moto::{runtime, shared, unique_name};
use kube_fake::KubeFake;
use serde_json::json;

const BASE: &str = "50:\n  - '.*spot.*'\n10:\n  - '.*on-demand.*'\n";

async fn template(ec2: &aws_sdk_ec2::Client, name: &str, t: InstanceType, spot: bool) {
    let mut data = RequestLaunchTemplateData::builder().instance_type(t);
    if spot {
        data = data.instance_market_options(
            LaunchTemplateInstanceMarketOptionsRequest::builder()
                .market_type(MarketType::Spot)
                .build(),
        );
    }
    ec2.create_launch_template()
        .launch_template_name(name)
        .launch_template_data(data.build())
        .send()
        .await
        .unwrap();
}

fn tags(group: &str, cluster: &str) -> Vec<Tag> {
    let key = format!("k8s.io/cluster-autoscaler/{cluster}");
    [
        ("k8s.io/cluster-autoscaler/enabled", "true"),
        (key.as_str(), "owned"),
    ]
    .into_iter()
    .map(|(k, v)| {
        Tag::builder()
            .key(k)
            .value(v)
            .resource_id(group)
            .resource_type("auto-scaling-group")
            .propagate_at_launch(true)
            .build()
    })
    .collect()
}

fn lt(name: &str) -> LaunchTemplateSpecification {
    LaunchTemplateSpecification::builder()
        .launch_template_name(name)
        .version("$Latest")
        .build()
}

/// The groups of `cluster` (and one of another cluster); returns their names.
async fn groups(sdk: &aws_config::SdkConfig, cluster: &str) -> [String; 4] {
    let ec2 = aws_sdk_ec2::Client::new(sdk);
    let asg = aws_sdk_autoscaling::Client::new(sdk);
    let (spot_lt, od_lt) = (format!("{cluster}-spot-lt"), format!("{cluster}-od-lt"));
    template(&ec2, &spot_lt, InstanceType::M5Xlarge, true).await;
    template(&ec2, &od_lt, InstanceType::C5Large, false).await;
    let mixed = format!("{cluster}-spot-mixed");
    let single = format!("{cluster}-spot-single");
    let od = format!("{cluster}-on-demand");
    let other = format!("{cluster}x-spot-other");
    asg.create_auto_scaling_group()
        .auto_scaling_group_name(&mixed)
        .min_size(0)
        .max_size(3)
        .desired_capacity(0)
        .availability_zones("us-east-1a")
        .availability_zones("us-east-1b")
        .mixed_instances_policy(
            MixedInstancesPolicy::builder()
                .launch_template(
                    LaunchTemplate::builder()
                        .launch_template_specification(lt(&od_lt))
                        .overrides(
                            LaunchTemplateOverrides::builder()
                                .instance_type("m5.large")
                                .build(),
                        )
                        .overrides(
                            LaunchTemplateOverrides::builder()
                                .instance_type("m5a.large")
                                .build(),
                        )
                        .build(),
                )
                .instances_distribution(
                    InstancesDistribution::builder()
                        .on_demand_base_capacity(0)
                        .on_demand_percentage_above_base_capacity(0)
                        .spot_allocation_strategy("price-capacity-optimized")
                        .build(),
                )
                .build(),
        )
        .set_tags(Some(tags(&mixed, cluster)))
        .send()
        .await
        .unwrap();
    for (name, template, tagged) in [
        (&single, &spot_lt, cluster.to_string()),
        (&od, &od_lt, cluster.to_string()),
        (&other, &spot_lt, format!("{cluster}x")),
    ] {
        asg.create_auto_scaling_group()
            .auto_scaling_group_name(name)
            .min_size(0)
            .max_size(3)
            .desired_capacity(0)
            .availability_zones("us-east-1a")
            .launch_template(lt(template))
            .set_tags(Some(tags(name, &tagged)))
            .send()
            .await
            .unwrap();
    }
    [mixed, single, od, other]
}

/// An interruption event's pool update marking `pools` unavailable until `until`: (instance
/// type, zone ID) each, as pools are keyed (moto maps us-east-1a to use1-az6, us-east-1b to
/// use1-az1).
fn interruption(id: &str, pools: &[(&str, &str)], until: chrono::DateTime<Utc>) -> Plan {
    Plan {
        event_id: id.into(),
        kind: EventKind::SpotInterruption,
        time: Utc::now(),
        region: Some("us-east-1".into()),
        summary: "spot-interruption (terminate)".into(),
        pools: pools
            .iter()
            .enumerate()
            .map(|(i, (t, z))| PoolMark {
                pool: PoolKey::new(CapacityType::Spot, t, z),
                instance_id: format!("i-{i:017}"),
                unavailable_until: Some(until),
            })
            .collect(),
        ..Plan::default()
    }
}

/// An expander store whose first replace meets a concurrent write.
struct Racing {
    inner: KubeExpander,
    fake: Arc<KubeFake>,
    raced: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl ExpanderStore for Racing {
    async fn base(&self) -> Result<Option<String>, ExpanderError> {
        self.inner.base().await
    }
    async fn current(&self) -> Result<Option<StoredExpander>, ExpanderError> {
        self.inner.current().await
    }
    async fn create(
        &self,
        config: &forewarn::domain::expander::ExpanderConfig,
    ) -> Result<(), ExpanderError> {
        self.inner.create(config).await
    }
    async fn replace(
        &self,
        config: &forewarn::domain::expander::ExpanderConfig,
        resource_version: &str,
    ) -> Result<(), ExpanderError> {
        if !self.raced.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let mut cm = self
                .fake
                .get(
                    "v1",
                    "ConfigMap",
                    Some("kube-system"),
                    "cluster-autoscaler-priority-expander",
                )
                .unwrap();
            cm["metadata"]["annotations"]["someone"] = json!("else");
            self.fake.insert(cm);
        }
        self.inner.replace(config, resource_version).await
    }
}

fn expander_priorities(fake: &KubeFake) -> (String, serde_json::Value) {
    let cm = fake
        .get(
            "v1",
            "ConfigMap",
            Some("kube-system"),
            "cluster-autoscaler-priority-expander",
        )
        .unwrap();
    (
        cm["data"]["priorities"].as_str().unwrap().to_string(),
        cm["metadata"].clone(),
    )
}

fn prio<'a>(
    cluster: &'a str,
    groups: &'a dyn NodeGroupSource,
    store: &'a dyn PoolStore,
    expander: &'a dyn ExpanderStore,
    share: &str,
    write: bool,
) -> Priorities<'a> {
    Priorities {
        cluster,
        place: Default::default(),
        groups,
        store,
        expander: Some(expander),
        base: BaseSource::ConfigMap,
        settings: PrioritySettings {
            hot_share: forewarn::domain::priorities::HotShare::parse(share).unwrap(),
            take_over: false,
        },
        write,
        // `forewarn priorities --kube --execute`: a person's credentials may create it.
        create: true,
    }
}

#[test]
fn hot_spot_groups_are_demoted_until_their_pools_return() {
    runtime().block_on(async {
        let sdk = shared().sdk_config();
        let cluster = unique_name("prio");
        let [mixed, single, od, other] = groups(&sdk, &cluster).await;
        let source = AsgNodeGroups::new(&sdk);
        assert_this_clusters_groups_described(&source, &cluster, &mixed, &single, &od).await;

        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let now = Utc::now();
        let until = now + Duration::minutes(10);
        // Three of the mixed group's four pools, then the fourth; the single group's one pool.
        store
            .apply(&interruption("ev-1", &[("m5.large", "use1-az6"), ("m5.large", "use1-az1"), ("m5a.large", "use1-az6")], until), Utc::now())
            .await
            .unwrap();

        let fake = Arc::new(forewarn_tests::cluster::deployed().await);
        fake.insert(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "forewarn-priority-base", "namespace": "kube-system"},
            "data": {"priorities": BASE}}));
        let expander = KubeExpander::new(ClusterClient::new(forewarn_tests::cluster::client_as(
            &fake,
            forewarn_tests::cluster::SWEEPER_GROUP,
        )));
        macro_rules! run {
            ($expander:expr, $share:expr, $write:expr) => {
                prio(&cluster, &source, &store, $expander, $share, $write)
            };
        }
        let base = BasePriorities::parse(BASE, "base").unwrap();

        // Three of four pools down: hot at 75%, not at the default (all).
        let out = run!(&expander, "1", false).run(now).await.unwrap();
        assert!(out.hot.is_empty());
        assert_eq!(out.change, Change::WouldCreate);
        assert!(fake.writes().is_empty(), "read only without --execute");
        let out = run!(&expander, "75%", true).run(now).await.unwrap();
        assert_eq!(out.change, Change::Created);
        assert_eq!(out.hot.len(), 1);
        let (text, meta) = expander_priorities(&fake);
        let written = BasePriorities::parse(&text, "written").unwrap();
        assert_eq!(written.priority_of(&mixed), Some(9));
        assert_eq!(written.priority_of(&single), Some(50));
        assert_eq!(written.priority_of(&od), Some(10));
        // Another cluster's group is not among the known ones: exact names leave it out.
        assert_eq!(written.priority_of(&other), None);
        assert_eq!(meta["labels"]["app.kubernetes.io/managed-by"], "forewarn");
        let why: serde_json::Value =
            serde_json::from_str(meta["annotations"][ANNOTATION].as_str().unwrap()).unwrap();
        assert_eq!(why["groups"][0]["group"], json!(mixed));
        assert_eq!(why["groups"][0]["pools"].as_array().unwrap().len(), 3);

        // Again: nothing changes, nothing is written.
        let writes = fake.writes().len();
        let out = run!(&expander, "75%", true).run(now).await.unwrap();
        assert_eq!(out.change, Change::Unchanged);
        assert_eq!(fake.writes().len(), writes);

        // The single group's pool goes too; the write meets a concurrent one and is redone.
        store
            .apply(&interruption("ev-2", &[("m5.xlarge", "use1-az6")], now + Duration::minutes(20)), Utc::now())
            .await
            .unwrap();
        store
            .apply(&interruption("ev-3", &[("m5a.large", "use1-az1")], now + Duration::minutes(5)), Utc::now())
            .await
            .unwrap();
        let racing = Racing {
            inner: expander.clone(),
            fake: fake.clone(),
            raced: Default::default(),
        };
        let out = run!(&racing, "1", true).run(now).await.unwrap();
        assert_eq!(out.change, Change::Updated);
        let conflicts = fake
            .requests()
            .iter()
            .filter(|r| r.method.as_str() == "PUT" && r.status == 409)
            .count();
        assert_eq!(conflicts, 1);
        let (text, meta) = expander_priorities(&fake);
        let written = BasePriorities::parse(&text, "written").unwrap();
        assert_eq!(written.priority_of(&mixed), Some(9));
        assert_eq!(written.priority_of(&single), Some(9));
        assert_eq!(written.priority_of(&od), Some(10));
        assert_eq!(meta["annotations"]["someone"], "else", "others' annotations kept");

        // The windows end: the base again.
        let later = now + Duration::minutes(21);
        let out = run!(&expander, "1", true).run(later).await.unwrap();
        assert_eq!(out.change, Change::Updated);
        assert!(out.hot.is_empty());
        let (text, _) = expander_priorities(&fake);
        assert_eq!(BasePriorities::parse(&text, "w").unwrap().as_map(), base.as_map());

        // Someone else's ConfigMap: refused, unless taken over.
        fake.insert(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cluster-autoscaler-priority-expander", "namespace": "kube-system"},
            "data": {"priorities": "1: ['.*']"}}));
        let err = run!(&expander, "1", true).run(now).await.unwrap_err();
        assert!(matches!(err, PriorityRunError::NotOurs), "{err}");
        assert!(err.to_string().contains("--take-over"), "{err}");
        let mut take = run!(&expander, "1", true);
        take.settings.take_over = true;
        assert_eq!(take.run(now).await.unwrap().change, Change::Updated);
        let (_, meta) = expander_priorities(&fake);
        assert_eq!(meta["labels"]["app.kubernetes.io/managed-by"], "forewarn");

        // No base: nothing at all.
        fake.remove("v1", "ConfigMap", Some("kube-system"), "forewarn-priority-base");
        let writes = fake.writes().len();
        assert_eq!(run!(&expander, "1", true).run(now).await.unwrap().change, Change::NoBase);
        assert_eq!(fake.writes().len(), writes);
    });
}

/// The groups `source` describes, read as node groups: this cluster's three, with their
/// capacity types (the single-type group's from its launch template), instance types and zones.
async fn assert_this_clusters_groups_described(
    source: &AsgNodeGroups,
    cluster: &str,
    mixed: &str,
    single: &str,
    od: &str,
) {
    let described = source.describe().await.unwrap();
    let mine: Vec<_> = described
        .iter()
        .filter_map(|d| forewarn::domain::priorities::node_group(d, cluster))
        .collect();
    assert_eq!(mine.len(), 3, "{mine:?}");
    let find = |n: &str| mine.iter().find(|g| g.name == n).unwrap();
    assert_eq!(find(mixed).capacity_type, CapacityType::Spot);
    assert_eq!(find(mixed).instance_types, vec!["m5.large", "m5a.large"]);
    // By zone ID (moto maps us-east-1a to use1-az6, us-east-1b to use1-az1), as pools are.
    assert_eq!(find(mixed).zones, vec!["use1-az1", "use1-az6"]);
    assert_eq!(
        find(single).capacity_type,
        CapacityType::Spot,
        "from the template"
    );
    assert_eq!(find(single).instance_types, vec!["m5.xlarge"]);
    assert_eq!(find(od).capacity_type, CapacityType::OnDemand);
    assert_eq!(find(od).instance_types, vec!["c5.large"]);
}

/// No instances are leaving: the sweeper here only updates the priorities.
struct NoneLeaving;

#[async_trait::async_trait]
impl forewarn::app::leaving::LeavingInstances for NoneLeaving {
    async fn leaving(
        &self,
        _place: &forewarn::ports::Place,
        _cluster: &str,
    ) -> Result<Vec<forewarn::domain::facts::InstanceFacts>, forewarn::ports::PortError> {
        Ok(Vec::new())
    }
    async fn statuses(
        &self,
        _place: &forewarn::ports::Place,
    ) -> Result<Vec<forewarn::domain::status::InstanceStatus>, forewarn::ports::PortError> {
        Ok(Vec::new())
    }
}

#[test]
fn the_sweeper_never_creates_the_expander_configmap() {
    use forewarn::app::handler::Handler;
    use forewarn::app::sweeper::{SweepPriorities, Sweeper};
    use forewarn::domain::config::Config;

    runtime().block_on(async {
        let sdk = shared().sdk_config();
        let cluster = unique_name("prio-sweep");
        let [mixed, single, od, _other] = groups(&sdk, &cluster).await;
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        let now = Utc::now();
        store
            .apply(
                &interruption(
                    "ev-1",
                    &[("m5.xlarge", "use1-az6")],
                    now + Duration::minutes(10),
                ),
                now,
            )
            .await
            .unwrap();
        let fake = Arc::new(forewarn_tests::cluster::deployed().await);
        fake.insert(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "forewarn-priority-base", "namespace": "kube-system"},
            "data": {"priorities": BASE}}));
        let sweeper = Sweeper {
            handler: Handler {
                concurrency: 1,
                fleet: forewarn::app::fleet::Fleet::one(forewarn::app::fleet::Cluster {
                    upkeep: Some(Arc::new(forewarn::app::upkeep::Upkeep {
                        actions: None,
                        expander: Arc::new(KubeExpander::new(ClusterClient::new(
                            forewarn_tests::cluster::client_as(
                                &fake,
                                forewarn_tests::cluster::SWEEPER_GROUP,
                            ),
                        ))),
                    })),
                    ..forewarn::app::fleet::Cluster::none()
                }),
                ..Handler::new(
                    Config {
                        cluster: Some(ClusterId::at(&Place::default(), &cluster)),
                        ..Config::default()
                    },
                    store,
                )
            },
            leaving: Arc::new(NoneLeaving),
            region: Some("us-east-1".into()),
            priorities: Some(SweepPriorities {
                groups: Arc::new(AsgNodeGroups::new(&sdk)),
                settings: PrioritySettings::default(),
            }),
            preflight: Default::default(),
        };
        let sweeper = sweeper.cluster(None).await.unwrap();

        // Missing: said so, nothing written (its group may not create ConfigMaps).
        let out = sweeper.update_priorities().await.unwrap().unwrap();
        assert_eq!(out.change, Change::Missing);
        assert_eq!(out.hot.len(), 1, "the priorities are computed all the same");
        assert!(fake.writes().is_empty(), "{:?}", fake.writes());

        // `kubectl create -f infra/k8s/priority-expander.yaml`: the sweeper keeps it up to date.
        let path = forewarn_tests::moto::workspace_root().join("infra/k8s/priority-expander.yaml");
        let manifest: serde_json::Value =
            serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(
            manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"], "forewarn",
            "the manifest's ConfigMap is forewarn's to update"
        );
        fake.insert(manifest);
        let out = sweeper.update_priorities().await.unwrap().unwrap();
        assert_eq!(out.change, Change::Updated);
        let (text, meta) = expander_priorities(&fake);
        let written = BasePriorities::parse(&text, "written").unwrap();
        assert_eq!(written.priority_of(&single), Some(9), "demoted: {text}");
        assert_eq!(written.priority_of(&mixed), Some(50));
        assert_eq!(written.priority_of(&od), Some(10));
        assert_eq!(meta["labels"]["app.kubernetes.io/managed-by"], "forewarn");
        let out = sweeper.update_priorities().await.unwrap().unwrap();
        assert_eq!(out.change, Change::Unchanged);
        assert!(
            !fake.requests().iter().any(|r| r.method.as_str() == "POST"),
            "the sweeper never creates: {:?}",
            fake.requests()
        );
    });
}

/// A member account's cluster's node groups are described in that account, through the member
/// role the sweeper assumes there (moto keys groups by the credentials' account): the member's
/// groups, never the own account's; the own account's groups in the own account only.
#[test]
fn a_member_clusters_node_groups_are_described_in_its_account() {
    use forewarn::adapters::accounts::{AccountSettings, Accounts};
    use forewarn::ports::Place;
    const MEMBER: &str = "111111111111";
    runtime().block_on(async {
        let base = shared().sdk_config();
        let settings = AccountSettings {
            own: Some("123456789012".into()),
            member_role: Some("forewarn-member-read".into()),
            served: [MEMBER.to_string()].into(),
        };
        let accounts = Accounts::new(&base, settings);
        let member = Place::of(MEMBER, "us-east-1");
        let member_sdk = accounts.config_for(&member).await.unwrap();
        let (theirs, ours) = (unique_name("member-ng"), unique_name("own-ng"));
        let member_groups = groups(&member_sdk, &theirs).await;
        let own_groups = groups(&base, &ours).await;
        let source = AsgNodeGroups::new(&base).with_accounts(accounts);
        let names = |described: Vec<forewarn::domain::priorities::AsgDescription>| {
            described.into_iter().map(|g| g.name).collect::<Vec<_>>()
        };
        let in_member = names(source.describe_at(&member).await.unwrap());
        let in_own = names(source.describe_at(&Place::default()).await.unwrap());
        for g in &member_groups {
            assert!(in_member.contains(g) && !in_own.contains(g), "{g}");
        }
        for g in &own_groups {
            assert!(in_own.contains(g) && !in_member.contains(g), "{g}");
        }
    });
}
