//! Configuration, read from environment variables (documented in the README).

use std::collections::{BTreeMap, BTreeSet};

use chrono::Duration;
use serde::{Deserialize, Serialize};

use crate::domain::event::EventKind;
use crate::domain::names::string_forms;

/// What to do with the node of an affected instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(strum::IntoStaticStr, strum::Display, strum::VariantArray)]
#[strum(serialize_all = "kebab-case")]
pub enum Action {
    None,
    Cordon,
    CordonDrain,
    /// Delete the owner object (NodeClaim, Machine) when there is one, else the Node.
    Delete,
}

string_forms!(Action, "an action", trim);

/// The taint effect forewarn puts on cordoned nodes.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

string_forms!(TaintEffect, "a taint effect", trim);

/// A bad configuration value: which variable, what value, what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("configuration {variable}={value:?}: {message}")]
pub struct ConfigError {
    pub variable: String,
    pub value: String,
    pub message: String,
}

/// forewarn's configuration. [`Config::default`] is the documented default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The cluster forewarn acts for; instances tagged for another cluster are never touched.
    pub cluster_name: Option<String>,
    /// The node action per event kind.
    pub actions: BTreeMap<EventKind, Action>,
    /// Kinds for which a node owned by a Karpenter NodeClaim or a Cluster API Machine is
    /// deleted (through its owner) instead of getting the kind's action.
    pub delete_owned_on: BTreeSet<EventKind>,
    /// Kinds that mark their pool unavailable (every kind counts in the pool's history).
    pub unavailable_kinds: BTreeSet<EventKind>,
    /// How long a pool stays unavailable after an event.
    pub pool_ttl: Duration,
    pub taint_key: String,
    pub taint_effect: TaintEffect,
    /// Label cordoned nodes with `node.kubernetes.io/exclude-from-external-load-balancers`.
    pub exclude_from_load_balancers: bool,
    /// The warning a spot or reservation interruption gives before the instance goes.
    pub interruption_notice: Duration,
    /// Drains must end this long before the instance goes.
    pub deadline_margin: Duration,
    /// Drain deadline for events that give no time (rebalance, ASG lifecycle, Health without a
    /// start time): the event time plus this.
    pub drain_timeout: Duration,
    /// Complete the ASG lifecycle action after the drain.
    pub complete_lifecycle_action: bool,
    /// The lifecycle hooks forewarn answers (by hook name); `None`: any hook of this cluster's
    /// instances.
    pub lifecycle_hooks: Option<BTreeSet<String>>,
}

/// The variables [`Config::from_lookup`] reads (`FOREWARN_ACTION_` stands for one per kind).
pub const VARIABLES: &[&str] = &[
    "FOREWARN_CLUSTER_NAME",
    "FOREWARN_ACTION_",
    "FOREWARN_DELETE_OWNED_ON",
    "FOREWARN_UNAVAILABLE_KINDS",
    "FOREWARN_POOL_TTL",
    "FOREWARN_TAINT_KEY",
    "FOREWARN_TAINT_EFFECT",
    "FOREWARN_EXCLUDE_FROM_LB",
    "FOREWARN_INTERRUPTION_NOTICE",
    "FOREWARN_DEADLINE_MARGIN",
    "FOREWARN_DRAIN_TIMEOUT",
    "FOREWARN_COMPLETE_LIFECYCLE_ACTION",
    "FOREWARN_LIFECYCLE_HOOKS",
];

/// What a run may change: the one switch behind "dry run", wherever it is set
/// (`FOREWARN_DRY_RUN`, `forewarn replay` without `--execute`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Decide and record the pools; no node action is carried out or tried (captured state, a
    /// local replay). Events are `planned`.
    Plan,
    /// Read everything live, decide, and report what would be done; write nothing anywhere
    /// (neither the cluster nor the pool store). Events are `planned`.
    DryRun,
    /// Carry everything out. Events are `acted` when a cluster was acted on.
    Act,
}

impl Mode {
    /// Writes are allowed: to the pool store, and (in `Act`) to the cluster.
    pub fn writes_store(self) -> bool {
        self != Mode::DryRun
    }

    /// Node actions are tried (for real in `Act`, read-only in `DryRun`).
    pub fn runs_actions(self) -> bool {
        self != Mode::Plan
    }

    /// Node actions change the cluster.
    pub fn writes_cluster(self) -> bool {
        self == Mode::Act
    }
}

pub const TAINT_KEY: &str = "forewarn.io/interruption";
pub const LABEL_EXCLUDE_LB: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

impl Default for Config {
    fn default() -> Self {
        Config {
            cluster_name: None,
            actions: BTreeMap::from([
                (EventKind::SpotInterruption, Action::CordonDrain),
                (EventKind::RebalanceRecommendation, Action::Cordon),
                (EventKind::StateChange, Action::Delete),
                (EventKind::ScheduledChange, Action::CordonDrain),
                (EventKind::AsgTermination, Action::CordonDrain),
                (
                    EventKind::CapacityReservationInterruption,
                    Action::CordonDrain,
                ),
                (EventKind::Unsupported, Action::None),
            ]),
            delete_owned_on: BTreeSet::from([EventKind::SpotInterruption]),
            unavailable_kinds: BTreeSet::from([
                EventKind::SpotInterruption,
                EventKind::CapacityReservationInterruption,
            ]),
            pool_ttl: Duration::hours(1),
            taint_key: TAINT_KEY.to_string(),
            taint_effect: TaintEffect::NoSchedule,
            exclude_from_load_balancers: true,
            interruption_notice: Duration::seconds(120),
            deadline_margin: Duration::seconds(15),
            drain_timeout: Duration::minutes(5),
            complete_lifecycle_action: true,
            lifecycle_hooks: None,
        }
    }
}

impl Config {
    /// Reads the configuration through `lookup`, which stands for the environment (the
    /// settings, `crate::app::settings`, pass the process's).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let bad = |variable: &str, value: &str, message: String| ConfigError {
            variable: variable.to_string(),
            value: value.to_string(),
            message,
        };
        if let Some(v) = get("FOREWARN_CLUSTER_NAME") {
            config.cluster_name = Some(v.trim().to_string());
        }
        for kind in EventKind::ALL {
            if kind == EventKind::Unsupported {
                continue;
            }
            let name = format!(
                "FOREWARN_ACTION_{}",
                kind.as_str().replace('-', "_").to_uppercase()
            );
            if let Some(v) = get(&name) {
                let action = v.parse().map_err(|m| bad(&name, &v, m))?;
                config.actions.insert(kind, action);
            }
        }
        let kinds = |name: &str, v: &str| -> Result<BTreeSet<EventKind>, ConfigError> {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| {
                    EventKind::from_name(s)
                        .filter(|k| *k != EventKind::Unsupported)
                        .ok_or_else(|| bad(name, v, format!("`{s}` is not an event kind")))
                })
                .collect()
        };
        if let Some(v) = lookup("FOREWARN_DELETE_OWNED_ON") {
            config.delete_owned_on = kinds("FOREWARN_DELETE_OWNED_ON", &v)?;
        }
        if let Some(v) = lookup("FOREWARN_UNAVAILABLE_KINDS") {
            config.unavailable_kinds = kinds("FOREWARN_UNAVAILABLE_KINDS", &v)?;
        }
        let duration = |name: &str, target: &mut Duration| -> Result<(), ConfigError> {
            if let Some(v) = get(name) {
                *target = parse_duration(&v).map_err(|m| bad(name, &v, m))?;
            }
            Ok(())
        };
        duration("FOREWARN_POOL_TTL", &mut config.pool_ttl)?;
        duration(
            "FOREWARN_INTERRUPTION_NOTICE",
            &mut config.interruption_notice,
        )?;
        duration("FOREWARN_DEADLINE_MARGIN", &mut config.deadline_margin)?;
        duration("FOREWARN_DRAIN_TIMEOUT", &mut config.drain_timeout)?;
        if let Some(v) = get("FOREWARN_TAINT_KEY") {
            config.taint_key = v.trim().to_string();
        }
        if let Some(v) = get("FOREWARN_TAINT_EFFECT") {
            config.taint_effect = v.parse().map_err(|m| bad("FOREWARN_TAINT_EFFECT", &v, m))?;
        }
        let flag = |name: &str, target: &mut bool| -> Result<(), ConfigError> {
            if let Some(v) = get(name) {
                *target = parse_bool(&v).map_err(|m| bad(name, &v, m))?;
            }
            Ok(())
        };
        flag(
            "FOREWARN_EXCLUDE_FROM_LB",
            &mut config.exclude_from_load_balancers,
        )?;
        flag(
            "FOREWARN_COMPLETE_LIFECYCLE_ACTION",
            &mut config.complete_lifecycle_action,
        )?;
        if let Some(v) = get("FOREWARN_LIFECYCLE_HOOKS") {
            let hooks: BTreeSet<String> = v
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .map(str::to_string)
                .collect();
            if let Some(bad_name) = hooks.iter().find(|h| !is_hook_name(h)) {
                return Err(bad(
                    "FOREWARN_LIFECYCLE_HOOKS",
                    &v,
                    format!(
                        "`{bad_name}` is not a lifecycle hook name (1 to 255 letters, digits, \
                         '-', '_' or '/')"
                    ),
                ));
            }
            config.lifecycle_hooks = (!hooks.is_empty()).then_some(hooks);
        }
        Ok(config)
    }

    /// The configured action for a kind.
    pub fn action(&self, kind: EventKind) -> Action {
        self.actions.get(&kind).copied().unwrap_or(Action::None)
    }
}

/// An Auto Scaling lifecycle hook name: 1 to 255 of `[A-Za-z0-9-_/]`.
fn is_hook_name(name: &str) -> bool {
    (1..=255).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '/'))
}

/// Parses `90`, `90s`, `15m`, `1h`, `1h30m`, `2d`: at most 10 years
/// ([`crate::domain::time::SANE_YEARS`]), so that a time plus a configured duration cannot
/// overflow. An error names the value.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let err = || format!("`{s}` is not a duration (e.g. 90s, 15m, 1h, 1h30m)");
    if s.is_empty() {
        return Err(err());
    }
    let total: i64 = if let Ok(secs) = s.parse::<i64>() {
        secs
    } else {
        let mut total: i64 = 0;
        let mut number = String::new();
        for c in s.chars() {
            if c.is_ascii_digit() {
                number.push(c);
                continue;
            }
            let n: i64 = number.parse().map_err(|_| err())?;
            number.clear();
            let unit = match c {
                's' => 1,
                'm' => 60,
                'h' => 3600,
                'd' => 86400,
                _ => return Err(err()),
            };
            total = n
                .checked_mul(unit)
                .and_then(|x| total.checked_add(x))
                .ok_or_else(|| too_long(s))?;
        }
        if !number.is_empty() {
            return Err(err());
        }
        total
    };
    if total < 0 {
        return Err(err());
    }
    // `try_seconds` refuses what a `Duration` cannot hold (more than i64::MAX milliseconds),
    // where `Duration::seconds` would panic.
    let d = Duration::try_seconds(total).ok_or_else(|| too_long(s))?;
    crate::domain::time::sane_duration(d).map_err(|_| too_long(s))
}

fn too_long(s: &str) -> String {
    format!(
        "`{s}` is longer than {} years, the longest duration taken",
        crate::domain::time::SANE_YEARS
    )
}

fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(format!("`{s}` is not a boolean (true or false)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn lifecycle_hooks_are_a_list_of_names() {
        let config = |v: &str| {
            let v = v.to_string();
            Config::from_lookup(move |n| (n == "FOREWARN_LIFECYCLE_HOOKS").then(|| v.clone()))
        };
        assert_eq!(config("").unwrap().lifecycle_hooks, None);
        assert_eq!(
            config(" forewarn-drain, other ,").unwrap().lifecycle_hooks,
            Some(["forewarn-drain".to_string(), "other".to_string()].into())
        );
        let e = config("ok,bad name").unwrap_err();
        assert_eq!(e.variable, "FOREWARN_LIFECYCLE_HOOKS");
        assert!(e.message.contains("`bad name`"), "{}", e.message);
    }

    #[test]
    fn defaults() {
        let c = from(&[]).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.action(EventKind::SpotInterruption), Action::CordonDrain);
        assert_eq!(c.action(EventKind::RebalanceRecommendation), Action::Cordon);
        assert_eq!(c.action(EventKind::StateChange), Action::Delete);
        assert_eq!(c.pool_ttl, Duration::hours(1));
    }

    #[test]
    fn overrides() {
        let c = from(&[
            ("FOREWARN_CLUSTER_NAME", "demo"),
            ("FOREWARN_ACTION_REBALANCE_RECOMMENDATION", "cordon-drain"),
            ("FOREWARN_POOL_TTL", "1h30m"),
            (
                "FOREWARN_UNAVAILABLE_KINDS",
                "spot-interruption, rebalance-recommendation",
            ),
            ("FOREWARN_DELETE_OWNED_ON", ""),
            ("FOREWARN_TAINT_EFFECT", "NoExecute"),
            ("FOREWARN_EXCLUDE_FROM_LB", "false"),
        ])
        .unwrap();
        assert_eq!(c.cluster_name.as_deref(), Some("demo"));
        assert_eq!(
            c.action(EventKind::RebalanceRecommendation),
            Action::CordonDrain
        );
        assert_eq!(c.pool_ttl, Duration::minutes(90));
        assert!(
            c.unavailable_kinds
                .contains(&EventKind::RebalanceRecommendation)
        );
        assert!(c.delete_owned_on.is_empty());
        assert_eq!(c.taint_effect, TaintEffect::NoExecute);
        assert!(!c.exclude_from_load_balancers);
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = from(&[("FOREWARN_ACTION_SPOT_INTERRUPTION", "evict")]).unwrap_err();
        assert_eq!(e.variable, "FOREWARN_ACTION_SPOT_INTERRUPTION");
        assert!(e.to_string().contains("`evict` is not an action"), "{e}");
        let e = from(&[("FOREWARN_POOL_TTL", "an hour")]).unwrap_err();
        assert_eq!(e.variable, "FOREWARN_POOL_TTL");
        let e = from(&[("FOREWARN_UNAVAILABLE_KINDS", "spot")]).unwrap_err();
        assert!(e.message.contains("`spot` is not an event kind"));
        let e = from(&[("FOREWARN_EXCLUDE_FROM_LB", "maybe")]).unwrap_err();
        assert_eq!(e.variable, "FOREWARN_EXCLUDE_FROM_LB");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90").unwrap(), Duration::seconds(90));
        assert_eq!(parse_duration("15m").unwrap(), Duration::minutes(15));
        assert_eq!(parse_duration("2d").unwrap(), Duration::days(2));
        for bad in ["", "m", "1x", "-5", "1h30", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_duration("3650d").unwrap(), Duration::days(3650));
    }

    #[test]
    fn huge_durations_are_errors_naming_the_value_not_panics() {
        // Found in review: a whole number of seconds past i64::MAX / 1000 panicked.
        for huge in [
            "9223372036854775807",
            "9223372036854776",
            "9223372036854775807s",
            "106751991167301d",
            "3654d",
            "315619201",
            "1d9223372036854775807s",
        ] {
            let e = parse_duration(huge).unwrap_err();
            assert_eq!(
                e,
                format!("`{huge}` is longer than 10 years, the longest duration taken")
            );
        }
        let e = from(&[("FOREWARN_DRAIN_TIMEOUT", "9223372036854775807")]).unwrap_err();
        assert_eq!(e.variable, "FOREWARN_DRAIN_TIMEOUT");
        assert!(
            e.to_string()
                .contains("`9223372036854775807` is longer than 10 years"),
            "{e}"
        );
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn parse_duration_never_panics_and_stays_sane(
                s in prop_oneof![
                    "[0-9]{0,22}",
                    "([0-9]{0,20}[smhd]){0,4}",
                    any::<i64>().prop_map(|n| n.to_string()),
                    ".{0,24}",
                ]
            ) {
                if let Ok(d) = parse_duration(&s) {
                    prop_assert!(d >= Duration::zero());
                    prop_assert!(d <= crate::domain::time::sane_span());
                }
            }
        }
    }
}
