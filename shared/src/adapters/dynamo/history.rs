//! The history items of a period: an operator's report.

use chrono::{DateTime, Utc};

use super::DynamoStore;
use super::codec::*;
use super::expr::Expr;
use crate::domain::stats::HistoryEntry;
use crate::ports::StoreError;

impl DynamoStore {
    /// A `Scan` of the history items (every page) whose event or window touches the period and
    /// that have not expired: an operator's report, not a hot path.
    pub(super) async fn scan_history(
        &self,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        let mut e = Expr::default();
        let filter = format!(
            "begins_with({sk}, {prefix}) AND {exp} > {now} AND {at} <= {now} AND ({at} >= {since} OR {until} > {since})",
            sk = e.name(SK),
            prefix = e.value("hist", s(HISTORY_SK_PREFIX)),
            exp = e.name(EXPIRES_AT),
            now = e.value("now", n(now.timestamp())),
            at = e.name(AT),
            until = e.name(UNTIL),
            since = e.value("since", n(since.timestamp())),
        );
        // The attributes named (see `pool_attributes`).
        let projection = e.projection(&history_attributes());
        let mut items = self
            .client
            .scan()
            .table_name(&self.table)
            .select(aws_sdk_dynamodb::types::Select::SpecificAttributes)
            .projection_expression(projection)
            .filter_expression(filter)
            .set_expression_attribute_names(Some(e.names))
            .set_expression_attribute_values(Some(e.values))
            .into_paginator()
            .items()
            .send();
        let mut entries = Vec::new();
        while let Some(item) = items.next().await {
            let item = item.map_err(|err| self.sdk_err("scanning the history", err))?;
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
        pool: &crate::domain::pool::PoolKey,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        let mut e = Expr::default();
        let key_condition = format!(
            "{pk} = {pool} AND {sk} BETWEEN {from} AND {to}",
            pk = e.name(PK),
            pool = e.value("pool", s(&pool_pk(pool))),
            sk = e.name(SK),
            from = e.value(
                "from",
                s(&format!(
                    "{HISTORY_SK_PREFIX}{:011}",
                    since.timestamp().max(0)
                ))
            ),
            // `~` sorts after every character of an event id or instance id.
            to = e.value(
                "to",
                s(&format!(
                    "{HISTORY_SK_PREFIX}{:011}~",
                    now.timestamp().max(0)
                ))
            ),
        );
        let filter = format!(
            "{exp} > {now}",
            exp = e.name(EXPIRES_AT),
            now = e.value("now", n(now.timestamp())),
        );
        let mut items = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression(key_condition)
            .filter_expression(filter)
            .set_expression_attribute_names(Some(e.names))
            .set_expression_attribute_values(Some(e.values))
            .into_paginator()
            .items()
            .send();
        let mut entries = Vec::new();
        while let Some(item) = items.next().await {
            let item = item.map_err(|err| self.sdk_err("querying a pool's history", err))?;
            entries.push(decode_history(&item)?);
        }
        Ok(entries)
    }
}
