//! The functions' roles: lifecycle actions, Kubernetes groups, target-group deregistration,
//! and the member role a central deployment assumes.

use forewarn_tests::moto::workspace_root;
use serde_json::{Value, json};

use crate::support::{
    ACCOUNT, CENTRAL_HANDLER, CENTRAL_SWEEPER, Deployment, REGION, glob, group, inline_policy,
    member, strings,
};

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
/// clusters is each of them, `*` any group tagged `eks:cluster-name`. A member account's entries
/// grant nothing here (a `*` of theirs is left out of the condition keys). Nothing else grants
/// those actions.
#[test]
fn lifecycle_actions_are_limited_to_the_clusters_tagged_groups() {
    let managed = |c: &'static str| [("eks:cluster-name", c)];
    for (clusters, served, other) in [
        ("demo", vec!["demo"], "prod"),
        ("a,b", vec!["a", "b"], "demo"),
        ("a,111111111111/m,222222222222/*", vec!["a"], "m"),
    ] {
        let d = Deployment::new(&[
            ("Clusters", clusters),
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
        let keys = policy.to_string();
        assert!(
            !keys.contains("kubernetes.io/cluster/222222222222/*"),
            "no wildcard in a condition key: {keys}"
        );
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
    let d = Deployment::new(&[("Clusters", "*"), ("AutoScalingGroupNamePrefix", "eks-")]);
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

/// Each function's role joins a Kubernetes group of its own, fixed (no parameter chooses it),
/// the groups infra/k8s/rbac.yaml binds: the node actions to both, the expander's ConfigMaps to
/// the sweeper.
#[test]
fn each_role_joins_the_group_rbac_binds_for_it() {
    let d = Deployment::new(&[]);
    let handler = d.properties("HandlerAccessEntry");
    let sweeper = d.properties("SweeperAccessEntry");
    assert_eq!(handler["PrincipalArn"], Deployment::arn("HandlerRole"));
    assert_eq!(handler["KubernetesGroups"], json!(["forewarn-handler"]));
    assert_eq!(sweeper["PrincipalArn"], Deployment::arn("SweeperRole"));
    assert_eq!(sweeper["KubernetesGroups"], json!(["forewarn-sweeper"]));
    let parameters = d.template["Parameters"].as_object().unwrap();
    assert!(
        parameters.keys().all(|p| !p.contains("KubernetesGroup")),
        "{parameters:?}"
    );
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
        assert_eq!(read["RoleName"], "forewarn-member-read");
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
        let central =
            Deployment::new(&[("Clusters", names), ("AutoScalingGroupNamePrefix", "eks-")]);
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
    for names in ["demo", "a,b", "*"] {
        let d = Deployment::new(&[("Clusters", names)]);
        let policy = inline_policy(&d.properties("HandlerRole"), "forewarn-handler");
        assert_deregistration_limited(&policy, names);
    }
}
