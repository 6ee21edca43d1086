//! Store selection: `--table` / FOREWARN_TABLE selects DynamoDB, otherwise the embedded store.

use std::sync::Arc;

use forewarn::app::wiring;
use forewarn::domain::config::Mode;
use forewarn::ports::PoolStore;

use crate::StoreArgs;

/// The store the arguments name, for reading (`forewarn pools`).
pub async fn open(
    args: &StoreArgs,
    clock: Arc<dyn forewarn::ports::Clock>,
) -> anyhow::Result<Arc<dyn PoolStore>> {
    Ok(wiring::store(&args.choice(), Mode::DryRun, None, clock).await?)
}
