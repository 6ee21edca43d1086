//! One deployment for several clusters: `--cluster` given more than once, `--all-clusters`.
//! Each cluster is a Kubernetes fake of its own, reached through the kubeconfig context named
//! after it. EKS access entries are answered by `forewarn_tests::eks::EksFake`, a loopback
//! server shaped after the EKS API reference (moto 5.2.5 serves no access entries), reached
//! through `AWS_ENDPOINT_URL_EKS`; the stack and the functions are moto's, as in the other
//! deploy tests (moto skips the template's `AWS::EKS::AccessEntry`, which it does not model).

use std::collections::BTreeMap;
use std::path::Path;

use aws_sdk_cloudformation::Client;
use forewarn_tests::eks::EksFake;
use forewarn_tests::moto::{runtime, shared, unique_name};
use kube_fake::KubeFake;
use serde_json::json;

use super::{
    EXPANDER, changed_since, fake, forewarn_with, function, manifest_objects, stack_parameters,
    stdout, succeeded, versions,
};
use crate::support::kubeconfig_of;

fn outputs_of(text: &str, line: &str) -> usize {
    text.matches(line).count()
}

/// A dry run for two clusters, then one for every EKS cluster: each step per cluster, nothing
/// changed anywhere (no stack, no write in either cluster, no access entry).
#[test]
fn a_dry_run_for_several_clusters_says_each_clusters_steps() {
    let server = shared();
    let endpoint = server.endpoint();
    runtime().block_on(async {
        let (a, b) = (unique_name("many-a"), unique_name("many-b"));
        let (fake_a, fake_b) = (fake().await, fake().await);
        let eks = EksFake::at(&[(&a, &fake_a.url()), (&b, &fake_b.url())]).await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = kubeconfig_of(&[(&a, &fake_a.url()), (&b, &fake_b.url())], dir.path());
        let out = forewarn_with(
            &endpoint,
            Some(&eks.url()),
            &kubeconfig,
            &["deploy", "--cluster", &a, "--cluster", &b, "--kube"],
        )
        .await;
        let text = succeeded(&out);
        for line in [
            format!("forewarn deploy: clusters {a}, {b}, stack forewarn-{a}"),
            format!(
                "[2/6] stack forewarn-{a}: create with Clusters={a},{b} FunctionsDeployed=false\n"
            ),
            "--env-file <a file holding SweeperEnvFile>".to_string(),
            format!("cluster {a}: the stack's own (HandlerAccessEntry, SweeperAccessEntry)"),
            format!("cluster {b}: <HandlerRoleArn> in group forewarn-handler: would be created"),
            format!("cluster {b}: <SweeperRoleArn> in group forewarn-sweeper: would be created"),
            format!("cluster {a} (kubeconfig context {a}):"),
            format!("cluster {b} (kubeconfig context {b}):"),
            "dry run: nothing was changed (add --execute to deploy)".to_string(),
        ] {
            assert!(text.contains(&line), "missing {line:?} in:\n{text}");
        }
        // Every object, once per cluster.
        assert_eq!(
            outputs_of(&text, "ClusterRole forewarn: would be created"),
            2,
            "{text}"
        );
        assert_eq!(
            outputs_of(
                &text,
                &format!("ConfigMap kube-system/{EXPANDER}: would be created")
            ),
            2,
            "{text}"
        );
        for f in [&fake_a, &fake_b] {
            assert!(f.writes().is_empty(), "a dry run wrote: {:?}", f.writes());
            assert!(!f.requests().is_empty(), "each cluster is read");
        }
        // Only the endpoints checked: no access entry asked about.
        assert!(eks.only_asked("DescribeCluster"), "{:?}", eks.requests());
        eks.clear_requests();

        // Every EKS cluster of the account and region: ListClusters says which.
        let out = forewarn_with(
            &endpoint,
            Some(&eks.url()),
            &kubeconfig,
            &["deploy", "--all-clusters", "--cluster", &a, "--kube"],
        )
        .await;
        let text = succeeded(&out);
        let (first, second) = if a < b { (&a, &b) } else { (&b, &a) };
        for line in [
            format!("every EKS cluster of the account and region (now {first}, {second})"),
            format!("Clusters={a},*"),
            format!("cluster {b}: <HandlerRoleArn> in group forewarn-handler: would be created"),
            format!("cluster {b} (kubeconfig context {b}):"),
            format!("cluster {a} (kubeconfig context {a}):"),
        ] {
            assert!(text.contains(&line), "missing {line:?} in:\n{text}");
        }
        let operations: Vec<&str> = eks.requests().iter().map(|r| r.operation).collect();
        // The list, then each cluster's endpoint checked against its kubeconfig context.
        assert_eq!(
            operations,
            ["ListClusters", "DescribeCluster", "DescribeCluster"]
        );
        let cfn = Client::new(&server.sdk_config());
        let described = cfn
            .describe_stacks()
            .stack_name(format!("forewarn-{a}"))
            .send()
            .await;
        assert!(described.is_err(), "a dry run created the stack");
    });
}

/// The clusters of the adding test, and where they are.
struct Two<'a> {
    endpoint: &'a str,
    eks: &'a EksFake,
    kubeconfig: &'a Path,
    a: &'a str,
    b: &'a str,
}

impl Two<'_> {
    async fn deploy(&self, args: &[&str]) -> std::process::Output {
        let mut all = vec!["deploy", "--execute", "--no-build", "--kube"];
        all.extend(args);
        forewarn_with(self.endpoint, Some(&self.eks.url()), self.kubeconfig, &all).await
    }
}

/// A deployment for cluster a, then one more `--cluster b`: the rerun changes the stack's
/// Clusters alone, gives both functions the list, makes b's access entries (an entry that
/// existed with another group is updated) and applies the manifests in b, and writes nothing
/// in a. A rerun with a cluster that cannot be reached deploys the others and fails, naming it.
#[test]
fn adding_a_cluster_later_is_one_command() {
    forewarn_tests::moto::lambda_bootstrap("interruption-handler");
    forewarn_tests::moto::lambda_bootstrap("pool-sweeper");
    let server = shared();
    let endpoint = server.endpoint();
    runtime().block_on(async {
        let (a, b) = (unique_name("add-a"), unique_name("add-b"));
        let (fake_a, fake_b) = (fake().await, fake().await);
        let eks = EksFake::at(&[(&a, &fake_a.url()), (&b, &fake_b.url())]).await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = kubeconfig_of(
            &[
                (&a, &fake_a.url()),
                (&b, &fake_b.url()),
                ("gone", "http://127.0.0.1:1"),
            ],
            dir.path(),
        );
        let two = Two {
            endpoint: &endpoint,
            eks: &eks,
            kubeconfig: &kubeconfig,
            a: &a,
            b: &b,
        };
        let cfn = Client::new(&server.sdk_config());
        let stack = format!("forewarn-{a}");
        let text = succeeded(
            &two.deploy(&[
                "--cluster",
                &a,
                "--parameter",
                "FunctionArchitecture=x86_64",
            ])
            .await,
        );
        assert!(
            text.contains(&format!("cluster {a}: the stack's own")),
            "{text}"
        );
        // Only the endpoints checked: no access entry asked about.
        assert!(eks.only_asked("DescribeCluster"), "{:?}", eks.requests());
        assert!(fake_b.requests().is_empty(), "b is not served yet");
        let before = stack_parameters(&cfn, &stack).await;
        assert_eq!(as_list(&before["Clusters"]), a, "{before:?}");
        let outputs = stack_outputs(&cfn, &stack).await;
        // The sweeper's entry in b exists already, with another group.
        let sweeper_role = outputs["SweeperRoleArn"].clone();
        eks.insert_entry(&b, &sweeper_role, &["old-group"]);
        fake_a.clear_requests();
        let a_before = versions(&fake_a);

        let text = succeeded(&two.deploy(&["--cluster", &a, "--cluster", &b]).await);
        let after = stack_parameters(&cfn, &stack).await;
        the_rerun_changed_only_cluster_names(&before, &after, &format!("{a},{b}"));
        the_functions_serve(&endpoint, &outputs, &format!("{a},{b}"));
        the_access_entries_of_b_were_made(&two, &outputs, &text);
        assert_eq!(
            changed_since(&fake_a, &a_before),
            Vec::<String>::new(),
            "a's objects are as they were"
        );
        for (api_version, kind, namespace, name) in manifest_objects() {
            let o = fake_b.get(&api_version, &kind, namespace.as_deref(), &name);
            assert!(o.is_some(), "{kind} {name} is missing in {b}");
        }
        an_unreachable_cluster_fails_after_the_others(&two, &fake_b).await;
    });
}

/// A CommaDelimitedList parameter as CloudFormation describes it (`a,b`); moto 5.2.5 describes
/// it as a Python list (`['a', 'b']`).
fn as_list(value: &str) -> String {
    match value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
        Some(inner) => inner
            .split(',')
            .map(|v| v.trim().trim_matches('\''))
            .collect::<Vec<_>>()
            .join(","),
        None => value.to_string(),
    }
}

/// The member's entries: the member role and its twin, made in the member account (cluster
/// `m`, `member` whole) and nothing of the member's in the own account's cluster `a`.
fn assert_member_entries(eks: &EksFake, (a, m): (&str, &str), member: &str, text: &str) {
    let role = format!("arn:aws:iam::{MEMBER}:role/forewarn-member");
    let read = format!("{role}-read");
    assert_eq!(eks.entry(member, &role).unwrap(), ["forewarn-handler"]);
    assert_eq!(eks.entry(member, &read).unwrap(), ["forewarn-sweeper"]);
    let created: Vec<(String, Option<String>)> = eks
        .requests()
        .into_iter()
        .filter(|r| r.operation == "CreateAccessEntry")
        .map(|r| (r.account, r.cluster))
        .collect();
    assert_eq!(
        created,
        vec![(MEMBER.to_string(), Some(m.to_string())); 2],
        "{:?}",
        eks.requests()
    );
    assert!(
        eks.entry(a, &role).is_none() && eks.entry(m, &role).is_none(),
        "nothing of the member's in this account"
    );
    for line in [
        format!("cluster {member}: {role} in group forewarn-handler: created"),
        format!("cluster {member}: {read} in group forewarn-sweeper: created"),
        format!("cluster {member} (kubeconfig context {member}):"),
    ] {
        assert!(text.contains(&line), "missing {line:?} in:\n{text}");
    }
}

/// The member account's route: a stack in this account made from the central stack's outputs,
/// said by the deploy's `text`; its name.
async fn assert_routed(
    cfn: &Client,
    stack: &str,
    outputs: &BTreeMap<String, String>,
    text: &str,
) -> String {
    let route = format!("{stack}-route-{MEMBER}");
    assert_eq!(
        stack_status(cfn, &route).await.as_deref(),
        Some("CREATE_COMPLETE")
    );
    let params = super::parameters_of(cfn, &route).await;
    assert_eq!(params["MemberAccountId"], MEMBER, "{params:?}");
    for key in ["EventBusName", "QueueArn", "DeadLetterQueueArn"] {
        assert_eq!(params[key], outputs[key], "{key}");
    }
    assert!(
        text.contains(&format!("route of {MEMBER} (stack {route}): created")),
        "{text}"
    );
    route
}

/// The status of `stack`, when it exists.
async fn stack_status(cfn: &Client, stack: &str) -> Option<String> {
    let d = cfn.describe_stacks().stack_name(stack).send().await.ok()?;
    d.stacks()
        .first()?
        .stack_status()
        .map(|s| s.as_str().to_string())
}

async fn stack_outputs(cfn: &Client, stack: &str) -> BTreeMap<String, String> {
    let d = cfn
        .describe_stacks()
        .stack_name(stack)
        .send()
        .await
        .unwrap();
    d.stacks()[0]
        .outputs()
        .iter()
        .map(|o| {
            (
                o.output_key().unwrap().to_string(),
                o.output_value().unwrap().to_string(),
            )
        })
        .collect()
}

fn the_rerun_changed_only_cluster_names(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
    list: &str,
) {
    assert_eq!(as_list(&after["Clusters"]), list, "{after:?}");
    let changed: Vec<&String> = after
        .iter()
        .filter(|(k, v)| before.get(*k).map(|b| as_list(b)) != Some(as_list(v)))
        .map(|(k, _)| k)
        .collect();
    assert_eq!(changed, ["Clusters"], "{before:?}\n{after:?}");
}

/// Both functions get the list through their environment files (a list `--env-var` would cut
/// at its comma), and no single EKS cluster.
fn the_functions_serve(endpoint: &str, outputs: &BTreeMap<String, String>, list: &str) {
    for key in ["HandlerFunctionName", "SweeperFunctionName"] {
        let conf = function(endpoint, &outputs[key]).unwrap();
        let vars = &conf["Environment"]["Variables"];
        assert_eq!(vars["FOREWARN_CLUSTERS"], list, "{conf}");
        assert!(vars.get("FOREWARN_EKS_CLUSTER").is_none(), "{conf}");
        assert_eq!(
            vars["FOREWARN_TABLE"],
            outputs["TableName"].as_str(),
            "{conf}"
        );
    }
}

/// b's entries: the handler's created, the sweeper's (there with another group: 409) updated;
/// nothing asked of a, whose entries are the stack's.
fn the_access_entries_of_b_were_made(
    two: &Two<'_>,
    outputs: &BTreeMap<String, String>,
    text: &str,
) {
    let (eks, a, b) = (two.eks, two.a, two.b);
    let (handler, sweeper) = (&outputs["HandlerRoleArn"], &outputs["SweeperRoleArn"]);
    // The endpoints' checks aside (each cluster's, before anything is applied there).
    let requests: Vec<_> = eks
        .requests()
        .into_iter()
        .filter(|r| r.operation != "DescribeCluster")
        .collect();
    let seen: Vec<(&str, Option<&str>)> = requests
        .iter()
        .map(|r| (r.operation, r.cluster.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("CreateAccessEntry", Some(b)),
            ("CreateAccessEntry", Some(b)),
            ("DescribeAccessEntry", Some(b)),
            ("ListAssociatedAccessPolicies", Some(b)),
            ("UpdateAccessEntry", Some(b)),
        ],
        "{requests:?}"
    );
    assert_eq!(requests[0].path, format!("/clusters/{b}/access-entries"));
    assert_eq!(
        requests[0].body["principalArn"],
        handler.as_str(),
        "{requests:?}"
    );
    assert_eq!(
        requests[0].body["kubernetesGroups"],
        json!(["forewarn-handler"])
    );
    assert_eq!(requests[0].body["type"], "STANDARD");
    assert_eq!(requests[0].body["tags"], json!({"app": "forewarn"}));
    assert_eq!(requests[1].body["principalArn"], sweeper.as_str());
    assert_eq!(
        requests[4].path,
        format!("/clusters/{b}/access-entries/{sweeper}")
    );
    assert_eq!(
        requests[4].body["kubernetesGroups"],
        json!(["forewarn-sweeper"])
    );
    assert_eq!(eks.entry(b, handler).unwrap(), ["forewarn-handler"]);
    assert_eq!(eks.entry(b, sweeper).unwrap(), ["forewarn-sweeper"]);
    assert!(eks.entry(a, handler).is_none());
    for line in [
        format!("cluster {b}: {handler} in group forewarn-handler: created"),
        format!(
            "cluster {b}: {sweeper} in group forewarn-sweeper: existed with old-group: groups \
             updated"
        ),
        format!("cluster {a}: the stack's own"),
        format!("[2/6] stack forewarn-{a}: update with Clusters={a},{b} (kept: "),
        format!("cluster {b} (kubeconfig context {b}):"),
    ] {
        assert!(text.contains(&line), "missing {line:?} in:\n{text}");
    }
}

/// `--cluster gone` (a context whose server does not answer, and no EKS cluster): a and b are
/// deployed (b's drifted ClusterRole put back, b's entries left as they are), then the command
/// fails, naming gone.
async fn an_unreachable_cluster_fails_after_the_others(two: &Two<'_>, fake_b: &KubeFake) {
    let (a, b) = (two.a, two.b);
    let mut role = fake_b
        .get(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            None,
            "forewarn",
        )
        .unwrap();
    role["rules"].as_array_mut().unwrap().truncate(1);
    fake_b.insert(role);
    two.eks.clear_requests();
    let out = two
        .deploy(&["--cluster", a, "--cluster", b, "--cluster", "gone"])
        .await;
    let text = stdout(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}\n{err}");
    for line in [
        "cluster gone: cannot be reached (cluster gone: the cluster does not answer (--kube)",
        "ClusterRole forewarn: updated",
        "exists: unchanged",
        "cluster gone: not applied",
        "deployed, but not in every cluster",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(
        err.contains("not deployed in every cluster: EKS CreateAccessEntry of")
            && err.contains("in cluster gone: ")
            && err.contains("; cluster gone: the cluster does not answer (--kube)"),
        "{err}"
    );
    let role = fake_b
        .get(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            None,
            "forewarn",
        )
        .unwrap();
    assert_eq!(role["rules"].as_array().unwrap().len(), 6, "{role}");
}

/// A member account's cluster of the organization.
const MEMBER: &str = "111111111111";

/// `--cluster ACCOUNT/NAME`: a member account's cluster joins the stack's Clusters and both
/// functions' FOREWARN_CLUSTERS; its access entries are made in that account (the EKS fake
/// tells accounts apart by the caller's key, as moto does), for the member role and its
/// read-only twin, in the handler's and the sweeper's groups; its manifests are applied through
/// its own kubeconfig context, whose server is checked against the member's DescribeCluster.
/// Without an organization, the command refuses before anything changes.
#[test]
fn a_member_accounts_cluster_is_deployed_in_that_account() {
    forewarn_tests::moto::lambda_bootstrap("interruption-handler");
    forewarn_tests::moto::lambda_bootstrap("pool-sweeper");
    let server = shared();
    let endpoint = server.endpoint();
    runtime().block_on(async {
        let (a, m) = (unique_name("org-a"), unique_name("org-m"));
        let member = format!("{MEMBER}/{m}");
        let (fake_a, fake_m) = (fake().await, fake().await);
        let eks = EksFake::at(&[(&a, &fake_a.url())])
            .await
            .in_accounts(&endpoint);
        eks.add(&member, &fake_m.url());
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig =
            kubeconfig_of(&[(&a, &fake_a.url()), (&member, &fake_m.url())], dir.path());
        let deploy = |extra: &'static [&'static str]| {
            let mut args = vec![
                "deploy",
                "--execute",
                "--no-build",
                "--kube",
                "--cluster",
                &a,
            ];
            args.extend(["--cluster", &member]);
            args.extend(["--parameter", "FunctionArchitecture=x86_64"]);
            args.extend(extra);
            let (endpoint, eks, kubeconfig) = (&endpoint, eks.url(), &kubeconfig);
            async move { forewarn_with(endpoint, Some(&eks), kubeconfig, &args).await }
        };

        let out = deploy(&[]).await;
        assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("--cluster {member}: a member account's cluster"))
                && err.contains("OrganizationId"),
            "{err}"
        );
        assert!(eks.writes().is_empty() && fake_m.writes().is_empty());

        let text = succeeded(&deploy(&["--parameter", "OrganizationId=o-a1b2c3d4e5"]).await);
        let cfn = Client::new(&server.sdk_config());
        let stack = format!("forewarn-{a}");
        let parameters = stack_parameters(&cfn, &stack).await;
        assert_eq!(
            as_list(&parameters["Clusters"]),
            format!("{a},{member}"),
            "{parameters:?}"
        );
        let outputs = stack_outputs(&cfn, &stack).await;
        for key in ["HandlerFunctionName", "SweeperFunctionName"] {
            let conf = function(&endpoint, &outputs[key]).unwrap();
            let vars = &conf["Environment"]["Variables"];
            assert_eq!(vars["FOREWARN_CLUSTERS"], format!("{a},{member}"), "{conf}");
        }
        assert_member_entries(&eks, (&a, &m), &member, &text);
        for (api_version, kind, namespace, name) in manifest_objects() {
            let o = fake_m.get(&api_version, &kind, namespace.as_deref(), &name);
            assert!(o.is_some(), "{kind} {name} is missing in {member}");
        }
        // Its endpoint was checked in its own account.
        assert!(
            eks.requests()
                .iter()
                .any(|r| r.operation == "DescribeCluster" && r.account == MEMBER),
            "{:?}",
            eks.requests()
        );
        let route = assert_routed(&cfn, &stack, &outputs, &text).await;
        let again = succeeded(&deploy(&["--parameter", "OrganizationId=o-a1b2c3d4e5"]).await);
        assert!(
            again.contains(&format!("route of {MEMBER} (stack {route}): unchanged")),
            "{again}"
        );
        // The member left out: no longer served, its route goes.
        let args = [
            "deploy",
            "--execute",
            "--no-build",
            "--cluster",
            &a,
            "--parameter",
            "FunctionArchitecture=x86_64",
        ];
        let left = succeeded(&forewarn_with(&endpoint, Some(&eks.url()), &kubeconfig, &args).await);
        assert!(
            left.contains(&format!(
                "route of {MEMBER}: no longer served, stack {route} being deleted"
            )),
            "{left}"
        );
        assert!(
            stack_status(&cfn, &route)
                .await
                .is_none_or(|s| s.starts_with("DELETE")),
            "{route}"
        );
    });
}

/// Issue 57, item 5: `forewarn check --kube --cluster ACCOUNT/NAME` checks the member's own
/// cluster, through `--member-admin-role` in that account. A kubeconfig context of that name
/// that points at this account's cluster of the same name (which would be checked and labelled
/// as the member's) is refused, naming why, and nothing is sent to either cluster; the
/// member's own context is checked once EKS in the member account says its endpoint is the
/// context's, and only the member's cluster is asked.
#[test]
fn a_member_cluster_is_checked_in_its_own_account_or_refused() {
    use forewarn::domain::fixtures::{node_object, pod_object};
    let server = shared();
    let endpoint = server.endpoint();
    runtime().block_on(async {
        let name = unique_name("same");
        let member = format!("{MEMBER}/{name}");
        let ours = forewarn_tests::cluster::deployed().await;
        let theirs = forewarn_tests::cluster::deployed().await;
        for f in [&ours, &theirs] {
            f.insert(
                node_object("ip-10-0-1-11.ec2.internal", "i-0a1b2c3d4e5f60001")
                    .kubelet()
                    .ready()
                    .build(),
            );
            f.insert(pod_object(
                "shop",
                "web-1",
                "ip-10-0-1-11.ec2.internal",
                "web",
                "ReplicaSet",
            ));
        }
        let eks = EksFake::at(&[(&name, &ours.url())])
            .await
            .in_accounts(&endpoint);
        eks.add(&member, &theirs.url());
        let check = |kubeconfig: std::path::PathBuf| {
            let (endpoint, eks, member) = (endpoint.clone(), eks.url(), member.clone());
            async move {
                forewarn_with(
                    &endpoint,
                    Some(&eks),
                    &kubeconfig,
                    &["check", "--kube", "--cluster", &member],
                )
                .await
            }
        };

        let dir = tempfile::tempdir().unwrap();
        let forged = kubeconfig_of(&[(&member, &ours.url())], dir.path());
        ours.clear_requests();
        let out = check(forged).await;
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(1), "{}{err}", stdout(&out));
        assert!(
            err.contains(&format!("cluster {member}: not checked"))
                && err.contains(&format!("not the EKS cluster {name} of account {MEMBER}")),
            "{err}"
        );
        assert!(ours.requests().is_empty(), "{:?}", ours.requests());
        assert!(theirs.requests().is_empty());

        let dir = tempfile::tempdir().unwrap();
        let right = kubeconfig_of(&[(&member, &theirs.url())], dir.path());
        let out = check(right).await;
        let text = stdout(&out);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains(&format!("cluster {member}:")) && text.contains("ok      cordon"),
            "{text}"
        );
        assert!(
            theirs
                .requests()
                .iter()
                .any(|r| r.query.contains("dryRun=All")),
            "the member's cluster was asked"
        );
        assert!(ours.requests().is_empty(), "{:?}", ours.requests());
        // The endpoint was confirmed in the member account.
        assert!(
            eks.requests()
                .iter()
                .any(|r| r.operation == "DescribeCluster" && r.account == MEMBER),
            "{:?}",
            eks.requests()
        );
    });
}
