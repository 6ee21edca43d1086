//! The templates in infra/: cfn-lint finds nothing (no error, no warning), the stack's pool
//! table is the pool-table template's, so the two cannot drift, and the stack's defaults and
//! policies do what docs/deploy.md and docs/security.md say of them: the template is resolved for
//! a set of parameters (`Deployment`, intrinsic functions as CloudFormation resolves them) and
//! its queue policies are evaluated as IAM evaluates them (`Send::verdict`: statements, ANDed
//! conditions, ORed values, absent keys) for every kind of sender; the stack with every option
//! set is deployed to moto. (moto's CloudFormation does not apply queue policies, so they are
//! checked on the resolved template.) The pool table's resource policy is evaluated likewise
//! (`TableRequest::verdict`) for the requests forewarn's own readers send and those a reader of
//! the table could: only forewarn's roles reach the continuation key.

use std::process::Command;

use forewarn_tests::moto::workspace_root;
use serde_json::{Value, json};

#[test]
fn cfn_lint_is_clean() {
    let root = workspace_root();
    let cfn_lint = root.join(".venv/bin/cfn-lint");
    assert!(
        cfn_lint.is_file(),
        "{} is missing: run scripts/test.sh (it installs requirements.txt into .venv)",
        cfn_lint.display()
    );
    // `cfn-lint infra/*.yaml`: every template directly in infra/ (the Kubernetes manifests
    // live in infra/k8s/).
    let mut templates: Vec<String> = std::fs::read_dir(root.join("infra"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| p.display().to_string())
        .collect();
    templates.sort();
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
        // The stack's table adds its resource policy last (it names the stack's roles).
        if !line.trim().is_empty() && indent <= 2
            || line
                .trim_start()
                .starts_with("# Only forewarn reads the continuation key")
        {
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

/// `infra/forewarn.yaml` as JSON (see [`template`]).
fn stack_template() -> Value {
    template("infra/forewarn.yaml")
}

/// The template at `path` (under the workspace) as JSON, its intrinsic functions in their long
/// form (`{"Fn::GetAtt": ["Queue", "Arn"]}`), read by cfn-lint's own template decoder (the
/// venv's Python), so that the short forms (`!GetAtt`, `!If`, ...) need no YAML support here.
fn template(path: &str) -> Value {
    let root = workspace_root();
    let python = root.join(".venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run scripts/test.sh (it installs requirements.txt into .venv)",
        python.display()
    );
    let out = Command::new(&python)
        .arg("-c")
        .arg(
            "import json, sys, cfnlint.decode as d\n\
             t, m = d.decode(sys.argv[1])\n\
             assert not m, m\n\
             json.dump(t, sys.stdout, default=str)",
        )
        .arg(root.join(path))
        .output()
        .expect("run the venv's python");
    assert!(
        out.status.success(),
        "decoding the template failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the decoded template is JSON")
}

/// A number of the template, written as a YAML number or string.
fn number(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().unwrap(),
        v => v.as_u64().unwrap_or_else(|| panic!("not a number: {v}")),
    }
}

/// The stack's default `MaxReceiveCount` keeps a spot warning that fails at every attempt on the
/// queue past its window, with the delays the handler gives failed messages
/// (`forewarn::domain::retry`), and the former default of 5 did not.
#[test]
fn max_receive_count_outlasts_a_spot_warning_window() {
    use forewarn::domain::config::Config;
    use forewarn::domain::retry::{Failed, RetryPolicy};

    let t = stack_template();
    let max = number(&t["Parameters"]["MaxReceiveCount"]["Default"]);
    assert_eq!(max, 15);
    assert_eq!(
        t["Resources"]["EventQueue"]["Properties"]["RedrivePolicy"]["maxReceiveCount"],
        json!({"Ref": "MaxReceiveCount"})
    );
    let config = Config::default();
    let start = chrono::DateTime::parse_from_rfc3339("2026-11-20T10:00:00Z")
        .unwrap()
        .to_utc();
    let window_end = start + config.interruption_notice - config.deadline_margin;
    assert_eq!((window_end - start).num_seconds(), 105);
    let policy = RetryPolicy::default();
    // When each receive of a message that fails every time happens, from the first at the event.
    let receives = |count: u64| {
        let mut at = vec![start];
        for n in 1..count {
            let now = *at.last().unwrap();
            let delay = policy.delay(Failed::Event { window_end }, n as u32, now);
            at.push(now + chrono::Duration::from_std(delay).unwrap());
        }
        at
    };
    let stack = receives(max);
    let inside = stack.iter().filter(|t| **t < window_end).count();
    assert_eq!(inside, 10, "{stack:?}");
    assert!(
        *stack.last().unwrap() > window_end,
        "the last receive comes after the window: {stack:?}"
    );
    let old = receives(5);
    assert!(
        *old.last().unwrap() + chrono::Duration::seconds(60) < window_end,
        "with 5 receives, a warning reached the DLQ early in its window: {old:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The template's resources as one deployment resolves them

/// The account and region intrinsic functions resolve to.
const ACCOUNT: &str = "123456789012";
const REGION: &str = "us-east-1";

/// The template with parameter values (the defaults, but for `overrides`): resolves intrinsic
/// functions the way CloudFormation does, for the ones the stack uses. A resource's `Arn` is
/// `arn:aws:test:::<logical id>`, its `Ref` `ref:<logical id>`.
struct Deployment {
    template: Value,
    params: std::collections::BTreeMap<String, String>,
}

impl Deployment {
    /// `infra/forewarn.yaml` for cluster `demo` unless `overrides` name another.
    fn new(overrides: &[(&str, &str)]) -> Deployment {
        let mut d = Deployment::of("infra/forewarn.yaml", overrides);
        d.params
            .entry("ClusterName".into())
            .or_insert("demo".into());
        d
    }

    /// The template at `path` with its defaults but for `overrides`.
    fn of(path: &str, overrides: &[(&str, &str)]) -> Deployment {
        let template = template(path);
        let mut params: std::collections::BTreeMap<String, String> = template["Parameters"]
            .as_object()
            .unwrap()
            .iter()
            .filter_map(|(k, p)| {
                let v = match p.get("Default")? {
                    Value::String(s) => s.clone(),
                    v => v.to_string(),
                };
                Some((k.clone(), v))
            })
            .collect();
        for (k, v) in overrides {
            assert!(template["Parameters"].get(*k).is_some(), "no parameter {k}");
            params.insert(k.to_string(), v.to_string());
        }
        Deployment { template, params }
    }

    fn arn(resource: &str) -> String {
        format!("arn:aws:test:::{resource}")
    }

    fn reference(&self, name: &str) -> Option<Value> {
        Some(json!(match name {
            "AWS::NoValue" => return None,
            "AWS::Partition" => "aws".to_string(),
            "AWS::Region" => REGION.to_string(),
            "AWS::AccountId" => ACCOUNT.to_string(),
            _ => match self.params.get(name) {
                // A list parameter is a list: its value split at commas, as CloudFormation does.
                Some(v) if self.template["Parameters"][name]["Type"] == "CommaDelimitedList" => {
                    return Some(json!(v.split(',').collect::<Vec<_>>()));
                }
                Some(v) => v.clone(),
                None => {
                    assert!(
                        self.template["Resources"].get(name).is_some(),
                        "Ref to nothing: {name}"
                    );
                    format!("ref:{name}")
                }
            },
        }))
    }

    fn attribute(&self, resource: &str, attribute: &str) -> String {
        assert!(
            self.template["Resources"].get(resource).is_some(),
            "GetAtt of nothing: {resource}"
        );
        match attribute {
            "Arn" => Deployment::arn(resource),
            _ => format!("{resource}.{attribute}"),
        }
    }

    fn condition(&self, name: &str) -> bool {
        self.truth(&self.template["Conditions"][name])
    }

    fn truth(&self, v: &Value) -> bool {
        let (f, args) = v.as_object().and_then(|o| o.iter().next()).unwrap();
        match f.as_str() {
            "Fn::Equals" => self.resolve(&args[0]) == self.resolve(&args[1]),
            "Fn::Not" => !self.truth(&args[0]),
            "Fn::And" => args.as_array().unwrap().iter().all(|a| self.truth(a)),
            "Fn::Or" => args.as_array().unwrap().iter().any(|a| self.truth(a)),
            "Condition" => self.condition(args.as_str().unwrap()),
            other => panic!("condition function {other}"),
        }
    }

    fn sub(&self, text: &str, vars: &serde_json::Map<String, Value>) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(i) = rest.find("${") {
            out.push_str(&rest[..i]);
            let end = rest[i..].find('}').unwrap() + i;
            let name = &rest[i + 2..end];
            if let Some(literal) = name.strip_prefix('!') {
                out.push_str(&format!("${{{literal}}}"));
            } else if let Some(v) = vars.get(name) {
                out.push_str(self.resolve(v).unwrap().as_str().unwrap());
            } else if let Some((resource, attribute)) = name.split_once('.') {
                out.push_str(&self.attribute(resource, attribute));
            } else {
                out.push_str(self.reference(name).unwrap().as_str().unwrap());
            }
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        out
    }

    /// `v` resolved; `None`: `AWS::NoValue` (dropped from the list or map holding it).
    fn resolve(&self, v: &Value) -> Option<Value> {
        match v {
            Value::Array(items) => Some(Value::Array(
                items.iter().filter_map(|i| self.resolve(i)).collect(),
            )),
            Value::Object(o)
                if o.len() == 1 && o.keys().next().unwrap().starts_with("Fn::")
                    || o.contains_key("Ref") && o.len() == 1 =>
            {
                let (f, args) = o.iter().next().unwrap();
                match f.as_str() {
                    "Ref" => self.reference(args.as_str().unwrap()),
                    "Fn::GetAtt" => Some(json!(
                        self.attribute(args[0].as_str().unwrap(), args[1].as_str().unwrap())
                    )),
                    "Fn::If" => {
                        let branch = if self.condition(args[0].as_str().unwrap()) {
                            1
                        } else {
                            2
                        };
                        self.resolve(&args[branch])
                    }
                    "Fn::Sub" => Some(json!(match args {
                        Value::String(text) => self.sub(text, &serde_json::Map::new()),
                        _ => self.sub(args[0].as_str().unwrap(), args[1].as_object().unwrap()),
                    })),
                    "Fn::Split" => {
                        let text = self.resolve(&args[1]).unwrap();
                        Some(json!(
                            text.as_str()
                                .unwrap()
                                .split(args[0].as_str().unwrap())
                                .collect::<Vec<_>>()
                        ))
                    }
                    "Fn::Join" => {
                        let items = self.resolve(&args[1]).unwrap();
                        let items: Vec<&str> = items
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|i| i.as_str().unwrap())
                            .collect();
                        Some(json!(items.join(args[0].as_str().unwrap())))
                    }
                    other => panic!("intrinsic function {other} is not resolved here"),
                }
            }
            Value::Object(o) => Some(Value::Object(
                o.iter()
                    .filter_map(|(k, v)| Some((k.clone(), self.resolve(v)?)))
                    .collect(),
            )),
            other => Some(other.clone()),
        }
    }

    /// A resource's properties, resolved.
    fn properties(&self, resource: &str) -> Value {
        let r = &self.template["Resources"][resource];
        assert!(r.is_object(), "no resource {resource}");
        self.resolve(&r["Properties"]).unwrap()
    }

    /// An output's value, resolved.
    fn output(&self, name: &str) -> String {
        let v = self
            .resolve(&self.template["Outputs"][name]["Value"])
            .unwrap();
        v.as_str().unwrap().to_string()
    }
}

/// What a queue policy is asked: a `sqs:SendMessage` over TLS (unless `insecure`), with the
/// request context keys the policy reads; `None` keys are absent from the request.
#[derive(Debug, Clone, Copy, Default)]
struct Send<'a> {
    /// `aws:PrincipalArn`: an IAM role's ARN (for a role session, the role's, not the session's).
    principal_arn: Option<&'a str>,
    /// The service principal sending on a resource's behalf (`events.amazonaws.com`).
    service: Option<&'a str>,
    /// `aws:SourceArn`: the resource a service sends for (an EventBridge rule).
    source_arn: Option<&'a str>,
    insecure: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// An explicit Deny: nothing else counts.
    Denied,
    /// An Allow of the queue policy (what a service principal needs).
    Allowed,
    /// Neither: the principal's own IAM policy decides (same account).
    UpToIam,
}

/// IAM's `ArnLike`: each of an ARN's six colon-separated parts is matched on its own, where
/// `*` stands for any characters and `?` for one.
fn arn_like(pattern: &str, arn: &str) -> bool {
    fn glob(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => glob(&p[1..], s) || (!s.is_empty() && glob(p, &s[1..])),
            (Some(b'?'), Some(_)) => glob(&p[1..], &s[1..]),
            (Some(a), Some(b)) if a == b => glob(&p[1..], &s[1..]),
            _ => false,
        }
    }
    let (p, a): (Vec<&str>, Vec<&str>) = (
        pattern.splitn(6, ':').collect(),
        arn.splitn(6, ':').collect(),
    );
    p.len() == 6
        && a.len() == 6
        && p.iter()
            .zip(&a)
            .all(|(p, a)| glob(p.as_bytes(), a.as_bytes()))
}

#[test]
fn arn_like_matches_each_part_with_wildcards() {
    let routes = "arn:aws:events:us-east-1:1:rule/forewarn-demo/forewarn-route-*";
    assert!(arn_like(
        routes,
        "arn:aws:events:us-east-1:1:rule/forewarn-demo/forewarn-route-111122223333"
    ));
    assert!(!arn_like(
        routes,
        "arn:aws:events:us-east-1:1:rule/forewarn-demo/other"
    ));
    assert!(!arn_like(
        routes,
        "arn:aws:events:us-east-1:2:rule/forewarn-demo/forewarn-route-1"
    ));
    assert!(
        !arn_like("arn:aws:*:us-east-1:1:x", "arn:aws:a:b:us-east-1:1:x"),
        "a * stays in its part"
    );
    assert!(arn_like(
        "arn:aws:sqs:us-east-1:1:q",
        "arn:aws:sqs:us-east-1:1:q"
    ));
}

impl Send<'_> {
    fn key(&self, key: &str) -> Option<String> {
        match key {
            "aws:PrincipalArn" => self.principal_arn.map(str::to_string),
            "aws:SourceArn" => self.source_arn.map(str::to_string),
            "aws:SecureTransport" => Some((!self.insecure).to_string()),
            other => panic!("condition key {other} is not modelled"),
        }
    }

    /// One condition operator on one key, as IAM evaluates it: the values are ORed; a key absent
    /// from the request fails a positive operator and passes a negated one, and passes any
    /// `...IfExists` operator.
    fn holds(&self, operator: &str, key: &str, values: &Value) -> bool {
        let values: Vec<&str> = match values {
            Value::Array(v) => v.iter().map(|v| v.as_str().unwrap()).collect(),
            v => vec![v.as_str().unwrap()],
        };
        let (operator, if_exists) = match operator.strip_suffix("IfExists") {
            Some(base) => (base, true),
            None => (operator, false),
        };
        let Some(actual) = self.key(key) else {
            return if_exists || operator.contains("Not");
        };
        match operator {
            "ArnEquals" | "StringEquals" | "Bool" => values.contains(&actual.as_str()),
            "ArnNotEquals" | "StringNotEquals" => !values.contains(&actual.as_str()),
            "ArnLike" => values.iter().any(|v| arn_like(v, &actual)),
            "ArnNotLike" => !values.iter().any(|v| arn_like(v, &actual)),
            other => panic!("condition operator {other} is not modelled"),
        }
    }

    fn matches(&self, statement: &Value, queue_arn: &str) -> bool {
        let principal = match &statement["Principal"] {
            Value::String(p) => p == "*",
            p => p["Service"].as_str() == self.service && self.service.is_some(),
        };
        let action = match &statement["Action"] {
            Value::String(a) => a == "sqs:SendMessage" || a == "sqs:*",
            other => panic!("action {other}"),
        };
        let conditions = statement["Condition"].as_object().into_iter().flatten();
        principal
            && action
            && statement["Resource"] == queue_arn
            && conditions.into_iter().all(|(op, keys)| {
                keys.as_object()
                    .unwrap()
                    .iter()
                    .all(|(key, values)| self.holds(op, key, values))
            })
    }

    fn verdict(&self, policy: &Value, queue_arn: &str) -> Verdict {
        let statements = policy["Statement"].as_array().unwrap();
        let effect = |e: &str| {
            statements
                .iter()
                .any(|s| s["Effect"] == e && self.matches(s, queue_arn))
        };
        if effect("Deny") {
            Verdict::Denied
        } else if effect("Allow") {
            Verdict::Allowed
        } else {
            Verdict::UpToIam
        }
    }
}

const RULES: [&str; 7] = [
    "SpotInterruptionRule",
    "RebalanceRecommendationRule",
    "StateChangeRule",
    "CapacityReservationInterruptionRule",
    "HealthScheduledChangeRule",
    "AsgTerminateLifecycleRule",
    "AsgLaunchLifecycleRule",
];
const EVENTS: &str = "events.amazonaws.com";
const HOOK_ROLE: &str = "arn:aws:iam::123456789012:role/asg-hook-notifications";
const REDRIVE_ROLE: &str = "arn:aws:iam::123456789012:role/ops/dlq-redrive";
const ADMIN_ROLE: &str = "arn:aws:iam::123456789012:role/Admin";

/// The event queue takes messages from the stack's rules, the handler's role and, only when
/// the stack names them, the hook notification and redrive roles; from nobody else, whatever
/// their IAM policies allow.
#[test]
fn only_forewarn_may_send_to_the_event_queue() {
    for (overrides, extra) in [
        (vec![], false),
        (
            vec![
                ("HookNotificationRoleArn", HOOK_ROLE),
                ("RedriveRoleArn", REDRIVE_ROLE),
            ],
            true,
        ),
    ] {
        let d = Deployment::new(&overrides);
        let props = d.properties("EventQueuePolicy");
        assert_eq!(props["Queues"], json!(["ref:EventQueue"]));
        let policy = &props["PolicyDocument"];
        let queue = Deployment::arn("EventQueue");
        let send = |s: Send| s.verdict(policy, &queue);
        for rule in RULES {
            let rule = Deployment::arn(rule);
            let delivery = Send {
                service: Some(EVENTS),
                source_arn: Some(&rule),
                ..Send::default()
            };
            assert_eq!(send(delivery), Verdict::Allowed, "{rule}");
            let insecure = Send {
                insecure: true,
                ..delivery
            };
            assert_eq!(send(insecure), Verdict::Denied, "{rule} without TLS");
        }
        let handler = Deployment::arn("HandlerRole");
        let role = |arn| Send {
            principal_arn: Some(arn),
            ..Send::default()
        };
        assert_eq!(
            send(role(&handler)),
            Verdict::UpToIam,
            "the handler's continuations"
        );
        assert_eq!(
            send(Send {
                insecure: true,
                ..role(&handler)
            }),
            Verdict::Denied
        );
        let sweeper = Deployment::arn("SweeperRole");
        assert_eq!(send(role(&sweeper)), Verdict::Denied);
        assert_eq!(
            send(role(ADMIN_ROLE)),
            Verdict::Denied,
            "an administrator of the account"
        );
        let optional = if extra {
            Verdict::UpToIam
        } else {
            Verdict::Denied
        };
        assert_eq!(
            send(role(HOOK_ROLE)),
            optional,
            "hook notifications: {overrides:?}"
        );
        assert_eq!(
            send(role(REDRIVE_ROLE)),
            optional,
            "DLQ redrive: {overrides:?}"
        );
        // Another rule (or topic) of the account sending here, through its service principal.
        for (service, source) in [
            (
                EVENTS,
                "arn:aws:events:us-east-1:123456789012:rule/someone-elses",
            ),
            (
                "sns.amazonaws.com",
                "arn:aws:sns:us-east-1:123456789012:topic",
            ),
        ] {
            let other = Send {
                service: Some(service),
                source_arn: Some(source),
                ..Send::default()
            };
            assert_eq!(send(other), Verdict::Denied, "{source}");
        }
        // A role of the account that also claims to come from one of the rules: impossible in
        // AWS (services set aws:SourceArn), but the Deny would let it through, as it must let
        // the rules through.
        let mixed = Send {
            principal_arn: Some(ADMIN_ROLE),
            source_arn: Some(&Deployment::arn("SpotInterruptionRule")),
            ..Send::default()
        };
        assert_eq!(send(mixed), Verdict::UpToIam);
    }
}

/// With an organization, both queues also take the member accounts' routes on forewarn's bus
/// (rules `forewarn-route-<account>` there, which only this account can make), and no other
/// rule of that bus or of another bus; without one, no route.
#[test]
fn the_member_accounts_routes_may_send_to_the_queues_with_an_organization() {
    let route =
        format!("arn:aws:events:{REGION}:{ACCOUNT}:rule/forewarn-demo/forewarn-route-111122223333");
    let others = [
        format!("arn:aws:events:{REGION}:{ACCOUNT}:rule/forewarn-demo/someone-elses"),
        format!("arn:aws:events:{REGION}:{ACCOUNT}:rule/forewarn-route-111122223333"),
        format!(
            "arn:aws:events:{REGION}:{ACCOUNT}:rule/forewarn-other/forewarn-route-111122223333"
        ),
        format!(
            "arn:aws:events:{REGION}:111122223333:rule/forewarn-demo/forewarn-route-111122223333"
        ),
    ];
    for (overrides, routed) in [
        (vec![("OrganizationId", "o-a1b2c3d4e5")], Verdict::Allowed),
        (vec![], Verdict::Denied),
    ] {
        let d = Deployment::new(&overrides);
        for (policy, queue) in [
            ("EventQueuePolicy", "EventQueue"),
            ("DeadLetterQueuePolicy", "DeadLetterQueue"),
        ] {
            let document = &d.properties(policy)["PolicyDocument"];
            let queue = Deployment::arn(queue);
            let delivery = |source: &str| {
                Send {
                    service: Some(EVENTS),
                    source_arn: Some(source),
                    ..Send::default()
                }
                .verdict(document, &queue)
            };
            assert_eq!(delivery(&route), routed, "{policy} {overrides:?}");
            for other in &others {
                assert_eq!(delivery(other), Verdict::Denied, "{policy}: {other}");
            }
        }
    }
}

/// The dead-letter queue takes only what the rules could not deliver (and SQS's own move from
/// the event queue): not even the handler may send there.
#[test]
fn only_the_rules_may_send_to_the_dead_letter_queue() {
    let d = Deployment::new(&[("HookNotificationRoleArn", HOOK_ROLE)]);
    let props = d.properties("DeadLetterQueuePolicy");
    assert_eq!(props["Queues"], json!(["ref:DeadLetterQueue"]));
    let policy = &props["PolicyDocument"];
    let dlq = Deployment::arn("DeadLetterQueue");
    let send = |s: Send| s.verdict(policy, &dlq);
    for rule in RULES {
        let rule = Deployment::arn(rule);
        let delivery = Send {
            service: Some(EVENTS),
            source_arn: Some(&rule),
            ..Send::default()
        };
        assert_eq!(send(delivery), Verdict::Allowed, "{rule}");
    }
    let event_queue = Deployment::arn("EventQueue");
    let redrive = Send {
        service: Some("sqs.amazonaws.com"),
        source_arn: Some(&event_queue),
        ..Send::default()
    };
    assert_ne!(send(redrive), Verdict::Denied, "SQS's move to the DLQ");
    for principal in [
        Deployment::arn("HandlerRole"),
        Deployment::arn("SweeperRole"),
        ADMIN_ROLE.to_string(),
        HOOK_ROLE.to_string(),
    ] {
        let s = Send {
            principal_arn: Some(&principal),
            ..Send::default()
        };
        assert_eq!(send(s), Verdict::Denied, "{principal}");
    }
}

/// Whether `pattern` (an IAM ARN or action pattern: `*` any run of characters, `?` one) matches
/// `text`.
fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => {
            pattern.len() == text.len()
                && pattern
                    .chars()
                    .zip(text.chars())
                    .all(|(p, t)| p == '?' || p == t)
        }
        Some((head, rest)) => {
            text.len() >= head.len()
                && glob(head, &text[..head.len()])
                && (head.len()..=text.len()).any(|i| glob(rest, &text[i..]))
        }
    }
}

/// The strings of a policy element: one, or a list.
fn strings(v: &Value) -> Vec<&str> {
    match v {
        Value::Array(items) => items.iter().map(|i| i.as_str().unwrap()).collect(),
        Value::String(s) => vec![s.as_str()],
        other => panic!("not a string or a list: {other}"),
    }
}

/// A request to an identity policy: an action on a resource, with the resource's tags.
struct Request<'a> {
    action: &'a str,
    resource: &'a str,
    tags: &'a [(&'a str, &'a str)],
}

impl Request<'_> {
    fn key(&self, key: &str) -> Option<&str> {
        let tag = key
            .strip_prefix("aws:ResourceTag/")
            .unwrap_or_else(|| panic!("condition key {key} is not modelled"));
        self.tags.iter().find(|(k, _)| *k == tag).map(|(_, v)| *v)
    }

    /// One statement's Action, Resource (or NotResource) and Condition hold for the request.
    fn matches(&self, statement: &Value) -> bool {
        let action = strings(&statement["Action"])
            .iter()
            .any(|a| glob(a, self.action));
        let resource = match (statement.get("Resource"), statement.get("NotResource")) {
            (Some(r), None) => strings(r).iter().any(|r| glob(r, self.resource)),
            (None, Some(r)) => !strings(r).iter().any(|r| glob(r, self.resource)),
            other => panic!("Resource or NotResource: {other:?}"),
        };
        let conditions = statement["Condition"].as_object().into_iter().flatten();
        action
            && resource
            && conditions.into_iter().all(|(op, keys)| {
                keys.as_object().unwrap().iter().all(|(key, values)| {
                    let actual = self.key(key);
                    match op.as_str() {
                        "StringEquals" => actual.is_some_and(|a| strings(values).contains(&a)),
                        "Null" => (actual.is_none()).to_string() == values.as_str().unwrap(),
                        other => panic!("condition operator {other} is not modelled"),
                    }
                })
            })
    }

    /// As IAM evaluates an identity policy alone: allowed when a statement allows it and none
    /// denies it.
    fn allowed_by(&self, document: &Value) -> bool {
        let statements = document["Statement"].as_array().unwrap();
        let effect = |e: &str| {
            statements
                .iter()
                .any(|s| s["Effect"] == e && self.matches(s))
        };
        effect("Allow") && !effect("Deny")
    }
}

/// A role's inline policy of this name, parsed when it is a JSON string.
fn inline_policy(role: &Value, name: &str) -> Value {
    let policy = role["Policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["PolicyName"] == name)
        .unwrap_or_else(|| panic!("no policy {name}"));
    match &policy["PolicyDocument"] {
        Value::String(text) => serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("{name} is not JSON ({e}):\n{text}")),
        document => document.clone(),
    }
}

/// A group of this account and region named `name`.
fn group(name: &str) -> String {
    format!(
        "arn:aws:autoscaling:{REGION}:{ACCOUNT}:autoScalingGroup:6d2c4a8e:autoScalingGroupName/{name}"
    )
}

const LIFECYCLE_ACTIONS: [&str; 2] = [
    "autoscaling:CompleteLifecycleAction",
    "autoscaling:RecordLifecycleActionHeartbeat",
];

/// Whether the lifecycle `policy` lets both lifecycle actions through on `resource` tagged
/// `tags` (and asserts the two actions agree).
fn lifecycle_allowed(policy: &Value, resource: &str, tags: &[(&str, &str)]) -> bool {
    let [complete, heartbeat] = LIFECYCLE_ACTIONS.map(|action| {
        Request {
            action,
            resource,
            tags,
        }
        .allowed_by(policy)
    });
    assert_eq!(complete, heartbeat, "{resource} {tags:?}");
    complete
}

/// The handler completes and heartbeats lifecycle actions only on groups of this account and
/// region named with the prefix and tagged for a cluster served (either tag form); a list of
/// clusters is each of them, `*` any group tagged `eks:cluster-name`. Nothing else grants those
/// actions.
#[test]
fn lifecycle_actions_are_limited_to_the_clusters_tagged_groups() {
    let managed = |c: &'static str| [("eks:cluster-name", c)];
    for (clusters, served, other) in [("", vec!["demo"], "prod"), ("a,b", vec!["a", "b"], "demo")] {
        let d = Deployment::new(&[
            ("ClusterName", "demo"),
            ("ClusterNames", clusters),
            ("AutoScalingGroupNamePrefix", "eks-"),
        ]);
        let policy = inline_policy(&d.properties("HandlerRole"), "forewarn-handler-lifecycle");
        for cluster in &served {
            let owned = format!("kubernetes.io/cluster/{cluster}");
            for tags in [
                &[("eks:cluster-name", *cluster)][..],
                &[(owned.as_str(), "owned")],
                &[(owned.as_str(), "shared"), ("team", "x")],
            ] {
                assert!(
                    lifecycle_allowed(&policy, &group("eks-ng"), tags),
                    "{clusters} {tags:?}"
                );
                // Not without the prefix, nor in another region or account.
                assert!(!lifecycle_allowed(&policy, &group("ng"), tags));
                for elsewhere in [
                    group("eks-ng").replace(REGION, "eu-west-1"),
                    group("eks-ng").replace(ACCOUNT, "999999999999"),
                ] {
                    assert!(!lifecycle_allowed(&policy, &elsewhere, tags), "{elsewhere}");
                }
            }
            let other_action = Request {
                action: "autoscaling:DeleteAutoScalingGroup",
                resource: &group("eks-ng"),
                tags: &[("eks:cluster-name", cluster)],
            };
            assert!(!other_action.allowed_by(&policy));
        }
        let foreign = format!("kubernetes.io/cluster/{other}");
        let served_key = format!("kubernetes.io/cluster/{}", served[0]);
        for tags in [
            &managed(other)[..],
            &[(foreign.as_str(), "owned")],
            &[(served_key.as_str(), "other")],
            &[("aws:eks:cluster-name", served[0])],
            &[],
        ] {
            assert!(
                !lifecycle_allowed(&policy, &group("eks-ng"), tags),
                "{clusters} {tags:?}"
            );
        }
    }
    // Every cluster: any group tagged eks:cluster-name (of this account, region, prefix); the
    // key-only form cannot be matched by pattern, so it is not enough.
    let d = Deployment::new(&[
        ("ClusterNames", "*"),
        ("AutoScalingGroupNamePrefix", "eks-"),
    ]);
    let policy = inline_policy(&d.properties("HandlerRole"), "forewarn-handler-lifecycle");
    assert!(lifecycle_allowed(
        &policy,
        &group("eks-ng"),
        &managed("anything")
    ));
    assert!(!lifecycle_allowed(
        &policy,
        &group("ng"),
        &managed("anything")
    ));
    assert!(!lifecycle_allowed(
        &policy,
        &group("eks-ng"),
        &[("kubernetes.io/cluster/x", "owned")]
    ));
    assert!(!lifecycle_allowed(&policy, &group("eks-ng"), &[]));
    // No other statement of either role names an Auto Scaling write.
    for (resource, skip) in [
        ("HandlerRole", Some("forewarn-handler-lifecycle")),
        ("SweeperRole", None),
    ] {
        for p in d.properties(resource)["Policies"].as_array().unwrap() {
            if p["PolicyName"].as_str() == skip {
                continue;
            }
            let text = p["PolicyDocument"].to_string();
            assert!(
                !text.contains("LifecycleAction"),
                "{resource}/{}: {text}",
                p["PolicyName"]
            );
        }
    }
}

/// `LifecycleHookNames` narrows the Auto Scaling rule to those hooks and reaches the handler
/// as `FOREWARN_LIFECYCLE_HOOKS`, in both forms of its environment; unset, the rule takes every
/// hook and the variable is absent (cargo lambda refuses an empty value).
#[test]
fn lifecycle_hook_names_narrow_the_rule_and_reach_the_handler() {
    let env_file = |d: &Deployment| -> Vec<(String, String)> {
        d.output("HandlerEnvFile")
            .lines()
            .map(|l| {
                let (k, v) = l
                    .split_once('=')
                    .unwrap_or_else(|| panic!("not KEY=VALUE: {l}"));
                assert!(!v.is_empty(), "{l}");
                (k.to_string(), v.to_string())
            })
            .collect()
    };
    // cargo lambda deploy --env-var splits at every comma, then at the first '='.
    let env_vars = |d: &Deployment| -> Vec<Option<(String, String)>> {
        d.output("HandlerEnvVars")
            .split(',')
            .map(|p| {
                p.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect()
    };
    let d = Deployment::new(&[]);
    let pattern = &d.properties("AsgTerminateLifecycleRule")["EventPattern"];
    assert_eq!(
        pattern,
        &json!({"source": ["aws.autoscaling"], "detail-type": ["EC2 Instance-terminate Lifecycle Action"]})
    );
    let pattern = &d.properties("AsgLaunchLifecycleRule")["EventPattern"];
    assert_eq!(
        pattern,
        &json!({"source": ["aws.autoscaling"], "detail-type": ["EC2 Instance-launch Lifecycle Action"]})
    );
    assert!(
        env_file(&d)
            .iter()
            .all(|(k, _)| k != "FOREWARN_LIFECYCLE_HOOKS")
    );
    assert_eq!(env_file(&d).len(), 7);
    assert!(env_file(&d).contains(&("FOREWARN_ENVIRONMENTS".into(), "10".into())));
    assert!(env_vars(&d).iter().all(|kv| {
        kv.as_ref()
            .is_some_and(|(k, v)| !v.is_empty() && k != "FOREWARN_LIFECYCLE_HOOKS")
    }));

    let d = Deployment::new(&[("LifecycleHookNames", "drain-a,drain-b")]);
    for rule in ["AsgTerminateLifecycleRule", "AsgLaunchLifecycleRule"] {
        assert_eq!(
            d.properties(rule)["EventPattern"]["detail"],
            json!({"LifecycleHookName": ["drain-a", "drain-b"]}),
            "{rule}"
        );
    }
    let pattern = &d.properties("AsgTerminateLifecycleRule")["EventPattern"];
    assert_eq!(pattern["source"], json!(["aws.autoscaling"]));
    assert!(env_file(&d).contains(&("FOREWARN_LIFECYCLE_HOOKS".into(), "drain-a,drain-b".into())));
    assert!(
        env_vars(&d).contains(&None),
        "two names do not survive --env-var: the env file is the form for them"
    );
    let d = Deployment::new(&[("LifecycleHookNames", "drain-a")]);
    assert!(env_vars(&d).contains(&Some(("FOREWARN_LIFECYCLE_HOOKS".into(), "drain-a".into()))));
    // The sweeper answers no hook.
    assert!(!d.output("SweeperEnvVars").contains("LIFECYCLE"));
}

/// `PolicyAllow` reaches both functions as `FOREWARN_POLICY_ALLOW`, in every form of their
/// environment (the sweeper's `--env-var` too: the names are separated by spaces, which cargo
/// lambda does not split at); its default is the settings' default, every action but `delete`
/// and `none`.
#[test]
fn the_policy_allowance_reaches_both_functions() {
    use forewarn::domain::policy::PolicyAllow;
    let allowed = |d: &Deployment| -> Vec<String> {
        let file = d.output("HandlerEnvFile");
        let vars = [d.output("HandlerEnvVars"), d.output("SweeperEnvVars")];
        std::iter::once(file.lines().map(str::to_string).collect::<Vec<_>>())
            .chain(
                vars.iter()
                    .map(|v| v.split(',').map(str::to_string).collect()),
            )
            .map(|pairs| {
                pairs
                    .iter()
                    .find_map(|p| p.strip_prefix("FOREWARN_POLICY_ALLOW="))
                    .unwrap_or_else(|| panic!("no FOREWARN_POLICY_ALLOW in {pairs:?}"))
                    // The environment file quotes it (it holds spaces): dotenv takes the quotes off.
                    .trim_matches('"')
                    .to_string()
            })
            .collect()
    };
    let d = Deployment::new(&[]);
    for value in allowed(&d) {
        assert_eq!(PolicyAllow::parse(&value).unwrap(), PolicyAllow::default());
    }
    let d = Deployment::new(&[("PolicyAllow", "cordon delete")]);
    for value in allowed(&d) {
        assert_eq!(value, "cordon delete");
        assert_eq!(
            PolicyAllow::parse(&value).unwrap(),
            PolicyAllow::parse("cordon,delete").unwrap()
        );
    }
}

/// Each function's role joins a Kubernetes group of its own, and the defaults are the groups
/// infra/k8s/rbac.yaml binds: the node actions to both, the expander's ConfigMaps to the sweeper.
#[test]
fn each_role_joins_the_group_rbac_binds_for_it() {
    let d = Deployment::new(&[]);
    let handler = d.properties("HandlerAccessEntry");
    let sweeper = d.properties("SweeperAccessEntry");
    assert_eq!(handler["PrincipalArn"], Deployment::arn("HandlerRole"));
    assert_eq!(handler["KubernetesGroups"], json!(["forewarn-handler"]));
    assert_eq!(sweeper["PrincipalArn"], Deployment::arn("SweeperRole"));
    assert_eq!(sweeper["KubernetesGroups"], json!(["forewarn-sweeper"]));
    for p in ["HandlerKubernetesGroup", "SweeperKubernetesGroup"] {
        let pattern = d.template["Parameters"][p]["AllowedPattern"]
            .as_str()
            .unwrap();
        assert!(pattern.starts_with("^(?!system:)"), "{p}: {pattern}");
    }
    assert!(handler.get("AccessPolicies").is_none() && sweeper.get("AccessPolicies").is_none());

    let text = std::fs::read_to_string(workspace_root().join("infra/k8s/rbac.yaml")).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let subjects = |kind: &str, name: &str| -> Vec<String> {
        let b = docs
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name}"));
        b["subjects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        subjects("ClusterRoleBinding", "forewarn"),
        ["forewarn-handler", "forewarn-sweeper"]
    );
    assert_eq!(
        subjects("RoleBinding", "forewarn-priorities"),
        ["forewarn-sweeper"]
    );
}

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
                ("ClusterName", &cluster),
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
        // moto (5.2.5) does not model AWS::SecretsManager::Secret in CloudFormation: the key
        // secret's name is left unresolved there (the_continuation_key_is_a_secret_only_forewarn_reads
        // checks the template's reference); every other line as CloudFormation resolves it.
        let env: String = outputs["HandlerEnvFile"]
            .lines()
            .filter(|l| !l.starts_with("FOREWARN_KEY_SECRET="))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(outputs["HandlerEnvFile"].contains("\nFOREWARN_KEY_SECRET="));
        assert_eq!(
            env,
            format!(
                "FOREWARN_CLUSTERS={cluster}\nFOREWARN_EKS_CLUSTER={cluster}\n\
                 FOREWARN_TABLE={table}\nFOREWARN_POLICY_ALLOW=\"cordon cordon-drain cordon-for \
                 adaptive\"\nFOREWARN_ACCOUNT_ID={ACCOUNT}\nFOREWARN_ENVIRONMENTS=10\n\
                 FOREWARN_LIFECYCLE_HOOKS=drain-a,drain-b\n"
            )
        );
        // Deployed = benchmarked: the handler's client-side limit is the share divided by the
        // event source mapping's MaximumConcurrency, as the mass benchmark assumes.
        assert!(outputs["HandlerEnvVars"].contains(",FOREWARN_ENVIRONMENTS=10,"));
        assert!(outputs["HandlerEnvVars"].ends_with(",FOREWARN_LIFECYCLE_HOOKS=drain-a,drain-b"));
        assert_eq!(outputs["HandlerKubernetesGroup"], "forewarn-handler");
        assert_eq!(outputs["SweeperKubernetesGroup"], "forewarn-sweeper");

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

/// `infra/k8s/placeholders.yaml`: the placeholders' PriorityClass is above the Cluster
/// Autoscaler's expendable cutoff (-10) and below every real pod, never preempts; the admission
/// policy binds both of forewarn's groups (with Deny) and names what a placeholder is, with the
/// very namespace, label and annotation keys, class and image the code uses; the pod grant is a
/// Role of forewarn's namespace alone. (The CEL runs only in a real API server; the placeholder
/// the code builds is checked against the same rules in kube_actions/surge.rs and admission.rs.)
#[test]
fn the_placeholder_policy_allows_forewarns_groups_placeholders_only() {
    use forewarn::domain::surge::{NAMESPACE, PRIORITY_CLASS};
    let text =
        std::fs::read_to_string(workspace_root().join("infra/k8s/placeholders.yaml")).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let of = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("{kind}"))
            .clone()
    };
    let class = of("PriorityClass");
    assert_eq!(class["metadata"]["name"], PRIORITY_CLASS);
    let value = class["value"].as_i64().unwrap();
    assert!((-10..0).contains(&value), "{value}");
    assert_eq!(class["preemptionPolicy"], "Never");
    assert_eq!(class["globalDefault"], false);

    let policy = of("ValidatingAdmissionPolicy");
    assert_the_policy_names_what_a_placeholder_is(&policy);
    let binding = of("ValidatingAdmissionPolicyBinding");
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    // The grant the policy narrows: pods create, delete and list, in forewarn's namespace only,
    // to both groups.
    let role = of("Role");
    assert_eq!(role["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete", "list"]}])
    );
    let bound = of("RoleBinding");
    assert_eq!(bound["metadata"]["namespace"], NAMESPACE);
    assert_eq!(bound["roleRef"]["name"], role["metadata"]["name"]);
    let groups = |binding: &Value| -> Vec<String> {
        binding["subjects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(groups(&bound), ["forewarn-handler", "forewarn-sweeper"]);
    // And a read of the budgets (a drain's rounds), cluster-wide: a read only.
    let budgets = of("ClusterRole");
    assert_eq!(
        budgets["rules"],
        json!([{"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list"]}])
    );
    let bound = of("ClusterRoleBinding");
    assert_eq!(bound["roleRef"]["name"], budgets["metadata"]["name"]);
    assert_eq!(groups(&bound), ["forewarn-handler", "forewarn-sweeper"]);
    // No ClusterRole of this file grants any pod write.
    for doc in docs.iter().filter(|d| d["kind"] == "ClusterRole") {
        for rule in doc["rules"].as_array().unwrap() {
            assert_ne!(rule["resources"], json!(["pods"]), "{doc}");
        }
    }
    // rbac.yaml grants no pod write: without placeholders.yaml, no pod can be created.
    let rbac = std::fs::read_to_string(workspace_root().join("infra/k8s/rbac.yaml")).unwrap();
    let rbac: Vec<Value> = serde_saphyr::from_multiple(&rbac).unwrap();
    for rule in rbac
        .iter()
        .flat_map(|d| d["rules"].as_array().cloned().unwrap_or_default())
    {
        if rule["resources"] == json!(["pods"]) {
            assert_eq!(rule["verbs"], json!(["list"]), "{rule}");
        }
    }
}

/// The placeholders' admission policy: fails closed, matches pod creates and deletes in every
/// namespace by forewarn's two groups, and its two validations name what a placeholder is (for
/// both operations, and for a create) with the code's own namespace, name, keys, class and image.
fn assert_the_policy_names_what_a_placeholder_is(policy: &Value) {
    use forewarn::domain::surge::{
        NAMESPACE, PLACEHOLDER_ANNOTATIONS, PLACEHOLDER_IMAGE, PLACEHOLDER_LABELS,
        PLACEHOLDER_USER, PRIORITY_CLASS,
    };
    let spec = &policy["spec"];
    assert_eq!(spec["failurePolicy"], "Fail");
    let rule = &spec["matchConstraints"]["resourceRules"][0];
    assert_eq!(rule["resources"], json!(["pods"]));
    assert_eq!(rule["operations"], json!(["CREATE", "DELETE"]));
    assert!(
        rule.get("namespaceSelector").is_none()
            && spec["matchConstraints"].get("namespaceSelector").is_none(),
        "the policy holds in every namespace"
    );
    let condition = spec["matchConditions"][0]["expression"].as_str().unwrap();
    for group in ["forewarn-handler", "forewarn-sweeper"] {
        assert!(condition.contains(&format!("'{group}'")), "{condition}");
    }
    let rules: Vec<&str> = spec["validations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["expression"].as_str().unwrap())
        .collect();
    assert_eq!(rules.len(), 2);
    // Both operations: forewarn's namespace, the exact name, the class.
    for needle in [
        format!("variables.pod.metadata.namespace == '{NAMESPACE}'"),
        "variables.pod.metadata.name == 'forewarn-placeholder-' + variables.pod.metadata.annotations['forewarn.io/pod-uid']".to_string(),
        format!("variables.pod.spec.priorityClassName == '{PRIORITY_CLASS}'"),
    ] {
        assert!(rules[0].contains(&needle), "{needle} in {}", rules[0]);
    }
    // A create: exactly the code's label and annotation keys, and nothing that runs.
    let quoted = |keys: &[&str]| {
        keys.iter()
            .map(|k| format!("'{k}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for needle in [
        format!(
            "object.metadata.labels.all(k, k in [{}])",
            quoted(&PLACEHOLDER_LABELS)
        ),
        format!(
            "object.metadata.annotations.all(k, k in [{}])",
            quoted(&PLACEHOLDER_ANNOTATIONS)
        ),
        "o.apiVersion == 'v1' && o.kind == 'Node'".to_string(),
        format!("c.image == '{PLACEHOLDER_IMAGE}'"),
        "!has(object.spec.nodeName)".to_string(),
        // What the ServiceAccount plugin sets, no other account, and no token.
        "(!has(object.spec.serviceAccountName) || object.spec.serviceAccountName == 'default')"
            .to_string(),
        "!object.spec.automountServiceAccountToken".to_string(),
        // Pod Security `restricted`'s context as the code writes it, and nothing more.
        format!("object.spec.securityContext.runAsUser == {PLACEHOLDER_USER}"),
        "object.spec.securityContext.seccompProfile.type == 'RuntimeDefault'".to_string(),
        "!c.securityContext.allowPrivilegeEscalation".to_string(),
        "c.securityContext.capabilities.drop == ['ALL']".to_string(),
        "!has(c.securityContext.capabilities.add)".to_string(),
        "c.securityContext.readOnlyRootFilesystem".to_string(),
        "!has(c.securityContext.privileged)".to_string(),
        "!has(c.livenessProbe)".to_string(),
        "!has(c.readinessProbe)".to_string(),
        "!has(c.startupProbe)".to_string(),
        "!has(c.lifecycle)".to_string(),
        "!has(object.spec.volumes)".to_string(),
        "!has(object.metadata.finalizers)".to_string(),
    ] {
        assert!(rules[1].contains(&needle), "{needle} in {}", rules[1]);
    }
}

/// A request to the pool table, with the condition keys its resource policy reads: `None` keys
/// are absent from the request (a `Scan` has no leading key; a read without a projection names
/// no attributes; only `Query` and `Scan` carry `Select`).
#[derive(Debug, Clone, Default)]
struct TableRequest<'a> {
    principal_arn: &'a str,
    action: &'a str,
    leading_keys: Option<Vec<&'a str>>,
    attributes: Option<Vec<&'a str>>,
    select: Option<&'a str>,
}

impl TableRequest<'_> {
    fn key(&self, key: &str) -> Option<Vec<String>> {
        let owned = |v: &Vec<&str>| v.iter().map(|s| s.to_string()).collect();
        match key {
            "aws:PrincipalArn" => Some(vec![self.principal_arn.to_string()]),
            "dynamodb:LeadingKeys" => self.leading_keys.as_ref().map(owned),
            "dynamodb:Attributes" => self.attributes.as_ref().map(owned),
            "dynamodb:Select" => self.select.map(|s| vec![s.to_string()]),
            other => panic!("condition key {other} is not modelled"),
        }
    }

    /// One condition as IAM evaluates it: the policy's values ORed; a single-valued operator on
    /// an absent key fails unless negated; `ForAnyValue:` holds when some value of the request's
    /// set matches (an absent or empty set: it does not).
    fn holds(&self, operator: &str, key: &str, values: &Value) -> bool {
        let values: Vec<&str> = match values {
            Value::Array(v) => v.iter().map(|v| v.as_str().unwrap()).collect(),
            v => vec![v.as_str().unwrap()],
        };
        let actual = self.key(key);
        match operator {
            "ForAnyValue:StringEquals" => actual
                .unwrap_or_default()
                .iter()
                .any(|a| values.contains(&a.as_str())),
            "ArnNotEquals" | "StringNotEquals" => match actual {
                None => true,
                Some(actual) => !values.contains(&actual[0].as_str()),
            },
            "ArnEquals" | "StringEquals" => {
                actual.is_some_and(|actual| values.contains(&actual[0].as_str()))
            }
            other => panic!("condition operator {other} is not modelled"),
        }
    }

    fn matches(&self, statement: &Value) -> bool {
        assert_eq!(statement["Principal"], "*");
        let actions: Vec<&str> = match &statement["Action"] {
            Value::String(a) => vec![a.as_str()],
            Value::Array(a) => a.iter().map(|a| a.as_str().unwrap()).collect(),
            other => panic!("action {other}"),
        };
        let conditions = statement["Condition"].as_object().into_iter().flatten();
        actions.contains(&self.action)
            && conditions.into_iter().all(|(op, keys)| {
                keys.as_object()
                    .unwrap()
                    .iter()
                    .all(|(key, values)| self.holds(op, key, values))
            })
    }

    /// Denied outright by the policy, or left to the principal's IAM policy (the resource
    /// policy allows nothing).
    fn denied(&self, policy: &Value) -> bool {
        let statements = policy["Statement"].as_array().unwrap();
        assert!(statements.iter().all(|s| s["Effect"] == "Deny"));
        statements.iter().any(|s| self.matches(s))
    }
}

/// Only forewarn's roles (and the key rotation role, when the stack names one) reach the
/// continuation key's item: a principal allowed to read the pool table for `forewarn pools`
/// (or an administrator's `dynamodb:*`) is denied every request that could return the key — a
/// read of its partition, a Scan that does not name its attributes or names the key's, PartiQL —
/// while the requests `forewarn pools` sends (the code's projections) are left to its IAM
/// policy. Evaluated on the resolved template as IAM evaluates a resource policy.
#[test]
fn only_forewarns_roles_read_the_continuation_key() {
    use forewarn::adapters::dynamo::{
        CONTINUATION_KEY_PK, POOL_SK, PREVIOUS_SECRET, SECRET, history_attributes, pool_attributes,
    };
    const READER: &str = "arn:aws:iam::123456789012:role/pool-reader";
    const ROTATOR: &str = "arn:aws:iam::123456789012:role/ops/key-rotation";
    for (overrides, rotator) in [
        (vec![], false),
        (vec![("KeyRotationRoleArn", ROTATOR)], true),
    ] {
        let d = Deployment::new(&overrides);
        let policy = &d.properties("PoolTable")["ResourcePolicy"]["PolicyDocument"];
        let handler = Deployment::arn("HandlerRole");
        let sweeper = Deployment::arn("SweeperRole");
        let request = |principal: &'static str, action: &'static str| TableRequest {
            principal_arn: principal,
            action,
            ..TableRequest::default()
        };
        // What the key's own readers and writers send: never denied.
        for role in [handler.as_str(), sweeper.as_str()] {
            for action in ["dynamodb:GetItem", "dynamodb:PutItem"] {
                let r = TableRequest {
                    principal_arn: role,
                    action,
                    leading_keys: Some(vec![CONTINUATION_KEY_PK]),
                    ..TableRequest::default()
                };
                assert!(!r.denied(policy), "{r:?}");
            }
            let scan = TableRequest {
                principal_arn: role,
                action: "dynamodb:Scan",
                ..TableRequest::default()
            };
            assert!(!scan.denied(policy), "{scan:?}");
        }
        for principal in [READER, ADMIN_ROLE, ROTATOR] {
            let allowed_to_rotate = principal == ROTATOR && rotator;
            // The key's partition, read or written.
            for action in [
                "dynamodb:GetItem",
                "dynamodb:BatchGetItem",
                "dynamodb:Query",
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
            ] {
                let r = TableRequest {
                    leading_keys: Some(vec![CONTINUATION_KEY_PK]),
                    ..request(principal, action)
                };
                assert_eq!(r.denied(policy), !allowed_to_rotate, "{r:?}");
            }
            // A Scan reads every item: denied unless it names its attributes and none is the
            // key's.
            let scan = request(principal, "dynamodb:Scan");
            assert_eq!(
                scan.denied(policy),
                !allowed_to_rotate,
                "a bare Scan: {scan:?}"
            );
            let all = TableRequest {
                select: Some("ALL_ATTRIBUTES"),
                ..scan.clone()
            };
            assert_eq!(all.denied(policy), !allowed_to_rotate, "{all:?}");
            for secret in [SECRET, PREVIOUS_SECRET] {
                let named = TableRequest {
                    select: Some("SPECIFIC_ATTRIBUTES"),
                    attributes: Some(vec!["pk", secret]),
                    ..scan.clone()
                };
                assert_eq!(named.denied(policy), !allowed_to_rotate, "{named:?}");
            }
            let partiql = request(principal, "dynamodb:PartiQLSelect");
            assert!(partiql.denied(policy), "{partiql:?}");
            // What `forewarn pools` sends (the code's own projections) is left to its IAM
            // policy.
            for attributes in [pool_attributes(), history_attributes()] {
                assert!(!attributes.contains(&SECRET) && !attributes.contains(&PREVIOUS_SECRET));
                let pools = TableRequest {
                    select: Some("SPECIFIC_ATTRIBUTES"),
                    attributes: Some(attributes),
                    ..scan.clone()
                };
                assert!(!pools.denied(policy), "{pools:?}");
            }
            let unavailable = TableRequest {
                leading_keys: Some(vec![POOL_SK]),
                ..request(principal, "dynamodb:Query")
            };
            assert!(!unavailable.denied(policy), "{unavailable:?}");
            let pool = TableRequest {
                leading_keys: Some(vec!["POOL#spot#m5.large#us-east-1a"]),
                ..request(principal, "dynamodb:GetItem")
            };
            assert!(!pool.denied(policy), "{pool:?}");
        }
    }
    assert_no_index_holds_the_key_item();
}

/// No index of the pool table holds the continuation key's item: each has a key attribute the
/// item does not have.
fn assert_no_index_holds_the_key_item() {
    use forewarn::adapters::dynamo::{PREVIOUS_SECRET, SECRET};
    // No index holds the key's item: each has a key attribute the item does not have.
    let d = Deployment::new(&[]);
    let key_item = [
        "pk",
        "sk",
        SECRET,
        "key_id",
        PREVIOUS_SECRET,
        "previous_key_id",
    ];
    for index in d.properties("PoolTable")["GlobalSecondaryIndexes"]
        .as_array()
        .unwrap()
    {
        let keys: Vec<&str> = index["KeySchema"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["AttributeName"].as_str().unwrap())
            .collect();
        assert!(
            keys.iter().any(|k| !key_item.contains(k)),
            "index {} could hold the key's item",
            index["IndexName"]
        );
    }
}

/// The ValidatingAdmissionPolicy of `infra/k8s/node-writes.yaml`, its CEL evaluated: `variables`
/// first, then each validation, on `object` and `oldObject` as JSON (what the API server hands
/// CEL) and a request of `groups`. `None`: the policy does not match the request (not one of
/// forewarn's groups); else whether every validation holds.
fn node_write_admitted(old: &Value, new: &Value, groups: &[&str]) -> Option<bool> {
    let text =
        std::fs::read_to_string(workspace_root().join("infra/k8s/node-writes.yaml")).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let spec = &docs[0]["spec"];
    let eval = |expression: &str, variables: &Value| -> Value {
        let program =
            cel::Program::compile(expression).unwrap_or_else(|e| panic!("{expression}: {e:?}"));
        let mut context = cel::Context::default();
        context
            .add_variable("object", new)
            .and_then(|()| context.add_variable("oldObject", old))
            .and_then(|()| {
                context.add_variable(
                    "request",
                    json!({"operation": "UPDATE", "userInfo": {"groups": groups}}),
                )
            })
            .and_then(|()| context.add_variable("variables", variables))
            .unwrap();
        let value = program
            .execute(&context)
            .unwrap_or_else(|e| panic!("{expression}: {e:?}"));
        value
            .json()
            .unwrap_or_else(|e| panic!("{expression}: {e:?}"))
    };
    let matched = spec["matchConditions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| eval(c["expression"].as_str().unwrap(), &json!({})) == json!(true));
    if !matched {
        return None;
    }
    let mut variables = serde_json::Map::new();
    for v in spec["variables"].as_array().unwrap() {
        let value = eval(
            v["expression"].as_str().unwrap(),
            &Value::Object(variables.clone()),
        );
        variables.insert(v["name"].as_str().unwrap().to_string(), value);
    }
    let variables = Value::Object(variables);
    Some(spec["validations"].as_array().unwrap().iter().all(|v| {
        match eval(v["expression"].as_str().unwrap(), &variables) {
            Value::Bool(b) => b,
            other => panic!("{}: not a boolean: {other}", v["expression"]),
        }
    }))
}

/// Under FOREWARN_TAINT_KEYS=nth, `node-writes.yaml` admits NTH's four keys instead of forewarn's,
/// put and removed, by either group; no other key of NTH's prefix.
fn nths_keys_are_admitted(node: &Value, with: impl Fn(&dyn Fn(&mut Value)) -> Value) {
    use forewarn::domain::config::NTH_TAINT_KEYS;
    let handler = ["forewarn-handler", "system:authenticated"];
    let sweeper = ["forewarn-sweeper", "system:authenticated"];
    for key in NTH_TAINT_KEYS {
        let nth = with(&|n| {
            n["spec"]["unschedulable"] = json!(true);
            n["spec"]["taints"]
                .as_array_mut()
                .unwrap()
                .push(json!({"key": key, "value": "spot-interruption", "effect": "NoSchedule"}));
        });
        assert_eq!(
            node_write_admitted(node, &nth, &handler),
            Some(true),
            "{key}"
        );
        assert_eq!(
            node_write_admitted(&nth, node, &sweeper),
            Some(true),
            "{key}"
        );
    }
    let other = with(&|n| {
        n["spec"]["taints"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": "aws-node-termination-handler/other", "effect": "NoSchedule"}));
    });
    assert_eq!(node_write_admitted(node, &other, &handler), Some(false));
}

/// `infra/k8s/node-writes.yaml`: the policy matches Node updates by forewarn's two groups (the
/// stack's defaults, which `forewarn deploy` replaces by the stack's own), fails closed, is bound
/// with Deny; and its CEL, evaluated on old and new Nodes, admits what forewarn's cordon, its
/// record, the load-balancer label and the way back write — through the very keys the code
/// uses — and refuses any other change of labels, annotations, taints or spec. (A CEL
/// interpreter, not the API server, evaluates it here.)
#[test]
fn the_node_write_policy_lets_forewarn_change_only_its_cordon() {
    use forewarn::domain::config::{LABEL_EXCLUDE_LB, NTH_TAINT_KEYS, TAINT_KEY};
    use forewarn::domain::wayback::ANNOTATION_CORDON;
    let text =
        std::fs::read_to_string(workspace_root().join("infra/k8s/node-writes.yaml")).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    assert_eq!(docs.len(), 2);
    let (policy, binding) = (&docs[0], &docs[1]);
    assert_eq!(policy["kind"], "ValidatingAdmissionPolicy");
    assert_eq!(policy["spec"]["failurePolicy"], "Fail");
    assert_eq!(
        policy["spec"]["matchConstraints"]["resourceRules"],
        json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                "resources": ["nodes"]}])
    );
    assert_eq!(binding["kind"], "ValidatingAdmissionPolicyBinding");
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    assert!(
        text.contains(&format!("'{TAINT_KEY}'")),
        "forewarn's taint key"
    );
    for key in NTH_TAINT_KEYS {
        assert!(text.contains(&format!("'{key}'")), "NTH's taint key {key}");
    }
    assert!(text.contains(&format!("'{LABEL_EXCLUDE_LB}'")));
    assert!(ANNOTATION_CORDON.starts_with("forewarn.io/"));

    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1",
            "node-restriction.kubernetes.io/pool": "a"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"providerID": "aws:///us-east-1a/i-1", "podCIDR": "10.0.0.0/24",
            "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]},
    });
    let handler = ["forewarn-handler", "system:authenticated"];
    let sweeper = ["forewarn-sweeper", "system:authenticated"];
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut n = node.clone();
        edit(&mut n);
        n
    };
    // What forewarn writes: the cordon with its taint (after the others), record and label.
    let cordoned = with(&|n| {
        n["spec"]["unschedulable"] = json!(true);
        n["spec"]["taints"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": TAINT_KEY, "value": "spot-interruption", "effect": "NoSchedule"}));
        n["metadata"]["labels"][LABEL_EXCLUDE_LB] = json!("true");
        n["metadata"]["labels"]["forewarn.io/cordoned"] = json!("true");
        n["metadata"]["annotations"][ANNOTATION_CORDON] = json!("{\"reason\":\"spot\"}");
    });
    assert_eq!(node_write_admitted(&node, &cordoned, &handler), Some(true));
    assert_eq!(node_write_admitted(&node, &cordoned, &sweeper), Some(true));
    // The way back: the cordon undone.
    assert_eq!(node_write_admitted(&cordoned, &node, &sweeper), Some(true));
    nths_keys_are_admitted(&node, with);
    // A node without labels, annotations or taints at all.
    let bare = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"},
        "spec": {}});
    let bare_cordoned = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n2", "annotations": {ANNOTATION_CORDON: "{}"}},
        "spec": {"unschedulable": true,
            "taints": [{"key": TAINT_KEY, "value": "x", "effect": "NoSchedule"}]}});
    assert_eq!(
        node_write_admitted(&bare, &bare_cordoned, &handler),
        Some(true)
    );

    // Anything else, from forewarn's groups: refused.
    let refused = refused_node_writes(with);
    for (what, new) in &refused {
        assert_eq!(
            node_write_admitted(&node, new, &handler),
            Some(false),
            "{what}"
        );
        // Along with a cordon, too.
        let mut both = new.clone();
        both["spec"]["unschedulable"] = json!(true);
        assert_eq!(
            node_write_admitted(&node, &both, &sweeper),
            Some(false),
            "{what}"
        );
    }
    // Other principals are not this policy's to judge.
    assert_eq!(
        node_write_admitted(&node, &refused[0].1, &["system:nodes", "ops"]),
        None
    );
}

/// The node changes the policy refuses forewarn's groups, each made by `with` on a plain node,
/// with what was changed.
fn refused_node_writes(with: impl Fn(&dyn Fn(&mut Value)) -> Value) -> Vec<(&'static str, Value)> {
    let refused: Vec<(&str, Value)> = vec![
        (
            "another label set",
            with(&|n| {
                n["metadata"]["labels"]["node-restriction.kubernetes.io/pool"] = json!("b");
            }),
        ),
        (
            "a label added",
            with(&|n| {
                n["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = json!("");
            }),
        ),
        (
            "a label removed",
            with(&|n| {
                n["metadata"]["labels"]
                    .as_object_mut()
                    .unwrap()
                    .remove("kubernetes.io/hostname");
            }),
        ),
        (
            "another annotation",
            with(&|n| {
                n["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/scale-down-disabled"] =
                    json!("true");
            }),
        ),
        (
            "an annotation removed",
            with(&|n| {
                n["metadata"]["annotations"] = json!({});
            }),
        ),
        (
            "another taint removed",
            with(&|n| {
                n["spec"]["taints"] = json!([]);
            }),
        ),
        (
            "another taint added",
            with(&|n| {
                n["spec"]["taints"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"key": "evil", "effect": "NoExecute"}));
            }),
        ),
        (
            "the provider id",
            with(&|n| {
                n["spec"]["providerID"] = json!("aws:///us-east-1a/i-2");
            }),
        ),
        (
            "the pod CIDR",
            with(&|n| {
                n["spec"].as_object_mut().unwrap().remove("podCIDR");
            }),
        ),
        (
            "a finalizer",
            with(&|n| {
                n["metadata"]["finalizers"] = json!(["example.com/hold"]);
            }),
        ),
        (
            "an owner",
            with(&|n| {
                n["metadata"]["ownerReferences"] =
                    json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u"}]);
            }),
        ),
    ];
    refused
}

// ---------------------------------------------------------------------------------------------
// Many clusters, and an organization (infra/member.yaml)

/// The stack's four outputs of the functions' environment: each function's, as a file and as
/// `--env-var` pairs.
const ENV_OUTPUTS: [&str; 4] = [
    "HandlerEnvFile",
    "SweeperEnvFile",
    "HandlerEnvVars",
    "SweeperEnvVars",
];

/// An environment output's variables: `KEY=VALUE` lines (an env file), or pairs separated by
/// commas (`--env-var`, whose values then hold no comma).
fn env_of(text: &str) -> std::collections::BTreeMap<String, String> {
    let separator = if text.contains('\n') { '\n' } else { ',' };
    text.split(separator)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p
                .split_once('=')
                .unwrap_or_else(|| panic!("not KEY=VALUE: {p}"));
            (k.to_string(), v.trim_matches('"').to_string())
        })
        .collect()
}

/// The statements of every policy of a role (inline, and `extra` policy resources naming it)
/// whose actions are of `service` (`eks:`, `sts:`).
fn statements_of(d: &Deployment, role: &str, service: &str) -> Vec<Value> {
    let properties = d.properties(role);
    let mut documents: Vec<Value> = properties["Policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| inline_policy(&properties, p["PolicyName"].as_str().unwrap()))
        .collect();
    for (name, resource) in d.template["Resources"].as_object().unwrap() {
        let applies = resource
            .get("Condition")
            .is_none_or(|c| d.condition(c.as_str().unwrap()));
        if resource["Type"] == "AWS::IAM::Policy" && applies {
            let policy = d.properties(name);
            if policy["Roles"]
                .as_array()
                .unwrap()
                .contains(&json!(format!("ref:{role}")))
            {
                documents.push(policy["PolicyDocument"].clone());
            }
        }
    }
    documents
        .iter()
        .flat_map(|d| d["Statement"].as_array().unwrap().clone())
        .filter(|s| strings(&s["Action"]).iter().any(|a| a.starts_with(service)))
        .collect()
}

/// `ClusterNames` reaches both functions as `FOREWARN_CLUSTERS` in all four forms of their
/// environment (`ClusterName` when empty, then with `FOREWARN_EKS_CLUSTER` as before); their
/// EKS grants are `DescribeCluster` of each cluster served, or of every cluster of the account
/// and region with `ListClusters` for `*`, and nothing else; the table keeps `ClusterName`'s name.
#[test]
fn the_clusters_served_reach_both_functions_and_their_eks_grants() {
    let describe = |resource: Value| {
        json!([{"Sid": "DescribeCluster", "Effect": "Allow", "Action": "eks:DescribeCluster",
                "Resource": resource,
                "Condition": {"StringEquals": {"aws:RequestedRegion": REGION}}}])
    };
    let list = json!({"Sid": "ListClusters", "Effect": "Allow", "Action": "eks:ListClusters",
                      "Resource": "*"});
    let cases = [
        (
            "",
            "demo",
            Some("demo"),
            describe(json!(format!(
                "arn:aws:eks:{REGION}:{ACCOUNT}:cluster/demo"
            ))),
        ),
        (
            "a,b",
            "a,b",
            None,
            describe(json!([
                "arn:*:eks:*:*:cluster/a",
                "arn:*:eks:*:*:cluster/b"
            ])),
        ),
        (
            "solo",
            "solo",
            None,
            describe(json!(["arn:*:eks:*:*:cluster/solo"])),
        ),
        ("*", "*", None, {
            let mut both = describe(json!(format!("arn:aws:eks:{REGION}:{ACCOUNT}:cluster/*")));
            both.as_array_mut().unwrap().push(list.clone());
            both
        }),
    ];
    for (names, clusters, eks_cluster, grants) in cases {
        let d = Deployment::new(&[("ClusterNames", names)]);
        for output in ENV_OUTPUTS {
            let text = d.output(output);
            // The --env-var forms split a list at its commas, so that cargo lambda refuses them
            // (a name alone is no KEY=VALUE): the files are the form for a list.
            if output.ends_with("Vars") && clusters.contains(',') {
                assert!(text.split(',').any(|p| !p.contains('=')), "{text}");
                continue;
            }
            let env = env_of(&text);
            assert_eq!(env["FOREWARN_CLUSTERS"], clusters, "{names} {output}");
            assert_eq!(
                env.get("FOREWARN_EKS_CLUSTER").map(String::as_str),
                eks_cluster,
                "{names} {output}"
            );
            assert!(!env.contains_key("FOREWARN_CLUSTER_NAME"), "{output}");
            assert_eq!(env["FOREWARN_ACCOUNT_ID"], ACCOUNT);
            assert!(!env.contains_key("FOREWARN_MEMBER_ROLE"));
        }
        for role in ["HandlerRole", "SweeperRole"] {
            assert_eq!(
                Value::Array(statements_of(&d, role, "eks:")),
                grants,
                "{names} {role}"
            );
        }
        assert_eq!(
            d.properties("PoolTable")["TableName"],
            "forewarn-demo-pools"
        );
    }
}

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

/// The central deployment's roles, as a member stack is given them.
const CENTRAL: &str = "210987654321";
const CENTRAL_HANDLER: &str = "arn:aws:iam::210987654321:role/forewarn-demo-HandlerRole-X1";
const CENTRAL_SWEEPER: &str = "arn:aws:iam::210987654321:role/forewarn-demo-SweeperRole-X2";

/// `infra/member.yaml` resolved in account [`ACCOUNT`] for the central deployment above, serving
/// clusters `a` and `b` unless `overrides` say otherwise.
fn member(overrides: &[(&str, &str)]) -> Deployment {
    let mut all = vec![
        ("CentralAccountId", CENTRAL),
        ("CentralEventBusName", "forewarn-demo"),
        ("HandlerRoleArn", CENTRAL_HANDLER),
        ("SweeperRoleArn", CENTRAL_SWEEPER),
        ("ClusterNames", "a,b"),
    ];
    all.extend_from_slice(overrides);
    Deployment::of("infra/member.yaml", &all)
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

/// The member role is assumed by the central handler's role and nobody else, and grants the calls
/// forewarn makes in a member account, no more: `DescribeInstances` and the zones' IDs, the
/// served clusters' `DescribeCluster` (`ListClusters` for `*`), the target groups' reads and
/// deregistration, and the lifecycle actions under the very conditions of the central handler's
/// role for the same clusters and prefix; the sweeper's role may assume only the read-only twin,
/// which grants reads alone: instances, their statuses, the zones' IDs, the node groups and
/// their launch templates, the served clusters' `DescribeCluster`.
#[test]
fn the_member_role_trusts_the_central_functions_only_and_grants_what_they_call() {
    for names in ["a,b", "solo", "*"] {
        let m = member(&[
            ("ClusterNames", names),
            ("AutoScalingGroupNamePrefix", "eks-"),
        ]);
        let role = m.properties("MemberRole");
        assert_eq!(role["RoleName"], "forewarn-member");
        assert_eq!(
            role["AssumeRolePolicyDocument"]["Statement"],
            json!([{"Effect": "Allow",
                    "Principal": {"AWS": [CENTRAL_HANDLER]},
                    "Action": "sts:AssumeRole"}])
        );
        let read = m.properties("MemberReadRole");
        assert_eq!(
            read["AssumeRolePolicyDocument"]["Statement"],
            json!([{"Effect": "Allow",
                    "Principal": {"AWS": [CENTRAL_SWEEPER]},
                    "Action": "sts:AssumeRole"}])
        );
        // The served clusters' DescribeCluster (every cluster's, and ListClusters, for `*`):
        // how the central functions reach them.
        let clusters = if names == "*" {
            json!([{"Sid": "DescribeServedClusters", "Effect": "Allow",
                    "Action": "eks:DescribeCluster",
                    "Resource": format!("arn:aws:eks:{REGION}:{ACCOUNT}:cluster/*")},
                   {"Sid": "ListClusters", "Effect": "Allow", "Action": "eks:ListClusters",
                    "Resource": "*"}])
        } else {
            let arns: Vec<String> = names
                .split(',')
                .map(|n| format!("arn:*:eks:*:*:cluster/{n}"))
                .collect();
            json!([{"Sid": "DescribeServedClusters", "Effect": "Allow",
                    "Action": "eks:DescribeCluster", "Resource": arns}])
        };
        let mut read_only = vec![json!({"Sid": "DescribeInstances", "Effect": "Allow",
            "Action": ["ec2:DescribeInstances", "ec2:DescribeCapacityReservations",
                       "ec2:DescribeInstanceStatus",
                       "ec2:DescribeAvailabilityZones", "autoscaling:DescribeAutoScalingGroups",
                       "ec2:DescribeLaunchTemplateVersions"], "Resource": "*"})];
        read_only.extend(clusters.as_array().unwrap().iter().cloned());
        assert_eq!(
            inline_policy(&read, "forewarn-member-read-only")["Statement"],
            Value::Array(read_only)
        );
        let mut granted = std::collections::BTreeSet::new();
        for p in role["Policies"].as_array().unwrap() {
            let document = inline_policy(&role, p["PolicyName"].as_str().unwrap());
            for s in document["Statement"].as_array().unwrap() {
                if s["Effect"] == "Allow" {
                    granted.extend(strings(&s["Action"]).into_iter().map(str::to_string));
                }
            }
        }
        let mut expected = vec![
            "autoscaling:CompleteLifecycleAction",
            "autoscaling:RecordLifecycleActionHeartbeat",
            "ec2:DescribeAvailabilityZones",
            "ec2:DescribeCapacityReservations",
            "ec2:DescribeInstances",
            "eks:DescribeCluster",
            "elasticloadbalancing:DeregisterTargets",
            "elasticloadbalancing:DescribeTargetHealth",
            "tag:GetResources",
        ];
        if names == "*" {
            expected.insert(6, "eks:ListClusters");
        }
        assert_eq!(granted.into_iter().collect::<Vec<_>>(), expected, "{names}");
        assert_eq!(
            inline_policy(&role, "forewarn-member-read")["Statement"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| strings(&s["Action"]).iter().any(|a| a.starts_with("eks:")))
                .cloned()
                .collect::<Vec<_>>(),
            clusters.as_array().unwrap().clone(),
            "the handler's member role reaches the same clusters"
        );
        let central = Deployment::new(&[
            ("ClusterNames", names),
            ("AutoScalingGroupNamePrefix", "eks-"),
        ]);
        let lifecycle = inline_policy(&role, "forewarn-member-lifecycle");
        assert_eq!(
            lifecycle,
            inline_policy(
                &central.properties("HandlerRole"),
                "forewarn-handler-lifecycle"
            ),
            "{names}"
        );
        let first = names.split(',').next().unwrap();
        let tag = if first == "*" { "any" } else { first };
        assert!(lifecycle_allowed(
            &lifecycle,
            &group("eks-ng"),
            &[("eks:cluster-name", tag)]
        ));
        assert!(!lifecycle_allowed(
            &lifecycle,
            &group("ng"),
            &[("eks:cluster-name", tag)]
        ));
        if first != "*" {
            assert!(!lifecycle_allowed(
                &lifecycle,
                &group("eks-ng"),
                &[("eks:cluster-name", "c")]
            ));
        }
        let read = inline_policy(&role, "forewarn-member-read");
        assert_eq!(
            read["Statement"][0],
            json!({"Sid": "DescribeInstances", "Effect": "Allow",
                    "Action": ["ec2:DescribeInstances", "ec2:DescribeCapacityReservations",
                               "ec2:DescribeAvailabilityZones"],
                    "Resource": "*"})
        );
        assert_deregistration_limited(&read, names);
    }
}

/// A target group of the load balancer controller in `region` and `account`.
fn target_group(region: &str, account: &str) -> String {
    format!("arn:aws:elasticloadbalancing:{region}:{account}:targetgroup/k8s-shop-web-5e1f/6c9a")
}

/// `policy` lets DeregisterTargets through only on target groups of this account and region
/// tagged `elbv2.k8s.aws/cluster` for one of `names` (any value for `*`), and no other write of
/// Elastic Load Balancing; the Describe calls anywhere.
fn assert_deregistration_limited(policy: &Value, names: &str) {
    const TAG: &str = "elbv2.k8s.aws/cluster";
    let here = target_group(REGION, ACCOUNT);
    let allowed = |action, resource: &str, tags: &[(&str, &str)]| {
        Request {
            action,
            resource,
            tags,
        }
        .allowed_by(policy)
    };
    let served: Vec<&str> = match names {
        "*" => vec!["any", "other"],
        names => names.split(',').collect(),
    };
    for cluster in &served {
        let tags = [(TAG, *cluster)];
        assert!(
            allowed("elasticloadbalancing:DeregisterTargets", &here, &tags),
            "{names} {cluster}"
        );
        for elsewhere in [
            target_group("eu-west-1", ACCOUNT),
            target_group(REGION, "999999999999"),
        ] {
            assert!(!allowed(
                "elasticloadbalancing:DeregisterTargets",
                &elsewhere,
                &tags
            ));
        }
        for write in [
            "elasticloadbalancing:RegisterTargets",
            "elasticloadbalancing:ModifyTargetGroup",
            "elasticloadbalancing:DeleteTargetGroup",
            "elasticloadbalancing:AddTags",
        ] {
            assert!(!allowed(write, &here, &tags), "{write}");
        }
    }
    assert!(
        !allowed("elasticloadbalancing:DeregisterTargets", &here, &[]),
        "untagged"
    );
    assert!(!allowed(
        "elasticloadbalancing:DeregisterTargets",
        &here,
        &[("kubernetes.io/cluster/any", "owned")]
    ));
    if names != "*" {
        assert!(!allowed(
            "elasticloadbalancing:DeregisterTargets",
            &here,
            &[(TAG, "unserved")]
        ));
    }
    for read in [
        "elasticloadbalancing:DescribeTargetHealth",
        "tag:GetResources",
    ] {
        assert!(allowed(read, "*", &[]), "{read}");
    }
}

/// The handler's role deregisters targets only from the served clusters' target groups of its
/// account and region (one cluster, a list, `*`), and writes nothing else of Elastic Load
/// Balancing.
#[test]
fn deregistration_is_limited_to_the_served_clusters_target_groups() {
    for (name, names) in [("demo", ""), ("demo", "a,b"), ("demo", "*")] {
        let d = Deployment::new(&[("ClusterName", name), ("ClusterNames", names)]);
        let policy = inline_policy(&d.properties("HandlerRole"), "forewarn-handler");
        let served = if names.is_empty() { name } else { names };
        assert_deregistration_limited(&policy, served);
    }
}

/// An organization's central stack `name` serving `clusters` (`ClusterNames`), deployed to moto
/// without functions nor access entry: its outputs.
async fn organization_stack(
    sdk: &aws_config::SdkConfig,
    name: &str,
    clusters: &str,
) -> std::collections::HashMap<String, String> {
    let template = std::fs::read_to_string(workspace_root().join("infra/forewarn.yaml")).unwrap();
    let mut params = vec![
        ("ClusterName", name),
        ("OrganizationId", "o-a1b2c3d4e5"),
        ("FunctionsDeployed", "false"),
        ("CreateAccessEntry", "false"),
    ];
    if !clusters.is_empty() {
        params.push(("ClusterNames", clusters));
    }
    forewarn_tests::moto::deploy_stack(sdk, name, &template, &params)
        .await
        .expect("the organization's stack deploys to moto")
}

/// An organization's central stack (a list of clusters) and a member stack given its roles both
/// deploy to moto, and what they made says what was asked: the functions' environment, the member
/// role's name, each forwarding rule's one target.
#[test]
fn an_organizations_central_and_member_stacks_deploy() {
    use forewarn_tests::moto::{deploy_stack, runtime, shared, unique_name};

    runtime().block_on(async {
        let sdk = shared().sdk_config();
        let name = unique_name("central");
        let read = |path: &str| std::fs::read_to_string(workspace_root().join(path)).unwrap();
        let outputs = organization_stack(&sdk, &name, "a,b").await;
        assert_eq!(outputs["TableName"], format!("forewarn-{name}-pools"));
        for (output, role) in [
            ("HandlerEnvFile", "forewarn-member"),
            ("SweeperEnvFile", "forewarn-member-read"),
        ] {
            let env = env_of(&outputs[output]);
            assert_eq!(env["FOREWARN_CLUSTERS"], "a,b", "{output}");
            assert_eq!(env["FOREWARN_MEMBER_ROLE"], role, "{output}");
            assert_eq!(env["FOREWARN_ACCOUNT_ID"], ACCOUNT, "{output}");
            assert!(!env.contains_key("FOREWARN_EKS_CLUSTER"), "{output}");
        }

        let member_stack = unique_name("member");
        // IAM role names are the account's: one of its own for this run.
        let role_name = unique_name("fw-member");
        let member_outputs = deploy_stack(
            &sdk,
            &member_stack,
            &read("infra/member.yaml"),
            &[
                ("CentralAccountId", CENTRAL),
                ("CentralEventBusName", &outputs["EventBusName"]),
                ("HandlerRoleArn", &outputs["HandlerRoleArn"]),
                ("SweeperRoleArn", &outputs["SweeperRoleArn"]),
                ("MemberRoleName", &role_name),
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
        assert_eq!(outputs["EventBusName"], format!("forewarn-{name}"));
        let bus = format!(
            "arn:aws:events:{REGION}:{CENTRAL}:event-bus/{}",
            outputs["EventBusName"]
        );
        assert_eq!(member_outputs["CentralBusArn"], bus);
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
            let targets: Vec<(Option<&str>, Option<&str>)> = targets
                .targets()
                .iter()
                .map(|t| (Some(t.arn()), t.role_arn()))
                .collect();
            assert_eq!(
                targets,
                [(
                    Some(bus.as_str()),
                    Some(member_outputs["ForwardRoleArn"].as_str())
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
        let outputs = organization_stack(&sdk, &name, "").await;
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
            capacity_type: "spot".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
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

/// The stack refuses `ClusterNames` that mixes `*` with names (its rule, evaluated as
/// CloudFormation evaluates `Fn::Contains` and `Fn::EachMemberEquals` on a list parameter; moto
/// does not evaluate rules): `*` alone, names alone and the empty default pass.
#[test]
fn the_stack_refuses_cluster_names_that_mix_star_with_names() {
    let rule = &stack_template()["Rules"]["ClusterNamesStarAlone"];
    assert_eq!(rule["RuleCondition"]["Fn::Contains"][1], "*", "{rule}");
    let assertion = &rule["Assertions"][0]["Assert"]["Fn::EachMemberEquals"];
    assert_eq!(assertion[1], "*", "{rule}");
    for list in [&rule["RuleCondition"]["Fn::Contains"][0], &assertion[0]] {
        assert_eq!(list, &json!({"Ref": "ClusterNames"}), "{rule}");
    }
    let holds = |names: &[&str]| !names.contains(&"*") || names.iter().all(|n| *n == "*");
    assert!(!holds(&["blue", "*"]));
    assert!(!holds(&["*", "green"]));
    for fine in [&["*"][..], &["blue", "green"][..], &[""][..]] {
        assert!(holds(fine), "{fine:?}");
    }
}

/// Member accounts' clusters (`MemberClusters`) join the own ones in both functions'
/// `FOREWARN_CLUSTERS`, in a form the functions read back as clusters of those accounts; the
/// stack refuses them without an organization, whose member role reaches them.
#[test]
fn member_clusters_reach_both_functions_and_need_an_organization() {
    let d = Deployment::new(&[
        ("OrganizationId", "o-a1b2c3d4e5"),
        ("ClusterNames", "a,b"),
        ("MemberClusters", "111111111111/prod,222222222222/*"),
    ]);
    for output in ENV_OUTPUTS {
        let text = d.output(output);
        let value = if text.contains('\n') {
            env_of(&text)["FOREWARN_CLUSTERS"].clone()
        } else {
            // The comma-separated form cannot hold a list: its FOREWARN_CLUSTERS runs to the
            // next variable.
            let start = text.find("FOREWARN_CLUSTERS=").unwrap() + "FOREWARN_CLUSTERS=".len();
            let end = text.find(",FOREWARN_TABLE").unwrap();
            text[start..end].to_string()
        };
        assert_eq!(value, "a,b,111111111111/prod,222222222222/*", "{output}");
        let read = forewarn::app::settings::ClusterSelection::parse(&value).unwrap();
        assert_eq!(
            read.accounts().into_iter().collect::<Vec<_>>(),
            ["111111111111", "222222222222"],
            "{output}"
        );
    }
    let without = Deployment::new(&[("ClusterNames", "a,b")]);
    assert_eq!(
        env_of(&without.output("HandlerEnvFile"))["FOREWARN_CLUSTERS"],
        "a,b"
    );

    let rule = &stack_template()["Rules"]["MemberClustersNeedAnOrganization"];
    assert_eq!(
        rule["RuleCondition"],
        json!({"Fn::Not": [{"Fn::EachMemberEquals": [{"Ref": "MemberClusters"}, ""]}]})
    );
    assert_eq!(
        rule["Assertions"][0]["Assert"],
        json!({"Fn::Not": [{"Fn::Equals": [{"Ref": "OrganizationId"}, ""]}]})
    );
}

/// Issue 46: the continuation keys leave the pool table for a secret of the stack's, generated at
/// creation, which both functions are told of and may read (and put once, to adopt an older
/// table's keys); its policy denies every other principal its value — reading it, putting a
/// version, moving its labels, rotating it — whatever their IAM policies grant, and lets only
/// the stack's own updates call `UpdateSecret`. A rotation role, when given, is the one other
/// principal let through.
#[test]
fn the_continuation_key_is_a_secret_only_forewarn_reads() {
    for (overrides, rotation) in [
        (vec![], None),
        (
            vec![("KeyRotationRoleArn", "arn:aws:iam::123456789012:role/ops")],
            Some("arn:aws:iam::123456789012:role/ops"),
        ),
    ] {
        let d = Deployment::new(&overrides);
        let secret = d.properties("ContinuationKeySecret");
        assert_eq!(secret["Name"], "forewarn-demo-continuation-key");
        assert_eq!(
            secret["GenerateSecretString"],
            json!({"SecretStringTemplate": "{\"key_id\": 1}", "GenerateStringKey": "secret",
                   "PasswordLength": 64, "ExcludePunctuation": true})
        );
        let policy = d.properties("ContinuationKeySecretPolicy");
        assert_eq!(policy["SecretId"], "ref:ContinuationKeySecret");
        assert_eq!(policy["BlockPublicPolicy"], true);
        let mut allowed = vec![
            Deployment::arn("HandlerRole"),
            Deployment::arn("SweeperRole"),
        ];
        allowed.extend(rotation.map(str::to_string));
        assert_eq!(
            policy["ResourcePolicy"]["Statement"],
            json!([{"Sid": "OnlyForewarnReadsOrWritesTheKey", "Effect": "Deny", "Principal": "*",
                    "Action": ["secretsmanager:GetSecretValue", "secretsmanager:PutSecretValue",
                               "secretsmanager:UpdateSecretVersionStage",
                               "secretsmanager:RotateSecret"],
                    "Resource": "*",
                    "Condition": {"ArnNotEquals": {"aws:PrincipalArn": allowed}}},
                   {"Sid": "OnlyTheStackUpdatesTheSecret", "Effect": "Deny", "Principal": "*",
                    "Action": "secretsmanager:UpdateSecret", "Resource": "*",
                    "Condition": {"StringNotEquals":
                        {"aws:CalledViaFirst": "cloudformation.amazonaws.com"}}}])
        );
        for role in ["HandlerRole", "SweeperRole"] {
            assert_eq!(
                Value::Array(statements_of(&d, role, "secretsmanager:")),
                json!([{"Sid": "ContinuationKey", "Effect": "Allow",
                        "Action": ["secretsmanager:GetSecretValue",
                                   "secretsmanager:PutSecretValue"],
                        "Resource": "ref:ContinuationKeySecret"}]),
                "{role}"
            );
        }
        for output in ENV_OUTPUTS {
            assert_eq!(
                env_of(&d.output(output))["FOREWARN_KEY_SECRET"],
                "ref:ContinuationKeySecret",
                "{output}"
            );
        }
    }
}
