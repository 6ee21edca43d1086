//! Calls in an event's own account and region (`forewarn::adapters::accounts`), on moto through
//! the recording proxy: STS `AssumeRole` of the member role into another account id (moto keys
//! what it holds by the account of the credentials, so an instance launched with the assumed
//! credentials exists in that account only), `DescribeInstances` there, Auto Scaling lifecycle
//! calls signed with the member's credentials in the event's region (moto does not serve
//! `CompleteLifecycleAction`: the proxy answers it, and records who signed it and where), and
//! forged or unserved accounts refused before any request is made.

use forewarn::adapters::accounts::{AccountSettings, Accounts};
use forewarn::adapters::autoscaling::AsgLifecycle;
use forewarn::adapters::ec2::Ec2Directory;
use forewarn::domain::event::LifecycleAction;
use forewarn::ports::{
    FailureKind, InstanceDirectory, LifecycleCompleter, LifecycleOutcome, Place,
};
use forewarn_tests::ec2::{Launch, any_image, launch};
use forewarn_tests::moto::{runtime, shared};
use forewarn_tests::proxy::{AwsCall, AwsFault, AwsProxy, FaultKind};

/// The deployment's account: moto's default, whose credentials the tests' configuration has.
const OWN: &str = "123456789012";
/// A member account of the organization.
const MEMBER: &str = "111111111111";
const ROLE: &str = "forewarn-member";
/// The access key of the tests' own credentials.
const OWN_KEY: &str = "testing";

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

fn org() -> AccountSettings {
    AccountSettings {
        own: Some(OWN.into()),
        member_role: Some(ROLE.into()),
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
        transition: "autoscaling:EC2_INSTANCE_TERMINATING".into(),
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
        let found = directory.describe_at(&member, &ids).await.unwrap();
        let facts = &found[&launched.id];
        assert_eq!(facts.zone.as_deref(), Some("eu-west-1a"));
        assert_eq!(facts.clusters(), vec!["demo"]);
        // The own account does not see it, in that region or its own.
        assert!(
            directory
                .describe_at(&place(OWN, "eu-west-1"), &ids)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(directory.describe(&ids).await.unwrap().is_empty());
        assert!(
            directory
                .describe_at(&Place::default(), &ids)
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
                (true, "eu-west-1"),  // describe_at(member)
                (false, "eu-west-1"), // describe_at(own, eu-west-1)
                (false, "us-east-1"), // describe
                (false, "us-east-1"), // describe_at(no place)
            ]
        );
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
        assert_eq!(
            asg.complete(&launched.id, &theirs).await.unwrap(),
            LifecycleOutcome::Completed
        );
        // An action of the own account (or one from a plan written before actions had a
        // place): the own credentials, in the own region.
        let ours = action(None, None);
        assert_eq!(
            asg.complete(&launched.id, &ours).await.unwrap(),
            LifecycleOutcome::Completed
        );

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
                .describe_at(&place(forged, "us-east-1"), &ids)
                .await
                .unwrap_err();
            assert_eq!(err.kind, FailureKind::Invalid);
            assert!(!err.retryable());
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
                .describe_at(&place(MEMBER, forged), &ids)
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
        };
        let accounts = Accounts::new(&base, single);
        let directory = Ec2Directory::from_conf(&base).with_accounts(accounts.clone());
        let ids = vec!["i-0a1b2c3d4e5f60001".to_string()];
        let err = directory
            .describe_at(&place(MEMBER, "us-east-1"), &ids)
            .await
            .unwrap_err();
        assert_eq!(err.kind, FailureKind::Forbidden);
        let text = err.to_string();
        assert!(
            text.contains(MEMBER) && text.contains(OWN) && text.contains("FOREWARN_MEMBER_ROLE"),
            "{text}"
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
                .describe_at(&place(OWN, "us-east-1"), &ids)
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
            .describe_at(&place("222222222222", "us-east-1"), &ids)
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("ec2:DescribeInstances"), "{text}");
        let calls = proxy.calls();
        assert!(!of(&calls, "AssumeRole").is_empty(), "{calls:#?}");
        assert!(
            of(&calls, "DescribeInstances").is_empty(),
            "nothing was asked of EC2 without the member's credentials: {calls:#?}"
        );
    });
}
