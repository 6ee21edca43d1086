//! The history items of a period: an operator's report.

use chrono::{DateTime, Utc};

use super::DynamoStore;
use super::codec::*;
use super::expr::Expr;
use crate::domain::pool::PoolKey;
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
            sk = e.name("sk"),
            prefix = e.value("hist", s(HISTORY_SK_PREFIX)),
            exp = e.name("expires_at"),
            now = e.value("now", n(now.timestamp())),
            at = e.name("at"),
            until = e.name("until"),
            since = e.value("since", n(since.timestamp())),
        );
        let attributes = history_attributes();
        let items = self.scan(&attributes, filter, e, "scanning the history");
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
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        let mut e = Expr::default();
        let sk = |t: DateTime<Utc>| format!("{HISTORY_SK_PREFIX}{:011}", t.timestamp().max(0));
        let key_condition = format!(
            "{pk} = {pool} AND {sk} BETWEEN {from} AND {to}",
            pk = e.name("pk"),
            pool = e.value("pool", s(&pool_pk(pool))),
            sk = e.name("sk"),
            from = e.value("from", s(&sk(since))),
            // `~` sorts after every character of an event id or instance id.
            to = e.value("to", s(&format!("{}~", sk(now)))),
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
