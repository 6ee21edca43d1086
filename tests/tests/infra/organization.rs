//! An organization: forewarn's own bus, and the member stack's forwarding rules.

use serde_json::{Value, json};

use crate::support::{
    ACCOUNT, CENTRAL, CENTRAL_BUS, Deployment, REGION, RULES, env_of, inline_policy, member,
    statements_of, strings,
};

/// With `OrganizationId`, forewarn's own bus (named after the stack) admits the organization's
/// accounts' forwarded events of the three sources and nobody else's, and both functions may
/// assume the member role `forewarn-member` (the sweeper its read-only twin) in the
/// organization's accounts only, with the name in their environment; without it, none of this, and the rules are on the
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
    let role_name = "forewarn-member";
    let d = Deployment::new(&[("OrganizationId", org)]);
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
    assert_eq!(bus["StatementId"], "forewarn-organization");
    assert_eq!(
        bus["Statement"],
        json!({"Sid": "forewarn-organization", "Effect": "Allow", "Principal": "*",
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
/// this account alone; what a rule cannot deliver goes to the member stack's dead-letter queue.
/// Each rule's description names the central account, read from the bus's ARN.
#[test]
fn the_member_rules_are_the_stacks_forwarded_to_the_central_bus() {
    let bus = format!("arn:aws:events:{REGION}:{CENTRAL}:event-bus/forewarn-demo");
    assert_eq!(bus, CENTRAL_BUS);
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
                        "DeadLetterConfig": {"Arn": Deployment::arn("DeadLetterQueue")},
                        "RetryPolicy": {"MaximumRetryAttempts": 185,
                                        "MaximumEventAgeInSeconds": 3600}}]),
                "{rule}"
            );
            let description = theirs["Description"].as_str().unwrap();
            assert!(
                description.starts_with(&format!("forewarn member, to {CENTRAL}: ")),
                "{rule}: {description}"
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

/// Issue 57: the member stack keeps what it cannot deliver. Every forwarding target names the
/// stack's dead-letter queue (encrypted, 14 days); one alarm watches the queue's depth, one the
/// seven rules' `FailedInvocations` (a metric-math sum with each rule once, by its name), both
/// notifying `AlarmTopicArn` only when it is set. Who may send to the queue:
/// `only_the_member_rules_may_send_to_the_member_dead_letter_queue` (`queues`).
#[test]
fn the_member_stack_keeps_what_it_cannot_deliver() {
    let m = member(&[]);
    let resources = m.template["Resources"].as_object().unwrap();
    let rules: Vec<&String> = resources
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::Events::Rule")
        .map(|(name, _)| name)
        .collect();
    assert_eq!(rules.len(), RULES.len());
    for rule in &rules {
        let targets = m.properties(rule)["Targets"].clone();
        let targets = targets.as_array().unwrap();
        assert!(!targets.is_empty(), "{rule}");
        for target in targets {
            assert_eq!(
                target["DeadLetterConfig"],
                json!({"Arn": Deployment::arn("DeadLetterQueue")}),
                "{rule}"
            );
        }
    }
    let queue = m.properties("DeadLetterQueue");
    assert_eq!(queue["SqsManagedSseEnabled"], true);
    assert_eq!(queue["MessageRetentionPeriod"], 1_209_600);
    assert_eq!(
        m.output("DeadLetterQueueArn"),
        Deployment::arn("DeadLetterQueue")
    );

    let depth = m.properties("DeadLetterQueueAlarm");
    assert_eq!(depth["Namespace"], "AWS/SQS");
    assert_eq!(depth["MetricName"], "ApproximateNumberOfMessagesVisible");
    assert_eq!(
        depth["Dimensions"],
        json!([{"Name": "QueueName", "Value": "DeadLetterQueue.QueueName"}])
    );
    assert_eq!(
        (&depth["Threshold"], &depth["ComparisonOperator"]),
        (&json!(0), &json!("GreaterThanThreshold"))
    );

    let failed = m.properties("ForwardingFailedAlarm");
    let metrics = failed["Metrics"].as_array().unwrap();
    let returned: Vec<&Value> = metrics.iter().filter(|q| q["ReturnData"] == true).collect();
    assert_eq!(returned.len(), 1, "{metrics:?}");
    let expression = returned[0]["Expression"].as_str().unwrap();
    let mut summed: Vec<String> = Vec::new();
    for id in expression
        .strip_prefix("SUM([")
        .and_then(|e| e.strip_suffix("])"))
        .unwrap_or_else(|| panic!("a sum of metrics: {expression}"))
        .split(", ")
    {
        let query = metrics.iter().find(|q| q["Id"] == id).unwrap();
        assert_eq!(query["ReturnData"], false, "{id}");
        let stat = &query["MetricStat"];
        assert_eq!(stat["Stat"], "Sum", "{id}");
        assert_eq!(stat["Metric"]["Namespace"], "AWS/Events", "{id}");
        assert_eq!(stat["Metric"]["MetricName"], "FailedInvocations", "{id}");
        let dimensions = stat["Metric"]["Dimensions"].as_array().unwrap();
        assert_eq!(dimensions.len(), 1, "{id}");
        assert_eq!(dimensions[0]["Name"], "RuleName", "{id}");
        let rule = dimensions[0]["Value"].as_str().unwrap();
        summed.push(rule.strip_prefix("ref:").unwrap().to_string());
    }
    assert_eq!(
        metrics.len(),
        summed.len() + 1,
        "no metric left out of the sum"
    );
    summed.sort();
    let mut expected: Vec<String> = rules.iter().map(|r| r.to_string()).collect();
    expected.sort();
    assert_eq!(summed, expected, "each rule once");
    assert_eq!(
        (&failed["Threshold"], &failed["ComparisonOperator"]),
        (&json!(0), &json!("GreaterThanThreshold"))
    );

    let topic = "arn:aws:sns:us-east-1:123456789012:ops";
    for (overrides, actions) in [
        (vec![], None),
        (vec![("AlarmTopicArn", topic)], Some(json!([topic]))),
    ] {
        let m = member(&overrides);
        for alarm in ["DeadLetterQueueAlarm", "ForwardingFailedAlarm"] {
            let alarm_properties = m.properties(alarm);
            assert_eq!(alarm_properties["TreatMissingData"], "notBreaching");
            for key in ["AlarmActions", "OKActions"] {
                assert_eq!(alarm_properties.get(key), actions.as_ref(), "{alarm} {key}");
            }
        }
    }
}

/// Issue 57: the member stack takes the central bus as one ARN, so it keeps at most 8 parameters,
/// and it fails in any other region than the bus's: a condition compares `AWS::Region` with the
/// ARN's region, and outside it a wait condition nobody signals fails the stack (a `Rules`
/// assertion cannot read an ARN's region: `rules_use_only_rule_functions`).
#[test]
fn the_member_stack_takes_the_central_bus_and_refuses_another_region() {
    let m = member(&[]);
    let parameters = m.template["Parameters"].as_object().unwrap();
    assert!(parameters.len() <= 8, "{:?}", parameters.keys());
    // The member role's name is fixed (issue 58): the central functions assume forewarn-member.
    for gone in ["CentralAccountId", "CentralEventBusName", "MemberRoleName"] {
        assert!(parameters.get(gone).is_none(), "{gone}");
    }
    assert!(!m.condition("OutsideTheCentralRegion"));
    let region = m.template["Conditions"]["OutsideTheCentralRegion"].to_string();
    assert!(
        region.contains("AWS::Region") && region.contains("CentralEventBusArn"),
        "{region}"
    );
    let elsewhere = "arn:aws:events:eu-west-1:210987654321:event-bus/forewarn-demo";
    assert!(member(&[("CentralEventBusArn", elsewhere)]).condition("OutsideTheCentralRegion"));
    let guard = &m.template["Resources"]["CentralRegionOnly"];
    assert_eq!(guard["Type"], "AWS::CloudFormation::WaitCondition");
    assert_eq!(guard["Condition"], "OutsideTheCentralRegion");
    assert_eq!(guard["CreationPolicy"]["ResourceSignal"]["Count"], 1);
    assert!(guard.get("Properties").is_none(), "nothing can signal it");
    // The only resource with a condition on the region: in the bus's region, the rest is made.
    for (name, resource) in m.template["Resources"].as_object().unwrap() {
        if name != "CentralRegionOnly" {
            assert!(resource.get("Condition").is_none(), "{name}");
        }
    }
    assert_eq!(m.output("CentralBusArn"), CENTRAL_BUS);
}
