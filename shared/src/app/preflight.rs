//! The preflight's judgement and schedule (the dry runs themselves are the Kubernetes adapter's,
//! [`crate::app::upkeep::ClusterUpkeep::preflight`]; the verdicts are
//! [`crate::domain::preflight`]'s, their refusing step [`crate::domain::admission`]'s): which
//! writes each of forewarn's groups makes, which of them the configuration uses (a refusal of one
//! of those fails `forewarn check`), and the sweeper's check of each cluster once an hour, with
//! what changed since the last and what it says of it (its log lines and its `PreflightRefused`
//! metric).

use std::collections::BTreeMap;
use std::sync::Mutex;

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use strum::VariantArray;

use crate::app::telemetry::{Emf, Telemetry};
use crate::domain::config::Config;
use crate::domain::preflight::{Capability, Proof, Verdict, changes};

/// How often the sweeper proves forewarn's writes in each cluster: a Kyverno policy or a Pod
/// Security level added later is seen within the hour, not during the next interruption.
pub const EVERY: Duration = Duration::hours(1);

/// Which of forewarn's functions a Kubernetes group is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Handler,
    Sweeper,
}

impl Role {
    /// The writes this role's group makes: the handler's cordons, drains (evictions,
    /// placeholders, Events) and the way back of Health events; the sweeper's the same (its
    /// findings go through the same pipeline) and the priority expander's update.
    pub fn capabilities(self) -> &'static [Capability] {
        match self {
            Role::Handler => &Capability::VARIANTS[..6],
            Role::Sweeper => Capability::VARIANTS,
        }
    }
}

/// Whether the configuration uses `capability`: placeholders only with surge on for some kind,
/// the expander's update only with `priorities` on (the settings'); every other write
/// always.
pub fn used(capability: Capability, config: &Config, priorities: bool) -> bool {
    match capability {
        Capability::Placeholder => {
            !config.surge_kinds.is_empty()
                || config
                    .policy
                    .rules
                    .iter()
                    .any(|r| r.surge.as_ref().is_some_and(|k| !k.is_empty()))
        }
        Capability::Expander => priorities,
        _ => true,
    }
}

/// The refused proofs of capabilities the configuration uses.
pub fn blocking<'a>(proofs: &'a [Proof], config: &Config, priorities: bool) -> Vec<&'a Proof> {
    proofs
        .iter()
        .filter(|p| p.verdict.is_refused() && used(p.capability, config, priorities))
        .collect()
}

/// What the sweeper's execution environment remembers of its preflights, per cluster: when the
/// last ran and what it found (lost with the environment: a new one checks at once, and says
/// every line).
#[derive(Debug, Default)]
pub struct PreflightMemory {
    last: Mutex<BTreeMap<String, LastPreflight>>,
}

/// When a cluster's last preflight ran, and what it found.
type LastPreflight = (DateTime<Utc>, Vec<Proof>);

impl PreflightMemory {
    /// Whether `cluster` is due a preflight at `now` (none yet, or the last [`EVERY`] ago).
    pub fn due(&self, cluster: &str, now: DateTime<Utc>) -> bool {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.get(cluster).is_none_or(|(at, _)| now - *at >= EVERY)
    }

    /// Keeps `proofs` as `cluster`'s at `now`; answers what changed since the last (every line
    /// on the first).
    pub fn record(&self, cluster: &str, now: DateTime<Utc>, proofs: Vec<Proof>) -> Vec<String> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let before = last
            .get(cluster)
            .map(|(_, p)| p.as_slice())
            .unwrap_or_default();
        let changed = changes(before, &proofs);
        last.insert(cluster.to_string(), (now, proofs));
        changed
    }
}

/// What a preflight says where people look (its part of [`Telemetry`]).
impl Telemetry {
    /// A preflight of `cluster`: what changed since the last
    /// logged (a refusal as a warning, anything else as info), `blocking` (refused writes the
    /// configuration uses) as an error; with metrics, `PreflightRefused` (Count) by
    /// `Capability` (and with `Cluster` first when named): 1 for each refused write, 0 for each
    /// admitted, so that an alarm sees a refusal appear within the hour.
    pub fn preflight(
        &self,
        cluster: Option<&str>,
        proofs: &[Proof],
        changed: &[String],
        blocking: usize,
        now: DateTime<Utc>,
    ) {
        let name = cluster.unwrap_or("-");
        for line in changed {
            if line.contains("refused by") {
                tracing::warn!(cluster = name, change = %line, "preflight: a write forewarn makes is refused now");
            } else {
                tracing::info!(cluster = name, change = %line, "preflight: changed");
            }
        }
        if blocking > 0 {
            tracing::error!(
                cluster = name,
                refused = blocking,
                "preflight: writes forewarn's configuration uses are refused by this cluster (forewarn check --kube says which and why)"
            );
        }
        if self.metrics {
            for doc in preflight_documents(cluster, proofs, now) {
                println!("{doc}");
            }
        }
    }
}

/// The EMF documents of a preflight of `cluster` (see [`Telemetry::preflight`]): one per write
/// checked, `PreflightRefused` 1 when refused and 0 when admitted (a write not checked says
/// nothing of admission: none).
pub fn preflight_documents(
    cluster: Option<&str>,
    proofs: &[Proof],
    now: DateTime<Utc>,
) -> Vec<Value> {
    let mut emf = Emf::new(now, cluster);
    let checked = proofs
        .iter()
        .filter(|p| !matches!(p.verdict, Verdict::NotChecked(_)));
    for proof in checked {
        emf.add(
            &[&["Capability"]],
            json!({"PreflightRefused": u8::from(proof.verdict.is_refused())}),
            json!({"Capability": proof.capability.as_str(), "Group": proof.group,
                   "Verdict": proof.verdict.to_string()}),
        );
    }
    emf.docs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::admission::RefusedBy;

    fn proof(capability: Capability, verdict: Verdict) -> Proof {
        Proof {
            capability,
            group: "forewarn-sweeper".into(),
            verdict,
        }
    }

    fn refused() -> Verdict {
        Verdict::Refused {
            by: RefusedBy::PodSecurity("restricted:latest".into()),
            message: "no".into(),
        }
    }

    #[test]
    fn only_a_refused_write_the_configuration_uses_blocks() {
        let mut config = Config::default();
        let proofs = vec![
            proof(Capability::Placeholder, refused()),
            proof(Capability::Expander, refused()),
            proof(Capability::Cordon, Verdict::Admitted(None)),
            proof(Capability::Evict, Verdict::NotChecked("no pod".into())),
        ];
        config.surge_kinds = crate::domain::surge::SURGE_KINDS.into();
        let blocked: Vec<Capability> = blocking(&proofs, &config, true)
            .iter()
            .map(|p| p.capability)
            .collect();
        assert_eq!(blocked, [Capability::Placeholder, Capability::Expander]);
        config.surge_kinds.clear();
        assert!(
            blocking(&proofs, &config, false).is_empty(),
            "surge and priorities off"
        );
    }

    #[test]
    fn a_cluster_is_checked_once_an_hour_and_told_what_changed() {
        let memory = PreflightMemory::default();
        let t0: DateTime<Utc> = "2026-11-28T10:00:00Z".parse().unwrap();
        assert!(memory.due("blue", t0));
        let first = memory.record(
            "blue",
            t0,
            vec![proof(Capability::Placeholder, Verdict::Admitted(None))],
        );
        assert_eq!(first.len(), 1, "a first check says every line");
        assert!(!memory.due("blue", t0 + Duration::minutes(55)));
        assert!(memory.due("green", t0), "each cluster its own");
        let later = t0 + EVERY;
        assert!(memory.due("blue", later));
        let changed = memory.record(
            "blue",
            later,
            vec![proof(Capability::Placeholder, refused())],
        );
        assert_eq!(changed.len(), 1);
        assert!(changed[0].contains("was admitted, now refused by PodSecurity"));
        assert!(
            memory
                .record(
                    "blue",
                    later + EVERY,
                    vec![proof(Capability::Placeholder, refused())]
                )
                .is_empty(),
            "nothing changed: nothing said"
        );
    }

    #[test]
    fn a_preflight_counts_each_refused_write_by_capability_and_cluster() {
        let proof = |capability, verdict| Proof {
            capability,
            group: "sweeper".into(),
            verdict,
        };
        let proofs = [
            proof(Capability::Cordon, Verdict::Admitted(None)),
            proof(
                Capability::Placeholder,
                Verdict::Refused {
                    by: RefusedBy::Webhook("validate.kyverno.svc-fail".into()),
                    message: "no".into(),
                },
            ),
            proof(
                Capability::Expander,
                Verdict::NotChecked("no ConfigMap".into()),
            ),
        ];
        let now: DateTime<Utc> = "2026-11-28T10:00:00Z".parse().unwrap();
        let docs = preflight_documents(Some("blue"), &proofs, now);
        assert_eq!(docs.len(), 2, "a write not checked says nothing: {docs:?}");
        assert_eq!(docs[0]["PreflightRefused"], 0);
        assert_eq!(docs[1]["PreflightRefused"], 1);
        assert_eq!(docs[1]["Capability"], "placeholder");
        assert_eq!(docs[1]["Cluster"], "blue");
        assert_eq!(
            docs[1]["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Capability"], ["Cluster", "Capability"]])
        );
    }
}
