//! The interruption handler Lambda: an SQS batch (or a bare EventBridge event) in, a partial batch
//! response out. All the work is in `forewarn::lambda`; setup happens once per cold start.

use std::sync::Arc;

use forewarn::lambda::{Handler, deadline_from_epoch_ms};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    forewarn::telemetry::init_json();
    let handler = Arc::new(Handler::from_env().await?);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let handler = Arc::clone(&handler);
        async move {
            let deadline = deadline_from_epoch_ms(event.context.deadline);
            let invocation = handler.invoke(event.payload, Some(deadline)).await?;
            Ok::<Value, Error>(invocation.response)
        }
    }))
    .await
}
