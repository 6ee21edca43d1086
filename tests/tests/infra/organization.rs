//! An organization: forewarn's own bus, and the member stack's forwarding rules.

use serde_json::{Value, json};

use crate::support::{
    ACCOUNT, CENTRAL, Deployment, REGION, RULES, env_of, inline_policy, member, statements_of,
    strings,
};

/// With `OrganizationId`, forewarn's own bus admits the organization's accounts' forwarded
/// events of the three sources and nobody else's, the rules are on it, and both functions may
/// assume `MemberRoleName` (the sweeper its read-only twin) in the organization's accounts only,
/// with the name in their environment; without it, none of this, and the rules are on the
/// default bus. The rules name no account, so forwarded events match them.
#[test]
fn an_organization_reaches_the_bus_and_the_member_roles_only() {
    let d = Deployment::new(&[]);
    assert!(!d.condition("WithOrganization"));
    for resource in [
        "ForewarnEventBus",
        "OrganizationEventBusPolicy",
        "MemberRolesPolicy",
        "MemberReadRolesPolicy",
    ] {
        assert_eq!(
            d.template["Resources"][resource]["Condition"],
            "WithOrganization"
        );
    }
    for role in ["HandlerRole", "SweeperRole"] {
        assert!(statements_of(&d, role, "sts:").is_empty(), "{role}");
    }
    for rule in RULES {
        let pattern = &d.properties(rule)["EventPattern"];
        assert!(pattern.get("account").is_none(), "{rule}: {pattern}");
        assert!(
            d.properties(rule).get("EventBusName").is_none(),
            "{rule}: on the default bus without an organization"
        );
        assert!(
            d.properties(rule)["Targets"][0]
                .get("SqsParameters")
                .is_none(),
            "{rule}: one account, no message group (each event a tenant of its own)"
        );
    }

    let org = "o-a1b2c3d4e5";
    for (role_name, overrides) in [
        ("forewarn-member", vec![("OrganizationId", org)]),
        (
            "fw-member",
            vec![("OrganizationId", org), ("MemberRoleName", "fw-member")],
        ),
    ] {
        let d = Deployment::new(&overrides);
        assert!(d.condition("WithOrganization"));
        assert_the_organizations_events_reach_forewarns_bus(&d, org);
        // The handler assumes the member role; the sweeper, which never writes in a member
        // account, only its read-only twin.
        let read_name = format!("{role_name}-read");
        for (role, name) in [
            ("HandlerRole", role_name),
            ("SweeperRole", read_name.as_str()),
        ] {
            assert_eq!(
                Value::Array(statements_of(&d, role, "sts:")),
                json!([{"Sid": "AssumeMemberRoles", "Effect": "Allow", "Action": "sts:AssumeRole",
                        "Resource": format!("arn:aws:iam::*:role/{name}"),
                        "Condition": {"StringEquals": {"aws:ResourceOrgID": org}}}]),
                "{role}"
            );
        }
        for (output, name) in [
            ("HandlerEnvFile", role_name),
            ("SweeperEnvFile", read_name.as_str()),
            ("HandlerEnvVars", role_name),
            ("SweeperEnvVars", read_name.as_str()),
        ] {
            assert_eq!(
                env_of(&d.output(output))["FOREWARN_MEMBER_ROLE"],
                name,
                "{output}"
            );
        }
    }
}

/// With an organization, forewarn's own bus takes the organization's forwarded events of the
/// three sources forewarn handles, nothing else; the default bus is left closed. The queue's
/// rules stay on the default bus, for this account's own events, in this account's message
/// group; each member account's events reach the queue from forewarn's bus through a route of
/// its own (`infra/member-route.yaml`), in its own group, and the queue's policies admit those
/// routes and no other rule of that bus.
fn assert_the_organizations_events_reach_forewarns_bus(d: &Deployment, org: &str) {
    assert_eq!(d.properties("ForewarnEventBus")["Name"], "forewarn-demo");
    let bus = d.properties("OrganizationEventBusPolicy");
    assert_eq!(bus["EventBusName"], "ForewarnEventBus.Name");
    assert_eq!(bus["StatementId"], "forewarn-demo-organization");
    assert_eq!(
        bus["Statement"],
        json!({"Sid": "forewarn-demo-organization", "Effect": "Allow", "Principal": "*",
               "Action": "events:PutEvents",
               "Resource": Deployment::arn("ForewarnEventBus"),
               "Condition": {"StringEquals": {
                   "aws:PrincipalOrgID": org,
                   "events:source": ["aws.ec2", "aws.health", "aws.autoscaling"]}}})
    );
    let mut detail_types = Vec::new();
    for rule in RULES {
        let rule_properties = d.properties(rule);
        assert!(rule_properties.get("EventBusName").is_none(), "{rule}");
        assert_eq!(
            rule_properties["Targets"][0]["SqsParameters"],
            json!({"MessageGroupId": ACCOUNT}),
            "{rule}: this account's tenant"
        );
        let pattern = &rule_properties["EventPattern"];
        let patterns = pattern.get("$or").and_then(Value::as_array).cloned();
        for p in patterns.unwrap_or_else(|| vec![pattern.clone()]) {
            detail_types.extend(strings(&p["detail-type"]).into_iter().map(String::from));
        }
    }
    detail_types.sort();
    detail_types.dedup();
    assert!(d.template["Resources"].get("OwnEventsRule").is_none());

    // A member account's route: its events of every kind a rule matches, in its own group.
    let member = "111122223333";
    let route = Deployment::of(
        "infra/member-route.yaml",
        &[
            ("MemberAccountId", member),
            ("EventBusName", "forewarn-demo"),
            ("QueueArn", "arn:aws:sqs:us-east-1:210987654321:q"),
            (
                "DeadLetterQueueArn",
                "arn:aws:sqs:us-east-1:210987654321:dlq",
            ),
        ],
    );
    let rule = route.properties("Route");
    assert_eq!(rule["Name"], format!("forewarn-route-{member}"));
    assert_eq!(rule["EventBusName"], "forewarn-demo");
    assert_eq!(strings(&rule["EventPattern"]["account"]), [member]);
    let mut routed: Vec<String> = strings(&rule["EventPattern"]["detail-type"])
        .into_iter()
        .map(String::from)
        .collect();
    routed.sort();
    assert_eq!(routed, detail_types, "every kind a rule matches is routed");
    assert_eq!(
        rule["Targets"],
        json!([{"Id": "forewarn-queue", "Arn": "arn:aws:sqs:us-east-1:210987654321:q",
                "SqsParameters": {"MessageGroupId": member},
                "DeadLetterConfig": {"Arn": "arn:aws:sqs:us-east-1:210987654321:dlq"},
                "RetryPolicy": {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 3600}}])
    );
    // The queues admit the routes, by their names on forewarn's bus, and no other rule there.
    let routes = format!("arn:aws:events:{REGION}:{ACCOUNT}:rule/forewarn-demo/forewarn-route-*");
    for (policy, queue) in [
        ("EventQueuePolicy", "EventQueue"),
        ("DeadLetterQueuePolicy", "DeadLetterQueue"),
    ] {
        let statements = d.properties(policy)["PolicyDocument"]["Statement"].clone();
        let statements = statements.as_array().unwrap();
        let of = |effect: &str, operator: &str| -> Vec<String> {
            statements
                .iter()
                .filter(|st| st["Effect"] == effect && st["Action"] == "sqs:SendMessage")
                .flat_map(|st| {
                    strings(&st["Condition"][operator]["aws:SourceArn"])
                        .into_iter()
                        .map(String::from)
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        assert!(of("Deny", "ArnNotLike").contains(&routes), "{policy}");
        assert!(of("Allow", "ArnLike").contains(&routes), "{policy}");
        for arn in of("Allow", "ArnLike") {
            assert!(
                arn == routes || !arn.contains("forewarn-demo/"),
                "{policy} of {queue}: no other rule of forewarn's bus: {arn}"
            );
        }
    }
}

/// A member account forwards what the central stack's rules match: the same rules, the same
/// patterns (with and without hook names), each to forewarn's bus in the central account through
/// the forwarding role, which may put events there and nowhere else and is EventBridge's for
/// this account alone.
#[test]
fn the_member_rules_are_the_stacks_forwarded_to_the_central_bus() {
    let bus = format!("arn:aws:events:{REGION}:{CENTRAL}:event-bus/forewarn-demo");
    for hooks in ["", "drain-a,drain-b"] {
        let central = Deployment::new(&[("LifecycleHookNames", hooks)]);
        let m = member(&[("LifecycleHookNames", hooks)]);
        let mut rules: Vec<&str> = m.template["Resources"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, r)| r["Type"] == "AWS::Events::Rule")
            .map(|(name, _)| name.as_str())
            .collect();
        rules.sort_unstable();
        let mut expected = RULES.to_vec();
        expected.sort_unstable();
        assert_eq!(rules, expected);
        for rule in RULES {
            let theirs = m.properties(rule);
            assert_eq!(
                theirs["EventPattern"],
                central.properties(rule)["EventPattern"],
                "{rule} with hooks {hooks:?}"
            );
            assert_eq!(theirs["State"], "ENABLED");
            assert_eq!(
                theirs["Targets"],
                json!([{"Id": "forewarn-central-bus", "Arn": bus,
                        "RoleArn": Deployment::arn("ForwardRole"),
                        "RetryPolicy": {"MaximumRetryAttempts": 185,
                                        "MaximumEventAgeInSeconds": 3600}}]),
                "{rule}"
            );
        }
    }
    let m = member(&[]);
    let role = m.properties("ForwardRole");
    assert_eq!(
        role["AssumeRolePolicyDocument"]["Statement"],
        json!([{"Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"},
                "Action": "sts:AssumeRole",
                "Condition": {"StringEquals": {"aws:SourceAccount": ACCOUNT}}}])
    );
    assert_eq!(
        inline_policy(&role, "forewarn-forward")["Statement"],
        json!([{"Sid": "PutOnTheCentralBus", "Effect": "Allow", "Action": "events:PutEvents",
                "Resource": bus}])
    );
    assert_eq!(role["Policies"].as_array().unwrap().len(), 1);
}
