//! Calls in an event's own account and region (`forewarn::adapters::accounts`), on moto through
//! the recording proxy: STS `AssumeRole` of the member role into another account id (moto keys
//! what it holds by the account of the credentials, so an instance launched with the assumed
//! credentials exists in that account only), `DescribeInstances` there, Auto Scaling lifecycle
//! calls signed with the member's credentials in the event's region (moto does not serve
//! `CompleteLifecycleAction`: the proxy answers it, and records who signed it and where), and
//! forged or unserved accounts refused before any request is made. And one account never fails
//! another: a batch mixing the own account's spot warning, a member's whose role denies
//! `DescribeInstances` and one from a served account whose role cannot be assumed, through the
//! handler to the Kubernetes fake; and on an SQS queue with its dead-letter queue, the
//! unassumable account's warning comes back within seconds and ends in the dead-letter queue,
//! never acknowledged.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use forewarn::adapters::accounts::{AccountSettings, Accounts};
use forewarn::adapters::autoscaling::AsgLifecycle;
use forewarn::adapters::ec2::Ec2Directory;
use forewarn::adapters::embedded::EmbeddedStore;
use forewarn::adapters::kube::{ClusterClient, KubeExecutor};
use forewarn::adapters::sqs::SqsRedelivery;
use forewarn::app::handler::Handler;
use forewarn::domain::clusters::ClusterId;
use forewarn::domain::config::Config;
use forewarn::domain::event::LifecycleAction;
use forewarn::domain::fixtures::ec2_node;
use forewarn::domain::pool::PoolQuery;
use forewarn::domain::report::Outcome;
use forewarn::ports::{
    AccountUnreachable, FailureKind, InstanceDirectory, LifecycleCompleter, NotServed, Place,
};
use forewarn_tests::ec2::{Launch, Launched, any_image, launch};
use forewarn_tests::moto::{runtime, shared};
use forewarn_tests::proxy::{AwsCall, AwsFault, AwsProxy, FaultKind};
use forewarn_tests::sqs::{EventQueue, drain_patiently};

/// The deployment's account: moto's default, whose credentials the tests' configuration has.
const OWN: &str = "123456789012";
/// A member account of the organization.
const MEMBER: &str = "111111111111";
const ROLE: &str = "forewarn-member";
/// The access key of the tests' own credentials.
const OWN_KEY: &str = "testing";
/// An account whose member role cannot be assumed (it never deployed `infra/member.yaml`).
const UNASSUMABLE: &str = "222222222222";

const COMPLETED: &str = concat!(
    r#"<CompleteLifecycleActionResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">"#,
    "<CompleteLifecycleActionResult/><ResponseMetadata><RequestId>r1</RequestId>",
    "</ResponseMetadata></CompleteLifecycleActionResponse>"
);
const HEARTBEAT: &str = concat!(
    r#"<RecordLifecycleActionHeartbeatResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">"#,
    "<RecordLifecycleActionHeartbeatResult/><ResponseMetadata><RequestId>r2</RequestId>",
    "</ResponseMetadata></RecordLifecycleActionHeartbeatResponse>"
);
const ASSUME_DENIED: &str = concat!(
    r#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>"#,
    "<Code>AccessDenied</Code><Message>User is not authorized to perform: sts:AssumeRole</Message>",
    "</Error><RequestId>r3</RequestId></ErrorResponse>"
);

/// What EC2 answers a role that does not allow `DescribeInstances`.
const DESCRIBE_DENIED: &str = concat!(
    r#"<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error>"#,
    "<Code>UnauthorizedOperation</Code><Message>You are not authorized to perform this ",
    "operation. User: arn:aws:sts::111111111111:assumed-role/forewarn-member/forewarn is not ",
    "authorized to perform: ec2:DescribeInstances</Message></Error></Errors>",
    "<RequestID>r4</RequestID></Response>"
);

/// The organization's deployment: it serves clusters of the member and of the account whose
/// role cannot be assumed (as `FOREWARN_CLUSTERS=*,111111111111/*,222222222222/*` says).
fn org() -> AccountSettings {
    AccountSettings {
        own: Some(OWN.into()),
        member_role: Some(ROLE.into()),
        served: [MEMBER, UNASSUMABLE]
            .map(String::from)
            .into_iter()
            .collect(),
    }
}

fn place(account: &str, region: &str) -> Place {
    Place {
        account: Some(account.into()),
        region: Some(region.into()),
    }
}

fn action(account: Option<&str>, region: Option<&str>) -> LifecycleAction {
    LifecycleAction {
        hook_name: "forewarn-drain".into(),
        asg_name: "eks-demo-ng-1".into(),
        token: "168c6c3d-d370-48df-af77-8b8852e0806c".into(),
        account: account.map(str::to_string),
        region: region.map(str::to_string),
    }
}

/// A proxy in front of the shared moto, and the tests' configuration through it.
async fn proxied() -> (AwsProxy, aws_config::SdkConfig) {
    let proxy = AwsProxy::start(&shared().endpoint())
        .await
        .expect("starting the proxy");
    let base = proxy.sdk_config(&shared().sdk_config());
    (proxy, base)
}

fn of<'a>(calls: &'a [AwsCall], operation: &str) -> Vec<&'a AwsCall> {
    calls.iter().filter(|c| c.operation == operation).collect()
}

#[test]
fn a_member_accounts_instances_are_described_in_that_account_only() {
    runtime().block_on(async {
        let (proxy, base) = proxied().await;
        let accounts = Accounts::new(&base, org());
        let member = place(MEMBER, "eu-west-1");
        // An instance of the member account, launched with the member role's credentials.
        let member_ec2 = aws_sdk_ec2::Client::new(&accounts.config_for(&member).await.unwrap());
        let image = any_image(&member_ec2).await.unwrap();
        let launched = launch(
            &member_ec2,
            &image,
            &Launch::spot("demo").zone("eu-west-1a"),
        )
        .await
        .unwrap();
        let owners = member_ec2
            .describe_instances()
            .instance_ids(&launched.id)
            .send()
            .await
            .unwrap();
        assert_eq!(owners.reservations()[0].owner_id(), Some(MEMBER));

        let directory = Ec2Directory::from_conf(&base).with_accounts(accounts.clone());
        let ids = vec![launched.id.clone()];
        let found = directory.describe(&member, &ids).await.unwrap();
        let facts = &found[&launched.id];
        assert_eq!(facts.zone.as_deref(), Some("eu-west-1a"));
        assert_eq!(facts.clusters(), vec!["demo"]);
        // The own account does not see it, in that region or its own.
        assert!(
            directory
                .describe(&place(OWN, "eu-west-1"), &ids)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            directory
                .describe(&Place::default(), &ids)
                .await
                .unwrap()
                .is_empty()
        );

        // One AssumeRole, by the own credentials; every call of the member signed with what it
        // answered, in the event's region.
        let calls = proxy.calls();
        let assumed = of(&calls, "AssumeRole");
        assert_eq!(assumed.len(), 1, "{calls:#?}");
        assert_eq!(assumed[0].access_key, OWN_KEY);
        let described = of(&calls, "DescribeInstances");
        let member_key = &described[1].access_key;
        assert_ne!(member_key, OWN_KEY);
        assert_eq!(
            described
                .iter()
                .map(|c| (c.access_key == *member_key, c.region.as_str()))
                .collect::<Vec<_>>(),
            [
                (true, "eu-west-1"),  // the owner check
                (true, "eu-west-1"),  // describe(member)
                (false, "eu-west-1"), // describe(own, eu-west-1)
                (false, "us-east-1"), // describe(no place)
            ]
        );

        // A mass interruption's list of the member's cluster (see `Fleet::know`): its running
        // instances with their facts, in that account only, one terminated not listed; in each
        // of the region's three zones at once (a page each) when three calls may start at
        // once, else in one list.
        let other = Launch::spot("demo").zone("eu-west-1b");
        let gone = launch(&member_ec2, &image, &other).await.unwrap().id;
        let terminate = member_ec2.terminate_instances().instance_ids(&gone).send();
        terminate.await.unwrap();
        let elsewhere = launch(&member_ec2, &image, &other).await.unwrap().id;
        let list = async |place: &Place, at_once| {
            let listed = std::sync::Mutex::new((BTreeMap::new(), 0));
            let found = |page: BTreeMap<_, _>| {
                let mut listed = listed.lock().unwrap();
                listed.0.extend(page);
                listed.1 += 1;
            };
            let list = directory.cluster_instances(place, "demo", at_once, &found);
            list.await.unwrap();
            listed.into_inner().unwrap()
        };
        let (listed, pages) = list(&member, 3).await;
        assert_eq!(pages, 3);
        assert_eq!(list(&member, 2).await, (listed.clone(), 1));
        assert_eq!(listed[&launched.id], *facts);
        assert_eq!(listed[&elsewhere].zone.as_deref(), Some("eu-west-1b"));
        assert!(!listed.contains_key(&gone), "{listed:#?}");
        assert!(
            listed
                .values()
                .all(|i| i.state.as_deref() == Some("running"))
        );
        // Zones that cannot be read (here: denied, in the own account's eu-west-1, not read
        // there yet) leave the cluster in one list, not unlisted.
        let denied = DESCRIBE_DENIED.replace("DescribeInstances", "DescribeAvailabilityZones");
        let zones = "DescribeAvailabilityZones";
        proxy.inject(AwsFault::operation(
            "ec2",
            zones,
            FaultKind::Answer(403, denied),
            1,
        ));
        proxy.reset();
        let (own, pages) = list(&place(OWN, "eu-west-1"), 3).await;
        assert!(!own.contains_key(&launched.id));
        assert_eq!(pages, 1, "{:#?}", proxy.calls());
        assert_eq!(of(&proxy.calls(), zones).len(), 1);
    });
}

#[test]
fn a_member_accounts_lifecycle_action_is_completed_in_that_account_and_region() {
    runtime().block_on(async {
        let (proxy, base) = proxied().await;
        let accounts = Accounts::new(&base, org());
        let member = place(MEMBER, "eu-west-1");
        // The member's credentials, as moto knows them: its account's.
        let member_ec2 = aws_sdk_ec2::Client::new(&accounts.config_for(&member).await.unwrap());
        let image = any_image(&member_ec2).await.unwrap();
        let launched = launch(
            &member_ec2,
            &image,
            &Launch::spot("demo").zone("eu-west-1b"),
        )
        .await
        .unwrap();
        for (operation, answer) in [
            ("CompleteLifecycleAction", COMPLETED),
            ("RecordLifecycleActionHeartbeat", HEARTBEAT),
        ] {
            proxy.inject(AwsFault::operation(
                "autoscaling",
                operation,
                FaultKind::Answer(200, answer.into()),
                2,
            ));
        }

        let asg = AsgLifecycle::new(&base).with_accounts(accounts);
        let theirs = action(Some(MEMBER), Some("eu-west-1"));
        assert!(asg.heartbeat(&launched.id, &theirs).await.unwrap());
        assert!(asg.complete(&launched.id, &theirs).await.unwrap());
        // An action of the own account (or one from a plan written before actions had a
        // place): the own credentials, in the own region.
        let ours = action(None, None);
        assert!(asg.complete(&launched.id, &ours).await.unwrap());

        let calls = proxy.calls();
        assert_eq!(of(&calls, "AssumeRole").len(), 1, "{calls:#?}");
        let run = of(&calls, "RunInstances");
        let member_key = &run[0].access_key;
        assert_ne!(member_key, OWN_KEY);
        let signers = |operation: &str| {
            of(&calls, operation)
                .iter()
                .map(|c| (c.access_key.clone(), c.region.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            signers("RecordLifecycleActionHeartbeat"),
            [(member_key.clone(), "eu-west-1".to_string())]
        );
        assert_eq!(
            signers("CompleteLifecycleAction"),
            [
                (member_key.clone(), "eu-west-1".to_string()),
                (OWN_KEY.to_string(), "us-east-1".to_string()),
            ]
        );
    });
}

#[test]
fn forged_accounts_and_regions_are_refused_before_any_request() {
    runtime().block_on(async {
        let (proxy, base) = proxied().await;
        let accounts = Accounts::new(&base, org());
        let directory = Ec2Directory::from_conf(&base).with_accounts(accounts.clone());
        let asg = AsgLifecycle::new(&base).with_accounts(accounts);
        let ids = vec!["i-0a1b2c3d4e5f60001".to_string()];
        for forged in [
            "11111111111",
            "1111111111111",
            "111111111111:role/admin",
            "*",
            "111111111111 ",
        ] {
            let err = directory
                .describe(&place(forged, "us-east-1"), &ids)
                .await
                .unwrap_err();
            assert_eq!(err.kind, FailureKind::Invalid);
            assert!(!err.kind.retryable());
            let text = err.to_string();
            assert!(
                text.contains("ec2:DescribeInstances")
                    && text.contains("is not an AWS account id (12 digits)")
                    && text.contains(&format!("{forged:?}")),
                "{text}"
            );
            let err = asg
                .complete(&ids[0], &action(Some(forged), Some("us-east-1")))
                .await
                .unwrap_err();
            assert_eq!(err.kind, FailureKind::Invalid);
            assert!(
                err.to_string().contains("eks-demo-ng-1")
                    && err.to_string().contains("not an AWS account id"),
                "{err}"
            );
        }
        for forged in ["us-east-1\nAction=x", "../../", "US-EAST-1", ""] {
            let err = directory
                .describe(&place(MEMBER, forged), &ids)
                .await
                .unwrap_err();
            assert!(err.to_string().contains("is not an AWS region"), "{err}");
            assert!(!err.to_string().contains('\n'), "{err}");
        }
        assert_eq!(proxy.calls(), Vec::new(), "no request was made");
    });
}

#[test]
fn another_account_without_a_member_role_is_refused_naming_it() {
    runtime().block_on(async {
        let (proxy, base) = proxied().await;
        let single = AccountSettings {
            own: Some(OWN.into()),
            member_role: None,
            served: Default::default(),
        };
        let accounts = Accounts::new(&base, single);
        let directory = Ec2Directory::from_conf(&base).with_accounts(accounts.clone());
        let ids = vec!["i-0a1b2c3d4e5f60001".to_string()];
        let err = directory
            .describe(&place(MEMBER, "us-east-1"), &ids)
            .await
            .unwrap_err();
        assert_eq!(err.kind, FailureKind::Forbidden);
        let text = err.to_string();
        assert!(
            text.contains(MEMBER) && text.contains(OWN) && text.contains("FOREWARN_MEMBER_ROLE"),
            "{text}"
        );
        // An account not served: its events are acknowledged, not failed.
        assert_eq!(
            err.cause::<NotServed>().map(|n| n.account.as_str()),
            Some(MEMBER)
        );
        let err = AsgLifecycle::new(&base)
            .with_accounts(accounts)
            .complete(&ids[0], &action(Some(MEMBER), None))
            .await
            .unwrap_err();
        assert!(err.to_string().contains(MEMBER), "{err}");
        assert_eq!(proxy.calls(), Vec::new(), "no request was made");
        // Its own account's events are served.
        assert!(
            directory
                .describe(&place(OWN, "us-east-1"), &ids)
                .await
                .unwrap()
                .is_empty()
        );
    });
}

#[test]
fn a_role_that_cannot_be_assumed_fails_the_call_never_falls_back_to_own_credentials() {
    runtime().block_on(async {
        let (proxy, base) = proxied().await;
        proxy.inject(AwsFault::operation(
            "sts",
            "AssumeRole",
            FaultKind::Answer(403, ASSUME_DENIED.into()),
            100,
        ));
        let directory = Ec2Directory::from_conf(&base).with_accounts(Accounts::new(&base, org()));
        let ids = vec!["i-0a1b2c3d4e5f60001".to_string()];
        let err = directory
            .describe(&place(UNASSUMABLE, "us-east-1"), &ids)
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("ec2:DescribeInstances"), "{text}");
        // STS refused the role of a served account: it cannot be reached, which may pass (never
        // "not served"; see `one_account_never_fails_another`).
        assert_eq!(err.cause::<NotServed>(), None);
        assert_eq!(
            err.cause::<AccountUnreachable>()
                .map(|u| u.account.as_str()),
            Some(UNASSUMABLE)
        );
        assert!(err.kind.retryable(), "{err}");
        assert!(
            text.contains("AccessDenied") && text.contains("infra/member.yaml"),
            "{text}"
        );
        let calls = proxy.calls();
        assert!(!of(&calls, "AssumeRole").is_empty(), "{calls:#?}");
        assert!(
            of(&calls, "DescribeInstances").is_empty(),
            "nothing was asked of EC2 without the member's credentials: {calls:#?}"
        );
    });
}

/// A handler serving cluster `cluster` of the fake (as deployed, its client in the handler's
/// group), describing instances through `base` in each event's account; pools in a store of
/// its own under `dir`.
fn handler_of(
    base: &aws_config::SdkConfig,
    cluster: &str,
    fake: &kube_fake::KubeFake,
    dir: &std::path::Path,
) -> Handler {
    let config = Config {
        cluster: Some(ClusterId::at(&Place::default(), cluster)),
        surge_kinds: Default::default(),
        ..Config::default()
    };
    let clients = ClusterClient::new(forewarn_tests::cluster::client_as(
        fake,
        forewarn_tests::cluster::HANDLER_GROUP,
    ));
    let store = EmbeddedStore::open(dir).expect("the pool store");
    Handler {
        instances: Arc::new(
            Ec2Directory::from_conf(base).with_accounts(Accounts::new(base, org())),
        ),
        fleet: forewarn::app::fleet::Fleet::one(forewarn::app::fleet::Cluster {
            executor: Some(Arc::new(KubeExecutor::new(clients.clone(), &config))),
            ..forewarn::app::fleet::Cluster::new(None, Arc::new(clients))
        }),
        concurrency: 4,
        ..Handler::new(config, Arc::new(store))
    }
}

/// A spot warning for `instance` at `time`, from `account`'s bus, as the queue delivers it.
fn warning(id: &str, instance: &str, account: &str, time: &str) -> serde_json::Value {
    let mut event = forewarn::domain::fixtures::spot_json(id, instance, time);
    event["account"] = serde_json::json!(account);
    event
}

/// What a report says of its event, without where it came from nor when its node was
/// cordoned (the wall clock's).
fn said(report: &forewarn::domain::report::Report) -> serde_json::Value {
    let mut value = serde_json::to_value(report).unwrap();
    for key in ["origin", "message_id"] {
        value.as_object_mut().unwrap().remove(key);
    }
    for action in value["actions"].as_array_mut().unwrap() {
        action.as_object_mut().unwrap().remove("cordoned_at");
    }
    value
}

fn unschedulable(fake: &kube_fake::KubeFake, node: &str) -> bool {
    fake.get("v1", "Node", None, node).unwrap()["spec"]["unschedulable"] == true
}

/// The instances of three accounts' spot warnings, tagged for `cluster`: the own account's
/// (answered), and the member's, whose role denies `ec2:DescribeInstances` (the proxy answers
/// EC2's `UnauthorizedOperation` for it); and account [`UNASSUMABLE`]'s member role cannot be
/// assumed (the proxy answers STS's `AccessDenied`).
async fn three_accounts(
    proxy: &AwsProxy,
    base: &aws_config::SdkConfig,
    cluster: &str,
) -> (Launched, Launched) {
    let own_ec2 = aws_sdk_ec2::Client::new(base);
    let image = any_image(&own_ec2).await.unwrap();
    let own = launch(&own_ec2, &image, &Launch::spot(cluster))
        .await
        .unwrap();
    let member_config = Accounts::new(base, org())
        .config_for(&place(MEMBER, "us-east-1"))
        .await
        .unwrap();
    let member_ec2 = aws_sdk_ec2::Client::new(&member_config);
    let theirs = launch(&member_ec2, &image, &Launch::spot(cluster))
        .await
        .unwrap();
    proxy.inject(
        AwsFault::operation(
            "ec2",
            "DescribeInstances",
            FaultKind::Answer(403, DESCRIBE_DENIED.into()),
            100,
        )
        .naming(&theirs.id),
    );
    proxy.inject(
        AwsFault::operation(
            "sts",
            "AssumeRole",
            FaultKind::Answer(403, ASSUME_DENIED.into()),
            100,
        )
        .naming(UNASSUMABLE),
    );
    (own, theirs)
}

/// Issue 46, item 3, and issue 57, item 1: one account never fails another, and a served
/// account's warnings are never acknowledged because forewarn could not act. One batch: a spot
/// warning of the deployment's own account, one of a member whose role denies
/// `ec2:DescribeInstances`, one of a served account whose member role cannot be assumed (STS:
/// `AccessDenied`, as for a role that does not exist or no longer trusts the handler). The own
/// account's node is cordoned in that batch, and its record answered exactly as when it comes
/// alone; the two others fail alone, retryable (a role being re-created or propagated passes),
/// each naming its account, counted as unreachable, with no pool and no event id recorded.
#[test]
fn one_account_never_fails_another() {
    runtime().block_on(async {
        let (proxy, base) = proxied().await;
        let cluster = forewarn_tests::moto::unique_name("accounts");
        let (own, theirs) = three_accounts(&proxy, &base, &cluster).await;
        let fake = forewarn_tests::cluster::deployed().await;
        fake.insert(ec2_node(&own.dns, &own.id, &own.zone));
        let dir = tempfile::tempdir().unwrap();
        let handler = handler_of(&base, &cluster, &fake, dir.path());
        proxy.reset();

        let time = chrono::Utc::now().to_rfc3339();
        let batch = forewarn_tests::sqs::lambda_batch(&[
            warning("ev-denied", &theirs.id, MEMBER, &time),
            warning("ev-own", &own.id, OWN, &time),
            warning("ev-unassumable", "i-0a1b2c3d4e5f60009", UNASSUMABLE, &time),
        ]);
        let inv = handler.invoke(batch, None).await.unwrap();
        let [denied, ours, unassumable] = &inv.reports[..] else {
            panic!("three reports: {:#?}", inv.reports);
        };

        // The own account's warning: acted on in this batch, its node cordoned.
        assert_eq!(ours.outcome, Outcome::Acted, "{ours:#?}");
        assert!(unschedulable(&fake, &own.dns), "the own node is cordoned");
        // The denied member's: failed alone, retryable, saying what EC2 said.
        assert_eq!(denied.outcome, Outcome::Failed, "{denied:#?}");
        assert!(!denied.permanent, "retried within the window: {denied:#?}");
        assert_eq!(denied.account_unreachable.as_deref(), Some(MEMBER));
        let why = denied.reason.as_deref().unwrap_or_default();
        assert!(
            why.contains("ec2:DescribeInstances") && why.contains("UnauthorizedOperation"),
            "{why}"
        );
        // The unassumable account's: failed alone, retryable, naming the account and role.
        assert_eq!(unassumable.outcome, Outcome::Failed, "{unassumable:#?}");
        assert!(!unassumable.permanent, "{unassumable:#?}");
        assert_eq!(
            unassumable.account_unreachable.as_deref(),
            Some(UNASSUMABLE)
        );
        let why = unassumable.reason.as_deref().unwrap_or_default();
        assert!(
            why.contains(&format!(
                "account {UNASSUMABLE} is served but cannot be reached"
            )) && why.contains(&format!("arn:aws:iam::{UNASSUMABLE}:role/{ROLE}"))
                && why.contains("AccessDenied"),
            "{why}"
        );
        // Both come back; the own account's is done.
        assert_eq!(
            inv.response["batchItemFailures"],
            serde_json::json!([{"itemIdentifier": "m0"}, {"itemIdentifier": "m2"}])
        );
        // Nothing recorded of the unassumable account (nor of the denied one): the own
        // account's pool alone.
        let ids = ["ev-denied", "ev-own", "ev-unassumable"].map(String::from);
        let applied = handler.store.applied(&ids).await.unwrap();
        assert_eq!(
            applied,
            std::collections::HashSet::from(["ev-own".to_string()])
        );
        let query = PoolQuery {
            include_available: true,
            ..PoolQuery::default()
        };
        let pools = handler
            .store
            .pools(&query, chrono::Utc::now())
            .await
            .unwrap();
        assert_eq!(pools.len(), 1, "{pools:#?}");
        assert_eq!(
            pools[0].pool.to_string(),
            format!("spot#m5.large#{}", own.zone_id),
            "keyed by the zone's ID"
        );
        assert_eq!(pools[0].interruptions(), 1);
        // Each account asked in its own right: the denial and the refusal were answered by
        // the proxy, the own account's lookup by moto with the own credentials.
        let calls = proxy.calls();
        let described = of(&calls, "DescribeInstances");
        assert!(
            described.iter().any(|c| c.faulted)
                && described
                    .iter()
                    .any(|c| !c.faulted && c.access_key == OWN_KEY),
            "{calls:#?}"
        );
        assert!(
            of(&calls, "AssumeRole").iter().any(|c| c.faulted),
            "{calls:#?}"
        );

        // The own account's warning alone, on a fresh cluster and store: answered the same.
        let alone_fake = forewarn_tests::cluster::deployed().await;
        alone_fake.insert(ec2_node(&own.dns, &own.id, &own.zone));
        let alone_dir = tempfile::tempdir().unwrap();
        let alone = handler_of(&base, &cluster, &alone_fake, alone_dir.path());
        let batch = forewarn_tests::sqs::lambda_batch(&[warning("ev-own", &own.id, OWN, &time)]);
        let inv = alone.invoke(batch, None).await.unwrap();
        assert_eq!(said(ours), said(&inv.reports[0]));
        assert!(unschedulable(&alone_fake, &own.dns));
    });
}

/// Issue 57, item 1, on a queue as the stack makes it (900 s visibility, a dead-letter queue
/// after 3 receives) and the handler as deployed (it holds its batch and brings failed messages
/// back): a served account whose member role STS refuses is never acknowledged. Its warning
/// fails at each receive and comes back within seconds (were it left to the queue's 900 s, the
/// drain would not see it again), then rests in the dead-letter queue, whole, where the alarm
/// watches; the own account's warning in the same first batch is cordoned as usual.
#[test]
fn a_served_accounts_warning_its_role_refused_comes_back_then_rests_in_the_dlq() {
    runtime().block_on(async {
        let (proxy, base) = proxied().await;
        let cluster = forewarn_tests::moto::unique_name("unreachable");
        let (own, _) = three_accounts(&proxy, &base, &cluster).await;
        let fake = forewarn_tests::cluster::deployed().await;
        fake.insert(ec2_node(&own.dns, &own.id, &own.zone));
        let dir = tempfile::tempdir().unwrap();
        let sqs = aws_sdk_sqs::Client::new(&shared().sdk_config());
        let queue = EventQueue::create(&sqs, &cluster, 3).await.unwrap();
        let handler = Handler {
            redelivery: Some(Arc::new(SqsRedelivery(sqs.clone()))),
            ..handler_of(&base, &cluster, &fake, dir.path())
        };
        let time = chrono::Utc::now().to_rfc3339();
        let unassumable = warning("ev-unassumable", "i-0a1b2c3d4e5f60009", UNASSUMABLE, &time);
        for event in [warning("ev-own", &own.id, OWN, &time), unassumable.clone()] {
            sqs.send_message()
                .queue_url(&queue.url)
                .message_body(event.to_string())
                .send()
                .await
                .unwrap();
        }
        let drained = drain_patiently(
            queue.mapping(&sqs, &handler),
            10,
            10,
            None,
            Duration::from_secs(60),
        )
        .await
        .unwrap();

        let of_event = |id: &str| -> Vec<&forewarn::domain::report::Report> {
            drained
                .reports
                .iter()
                .filter(|r| r.event_id.as_deref() == Some(id))
                .collect()
        };
        let ours = of_event("ev-own");
        assert_eq!(ours.len(), 1, "{ours:#?}");
        assert_eq!(ours[0].outcome, Outcome::Acted);
        assert!(unschedulable(&fake, &own.dns), "the own node is cordoned");
        // Received 3 times, failed each time, never acknowledged.
        let theirs = of_event("ev-unassumable");
        assert_eq!(theirs.len(), 3, "{theirs:#?}");
        for report in &theirs {
            assert_eq!(report.outcome, Outcome::Failed, "{report:#?}");
            assert_eq!(report.account_unreachable.as_deref(), Some(UNASSUMABLE));
        }
        assert_eq!(drained.returned, 3);
        // Then in the dead-letter queue, whole; nothing left on the queue.
        let dead = forewarn_tests::sqs::peek_bodies(&sqs, &queue.dlq_url)
            .await
            .unwrap();
        let dead: Vec<serde_json::Value> = dead
            .iter()
            .map(|b| serde_json::from_str(b).unwrap())
            .collect();
        assert_eq!(dead, [unassumable]);
        assert_eq!(
            forewarn_tests::sqs::left(&sqs, &queue.url).await.unwrap(),
            0
        );
        let ids = ["ev-own", "ev-unassumable"].map(String::from);
        let applied = handler.store.applied(&ids).await.unwrap();
        assert_eq!(
            applied,
            std::collections::HashSet::from(["ev-own".to_string()])
        );
    });
}

/// The access key a Kubernetes request's EKS token was signed with: the token is the
/// base64url of an STS `GetCallerIdentity` URL presigned with the caller's credentials.
fn token_key(request: &kube_fake::RecordedRequest) -> Option<String> {
    let url = forewarn::adapters::kube::url_from_token(request.bearer.as_deref()?).ok()?;
    let credential = url.split("X-Amz-Credential=").nth(1)?;
    Some(credential.split("%2F").next()?.to_string())
}

/// The access keys the EKS tokens sent to `fake` were signed with, and their accounts as moto
/// says.
async fn signers(moto: &str, fake: &kube_fake::KubeFake) -> (BTreeSet<String>, BTreeSet<String>) {
    let keys: BTreeSet<String> = fake.requests().iter().filter_map(token_key).collect();
    let mut accounts = BTreeSet::new();
    for key in &keys {
        let account = forewarn_tests::eks::caller_account(moto, key).await;
        accounts.insert(account.unwrap_or_default());
    }
    (keys, accounts)
}

/// One deployment serving cluster `<c>` of its own account and cluster `<c>` of the member
/// account, each an EKS cluster on a Kubernetes fake of its own, each with the node of a spot
/// instance of its account.
struct TwoAccounts {
    cluster: String,
    ours: Launched,
    theirs: Launched,
    own_fake: kube_fake::KubeFake,
    member_fake: kube_fake::KubeFake,
    eks: forewarn_tests::eks::EksFake,
    handler: Handler,
    _dir: tempfile::TempDir,
}

async fn two_accounts(moto: &forewarn_tests::moto::MotoServer) -> TwoAccounts {
    let base = moto.sdk_config();
    let cluster = forewarn_tests::moto::unique_name("member");
    let own_ec2 = aws_sdk_ec2::Client::new(&base);
    let image = any_image(&own_ec2).await.unwrap();
    let ours = launch(&own_ec2, &image, &Launch::spot(&cluster))
        .await
        .unwrap();
    let member_sdk = Accounts::new(&base, org())
        .config_for(&place(MEMBER, "us-east-1"))
        .await
        .unwrap();
    let member_ec2 = aws_sdk_ec2::Client::new(&member_sdk);
    let theirs = launch(&member_ec2, &image, &Launch::spot(&cluster))
        .await
        .unwrap();
    let own_fake = forewarn_tests::cluster::deployed().await;
    own_fake.insert(ec2_node(&ours.dns, &ours.id, &ours.zone));
    let member_fake = forewarn_tests::cluster::deployed().await;
    member_fake.insert(ec2_node(&theirs.dns, &theirs.id, &theirs.zone));
    let eks = forewarn_tests::eks::EksFake::at(&[(cluster.as_str(), &own_fake.url())])
        .await
        .in_accounts(&moto.endpoint());
    eks.add(&format!("{MEMBER}/{cluster}"), &member_fake.url());

    let dir = tempfile::tempdir().unwrap();
    let served = format!("{cluster},{MEMBER}/{cluster}");
    let state_dir = dir.path().display().to_string();
    let mut settings = forewarn::app::settings::Settings::from_vars([
        ("FOREWARN_CLUSTERS", served.as_str()),
        ("FOREWARN_ACCOUNT_ID", OWN),
        ("FOREWARN_MEMBER_ROLE", ROLE),
        ("FOREWARN_STATE_DIR", &state_dir),
        // Drains' passes in process; no load balancers.
        ("FOREWARN_DRAIN_PASS_INTERVAL", "off"),
        ("FOREWARN_DEREGISTER_BUDGET", "off"),
    ])
    .unwrap();
    // Evictions at once.
    settings.config.surge_kinds.clear();
    let sdk = forewarn_tests::eks::with_eks(&base, &eks.url());
    let services = forewarn::app::wiring::services_on(
        &settings,
        Some(sdk),
        forewarn::adapters::clock::SystemClock::shared(),
    )
    .await
    .unwrap();
    TwoAccounts {
        cluster,
        ours,
        theirs,
        own_fake,
        member_fake,
        eks,
        handler: services.handler,
        _dir: dir,
    }
}

/// Issue 46, item 2: a member account's cluster is reached through the member role. One
/// deployment serves cluster `<c>` of its own account and cluster `<c>` of a member account
/// (the same name: two clusters). Each spot warning is acted on in its own account's cluster
/// only; the member's `DescribeCluster` is asked in the member account, with the member
/// role's credentials (the EKS fake tells accounts apart as moto does), and the member
/// cluster's API server is sent an IAM token signed with them; the own cluster's, with the
/// deployment's own.
#[test]
fn a_member_accounts_cluster_is_reached_through_its_member_role() {
    runtime().block_on(async {
        let moto = shared();
        let TwoAccounts {
            cluster,
            ours,
            theirs,
            own_fake,
            member_fake,
            eks,
            handler,
            _dir,
        } = two_accounts(moto).await;
        let time = chrono::Utc::now().to_rfc3339();
        let batch = forewarn_tests::sqs::lambda_batch(&[
            warning("ev-own", &ours.id, OWN, &time),
            warning("ev-member", &theirs.id, MEMBER, &time),
        ]);
        let inv = handler.invoke(batch, None).await.unwrap();
        let [own, member] = &inv.reports[..] else {
            panic!("two reports: {:#?}", inv.reports);
        };
        assert_eq!(own.outcome, Outcome::Acted, "{own:#?}");
        assert_eq!(member.outcome, Outcome::Acted, "{member:#?}");
        assert_eq!(
            own.cluster.as_deref(),
            Some(format!("{OWN}/us-east-1/{cluster}").as_str())
        );
        assert_eq!(
            member.cluster.as_deref(),
            Some(format!("{MEMBER}/us-east-1/{cluster}").as_str())
        );
        assert!(
            unschedulable(&own_fake, &ours.dns),
            "the own node, in the own cluster"
        );
        assert!(
            unschedulable(&member_fake, &theirs.dns),
            "the member's node, in the member's cluster"
        );
        let patched = |fake: &kube_fake::KubeFake| -> Vec<String> {
            fake.requests()
                .into_iter()
                .filter(|r| r.method.as_str() == "PATCH" && r.path.starts_with("/api/v1/nodes/"))
                .map(|r| r.path)
                .collect()
        };
        assert_eq!(patched(&own_fake), [format!("/api/v1/nodes/{}", ours.dns)]);
        assert_eq!(
            patched(&member_fake),
            [format!("/api/v1/nodes/{}", theirs.dns)]
        );

        // EKS: each cluster described in its own account, with that account's credentials.
        let described: Vec<(String, String, Option<String>)> = eks
            .requests()
            .into_iter()
            .filter(|r| r.operation == "DescribeCluster")
            .map(|r| (r.account, r.cluster.unwrap_or_default(), r.access_key))
            .collect();
        let own_described = described
            .iter()
            .find(|d| d.0 == OWN)
            .expect("own described");
        let member_described = described
            .iter()
            .find(|d| d.0 == MEMBER)
            .expect("the member's cluster described in the member account");
        assert_eq!(own_described.1, cluster);
        assert_eq!(own_described.2.as_deref(), Some(OWN_KEY));
        assert_eq!(member_described.1, cluster);
        assert_ne!(
            member_described.2.as_deref(),
            Some(OWN_KEY),
            "the member role's credentials"
        );
        // Kubernetes: each API server sent a token signed with its account's credentials.
        let (own_keys, own_accounts) = signers(&moto.endpoint(), &own_fake).await;
        assert_eq!(own_keys, [OWN_KEY.to_string()].into());
        assert_eq!(own_accounts, [OWN.to_string()].into());
        let (member_keys, member_accounts) = signers(&moto.endpoint(), &member_fake).await;
        assert!(!member_keys.contains(OWN_KEY), "{member_keys:?}");
        assert_eq!(member_accounts, [MEMBER.to_string()].into());
    });
}
