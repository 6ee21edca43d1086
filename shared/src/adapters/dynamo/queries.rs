//! Reading items: one by its key, and every page of a query or a scan.

use std::fmt::Display;

use super::DynamoStore;
use super::codec::*;
use super::expr::Expr;
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

    /// Every item (all pages) of a `Query` of `index` (the table when `None`) on its key
    /// condition, or of a `Scan` without one.
    pub(super) async fn items(
        &self,
        query: Option<(Option<&str>, String)>,
        filter: String,
        e: Expr,
        what: impl Display + Send + Sync,
    ) -> Result<Vec<Item>, PortError> {
        let (names, values) = (Some(e.names), Some(e.values));
        match query {
            Some((index, key_condition)) => (self.client.query().table_name(&self.table))
                .set_index_name(index.map(str::to_string))
                .key_condition_expression(key_condition)
                .filter_expression(filter)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .into_paginator()
                .items()
                .send()
                .collect::<Result<Vec<_>, _>>()
                .await
                .map_err(|err| self.sdk_err(&what, err)),
            None => (self.client.scan().table_name(&self.table))
                .filter_expression(filter)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .into_paginator()
                .items()
                .send()
                .collect::<Result<Vec<_>, _>>()
                .await
                .map_err(|err| self.sdk_err(&what, err)),
        }
    }
}
