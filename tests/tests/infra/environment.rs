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

/// `Clusters` reaches both functions as `FOREWARN_CLUSTERS` in all four forms of their
/// environment, as given (no retired `FOREWARN_EKS_CLUSTER`: a lone named cluster is reached
/// through EKS by the settings' own rule); their EKS grants are `DescribeCluster` of each entry,
/// or of every cluster of the account and region with `ListClusters` when `*` is an entry (alone,
/// or with names, or with member accounts' entries), and nothing else; the table is named after
/// the stack, whatever the clusters.
#[test]
fn the_clusters_served_reach_both_functions_and_their_eks_grants() {
    let describe = |resource: Value| {
        json!([{"Sid": "DescribeCluster", "Effect": "Allow", "Action": "eks:DescribeCluster",
                "Resource": resource,
                "Condition": {"StringEquals": {"aws:RequestedRegion": REGION}}}])
    };
    let list = json!({"Sid": "ListClusters", "Effect": "Allow", "Action": "eks:ListClusters",
                      "Resource": "*"});
    let every = {
        let mut both = describe(json!(format!("arn:aws:eks:{REGION}:{ACCOUNT}:cluster/*")));
        both.as_array_mut().unwrap().push(list.clone());
        both
    };
    let cases = [
        ("demo", describe(json!(["arn:*:eks:*:*:cluster/demo"]))),
        (
            "a,b",
            describe(json!([
                "arn:*:eks:*:*:cluster/a",
                "arn:*:eks:*:*:cluster/b"
            ])),
        ),
        ("*", every.clone()),
        ("demo,*", every.clone()),
    ];
    for (clusters, grants) in cases {
        let d = Deployment::new(&[("Clusters", clusters)]);
        for output in ENV_OUTPUTS {
            let text = d.output(output);
            // The --env-var forms split a list at its commas, so that cargo lambda refuses them
            // (a name alone is no KEY=VALUE): the files are the form for a list.
            if output.ends_with("Vars") && clusters.contains(',') {
                assert!(text.split(',').any(|p| !p.contains('=')), "{text}");
                continue;
            }
            let env = env_of(&text);
            assert_eq!(env["FOREWARN_CLUSTERS"], clusters, "{output}");
            assert!(!env.contains_key("FOREWARN_EKS_CLUSTER"), "{output}");
            assert!(!env.contains_key("FOREWARN_CLUSTER_NAME"), "{output}");
            assert_eq!(env["FOREWARN_ACCOUNT_ID"], ACCOUNT);
            assert!(!env.contains_key("FOREWARN_MEMBER_ROLE"));
        }
        for role in ["HandlerRole", "SweeperRole"] {
            assert_eq!(
                Value::Array(statements_of(&d, role, "eks:")),
                grants,
                "{clusters} {role}"
            );
        }
        assert_eq!(
            d.properties("PoolTable")["TableName"],
            "forewarn-demo-pools"
        );
    }
}

/// `*` serves every cluster of the account and region wherever it is in `Clusters` (a condition
/// finds it: `Fn::Contains` is a rule function alone), not a member account's `ACCOUNT/*`; the
/// stack's own cluster, whose access entries it makes, is the first entry when it is a name of
/// this account.
#[test]
fn the_stack_finds_every_cluster_and_its_own_cluster_in_the_list() {
    for (clusters, every, own) in [
        ("demo", false, true),
        ("a,b", false, true),
        ("*", true, false),
        ("a,*", true, true),
        ("*,a", true, false),
        ("a,111111111111/*", false, true),
        ("111111111111/*,a", false, false),
        ("111111111111/x,*", true, false),
    ] {
        let d = Deployment::new(&[("Clusters", clusters)]);
        assert_eq!(d.condition("AllClusters"), every, "{clusters}");
        assert_eq!(d.condition("FirstClusterIsOwn"), own, "{clusters}");
        for (create, made) in [("true", own), ("false", false)] {
            let d = Deployment::new(&[("Clusters", clusters), ("CreateAccessEntry", create)]);
            assert_eq!(d.condition("WithAccessEntry"), made, "{clusters} {create}");
        }
        if own {
            let first = clusters.split(',').next().unwrap();
            for entry in ["HandlerAccessEntry", "SweeperAccessEntry"] {
                assert_eq!(d.properties(entry)["ClusterName"], first, "{clusters}");
            }
        }
    }
    for entry in ["HandlerAccessEntry", "SweeperAccessEntry"] {
        assert_eq!(
            stack_template()["Resources"][entry]["Condition"],
            "WithAccessEntry"
        );
    }
}

/// Member accounts' clusters (`ACCOUNT/NAME`, `ACCOUNT/*` in `Clusters`) reach both functions'
/// `FOREWARN_CLUSTERS` with the own ones, in a form the functions read back as clusters of those
/// accounts; the stack refuses them without an organization, whose member role reaches them (a
/// wait condition nobody signals, made only then: a rule cannot look into an entry).
#[test]
fn member_clusters_reach_both_functions_and_need_an_organization() {
    let list = "a,b,111111111111/prod,222222222222/*";
    let d = Deployment::new(&[("OrganizationId", "o-a1b2c3d4e5"), ("Clusters", list)]);
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
        assert_eq!(value, list, "{output}");
        let read = forewarn::app::settings::ClusterSelection::parse(&value).unwrap();
        assert_eq!(
            read.accounts().into_iter().collect::<Vec<_>>(),
            ["111111111111", "222222222222"],
            "{output}"
        );
    }
    assert!(!d.condition("MemberClustersWithoutOrganization"));
    assert!(Deployment::new(&[("Clusters", list)]).condition("MemberClustersWithoutOrganization"));
    for clusters in ["a,b", "*"] {
        let d = Deployment::new(&[("Clusters", clusters)]);
        assert!(!d.condition("WithMemberClusters"), "{clusters}");
        assert!(!d.condition("MemberClustersWithoutOrganization"));
    }
    let guard = &stack_template()["Resources"]["MemberClustersNeedAnOrganization"];
    assert_eq!(guard["Type"], "AWS::CloudFormation::WaitCondition");
    assert_eq!(guard["Condition"], "MemberClustersWithoutOrganization");
    assert_eq!(guard["CreationPolicy"]["ResourceSignal"]["Count"], 1);
    assert!(guard.get("Properties").is_none(), "nothing can signal it");
}
