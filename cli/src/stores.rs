//! Store selection: `--table` / FOREWARN_TABLE selects DynamoDB, otherwise the embedded store.

use forewarn::pool::PoolStore;
use forewarn::store::dynamo::DynamoStore;
use forewarn::store::embedded::{EmbeddedStore, default_state_dir};

use crate::StoreArgs;

pub async fn open(args: &StoreArgs) -> anyhow::Result<Box<dyn PoolStore>> {
    Ok(match &args.table {
        Some(table) => Box::new(DynamoStore::from_env(table.clone()).await),
        None => {
            let dir = args.state_dir.clone().unwrap_or_else(default_state_dir);
            Box::new(EmbeddedStore::open(&dir)?)
        }
    })
}
