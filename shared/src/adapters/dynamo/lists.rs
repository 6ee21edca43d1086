//! The clusters' lists shared between execution environments (see
//! [`crate::ports::SharedLists`]) in the pool table:
//!
//! * a place and cluster's claim: `pk` = `LIST#<account>#<region>#<cluster>`, `sk` = `CLAIM`,
//!   with `at` (when claimed, Unix milliseconds) and `expires_at`; a claim is one `PutItem`
//!   conditioned on there being none within the lease, and a claim refused reads the one there;
//! * the list's pages: the same `pk`, `sk` = `PAGE#<claimed at, ms>#<n>`, with `page` (as the
//!   fleet signed it) and `expires_at`, read with `BatchGetItem`.
//!
//! Items of no index (they have none of the indexes' keys but `sk`, and no `unavailable_until`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::DynamoStore;
use super::codec::*;
use super::expr::Expr;
use crate::domain::clusters::ClusterId;
use crate::ports::{FailureKind, LIST_KEPT, PAGES_READ, PortError, SharedLists, span};

/// The `sk` of a place and cluster's claim.
const CLAIM_SK: &str = "CLAIM";

/// The `pk` of `cluster`'s lists.
fn list_pk(cluster: &ClusterId) -> String {
    cluster.key("LIST")
}

/// The `sk` of page `n` of the list claimed `at`.
fn page_sk(at: DateTime<Utc>, n: usize) -> String {
    format!("PAGE#{}#{n}", at.timestamp_millis())
}

/// A claim item's attributes (its key apart; `expires_at` written only).
#[derive(Serialize, Deserialize)]
struct ClaimItem {
    at: i64,
    #[serde(skip_deserializing)]
    expires_at: i64,
}

/// A page item's attributes (its key apart; `expires_at` written only).
#[derive(Serialize, Deserialize)]
struct PageItem {
    page: String,
    #[serde(skip_deserializing)]
    expires_at: i64,
}

#[async_trait::async_trait]
impl SharedLists for DynamoStore {
    async fn claim_list(
        &self,
        key: &ClusterId,
        now: DateTime<Utc>,
        lease: std::time::Duration,
    ) -> Result<Option<DateTime<Utc>>, PortError> {
        let pk = list_pk(key);
        let at = now.timestamp_millis();
        let expires_at = ceil_secs(now + span(LIST_KEPT));
        let item = to_item(ClaimItem { at, expires_at });
        let mut item = item.map_err(self.invalid("encoding a list's claim"))?;
        item.extend(item_key(&pk, CLAIM_SK));
        let mut e = Expr::default();
        let stale = at.saturating_sub(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX));
        let condition = format!(
            "attribute_not_exists({}) OR {} <= {}",
            e.name("pk"),
            e.name("at"),
            e.value("stale", n(stale))
        );
        let written = (self.client.put_item().table_name(&self.table))
            .set_item(Some(item))
            .condition_expression(condition)
            .set_expression_attribute_names(Some(e.names))
            .set_expression_attribute_values(Some(e.values))
            .send()
            .await
            .map_err(|e| self.sdk_err(format_args!("claiming the list of {pk}"), e));
        match written {
            Ok(_) => Ok(None),
            Err(e) if e.kind == FailureKind::Conflict => {
                let read = format!("reading the claim of {pk}");
                let item = self.get(&pk, CLAIM_SK, &read).await?;
                let item = item.ok_or_else(|| self.fail(FailureKind::Conflict, read, "gone"))?;
                let claim: ClaimItem = from_item(&pk, &item)?;
                let at = DateTime::from_timestamp_millis(claim.at);
                at.map(Some)
                    .ok_or_else(|| PortError::corrupt(&pk, "its claim's `at` is out of range"))
            }
            Err(e) => Err(e),
        }
    }

    async fn put_page(
        &self,
        key: &ClusterId,
        at: DateTime<Utc>,
        n: usize,
        page: &str,
    ) -> Result<(), PortError> {
        let (pk, sk) = (list_pk(key), page_sk(at, n));
        let expires_at = ceil_secs(at + span(LIST_KEPT));
        let item = to_item(PageItem {
            page: page.to_string(),
            expires_at,
        });
        let mut item = item.map_err(self.invalid("encoding a list's page"))?;
        item.extend(item_key(&pk, &sk));
        let put = self.client.put_item().table_name(&self.table);
        let written = put.set_item(Some(item)).send().await;
        written.map_err(|e| self.sdk_err(format_args!("writing {pk} {sk}"), e))?;
        Ok(())
    }

    async fn pages(
        &self,
        key: &ClusterId,
        at: DateTime<Utc>,
        from: usize,
    ) -> Result<Vec<String>, PortError> {
        let pk = list_pk(key);
        let sks: Vec<String> = (from..from + PAGES_READ).map(|n| page_sk(at, n)).collect();
        let keys = sks.iter().map(|sk| item_key(&pk, sk)).collect();
        let what = format!("reading the list of {pk}");
        let items = self.batch_get(keys, &what).await?;
        let mut found = std::collections::HashMap::new();
        for item in &items {
            let sk = text(item, "sk").unwrap_or(&pk);
            let read: PageItem = from_item(sk, item)?;
            found.insert(sk.to_string(), read.page);
        }
        // In order, up to the first page not written yet.
        Ok(sks.iter().map_while(|sk| found.remove(sk)).collect())
    }
}
