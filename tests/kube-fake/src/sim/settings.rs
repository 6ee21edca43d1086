//! The simulation's settings, given to [`crate::KubeFakeBuilder`].

use std::collections::BTreeMap;
use std::time::Duration;

/// The scheduler model ([`crate::KubeFakeBuilder::scheduler`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerSettings {
    /// How long a bound pod stays `Pending` on its node before it is `Running` and `Ready`
    /// (the kubelet pulling images and starting containers). Default zero.
    pub start_delay: Duration,
    /// Priority preemption (the `DefaultPreemption` plugin). Default on.
    pub preemption: bool,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        Self {
            start_delay: Duration::ZERO,
            preemption: true,
        }
    }
}

impl SchedulerSettings {
    /// Sets [`SchedulerSettings::start_delay`].
    pub fn start_delay(mut self, delay: Duration) -> Self {
        self.start_delay = delay;
        self
    }

    /// Sets [`SchedulerSettings::preemption`].
    pub fn preemption(mut self, on: bool) -> Self {
        self.preemption = on;
        self
    }
}

/// One node group of the autoscaler model: the template its nodes are made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGroup {
    /// The group's name; its nodes are `<name>-<n>`.
    pub name: String,
    /// The nodes' labels (`kubernetes.io/hostname` is added). A `topology.kubernetes.io/zone`
    /// label is also the zone of the nodes' `providerID` (else `us-east-1a`).
    pub labels: BTreeMap<String, String>,
    /// The nodes' taints: key, value, effect.
    pub taints: Vec<(String, String, String)>,
    /// The nodes' allocatable (and capacity) resources, as quantities (`cpu: "4"`).
    pub allocatable: BTreeMap<String, String>,
    /// How many nodes the group may launch in all (none: no limit).
    pub max_size: Option<usize>,
}

impl NodeGroup {
    /// A group whose nodes have 4 cpus, 16Gi of memory and room for 110 pods (change them
    /// with [`NodeGroup::allocatable`]).
    pub fn new(name: impl Into<String>) -> Self {
        let allocatable = [("cpu", "4"), ("memory", "16Gi"), ("pods", "110")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Self {
            name: name.into(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            allocatable,
            max_size: None,
        }
    }

    /// Adds a label.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Adds a taint (`effect`: `NoSchedule`, `PreferNoSchedule` or `NoExecute`).
    pub fn taint(
        mut self,
        key: impl Into<String>,
        value: impl Into<String>,
        effect: impl Into<String>,
    ) -> Self {
        self.taints.push((key.into(), value.into(), effect.into()));
        self
    }

    /// Sets one allocatable resource (`"cpu"`, `"2"`).
    pub fn allocatable(mut self, resource: impl Into<String>, quantity: impl Into<String>) -> Self {
        self.allocatable.insert(resource.into(), quantity.into());
        self
    }

    /// Sets [`NodeGroup::max_size`].
    pub fn max_size(mut self, max: usize) -> Self {
        self.max_size = Some(max);
        self
    }
}

/// The Cluster Autoscaler model ([`crate::KubeFakeBuilder::autoscaler`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoscalerSettings {
    /// The node groups, in the order a scale-up considers them.
    pub groups: Vec<NodeGroup>,
    /// From the decision to scale up to the node being Ready. Default 60 s.
    pub launch_delay: Duration,
    /// Pods of a lower priority never trigger a scale-up (CA's
    /// `--expendable-pods-priority-cutoff`). Default -10.
    pub expendable_priority_cutoff: i32,
}

impl Default for AutoscalerSettings {
    fn default() -> Self {
        Self {
            groups: Vec::new(),
            launch_delay: Duration::from_secs(60),
            expendable_priority_cutoff: -10,
        }
    }
}

impl AutoscalerSettings {
    /// Adds a node group.
    pub fn group(mut self, group: NodeGroup) -> Self {
        self.groups.push(group);
        self
    }

    /// Sets [`AutoscalerSettings::launch_delay`].
    pub fn launch_delay(mut self, delay: Duration) -> Self {
        self.launch_delay = delay;
        self
    }

    /// Sets [`AutoscalerSettings::expendable_priority_cutoff`].
    pub fn expendable_priority_cutoff(mut self, cutoff: i32) -> Self {
        self.expendable_priority_cutoff = cutoff;
        self
    }
}

/// Everything the builder was given; the simulation runs when any part is on.
#[derive(Debug, Clone, Default)]
pub(crate) struct SimSettings {
    pub scheduler: Option<SchedulerSettings>,
    pub replicasets: bool,
    pub autoscaler: Option<AutoscalerSettings>,
}

impl SimSettings {
    pub fn enabled(&self) -> bool {
        self.scheduler.is_some() || self.replicasets || self.autoscaler.is_some()
    }
}
