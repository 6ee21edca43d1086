//! How a batch's records are scheduled: repeats of an event id follow their first record,
//! events sharing an instance run in one lane, new events before drain passes.

use super::*;

/// The first record of each event id does the work, in lanes of events that share an
/// instance; later records of an id are `(record, first record)` repeats.
pub(super) fn schedule(records: &[Record]) -> (Vec<Vec<usize>>, Vec<(usize, usize)>) {
    // A drain's pass is a repeat only of the same message (a duplicated continuation: the same
    // pass with the same signature), never of the event's first delivery, of another pass, or of
    // a message that only claims to be the same pass (a forged one must not make the genuine one
    // a repeat of its refusal).
    pub(super) type Key<'r> = (&'r str, Option<(u32, Option<&'r str>)>);
    let mut first_of: HashMap<Key<'_>, usize> = HashMap::new();
    let mut repeats: Vec<(usize, usize)> = Vec::new();
    let mut lanes = Lanes::default();
    for (i, record) in records.iter().enumerate() {
        if let Ok(event) = &record.event {
            let key = (
                event.id.as_str(),
                record
                    .continuation
                    .as_ref()
                    .map(|c| (c.pass, c.mac.as_deref())),
            );
            match first_of.get(&key) {
                Some(&first) => repeats.push((i, first)),
                None => {
                    first_of.insert(key, i);
                    lanes.add(i, &event.instance_ids);
                }
            }
        }
    }
    (lanes.into_lanes(records), repeats)
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

/// Groups record indexes so that events sharing an instance land in one lane.
#[derive(Default)]
pub(super) struct Lanes {
    /// Union-find parent of each member index.
    parent: HashMap<usize, usize>,
    owner_of_instance: HashMap<String, usize>,
    order: Vec<usize>,
}

impl Lanes {
    pub(super) fn find(&mut self, i: usize) -> usize {
        let p = self.parent[&i];
        if p == i {
            return i;
        }
        let root = self.find(p);
        self.parent.insert(i, root);
        root
    }

    pub(super) fn add(&mut self, i: usize, instance_ids: &[String]) {
        self.parent.insert(i, i);
        self.order.push(i);
        for id in instance_ids {
            match self.owner_of_instance.get(id).copied() {
                Some(other) => {
                    let (a, b) = (self.find(other), self.find(i));
                    if a != b {
                        self.parent.insert(b, a);
                    }
                }
                None => {
                    self.owner_of_instance.insert(id.clone(), i);
                }
            }
        }
    }

    /// The lanes, each in event-time order (record order among equal times).
    pub(super) fn into_lanes(mut self, records: &[Record]) -> Vec<Vec<usize>> {
        let mut lanes: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for i in self.order.clone() {
            let root = self.find(i);
            lanes.entry(root).or_default().push(i);
        }
        lanes
            .into_values()
            .map(|mut lane| {
                lane.sort_by_key(|&i| (records[i].event.as_ref().map(|e| e.time).ok(), i));
                lane
            })
            .collect()
    }
}
