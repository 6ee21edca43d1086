//! The Cluster Autoscaler's priority expander, fed from the pool table.
//!
//! The expander reads the ConfigMap `cluster-autoscaler-priority-expander` (`kube-system`), data
//! key `priorities`: a YAML map from an integer priority to a list of regular expressions of node
//! group names. For a node group, the highest priority with an expression matching its name (an
//! unanchored match, as Go's `regexp.MatchString`) is its priority.
//!
//! forewarn reads the user's *base* priorities (same format, never written), finds this
//! cluster's node groups ([`node_group`]), computes which are *hot* (enough of their pools are
//! marked unavailable: [`hot_groups`]) and writes priorities ([`demote`]) under which every group
//! keeps its base priority but the hot ones, which go below the lowest base priority. Pure: the
//! adapters read and write; this module decides.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::domain::expander::{ANNOTATION, ExpanderConfig, MANAGED_BY, MANAGED_BY_LABEL};
use crate::domain::pool::{CapacityType, PoolKey, PoolRecord};

/// Priorities as the expander reads them: priority → regular expressions.
pub type PriorityMap = BTreeMap<i64, Vec<String>>;

/// Base priorities that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PriorityError {
    #[error(
        "priorities from {source_name}: not the expander's format (a map of integer priority to a list of regular expressions): {message}"
    )]
    Yaml {
        source_name: String,
        message: String,
    },
    #[error(
        "priorities from {source_name}: priority {priority}: `{expression}` is not a regular expression: {message}"
    )]
    Regex {
        source_name: String,
        priority: i64,
        expression: String,
        message: String,
    },
}

/// Base priorities, parsed and compiled: every priority with at least one expression.
#[derive(Debug, Clone)]
pub struct BasePriorities {
    tiers: BTreeMap<i64, Vec<Regex>>,
}

impl BasePriorities {
    /// Parses the expander's `priorities` YAML; `source_name` names where it came from in errors.
    /// An empty document is no priorities at all.
    pub fn parse(text: &str, source_name: &str) -> Result<BasePriorities, PriorityError> {
        let map: Option<PriorityMap> = match text.trim() {
            "" => None,
            _ => serde_saphyr::from_str(text).map_err(|e| PriorityError::Yaml {
                source_name: source_name.to_string(),
                message: e.to_string(),
            })?,
        };
        let compile = |priority: i64, expression: &String| {
            Regex::new(expression).map_err(|e| PriorityError::Regex {
                source_name: source_name.to_string(),
                priority,
                expression: expression.clone(),
                message: e.to_string(),
            })
        };
        let mut tiers = BTreeMap::new();
        for (p, exprs) in map.unwrap_or_default() {
            if !exprs.is_empty() {
                let res = exprs.iter().map(|e| compile(p, e));
                tiers.insert(p, res.collect::<Result<_, _>>()?);
            }
        }
        Ok(BasePriorities { tiers })
    }

    pub fn is_empty(&self) -> bool {
        self.tiers.is_empty()
    }

    /// The lowest priority of the base.
    pub fn lowest(&self) -> Option<i64> {
        self.tiers.keys().next().copied()
    }

    /// The priority the expander gives `group`: the highest with a matching expression.
    pub fn priority_of(&self, group: &str) -> Option<i64> {
        let mut tiers = self.tiers.iter().rev();
        tiers
            .find(|(_, res)| res.iter().any(|re| re.is_match(group)))
            .map(|(p, _)| *p)
    }

    /// The base as the expander's map.
    pub fn as_map(&self) -> PriorityMap {
        let texts = |res: &Vec<Regex>| res.iter().map(|re| re.as_str().to_string()).collect();
        self.tiers.iter().map(|(p, res)| (*p, texts(res))).collect()
    }
}

/// A node group of the Cluster Autoscaler (an Auto Scaling group).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeGroup {
    pub name: String,
    pub capacity_type: CapacityType,
    pub instance_types: Vec<String>,
    /// Its zones: their IDs where known, else their names (as its pools are keyed).
    pub zones: Vec<String>,
}

impl NodeGroup {
    /// Its pools: every instance type in every zone.
    pub fn pools(&self) -> Vec<PoolKey> {
        let (ct, zones) = (self.capacity_type, &self.zones);
        let pools: BTreeSet<PoolKey> = (self.instance_types.iter())
            .flat_map(|t| zones.iter().map(move |z| PoolKey::new(ct, t, z)))
            .collect();
        pools.into_iter().collect()
    }
}

/// What an Auto Scaling group says of itself, as both the SDK and a capture give it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AsgDescription {
    pub name: String,
    pub tags: BTreeMap<String, String>,
    /// Its zones, by name.
    pub zones: Vec<String>,
    /// The account's zone IDs by zone name, where known: its node group's pools are keyed by
    /// zone ID, as the instances' are.
    pub zone_ids: crate::domain::pool::ZoneIds,
    /// The launch template's (or launch configuration's) instance type, when known.
    pub template_instance_type: Option<String>,
    /// The market the launch template asks for (`InstanceMarketOptions.MarketType`: `spot`,
    /// `capacity-block`; empty for none, on-demand), when known.
    pub template_market: Option<String>,
    /// The mixed instances policy's instance type overrides.
    pub override_types: Vec<String>,
    /// The mixed instances policy's `OnDemandPercentageAboveBaseCapacity`, when there is one
    /// (AWS's default is 100).
    pub on_demand_percentage: Option<i32>,
    /// Whether there is a mixed instances policy at all.
    pub mixed: bool,
}

/// The tag every Cluster Autoscaler node group carries for auto-discovery.
pub const TAG_ENABLED: &str = "k8s.io/cluster-autoscaler/enabled";

/// The node group `asg` is for `cluster`, or `None` when it is not tagged
/// `k8s.io/cluster-autoscaler/enabled` and `k8s.io/cluster-autoscaler/<cluster>`.
pub fn node_group(asg: &AsgDescription, cluster: &str) -> Option<NodeGroup> {
    let cluster_tag = format!("k8s.io/cluster-autoscaler/{cluster}");
    if !asg.tags.contains_key(TAG_ENABLED) || !asg.tags.contains_key(&cluster_tag) {
        return None;
    }
    let capacity_type = match (asg.mixed, asg.template_market.as_deref()) {
        (true, _) if asg.on_demand_percentage.unwrap_or(100) == 0 => CapacityType::Spot,
        (true, _) => CapacityType::OnDemand,
        (false, Some("spot")) => CapacityType::Spot,
        // A Capacity Block's group: demoted when its block expires, so that the autoscaler
        // starts the replacements on another group at once.
        (false, Some("capacity-block")) => CapacityType::CapacityBlock,
        (false, _) => CapacityType::OnDemand,
    };
    let types = match asg.override_types.is_empty() {
        true => asg.template_instance_type.iter().collect::<BTreeSet<_>>(),
        false => asg.override_types.iter().collect(),
    };
    let zones: BTreeSet<&String> = asg
        .zones
        .iter()
        .map(|z| asg.zone_ids.get(z).unwrap_or(z))
        .collect();
    Some(NodeGroup {
        name: asg.name.clone(),
        capacity_type,
        instance_types: types.into_iter().cloned().collect(),
        zones: zones.into_iter().cloned().collect(),
    })
}

/// Text that is not a [`HotShare`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadShare {
    #[error("`{0}` is not a share (e.g. 1, 0.5 or 50%)")]
    NotANumber(String),
    #[error("`{0}` is not a share in (0, 1] (e.g. 1, 0.5 or 50%)")]
    OutOfRange(String),
}

/// The share of a group's pools that must be unavailable for it to be hot, in (0, 1].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HotShare(f64);

impl HotShare {
    /// Every pool (the default).
    pub const ALL: HotShare = HotShare(1.0);

    /// `share` as a fraction (`0.5`) or a percentage (`50%`).
    pub fn parse(text: &str) -> Result<HotShare, BadShare> {
        let t = text.trim();
        let value = match t.strip_suffix('%') {
            Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
            None => t.parse::<f64>(),
        }
        .map_err(|_| BadShare::NotANumber(t.to_string()))?;
        if value > 0.0 && value <= 1.0 {
            Ok(HotShare(value))
        } else {
            Err(BadShare::OutOfRange(t.to_string()))
        }
    }

    /// How many of `total` pools must be unavailable.
    pub fn needed(self, total: usize) -> usize {
        ((self.0 * total as f64) - 1e-9).ceil().max(1.0) as usize
    }
}

impl Default for HotShare {
    fn default() -> Self {
        HotShare::ALL
    }
}

/// A group enough of whose pools are unavailable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotGroup {
    pub group: String,
    /// Its unavailable pools (`capacity#type#zone`).
    pub pools: Vec<String>,
    /// How many pools it has.
    pub of: usize,
    /// Until when it stays hot, unless further pools are marked.
    pub until: DateTime<Utc>,
}

/// The hot groups among `groups` at `now`, by name.
pub fn hot_groups(
    groups: &[NodeGroup],
    records: &[PoolRecord],
    share: HotShare,
    now: DateTime<Utc>,
) -> Vec<HotGroup> {
    let until: BTreeMap<&PoolKey, DateTime<Utc>> = records
        .iter()
        .filter(|r| r.is_unavailable(now))
        .filter_map(|r| r.unavailable_until.map(|u| (&r.pool, u)))
        .collect();
    let mut hot = Vec::new();
    for g in groups {
        let pools = g.pools();
        let mut down: Vec<(DateTime<Utc>, String)> = pools
            .iter()
            .filter_map(|p| until.get(p).map(|u| (*u, p.to_string())))
            .collect();
        let needed = share.needed(pools.len()); // at least 1: a group without pools is never hot
        if down.len() < needed {
            continue;
        }
        down.sort();
        // It stays hot until so many windows have ended that fewer than `needed` remain.
        let ends = down[down.len() - needed].0;
        let names: BTreeSet<String> = down.into_iter().map(|(_, p)| p).collect();
        hot.push(HotGroup {
            group: g.name.clone(),
            pools: names.into_iter().collect(),
            of: pools.len(),
            until: ends,
        });
    }
    hot.sort_by(|a, b| a.group.cmp(&b.group));
    hot
}

/// `^name$` with the name's metacharacters escaped.
pub fn exact(name: &str) -> String {
    format!("^{}$", regex::escape(name))
}

/// What forewarn wrote and why: the annotation's JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Demotion {
    /// The priority the demoted groups were given.
    pub priority: Option<i64>,
    pub groups: Vec<HotGroup>,
    /// Hot groups the base gives no priority: left alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unranked: Vec<String>,
}

/// The priorities to write: the base with every hot group that has a base priority moved below
/// the lowest base priority. Expressions matching no hot group stay as they are; those matching
/// one are replaced by the exact names of the known groups they match that are not hot, so that
/// every other group keeps its priority under the expander's rule. With no hot group: the base.
pub fn demote(
    base: &BasePriorities,
    groups: &[NodeGroup],
    hot: &[HotGroup],
) -> (PriorityMap, Demotion) {
    let hot_names: BTreeSet<&str> = hot
        .iter()
        .map(|h| h.group.as_str())
        .filter(|g| base.priority_of(g).is_some())
        .collect();
    let unranked: Vec<String> = hot
        .iter()
        .filter(|h| !hot_names.contains(h.group.as_str()))
        .map(|h| h.group.clone())
        .collect();
    let (Some(lowest), false) = (base.lowest(), hot_names.is_empty()) else {
        return (
            base.as_map(),
            Demotion {
                unranked,
                ..Demotion::default()
            },
        );
    };
    let mut out = PriorityMap::new();
    for (priority, exprs) in &base.tiers {
        let mut kept: Vec<String> = Vec::new();
        for re in exprs {
            if hot_names.iter().any(|h| re.is_match(h)) {
                let cool = groups
                    .iter()
                    .filter(|g| !hot_names.contains(g.name.as_str()));
                kept.extend(
                    cool.filter(|g| re.is_match(&g.name))
                        .map(|g| exact(&g.name)),
                );
            } else {
                kept.push(re.as_str().to_string());
            }
        }
        let mut seen = BTreeSet::new();
        kept.retain(|e| seen.insert(e.clone()));
        if !kept.is_empty() {
            out.insert(*priority, kept);
        }
    }
    let demoted = lowest.saturating_sub(1);
    out.insert(demoted, hot_names.iter().map(|h| exact(h)).collect());
    let groups = hot
        .iter()
        .filter(|h| hot_names.contains(h.group.as_str()))
        .cloned()
        .collect();
    (
        out,
        Demotion {
            priority: Some(demoted),
            groups,
            unranked,
        },
    )
}

/// A priority map in the expander's order of reading: highest priority first.
struct HighestFirst<'a>(&'a PriorityMap);

impl Serialize for HighestFirst<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().rev())
    }
}

/// The `priorities` text: a YAML map of priority to its list of expressions, highest first.
pub fn render(map: &PriorityMap) -> String {
    if map.is_empty() {
        return String::new();
    }
    serde_saphyr::to_string(&HighestFirst(map)).expect("priorities are numbers and strings")
}

impl ExpanderConfig {
    /// What forewarn writes for `map` and `demotion`.
    pub fn new(map: &PriorityMap, demotion: &Demotion) -> ExpanderConfig {
        let annotation = serde_json::to_string(demotion).unwrap_or_default();
        ExpanderConfig {
            priorities: render(map),
            labels: BTreeMap::from([(MANAGED_BY_LABEL.into(), MANAGED_BY.into())]),
            annotations: BTreeMap::from([(ANNOTATION.into(), annotation)]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    fn group(name: &str, ct: CapacityType, types: &[&str], zones: &[&str]) -> NodeGroup {
        NodeGroup {
            name: name.into(),
            capacity_type: ct,
            instance_types: types.iter().map(|s| s.to_string()).collect(),
            zones: zones.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn record(pool: &str, until: DateTime<Utc>, now: DateTime<Utc>) -> PoolRecord {
        PoolRecord {
            pool: pool.parse().unwrap(),
            region: None,
            unavailable_until: Some(until),
            expires_at: now + Duration::days(30),
            counters: BTreeMap::new(),
            first_seen: now,
            last_seen: now,
            last_event_id: "e".into(),
            last_reason: "r".into(),
            last_instance_id: "i".into(),
        }
    }

    fn groups() -> Vec<NodeGroup> {
        use CapacityType::*;
        vec![
            group("spot-a", Spot, &["m5.large", "m5a.large"], &["us-east-1a"]),
            group("spot-b", Spot, &["m5.large"], &["us-east-1b"]),
            group("on-demand-1", OnDemand, &["m5.large"], &["us-east-1a"]),
            group("gpu-spot", Spot, &["g5.xlarge"], &["us-east-1a"]),
        ]
    }

    const BASE: &str = "50:\n  - '.*spot.*'\n10: ['.*on-demand.*']\n";

    #[test]
    fn parses_the_expander_format_and_names_the_source_of_errors() {
        let b = BasePriorities::parse(BASE, "file b.yaml").unwrap();
        assert_eq!(b.lowest(), Some(10));
        assert_eq!(b.priority_of("spot-a"), Some(50));
        assert_eq!(b.priority_of("x-on-demand"), Some(10));
        assert_eq!(b.priority_of("other"), None);
        assert!(BasePriorities::parse("", "x").unwrap().is_empty());
        let e = BasePriorities::parse("high: [a]", "file b.yaml").unwrap_err();
        assert!(e.to_string().contains("file b.yaml"), "{e}");
        let e = BasePriorities::parse("5: ['(']", "cm").unwrap_err();
        assert!(matches!(e, PriorityError::Regex { priority: 5, .. }), "{e}");
        assert!(BasePriorities::parse("5: a", "cm").is_err());
    }

    #[test]
    fn capacity_type_and_types_from_the_asg() {
        let mut tags = BTreeMap::new();
        tags.insert(TAG_ENABLED.to_string(), "true".to_string());
        tags.insert("k8s.io/cluster-autoscaler/demo".to_string(), "owned".into());
        let mixed = AsgDescription {
            name: "g".into(),
            tags: tags.clone(),
            zones: vec!["b".into(), "a".into()],
            override_types: vec!["m5.large".into(), "c5.large".into()],
            on_demand_percentage: Some(0),
            mixed: true,
            ..AsgDescription::default()
        };
        let g = node_group(&mixed, "demo").unwrap();
        assert_eq!(g.capacity_type, CapacityType::Spot);
        assert_eq!(g.instance_types, vec!["c5.large", "m5.large"]);
        assert_eq!(g.zones, vec!["a", "b"]);
        assert_eq!(g.pools().len(), 4);
        assert!(node_group(&mixed, "other").is_none());
        let od = AsgDescription {
            on_demand_percentage: None,
            ..mixed.clone()
        };
        assert_eq!(
            node_group(&od, "demo").unwrap().capacity_type,
            CapacityType::OnDemand
        );
        let lt = AsgDescription {
            name: "lt".into(),
            tags,
            zones: vec!["a".into()],
            template_instance_type: Some("m5.large".into()),
            template_market: Some("spot".into()),
            ..AsgDescription::default()
        };
        let g = node_group(&lt, "demo").unwrap();
        assert_eq!(g.capacity_type, CapacityType::Spot);
        assert_eq!(g.instance_types, vec!["m5.large"]);
        let block = AsgDescription {
            template_market: Some("capacity-block".into()),
            template_instance_type: Some("p5.48xlarge".into()),
            ..lt
        };
        let g = node_group(&block, "demo").unwrap();
        assert_eq!(g.capacity_type, CapacityType::CapacityBlock);
    }

    #[test]
    fn hot_share_thresholds() {
        assert_eq!(HotShare::ALL.needed(4), 4);
        assert_eq!(HotShare::parse("50%").unwrap().needed(4), 2);
        assert_eq!(HotShare::parse("0.5").unwrap().needed(3), 2);
        assert_eq!(HotShare::parse("0.01").unwrap().needed(3), 1);
        assert_eq!(HotShare::parse("0"), Err(BadShare::OutOfRange("0".into())));
        assert!(HotShare::parse("1.5").is_err());
        assert_eq!(
            HotShare::parse(" most ").unwrap_err().to_string(),
            "`most` is not a share (e.g. 1, 0.5 or 50%)"
        );
    }

    #[test]
    fn hot_when_enough_pools_are_down_until_the_deciding_window_ends() {
        let now = Utc::now();
        let (t1, t2) = (now + Duration::minutes(10), now + Duration::minutes(20));
        let records = vec![
            record("spot#m5.large#us-east-1a", t2, now),
            record("spot#m5a.large#us-east-1a", t1, now),
            record("on-demand#g5.xlarge#us-east-1a", t2, now),
            record("spot#m5.large#us-east-1b", now - Duration::minutes(1), now),
        ];
        let hot = hot_groups(&groups(), &records, HotShare::ALL, now);
        assert_eq!(hot.len(), 1);
        assert_eq!(hot[0].group, "spot-a");
        assert_eq!(hot[0].until, t1);
        assert_eq!(hot[0].of, 2);
        let half = hot_groups(&groups(), &records, HotShare::parse("50%").unwrap(), now);
        assert_eq!(half[0].until, t2, "hot while one of two pools is down");
        // on-demand group: only on-demand pools count
        assert!(!half.iter().any(|h| h.group == "on-demand-1"));
        assert!(hot_groups(&groups(), &records, HotShare::ALL, t1).is_empty());
    }

    #[test]
    fn demotion_keeps_every_other_group_at_its_base_priority() {
        let base = BasePriorities::parse(BASE, "base").unwrap();
        let now = Utc::now();
        let hot = vec![HotGroup {
            group: "spot-a".into(),
            pools: vec![],
            of: 2,
            until: now,
        }];
        let gs = groups();
        let (map, demotion) = demote(&base, &gs, &hot);
        let written = BasePriorities::parse(&render(&map), "written").unwrap();
        assert_eq!(demotion.priority, Some(9));
        assert_eq!(map[&9], vec!["^spot\\-a$"]);
        assert_eq!(map[&10], vec![".*on-demand.*"]);
        assert_eq!(map[&50], vec!["^spot\\-b$", "^gpu\\-spot$"]);
        for g in &gs {
            let want = if g.name == "spot-a" {
                Some(9)
            } else {
                base.priority_of(&g.name)
            };
            assert_eq!(written.priority_of(&g.name), want, "{}", g.name);
        }
        // Nothing hot: the base itself.
        let (map, d) = demote(&base, &gs, &[]);
        assert_eq!(map, base.as_map());
        assert_eq!(d.priority, None);
        // A hot group without a base priority is left alone.
        let stray = vec![HotGroup {
            group: "stray".into(),
            ..hot[0].clone()
        }];
        let (map, d) = demote(&base, &gs, &stray);
        assert_eq!(map, base.as_map());
        assert_eq!(d.unranked, vec!["stray"]);
    }

    #[test]
    fn rendering_round_trips_and_documents_are_complete() {
        let base = BasePriorities::parse(BASE, "base").unwrap();
        let hot = vec![HotGroup {
            group: "spot-b".into(),
            pools: vec!["spot#m5.large#us-east-1b".into()],
            of: 1,
            until: Utc::now(),
        }];
        let (map, demotion) = demote(&base, &groups(), &hot);
        let text = render(&map);
        let back = BasePriorities::parse(&text, "rendered").unwrap();
        assert_eq!(back.as_map(), map);
        let cfg = ExpanderConfig::new(&map, &demotion);
        assert!(cfg.owned());
        assert!(!cfg.differs_from(&cfg));
        let doc: serde_json::Value = serde_saphyr::from_str(&cfg.yaml()).unwrap();
        assert_eq!(doc, cfg.document());
        assert!(cfg.yaml().starts_with("apiVersion: v1\nkind: ConfigMap\n"));
        // Expressions YAML would read otherwise, a long one and a negative priority.
        let odd: PriorityMap = [
            (
                -5,
                vec!["&a".to_string(), "# x".into(), "a: b".into(), "it's".into()],
            ),
            (
                7,
                vec![format!("^{}$", "long-group-name-".repeat(8)), "yes".into()],
            ),
            (10, vec!["[a-z]+\\-\"q\"".into()]),
        ]
        .into_iter()
        .collect();
        let text = render(&odd);
        assert!(text.starts_with("10:\n"), "highest first: {text}");
        let back = BasePriorities::parse(&text, "rendered").unwrap();
        assert_eq!(back.as_map(), odd, "{text}");
        assert_eq!(render(&PriorityMap::new()), "");
    }
}
