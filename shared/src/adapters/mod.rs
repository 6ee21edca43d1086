//! The implementations of the [ports](crate::ports): AWS through the official SDKs, the
//! Kubernetes API through kube, the embedded store, captured state, the webhook.

pub mod accounts;
pub mod autoscaling;
pub mod aws;
pub mod backoff;
pub mod clock;
pub mod dynamo;
pub mod ec2;
pub mod elb;
pub mod embedded;
pub mod expander;
mod key_cache;
pub mod kube;
pub mod leaving;
pub mod preflight;
pub mod read_only;
pub mod snapshot;
pub mod sqs;
pub mod upkeep;
pub mod webhook;
pub mod workloads;
