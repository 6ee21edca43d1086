//! The rounds of traffic first (see [`crate::ports::TrafficRounds`]) in the pool table:
//!
//! * a place and cluster's rounds: `pk` = `TRAFFIC#<account>#<region>#<cluster>`, `sk` =
//!   `ROUND`, with `pending` (a string set: each instance offered since the last round, as
//!   JSON), `rounds` (the rest of the [`Rounds`] as JSON: when the next may start, the round
//!   being made, the quiet time), `version` (a counter every write raises) and `expires_at`.
//!   An offer is one `UpdateItem` that adds to the set and raises the version, never in
//!   conflict; a claim or a settling is read, changed and written whole (`PutItem`, the set
//!   holding what a claim left) conditioned on the version read: a write made meanwhile (an
//!   offer too) makes it be done again on what is there;
//! * an instance's outcome: the same `pk`, `sk` = `OUTCOME#<instance id>`, with `outcome` (the
//!   [`Outcome`] as JSON) and `expires_at` (an hour on).
//!
//! Items of no index (they have none of the indexes' keys but `sk`, and no `unavailable_until`).

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_with::{json::JsonString, serde_as};

use super::DynamoStore;
use super::codec::*;
use super::expr::Expr;
use crate::adapters::backoff::backoff;
use crate::domain::clusters::ClusterId;
use crate::domain::traffic::{Claim, Doomed, Outcome, Rounds, Settled, round_of};
use crate::ports::{FailureKind, OUTCOME_KEPT, PortError, TrafficRounds};
use backon::{BackoffBuilder, ExponentialBuilder};

/// The `sk` of a place and cluster's rounds.
const ROUND_SK: &str = "ROUND";
/// The prefix of the `sk` of an instance's outcome.
const OUTCOME_SK_PREFIX: &str = "OUTCOME#";
/// Writes of rounds tried at most, each after a read: every batch of every environment waiting
/// on a round writes them (an offer, a claim), and only one of concurrent writes goes through.
const WRITE_ATTEMPTS: u32 = 50;
/// Outcomes written at once.
const PUTS_AT_ONCE: usize = 16;
/// The wait after a write that lost to another: rounds are contended by every batch waiting on
/// them, and each write is short.
const CONFLICT_BACKOFF: ExponentialBuilder = backoff(
    std::time::Duration::from_millis(10),
    std::time::Duration::from_millis(200),
);

impl DynamoStore {
    /// Changes the rounds of `key` by `change` (which answers what the caller learns): read,
    /// changed, and written back unless another write came between (then again, on what it
    /// wrote). Nothing is written when `change` leaves them as they were.
    async fn change_rounds<T>(
        &self,
        key: &ClusterId,
        now: DateTime<Utc>,
        change: impl Fn(&mut Rounds) -> T + Send + Sync,
    ) -> Result<T, PortError> {
        let pk = round_of(key);
        let read = format!("reading the rounds of {pk}");
        let what = format!("writing the rounds of {pk}");
        let mut waits = CONFLICT_BACKOFF.build();
        for _ in 0..WRITE_ATTEMPTS {
            // As stored (a strongly consistent read), with their version (0: none).
            let item = self.get(&pk, ROUND_SK, &read).await?;
            let decoded = item.map(|item| decode_rounds(&pk, &item));
            let (mut rounds, version) = decoded.unwrap_or(Ok((Rounds::default(), 0)))?;
            let before = rounds.clone();
            let answer = change(&mut rounds);
            if rounds == before {
                return Ok(answer);
            }
            // The pending instances in their set, out of the rest.
            let pending = json_set(&std::mem::take(&mut rounds.pending))
                .map_err(self.invalid("encoding pending instances"))?;
            let item = to_item(RoundsItem {
                pending,
                rounds: Some(rounds),
                version: version + 1,
                expires_at: expires(now),
            });
            let mut item = item.map_err(self.invalid("encoding rounds"))?;
            item.extend(item_key(&pk, ROUND_SK));
            let mut e = Expr::default();
            let v = e.name("version");
            let condition = match version {
                0 => format!("attribute_not_exists({v})"),
                _ => format!("{v} = {}", e.value("v", n(version))),
            };
            let written = (self.client.put_item().table_name(&self.table))
                .set_item(Some(item))
                .condition_expression(condition)
                .set_expression_attribute_names(Some(e.names))
                .set_expression_attribute_values(Some(e.values).filter(|v| !v.is_empty()))
                .send()
                .await
                .map_err(|e| self.sdk_err(&what, e));
            match written {
                Ok(_) => return Ok(answer),
                Err(e) if e.kind == FailureKind::Conflict => self.back_off(&mut waits).await,
                Err(e) => return Err(e),
            }
        }
        let why = "other writes kept coming between its read and its write";
        Err(self.fail(FailureKind::Conflict, what, why))
    }
}

/// `instances` as a string set of `pending` (each as JSON).
fn json_set(instances: &[Doomed]) -> serde_json::Result<Vec<String>> {
    instances.iter().map(serde_json::to_string).collect()
}

/// A rounds item's attributes (its key apart), as written and read (`expires_at` written
/// only; see the module's documentation).
#[serde_as]
#[derive(Serialize, Deserialize)]
struct RoundsItem {
    /// The rest of the [`Rounds`], as JSON.
    #[serde_as(as = "Option<JsonString>")]
    #[serde(default)]
    rounds: Option<Rounds>,
    /// A string set (an offer adds to it), each instance as JSON; none when empty.
    #[serde(default, with = "serde_dynamo::string_set")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pending: Vec<String>,
    #[serde(default)]
    version: i64,
    #[serde(skip_deserializing)]
    expires_at: i64,
}

/// The rounds item of `pk` as read, with its version (see the module's documentation).
fn decode_rounds(pk: &str, item: &Item) -> Result<(Rounds, i64), PortError> {
    if item.get("pending").is_some_and(|p| !p.is_ss()) {
        return Err(PortError::corrupt(pk, "`pending` is not a string set"));
    }
    let read: RoundsItem = from_item(pk, item)?;
    let pending: Vec<Doomed> = (read.pending.iter().map(|json| serde_json::from_str(json)))
        .collect::<Result<_, _>>()
        .map_err(|e| PortError::corrupt(pk, format_args!("`pending` holds no instance: {e}")))?;
    let mut rounds = read.rounds.unwrap_or_default();
    rounds.pending.clear();
    rounds.offer(&pending);
    Ok((rounds, read.version))
}

/// An instance's outcome item's attributes (its key apart: `sk` is `OUTCOME#<instance id>`), as
/// written and read (`expires_at` written only).
#[serde_as]
#[derive(Serialize, Deserialize)]
struct OutcomeItem {
    #[serde_as(as = "JsonString")]
    outcome: Outcome,
    #[serde(skip_deserializing)]
    expires_at: i64,
}

/// An outcome's item in the rounds of `pk` as read: its instance and outcome.
fn decode_outcome(pk: &str, item: &Item) -> Result<(String, Outcome), PortError> {
    let sk = text(item, "sk").unwrap_or(pk);
    let read: OutcomeItem = from_item(sk, item)?;
    let instance = sk.strip_prefix(OUTCOME_SK_PREFIX).unwrap_or(sk);
    Ok((instance.to_string(), read.outcome))
}

/// When an item written at `now` expires (TTL): [`OUTCOME_KEPT`] on.
fn expires(now: DateTime<Utc>) -> i64 {
    ceil_secs(now + crate::ports::span(OUTCOME_KEPT))
}

#[async_trait::async_trait]
impl TrafficRounds for DynamoStore {
    async fn offer(
        &self,
        key: &ClusterId,
        doomed: &[Doomed],
        now: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let pk = round_of(key);
        let set = json_set(doomed).map_err(self.invalid("encoding doomed instances"))?;
        if set.is_empty() {
            return Ok(());
        }
        let mut e = Expr::default();
        let update = format!(
            "ADD {} {}, {} {} SET {}",
            e.name("pending"),
            e.value("set", AttributeValue::Ss(set)),
            e.name("version"),
            e.value("one", n(1)),
            e.is("expires_at", n(expires(now)))
        );
        (self.client.update_item())
            .table_name(&self.table)
            .set_key(Some(item_key(&pk, ROUND_SK)))
            .update_expression(update)
            .set_expression_attribute_names(Some(e.names))
            .set_expression_attribute_values(Some(e.values))
            .send()
            .await
            .map_err(|e| self.sdk_err(format_args!("offering instances to {pk}"), e))?;
        Ok(())
    }

    async fn claim(
        &self,
        key: &ClusterId,
        now: DateTime<Utc>,
        lease: std::time::Duration,
    ) -> Result<Claim, PortError> {
        self.change_rounds(key, now, |r| r.claim(now, lease)).await
    }

    async fn settle(
        &self,
        key: &ClusterId,
        settled: &Settled,
        now: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let (pk, expires) = (&round_of(key), expires(now));
        let puts = settled.outcomes.iter().map(|(id, outcome)| async move {
            let what = format!("writing {id}'s outcome in {pk}");
            let item = to_item(OutcomeItem {
                outcome: outcome.clone(),
                expires_at: expires,
            });
            let mut item = item.map_err(self.invalid("encoding an outcome"))?;
            item.extend(item_key(pk, &format!("{OUTCOME_SK_PREFIX}{id}")));
            let put = self.client.put_item().table_name(&self.table);
            let written = put.set_item(Some(item)).send().await;
            written.map_err(|e| self.sdk_err(what, e)).map(drop)
        });
        let puts = futures::stream::iter(puts.collect::<Vec<_>>());
        let puts: Vec<_> = puts.buffer_unordered(PUTS_AT_ONCE).collect().await;
        puts.into_iter().collect::<Result<(), _>>()?;
        self.change_rounds(key, now, |r| r.settle(now, settled))
            .await
    }

    async fn outcomes(
        &self,
        key: &ClusterId,
        instances: &[String],
    ) -> Result<BTreeMap<String, Outcome>, PortError> {
        let pk = round_of(key);
        let keys = (instances.iter())
            .map(|i| item_key(&pk, &format!("{OUTCOME_SK_PREFIX}{i}")))
            .collect();
        let what = format!("reading the outcomes of {pk}");
        let items = self.batch_get(keys, &what).await?;
        items.iter().map(|item| decode_outcome(&pk, item)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::Corrupt;
    use std::collections::HashMap;

    fn item(pairs: Vec<(&str, AttributeValue)>) -> HashMap<String, AttributeValue> {
        pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    fn text(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }

    /// An outcome's item exactly as stored (the outcome as JSON in a string).
    #[test]
    fn the_outcome_item_is_stored_as_it_always_was() {
        let outcome = Outcome {
            at: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            groups: 2,
            left: 1,
            failed: vec!["tg-a: throttled".into()],
            pods: true,
        };
        let stored = item(vec![
            ("pk", text("TRAFFIC#111111111111#us-east-1#c")),
            ("sk", text("OUTCOME#i-1")),
            (
                "outcome",
                text(
                    r#"{"at":"2023-11-14T22:13:20Z","groups":2,"left":1,"failed":["tg-a: throttled"],"pods":true}"#,
                ),
            ),
            ("expires_at", AttributeValue::N("1700003600".into())),
        ]);
        let pk = "TRAFFIC#111111111111#us-east-1#c";
        let written = OutcomeItem {
            outcome: outcome.clone(),
            expires_at: 1_700_003_600,
        };
        let mut written: HashMap<_, _> = to_item(written).unwrap();
        written.extend(item_key(pk, "OUTCOME#i-1"));
        assert_eq!(written, stored);
        assert_eq!(
            decode_outcome(pk, &stored).unwrap(),
            ("i-1".to_string(), outcome)
        );
    }

    /// A rounds item as stored: `rounds` (JSON), `pending` (a string set of JSON), `version`.
    #[test]
    fn the_rounds_item_is_read_as_it_always_was() {
        let pk = "TRAFFIC#111111111111#us-east-1#c";
        let stored = item(vec![
            ("pk", text(pk)),
            ("sk", text("ROUND")),
            (
                "rounds",
                text(r#"{"pending":[],"next_at":"2023-11-14T22:13:20Z","groups":["tg-a"]}"#),
            ),
            (
                "pending",
                AttributeValue::Ss(vec![
                    r#"{"instance_id":"i-1","addresses":["10.0.1.5"]}"#.into(),
                ]),
            ),
            ("version", AttributeValue::N("3".into())),
            ("expires_at", AttributeValue::N("1700003600".into())),
        ]);
        let (rounds, version) = decode_rounds(pk, &stored).unwrap();
        assert_eq!(version, 3);
        assert_eq!(
            rounds,
            Rounds {
                pending: vec![Doomed {
                    instance_id: "i-1".into(),
                    addresses: vec!["10.0.1.5".into()],
                    signature: None,
                }],
                next_at: DateTime::from_timestamp(1_700_000_000, 0),
                groups: vec!["tg-a".into()],
                ..Rounds::default()
            }
        );
        // An offer alone: no `rounds`, no `version` yet read as 0.
        let offered = item(vec![("pending", AttributeValue::Ss(vec![]))]);
        assert_eq!(decode_rounds(pk, &offered).unwrap(), (Rounds::default(), 0));
        let listed = item(vec![("pending", AttributeValue::L(vec![]))]);
        assert!(matches!(
            decode_rounds(pk, &listed),
            Err(e) if e.cause::<Corrupt>().is_some()
        ));
    }
}
