//! The continuation key's secret: only forewarn's roles reach the key.

use serde_json::{Value, json};

use crate::support::{Deployment, ENV_OUTPUTS, env_of, statements_of};

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
