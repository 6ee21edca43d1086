//! Reading items: one by its key, every page of a query or scan, the pools a [`PoolQuery`]
//! asks for (through the index that fits it), and the history of a period (an operator's
//! report) or of some pools.

use std::fmt::Display;

use chrono::{DateTime, Utc};

use super::codec::*;
use super::expr::Expr;
use super::{DynamoStore, INDEX_BY_TYPE, INDEX_BY_ZONE, INDEX_UNAVAILABLE};
use crate::domain::pool::HistoryEntry;
use crate::domain::pool::{PoolKey, PoolQuery, PoolRecord};
use crate::ports::PortError;

impl DynamoStore {
    /// The item `pk`, `sk` (strongly consistent), if there is one; `what` names the read in errors.
    pub(super) async fn get(
        &self,
        pk: &str,
        sk: &str,
        what: impl Display + Send + Sync,
    ) -> Result<Option<Item>, PortError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(item_key(pk, sk)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.sdk_err(what, e))?;
        Ok(out.item)
    }

    /// Every item (all pages) of a `Query` of `index` (the table when `None`).
    pub(super) async fn query(
        &self,
        index: Option<&str>,
        key_condition: String,
        filter: String,
        e: Expr,
        what: impl Display + Send + Sync,
    ) -> Result<Vec<Item>, PortError> {
        let pages = self
            .client
            .query()
            .table_name(&self.table)
            .set_index_name(index.map(str::to_string))
            .key_condition_expression(key_condition)
            .filter_expression(filter)
            .set_expression_attribute_names(Some(e.names))
            .set_expression_attribute_values(Some(e.values))
            .into_paginator()
            .items()
            .send();
        let items = pages.collect::<Result<Vec<_>, _>>().await;
        items.map_err(|err| self.sdk_err(&what, err))
    }

    /// Every item (all pages) of a `Scan`.
    pub(super) async fn scan(
        &self,
        filter: String,
        e: Expr,
        what: impl Display + Send + Sync,
    ) -> Result<Vec<Item>, PortError> {
        let pages = self
            .client
            .scan()
            .table_name(&self.table)
            .filter_expression(filter)
            .set_expression_attribute_names(Some(e.names))
            .set_expression_attribute_values(Some(e.values))
            .into_paginator()
            .items()
            .send();
        let items = pages.collect::<Result<Vec<_>, _>>().await;
        items.map_err(|err| self.sdk_err(&what, err))
    }

    /// The pools `query` asks for, newest first.
    pub(super) async fn query_pools(
        &self,
        query: &PoolQuery,
        now: DateTime<Utc>,
    ) -> Result<Vec<PoolRecord>, PortError> {
        let mut e = Expr::default();
        let now_value = e.value("now", n(now.timestamp()));
        let mut filter = vec![format!("{} > {now_value}", e.name("expires_at"))];
        let index = match (&query.instance_type, &query.zone) {
            (Some(instance_type), zone) => {
                let key_condition = e.is("instance_type", s(instance_type));
                if let Some(zone) = zone {
                    filter.push(e.is("zone", s(zone)));
                }
                Some((INDEX_BY_TYPE, key_condition))
            }
            (None, Some(zone)) => Some((INDEX_BY_ZONE, e.is("zone", s(zone)))),
            (None, None) if !query.include_available => {
                let sk = e.is("sk", s(POOL_SK));
                let until = e.name("unavailable_until");
                Some((INDEX_UNAVAILABLE, format!("{sk} AND {until} > {now_value}")))
            }
            (None, None) => {
                filter.push(e.is("sk", s(POOL_SK)));
                None
            }
        };
        let items = match index {
            Some((index, key_condition)) => {
                if !query.include_available && index != INDEX_UNAVAILABLE {
                    filter.push(format!("{} > {now_value}", e.name("unavailable_until")));
                }
                let what = format!("querying index {index}");
                let filter = filter.join(" AND ");
                self.query(Some(index), key_condition, filter, e, what)
                    .await?
            }
            None => {
                let filter = filter.join(" AND ");
                self.scan(filter, e, "scanning the pools").await?
            }
        };
        let records = items.iter().map(decode_pool).collect::<Result<_, _>>()?;
        // Indexes are eventually consistent and the TTL deletes late: the query decides.
        Ok(query.select(records, now))
    }

    /// A `Scan` of the history items (every page) whose event or window touches the period and
    /// that have not expired: an operator's report, not a hot path.
    pub(super) async fn scan_history(
        &self,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<HistoryEntry>, PortError> {
        let mut e = Expr::default();
        let filter = format!(
            "begins_with({sk}, {prefix}) AND {exp} > {now} AND {at} <= {now} AND ({at} >= {since} OR {until} > {since})",
            sk = e.name("sk"),
            prefix = e.value("hist", s(HISTORY_SK_PREFIX)),
            exp = e.name("expires_at"),
            now = e.value("now", n(now.timestamp())),
            at = e.name("at"),
            until = e.name("until"),
            since = e.value("since", n(since.timestamp())),
        );
        let items = self.scan(filter, e, "scanning the history");
        let mut entries = Vec::new();
        for item in items.await? {
            let entry = decode_history(&item)?;
            if entry.in_period(since, now) {
                entries.push(entry);
            }
        }
        Ok(entries)
    }

    /// A `Query` of one pool's history items whose event time is in `[since, now]` and that
    /// have not expired (every page): the sort key orders them by event time.
    pub(super) async fn query_history(
        &self,
        pool: &PoolKey,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<HistoryEntry>, PortError> {
        let mut e = Expr::default();
        let key_condition = format!(
            "{pk} = {pool} AND {sk} BETWEEN {from} AND {to}",
            pk = e.name("pk"),
            pool = e.value("pool", s(&pool_pk(pool))),
            sk = e.name("sk"),
            from = e.value("from", s(&history_sk_at(since))),
            // `~` sorts after every character of an event id or instance id.
            to = e.value("to", s(&format!("{}~", history_sk_at(now)))),
        );
        let filter = format!(
            "{exp} > {now}",
            exp = e.name("expires_at"),
            now = e.value("now", n(now.timestamp())),
        );
        let what = "querying a pool's history";
        let items = self.query(None, key_condition, filter, e, what).await?;
        items.iter().map(decode_history).collect()
    }
}
