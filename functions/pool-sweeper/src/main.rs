//! The pool sweeper Lambda, run on a schedule: finds what EventBridge missed and applies the
//! same plan path (see `forewarn::domain::sweep`). The answer counts the outcomes; any failed finding
//! fails the invocation so that it shows in the function's error metric (the next scheduled
//! sweep retries it: findings are stable per instance). Then it updates the Cluster Autoscaler's
//! priority expander from the pool table (see `forewarn::app::priorities`); a failure there fails
//! the invocation too, after the sweep's work is done. Between the two it runs the way back
//! (`forewarn::app::wayback`): cordons whose reason is gone are undone; and the placeholders
//! that outlived their drain are deleted.

use std::sync::Arc;

use forewarn::app::handler::deadline_from_epoch_ms;
use forewarn::app::settings::Settings;
use forewarn::app::sweeper::Sweeper;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let settings = Settings::from_env()?;
    let telemetry = forewarn::app::telemetry::init_json(&settings);
    let mut sweeper = Sweeper::from_settings(&settings).await?;
    sweeper.handler.telemetry = telemetry;
    let sweeper = Arc::new(sweeper);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let sweeper = Arc::clone(&sweeper);
        async move {
            let h = &sweeper.handler;
            let deadline = deadline_from_epoch_ms(event.context.deadline, h.clock.now())
                - forewarn::ports::span(h.safety_margin);
            // Every step runs whatever became of the others; the invocation fails after them
            // when one did, so that it shows in the function's error metric.
            let run = sweeper.run(Some(deadline)).await;
            match run.failures().as_slice() {
                [] => Ok::<Value, Error>(run.answer()),
                failures => {
                    tracing::error!(answer = %run.answer(), "sweep run failed");
                    Err(Error::from(failures.join("; ")))
                }
            }
        }
    }))
    .await
}
