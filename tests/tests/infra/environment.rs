//! What the stack's parameters put in the functions' environment: hook names, the policy
//! allowance, the clusters served.

use serde_json::{Value, json};

use crate::support::{
    ACCOUNT, Deployment, ENV_OUTPUTS, REGION, env_of, stack_template, statements_of,
};

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
    assert_eq!(env_file(&d).len(), 6);
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

/// `ClusterNames` reaches both functions as `FOREWARN_CLUSTERS` in all four forms of their
/// environment (`ClusterName` when empty; no retired `FOREWARN_EKS_CLUSTER`: a lone named
/// cluster is reached through EKS by the settings' own rule); their
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
            describe(json!(format!(
                "arn:aws:eks:{REGION}:{ACCOUNT}:cluster/demo"
            ))),
        ),
        (
            "a,b",
            "a,b",
            describe(json!([
                "arn:*:eks:*:*:cluster/a",
                "arn:*:eks:*:*:cluster/b"
            ])),
        ),
        (
            "solo",
            "solo",
            describe(json!(["arn:*:eks:*:*:cluster/solo"])),
        ),
        ("*", "*", {
            let mut both = describe(json!(format!("arn:aws:eks:{REGION}:{ACCOUNT}:cluster/*")));
            both.as_array_mut().unwrap().push(list.clone());
            both
        }),
    ];
    for (names, clusters, grants) in cases {
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
            assert!(!env.contains_key("FOREWARN_EKS_CLUSTER"), "{output}");
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
