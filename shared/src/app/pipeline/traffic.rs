//! Traffic first (see [`crate::domain::traffic`]): before a batch's drains make their first
//! evictions, their instances are taken off the load balancers of their cluster, in rounds shared
//! by every batch of every execution environment through the pool store (see
//! [`crate::ports::TrafficRounds`]): a batch offers its doomed instances and waits for a round
//! to take them off — one round a second at most per account, region and cluster, one
//! `DeregisterTargets` per target group for every instance offered by then, whoever makes it.
//! The wait is bounded by [`Traffic::budget`]: an ELB API that fails or throttles delays those
//! evictions by at most that, and is reported (the record's `traffic`) and logged. Only when
//! the run acts on the cluster (not a dry run) and its cluster has a name (the tag's value).

use super::passes::{Handled, by_keys};
use super::*;
use crate::domain::clusters::ClusterId;
use crate::domain::config::Action;
use crate::domain::keys::Unverified;
use crate::domain::traffic::{
    Claim, Deregistered, Doomed, Outcome, Refused, Settled, leaves_whole, next_round, round_of,
};
use crate::ports::{LoadBalancers, Place, PortError, TrafficRounds};

/// The default of [`Traffic::budget`] (the settings' deregistration budget).
pub const DEREGISTER_BUDGET: Duration = Duration::from_secs(3);

/// After a round that throttled or did not answer within the budget, how long no round is made
/// for its account, region and cluster (their drains evict at once): an API that hangs costs
/// one budget per this time, not one per batch; and in a mass interruption forewarn does not
/// spend the account's ELB limits, which the Load Balancer Controller needs to register the
/// replacement pods. Other accounts, regions and clusters go on.
pub const QUIET_FOR: Duration = Duration::from_secs(30);

/// How often a batch waiting on a round made by another looks again, at most.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// How long past its budget a batch waits for the pool store to answer about its rounds.
const STORE_GRACE: Duration = Duration::from_millis(500);

/// Where, and how long at most, drains' instances are taken off their load balancers (at
/// [`crate::domain::traffic::ELB_RATE`] calls a second).
#[derive(Clone)]
pub struct Traffic {
    pub balancers: Arc<dyn LoadBalancers>,
    /// How long a batch's first evictions wait for their round at most.
    pub budget: Duration,
}

impl Pipeline<'_> {
    /// The batch's drains whose first evictions come next — the continuations of a first drain
    /// pass among `later` (only those [`Pipeline::refusal`] lets run), the drains `first` left
    /// to carry on in process — taken off the load balancers; a note for each of their records.
    pub(super) async fn clear_traffic(
        &self,
        records: &[Record],
        later: &[Vec<usize>],
        first: &[Vec<(usize, Handled)>],
    ) -> BTreeMap<usize, String> {
        let Some(traffic) = self.traffic.filter(|_| self.mode.writes_cluster()) else {
            return BTreeMap::new();
        };
        // The drains by the place of their event: the record of each, its doomed instances.
        let mut drains: BTreeMap<Place, Vec<(usize, Vec<Doomed>)>> = BTreeMap::new();
        let now = self.clock.now();
        for &i in later.iter().flatten() {
            let record = &records[i];
            // A replayed, forged or late first pass, which the pass itself refuses, moves no
            // target.
            if let (Ok(event), Some(c)) = (&record.event, &record.continuation)
                && c.pass == 1
                && let doomed = doomed_of(&c.plan)
                && !doomed.is_empty()
                && let Ok(Ok(None)) = self.refusal(record, event, c, now).await
            {
                let place = drains.entry(Place::of_event(event)).or_default();
                place.push((i, doomed));
            }
        }
        for (i, handled) in first.iter().flatten() {
            if let (Handled::Pending(_, plan), Ok(event)) = (handled, &records[*i].event)
                && let doomed = doomed_of(plan)
                && !doomed.is_empty()
            {
                let place = drains.entry(Place::of_event(event)).or_default();
                place.push((*i, doomed));
            }
        }
        let Some(cluster) = self.config.cluster.as_ref().map(|c| c.name.as_str()) else {
            let why = "not taken off the load balancers: the deployment names no cluster \
                       (the served clusters'), whose tag says which target groups are its";
            let all = drains.into_values().flatten();
            return all.map(|(i, _)| (i, why.to_string())).collect();
        };
        let rounds = drains
            .iter()
            .map(|(place, d)| self.clear_place(traffic, place, cluster, d));
        let notes = futures::future::join_all(rounds).await;
        notes.into_iter().flatten().collect()
    }

    /// The drains of one account and region, off their cluster's load balancers: offered to
    /// the rounds, and waited for within the budget.
    async fn clear_place(
        &self,
        traffic: &Traffic,
        place: &Place,
        cluster: &str,
        drains: &[(usize, Vec<Doomed>)],
    ) -> Vec<(usize, String)> {
        // Each instance once, as its first drain wants it off.
        let mut doomed: Vec<Doomed> = drains.iter().flat_map(|(_, d)| d.clone()).collect();
        let mut seen = BTreeSet::new();
        doomed.retain(|d| seen.insert(d.instance_id.clone()));
        let all = |why: String| drains.iter().map(|(i, _)| (*i, why.clone())).collect();
        let Some(rounds) = self.store.traffic_rounds() else {
            return all(format!(
                "not taken off the load balancers: {} shares no rounds: evicting at once",
                self.store.location()
            ));
        };
        let key = ClusterId::at(place, cluster);
        let now = self.clock.now();
        let budget_end = now + span(traffic.budget);
        let end = self.work.deadline.map_or(budget_end, |d| d.min(budget_end));
        let wait = self.wait_for_round(traffic, rounds, &key, &doomed, end);
        // The wait ends at `end` by itself; this only bounds a store that does not answer.
        let out = match until(self.clock, end + span(STORE_GRACE), wait).await {
            Some(Ok(Ok(outcomes))) => outcomes,
            Some(Ok(Err(since))) => {
                return all(format!(
                    "not taken off the load balancers: they throttled or did not answer within \
                     {} s in a round of {}, and are not asked again for {} s: evicting at once",
                    traffic.budget.as_secs_f64(),
                    since.to_rfc3339(),
                    QUIET_FOR.as_secs()
                ));
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "the rounds of traffic first could not be shared");
                return all(format!(
                    "not taken off the load balancers ({e}): evicting anyway"
                ));
            }
            None => BTreeMap::new(),
        };
        let note = |d: &Doomed| match out.get(&d.instance_id) {
            Some(outcome) => outcome.note(&d.instance_id),
            None => format!(
                "{}: the load balancers did not answer within {} s: evicting anyway",
                d.instance_id,
                traffic.budget.as_secs_f64()
            ),
        };
        let notes = |doomed: &[Doomed]| doomed.iter().map(note).collect::<Vec<_>>().join("; ");
        drains.iter().map(|(i, d)| (*i, notes(d))).collect()
    }

    /// A drain's first pass queued for `plan` (of an event of `place`): its instances offered to
    /// the rounds at once, and the round made when one is due, so that they are off before
    /// their first drain pass comes, which then need not wait. A failure is only logged: that
    /// pass offers them again.
    pub(super) async fn offer_early(&self, place: &Place, plan: &Plan) {
        let (Some(traffic), true, Some(cluster), Some(rounds)) = (
            self.traffic,
            self.mode.writes_cluster(),
            self.config.cluster.as_ref().map(|c| c.name.as_str()),
            self.store.traffic_rounds(),
        ) else {
            return;
        };
        let doomed = doomed_of(plan);
        if doomed.is_empty() {
            return;
        }
        let key = ClusterId::at(place, cluster);
        let now = self.clock.now();
        // A round due is made now, for what was offered so far: in a mass interruption the
        // rounds follow the cordons, each taking off the nodes cordoned since the last.
        let made = async {
            self.offer(rounds, &key, doomed, now).await?;
            let end = now + span(traffic.budget);
            self.claim_round(traffic, rounds, &key, end).await
        };
        if let Err(e) = made.await {
            tracing::warn!(error = %e, "drains' instances not offered to the rounds early");
        }
    }

    /// Offers `doomed` to the rounds of `key` and waits until a round (this batch's own, or
    /// another's) has taken each off: their outcomes; or the rounds are quiet: since when.
    async fn wait_for_round(
        &self,
        traffic: &Traffic,
        rounds: &dyn TrafficRounds,
        key: &ClusterId,
        doomed: &[Doomed],
        end: DateTime<Utc>,
    ) -> Result<Result<BTreeMap<String, Outcome>, DateTime<Utc>>, PortError> {
        let offered = self.clock.now();
        let mut done = self.answered(rounds, key, doomed, offered).await?;
        let waiting = doomed.iter().filter(|d| !done.contains_key(&d.instance_id));
        self.offer(rounds, key, waiting.cloned().collect(), offered)
            .await?;
        while done.len() < doomed.len() && self.clock.now() < end {
            let now = self.clock.now();
            match self.claim_round(traffic, rounds, key, end).await? {
                Claim::Quiet(since) => return Ok(Err(since)),
                Claim::NotYet(next) => {
                    let wait = (next.min(end) - now).to_std().unwrap_or_default();
                    let wait = wait.clamp(Duration::from_millis(10), LOOK_EVERY * 10);
                    self.clock.sleep(wait).await;
                }
                // A round is being made (perhaps with this batch's instances): its outcomes
                // come any moment.
                Claim::Making(_) | Claim::Nothing => self.clock.sleep(LOOK_EVERY).await,
                // This batch's round, made.
                Claim::Taken(..) => {}
            }
            done = self.answered(rounds, key, doomed, offered).await?;
        }
        Ok(Ok(done))
    }

    /// The outcomes of `doomed` this batch takes as its own (see [`Outcome::answers`]).
    async fn answered(
        &self,
        rounds: &dyn TrafficRounds,
        key: &ClusterId,
        doomed: &[Doomed],
        offered: DateTime<Utc>,
    ) -> Result<BTreeMap<String, Outcome>, PortError> {
        let ids: Vec<String> = doomed.iter().map(|d| d.instance_id.clone()).collect();
        let mut known = rounds.outcomes(key, &ids).await?;
        known
            .retain(|id, o| (doomed.iter()).any(|d| &d.instance_id == id && o.answers(d, offered)));
        Ok(known)
    }

    /// `doomed` offered to the rounds of `key`, signed with the current continuation key (see
    /// [`Doomed::signed`]).
    async fn offer(
        &self,
        rounds: &dyn TrafficRounds,
        key: &ClusterId,
        doomed: Vec<Doomed>,
        now: DateTime<Utc>,
    ) -> Result<(), PortError> {
        if doomed.is_empty() {
            return Ok(());
        }
        let (keys, round) = (self.store.continuation_keys().await?, round_of(key));
        let signed = doomed.into_iter().map(|d| d.signed(&round, &keys.current));
        rounds.offer(key, &signed.collect::<Vec<_>>(), now).await
    }

    /// The next round of `key` claimed, and when it is this batch's ([`Claim::Taken`]), made:
    /// what it took off the load balancers of `key` (their groups as the last round knew them
    /// given to an environment that knows none), within the budget (and by the batch's `end`),
    /// and settled for every batch that waits on it. Only a round given its whole budget that
    /// did not answer quiets the rounds. What the round may not take off (not signed by
    /// forewarn, a forged address: see [`Doomed::verify`]) is settled refused, untouched.
    async fn claim_round(
        &self,
        traffic: &Traffic,
        rounds: &dyn TrafficRounds,
        key: &ClusterId,
        end: DateTime<Utc>,
    ) -> Result<Claim, PortError> {
        let claim = rounds.claim(key, self.clock.now(), traffic.budget).await?;
        let Claim::Taken(taken, groups) = &claim else {
            return Ok(claim);
        };
        // The keys are read again once when a signature names a key newer than those known.
        let newer = |r: &Refused| matches!(r, Refused::Unverified(Unverified::UnknownKey { .. }));
        let round = round_of(key);
        let check = |d: &Doomed, keys: &_| d.verify(&round, keys);
        let verdicts = by_keys(self.store, taken, check, newer).await?;
        let started = self.clock.now();
        let mut settled = Settled::default();
        let mut doomed = Vec::new();
        for (d, verdict) in taken.iter().zip(verdicts) {
            let Err(why) = verdict else {
                doomed.push(d.clone());
                continue;
            };
            let instance = &d.instance_id;
            tracing::warn!(round = %round, %instance, refused = %why, "an instance offered to a round of traffic first is refused: nothing of it leaves a load balancer");
            let outcome = Outcome {
                at: started,
                failed: vec![format!("refused: {instance}: {why}")],
                ..Outcome::default()
            };
            settled.outcomes.insert(d.instance_id.clone(), outcome);
        }
        if doomed.is_empty() {
            rounds.settle(key, &settled, self.clock.now()).await?;
            return Ok(claim);
        }
        let budget_end = started + span(traffic.budget);
        let round = (traffic.balancers).deregister(key, &doomed, groups);
        // What did not answer, or answered an error, left no group for any instance.
        let failed = |why: String, throttled| Deregistered {
            failed: vec![why],
            throttled,
            ..Deregistered::default()
        };
        let budget_s = traffic.budget.as_secs_f64();
        let done = match until(self.clock, budget_end.min(end), round).await {
            Some(Ok(done)) => {
                settled.groups = Some(done.arns.clone());
                done
            }
            Some(Err(e)) => failed(
                format!("the load balancers could not be read: {e}"),
                e.kind == crate::ports::FailureKind::Throttled,
            ),
            // Only a round given its whole budget quiets the rounds.
            None => failed(
                format!("the load balancers did not answer within {budget_s} s"),
                end >= budget_end,
            ),
        };
        let instances = doomed.len();
        if done.failed.is_empty() {
            tracing::info!(
                instances,
                groups = done.arns.len(),
                left = done.left.values().map(BTreeSet::len).sum::<usize>(),
                describes = done.describes,
                deregisters = done.deregisters,
                "drains' instances taken off the load balancers"
            );
        } else {
            let failed = done.failed.join("; ");
            tracing::warn!(instances, %failed, "the drains' instances were not taken off every target group: evicting anyway");
        }
        let now = self.clock.now();
        settled.outcomes.extend(done.outcomes(&doomed, started));
        settled.next = Some(next_round(started, done.deregisters));
        settled.quiet_until = done.throttled.then(|| now + span(QUIET_FOR));
        rounds.settle(key, &settled, now).await?;
        Ok(claim)
    }
}

/// The instances of `plan`'s drains of a node (what leaves the load balancers first), with the
/// addresses that leave with them (none when the instance stays a while: see [`leaves_whole`]).
fn doomed_of(plan: &Plan) -> Vec<Doomed> {
    let whole = leaves_whole(plan.kind);
    let drains = plan.actions.iter();
    let drains = drains.filter(|a| a.action == Action::CordonDrain && a.node.is_some());
    let doomed = drains.map(|a| {
        let addresses = a.addresses.iter().filter(|_| whole).cloned();
        Doomed::new(a.instance_id.clone(), addresses.collect())
    });
    doomed.collect()
}
