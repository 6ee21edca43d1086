//! One record of an input: where it came from and what it decoded to.

use crate::domain::event::{DecodeError, Event, Origin};
use crate::domain::inbound::continuation::Continuation;

/// One record of an input: where it came from and what it decoded to.
#[derive(Debug, Clone)]
pub struct Record {
    pub origin: Origin,
    pub event: Result<Event, DecodeError>,
    /// A later pass of the event's drain (see [`crate::domain::inbound::continuation`]).
    pub continuation: Option<Continuation>,
    /// The body of the SQS message the record came in (a first delivery's is what its
    /// continuations carry).
    pub body: Option<String>,
    /// The SQS queue's ARN (`eventSourceARN`), when the record came from one: where a
    /// continuation of its drain is sent.
    pub queue_arn: Option<String>,
    /// A copy of a continuation that this execution environment kept and runs itself (see
    /// `crate::app::pipeline::kept`): its pass evicts what is left, and records no Event, queues
    /// nothing and keeps nothing (its queued twin does).
    pub kept: bool,
    /// Sent back to the queue by triage, as its cluster was busy (see
    /// `crate::app::fleet::triage`): worked on when read, never sent back for that again.
    pub triaged: bool,
}

impl Record {
    /// A record of `event` from `origin`, not a continuation.
    pub fn new(origin: Origin, event: Result<Event, DecodeError>) -> Record {
        Record {
            origin,
            event,
            continuation: None,
            body: None,
            queue_arn: None,
            kept: false,
            triaged: false,
        }
    }
}
