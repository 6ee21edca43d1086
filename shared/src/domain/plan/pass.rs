//! The passes over an event's node actions (see `crate::app::pipeline`): the first pass, the
//! drain's passes and what each is to its drain ([`DrainRole`]), and the late pass that only
//! records the Events a drain's first pass left.

use chrono::{DateTime, Utc};

/// Which pass over an event's node actions a call to the executor (`Executor::execute`, in
/// `crate::ports`) is: one first pass, then, while a drain is pending, drain passes the pipeline
/// drives (`crate::app::pipeline`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// The event's first pass: a drain's node is cordoned and tainted, nothing more (its drain
    /// is `pending`), so that a mass interruption's nodes are all cordoned early. Actions
    /// without a drain are carried out whole. (A dry run also says what a drain would evict.)
    Cordon,
    /// A pass of the drain: what is on the node is evicted (critical pods once the others are
    /// gone) or waited for; when nothing is left (or the deadline has passed) the drain ends and
    /// the lifecycle action is completed.
    Drain {
        /// When the event's first delivery ran.
        started_at: DateTime<Utc>,
        /// What this pass is to the drain: which Events it records.
        role: DrainRole,
        /// Keep a pending lifecycle action alive (`RecordLifecycleActionHeartbeat`): due when
        /// the last heartbeat is old enough, whatever the pass's role.
        heartbeat: bool,
    },
    /// The Events of the decision a drain's first pass left to the next, recorded alone (the
    /// node read and verified first) by that pass when it comes after the instance is gone.
    Announce,
}

impl Pass {
    /// What a drain pass is to its drain (`None`: not a drain pass).
    pub fn role(self) -> Option<DrainRole> {
        match self {
            Pass::Drain { role, .. } => Some(role),
            Pass::Cordon | Pass::Announce => None,
        }
    }

    /// Whether this is a drain's first drain pass ([`DrainRole::First`]).
    pub fn is_first_drain(self) -> bool {
        self.role() == Some(DrainRole::First)
    }
}

/// What a drain pass ([`Pass::Drain`]) is to its drain: which of the Events of the drain it
/// records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainRole {
    /// The first drain pass: it records the Events of the decision (the interruption, the
    /// cordon) only when the drain ends in it, else the next pass does ([`DrainRole::Owed`]).
    First,
    /// The pass after a first pass that left it the Events of the decision: it records them,
    /// after its evictions.
    Owed,
    /// Any other pass of a drain that goes on: it evicts, and records the drain's end.
    Later,
    /// A copy of a pass kept by the execution environment (see `crate::app::pipeline::kept`,
    /// never a first pass): it evicts what is left and records no Event, not even the drain's
    /// end — its queued twin records them.
    Quiet,
}

impl DrainRole {
    /// The role of a drain's `pass`-th pass (counted from 1) as queued, not kept.
    pub fn of_pass(pass: u32) -> DrainRole {
        match pass {
            1 => DrainRole::First,
            2 => DrainRole::Owed,
            _ => DrainRole::Later,
        }
    }
}
