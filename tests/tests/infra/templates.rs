//! cfn-lint, the templates' rules, the pool table shared with its own template, the dashboard's
//! searches, the alarm on unreachable accounts, and the customer managed key.

use std::process::Command;

use forewarn_tests::moto::workspace_root;
use serde_json::{Value, json};

use crate::support::{Deployment, stack_template, statements_of, template};

/// The templates directly in infra/ (`cfn-lint infra/*.yaml`; the Kubernetes manifests live in
/// infra/k8s/).
fn templates() -> Vec<String> {
    let root = workspace_root();
    let mut templates: Vec<String> = std::fs::read_dir(root.join("infra"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| p.display().to_string())
        .collect();
    templates.sort();
    templates
}

#[test]
fn cfn_lint_is_clean() {
    let root = workspace_root();
    let cfn_lint = root.join(".venv/bin/cfn-lint");
    assert!(
        cfn_lint.is_file(),
        "{} is missing: run scripts/test.sh (it installs requirements.txt into .venv)",
        cfn_lint.display()
    );
    let templates = templates();
    assert_eq!(templates.len(), 4, "{templates:?}");
    let out = Command::new(&cfn_lint)
        .args(&templates)
        .output()
        .expect("run cfn-lint");
    assert!(
        out.status.success() && out.stdout.is_empty(),
        "cfn-lint reported (exit {:?}):\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The lines of the `PoolTable` resource, without its `TableName`.
fn pool_table(template: &str) -> Vec<String> {
    let text = std::fs::read_to_string(workspace_root().join(template)).unwrap();
    let mut lines = text.lines().skip_while(|l| *l != "  PoolTable:");
    let mut block = vec![lines.next().expect("a PoolTable resource").to_string()];
    for line in lines {
        let indent = line.len() - line.trim_start().len();
        if !line.trim().is_empty() && indent <= 2 {
            break;
        }
        if !line.trim_start().starts_with("TableName:") {
            block.push(line.trim_end().to_string());
        }
    }
    while block.last().is_some_and(|l| l.is_empty()) {
        block.pop();
    }
    block
}

#[test]
fn the_stack_pool_table_is_the_pool_table_template() {
    let alone = pool_table("infra/pool-table.yaml");
    assert!(alone.len() > 20, "{alone:#?}");
    assert!(
        alone
            .iter()
            .any(|l| l.contains("AttributeName: expires_at"))
    );
    assert_eq!(pool_table("infra/forewarn.yaml"), alone);
}

/// Every dimension set the dashboard's `SEARCH` expressions ask for is one the functions' EMF
/// documents carry (a widget over a set nobody emits stays empty), the `Cluster` sets of a
/// deployment serving several clusters included.
#[test]
fn the_dashboard_searches_dimension_sets_the_functions_emit() {
    use forewarn::domain::report::{ActionReport, Outcome, PoolReport, Report};
    let t = stack_template();
    let body = &t["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"][0];
    let body = body.as_str().expect("the dashboard body is a !Sub string");
    let searched: Vec<Vec<String>> = body
        .split("SEARCH('{forewarn,")
        .skip(1)
        .map(|rest| {
            let set = &rest[..rest.find('}').unwrap()];
            set.split(',').map(str::to_string).collect()
        })
        .collect();
    assert!(
        searched.iter().any(|s| s[0] == "Cluster"),
        "a widget per cluster: {searched:?}"
    );
    // What an acted spot warning handled in a named cluster emits.
    let report = Report {
        event_id: Some("e".into()),
        kind: Some(forewarn::domain::event::EventKind::SpotInterruption),
        cluster: Some("blue".into()),
        summary: None,
        origin: "sqs".into(),
        message_id: None,
        time: Some(chrono::Utc::now() - chrono::Duration::seconds(5)),
        instance_ids: vec!["i-1".into()],
        outcome: Outcome::Acted,
        pools: vec![PoolReport {
            pool: "spot#m5.large#us-east-1a".parse().unwrap(),
            unavailable_until: Some(chrono::Utc::now()),
        }],
        actions: vec![ActionReport {
            instance_id: "i-1".into(),
            node: Some("n".into()),
            action: forewarn::domain::config::Action::CordonDrain,
            target: None,
            deadline: None,
            reason: String::new(),
            complete_lifecycle: None,
            result: Some("cordoned".into()),
            cordoned_at: Some(chrono::Utc::now()),
            drain: None,
            heartbeat_at: None,
        }],
        reason: None,
        pass: None,
        permanent: false,
        traffic: None,
        retry_not_before: None,
        account_unreachable: None,
    };
    let emitted: Vec<Vec<String>> =
        forewarn::app::telemetry::emf_documents(&report, chrono::Utc::now())
            .iter()
            .flat_map(|d| {
                d["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
                    .as_array()
                    .unwrap()
                    .clone()
            })
            .map(|set| {
                set.as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d.as_str().unwrap().to_string())
                    .collect()
            })
            .collect();
    for set in &searched {
        assert!(
            emitted.contains(set),
            "nobody emits {set:?}; emitted: {emitted:?}"
        );
    }
}

/// The functions of a template fragment: every `Ref`, `Condition` and `Fn::` key in it.
fn functions_in(v: &Value, found: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            for (k, v) in o {
                if k == "Ref" || k == "Condition" || k.starts_with("Fn::") {
                    found.push(k.clone());
                }
                functions_in(v, found);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| functions_in(i, found)),
        _ => {}
    }
}

/// CloudFormation refuses a template whose `Rules` use any function but its rule functions
/// ("Following functions are not supported in the Rules block"), nested ones included, which
/// cfn-lint does not see: no `Fn::Select` or `Fn::Split` there (so a rule cannot read a region
/// out of an ARN, nor look into a list's entries: the member stack's region guard and the
/// central stack's member-clusters guard are conditions). No template has rules today; one
/// added must pass this.
#[test]
fn rules_use_only_rule_functions() {
    const RULE_FUNCTIONS: [&str; 11] = [
        "Fn::And",
        "Fn::Contains",
        "Fn::EachMemberEquals",
        "Fn::EachMemberIn",
        "Fn::Equals",
        "Fn::Not",
        "Fn::Or",
        "Fn::RefAll",
        "Fn::ValueOf",
        "Fn::ValueOfAll",
        "Ref",
    ];
    for path in templates() {
        let relative = path.rsplit_once("/infra/").map(|(_, p)| p).unwrap();
        let t = template(&format!("infra/{relative}"));
        let mut found = Vec::new();
        functions_in(&t["Rules"], &mut found);
        for f in found {
            assert!(RULE_FUNCTIONS.contains(&f.as_str()), "{path}: {f} in Rules");
        }
    }
}

/// Issue 58: the central stack keeps at most 16 parameters. What no deployment needs to choose
/// is fixed at the values benchmarked (the timeout, the batch, the receives before the
/// dead-letter queue, the sweep's schedule, the Kubernetes groups, the member role's name), the
/// clusters are one list, and names derive from the stack's: the functions are
/// `<stack>-handler` and `<stack>-sweeper` (so a stack name has at most 56 characters), their
/// log groups, alarms, schedule and event source mapping name them so, and the table, the
/// secret and the bus are the stack's.
#[test]
fn the_stack_keeps_few_parameters_and_names_its_resources_after_itself() {
    let d = Deployment::new(&[]);
    let parameters = d.template["Parameters"].as_object().unwrap();
    assert!(parameters.len() <= 16, "{:?}", parameters.keys());
    for gone in [
        "ClusterName",
        "ClusterNames",
        "MemberClusters",
        "MemberRoleName",
        "HandlerKubernetesGroup",
        "SweeperKubernetesGroup",
        "HandlerFunctionName",
        "SweeperFunctionName",
        "FunctionTimeout",
        "BatchSize",
        "MaxReceiveCount",
        "SweepSchedule",
    ] {
        assert!(parameters.get(gone).is_none(), "{gone}");
    }
    assert!(parameters["Clusters"].get("Default").is_none(), "required");
    let (handler, sweeper) = ("forewarn-demo-handler", "forewarn-demo-sweeper");
    assert_eq!(d.output("HandlerFunctionName"), handler);
    assert_eq!(d.output("SweeperFunctionName"), sweeper);
    assert_eq!(d.output("FunctionTimeout"), "150");
    assert_eq!(
        d.properties("HandlerLogGroup")["LogGroupName"],
        format!("/aws/lambda/{handler}")
    );
    assert_eq!(
        d.properties("SweeperLogGroup")["LogGroupName"],
        format!("/aws/lambda/{sweeper}")
    );
    let mapping = d.properties("HandlerEventSourceMapping");
    assert_eq!(mapping["FunctionName"], handler);
    assert_eq!(mapping["BatchSize"], 10);
    assert_eq!(mapping["ScalingConfig"]["MaximumConcurrency"], "10");
    let schedule = d.properties("SweepScheduleRule");
    assert_eq!(schedule["ScheduleExpression"], "rate(5 minutes)");
    assert_eq!(
        schedule["Targets"][0]["Arn"],
        format!("arn:aws:lambda:us-east-1:123456789012:function:{sweeper}")
    );
    for (resource, name) in [
        ("SweepSchedulePermission", sweeper),
        ("SweeperInvokeConfig", sweeper),
    ] {
        assert_eq!(d.properties(resource)["FunctionName"], name, "{resource}");
    }
    for (alarm, name) in [
        ("HandlerErrorsAlarm", handler),
        ("SweeperErrorsAlarm", sweeper),
    ] {
        assert_eq!(
            d.properties(alarm)["Dimensions"],
            json!([{"Name": "FunctionName", "Value": name}]),
            "{alarm}"
        );
    }
    assert_eq!(
        d.properties("PoolTable")["TableName"],
        "forewarn-demo-pools"
    );
    assert_eq!(
        d.properties("ContinuationKeySecret")["Name"],
        "forewarn-demo-continuation-key"
    );
    assert_eq!(d.properties("ForewarnEventBus")["Name"], "forewarn-demo");
    assert_eq!(d.properties("Dashboard")["DashboardName"], "forewarn-demo");
    let body = d.properties("Dashboard")["DashboardBody"].to_string();
    assert!(body.contains(handler) && body.contains(sweeper), "{body}");
}

/// Issue 57: the handler's `AccountUnreachable` (namespace `forewarn`, its dimensionless total)
/// alarms at one in a minute, notifying `AlarmTopicArn` like every alarm of the stack.
#[test]
fn an_unreachable_account_raises_an_alarm() {
    let topic = "arn:aws:sns:us-east-1:123456789012:ops";
    for (overrides, actions) in [
        (vec![], None),
        (vec![("AlarmTopicArn", topic)], Some(json!([topic]))),
    ] {
        let d = Deployment::new(&overrides);
        let alarm = d.properties("AccountUnreachableAlarm");
        assert_eq!(alarm["Namespace"], "forewarn");
        assert_eq!(alarm["MetricName"], "AccountUnreachable");
        assert!(alarm.get("Dimensions").is_none(), "the total: {alarm}");
        assert_eq!(alarm["Statistic"], "Sum");
        assert_eq!(alarm["Period"], 60);
        assert_eq!(alarm["EvaluationPeriods"], 1);
        assert_eq!(alarm["Threshold"], 1);
        assert_eq!(alarm["ComparisonOperator"], "GreaterThanOrEqualToThreshold");
        assert_eq!(alarm["TreatMissingData"], "notBreaching");
        let description = alarm["AlarmDescription"].as_str().unwrap();
        for words in [
            "member role cannot be assumed",
            "dead-letter queue",
            "Account dimension",
        ] {
            assert!(description.contains(words), "{description}");
        }
        for key in ["AlarmActions", "OKActions"] {
            assert_eq!(alarm.get(key), actions.as_ref(), "{key}");
        }
    }
}

/// Issue 57: `KmsKeyArn` encrypts, when set, the queues, the pool table (in both templates), the
/// log groups and the key's secret, and gives the roles `kms:Decrypt` on that key through the
/// services that hold data under it (the sweeper never SQS) and `kms:GenerateDataKey` through
/// those they write to (never Secrets Manager, only read); empty,
/// the AWS keys as before (SQS-managed encryption, DynamoDB's AWS managed key) and no grant.
#[test]
fn a_customer_managed_key_encrypts_the_stack_and_is_granted_through_its_services() {
    let key = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab";
    let d = Deployment::new(&[]);
    assert!(!d.condition("WithKmsKey"));
    for queue in ["EventQueue", "DeadLetterQueue"] {
        let q = d.properties(queue);
        assert_eq!(q["SqsManagedSseEnabled"], true, "{queue}");
        assert!(q.get("KmsMasterKeyId").is_none(), "{queue}");
    }
    for log in ["HandlerLogGroup", "SweeperLogGroup"] {
        assert!(d.properties(log).get("KmsKeyId").is_none(), "{log}");
    }
    assert!(
        d.properties("ContinuationKeySecret")
            .get("KmsKeyId")
            .is_none()
    );
    for table in [d, Deployment::of("infra/pool-table.yaml", &[])] {
        assert_eq!(
            table.properties("PoolTable")["SSESpecification"],
            json!({"SSEEnabled": true})
        );
    }
    let d = Deployment::new(&[]);
    for role in ["HandlerRole", "SweeperRole"] {
        assert!(statements_of(&d, role, "kms:").is_empty(), "{role}");
    }

    let d = Deployment::new(&[("KmsKeyArn", key)]);
    for queue in ["EventQueue", "DeadLetterQueue"] {
        let q = d.properties(queue);
        assert_eq!(q["KmsMasterKeyId"], key, "{queue}");
        assert_eq!(q["SqsManagedSseEnabled"], false, "{queue}");
    }
    for log in ["HandlerLogGroup", "SweeperLogGroup"] {
        assert_eq!(d.properties(log)["KmsKeyId"], key, "{log}");
    }
    assert_eq!(d.properties("ContinuationKeySecret")["KmsKeyId"], key);
    for table in [
        Deployment::new(&[("KmsKeyArn", key)]),
        Deployment::of("infra/pool-table.yaml", &[("KmsKeyArn", key)]),
    ] {
        assert_eq!(
            table.properties("PoolTable")["SSESpecification"],
            json!({"SSEEnabled": true, "SSEType": "KMS", "KMSMasterKeyId": key})
        );
    }
    let via = |read: &[&str], write: &[&str]| -> Value {
        let services = |names: &[&str]| -> Vec<String> {
            names
                .iter()
                .map(|s| format!("{s}.us-east-1.amazonaws.com"))
                .collect()
        };
        json!([{"Sid": "ReadThroughItsServices", "Effect": "Allow",
                "Action": "kms:Decrypt", "Resource": key,
                "Condition": {"StringEquals": {"kms:ViaService": services(read)}}},
               {"Sid": "WriteThroughItsServices", "Effect": "Allow",
                "Action": "kms:GenerateDataKey", "Resource": key,
                "Condition": {"StringEquals": {"kms:ViaService": services(write)}}}])
    };
    // Secrets Manager is only read (the key secret): kms:Decrypt alone through it.
    assert_eq!(
        Value::Array(statements_of(&d, "HandlerRole", "kms:")),
        via(&["sqs", "secretsmanager", "dynamodb"], &["sqs", "dynamodb"])
    );
    assert_eq!(
        Value::Array(statements_of(&d, "SweeperRole", "kms:")),
        via(&["secretsmanager", "dynamodb"], &["dynamodb"])
    );
    // Only when the key is set: the grants are conditioned resources of their own.
    for policy in ["HandlerKeyPolicy", "SweeperKeyPolicy"] {
        assert_eq!(d.template["Resources"][policy]["Condition"], "WithKmsKey");
    }
}
