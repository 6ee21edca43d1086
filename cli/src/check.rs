//! `forewarn check --kube`: the preflight. In each cluster, as each of forewarn's groups
//! (impersonated), every kind of write forewarn makes is sent as a server-side dry run, and the
//! API server's whole chain (RBAC, the admission plugins, Pod Security, the admission policies
//! and webhooks) says whether it would admit it (see `forewarn::adapters::preflight::prove`).

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;
use forewarn::adapters::kube::{
    self, ClusterAccess, ClusterClient, EksAccess, Impersonation, connect_eks,
};
use forewarn::adapters::preflight::{PreflightScope, prove};
use forewarn::app::preflight::{Role, blocking};
use forewarn::app::settings::{ClusterSelection, Settings};
use forewarn::domain::clusters::ClusterId;
use forewarn::domain::preflight::{Proof, Verdict};
use forewarn::ports::Clock;
use serde_json::json;

use crate::TextOrJson;

/// The user the dry runs are sent as (with the group impersonated).
pub const CHECK_USER: &str = "forewarn-check";

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Check the live clusters (the checks are the API server's own: there is no offline mode).
    #[arg(long, required = true)]
    kube: bool,
    /// A cluster to check (repeatable): the kubeconfig context of that name when there is one,
    /// else the EKS cluster of that name; a member account's cluster (ACCOUNT/NAME) through
    /// --member-admin-role there, a kubeconfig context of it only once EKS in that account says
    /// its endpoint is the context's [default: the served clusters, else the
    /// kubeconfig's current context]
    #[arg(long = "cluster", value_name = "CLUSTER", value_parser = crate::parse_cluster)]
    clusters: Vec<ClusterId>,
    /// The role assumed in a member account (--cluster ACCOUNT/NAME) to reach its cluster: an
    /// administrator's role there, as `forewarn deploy` assumes
    #[arg(
        long,
        value_name = "NAME",
        default_value = "OrganizationAccountAccessRole"
    )]
    member_admin_role: String,
    /// Output: one line per write and group, or one JSON object per line.
    #[arg(long, value_enum, default_value = "text")]
    output: TextOrJson,
}

/// Every write of both functions' groups (fixed: the access entries put their roles in them),
/// proved in the cluster `access` reaches (an EKS cluster of a member account through
/// `member`, that account's configuration), each group impersonated (user [`CHECK_USER`]).
pub async fn prove_cluster(
    settings: &Settings,
    (access, member): (&ClusterAccess, Option<&aws_config::SdkConfig>),
    clock: Arc<dyn Clock>,
) -> anyhow::Result<Vec<Proof>> {
    let mut proofs = Vec::new();
    for (f, role) in crate::deploy::FUNCTIONS
        .iter()
        .zip([Role::Handler, Role::Sweeper])
    {
        let group = f.group;
        let identity = Impersonation {
            user: CHECK_USER.to_string(),
            groups: vec![group.to_string()],
        };
        let clients = connect(settings, (access, member), Some(&identity)).await?;
        let clients = clients.with_clock(clock.clone());
        let scope = PreflightScope {
            group,
            capabilities: role.capabilities(),
            reporting_instance: CHECK_USER,
        };
        proofs.extend(prove(&clients, &settings.config, &scope).await);
    }
    Ok(proofs)
}

/// A client of the cluster `access` reaches (an EKS cluster of a member account through
/// `member`, that account's configuration), as `identity` when given.
pub async fn connect(
    settings: &Settings,
    (access, member): (&ClusterAccess, Option<&aws_config::SdkConfig>),
    identity: Option<&Impersonation>,
) -> anyhow::Result<ClusterClient> {
    Ok(match (access, member) {
        (ClusterAccess::Eks(eks), Some(member)) => connect_eks(eks, member, identity).await?,
        _ => kube::connect(access, settings.aws, identity).await?,
    })
}

/// The clusters to check, with how each is reached.
fn clusters(
    args: &CheckArgs,
    settings: &Settings,
) -> anyhow::Result<Vec<(ClusterId, ClusterAccess)>> {
    let ids: Vec<ClusterId> = if !args.clusters.is_empty() {
        args.clusters.clone()
    } else {
        match &settings.clusters {
            ClusterSelection::Named(ids) => ids.clone(),
            ClusterSelection::Unnamed => {
                let unnamed = ClusterId::at(&Default::default(), "-");
                return Ok(vec![(unnamed, settings.cluster_access.clone())]);
            }
            ClusterSelection::Every { .. } => bail!(
                "the served clusters are every cluster of a place (`*`): say which to check \
                 with --cluster CLUSTER (repeatable)"
            ),
        }
    };
    Ok(ids
        .iter()
        .map(|id| (id.clone(), crate::access(settings, id)))
        .collect())
}

/// How a member account's cluster `id` is reached: its EKS cluster through `member` (the
/// account's admin role), or a kubeconfig context once EKS in that account says its endpoint
/// is the context's; otherwise refused, with why (a context of that name may be another
/// account's cluster of the same name, which would be checked and labelled as the member's).
/// Not a member account's (no `member`): `access` as it is.
async fn member_access(
    id: &ClusterId,
    access: ClusterAccess,
    member: Option<&aws_config::SdkConfig>,
) -> anyhow::Result<ClusterAccess> {
    let Some(member) = member else {
        return Ok(access);
    };
    let eks = aws_sdk_eks::Client::new(member);
    match access {
        ClusterAccess::Eks(e) => Ok(ClusterAccess::Eks(EksAccess {
            region: id.place.region.clone().or(e.region),
            ..e
        })),
        other => {
            crate::deploy::same_endpoint(&eks, &id.name, &other)
                .await
                .with_context(|| {
                    format!(
                        "not the EKS cluster {} of account {} (its kubeconfig context is \
                         another's)",
                        id.name,
                        id.place.account.as_deref().unwrap_or_default()
                    )
                })?;
            Ok(other)
        }
    }
}

/// Lines for a person: one per write and group, marked `ok`, `REFUSED` or `-`.
pub fn lines(proofs: &[Proof]) -> Vec<String> {
    proofs
        .iter()
        .map(|p| {
            let mark = match p.verdict {
                Verdict::Admitted(_) => "ok      ",
                Verdict::Refused { .. } => "REFUSED ",
                Verdict::NotChecked(_) => "-       ",
            };
            format!("{mark}{p}")
        })
        .collect()
}

/// Why nothing of `proofs` was checked, when nothing was (every write not checked): a run
/// that proved nothing must not pass.
pub fn checked_nothing(proofs: &[Proof]) -> Option<String> {
    let mut why: Vec<&str> = Vec::new();
    for p in proofs {
        let Verdict::NotChecked(reason) = &p.verdict else {
            return None;
        };
        if !why.contains(&reason.as_str()) {
            why.push(reason);
        }
    }
    Some(why.join("; "))
}

/// Proves every write in each cluster. Exit code: 0 when every write the configuration uses is
/// admitted (or could not be checked, some other write being proved), 2 when one is refused
/// (a read it needs refused too), 1 for errors (a cluster not reached, or one where nothing
/// could be checked).
pub async fn run(
    args: CheckArgs,
    settings: Settings,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<ExitCode> {
    let mut refused = 0;
    let mut failed = 0;
    let sdk = forewarn::adapters::aws::load(settings.aws).await;
    for (id, access) in clusters(&args, &settings)? {
        let name = id.to_string();
        let member = match &id.place.account {
            Some(account) if settings.accounts.own.as_ref() != Some(account) => {
                Some(crate::deploy::member_config(&sdk, account, &args.member_admin_role).await)
            }
            _ => None,
        };
        let proved = async {
            let access = member_access(&id, access, member.as_ref()).await?;
            prove_cluster(&settings, (&access, member.as_ref()), clock.clone()).await
        };
        let proofs = match proved.await {
            Ok(proofs) => proofs,
            Err(e) => {
                eprintln!("forewarn: cluster {name}: not checked: {e:#}");
                failed += 1;
                continue;
            }
        };
        let blocked = blocking(&proofs, &settings.config, settings.priorities.enabled);
        refused += blocked.len();
        let nothing = checked_nothing(&proofs);
        if let Some(why) = &nothing {
            eprintln!(
                "forewarn: cluster {name}: nothing could be checked ({why}): forewarn's writes \
                 there are unproved"
            );
            failed += 1;
        }
        match args.output {
            TextOrJson::Text => {
                println!("cluster {name}:");
                for line in lines(&proofs) {
                    println!("  {line}");
                }
                if !blocked.is_empty() {
                    println!(
                        "  {} write(s) the configuration uses would be refused: forewarn would \
                         fail there during an interruption (docs/troubleshooting.md)",
                        blocked.len()
                    );
                }
            }
            TextOrJson::Json => {
                for p in &proofs {
                    let (by, message) = match &p.verdict {
                        Verdict::Refused { by, message } => (Some(by.to_string()), Some(message)),
                        _ => (None, None),
                    };
                    println!(
                        "{}",
                        json!({"cluster": name, "capability": p.capability.as_str(),
                               "group": p.group, "verdict": p.verdict.word(),
                               "refused_by": by, "message": message,
                               "detail": p.verdict.to_string()})
                    );
                }
            }
        }
    }
    Ok(if failed > 0 {
        ExitCode::FAILURE
    } else if refused > 0 {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}
