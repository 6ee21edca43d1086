//! The floor of the cold-start benchmark (see docs/benchmarks.md): a `lambda_runtime` function
//! built like the real ones (same runtime, same tokio, same release profile) that does nothing
//! and answers `{}`.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::run(service_fn(|_event: LambdaEvent<Value>| async {
        Ok::<Value, Error>(json!({}))
    }))
    .await
}
