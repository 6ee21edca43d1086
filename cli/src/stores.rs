//! Store selection: `--table` (else the settings' table) selects DynamoDB, otherwise the embedded
//! store.

use std::sync::Arc;

use forewarn::app::settings::Settings;
use forewarn::app::wiring;
use forewarn::domain::config::Mode;
use forewarn::ports::PoolStore;

use crate::StoreArgs;

/// The store the arguments name (the settings filling in what they do not), for reading
/// (`forewarn pools`, `forewarn audit`).
pub async fn open(
    args: &StoreArgs,
    settings: &Settings,
    clock: Arc<dyn forewarn::ports::Clock>,
) -> anyhow::Result<Arc<dyn PoolStore>> {
    Ok(wiring::store(
        &args.choice(settings),
        Mode::DryRun,
        None,
        settings.aws,
        clock,
    )
    .await?)
}
