//! The EKS side of `forewarn deploy` with several clusters: each cluster's access entries for
//! the functions' roles, which put each role in the Kubernetes group that `infra/k8s/rbac.yaml`
//! binds. The stack makes the
//! entries of its own cluster, the first of its `Clusters` (`AWS::EKS::AccessEntry`, when
//! `CreateAccessEntry` is true); these are the other clusters', made as the stack's are: type
//! `STANDARD`, the role's group, the tag `app=forewarn`, no access policy.

use anyhow::anyhow;
use aws_sdk_eks::Client;
use aws_sdk_eks::error::ProvideErrorMetadata;
use forewarn::adapters::aws::aws_error_text;

/// The access entry of `principal` in `cluster`, in `group`: created when missing; when it
/// exists (`ResourceInUseException`), read, and its groups replaced when they are not `group`
/// alone — unless an access policy is associated with it, which is refused (named). With
/// `dry_run`, only read (`DescribeAccessEntry`, `ListAssociatedAccessPolicies`). Answers what
/// was (or would be) done; an error names the EKS call, the principal and the cluster.
pub async fn ensure(
    eks: &Client,
    cluster: &str,
    principal: &str,
    group: &str,
    dry_run: bool,
) -> anyhow::Result<String> {
    let failed = |operation: &str, text: String| {
        anyhow!("EKS {operation} of {principal} in cluster {cluster}: {text}")
    };
    if !dry_run {
        let created = eks
            .create_access_entry()
            .cluster_name(cluster)
            .principal_arn(principal)
            .kubernetes_groups(group)
            .r#type("STANDARD")
            .tags("app", "forewarn")
            .send()
            .await;
        match created {
            Ok(_) => return Ok("created".into()),
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
            return Ok("would be created".into());
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
                 forewarn's group {group}; disassociate them (aws eks disassociate-access-policy) \
                 and deploy again",
                policies.join(", ")
            ),
        ));
    }
    let was = match existing.as_slice() {
        [] => "no group".to_string(),
        [one] if one == group => return Ok("exists: unchanged".into()),
        groups => groups.join(", "),
    };
    if dry_run {
        return Ok(format!("exists with {was}: its groups would be updated"));
    }
    eks.update_access_entry()
        .cluster_name(cluster)
        .principal_arn(principal)
        .kubernetes_groups(group)
        .send()
        .await
        .map_err(|e| failed("UpdateAccessEntry", aws_error_text(&e)))?;
    Ok(format!("existed with {was}: groups updated"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

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

    /// An existing entry in the group is left as it is, one in other groups (or none) updated,
    /// each said; one with an access policy associated is refused, the policy named.
    #[tokio::test]
    async fn an_entry_is_updated_to_the_group_or_refused_with_an_access_policy() {
        let fake = forewarn_tests::eks::EksFake::start(&["blue"]).await;
        let role = "arn:aws:iam::123456789012:role/forewarn-blue-handler";
        let group = "forewarn-handler";
        let eks = client_of(&fake);
        let ensure = |dry_run| ensure(&eks, "blue", role, group, dry_run);
        assert_eq!(ensure(true).await.unwrap(), "would be created");
        fake.insert_entry("blue", role, &[]);
        assert_eq!(
            ensure(true).await.unwrap(),
            "exists with no group: its groups would be updated"
        );
        fake.insert_entry("blue", role, &["old", group]);
        assert_eq!(
            ensure(false).await.unwrap(),
            format!("existed with old, {group}: groups updated")
        );
        assert_eq!(fake.entry("blue", role).unwrap(), [group]);
        assert_eq!(ensure(false).await.unwrap(), "exists: unchanged");
        let admin = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy";
        fake.associate("blue", role, admin);
        for dry_run in [false, true] {
            let e = ensure(dry_run).await.unwrap_err();
            assert!(e.to_string().contains(admin), "{e}");
        }
    }
}
