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
use forewarn::domain::report::{Outcome, Tally};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let settings = Settings::from_env()?;
    forewarn::app::telemetry::init_json(&settings);
    let sweeper = Arc::new(Sweeper::from_settings(&settings).await?);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let sweeper = Arc::clone(&sweeper);
        async move {
            let h = &sweeper.handler;
            let deadline = deadline_from_epoch_ms(event.context.deadline, h.clock.now())
                - forewarn::ports::span(h.safety_margin);
            let reports = sweeper.sweep(Some(deadline)).await?;
            let undone = sweeper.way_back().await?;
            let placeholders = sweeper.clean_placeholders().await?;
            let priorities = sweeper.update_priorities().await?;
            let tally = Tally::of(&reports);
            if let Some(failed) = reports.iter().find(|r| r.outcome == Outcome::Failed) {
                return Err(Error::from(format!(
                    "{} of {} findings failed; first: {}: {}",
                    tally.failed,
                    reports.len(),
                    failed.origin,
                    failed.reason.as_deref().unwrap_or("failed")
                )));
            }
            if let Some(failed) = undone.iter().find(|u| u.error.is_some()) {
                return Err(Error::from(format!(
                    "undoing the cordon of node/{} failed: {}",
                    failed.node,
                    failed.error.as_deref().unwrap_or_default()
                )));
            }
            let priorities = priorities.map(|p| {
                json!({ "change": p.change, "hot": p.hot.iter().map(|h| &h.group).collect::<Vec<_>>() })
            });
            Ok::<Value, Error>(
                json!({ "findings": reports.len(), "outcomes": tally, "way_back": undone,
                        "placeholders_deleted": placeholders, "priorities": priorities }),
            )
        }
    }))
    .await
}
