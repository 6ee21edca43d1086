//! The rounds of traffic first (see [`crate::ports::TrafficRounds`]) in the pool table:
//!
//! * a place and cluster's rounds: `pk` = `TRAFFIC#<account>#<region>#<cluster>`, `sk` =
//!   `ROUND`, with `pending` (a string set: each instance offered since the last round, as
//!   JSON), `rounds` (the rest of the [`Rounds`] as JSON: when the next may start, the round
//!   being made, the quiet time), `version` (a counter every write raises) and `expires_at`.
//!   An offer is one `UpdateItem` that adds to the set and raises the version, never in
//!   conflict; a claim or a settling is read, changed and written back conditioned on the
//!   version read (a write made meanwhile makes it be done again on what is there), and a claim
//!   deletes from the set what it took;
//! * an instance's outcome: the same `pk`, `sk` = `OUTCOME#<instance id>`, with `outcome` (the
//!   [`Outcome`] as JSON) and `expires_at` (an hour on).
//!
//! Items of no index (they have none of the indexes' keys but `sk`, and no `unavailable_until`).

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use futures::StreamExt;

use super::DynamoStore;
use super::codec::*;
use crate::adapters::backoff::Backoff;
use crate::domain::traffic::{Claim, Doomed, Outcome, Rounds};
use crate::ports::{FailureKind, OUTCOME_KEPT, RoundKey, Settled, StoreError, TrafficRounds};

/// The `sk` of a place and cluster's rounds.
const ROUND_SK: &str = "ROUND";
/// The prefix of the `sk` of an instance's outcome.
const OUTCOME_SK_PREFIX: &str = "OUTCOME#";
const ROUNDS: &str = "rounds";
const PENDING: &str = "pending";
const VERSION: &str = "version";
const OUTCOME: &str = "outcome";
/// Writes of rounds tried at most, each after a read: every batch of every environment waiting
/// on a round writes them (an offer, a claim), and only one of concurrent writes goes through.
const WRITE_ATTEMPTS: u32 = 50;
/// Outcomes written at once.
const PUTS_AT_ONCE: usize = 16;
/// The wait after a write that lost to another: rounds are contended by every batch waiting on
/// them, and each write is short.
const CONFLICT_BACKOFF: Backoff = Backoff::new(
    std::time::Duration::from_millis(10),
    std::time::Duration::from_millis(200),
);

impl DynamoStore {
    /// The rounds of `key` as stored (a strongly consistent read), with their version (0: none).
    async fn read_rounds(&self, key: &RoundKey) -> Result<(Rounds, i64), StoreError> {
        let pk = key.to_string();
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, s(&pk))
            .key(SK, s(ROUND_SK))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.sdk_err(format_args!("reading the rounds of {pk}"), e))?;
        let Some(item) = out.item else {
            return Ok((Rounds::default(), 0));
        };
        let mut rounds: Rounds = match item.get(ROUNDS) {
            Some(_) => serde_json::from_str(req_s(&pk, &item, ROUNDS)?)
                .map_err(|e| corrupt(&pk, format_args!("`{ROUNDS}` is not rounds: {e}")))?,
            None => Rounds::default(),
        };
        let pending: Vec<Doomed> = match item.get(PENDING) {
            None => Vec::new(),
            Some(AttributeValue::Ss(set)) => set
                .iter()
                .map(|json| serde_json::from_str(json))
                .collect::<Result<_, _>>()
                .map_err(|e| corrupt(&pk, format_args!("`{PENDING}` holds no instance: {e}")))?,
            Some(_) => {
                return Err(corrupt(
                    &pk,
                    format_args!("`{PENDING}` is not a string set"),
                ));
            }
        };
        rounds.pending.clear();
        rounds.offer(&pending);
        Ok((rounds, opt_n(&pk, &item, VERSION)?.unwrap_or(0)))
    }

    /// Changes the rounds of `key` by `change` (which answers what the caller learns): read,
    /// changed, and written back unless another write came between (then again, on what it
    /// wrote). Nothing is written when `change` leaves them as they were; `change` never adds
    /// to what is pending (offers do), and what it takes of it is deleted from the set.
    async fn change_rounds<T>(
        &self,
        key: &RoundKey,
        now: DateTime<Utc>,
        change: impl Fn(&mut Rounds) -> T + Send + Sync,
    ) -> Result<T, StoreError> {
        let pk = key.to_string();
        let mut waits = CONFLICT_BACKOFF.delays();
        for _ in 0..WRITE_ATTEMPTS {
            let (mut rounds, version) = self.read_rounds(key).await?;
            let before = rounds.clone();
            let answer = change(&mut rounds);
            if rounds == before {
                return Ok(answer);
            }
            // What a claim took leaves the set (an offer made meanwhile stays).
            let taken: Vec<String> = before
                .pending
                .iter()
                .filter(|d| !rounds.pending.contains(d))
                .map(serde_json::to_string)
                .collect::<Result<_, _>>()
                .map_err(|e| self.err_from(FailureKind::Invalid, "encoding taken instances", e))?;
            rounds.pending.clear();
            let json = serde_json::to_string(&rounds)
                .map_err(|e| self.err_from(FailureKind::Invalid, "encoding rounds", e))?;
            let mut update = "SET #r = :r, #v = :next, #exp = :exp".to_string();
            if !taken.is_empty() {
                update.push_str(" DELETE #p :taken");
            }
            let condition = if version == 0 {
                "attribute_not_exists(#v)"
            } else {
                "#v = :v"
            };
            let mut write = self
                .client
                .update_item()
                .table_name(&self.table)
                .key(PK, s(&pk))
                .key(SK, s(ROUND_SK))
                .update_expression(update)
                .condition_expression(condition)
                .expression_attribute_names("#r", ROUNDS)
                .expression_attribute_names("#v", VERSION)
                .expression_attribute_names("#exp", EXPIRES_AT)
                .expression_attribute_values(":r", s(&json))
                .expression_attribute_values(":next", n(version + 1))
                .expression_attribute_values(":exp", n(expires(now)));
            if !taken.is_empty() {
                write = write
                    .expression_attribute_names("#p", PENDING)
                    .expression_attribute_values(":taken", AttributeValue::Ss(taken));
            }
            if version != 0 {
                write = write.expression_attribute_values(":v", n(version));
            }
            match write.send().await {
                Ok(_) => return Ok(answer),
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
                {
                    self.back_off(&mut waits).await;
                }
                Err(e) => return Err(self.sdk_err(format_args!("writing the rounds of {pk}"), e)),
            }
        }
        Err(self.err(
            FailureKind::Conflict,
            format_args!("writing the rounds of {pk}"),
            "other writes kept coming between its read and its write",
        ))
    }

    async fn put_outcome(
        &self,
        pk: &str,
        instance: &str,
        outcome: &Outcome,
        expires: i64,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(outcome)
            .map_err(|e| self.err_from(FailureKind::Invalid, "encoding an outcome", e))?;
        self.client
            .put_item()
            .table_name(&self.table)
            .item(PK, s(pk))
            .item(SK, s(&format!("{OUTCOME_SK_PREFIX}{instance}")))
            .item(OUTCOME, s(&json))
            .item(EXPIRES_AT, n(expires))
            .send()
            .await
            .map_err(|e| self.sdk_err(format_args!("writing {instance}'s outcome in {pk}"), e))?;
        Ok(())
    }
}

/// When an item written at `now` expires (TTL): [`OUTCOME_KEPT`] on.
fn expires(now: DateTime<Utc>) -> i64 {
    ceil_secs(now + crate::ports::span(OUTCOME_KEPT))
}

#[async_trait::async_trait]
impl TrafficRounds for DynamoStore {
    async fn offer(
        &self,
        key: &RoundKey,
        doomed: &[Doomed],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let pk = key.to_string();
        let set = doomed
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err_from(FailureKind::Invalid, "encoding doomed instances", e))?;
        if set.is_empty() {
            return Ok(());
        }
        self.client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(&pk))
            .key(SK, s(ROUND_SK))
            .update_expression("ADD #p :set, #v :one SET #exp = :exp")
            .expression_attribute_names("#p", PENDING)
            .expression_attribute_names("#v", VERSION)
            .expression_attribute_names("#exp", EXPIRES_AT)
            .expression_attribute_values(":set", AttributeValue::Ss(set))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":exp", n(expires(now)))
            .send()
            .await
            .map_err(|e| self.sdk_err(format_args!("offering instances to {pk}"), e))?;
        Ok(())
    }

    async fn claim(
        &self,
        key: &RoundKey,
        now: DateTime<Utc>,
        lease: std::time::Duration,
    ) -> Result<Claim, StoreError> {
        self.change_rounds(key, now, |r| r.claim(now, lease)).await
    }

    async fn settle(
        &self,
        key: &RoundKey,
        settled: &Settled,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let pk = key.to_string();
        let expires = expires(now);
        let puts: Vec<_> = settled
            .outcomes
            .iter()
            .map(|(instance, outcome)| self.put_outcome(&pk, instance, outcome, expires))
            .collect();
        let puts = futures::stream::iter(puts)
            .buffer_unordered(PUTS_AT_ONCE)
            .collect::<Vec<_>>()
            .await;
        puts.into_iter().collect::<Result<(), _>>()?;
        self.change_rounds(key, now, |r| {
            r.settle(
                now,
                settled.next,
                settled.quiet_until,
                settled.groups.as_deref(),
            )
        })
        .await
    }

    async fn outcomes(
        &self,
        key: &RoundKey,
        instances: &[String],
    ) -> Result<BTreeMap<String, Outcome>, StoreError> {
        let pk = key.to_string();
        let keys: Vec<HashMap<String, AttributeValue>> = instances
            .iter()
            .map(|i| {
                HashMap::from([
                    (PK.to_string(), s(&pk)),
                    (SK.to_string(), s(&format!("{OUTCOME_SK_PREFIX}{i}"))),
                ])
            })
            .collect();
        let what = format!("reading the outcomes of {pk}");
        let mut found = BTreeMap::new();
        for item in self.batch_get(keys, &[], &what).await? {
            let sk = req_s(&pk, &item, SK)?;
            let instance = sk.strip_prefix(OUTCOME_SK_PREFIX).unwrap_or(sk);
            let outcome: Outcome = serde_json::from_str(req_s(&pk, &item, OUTCOME)?)
                .map_err(|e| corrupt(sk, format_args!("not an outcome: {e}")))?;
            found.insert(instance.to_string(), outcome);
        }
        Ok(found)
    }
}
