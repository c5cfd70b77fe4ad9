//! Who believed it led, and when, from the replicas' events and the faults: the spans the
//! overlap, gauge-sum and work checks measure against, and which replicas were down.

use super::*;

/// Spans where each replica believes it leads, from its events: `acquired` opens a span;
/// `demoted`, `released`, `abandoned`, a fresh `started` (restart) or the process's
/// death (a `kill` or `restart` fault on it) close it. A frozen replica (`freeze` fault until it is lifted)
/// is not counted while frozen: it acts on nothing.
pub fn leadership_spans(entries: &[Entry], end_ms: f64) -> BTreeMap<String, Vec<(f64, f64)>> {
    let mut open: BTreeMap<String, f64> = BTreeMap::new();
    let mut spans: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut close = |open: &mut BTreeMap<String, f64>, r: &str, t: f64| {
        if let Some(s) = open.remove(r) {
            spans.entry(r.to_owned()).or_default().push((s, t));
        }
    };
    for e in entries {
        match &e.what {
            What::Replica { replica, event } => match event {
                ReplicaEvent::Acquired { .. } => {
                    open.entry(replica.clone()).or_insert(e.t_ms);
                }
                // A leader that shuts down leads until its release (RUN-6): passes already
                // running may still write until then.
                ReplicaEvent::Demoted { .. }
                | ReplicaEvent::Released { .. }
                | ReplicaEvent::Abandoned { .. }
                | ReplicaEvent::Started { .. } => close(&mut open, replica, e.t_ms),
                _ => {}
            },
            _ => {
                if let Some(r) = stops_leading(e) {
                    close(&mut open, r, e.t_ms);
                }
            }
        }
    }
    resumed_after_thaw(entries, &open, &mut spans);
    for (r, s) in open {
        spans.entry(r).or_default().push((s, end_ms));
    }
    for v in spans.values_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    spans
}

/// The replica a fault entry stops from leading at once: one killed, restarted or frozen (the
/// timeline may still show its last answers for a moment).
pub(crate) fn stops_leading(e: &Entry) -> Option<&str> {
    match &e.what {
        What::Fault {
            verb: Verb::Kill | Verb::Restart | Verb::Freeze,
            target,
            lifted: false,
        } => Some(target),
        _ => None,
    }
}

/// Whether `freeze` caught its target leading: the freeze closed one of its spans.
fn led_when_frozen(
    spans: &BTreeMap<String, Vec<(f64, f64)>>,
    freeze: &crate::timeline::FaultSpan,
) -> bool {
    (spans.get(&freeze.target).into_iter().flatten()).any(|(_, end)| *end == freeze.applied_ms)
}

/// A standby frozen just after its grant (with X-WAKE the grant comes the moment the lock is
/// free) may run its first leader-only passes before it stops, while its `acquired` line waits
/// in its output until the thaw (chaos seed 3 with `--wake`: a backend kill of the leader, then
/// a freeze of the standby 0.3 ms later, and a row of the new term 350 ms before its event was
/// read). So a term reported within `lag_ms` after a thaw of a replica that did not lead when
/// frozen begins at the freeze instead: the process wrote nothing while frozen, so only what it
/// did before the freeze is admitted. A leader frozen while leading keeps its rule
/// ([`resumed_after_thaw`]): its old term's late writes are not admitted this way.
pub(crate) fn acquired_before_a_freeze(
    spans: &mut BTreeMap<String, Vec<(f64, f64)>>,
    faults: &[crate::timeline::FaultSpan],
    lag_ms: f64,
) {
    for f in faults.iter().filter(|f| f.verb == Verb::Freeze) {
        if led_when_frozen(spans, f) {
            continue;
        }
        let (Some(thaw_ms), Some(own)) = (f.lifted_ms, spans.get_mut(&f.target)) else {
            continue;
        };
        for span in own.iter_mut() {
            if span.0 >= thaw_ms && span.0 <= thaw_ms + lag_ms {
                span.0 = f.applied_ms;
            }
        }
    }
}

/// A frozen replica that resumes still believes it leads until its next check demotes it: a
/// span from each thaw of a replica that led when frozen (and has not led again since) to its
/// next demotion or release.
fn resumed_after_thaw(
    entries: &[Entry],
    open: &BTreeMap<String, f64>,
    spans: &mut BTreeMap<String, Vec<(f64, f64)>>,
) {
    for thawed in fault_spans(entries)
        .iter()
        .filter(|f| f.verb == Verb::Freeze)
    {
        let (Some(thaw_ms), target) = (thawed.lifted_ms, &thawed.target) else {
            continue;
        };
        if !led_when_frozen(spans, thawed) || open.contains_key(target) {
            continue;
        }
        // Whatever ends a term ends the resumed one: a demotion, a release, an abandonment, a
        // new term or process, or the process killed.
        let resumed_end = entries.iter().find(|x| {
            x.t_ms >= thaw_ms
                && match &x.what {
                    What::Replica { replica, event } => {
                        replica == target
                            && matches!(
                                event,
                                ReplicaEvent::Demoted { .. }
                                    | ReplicaEvent::Released { .. }
                                    | ReplicaEvent::Abandoned { .. }
                                    | ReplicaEvent::Acquired { .. }
                                    | ReplicaEvent::Started { .. }
                            )
                    }
                    _ => stops_leading(x) == Some(target.as_str()),
                }
        });
        if let Some(end) = resumed_end {
            (spans.entry(target.clone()).or_default()).push((thaw_ms, end.t_ms));
        }
    }
}

/// The replicas that are down (killed or terminated until restarted, frozen until thawed) after
/// each fault entry; their gauges are not theirs to report while down.
pub(crate) fn down_after(e: &Entry, down: &mut BTreeSet<String>) {
    if let What::Fault {
        verb,
        target,
        lifted,
    } = &e.what
    {
        match (verb, lifted) {
            (Verb::Kill | Verb::Terminate | Verb::Freeze, false) => {
                down.insert(target.clone());
            }
            (Verb::Restart, _) | (Verb::Freeze, true) => {
                down.remove(target);
            }
            _ => {}
        }
    }
}
