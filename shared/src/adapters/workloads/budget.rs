//! Kubernetes objects read into the domain's types, as the audit reads them: a
//! PodDisruptionBudget with its label selector and its numbers ([`budget`]), and workloads'
//! selectors ([`selector`]).

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::adapters::kube::api::ns_name;
use crate::domain::budget::{Budget, IntOrPercent, Requirement, Selector};
use crate::domain::names::UnknownName;

/// An object the audit cannot read: which one, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {message}")]
pub struct WorkloadError {
    /// `poddisruptionbudget/<ns>/<name>`, `deployment/<ns>/<name>`, ...
    pub object: String,
    pub message: String,
}

/// A `metav1.LabelSelector` into the domain's, checking its operators.
pub fn selector(s: &LabelSelector, object: &str) -> Result<Selector, WorkloadError> {
    let mut out = Selector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: Vec::new(),
    };
    for (i, e) in s.match_expressions.iter().flatten().enumerate() {
        let operator = e.operator.parse().map_err(|e: UnknownName| WorkloadError {
            object: object.to_string(),
            message: format!("selector.matchExpressions[{i}]: {e}"),
        })?;
        out.match_expressions.push(Requirement {
            key: e.key.clone(),
            operator,
            values: e.values.clone().unwrap_or_default(),
        });
    }
    Ok(out)
}

fn int_or_percent(
    v: &IntOrString,
    object: &str,
    field: &str,
) -> Result<IntOrPercent, WorkloadError> {
    let err = |message: String| WorkloadError {
        object: object.to_string(),
        message: format!("spec.{field}: {message}"),
    };
    match v {
        IntOrString::Int(n) if *n >= 0 => Ok(IntOrPercent::Int(*n)),
        IntOrString::Int(n) => Err(err(format!("{n} is negative"))),
        IntOrString::String(s) => IntOrPercent::parse(s).map_err(|e| err(e.to_string())),
    }
}

/// A PodDisruptionBudget into the domain's.
pub fn budget(pdb: &PodDisruptionBudget) -> Result<Budget, WorkloadError> {
    let (namespace, name) = ns_name(&pdb.metadata);
    let object = format!("poddisruptionbudget/{namespace}/{name}");
    let spec = pdb.spec.as_ref();
    let selector = spec
        .and_then(|s| s.selector.as_ref())
        .map(|s| selector(s, &object))
        .transpose()?;
    let min_available = spec
        .and_then(|s| s.min_available.as_ref())
        .map(|v| int_or_percent(v, &object, "minAvailable"))
        .transpose()?;
    let max_unavailable = spec
        .and_then(|s| s.max_unavailable.as_ref())
        .map(|v| int_or_percent(v, &object, "maxUnavailable"))
        .transpose()?;
    Ok(Budget {
        namespace,
        name,
        selector,
        min_available,
        max_unavailable,
    })
}
