//! The SDK floor of the cold-start benchmark (see docs/benchmarks.md): a `lambda_runtime`
//! function built like the interruption handler (same runtime, same SDK and kube crates and
//! features, same release profile) that only sets up the clients the handler talks through —
//! the AWS configuration, EC2, DynamoDB, SQS, Elastic Load Balancing, Auto Scaling and Secrets
//! Manager clients, and a Kubernetes client from the environment's kubeconfig — and answers
//! `{}`. What the handler's start takes beyond this is forewarn's own.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let clients = (
        aws_sdk_ec2::Client::new(&sdk),
        aws_sdk_dynamodb::Client::new(&sdk),
        aws_sdk_sqs::Client::new(&sdk),
        aws_sdk_elasticloadbalancingv2::Client::new(&sdk),
        aws_sdk_autoscaling::Client::new(&sdk),
        aws_sdk_secretsmanager::Client::new(&sdk),
        kube::Client::try_default().await?,
    );
    let clients = &clients;
    lambda_runtime::run(service_fn(|_event: LambdaEvent<Value>| async move {
        let _ = clients;
        Ok::<Value, Error>(json!({}))
    }))
    .await
}
