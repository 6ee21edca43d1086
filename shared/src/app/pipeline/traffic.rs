//! Traffic first (see [`crate::domain::traffic`]): before a batch's drains make their first
//! evictions, their instances are taken off the load balancers of their cluster, in one round for
//! the batch (one `DeregisterTargets` per target group), within a budget: an ELB API that fails
//! or throttles delays those evictions by at most [`Traffic::budget`], and is reported (the
//! record's `traffic`) and logged. Only when the run acts on the cluster (not a dry run) and its
//! cluster has a name (the tag's value).

use super::passes::Handled;
use super::*;
use crate::domain::config::Action;
use crate::domain::traffic::{Deregistered, Doomed};
use crate::ports::{LoadBalancers, Place, TrafficError};

/// The default of [`Traffic::budget`] (`FOREWARN_DEREGISTER_BUDGET`).
pub const DEREGISTER_BUDGET: Duration = Duration::from_secs(3);

/// After a round the load balancers did not answer within the budget, or throttled, how long
/// this execution environment's rounds are not made (their drains evict at once): an API that
/// hangs costs each environment one budget per this time, not one per batch; and in a mass
/// interruption forewarn does not spend the account's ELB limits, which the Load Balancer
/// Controller needs to register the replacement pods.
pub const QUIET_FOR: Duration = Duration::from_secs(30);

/// Where, and how long at most, drains' instances are taken off their load balancers.
#[derive(Clone)]
pub struct Traffic {
    balancers: Arc<dyn LoadBalancers>,
    /// How long a batch's first evictions wait for the deregistration at most.
    budget: Duration,
    /// Since when and until when no round is made (see [`QUIET_FOR`]).
    quiet: Arc<std::sync::Mutex<Option<Quiet>>>,
}

/// A time without rounds: since the round that ran out of time, until [`QUIET_FOR`] later.
#[derive(Clone, Copy)]
struct Quiet {
    since: DateTime<Utc>,
    until: DateTime<Utc>,
}

impl Traffic {
    pub fn new(balancers: Arc<dyn LoadBalancers>, budget: Duration) -> Traffic {
        Traffic {
            balancers,
            budget,
            quiet: Arc::default(),
        }
    }

    /// When the last round that ran out of time was, while rounds are not made after it.
    fn quiet_since(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let quiet = self.quiet.lock().unwrap_or_else(|e| e.into_inner());
        quiet.filter(|q| now < q.until).map(|q| q.since)
    }

    fn hush(&self, now: DateTime<Utc>) {
        let mut quiet = self.quiet.lock().unwrap_or_else(|e| e.into_inner());
        *quiet = Some(Quiet {
            since: now,
            until: now + span(QUIET_FOR),
        });
    }
}

/// What a batch's first drain passes wait for before evicting: its round (see
/// [`Pipeline::clear_traffic`]), made once, whoever waits first.
pub(super) trait Gate: Send + Sync {
    fn wait(&self) -> futures::future::BoxFuture<'_, ()>;
}

impl Gate for futures::future::Shared<futures::future::BoxFuture<'_, BTreeMap<usize, String>>> {
    fn wait(&self) -> futures::future::BoxFuture<'_, ()> {
        use futures::FutureExt;
        self.clone().map(|_| ()).boxed()
    }
}

/// A drain of the batch whose first evictions come next: its record, the place of its event,
/// its plan.
struct FirstDrain<'p> {
    record: usize,
    place: Place,
    plan: &'p Plan,
}

impl Pipeline<'_> {
    /// The batch's drains whose first evictions come next — the continuations of a first drain
    /// pass among `later` (only those signed by forewarn, naming their event's instances and
    /// not past their drain's last pass),
    /// the drains `first` left to carry on in process — taken off the load balancers; a note
    /// for each of their records.
    pub(super) async fn clear_traffic(
        &self,
        records: &[Record],
        later: &[Vec<usize>],
        first: &[Vec<(usize, Handled<'_>)>],
        limits: Limits,
    ) -> BTreeMap<usize, String> {
        let Some(traffic) = self.traffic.filter(|_| self.mode.writes_cluster()) else {
            return BTreeMap::new();
        };
        let mut drains = Vec::new();
        let now = self.clock.now();
        for &i in later.iter().flatten() {
            let record = &records[i];
            let (Ok(event), Some(c)) = (&record.event, &record.continuation) else {
                continue;
            };
            // A replayed or late first pass, which the pass itself refuses, moves no target.
            if c.pass != 1
                || !c.plan.actions.iter().any(draining)
                || now > self.last_pass(&c.plan, c).last
            {
                continue;
            }
            let body = record.body.as_deref().unwrap_or_default();
            let signed = matches!(self.verify_signature(record, c, body).await, Ok(Ok(())));
            if signed && plan_is_the_events(&c.plan, event).is_ok() {
                drains.push(FirstDrain {
                    record: i,
                    place: place_of(event),
                    plan: &c.plan,
                });
            }
        }
        for (i, handled) in first.iter().flatten() {
            if let (Handled::Pending(_, rest), Ok(event)) = (handled, &records[*i].event)
                && rest.plan.actions.iter().any(draining)
            {
                drains.push(FirstDrain {
                    record: *i,
                    place: place_of(event),
                    plan: &rest.plan,
                });
            }
        }
        if drains.is_empty() {
            return BTreeMap::new();
        }
        let Some(cluster) = self.config.cluster_name.as_deref() else {
            let why = "not taken off the load balancers: the deployment names no cluster \
                       (FOREWARN_CLUSTER_NAME), whose tag says which target groups are its";
            return drains.iter().map(|d| (d.record, why.to_string())).collect();
        };
        let mut by_place: BTreeMap<&Place, Vec<&FirstDrain>> = BTreeMap::new();
        for d in &drains {
            by_place.entry(&d.place).or_default().push(d);
        }
        let rounds = by_place
            .into_iter()
            .map(|(place, drains)| self.clear_place(traffic, place, cluster, drains, limits));
        futures::future::join_all(rounds)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// One round for the drains of one account and region.
    async fn clear_place(
        &self,
        traffic: &Traffic,
        place: &Place,
        cluster: &str,
        drains: Vec<&FirstDrain<'_>>,
        limits: Limits,
    ) -> Vec<(usize, String)> {
        let mut doomed: Vec<Doomed> = Vec::new();
        for a in drains.iter().flat_map(|d| &d.plan.actions) {
            if draining(a) && !doomed.iter().any(|d| d.instance_id == a.instance_id) {
                doomed.push(Doomed {
                    instance_id: a.instance_id.clone(),
                    addresses: a.addresses.clone(),
                });
            }
        }
        let now = self.clock.now();
        if let Some(since) = traffic.quiet_since(now) {
            let why = format!(
                "not taken off the load balancers: they throttled or did not answer within {1} s \
                 this environment's round of {0}, and are not asked again for {2} s: evicting at \
                 once",
                since.to_rfc3339(),
                traffic.budget.as_secs_f64(),
                QUIET_FOR.as_secs()
            );
            return drains.iter().map(|d| (d.record, why.clone())).collect();
        }
        let budget_end = now + span(traffic.budget);
        let end = limits.deadline.map_or(budget_end, |d| d.min(budget_end));
        let round = traffic.balancers.deregister(place, cluster, &doomed);
        let answer = until(self.clock, end, round).await;
        let throttled = match &answer {
            // Out of the round's budget; the batch's own deadline coming first is not the ELB's.
            None => end == budget_end,
            Some(Ok(done)) => done.throttled,
            Some(Err(e)) => e.kind == crate::ports::FailureKind::Throttled,
        };
        if throttled {
            traffic.hush(now);
        }
        log_round(&answer, &doomed, traffic.budget);
        drains
            .iter()
            .map(|d| {
                let ids = d.plan.actions.iter().filter(|a| draining(a));
                let note = match &answer {
                    Some(Ok(done)) => ids
                        .map(|a| done.note_for(&a.instance_id))
                        .collect::<Vec<_>>()
                        .join("; "),
                    Some(Err(e)) => {
                        format!("not taken off the load balancers ({e}): evicting anyway")
                    }
                    None => format!(
                        "the load balancers did not answer within {} s: evicting anyway",
                        traffic.budget.as_secs_f64()
                    ),
                };
                (d.record, note)
            })
            .collect()
    }
}

/// A drain of a node: what leaves the load balancers first.
fn draining(a: &crate::domain::plan::NodeAction) -> bool {
    a.action == Action::CordonDrain && a.node.is_some()
}

/// A round's log line: what left, or why nothing did.
fn log_round(
    answer: &Option<Result<Deregistered, TrafficError>>,
    doomed: &[Doomed],
    budget: Duration,
) {
    match answer {
        Some(Ok(done)) if done.failed.is_empty() => tracing::info!(
            instances = doomed.len(),
            groups = done.groups,
            left = done.left.values().map(Vec::len).sum::<usize>(),
            describes = done.describes,
            deregisters = done.deregisters,
            "drains' instances taken off the load balancers"
        ),
        Some(Ok(done)) => tracing::warn!(
            instances = doomed.len(),
            failed = %done.failed.join("; "),
            "some target groups did not take the drains' instances off"
        ),
        Some(Err(e)) => tracing::warn!(
            instances = doomed.len(),
            error = %e,
            "the load balancers could not be read: evicting anyway"
        ),
        None => tracing::warn!(
            instances = doomed.len(),
            budget_s = budget.as_secs_f64(),
            "the load balancers did not answer in time: evicting anyway"
        ),
    }
}

/// Whether `plan` is `event`'s: its event id, and no instance the event does not name; else why
/// not.
pub(super) fn plan_is_the_events(plan: &Plan, event: &Event) -> Result<(), String> {
    if plan.event_id != event.id {
        return Err(format!(
            "the plan is event {}'s, not this event's ({})",
            plan.event_id, event.id
        ));
    }
    if let Some(other) = plan
        .actions
        .iter()
        .map(|a| &a.instance_id)
        .chain(&plan.instance_ids)
        .find(|id| !event.instance_ids.contains(id))
    {
        return Err(format!(
            "the plan names instance {other}, which the event does not"
        ));
    }
    Ok(())
}
