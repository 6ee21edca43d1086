//! The EKS side of `forewarn deploy` with several clusters: the clusters of `--all-clusters`
//! (EKS `ListClusters`), and each cluster's access entries for the functions' roles, which put
//! each role in the Kubernetes group that `infra/k8s/rbac.yaml` binds. The stack makes the
//! entries of its own cluster, the first of its `Clusters` (`AWS::EKS::AccessEntry`, when
//! `CreateAccessEntry` is true); these are the other clusters', made as the stack's are: type
//! `STANDARD`, the role's group, the tag `app=forewarn`, no access policy.

use aws_sdk_eks::Client;
use aws_sdk_eks::error::ProvideErrorMetadata;
use forewarn::adapters::aws::aws_error_text;

/// What was done with one access entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Created,
    /// It existed with these groups.
    Unchanged,
    /// It existed with other groups (named), now replaced by the deployment's.
    GroupsUpdated(Vec<String>),
    WouldCreate,
    WouldUpdate(Vec<String>),
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let was = |groups: &[String]| match groups {
            [] => "no group".to_string(),
            _ => groups.join(", "),
        };
        match self {
            Entry::Created => f.write_str("created"),
            Entry::Unchanged => f.write_str("exists: unchanged"),
            Entry::GroupsUpdated(old) => write!(f, "existed with {}: groups updated", was(old)),
            Entry::WouldCreate => f.write_str("would be created"),
            Entry::WouldUpdate(old) => {
                write!(f, "exists with {}: its groups would be updated", was(old))
            }
        }
    }
}

/// An EKS call about an access entry that failed.
#[derive(Debug, thiserror::Error)]
#[error("EKS {operation} of {principal} in cluster {cluster}: {text}")]
pub struct AccessError {
    pub operation: &'static str,
    pub cluster: String,
    pub principal: String,
    pub text: String,
}

/// The access entry of `principal` in `cluster`, with `groups`: created when missing; when it
/// exists (`ResourceInUseException`), read, and its groups updated when they differ — unless an
/// access policy is associated with it, which is refused (named). With `dry_run`, only read
/// (`DescribeAccessEntry`, `ListAssociatedAccessPolicies`).
pub async fn ensure(
    eks: &Client,
    cluster: &str,
    principal: &str,
    groups: &[String],
    dry_run: bool,
) -> Result<Entry, AccessError> {
    let failed = |operation, text| AccessError {
        operation,
        cluster: cluster.to_string(),
        principal: principal.to_string(),
        text,
    };
    if !dry_run {
        let created = eks
            .create_access_entry()
            .cluster_name(cluster)
            .principal_arn(principal)
            .set_kubernetes_groups(Some(groups.to_vec()))
            .r#type("STANDARD")
            .tags("app", "forewarn")
            .send()
            .await;
        match created {
            Ok(_) => return Ok(Entry::Created),
            Err(e) if e.code() == Some("ResourceInUseException") => {}
            Err(e) => return Err(failed("CreateAccessEntry", aws_error_text(&e))),
        }
    }
    let described = eks
        .describe_access_entry()
        .cluster_name(cluster)
        .principal_arn(principal)
        .send()
        .await;
    let existing = match described {
        Ok(out) => out
            .access_entry()
            .map(|e| e.kubernetes_groups().to_vec())
            .unwrap_or_default(),
        Err(e) if dry_run && e.code() == Some("ResourceNotFoundException") => {
            return Ok(Entry::WouldCreate);
        }
        Err(e) => return Err(failed("DescribeAccessEntry", aws_error_text(&e))),
    };
    // An access policy on the entry (AmazonEKSClusterAdminPolicy, say) grants the role more
    // than forewarn's groups: refused, so that the deployment never runs with it.
    let listed = eks
        .list_associated_access_policies()
        .cluster_name(cluster)
        .principal_arn(principal)
        .send()
        .await
        .map_err(|e| failed("ListAssociatedAccessPolicies", aws_error_text(&e)))?;
    let policies: Vec<&str> = listed
        .associated_access_policies()
        .iter()
        .filter_map(|p| p.policy_arn())
        .collect();
    if !policies.is_empty() {
        return Err(failed(
            "ListAssociatedAccessPolicies",
            format!(
                "the entry has access policies associated ({}): they grant the role more than \
                 forewarn's group {}; disassociate them (aws eks disassociate-access-policy) and \
                 deploy again",
                policies.join(", "),
                groups.join(", ")
            ),
        ));
    }
    if same_groups(&existing, groups) {
        return Ok(Entry::Unchanged);
    }
    if dry_run {
        return Ok(Entry::WouldUpdate(existing));
    }
    eks.update_access_entry()
        .cluster_name(cluster)
        .principal_arn(principal)
        .set_kubernetes_groups(Some(groups.to_vec()))
        .send()
        .await
        .map_err(|e| failed("UpdateAccessEntry", aws_error_text(&e)))?;
    Ok(Entry::GroupsUpdated(existing))
}

fn same_groups(a: &[String], b: &[String]) -> bool {
    let set = |v: &[String]| v.iter().cloned().collect::<std::collections::BTreeSet<_>>();
    set(a) == set(b)
}

/// Every EKS cluster of the account and region (`ListClusters`, every page), sorted.
pub async fn all_clusters(sdk: &aws_config::SdkConfig) -> anyhow::Result<Vec<String>> {
    let mut names = forewarn::adapters::kube::EksClusters::of(sdk)
        .await
        .map_err(|e| anyhow::anyhow!("listing the EKS clusters (--all-clusters): {e}"))?;
    names.sort();
    Ok(names)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn groups_compare_as_sets_and_outcomes_say_what_was_there() {
        let s = |v: &[&str]| v.iter().map(|g| g.to_string()).collect::<Vec<_>>();
        assert!(same_groups(&s(&["b", "a"]), &s(&["a", "b"])));
        assert!(!same_groups(&s(&["a"]), &s(&["a", "b"])));
        assert!(!same_groups(&[], &s(&["a"])));
        assert_eq!(
            Entry::GroupsUpdated(s(&["old"])).to_string(),
            "existed with old: groups updated"
        );
        assert_eq!(
            Entry::WouldUpdate(vec![]).to_string(),
            "exists with no group: its groups would be updated"
        );
    }

    /// An EKS client of the tests' EKS stand-in.
    pub(crate) fn client_of(fake: &forewarn_tests::eks::EksFake) -> Client {
        let config = aws_sdk_eks::Config::builder()
            .behavior_version(aws_sdk_eks::config::BehaviorVersion::latest())
            .region(aws_sdk_eks::config::Region::new("us-east-1"))
            .endpoint_url(fake.url())
            .credentials_provider(aws_sdk_eks::config::Credentials::new(
                "testing", "testing", None, None, "test",
            ))
            .build();
        Client::from_conf(config)
    }

    /// An existing entry with an access policy associated is refused, the policy named; one
    /// without is left as it is.
    #[tokio::test]
    async fn an_entry_with_an_access_policy_is_refused() {
        let fake = forewarn_tests::eks::EksFake::start(&["blue"]).await;
        let role = "arn:aws:iam::123456789012:role/forewarn-blue-handler";
        let groups = vec!["forewarn-handler".to_string()];
        fake.insert_entry("blue", role, &["forewarn-handler"]);
        let eks = client_of(&fake);
        assert_eq!(
            ensure(&eks, "blue", role, &groups, false).await.unwrap(),
            Entry::Unchanged
        );
        let admin = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy";
        fake.associate("blue", role, admin);
        for dry_run in [false, true] {
            let e = ensure(&eks, "blue", role, &groups, dry_run)
                .await
                .unwrap_err();
            assert!(e.to_string().contains(admin), "{e}");
        }
    }
}
