//! What a benchmark reads back: when each pod served, and the nodes the autoscaler added.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::cluster::{PodEntry, PodKey};

/// The life of one pod (one uid), on the fake's clock ([`crate::KubeFake::pod_timeline`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodTimeline {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The controller, as `<Kind>/<name>` (e.g. `ReplicaSet/web-7d4`).
    pub owner: Option<String>,
    /// The node it was bound to, if ever.
    pub node: Option<String>,
    /// When the fake first saw it (created or seeded).
    pub created_at: DateTime<Utc>,
    /// When it was first seen in phase `Running` (the moment the scheduler model starts it, or
    /// a seeded running pod's arrival).
    pub running_at: Option<DateTime<Utc>>,
    /// When it stopped serving: its deletion started (`deletionTimestamp`), it was deleted, or
    /// it turned `Succeeded`/`Failed`; whichever came first.
    pub stopped_at: Option<DateTime<Utc>>,
}

/// One node the autoscaler model launched ([`crate::KubeFake::launched_nodes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchedNode {
    pub group: String,
    pub name: String,
    pub provider_id: String,
    /// When the scale-up was decided.
    pub requested_at: DateTime<Utc>,
    /// When the node appears, Ready (in the future while it is launching).
    pub ready_at: DateTime<Utc>,
}

/// The pods' timelines, by uid, in the order they were first seen.
#[derive(Debug, Default)]
pub(crate) struct Timeline {
    entries: Vec<PodTimeline>,
    by_uid: HashMap<String, usize>,
}

impl Timeline {
    pub fn entries(&self) -> Vec<PodTimeline> {
        self.entries.clone()
    }

    fn stop(&mut self, uid: &str, at: DateTime<Utc>) {
        if let Some(&i) = self.by_uid.get(uid) {
            self.entries[i].stopped_at.get_or_insert(at);
        }
    }

    /// Records what one pod change means, at `at`.
    pub fn observe(
        &mut self,
        key: &PodKey,
        old: Option<&PodEntry>,
        new: Option<&PodEntry>,
        at: DateTime<Utc>,
    ) {
        if let Some(old) = old
            && new.is_none_or(|n| n.uid != old.uid)
        {
            self.stop(&old.uid, at);
        }
        let Some(new) = new else {
            return;
        };
        let i = match self.by_uid.get(&new.uid) {
            Some(&i) => i,
            None => {
                self.entries.push(PodTimeline {
                    namespace: key.0.clone(),
                    name: key.1.clone(),
                    uid: new.uid.clone(),
                    owner: new
                        .controller
                        .as_ref()
                        .map(|o| format!("{}/{}", o.kind, o.name)),
                    node: None,
                    created_at: at,
                    running_at: None,
                    stopped_at: None,
                });
                self.by_uid.insert(new.uid.clone(), self.entries.len() - 1);
                self.entries.len() - 1
            }
        };
        let entry = &mut self.entries[i];
        if new.node.is_some() {
            entry.node.clone_from(&new.node);
        }
        if new.running && !new.terminating && entry.stopped_at.is_none() {
            entry.running_at.get_or_insert(at);
        }
        if new.terminating || new.terminal {
            entry.stopped_at.get_or_insert(at);
        }
    }
}
