//! The pool table's resource policy (`TableRequest::verdict`) and the continuation key's secret:
//! only forewarn's roles reach the key.

use serde_json::{Value, json};

use crate::support::{ADMIN_ROLE, Deployment, ENV_OUTPUTS, env_of, statements_of};

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

/// Issue 46: the continuation keys leave the pool table for a secret of the stack's, generated at
/// creation, which both functions are told of and may read, never write (only a rotation role
/// puts a version); its policy denies every other principal its value — reading it, putting a
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
                        "Action": "secretsmanager:GetSecretValue",
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
