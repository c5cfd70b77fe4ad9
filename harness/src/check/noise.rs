//! The scheduling noise a run measured of itself: how late the harness's own samplers ticked.
//!
//! The samplers tick every [`Bounds::sample`] (T/10, at least 10 ms) and never fire missed
//! ticks back to back, so the gap between two of a sampler's samples, less the period, is how
//! late the second came: the machine's load as the harness felt it, at that moment. A liveness
//! bound missed by less than that ([`Measure::near_miss`]) is not decided by the run alone.
//!
//! The gauge samples serve when the replicas serve a gauge (their combiner never waits on a
//! replica); otherwise the pg_locks samples, leaving out a gap longer than five periods (a query
//! that waited on the server, which the sampler drops as no sample: not the harness's own
//! lateness).

use super::{t_of, Bounds, Check, Measure, Unit};
use crate::timeline::{Entry, What};

/// The most a pg_locks sampler's gap may span, in periods, to count as its own lateness.
const STALL_PERIODS: f64 = 5.0;

/// Sets the [`noise`](Measure::noise) of every liveness measure of `checks`, from the samples
/// of `entries` between the moment it is measured from and the later of its bound and its
/// event (the whole run for a measure with no window).
pub fn annotate(checks: &mut [Check], entries: &[Entry], b: &Bounds) {
    let ticks = sampler_ticks(entries);
    let period_ms = b.sample.as_secs_f64() * 1000.0;
    for m in (checks.iter_mut()).flat_map(|c| c.measures.iter_mut()) {
        if m.liveness && m.unit == Unit::T {
            let (from, to) = span_of(m);
            m.noise = t_of(lateness_ms(&ticks, period_ms, from, to), b.t);
        }
    }
}

/// Where a measure lies on the run's clock: from its origin to the later of its bound's edge
/// and its event.
fn span_of(m: &Measure) -> (f64, f64) {
    match m.window {
        Some(w) => (
            w.from_ms,
            w.at_ms.map_or(w.bound_ms, |at| at.max(w.bound_ms)),
        ),
        None => (f64::NEG_INFINITY, f64::INFINITY),
    }
}

/// The times of one sampler's samples, with the longest gap that counts as lateness: the
/// gauge combiner's, else pg_locks'.
fn sampler_ticks(entries: &[Entry]) -> (Vec<f64>, f64) {
    let times = |keep: fn(&What) -> bool| -> Vec<f64> {
        (entries.iter())
            .filter(|e| keep(&e.what))
            .map(|e| e.t_ms)
            .collect()
    };
    let gauges = times(|w| matches!(w, What::Gauges { .. }));
    if gauges.len() > 1 {
        return (gauges, f64::INFINITY);
    }
    (times(|w| matches!(w, What::Locks { .. })), STALL_PERIODS)
}

/// The latest tick past its period among the gaps that end between `from_ms` and `to_ms`, in
/// milliseconds (0 when none was late).
fn lateness_ms((ticks, most): &(Vec<f64>, f64), period_ms: f64, from_ms: f64, to_ms: f64) -> f64 {
    (ticks.windows(2))
        .filter(|w| w[1] >= from_ms && w[1] <= to_ms)
        .map(|w| w[1] - w[0])
        .filter(|gap| *gap <= most * period_ms)
        .map(|gap| gap - period_ms)
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::check::{Verdict, Window};

    const B: Bounds = Bounds {
        t: Duration::from_millis(200),
        tick: Duration::from_millis(200),
        sample: Duration::from_millis(20),
        slack: Duration::from_millis(50),
    };

    fn gauges(at: f64) -> Entry {
        Entry {
            t_ms: at,
            what: What::Gauges {
                values: BTreeMap::new(),
                asked_ms: None,
            },
        }
    }

    fn locks(at: f64) -> Entry {
        Entry {
            t_ms: at,
            what: What::Locks { rows: Vec::new() },
        }
    }

    /// A release held to 1T from 1000 ms, seen at `at_ms`.
    fn released(at_ms: f64) -> Check {
        let m = Measure::at_most(
            "released after stop".into(),
            Some((at_ms - 1000.0) / 200.0),
            1.0,
            Unit::T,
        )
        .with_slack(0.25)
        .of_liveness()
        .with_window(Window {
            from_ms: 1000.0,
            bound_ms: 1200.0,
            at_ms: Some(at_ms),
        });
        Check::new("released", &["X-WAKE"], Verdict::Invalid, String::new()).with_measures(Some(m))
    }

    #[test]
    fn a_late_tick_inside_the_window_is_the_noise_and_one_outside_it_is_not() {
        // Ticks every 20 ms, one 60 ms late at 1100 ms (inside), one 200 ms late at 3000 ms.
        let mut entries: Vec<Entry> = (0..50).map(|i| gauges(f64::from(i) * 20.0)).collect();
        entries.push(gauges(1100.0 + 60.0));
        entries.extend((0..90).map(|i| gauges(1180.0 + f64::from(i) * 20.0)));
        entries.push(gauges(3000.0));
        let mut checks = vec![released(1270.0)];
        annotate(&mut checks, &entries, &B);
        let m = &checks[0].measures[0];
        // The gap 980 → 1160 ms is 180 ms: 160 ms late, 0.8T.
        assert!((m.noise - 0.8).abs() < 1e-9, "{}", m.noise);
        assert!(m.near_miss(), "1.35T against 1T + 0.25T slack + 0.8T noise");
        let mut quiet = vec![released(1270.0)];
        let steady: Vec<Entry> = (0..200).map(|i| gauges(f64::from(i) * 20.0)).collect();
        annotate(&mut quiet, &steady, &B);
        assert_eq!(quiet[0].measures[0].noise, 0.0);
        assert!(
            !quiet[0].measures[0].near_miss(),
            "no noise: the miss is a miss"
        );
    }

    #[test]
    fn a_safety_bound_and_a_missing_event_are_never_near_misses() {
        let entries: Vec<Entry> = (0..100).map(|i| gauges(f64::from(i) * 60.0)).collect();
        let overlap =
            Measure::at_most("overlap".into(), Some(2.3), 2.0, Unit::T).with_window(Window {
                from_ms: 0.0,
                bound_ms: 400.0,
                at_ms: Some(460.0),
            });
        let never =
            Measure::at_most("released after stop".into(), None, 1.0, Unit::T).of_liveness();
        let mut checks =
            vec![Check::new("x", &[], Verdict::Invalid, String::new())
                .with_measures([overlap, never])];
        annotate(&mut checks, &entries, &B);
        let [overlap, never] = &checks[0].measures[..] else {
            panic!("two measures")
        };
        assert_eq!(overlap.noise, 0.0, "a safety bound gets no noise");
        assert!(!overlap.near_miss() && !never.near_miss());
        assert!(never.noise > 0.0);
    }

    #[test]
    fn without_gauges_the_lock_samples_serve_and_a_server_stall_is_no_lateness() {
        let mut entries: Vec<Entry> = (0..55).map(|i| locks(f64::from(i) * 20.0)).collect();
        // A 400 ms gap (a query that waited on the server), then a 50 ms one.
        entries.push(locks(1480.0));
        entries.push(locks(1530.0));
        let mut checks = vec![released(1270.0)];
        checks[0].measures[0].window = Some(Window {
            from_ms: 1000.0,
            bound_ms: 1600.0,
            at_ms: None,
        });
        annotate(&mut checks, &entries, &B);
        assert!(
            (checks[0].measures[0].noise - 0.15).abs() < 1e-9,
            "{}",
            checks[0].measures[0].noise
        );
    }
}
