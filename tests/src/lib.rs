//! forewarn's test harness: moto server, the pool store contract, and the SQS poller that plays
//! the event source mapping, and a small EKS for its access entries (`eks`). The Kubernetes API
//! fake is its own crate, `kube-fake`.

pub mod cluster;
pub mod contract;
pub mod ec2;
pub mod eks;
pub mod elb;
pub mod moto;
pub mod proxy;
pub mod sqs;
