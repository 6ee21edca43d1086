//! Fault tolerance: the real handler (DynamoDB store, EC2 directory, Kubernetes executor) fed by
//! the SQS poller (`forewarn_tests::sqs`) from a queue with a dead-letter queue, while faults are
//! injected: the Kubernetes fake answering 500, 429 or never, DynamoDB and EC2 throttling or
//! unreachable behind the fault-injecting proxy (`forewarn_tests::proxy`), the Lambda's time
//! running out mid-batch, malformed and oversized messages, one event delivered ten times, and
//! the three events of one instance in every order.
//!
//! Then what a platform team's review sends: forged continuations (another node, another event
//! id, another key, a drain never started), a stale continuation after the node's name was
//! reused, a continuation after its node was deleted, a 30 s API server outage at a warning with
//! the stack's 15 receives before the dead-letter queue, SQS itself failing (a continuation that cannot be queued, a
//! visibility that cannot be changed), evictions answered 500 and 409, the lifecycle hook of
//! another team's group, a state change older than the instance's launch, and a far-future time
//! beside a good record.
//!
//! After each: every event was applied exactly once (the pool table's ledger holds its id, its
//! pool counted it once, the cluster saw one cordon per node and no pod evicted twice) or its
//! message is back on the queue or in the DLQ; and the run's counts (reports, deleted and
//! returned messages) account for every message received. See docs/fault-tolerance.md.
//!
//! The tests by fault kind, one module each (the shared world and checks in `support`):
//! - `kubernetes`: the Kubernetes API answering 500, 403, 429 or never, a 30 s outage at a
//!   warning, evictions answered 500 and 409.
//! - `aws`: DynamoDB and EC2 throttling or unreachable, SQS failing (a continuation that cannot
//!   be queued, a visibility that cannot be changed).
//! - `messages`: what arrives: the Lambda's time running out mid-batch, malformed and oversized
//!   messages, one event ten times, three events of an instance in every order, another team's
//!   lifecycle hook, a state change older than the launch, a far-future time.
//! - `continuations`: forged, stale and replayed continuations, and a key rotation mid-drain.

mod aws;
mod continuations;
mod kubernetes;
mod messages;
mod support;
