//! Capacity Blocks' events name a reservation, not its instances: before anything else, each is
//! looked up in the event's own account and region (one `DescribeCapacityReservations` and one
//! `DescribeInstances` filtered on `capacity-reservation-id` per block of the batch), and the
//! event goes on naming the block's instances, each then handled as a warning of its own.
//!
//! Nothing of the message is trusted for what is acted on: the instances are EC2's answer, and
//! so is the block's end when EC2 says it (the deadline is taken from it). A reservation EC2
//! says is not a Capacity Block is refused by the plan. A drain's later passes look the block up
//! again, so that their signed plan is checked against the block's instances as EC2 lists them
//! then.
//!
//! A lookup that fails fails the events of its block alone (retryable as its error says; an
//! account that is not served acknowledges them, as every event of such an account).
//!
//! EC2's word also decides whether the event is due at all, since anyone allowed to send to the
//! queue could name a real block: a warning of a block that EC2 says ends more than
//! [`crate::domain::sweep::BLOCK_LOOKAHEAD`] (and [`SLACK`]) from now is refused (it would drain
//! a block's nodes days early), and so is a delivery of a block EC2 says is not `active` (it
//! would steer provisioning to a pool that has nothing).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::app::pipeline::place_report;
use crate::domain::event::ec2::PART_FIELD;
use crate::domain::event::{DecodeError, Detail, Event, EventKind};
use crate::domain::facts::{CapacityBlock, InstanceFacts};
use crate::domain::inbound::Record;
use crate::domain::report::Report;
use crate::domain::sweep::BLOCK_LOOKAHEAD;
use crate::ports::{ContinuationQueue, InstanceDirectory, Place};
use std::time::Duration;

/// How much later than 40 minutes before its end a block's warning may still come (EventBridge
/// delivers within minutes; a warning's clock and EC2's may differ).
pub const SLACK: chrono::Duration = chrono::Duration::minutes(10);

/// A batch whose Capacity Blocks were looked up: its records, each block's event naming its
/// instances; and the reports of the records whose block could not be looked up, or whose
/// event EC2's answer refuses (their record here is a decode error, so that nothing is done with
/// it: their report is this one).
#[derive(Debug, Default)]
pub struct Expanded {
    pub records: Vec<Record>,
    pub failed: Vec<(usize, Report)>,
    /// What each record's report says besides (its parts queued).
    pub notes: Vec<(usize, String)>,
    /// The blocks' instances as their lookup described them, by place.
    pub described: BTreeMap<(Place, String), InstanceFacts>,
}

impl Expanded {
    /// `reports` (one per record, in order) with the failed lookups' own.
    pub fn answer(&self, mut reports: Vec<Report>) -> Vec<Report> {
        for (i, report) in &self.failed {
            if let Some(slot) = reports.get_mut(*i) {
                *slot = report.clone();
            }
        }
        for (i, note) in &self.notes {
            if let Some(slot) = reports.get_mut(*i) {
                let said = slot.reason.take();
                slot.reason = Some(said.map_or(note.clone(), |r| format!("{r}; {note}")));
            }
        }
        reports
    }
}

/// The reservation an event names, when it is a Capacity Block's.
fn block_of(record: &Record) -> Option<(Place, String)> {
    let event = record.event.as_ref().ok()?;
    match &event.detail {
        Detail::CapacityBlock { reservation_id, .. } if event.kind.is_capacity_block() => {
            Some((Place::of_event(event), reservation_id.clone()))
        }
        _ => None,
    }
}

/// Looks up every Capacity Block `records` name (at once, one lookup per block and place; none
/// when they name none); with a `queue` (a run that writes the cluster and has one to come back
/// on), a block's warning's instances past its own share are queued as parts (`fan_out`).
pub async fn expand(
    instances: &dyn InstanceDirectory,
    queue: Option<&dyn ContinuationQueue>,
    records: &[Record],
    now: DateTime<Utc>,
) -> Expanded {
    let wanted: std::collections::BTreeSet<_> = records.iter().filter_map(block_of).collect();
    let lookups = wanted.iter().map(|(p, id)| instances.capacity_block(p, id));
    let found = futures::future::join_all(lookups).await;
    let found: BTreeMap<_, _> = wanted.iter().zip(found).collect();
    let mut out = Expanded {
        records: records.to_vec(),
        ..Expanded::default()
    };
    for ((place, _), block) in &found {
        let Ok(block) = block else { continue };
        let facts = block.instances.iter();
        out.described
            .extend(facts.map(|(id, f)| ((place.clone(), id.clone()), f.clone())));
    }
    for (i, record) in out.records.iter_mut().enumerate() {
        let Some(key) = block_of(record) else {
            continue;
        };
        let (report, why) = match &found[&key] {
            Ok(block) => {
                let event = record.event.as_ref().ok();
                if let Some(why) = event.and_then(|e| refusal(e, block, now)) {
                    tracing::warn!(origin = %record.origin, %why, "refusing a Capacity Block's event");
                    let refused = format!("refused: {why}");
                    let outcome = crate::domain::report::Outcome::Ignored;
                    (Report::new(record).ended(outcome, refused), why)
                } else {
                    if let Ok(event) = record.event.as_mut() {
                        name_instances(event, block);
                    }
                    match fan_out(queue, record).await {
                        Ok(note) => {
                            out.notes.extend(note.map(|note| (i, note)));
                            continue;
                        }
                        Err(why) => (Report::new(record).failed(why.clone()), why),
                    }
                }
            }
            Err(e) => (
                place_report(e, record),
                format!("the Capacity Block {} was not looked up: {e}", key.1),
            ),
        };
        out.failed.push((i, report));
        set_aside(record, why);
    }
    out
}

/// `record` set aside for its report alone: its event a decode error saying `why`, so that
/// nothing is done with it.
fn set_aside(record: &mut Record, why: String) {
    record.event = Err(DecodeError {
        origin: record.origin.clone(),
        field: Some("detail.capacity-reservation-id".into()),
        message: why,
    });
}

/// Why EC2's answer refuses `event`: a part naming an instance EC2 does not list in the block,
/// a warning not due yet, a delivery of a block not active.
fn refusal(event: &Event, block: &CapacityBlock, now: DateTime<Utc>) -> Option<String> {
    if matches!(event.detail, Detail::CapacityBlock { part: true, .. }) {
        let strangers: Vec<&str> = event
            .instance_ids
            .iter()
            .filter(|id| !block.instances.contains_key(*id))
            .map(String::as_str)
            .collect();
        if !strangers.is_empty() {
            return Some(format!(
                "a part of a Capacity Block's warning names {}, which EC2 does not list in the \
                 block: no node is touched",
                strangers.join(", ")
            ));
        }
    }
    let facts = block.facts.as_ref()?;
    let id = &facts.reservation_id;
    match event.kind {
        EventKind::CapacityBlockExpiration => {
            let end = facts.end_date?;
            (end > now + BLOCK_LOOKAHEAD + SLACK).then(|| {
                format!(
                    "EC2 says Capacity Block {id} ends at {}, more than {} minutes from now: \
                     its expiration warning is not due, no node is touched",
                    end.to_rfc3339(),
                    (BLOCK_LOOKAHEAD + SLACK).num_minutes()
                )
            })
        }
        EventKind::CapacityBlockDelivered => {
            let state = facts.state.as_deref()?;
            (state != "active").then(|| {
                format!(
                    "EC2 says Capacity Block {id} is `{state}`, not active: its pool is not \
                     recorded available"
                )
            })
        }
        _ => None,
    }
}

/// `event` (a Capacity Block's) naming what EC2 says of its block: an expiration warning its
/// instances (by id), both its facts and EC2's end over the message's.
fn name_instances(event: &mut Event, block: &CapacityBlock) {
    // A part keeps the instances it names (every one in the block: see `refusal`).
    let part = matches!(event.detail, Detail::CapacityBlock { part: true, .. });
    if !part && event.kind == EventKind::CapacityBlockExpiration {
        event.instance_ids = block.instances.keys().cloned().collect();
    }
    if let Detail::CapacityBlock {
        end_date, block: b, ..
    } = &mut event.detail
    {
        if let Some(facts) = &block.facts
            && facts.end_date.is_some()
            && facts.end_date != *end_date
        {
            tracing::warn!(event = %event.id, said = ?end_date, ec2 = ?facts.end_date,
                "a Capacity Block's event and EC2 disagree on its end: EC2's is taken");
            *end_date = facts.end_date;
        }
        b.clone_from(&block.facts);
    }
}

/// How many of a block's instances its warning's own invocation handles; each other one is
/// queued as a part of its own (`fan_out`), so that the block's nodes are cordoned by as many
/// execution environments as the event source mapping runs, each within its share of the API
/// server, instead of one environment cordoning them all at its share's pace.
pub const OWN_SHARE: usize = 8;

/// Queues, when `record` is a block's warning (its first delivery, from a queue) naming more
/// than [`OWN_SHARE`] instances, a part of its own for each instance past the first
/// [`OWN_SHARE`] (the warning's body with `detail.instance-ids`, in the event's account's
/// message group, due at once); the warning goes on with its first [`OWN_SHARE`]. Returns what
/// its report says of the parts queued, or why the warning fails: a part that cannot be queued
/// fails it (it comes back whole; parts queued twice are duplicates of each other).
async fn fan_out(
    queue: Option<&dyn ContinuationQueue>,
    record: &mut Record,
) -> Result<Option<String>, String> {
    let (Some(queue), Some(arn), Some(body), Ok(event)) = (
        queue,
        record.queue_arn.as_deref(),
        record.body.as_deref(),
        record.event.as_mut(),
    ) else {
        return Ok(None);
    };
    if record.continuation.is_some()
        || event.kind != EventKind::CapacityBlockExpiration
        || !matches!(event.detail, Detail::CapacityBlock { part: false, .. })
        || event.instance_ids.len() <= OWN_SHARE
    {
        return Ok(None);
    }
    let rest = event.instance_ids.split_off(OWN_SHARE);
    let group = event.account.clone().unwrap_or_else(|| "forewarn".into());
    let group = &group;
    let sends = rest.iter().map(|instance| async move {
        let part = part_body(body, instance);
        let part = part.ok_or_else(|| "the warning's body is not a JSON object".to_string())?;
        let sent = queue.send(arn, group, &part, Duration::ZERO).await;
        sent.map_err(|e| e.to_string())
    });
    let sent = futures::future::join_all(sends).await;
    if let Some(Err(why)) = sent.iter().find(|s| s.is_err()) {
        return Err(format!(
            "{} of the block's {} instances past the first {OWN_SHARE} were not queued as \
             parts of their own: {why}",
            sent.iter().filter(|s| s.is_err()).count(),
            rest.len()
        ));
    }
    Ok(Some(format!(
        "the block's {} other instances queued as parts of their own (ids `{}#<instance>`)",
        rest.len(),
        event.id
    )))
}

/// `body` (a block's warning) as the part of it for `instance`.
fn part_body(body: &str, instance: &str) -> Option<String> {
    let mut v: serde_json::Value = serde_json::from_str(body).ok()?;
    v.get_mut("detail")?
        .as_object_mut()?
        .insert(PART_FIELD.into(), serde_json::json!([instance]));
    Some(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::facts::{BlockFacts, InstanceFacts};
    use crate::domain::inbound::decode_value;
    use crate::ports::{FailureKind, PortError, RecordingQueue};
    use async_trait::async_trait;
    use std::sync::Mutex;

    const CR: &str = "cr-0a1b2c3d4e5f60001";

    struct Blocks {
        calls: Mutex<Vec<(Place, String)>>,
        fail: bool,
        /// EC2's end of the block and its state.
        end: &'static str,
        state: &'static str,
        /// How many instances it lists (`i-0a1b2c3d4e5f60b00` on).
        size: usize,
    }

    impl Blocks {
        fn new() -> Blocks {
            Blocks {
                calls: Mutex::default(),
                fail: false,
                end: "2026-11-20T11:30:00Z",
                state: "active",
                size: 0,
            }
        }
    }

    #[async_trait]
    impl InstanceDirectory for Blocks {
        async fn describe(
            &self,
            _place: &Place,
            _ids: &[String],
        ) -> Result<BTreeMap<String, InstanceFacts>, PortError> {
            Ok(BTreeMap::new())
        }

        async fn capacity_block(
            &self,
            place: &Place,
            id: &str,
        ) -> Result<CapacityBlock, PortError> {
            self.calls
                .lock()
                .unwrap()
                .push((place.clone(), id.to_string()));
            if self.fail {
                return Err(PortError::new(
                    "ec2:DescribeCapacityReservations",
                    FailureKind::Throttled,
                    "slow down".to_string(),
                ));
            }
            let instance = |id: &str| {
                (
                    id.to_string(),
                    InstanceFacts {
                        instance_id: id.to_string(),
                        ..Default::default()
                    },
                )
            };
            Ok(CapacityBlock {
                facts: Some(BlockFacts {
                    reservation_id: id.to_string(),
                    instance_type: Some("p5.48xlarge".into()),
                    zone: Some("us-east-1a".into()),
                    zone_id: Some("use1-az4".into()),
                    end_date: self.end.parse().ok(),
                    state: Some(self.state.into()),
                    capacity_block: Some(true),
                }),
                instances: if self.size == 0 {
                    [
                        instance("i-0a1b2c3d4e5f60b02"),
                        instance("i-0a1b2c3d4e5f60b01"),
                    ]
                    .into()
                } else {
                    (0..self.size)
                        .map(|n| instance(&format!("i-0a1b2c3d4e5f60b{n:02}")))
                        .collect()
                },
            })
        }
    }

    fn warning(id: &str, end: &str) -> serde_json::Value {
        serde_json::json!({
            "version": "0", "id": id, "detail-type": "Capacity Block Expiration Warning",
            "source": "aws.ec2", "account": "123456789012", "time": "2026-11-20T10:50:00Z",
            "region": "us-east-1",
            "resources": [format!("arn:aws:ec2:us-east-1:123456789012:capacity-reservation/{CR}")],
            "detail": {"capacity-reservation-id": CR, "end-date": end}
        })
    }

    fn now() -> DateTime<Utc> {
        "2026-11-20T10:50:01Z".parse().unwrap()
    }

    #[tokio::test]
    async fn a_blocks_warning_names_ec2s_instances_and_end_one_lookup_a_block() {
        let dir = Blocks::new();
        let records = decode_value(
            "b",
            serde_json::json!([
                warning("a", "2026-11-20T11:30:00Z"),
                warning("b", "2026-11-20T12:00:00Z")
            ]),
            now(),
        )
        .unwrap();
        let spot_only = decode_value("s", serde_json::json!([]), now()).unwrap();
        let none = expand(&dir, None, &spot_only, now()).await;
        assert!(none.described.is_empty() && dir.calls.lock().unwrap().is_empty());
        let out = expand(&dir, None, &records, now()).await;
        assert!(out.failed.is_empty());
        assert_eq!(
            dir.calls.lock().unwrap().len(),
            1,
            "one lookup for the block"
        );
        for record in &out.records {
            let event = record.event.as_ref().unwrap();
            assert_eq!(event.kind, EventKind::CapacityBlockExpiration);
            assert_eq!(
                event.instance_ids,
                ["i-0a1b2c3d4e5f60b01", "i-0a1b2c3d4e5f60b02"]
            );
            // EC2's end is taken over the message's (b says 12:00): termination at 11:00.
            let goes =
                crate::domain::plan::goes_at(event, &crate::domain::config::Config::default());
            assert_eq!(goes, "2026-11-20T11:00:00Z".parse().ok());
        }
        // The block's instances as its lookup described them, in the block's place: what the
        // batch's lookup takes instead of describing them again.
        let place = Place::of_event(out.records[0].event.as_ref().unwrap());
        let known: Vec<&(Place, String)> = out.described.keys().collect();
        assert_eq!(
            known,
            [
                &(place.clone(), "i-0a1b2c3d4e5f60b01".to_string()),
                &(place, "i-0a1b2c3d4e5f60b02".to_string())
            ]
        );
    }

    #[tokio::test]
    async fn a_failed_lookup_fails_its_blocks_events_alone_and_retryable() {
        let dir = Blocks {
            fail: true,
            ..Blocks::new()
        };
        let mut input = vec![warning("a", "2026-11-20T11:30:00Z")];
        input.push(serde_json::json!({
            "version": "0", "id": "s", "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2", "account": "123456789012", "time": "2026-11-20T10:50:00Z",
            "region": "us-east-1", "detail": {"instance-id": "i-0a1b2c3d4e5f60001"}
        }));
        let records = decode_value("b", serde_json::Value::Array(input), now()).unwrap();
        let out = expand(&dir, None, &records, now()).await;
        assert_eq!(out.failed.len(), 1);
        let (i, report) = &out.failed[0];
        assert_eq!(*i, 0);
        assert_eq!(report.outcome, crate::domain::report::Outcome::Failed);
        assert!(!report.permanent, "a throttle comes back");
        assert!(out.records[0].event.is_err(), "nothing is done with it");
        assert!(out.records[1].event.is_ok(), "the spot warning goes on");
        let answered = out.answer(vec![
            Report::new(&out.records[0]).failed("decode".into()),
            Report::new(&out.records[1]),
        ]);
        assert!(answered[0].reason.as_deref().unwrap().contains("slow down"));
    }

    #[tokio::test]
    async fn a_warning_not_due_and_a_delivery_of_a_block_not_active_are_refused() {
        // A real block that EC2 says ends in three days: a warning naming it now is forged.
        let dir = Blocks {
            end: "2026-11-23T11:30:00Z",
            state: "expired",
            ..Blocks::new()
        };
        let mut delivered = warning("d", "2026-11-23T11:30:00Z");
        delivered["detail-type"] = "Capacity Block Delivered".into();
        let input = serde_json::json!([warning("a", "2026-11-20T11:30:00Z"), delivered]);
        let records = decode_value("b", input, now()).unwrap();
        let out = expand(&dir, None, &records, now()).await;
        assert_eq!(out.failed.len(), 2);
        for (i, report) in &out.failed {
            assert_eq!(report.outcome, crate::domain::report::Outcome::Ignored);
            assert!(out.records[*i].event.is_err(), "nothing is done with it");
            let reason = report.reason.as_deref().unwrap();
            let want = if *i == 0 {
                "ends at 2026-11-23T11:30:00+00:00, more than 50 minutes from now"
            } else {
                "is `expired`, not active"
            };
            assert!(reason.contains(want), "{reason}");
        }
    }

    /// A block of 11 instances, as the directory lists them.
    fn big() -> Blocks {
        Blocks {
            size: 11,
            ..Blocks::new()
        }
    }

    fn queued(v: serde_json::Value) -> Vec<Record> {
        let mut records = decode_value("q", v, now()).unwrap();
        for r in &mut records {
            r.queue_arn = Some("arn:aws:sqs:us-east-1:123456789012:q".into());
            let event = serde_json::json!(warning("a", "2026-11-20T11:30:00Z")).to_string();
            r.body = Some(event);
        }
        records
    }

    #[tokio::test]
    async fn a_big_blocks_other_instances_are_queued_each_a_part_that_acts_on_its_own() {
        let dir = big();
        let queue = RecordingQueue::default();
        let records = queued(warning("a", "2026-11-20T11:30:00Z"));
        let out = expand(&dir, Some(&queue), &records, now()).await;
        let note = &out.notes[0];
        assert_eq!(note.0, 0);
        assert!(
            note.1.starts_with("the block's 3 other instances queued"),
            "{note:?}"
        );
        let event = out.records[0].event.as_ref().unwrap();
        assert_eq!(
            event.instance_ids.len(),
            OWN_SHARE,
            "the warning keeps its first"
        );
        let sent = queue.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 3);
        assert!(sent.iter().all(|(group, _)| group == "123456789012"));
        // Each part decodes to a warning of its own id, naming its one instance, which the
        // block's lookup keeps; a part naming an instance not in the block acts on none.
        let bodies: Vec<serde_json::Value> = sent
            .iter()
            .map(|(_, b)| serde_json::from_str(b).unwrap())
            .collect();
        let parts = decode_value("p", serde_json::Value::Array(bodies), now()).unwrap();
        let mut forged = serde_json::json!(warning("a", "2026-11-20T11:30:00Z"));
        forged["detail"]["instance-ids"] = serde_json::json!(["i-0a1b2c3d4e5f6ffff"]);
        let mut records = parts;
        records.extend(decode_value("f", forged, now()).unwrap());
        let out = expand(&dir, None, &records, now()).await;
        let want = [
            "i-0a1b2c3d4e5f60b08",
            "i-0a1b2c3d4e5f60b09",
            "i-0a1b2c3d4e5f60b10",
        ];
        for (record, instance) in out.records.iter().zip(want) {
            let part = record.event.as_ref().unwrap();
            assert_eq!(part.id, format!("a#{instance}"));
            assert_eq!(part.instance_ids, [instance]);
        }
        let (i, refused) = &out.failed[0];
        assert_eq!(
            (*i, refused.outcome),
            (3, crate::domain::report::Outcome::Ignored)
        );
        let why = refused.reason.as_deref().unwrap();
        assert!(
            why.contains("names i-0a1b2c3d4e5f6ffff, which EC2 does not list"),
            "{why}"
        );
        assert!(out.records[3].event.is_err(), "nothing is done with it");
        // A part is not queued again, and a small block is not split.
        let queue = RecordingQueue::default();
        let again = expand(&dir, Some(&queue), &out.records[..3], now()).await;
        assert!(queue.sent.lock().unwrap().is_empty() && again.notes.is_empty());
    }

    #[tokio::test]
    async fn parts_that_cannot_be_queued_fail_the_warning_whole() {
        let dir = big();
        let queue = RecordingQueue {
            refuse: true,
            ..RecordingQueue::default()
        };
        let records = queued(warning("a", "2026-11-20T11:30:00Z"));
        let out = expand(&dir, Some(&queue), &records, now()).await;
        assert!(out.notes.is_empty());
        assert!(out.records[0].event.is_err(), "nothing is done with it");
        let (_, report) = &out.failed[0];
        assert_eq!(report.outcome, crate::domain::report::Outcome::Failed);
        assert!(
            report
                .reason
                .as_deref()
                .unwrap()
                .contains("3 of the block's 3"),
            "{report:?}"
        );
    }
}
