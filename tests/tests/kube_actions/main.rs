//! Cluster actions through the Kubernetes API: the real `kube` client of forewarn's adapter
//! (`forewarn::adapters::kube`) against the HTTP fake of the API server (`kube-fake`).
//!
//! Plans are made by the decision core from node facts the adapter's node directory read from
//! the fake, then carried out by the adapter's executor. Every test ends by checking the request
//! log: no answer in the 4xx range but the ones the adapter expects (404, 409, 429), patches as
//! `application/merge-patch+json`, creates as `application/json`.
//!
//! The tests by feature, one module each (the shared world and helpers in `support`):
//! - `cordon`: cordon, taint and drain of a plain node; conflicts, a node gone or control-plane,
//!   a dry run, a failing API.
//! - `drain`: drains: grace periods, disruption budgets, passes that do not wait, critical pods
//!   last, refused and rate-limited evictions, deadlines.
//! - `surge`: surge: placeholders first, evictions when there is room.
//! - `pod_events`: the Event on each pod a drain evicts, and what is given up.
//! - `admission`: the admission policies of `infra/k8s/` (placeholders, node writes) enforced.
//! - `delete`: deletes: a Karpenter NodeClaim, a Cluster API Machine, a plain Node.
//! - `lifecycle`: Auto Scaling lifecycle actions, termination and launch hooks.
//! - `continuations`: drains carried on in queued passes (SQS continuations).
//! - `pipeline`: through the pipeline and the handler (webhook, metrics, batches).
//! - `verification`: every pass verifies live what it acts on.
//! - `cleanup`: what is undone later: the way back of a cordon-for, leftover placeholders.
//! - `policy`: the policy ConfigMap.
//! - `rbac`: RBAC grants exactly what the adapter uses.
//! - `clients`: the adapter's clients: the node directory, EKS IAM tokens.
//! - `fleet`: one deployment serving several clusters, each instance in its own.
//! - `flow_control`: forewarn's own priority level (API Priority and Fairness) under other
//!   clients' load.
//! - `nth_taints`: NTH's taint keys (`FOREWARN_TAINT_KEYS=nth`): cordon, drain and way back.

mod admission;
mod cleanup;
mod clients;
mod continuations;
mod cordon;
mod delete;
mod drain;
mod fleet;
mod flow_control;
mod lifecycle;
mod nth_taints;
mod pipeline;
mod pod_events;
mod policy;
mod preflight;
mod rbac;
mod support;
mod surge;
mod traffic;
mod verification;
