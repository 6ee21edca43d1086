//! The policy per node group the functions go by: the cluster's ConfigMap
//! `forewarn/forewarn-policy` (key `policy.yaml`) when there is one, else the settings'
//! (the settings' policy file, or none). Read with a cluster's first batch and again at most
//! once a minute; a policy that does not parse is refused — the last good one is kept, the
//! error logged and a Warning Event recorded on the ConfigMap (once per refusal).
//!
//! What the ConfigMap may ask is the deployment's to say (the settings' policy allowance, see
//! [`crate::domain::policy::allow`]): a rule asking an action it does not allow is refused —
//! logged with its field, a `PolicyRefused` Warning Event on the ConfigMap — and its nodes keep
//! the defaults, while the policy's other rules apply. The settings' policy (the file the
//! deployment sets) is not limited.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};

use crate::adapters::kube::{POLICY_CONFIGMAP, POLICY_KEY, POLICY_NAMESPACE};
use crate::domain::policy::{Policy, PolicyAllow};
use crate::ports::{Clock, PolicySource, PolicyText, until};

/// How often the ConfigMap is read at most.
pub const REREAD: Duration = Duration::seconds(60);
/// How long a read may take: it comes before a batch's work, so an API server that does not
/// answer delays no cordon by more than this (the last policy is kept).
pub const READ_BUDGET: Duration = Duration::seconds(2);

/// The policy, read through a [`PolicySource`] at most every [`REREAD`].
pub struct PolicyCache {
    source: Arc<dyn PolicySource>,
    /// The settings' policy: what applies while there is no ConfigMap.
    base: Policy,
    /// What the ConfigMap's rules may ask.
    allow: PolicyAllow,
    state: tokio::sync::Mutex<State>,
}

struct State {
    read_at: Option<DateTime<Utc>>,
    /// What was last read (a refused text too, so that it is refused once).
    text: Option<PolicyText>,
    current: Policy,
}

impl PolicyCache {
    /// The policy of `source`, `base` while there is none; its rules may ask what `allow`
    /// allows.
    pub fn new(source: Arc<dyn PolicySource>, base: Policy, allow: PolicyAllow) -> PolicyCache {
        PolicyCache {
            source,
            allow,
            state: tokio::sync::Mutex::new(State {
                read_at: None,
                text: None,
                current: base.clone(),
            }),
            base,
        }
    }

    /// The policy now, on `clock` (the ConfigMap read again when the last read is a minute old,
    /// for at most [`READ_BUDGET`]).
    pub async fn policy(&self, clock: &dyn Clock) -> Policy {
        let now = clock.now();
        let mut s = self.state.lock().await;
        if s.read_at.is_some_and(|t| now - t < REREAD) {
            return s.current.clone();
        }
        s.read_at = Some(now);
        match until(clock, now + READ_BUDGET, self.source.read()).await {
            Some(Ok(text)) if s.text.as_ref() != Some(&text) => {
                if let Some(policy) = self.policy_of(&text, s.text.is_some()).await {
                    s.current = policy;
                }
                s.text = Some(text);
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                tracing::warn!(error = %e, "could not read the policy ConfigMap: the last policy is kept");
            }
            None => {
                tracing::warn!(
                    "reading the policy ConfigMap took too long: the last policy is kept"
                );
            }
        }
        s.current.clone()
    }

    /// The policy a new `text` of the ConfigMap makes (`had`: a text was read before); `None`
    /// when it is refused, which the last good policy outlives.
    async fn policy_of(&self, text: &PolicyText, had: bool) -> Option<Policy> {
        let refused = match text {
            PolicyText::Absent => {
                if had {
                    tracing::info!("no policy ConfigMap: the settings' policy applies");
                }
                return Some(self.base.clone());
            }
            PolicyText::NoKey => {
                format!("ConfigMap {POLICY_NAMESPACE}/{POLICY_CONFIGMAP} has no key {POLICY_KEY}")
            }
            PolicyText::Text(yaml) => match Policy::parse(yaml) {
                Ok(policy) => {
                    let (policy, refused) = policy.limited(&self.allow);
                    tracing::info!(
                        rules = policy.rules.len(),
                        refused = refused.len(),
                        "policy read from the ConfigMap"
                    );
                    for e in &refused {
                        tracing::error!(field = %e.path, error = %e, "policy rule refused: its nodes keep the defaults");
                        self.source.refused(&e.to_string()).await;
                    }
                    return Some(policy);
                }
                Err(e) => e.to_string(),
            },
        };
        tracing::error!(error = %refused, "policy refused: the last good policy is kept");
        let message = format!("policy refused, the last good one is kept: {refused}");
        self.source.refused(&message).await;
        None
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::adapters::clock::ManualClock;
    use crate::domain::event::EventKind;
    use crate::ports::PortError;

    /// A ConfigMap the test rewrites, counting reads and refusals.
    #[derive(Default)]
    struct Map {
        text: Mutex<Option<String>>,
        reads: Mutex<u32>,
        refused: Mutex<Vec<String>>,
    }

    #[async_trait::async_trait]
    impl PolicySource for Map {
        async fn read(&self) -> Result<PolicyText, PortError> {
            *self.reads.lock().unwrap() += 1;
            Ok(match self.text.lock().unwrap().clone() {
                Some(t) => PolicyText::Text(t),
                None => PolicyText::Absent,
            })
        }
        async fn refused(&self, message: &str) {
            self.refused.lock().unwrap().push(message.to_string());
        }
    }

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    const GOOD: &str =
        "rules:\n- name: all\n  nodes: {}\n  actions: {rebalance-recommendation: cordon}\n";
    const BAD: &str =
        "rules:\n- name: all\n  nodes: {}\n  actions: {rebalance-recommendation: evaporate}\n";

    fn rule_action(p: &Policy) -> Option<String> {
        (p.rule(&Default::default()))
            .and_then(|r| r.actions.get(&EventKind::RebalanceRecommendation))
            .map(|a| a.to_string())
    }

    #[tokio::test]
    async fn a_bad_update_keeps_the_good_policy_and_is_refused_once() {
        let map = Arc::new(Map::default());
        *map.text.lock().unwrap() = Some(GOOD.into());
        let cache = PolicyCache::new(map.clone(), Policy::default(), PolicyAllow::default());
        let clock = ManualClock::at(at("2026-11-24T10:00:00Z"));
        let after = |secs: i64| {
            clock.set(at("2026-11-24T10:00:00Z") + Duration::seconds(secs));
            &clock
        };
        assert_eq!(
            rule_action(&cache.policy(after(0)).await).as_deref(),
            Some("cordon")
        );
        *map.text.lock().unwrap() = Some(BAD.into());
        // Within the minute: not read again.
        cache.policy(after(59)).await;
        assert_eq!(*map.reads.lock().unwrap(), 1);
        let p = cache.policy(after(60)).await;
        assert_eq!(
            rule_action(&p).as_deref(),
            Some("cordon"),
            "the good policy is kept"
        );
        let refused = map.refused.lock().unwrap().clone();
        assert_eq!(refused.len(), 1);
        assert!(
            refused[0].starts_with(
                "policy refused, the last good one is kept: \
                 rules[0].actions.rebalance-recommendation: unknown action \"evaporate\""
            ),
            "{refused:?}"
        );
        // The same bad text read again is not refused again.
        cache.policy(after(120)).await;
        assert_eq!(map.refused.lock().unwrap().len(), 1);
        // Fixed: applied at the next read.
        *map.text.lock().unwrap() = Some(GOOD.replace("cordon", "cordon-for 1h"));
        let p = cache.policy(after(180)).await;
        assert_eq!(rule_action(&p).as_deref(), Some("cordon-for 1h"));
        // Deleted: the settings' policy (none here) applies.
        *map.text.lock().unwrap() = None;
        let p = cache.policy(after(240)).await;
        assert!(p.rules.is_empty());
    }

    #[tokio::test]
    async fn a_bad_policy_at_start_keeps_the_settings_policy() {
        let map = Arc::new(Map::default());
        *map.text.lock().unwrap() = Some(BAD.into());
        let base = Policy::parse(GOOD).unwrap();
        let cache = PolicyCache::new(map.clone(), base.clone(), PolicyAllow::default());
        let clock = ManualClock::at(at("2026-11-24T10:00:00Z"));
        assert_eq!(cache.policy(&clock).await, base);
        assert_eq!(map.refused.lock().unwrap().len(), 1);
    }

    /// A rule asking what the deployment does not allow is refused, naming its field, once; its
    /// nodes keep the defaults while the other rules apply; allowed, the same text applies whole.
    #[tokio::test]
    async fn a_rule_asking_more_than_the_deployment_allows_is_refused_alone() {
        let yaml = "rules:\n\
            - name: web\n  nodes: {pool: web}\n  actions: {spot-interruption: cordon}\n\
            - name: greedy\n  nodes: {pool: batch}\n  actions: {spot-interruption: cordon, rebalance-recommendation: delete}\n";
        let map = Arc::new(Map::default());
        *map.text.lock().unwrap() = Some(yaml.into());
        let cache = PolicyCache::new(map.clone(), Policy::default(), PolicyAllow::default());
        let clock = ManualClock::at(at("2026-11-24T10:00:00Z"));
        let p = cache.policy(&clock).await;
        let of = |pool: &str, kind| {
            let labels = [("pool".to_string(), pool.to_string())].into();
            (p.rule(&labels))
                .and_then(|r| r.actions.get(&kind))
                .map(|a| a.to_string())
        };
        assert_eq!(
            of("web", EventKind::SpotInterruption).as_deref(),
            Some("cordon")
        );
        assert_eq!(of("batch", EventKind::SpotInterruption), None);
        assert_eq!(of("batch", EventKind::RebalanceRecommendation), None);
        let refused = map.refused.lock().unwrap().clone();
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            refused[0].starts_with(
                "rules[1].actions.rebalance-recommendation: rule \"greedy\" asks \"delete\""
            ),
            "{refused:?}"
        );
        // Read again unchanged: not refused again.
        clock.advance(std::time::Duration::from_secs(60));
        cache.policy(&clock).await;
        assert_eq!(map.refused.lock().unwrap().len(), 1);

        // A deployment that allows `delete`: the same text applies whole.
        let cache = PolicyCache::new(
            map.clone(),
            Policy::default(),
            PolicyAllow::parse("cordon delete").unwrap(),
        );
        let p = cache.policy(&clock).await;
        let labels = [("pool".to_string(), "batch".to_string())].into();
        assert_eq!(
            (p.rule(&labels)).and_then(|r| r.actions.get(&EventKind::RebalanceRecommendation)),
            Some(&crate::domain::policy::PolicyAction::Delete)
        );
        assert_eq!(map.refused.lock().unwrap().len(), 1);
    }

    /// An API server that does not answer.
    struct Silent;

    #[async_trait::async_trait]
    impl PolicySource for Silent {
        async fn read(&self) -> Result<PolicyText, PortError> {
            std::future::pending().await
        }
        async fn refused(&self, _: &str) {}
    }

    #[tokio::test]
    async fn a_read_that_does_not_answer_keeps_the_policy_after_its_budget() {
        let base = Policy::parse(GOOD).unwrap();
        let cache = PolicyCache::new(Arc::new(Silent), base.clone(), PolicyAllow::default());
        let clock = ManualClock::at(at("2026-11-24T10:00:00Z"));
        let time_passes = async {
            tokio::task::yield_now().await;
            clock.advance(std::time::Duration::from_secs(2));
        };
        let (policy, ()) = tokio::join!(cache.policy(&clock), time_passes);
        assert_eq!(policy, base);
    }
}
