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
    type Key<'r> = (&'r str, Option<(u32, Option<&'r str>)>);
    let mut first_of: HashMap<Key<'_>, usize> = HashMap::new();
    let mut repeats: Vec<(usize, usize)> = Vec::new();
    let mut lanes: Vec<Vec<usize>> = Vec::new();
    let mut lane_of: HashMap<&str, usize> = HashMap::new();
    for (i, record) in records.iter().enumerate() {
        let Ok(event) = &record.event else { continue };
        let pass = record.continuation.as_ref();
        let key = (event.id.as_str(), pass.map(|c| (c.pass, c.mac.as_deref())));
        if let Some(&first) = first_of.get(&key) {
            repeats.push((i, first));
            continue;
        }
        first_of.insert(key, i);
        // The lanes of its instances become one.
        let ids = event.instance_ids.iter().map(String::as_str);
        let touched: BTreeSet<usize> = ids
            .clone()
            .filter_map(|id| lane_of.get(id).copied())
            .collect();
        let lane = touched.first().copied().unwrap_or(lanes.len());
        if lane == lanes.len() {
            lanes.push(Vec::new());
        }
        for &other in touched.iter().skip(1) {
            let moved = std::mem::take(&mut lanes[other]);
            lanes[lane].extend(moved);
        }
        lane_of
            .values_mut()
            .filter(|l| touched.contains(&**l))
            .for_each(|l| *l = lane);
        lane_of.extend(ids.map(|id| (id, lane)));
        lanes[lane].push(i);
    }
    lanes.retain(|lane| !lane.is_empty());
    for lane in &mut lanes {
        lane.sort_by_key(|&i| (records[i].event.as_ref().map(|e| e.time).ok(), i));
    }
    (lanes, repeats)
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
        let first_report = reports[first].clone();
        let record = &records[i];
        let report = match first_report {
            Some(f) if f.outcome == Outcome::Failed => Report::new(record).failed_as(
                format!("same event id as {}, which failed", f.origin),
                !f.permanent,
            ),
            Some(f) => {
                let mut r = f.clone();
                r.origin = record.origin.to_string();
                r.message_id = record.origin.message_id.clone();
                if f.outcome != Outcome::Ignored {
                    r.outcome = Outcome::Duplicate;
                    r.reason = Some(format!("same event id as {}", f.origin));
                }
                r
            }
            None => Report::new(record).failed("internal: first record not processed".into()),
        };
        reports[i] = Some(report);
    }
}
