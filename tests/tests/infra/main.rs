//! The templates in infra/: cfn-lint finds nothing (no error, no warning), the stack's pool
//! table is the pool-table template's, so the two cannot drift, and the stack's defaults and
//! policies do what docs/deploy.md and docs/security.md say of them: the template is resolved for
//! a set of parameters (`Deployment`, intrinsic functions as CloudFormation resolves them) and
//! its queue policies are evaluated as IAM evaluates them (`Send::verdict`: statements, ANDed
//! conditions, ORed values, absent keys) for every kind of sender; the stack with every option
//! set is deployed to moto. (moto's CloudFormation does not apply queue policies, so they are
//! checked on the resolved template.)
//!
//! The tests by subject, one module each (what they share in `support`):
//! - `templates`: cfn-lint, the templates' `Rules` (rule functions only), the stack's pool table
//!   against its own template, the dashboard's searches, the unreachable-account alarm, the
//!   customer managed key (`KmsKeyArn`).
//! - `queues`: the queue policies evaluated as IAM evaluates them (`Send::verdict`), the member
//!   stack's dead-letter queue's among them, and the queue's `MaxReceiveCount`.
//! - `roles`: the functions' roles: lifecycle actions, Kubernetes groups, target-group
//!   deregistration, and the member role a central deployment assumes.
//! - `environment`: what the stack's parameters put in the functions' environment: hook names,
//!   the policy allowance, the clusters served (and member accounts' clusters).
//! - `moto`: the stacks deployed to moto's CloudFormation: every option set, an organization's
//!   central and member stacks, a member account's route.
//! - `admission`: the admission policies of `infra/k8s/` (placeholders, node writes), their CEL
//!   evaluated.
//! - `pool_table`: the continuation key's secret: only forewarn's roles reach the key.
//! - `organization`: an organization: forewarn's own bus and the member stack's forwarding rules,
//!   its dead-letter queue and alarms, its parameters and its region.

mod admission;
mod environment;
mod moto;
mod organization;
mod pool_table;
mod queues;
mod roles;
mod support;
mod templates;
