//! The spot-readiness audit: will an interruption hurt?
//!
//! A small model of the cluster's workloads ([`ClusterView`]: workloads and their pods, the
//! PodDisruptionBudgets, the nodes' spot-ness and pools, the priority classes), the rules that
//! find what would hurt when a spot node goes ([`audit`]), the summary, and the budgets to add
//! ([`suggested_budgets`], rendered as YAML by [`budgets_yaml`]). Pure: the adapters build the
//! view from the Kubernetes API or from `kubectl` captures.
//!
//! Every GPU workload ([`GPU_RESOURCES`]), on spot capacity or not, is also checked for a
//! Capacity Block's end: whether its pods leave the block's instances in the ten minutes
//! between the expiration warning and their termination ([`BLOCK_WINDOW`]).
//!
//! One file a part: the model ([`model`]), the findings and their summary ([`findings`]), the
//! rules ([`rules`]), the Capacity Block check ([`blocks`]) and the suggested budgets with
//! their YAML ([`budgets`]).

mod blocks;
mod budgets;
mod findings;
mod model;
mod rules;
#[cfg(test)]
mod tests;

pub use blocks::BLOCK_WINDOW;
pub use budgets::{
    SuggestedBudget, budget_yaml, budgets_yaml, suggested_budgets, suggested_max_unavailable,
};
pub use findings::{AuditReport, Code, Counts, Finding, Level, Summary, hot_pools};
pub use model::{
    AuditContainer, AuditNode, AuditPod, CRITICAL_PRIORITY, ClusterView, DEFAULT_GRACE_SECONDS,
    GPU_RESOURCES, SPOT_LABELS, Workload, WorkloadKind,
};
pub use rules::audit;
