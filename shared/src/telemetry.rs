//! Telemetry in one place: JSON logs through `tracing-subscriber` for the Lambda functions.

use tracing_subscriber::EnvFilter;

/// JSON logs on stdout (CloudWatch Logs reads them as structured fields), filtered by
/// `FOREWARN_LOG` or `RUST_LOG` (default `info`). Safe to call twice: the second call is a no-op.
pub fn init_json() {
    let filter = EnvFilter::try_from_env("FOREWARN_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(true)
        .with_span_list(false)
        .flatten_event(true)
        .with_target(false)
        .without_time()
        .try_init();
}
