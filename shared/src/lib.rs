//! forewarn's library: the event model, the pure decision core, and the adapters the Lambda
//! functions and the `forewarn` command are wired from.
//!
//! - [`event`]: typed EventBridge events from every envelope they arrive in;
//! - [`facts`], [`config`], [`plan`]: what is known, what is configured, what to do (pure);
//! - [`pool`], [`ports`]: the ports (pool store, instance and node directories);
//! - [`snapshot`]: captured state (describe-instances, kubectl JSON) for offline planning;
//! - [`pipeline`]: a batch of records through lookups, plans, actions and the pool store.
//!
//! The AWS SDK and Kubernetes adapters (`ec2`, `kube`, `lambda`, `wiring`, `store::dynamo`, the
//! `Sweeper`) are behind the default feature `adapters`; without it the crate is the pure core
//! that the fuzz target (`fuzz/`) builds against.

pub mod config;
#[cfg(feature = "adapters")]
pub mod ec2;
pub mod event;
pub mod facts;
#[cfg(feature = "adapters")]
pub mod kube;
#[cfg(feature = "adapters")]
pub mod lambda;
pub mod pipeline;
pub mod plan;
pub mod pool;
pub mod ports;
pub mod snapshot;
pub mod store;
pub mod sweep;
pub mod telemetry;
pub mod webhook;
#[cfg(feature = "adapters")]
pub mod wiring;
