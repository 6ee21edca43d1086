//! The interruption handler Lambda: an SQS batch (or a bare EventBridge event) in, a partial batch
//! response out. All the work is in `forewarn::app::handler`; setup happens once per cold start.

use std::sync::Arc;

use forewarn::app::handler::{Handler, deadline_from_epoch_ms};
use forewarn::app::settings::Settings;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let settings = Settings::from_env()?;
    let telemetry = forewarn::app::telemetry::init_json(&settings);
    let handler = Arc::new(Handler {
        telemetry,
        ..Handler::from_settings(&settings).await?
    });
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let handler = Arc::clone(&handler);
        async move {
            let deadline = deadline_from_epoch_ms(event.context.deadline, handler.clock.now());
            let invocation = handler.invoke(event.payload, Some(deadline)).await?;
            Ok::<Value, Error>(invocation.response)
        }
    }))
    .await
}
