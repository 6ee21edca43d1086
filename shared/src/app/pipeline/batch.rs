//! How a batch's records are scheduled: repeats of an event id follow their first record,
//! events sharing an instance run in one lane, new events before drain passes.

use super::*;

/// The first record of each event id does the work, in lanes of events that share an
/// instance (each lane in event-time order, record order among equal times); later records of
/// an id are `(record, first record)` repeats.
pub(super) fn schedule(records: &[Record]) -> (Vec<Vec<usize>>, Vec<(usize, usize)>) {
    // A drain's pass is a repeat only of the same message (a duplicated continuation: the same
    // pass with the same signature), never of the event's first delivery, of another pass, or of
    // a message that only claims to be the same pass (a forged one must not make the genuine one
    // a repeat of its refusal).
    let mut first_of = HashMap::new();
    let mut repeats: Vec<(usize, usize)> = Vec::new();
    // Each lane with the instances of its events.
    let mut lanes: Vec<(BTreeSet<&str>, Vec<usize>)> = Vec::new();
    for (i, record) in records.iter().enumerate() {
        let Ok(event) = &record.event else { continue };
        let pass = record.continuation.as_ref();
        let key = (event.id.as_str(), pass.map(|c| (c.pass, c.mac.as_deref())));
        let first = *first_of.entry(key).or_insert(i);
        if first != i {
            repeats.push((i, first));
            continue;
        }
        // The lanes of its instances become one, where the first of them was.
        let ids: BTreeSet<&str> = event.instance_ids.iter().map(String::as_str).collect();
        let shares = |(of, _): &mut (BTreeSet<&str>, Vec<usize>)| !of.is_disjoint(&ids);
        let at = lanes.iter_mut().position(shares).unwrap_or(lanes.len());
        let (mut of, mut lane) = (ids.clone(), vec![i]);
        for (ids, items) in lanes.extract_if(.., shares).collect::<Vec<_>>() {
            of.extend(ids);
            lane.extend(items);
        }
        lanes.insert(at, (of, lane));
    }
    let by_time = |&i: &usize| (records[i].event.as_ref().map(|e| e.time).ok(), i);
    let lanes = lanes.into_iter().map(|(_, mut lane)| {
        lane.sort_by_key(by_time);
        lane
    });
    (lanes.collect(), repeats)
}

/// `lanes` split by `pred`: the lanes of the records it holds for, and the lanes of the others
/// (a lane keeps its order in each; empty lanes are dropped).
pub(super) fn split_lanes(
    lanes: Vec<Vec<usize>>,
    pred: impl Fn(usize) -> bool,
) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
    let (mut yes, mut no) = (Vec::new(), Vec::new());
    for lane in lanes {
        let (y, n): (Vec<usize>, Vec<usize>) = lane.into_iter().partition(|&i| pred(i));
        yes.extend((!y.is_empty()).then_some(y));
        no.extend((!n.is_empty()).then_some(n));
    }
    (yes, no)
}

/// A repeated event id follows its first record: failed when it failed, else a duplicate of it
/// (an ignored event stays ignored).
pub(super) fn follow_firsts(
    records: &[Record],
    reports: &mut [Option<Report>],
    repeats: Vec<(usize, usize)>,
) {
    for (i, first) in repeats {
        let record = &records[i];
        let report = match reports[first].clone() {
            Some(f) if f.outcome == Outcome::Failed => Report::new(record).failed_as(
                format!("same event id as {}, which failed", f.origin),
                !f.permanent,
            ),
            Some(mut r) => {
                let first = std::mem::replace(&mut r.origin, record.origin.to_string());
                r.message_id = record.origin.message_id.clone();
                if r.outcome != Outcome::Ignored {
                    r.outcome = Outcome::Duplicate;
                    r.reason = Some(format!("same event id as {first}"));
                }
                r
            }
            None => Report::new(record).failed("internal: first record not processed".into()),
        };
        reports[i] = Some(report);
    }
}
