//! forewarn's library, in four layers (see `docs/architecture.md`):
//!
//! - [`domain`]: the event model and its decoding, the configuration, facts, plans, pool types
//!   and the pool fold, sweep keys and findings, reports. Pure: no I/O crate, no import from
//!   outside `domain/`.
//! - [`ports`]: the traits the interruption path talks through (pool store, instance and node
//!   directories, executor, lifecycle completer, notifier, ...), with their errors; a port only
//!   another feature uses lives with its consumer in `app`.
//! - `adapters`: the implementations — DynamoDB, the embedded store, captured snapshots, EC2,
//!   Auto Scaling, Kubernetes, the webhook — and the one AWS SDK configuration they share.
//! - `app`: the pipeline, the Lambda handler, the sweeper, telemetry, the settings read from
//!   the environment and the one wiring function that builds everything from them.
//!
//! `adapters` and `app` are behind the default feature `adapters`; without it the crate is
//! `domain` and `ports`, which is what the fuzz target (`fuzz/`) builds against.

pub mod domain;
pub mod ports;

#[cfg(feature = "adapters")]
pub mod adapters;
#[cfg(feature = "adapters")]
pub mod app;
