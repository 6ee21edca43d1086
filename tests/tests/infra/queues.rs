//! The queue policies evaluated as IAM evaluates them (`Send::verdict`), and the queue's
//! `MaxReceiveCount`.

use serde_json::{Value, json};

use crate::support::{
    ACCOUNT, ADMIN_ROLE, Deployment, EVENTS, HOOK_ROLE, REDRIVE_ROLE, REGION, RULES, member,
    stack_template,
};

/// A number of the template, written as a YAML number or string.
fn number(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().unwrap(),
        v => v.as_u64().unwrap_or_else(|| panic!("not a number: {v}")),
    }
}

/// The queue's receives before the dead-letter queue (15, fixed: issue 58) keep a spot warning
/// that fails at every attempt on the queue past its window, with the delays the handler gives
/// failed messages (`forewarn::domain::retry`), and the former default of 5 did not; its
/// visibility timeout is six times the functions' timeout.
#[test]
fn max_receive_count_outlasts_a_spot_warning_window() {
    use forewarn::domain::config::Config;
    use forewarn::domain::event::EventKind;
    use forewarn::domain::report::Report;
    use forewarn::domain::retry;

    let t = stack_template();
    let queue = &t["Resources"]["EventQueue"]["Properties"];
    let max = number(&queue["RedrivePolicy"]["maxReceiveCount"]);
    assert_eq!(max, 15);
    assert!(t["Parameters"].get("MaxReceiveCount").is_none());
    let timeout = number(&t["Outputs"]["FunctionTimeout"]["Value"]);
    assert_eq!(number(&queue["VisibilityTimeout"]), 6 * timeout);
    let config = Config::default();
    let start = chrono::DateTime::parse_from_rfc3339("2026-11-20T10:00:00Z")
        .unwrap()
        .to_utc();
    let window_end = start + config.interruption_notice - config.deadline_margin;
    assert_eq!((window_end - start).num_seconds(), 105);
    let warning = Report {
        kind: Some(EventKind::SpotInterruption),
        time: Some(start),
        ..Report::default()
    };
    // When each receive of a message that fails every time happens, from the first at the event.
    let receives = |count: u64| {
        let mut at = vec![start];
        for n in 1..count {
            let now = *at.last().unwrap();
            let delay = retry::delay(&warning, &config, n as u32, now);
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
        every_rule_delivers_over_tls_only(&send);
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

/// Issue 57: a member account's dead-letter queue takes what its seven forwarding rules could not
/// deliver, from EventBridge delivering for them (`aws:SourceArn`), over TLS, and nothing from
/// anyone else: not the account's other rules, nor the central account's, nor the stack's roles,
/// nor an administrator.
#[test]
fn only_the_member_rules_may_send_to_the_member_dead_letter_queue() {
    let m = member(&[]);
    let props = m.properties("DeadLetterQueuePolicy");
    assert_eq!(props["Queues"], json!(["ref:DeadLetterQueue"]));
    let policy = &props["PolicyDocument"];
    let dlq = Deployment::arn("DeadLetterQueue");
    let send = |s: Send| s.verdict(policy, &dlq);
    every_rule_delivers_over_tls_only(&send);
    for source in [
        format!("arn:aws:events:{REGION}:{ACCOUNT}:rule/someone-elses"),
        "arn:aws:events:us-east-1:210987654321:rule/forewarn-demo-SpotInterruptionRule-X".into(),
    ] {
        let other = Send {
            service: Some(EVENTS),
            source_arn: Some(&source),
            ..Send::default()
        };
        assert_eq!(send(other), Verdict::Denied, "{source}");
    }
    for principal in [
        Deployment::arn("ForwardRole"),
        Deployment::arn("MemberRole"),
        Deployment::arn("MemberReadRole"),
        ADMIN_ROLE.to_string(),
    ] {
        let s = Send {
            principal_arn: Some(&principal),
            ..Send::default()
        };
        assert_eq!(send(s), Verdict::Denied, "{principal}");
    }
}

/// EventBridge delivering for each of the stack's rules is allowed by `send`'s policy, over TLS
/// only.
fn every_rule_delivers_over_tls_only(send: &dyn Fn(Send) -> Verdict) {
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
}
