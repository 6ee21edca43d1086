//! The fault-injecting proxy (`forewarn_tests::proxy`) in front of moto: requests pass through
//! and are counted by service and operation; faults answer as the real services do and are used
//! exactly `times` times.

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use forewarn_tests::moto::{runtime, shared, unique_name};
use forewarn_tests::proxy::{AwsFault, AwsProxy, FaultKind};

fn one_attempt(config: &aws_config::SdkConfig) -> aws_config::SdkConfig {
    config
        .to_builder()
        .retry_config(RetryConfig::disabled())
        .build()
}

#[test]
fn requests_pass_through_and_are_counted() {
    runtime().block_on(async {
        let proxy = AwsProxy::start(&shared().endpoint()).await.unwrap();
        let sdk = proxy.sdk_config(&shared().sdk_config());
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let queue = sqs
            .create_queue()
            .queue_name(unique_name("proxy"))
            .send()
            .await
            .expect("CreateQueue through the proxy");
        assert!(queue.queue_url().is_some());
        let ec2 = aws_sdk_ec2::Client::new(&sdk);
        ec2.describe_instances()
            .send()
            .await
            .expect("DescribeInstances through the proxy");
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        dynamodb
            .list_tables()
            .send()
            .await
            .expect("ListTables through the proxy");

        let calls = proxy.calls();
        let seen: Vec<(&str, &str, u16, bool)> = calls
            .iter()
            .map(|c| {
                (
                    c.service.as_str(),
                    c.operation.as_str(),
                    c.status,
                    c.faulted,
                )
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                ("sqs", "CreateQueue", 200, false),
                ("ec2", "DescribeInstances", 200, false),
                ("dynamodb", "ListTables", 200, false),
            ]
        );
        let counts = proxy.counts();
        assert_eq!(counts.get("sqs"), Some(&1));
        assert_eq!(counts.get("ec2"), Some(&1));
        assert_eq!(counts.get("dynamodb"), Some(&1));
        proxy.reset();
        assert!(proxy.calls().is_empty());
    });
}

#[test]
fn throttling_is_answered_as_the_services_do_and_used_its_times() {
    runtime().block_on(async {
        let proxy = AwsProxy::start(&shared().endpoint()).await.unwrap();
        let sdk = one_attempt(&proxy.sdk_config(&shared().sdk_config()));
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        let ec2 = aws_sdk_ec2::Client::new(&sdk);
        proxy.inject(AwsFault::operation(
            "dynamodb",
            "ListTables",
            FaultKind::Throttle,
            2,
        ));
        proxy.inject(AwsFault::service("ec2", FaultKind::Throttle, 1));

        for _ in 0..2 {
            let err = dynamodb.list_tables().send().await.unwrap_err();
            assert_eq!(
                err.code(),
                Some("ProvisionedThroughputExceededException"),
                "{err:?}"
            );
        }
        dynamodb
            .list_tables()
            .send()
            .await
            .expect("the fault is used up");
        let err = ec2.describe_instances().send().await.unwrap_err();
        assert_eq!(err.code(), Some("RequestLimitExceeded"), "{err:?}");
        ec2.describe_instances().send().await.expect("used up");

        let faulted: Vec<(String, u16)> = proxy
            .calls()
            .iter()
            .filter(|c| c.faulted)
            .map(|c| (c.operation.clone(), c.status))
            .collect();
        assert_eq!(
            faulted,
            vec![
                ("ListTables".to_string(), 400),
                ("ListTables".to_string(), 400),
                ("DescribeInstances".to_string(), 503),
            ]
        );

        // With retries, the SDK classifies the answers as throttling and absorbs them.
        let retrying = proxy
            .sdk_config(&shared().sdk_config())
            .to_builder()
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(4)
                    .with_initial_backoff(Duration::from_millis(5)),
            );
        let dynamodb = aws_sdk_dynamodb::Client::new(&retrying.build());
        proxy.reset();
        proxy.inject(AwsFault::service("dynamodb", FaultKind::Throttle, 2));
        dynamodb
            .list_tables()
            .send()
            .await
            .expect("retries absorb two throttles");
        let statuses: Vec<u16> = proxy.calls().iter().map(|c| c.status).collect();
        assert_eq!(statuses, vec![400, 400, 200]);
    });
}

#[test]
fn unreachable_and_hang_close_the_connection_and_status_answers_it() {
    runtime().block_on(async {
        let proxy = AwsProxy::start(&shared().endpoint()).await.unwrap();
        let sdk = one_attempt(&proxy.sdk_config(&shared().sdk_config()));
        let ec2 = aws_sdk_ec2::Client::new(&sdk);
        proxy.inject(AwsFault::service("ec2", FaultKind::Unreachable, 1));
        proxy.inject(AwsFault::service(
            "ec2",
            FaultKind::Hang(Duration::from_millis(50)),
            1,
        ));
        proxy.inject(AwsFault::service("ec2", FaultKind::Status(500), 1));
        let unreachable = ec2.describe_instances().send().await.unwrap_err();
        assert!(
            matches!(
                unreachable,
                aws_sdk_ec2::error::SdkError::DispatchFailure(_)
                    | aws_sdk_ec2::error::SdkError::ResponseError(_)
            ),
            "{unreachable:?}"
        );
        let hung = ec2.describe_instances().send().await.unwrap_err();
        assert!(
            matches!(
                hung,
                aws_sdk_ec2::error::SdkError::DispatchFailure(_)
                    | aws_sdk_ec2::error::SdkError::ResponseError(_)
            ),
            "{hung:?}"
        );
        let status = ec2.describe_instances().send().await.unwrap_err();
        assert_eq!(
            status.raw_response().map(|r| r.status().as_u16()),
            Some(500),
            "{status:?}"
        );
        ec2.describe_instances()
            .send()
            .await
            .expect("every fault is used up");
        let seen: Vec<(u16, bool)> = proxy
            .calls()
            .iter()
            .map(|c| (c.status, c.faulted))
            .collect();
        assert_eq!(seen, vec![(0, true), (0, true), (500, true), (200, false)]);
        proxy.clear_faults();
    });
}
