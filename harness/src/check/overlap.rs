//! DEM-3: the overlap of two leaders, held to 2·T + one tick: from the terms the replicas
//! reported (level 3), and below it from what is seen from outside (their gauges, or the grants
//! on their wire).

use std::collections::BTreeMap;

use super::wire::model::WireModel;
use super::{
    in_t, leadership_spans, longest_within, ms_of, outside, verdict_of, wire, Bounds, Check, Facts,
    Verdict,
};
use crate::level::Level;
use crate::timeline::Entry;

/// Intervals where two or more replicas believe they lead, with their lengths.
pub fn overlaps(spans: &BTreeMap<String, Vec<(f64, f64)>>) -> Vec<(f64, f64)> {
    let mut edges: Vec<(f64, i32)> = spans
        .values()
        .flatten()
        .flat_map(|(s, e)| [(*s, 1), (*e, -1)])
        .collect();
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut depth, mut start, mut out) = (0, 0.0, Vec::new());
    for (t, d) in edges {
        let before = depth;
        depth += d;
        if before < 2 && depth >= 2 {
            start = t;
        } else if before >= 2 && depth < 2 && t > start {
            out.push((start, t));
        }
    }
    out
}

/// DEM-3 and MET-1: the measured overlap of two leaders never exceeds 2·T + one tick.
pub fn overlap_bound(entries: &[Entry], end_ms: f64, b: &Bounds) -> Check {
    let spans = leadership_spans(entries, end_ms);
    // With the event stream, no term at all is no overlap.
    let c = overlap_of("overlap of two leaders", &spans, 0.0, b);
    match c.verdict {
        Verdict::Unknown => Check {
            verdict: Verdict::Valid,
            ..c
        },
        _ => c,
    }
}

/// DEM-3 below level 3, where no event says when a term began or ended: at level 0 each
/// replica leads, as its wire shows, from a lock call answered granted until it closes that
/// connection or unlocks ([`wire::model::grant_spans`]: a replica that holds its lock connection
/// after it lost the lock overlaps the next leader); at levels 1 and 2, while its gauge says 1
/// ([`outside::gauge_spans`], which start up to one sampling period early, allowed). `model` is
/// the wire of `facts.entries`.
pub fn overlap_seen_from_outside(facts: &Facts, model: &WireModel, level: Level) -> Check {
    let b = &facts.bounds;
    let until = wire::model::sampled_until(facts.entries);
    if level >= Level::Metrics {
        // A span still open when sampling stopped ends there, as far as anyone saw.
        let mut spans = outside::gauge_spans(facts.entries, b);
        for (_, e) in spans.values_mut().flatten() {
            *e = e.min(until);
        }
        return overlap_of("overlap of two gauges", &spans, ms_of(b.sample), b);
    }
    let spans = wire::model::grant_spans(&model.conns, until);
    let c = overlap_of("overlap of two grants on the wire", &spans, 0.0, b);
    if facts.wire.tapped {
        c
    } else {
        wire::untapped(c)
    }
}

/// The overlaps of `spans` (by replica) held to 2·T + one tick, plus the slack and `error_ms`
/// (how early a span may have been seen to start).
fn overlap_of(
    name: &str,
    spans: &BTreeMap<String, Vec<(f64, f64)>>,
    error_ms: f64,
    b: &Bounds,
) -> Check {
    let found = overlaps(spans);
    let longest = found.iter().map(|(s, e)| e - s).fold(0.0, f64::max);
    let bound = ms_of(b.max_overlap() + b.slack) + error_ms;
    let led = spans.values().map(Vec::len).sum::<usize>();
    Check::new(
        name,
        &["DEM-3"],
        verdict_of(led, longest <= bound),
        format!(
            "{} overlap(s), longest {} (bound 2T + tick = {} + {:?} slack{})",
            found.len(),
            in_t(longest, b.t),
            in_t(ms_of(b.max_overlap()), b.t),
            b.slack,
            if error_ms > 0.0 {
                format!(" + {} sampling", in_t(error_ms, b.t))
            } else {
                String::new()
            }
        ),
    )
    .figure("overlaps", found.len().to_string())
    .figure("max overlap", in_t(longest, b.t))
    .measure(longest_within(
        "longest overlap",
        &found,
        ms_of(b.max_overlap()),
        b,
    ))
}
