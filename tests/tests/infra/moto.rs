//! The stacks deployed to moto's CloudFormation: every option set, an organization's central and
//! member stacks, a member account's route.

use forewarn_tests::moto::workspace_root;
use serde_json::{Value, json};

use crate::support::{ACCOUNT, HOOK_ROLE, REDRIVE_ROLE, REGION, RULES, env_of};

/// The stack with every option set deploys (moto's CloudFormation resolves the conditions,
/// `Fn::Split` and `Fn::Sub` as written), and what it made says what the options asked.
#[test]
fn the_stack_deploys_with_hook_names_and_extra_senders() {
    use forewarn_tests::moto::{deploy_stack, runtime, shared, unique_name};

    runtime().block_on(async {
        let sdk = shared().sdk_config();
        let cluster = unique_name("infra");
        let template =
            std::fs::read_to_string(workspace_root().join("infra/forewarn.yaml")).unwrap();
        let outputs = deploy_stack(
            &sdk,
            &cluster,
            &template,
            &[
                ("Clusters", &cluster),
                ("FunctionsDeployed", "false"),
                ("CreateAccessEntry", "false"),
                ("LifecycleHookNames", "drain-a,drain-b"),
                ("HookNotificationRoleArn", HOOK_ROLE),
                ("RedriveRoleArn", REDRIVE_ROLE),
            ],
        )
        .await
        .expect("the stack deploys to moto");
        let table = &outputs["TableName"];
        // The key's secret as the harness's CloudFormation model of it makes it (its ARN).
        let secret = aws_sdk_secretsmanager::Client::new(&sdk)
            .describe_secret()
            .secret_id(format!("{cluster}-continuation-key"))
            .send()
            .await
            .expect("the stack's secret");
        let secret = secret.arn().expect("its ARN");
        assert_eq!(
            outputs["HandlerEnvFile"],
            format!(
                "FOREWARN_CLUSTERS={cluster}\n\
                 FOREWARN_TABLE={table}\nFOREWARN_KEY_SECRET={secret}\nFOREWARN_POLICY_ALLOW=\"cordon cordon-drain cordon-for \
                 adaptive\"\nFOREWARN_ACCOUNT_ID={ACCOUNT}\nFOREWARN_ENVIRONMENTS=10\n\
                 FOREWARN_LIFECYCLE_HOOKS=drain-a,drain-b\n"
            )
        );
        // Deployed = benchmarked: the handler's client-side limit is the share divided by the
        // event source mapping's MaximumConcurrency, as the mass benchmark assumes.
        assert!(outputs["HandlerEnvVars"].contains(",FOREWARN_ENVIRONMENTS=10,"));
        assert!(outputs["HandlerEnvVars"].ends_with(",FOREWARN_LIFECYCLE_HOOKS=drain-a,drain-b"));
        // Named after the stack.
        assert_eq!(outputs["HandlerFunctionName"], format!("{cluster}-handler"));
        assert_eq!(outputs["SweeperFunctionName"], format!("{cluster}-sweeper"));
        assert_eq!(*table, format!("{cluster}-pools"));

        let events = aws_sdk_eventbridge::Client::new(&sdk);
        let rules = events
            .list_rules()
            .name_prefix(&cluster)
            .send()
            .await
            .expect("ListRules");
        let asg = rules
            .rules()
            .iter()
            .find(|r| {
                r.name()
                    .is_some_and(|n| n.contains("AsgTerminateLifecycleRule"))
            })
            .expect("the Auto Scaling rule");
        let pattern: Value = serde_json::from_str(asg.event_pattern().unwrap()).unwrap();
        assert_eq!(
            pattern,
            json!({"source": ["aws.autoscaling"],
                   "detail-type": ["EC2 Instance-terminate Lifecycle Action"],
                   "detail": {"LifecycleHookName": ["drain-a", "drain-b"]}})
        );
    });
}

/// An organization's central stack `name` serving `clusters` (its `Clusters`), deployed to moto
/// without functions nor access entry: its outputs.
async fn organization_stack(
    sdk: &aws_config::SdkConfig,
    name: &str,
    clusters: &str,
) -> std::collections::HashMap<String, String> {
    let template = std::fs::read_to_string(workspace_root().join("infra/forewarn.yaml")).unwrap();
    let params = [
        ("Clusters", clusters),
        ("OrganizationId", "o-a1b2c3d4e5"),
        ("FunctionsDeployed", "false"),
        ("CreateAccessEntry", "false"),
    ];
    forewarn_tests::moto::deploy_stack(sdk, name, &template, &params)
        .await
        .expect("the organization's stack deploys to moto")
}

/// An organization's central stack (a list of clusters, a member account's among them) and a
/// member stack given its bus and roles both deploy to moto, and what they made says what was
/// asked: the functions' environment, the member roles' fixed names, each forwarding rule's one
/// target (the central bus, with the member stack's dead-letter queue).
#[test]
fn an_organizations_central_and_member_stacks_deploy() {
    use forewarn_tests::moto::{deploy_stack, runtime, shared, unique_name};

    runtime().block_on(async {
        let sdk = shared().sdk_config();
        let name = unique_name("central");
        let read = |path: &str| std::fs::read_to_string(workspace_root().join(path)).unwrap();
        let outputs = organization_stack(&sdk, &name, "a,b,111122223333/c").await;
        assert_eq!(outputs["TableName"], format!("{name}-pools"));
        for (output, role) in [
            ("HandlerEnvFile", "forewarn-member"),
            ("SweeperEnvFile", "forewarn-member-read"),
        ] {
            let env = env_of(&outputs[output]);
            assert_eq!(env["FOREWARN_CLUSTERS"], "a,b,111122223333/c", "{output}");
            assert_eq!(env["FOREWARN_MEMBER_ROLE"], role, "{output}");
            assert_eq!(env["FOREWARN_ACCOUNT_ID"], ACCOUNT, "{output}");
            assert!(!env.contains_key("FOREWARN_EKS_CLUSTER"), "{output}");
        }

        let member_stack = unique_name("member");
        // The one member stack of this moto server: its roles' names are fixed.
        let role_name = "forewarn-member";
        let member_outputs = deploy_stack(
            &sdk,
            &member_stack,
            &read("infra/member.yaml"),
            &[
                ("CentralEventBusArn", &outputs["EventBusArn"]),
                ("HandlerRoleArn", &outputs["HandlerRoleArn"]),
                ("SweeperRoleArn", &outputs["SweeperRoleArn"]),
                ("ClusterNames", "a,b"),
            ],
        )
        .await
        .expect("the member stack deploys to moto");
        assert_eq!(
            member_outputs["MemberRoleArn"],
            format!("arn:aws:iam::{ACCOUNT}:role/{role_name}")
        );
        assert_eq!(
            member_outputs["MemberReadRoleArn"],
            format!("arn:aws:iam::{ACCOUNT}:role/{role_name}-read")
        );
        assert_eq!(outputs["EventBusName"], name);
        let bus = format!(
            "arn:aws:events:{REGION}:{ACCOUNT}:event-bus/{}",
            outputs["EventBusName"]
        );
        assert_eq!(outputs["EventBusArn"], bus);
        assert_eq!(member_outputs["CentralBusArn"], bus);
        let dlq = &member_outputs["DeadLetterQueueArn"];
        assert!(
            dlq.starts_with(&format!("arn:aws:sqs:{REGION}:{ACCOUNT}:")),
            "{dlq}"
        );
        let events = aws_sdk_eventbridge::Client::new(&sdk);
        let rules = events
            .list_rules()
            .name_prefix(&member_stack)
            .send()
            .await
            .expect("ListRules");
        assert_eq!(rules.rules().len(), RULES.len(), "{rules:?}");
        for rule in rules.rules() {
            let targets = events
                .list_targets_by_rule()
                .rule(rule.name().unwrap())
                .send()
                .await
                .expect("ListTargetsByRule");
            let targets: Vec<(Option<&str>, Option<&str>, Option<&str>)> = targets
                .targets()
                .iter()
                .map(|t| {
                    (
                        Some(t.arn()),
                        t.role_arn(),
                        t.dead_letter_config().and_then(|d| d.arn()),
                    )
                })
                .collect();
            assert_eq!(
                targets,
                [(
                    Some(bus.as_str()),
                    Some(member_outputs["ForwardRoleArn"].as_str()),
                    Some(dlq.as_str())
                )],
                "{rule:?}"
            );
        }
    });
}

/// On moto: a member account's route stack, made from the central stack's outputs, deploys a
/// rule on forewarn's bus, named as the queues' policies admit, matching that account alone and
/// targeting the queue in the account's message group with the dead-letter queue; the central
/// stack's own rules target the queue in the central account's group. (moto 5.2.5 cannot
/// deliver an event to a standard queue with a message group: its EventBridge looks up
/// `ContentBasedDeduplication`, which only a FIFO queue has, and answers 500. So the delivery
/// itself is not run here; what SQS does with the groups is modelled in `forewarn-bench`'s
/// queue, after the SQS developer guide.)
#[test]
fn a_member_accounts_route_puts_its_events_in_its_own_message_group() {
    use forewarn_tests::moto::{deploy_stack, runtime, shared, unique_name};

    runtime().block_on(async {
        let sdk = shared().sdk_config();
        let name = unique_name("routed");
        let read = |path: &str| std::fs::read_to_string(workspace_root().join(path)).unwrap();
        let outputs = organization_stack(&sdk, &name, "prod,111122223333/*").await;
        let member = "111122223333";
        let route = deploy_stack(
            &sdk,
            &format!("{name}-route-{member}"),
            &read("infra/member-route.yaml"),
            &[
                ("MemberAccountId", member),
                ("EventBusName", &outputs["EventBusName"]),
                ("QueueArn", &outputs["QueueArn"]),
                ("DeadLetterQueueArn", &outputs["DeadLetterQueueArn"]),
            ],
        )
        .await
        .expect("the route stack deploys to moto");
        let bus = &outputs["EventBusName"];
        assert_eq!(
            route["RouteArn"],
            format!("arn:aws:events:{REGION}:{ACCOUNT}:rule/{bus}/forewarn-route-{member}")
        );
        let events = aws_sdk_eventbridge::Client::new(&sdk);
        let rule = format!("forewarn-route-{member}");
        let described = events
            .describe_rule()
            .name(&rule)
            .event_bus_name(bus)
            .send()
            .await
            .expect("DescribeRule");
        let pattern: Value = serde_json::from_str(described.event_pattern().unwrap()).unwrap();
        assert_eq!(pattern["account"], json!([member]));
        let targets = |rule: String, bus: Option<String>| {
            let events = events.clone();
            async move {
                events
                    .list_targets_by_rule()
                    .rule(rule)
                    .set_event_bus_name(bus)
                    .send()
                    .await
                    .expect("ListTargetsByRule")
                    .targets()
                    .iter()
                    .map(|t| {
                        (
                            t.arn().to_string(),
                            t.sqs_parameters()
                                .and_then(|p| p.message_group_id())
                                .map(str::to_string),
                            t.dead_letter_config()
                                .and_then(|d| d.arn())
                                .map(str::to_string),
                        )
                    })
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(
            targets(rule, Some(bus.clone())).await,
            [(
                outputs["QueueArn"].clone(),
                Some(member.to_string()),
                Some(outputs["DeadLetterQueueArn"].clone())
            )]
        );
        // The central stack's own rules: on the default bus, in the central account's group.
        let own = events
            .list_rules()
            .name_prefix(&name)
            .send()
            .await
            .expect("ListRules");
        let spot: Vec<String> = own
            .rules()
            .iter()
            .filter_map(|r| r.name())
            .filter(|n| n.contains("SpotInterruptionRule"))
            .map(str::to_string)
            .collect();
        assert_eq!(spot.len(), 1, "{own:?}");
        let (_, group, _) = targets(spot[0].clone(), None).await.remove(0);
        assert_eq!(group.as_deref(), Some(ACCOUNT));
    });
}
