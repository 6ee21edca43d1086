//! Reading pools: one by its key, or those a [`PoolQuery`] asks for, through the index that
//! fits it.

use chrono::{DateTime, Utc};

use super::codec::*;
use super::expr::Expr;
use super::{DynamoStore, INDEX_BY_TYPE, INDEX_BY_ZONE, INDEX_UNAVAILABLE};
use crate::domain::pool::{PoolKey, PoolQuery, PoolRecord, sort_newest_first};
use crate::ports::StoreError;

impl DynamoStore {
    /// One pool's record (strongly consistent), whatever its expiry; `None` if absent.
    pub async fn pool(&self, key: &PoolKey) -> Result<Option<PoolRecord>, StoreError> {
        let pk = pool_pk(key);
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, s(&pk))
            .key(SK, s(POOL_SK))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.sdk_err(format_args!("reading pool {key}"), e))?;
        out.item().map(decode_pool).transpose()
    }

    /// The pools `query` asks for, newest first.
    pub(super) async fn query_pools(
        &self,
        query: &PoolQuery,
        now: DateTime<Utc>,
    ) -> Result<Vec<PoolRecord>, StoreError> {
        let mut e = Expr::default();
        let now_value = e.value("now", n(now.timestamp()));
        let mut filter = vec![format!("{} > {now_value}", e.name(EXPIRES_AT))];
        let request = if let Some(instance_type) = &query.instance_type {
            let key_condition = format!(
                "{} = {}",
                e.name(INSTANCE_TYPE),
                e.value("it", s(instance_type))
            );
            if let Some(zone) = &query.zone {
                filter.push(format!("{} = {}", e.name(ZONE), e.value("zone", s(zone))));
            }
            if !query.include_available {
                filter.push(format!("{} > {now_value}", e.name(UNAVAILABLE_UNTIL)));
            }
            Request::Query {
                index: INDEX_BY_TYPE,
                key_condition,
                filter: filter.join(" AND "),
                expr: e,
            }
        } else if let Some(zone) = &query.zone {
            let key_condition = format!("{} = {}", e.name(ZONE), e.value("zone", s(zone)));
            if !query.include_available {
                filter.push(format!("{} > {now_value}", e.name(UNAVAILABLE_UNTIL)));
            }
            Request::Query {
                index: INDEX_BY_ZONE,
                key_condition,
                filter: filter.join(" AND "),
                expr: e,
            }
        } else if !query.include_available {
            let key_condition = format!(
                "{} = {} AND {} > {now_value}",
                e.name(SK),
                e.value("pool", s(POOL_SK)),
                e.name(UNAVAILABLE_UNTIL)
            );
            Request::Query {
                index: INDEX_UNAVAILABLE,
                key_condition,
                filter: filter.join(" AND "),
                expr: e,
            }
        } else {
            filter.push(format!("{} = {}", e.name(SK), e.value("pool", s(POOL_SK))));
            Request::Scan {
                filter: filter.join(" AND "),
                expr: e,
            }
        };
        let mut records = self.collect(request).await?;
        // Indexes are eventually consistent and the TTL deletes late: the query decides.
        records.retain(|r| query.matches(r, now));
        sort_newest_first(&mut records);
        Ok(records)
    }

    /// Every pool item of a query or scan (all its pages), decoded; a corrupt one ends it.
    async fn collect(&self, request: Request) -> Result<Vec<PoolRecord>, StoreError> {
        let mut records = Vec::new();
        match request {
            Request::Query {
                index,
                key_condition,
                filter,
                expr,
            } => {
                let mut items = self
                    .client
                    .query()
                    .table_name(&self.table)
                    .index_name(index)
                    .key_condition_expression(key_condition)
                    .filter_expression(filter)
                    .set_expression_attribute_names(Some(expr.names))
                    .set_expression_attribute_values(Some(expr.values))
                    .scan_index_forward(false)
                    .into_paginator()
                    .items()
                    .send();
                while let Some(item) = items.next().await {
                    let item =
                        item.map_err(|e| self.sdk_err(format_args!("querying index {index}"), e))?;
                    records.push(decode_pool(&item)?);
                }
            }
            Request::Scan { filter, mut expr } => {
                let projection = expr.projection(&pool_attributes());
                let mut items = self
                    .client
                    .scan()
                    .table_name(&self.table)
                    .select(aws_sdk_dynamodb::types::Select::SpecificAttributes)
                    .projection_expression(projection)
                    .filter_expression(filter)
                    .set_expression_attribute_names(Some(expr.names))
                    .set_expression_attribute_values(Some(expr.values))
                    .into_paginator()
                    .items()
                    .send();
                while let Some(item) = items.next().await {
                    let item = item.map_err(|e| self.sdk_err("scanning the pools", e))?;
                    records.push(decode_pool(&item)?);
                }
            }
        }
        Ok(records)
    }
}

enum Request {
    Query {
        index: &'static str,
        key_condition: String,
        filter: String,
        expr: Expr,
    },
    Scan {
        filter: String,
        expr: Expr,
    },
}
