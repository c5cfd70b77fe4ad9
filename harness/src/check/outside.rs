//! Leadership seen from outside. Below level 3 no replica reports when it led, so a check that
//! needs the leaders' spans (LOOP-1's leader-only work, at level 2) reads them off the gauge
//! samples (level 1), each span widened by the sampling error.

use std::collections::{BTreeMap, BTreeSet};

use super::{down_after, ms_of, stops_leading, Bounds};
use crate::timeline::{Entry, What};

/// The spans where each replica's gauge said 1. A span opens one sampling period before the
/// first sample that showed 1 was asked for (the gauge may have turned 1 just after the sample
/// before, which showed 0): the sampling error, stated here and nowhere else. It closes at the
/// first sample that shows 0, which the replica's demotion or release came before, at the
/// first sample the replica did not answer (a process that exited, hung or stopped serving
/// leads no more as far as anyone can tell), or when the replica is killed, restarted or
/// frozen (its last answer stands for a moment). Unanswered samples followed by a 1 again,
/// while pg_locks showed the replica's same lock session held at every sample between (an
/// HTTP server too busy to answer in time, whose elector went on leading), leave the span
/// open; otherwise the 1 after them opens a new span. A span still open when sampling stopped
/// has no end, nor has one whose last samples went unanswered while pg_locks showed its lock
/// session held at every sample since: after the run the harness stops the replicas, the leader
/// last, and nobody reports when its term ended (at level 3 its `released` event does).
pub fn gauge_spans(entries: &[Entry], b: &Bounds) -> BTreeMap<String, Vec<(f64, f64)>> {
    let early = ms_of(b.sample);
    let mut open: BTreeMap<String, f64> = BTreeMap::new();
    // Replica → the first unanswered sample of an open span, and the backends of its lock
    // session then while every pg_locks sample since has shown the same (`None` once one did
    // not, or when it held none).
    let mut unanswered: BTreeMap<String, (f64, Option<BTreeSet<i32>>)> = BTreeMap::new();
    // Replica → the pids of its granted rows at the last pg_locks sample.
    let mut holding: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    let mut spans: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut close = |open: &mut BTreeMap<String, f64>, r: &str, t: f64| {
        if let Some(s) = open.remove(r) {
            spans.entry(r.to_owned()).or_default().push((s, t));
        }
    };
    let mut down = BTreeSet::new();
    for e in entries {
        down_after(e, &mut down);
        match &e.what {
            What::Gauges { values, asked_ms } => {
                let asked = asked_ms.unwrap_or(e.t_ms);
                for (r, v) in values {
                    match v {
                        Some(1) if unanswered.contains_key(r) => {
                            let (since, held) = unanswered.remove(r).unwrap_or((e.t_ms, None));
                            if held.is_none() {
                                close(&mut open, r, since);
                                open.insert(r.clone(), asked - early);
                            }
                        }
                        Some(1) if !down.contains(r) && !open.contains_key(r) => {
                            open.insert(r.clone(), asked - early);
                        }
                        None if open.contains_key(r) && !unanswered.contains_key(r) => {
                            let pids = holding.get(r).filter(|p| !p.is_empty()).cloned();
                            unanswered.insert(r.clone(), (e.t_ms, pids));
                        }
                        Some(0) => {
                            let since = unanswered.remove(r).map_or(e.t_ms, |(t, _)| t);
                            close(&mut open, r, since);
                        }
                        _ => {}
                    }
                }
            }
            What::Locks { rows } => {
                holding.clear();
                for (pid, _, r) in rows.iter().filter(|row| row.1) {
                    holding.entry(r.clone()).or_default().insert(*pid);
                }
                for (r, (_, held)) in unanswered.iter_mut() {
                    if held.as_ref() != holding.get(r) {
                        *held = None;
                    }
                }
            }
            _ => {
                if let Some(r) = stops_leading(e) {
                    let since = unanswered.remove(r).map_or(e.t_ms, |(t, _)| t);
                    close(&mut open, r, since);
                }
            }
        }
    }
    // Unanswered when sampling stopped: ended at the first unanswered sample, unless pg_locks
    // showed its lock session held at every sample since (then it is still open, as above).
    for (r, (since, held)) in unanswered {
        if held.is_none() {
            close(&mut open, &r, since);
        }
    }
    for (r, s) in open {
        spans.entry(r).or_default().push((s, f64::INFINITY));
    }
    for v in spans.values_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    spans
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::check::{work_only_from_leader_at, Verdict, WorkRow};
    use crate::fault::Verb;
    use crate::level::Level;

    /// T = 200 ms, sampled every 20 ms, 40 ms of slack.
    fn bounds() -> Bounds {
        crate::check::tests::bounds()
    }

    /// Gauge samples every 20 ms from 0 to 2 s: `a` shows 1 from 200 ms to before 1000 ms,
    /// `b` from 1100 ms on.
    fn history() -> Vec<Entry> {
        (0..=100)
            .map(|k| {
                let t_ms = f64::from(k) * 20.0;
                let a = i64::from((200.0..1000.0).contains(&t_ms));
                let b = i64::from(t_ms >= 1100.0);
                let values = [("a", a), ("b", b)]
                    .into_iter()
                    .map(|(r, v)| (r.to_owned(), Some(v)))
                    .collect();
                Entry {
                    t_ms,
                    what: What::Gauges {
                        values,
                        asked_ms: None,
                    },
                }
            })
            .collect()
    }

    fn row(replica: &str, t_ms: f64) -> WorkRow {
        WorkRow {
            loop_name: "sweep".into(),
            replica: replica.into(),
            term: 1,
            t_ms,
            fence: None,
        }
    }

    fn verdict(entries: &[Entry], rows: &[WorkRow], level: Level) -> Verdict {
        let model = crate::check::wire::model::WireModel::of(entries);
        work_only_from_leader_at(
            entries,
            &model,
            rows,
            2000.0,
            &bounds(),
            &BTreeSet::new(),
            level,
        )
        .verdict
    }

    #[test]
    fn a_span_opens_one_sample_before_the_first_1_and_closes_at_the_first_0_or_never() {
        let spans = gauge_spans(&history(), &bounds());
        assert_eq!(spans["a"], [(180.0, 1000.0)]);
        assert_eq!(spans["b"], [(1080.0, f64::INFINITY)]);
    }

    #[test]
    fn at_level_2_rows_are_judged_by_the_gauges_spans() {
        let h = history();
        // Just before a's first 1 (within the sampling error and the slack), while a leads,
        // and b's.
        let good = [row("a", 130.0), row("a", 900.0), row("b", 1500.0)];
        assert_eq!(verdict(&h, &good, Level::Work), Verdict::Valid);
        // a's row while b leads, and a's row before its gauge could have turned 1.
        assert_eq!(
            verdict(&h, &[row("a", 1300.0)], Level::Work),
            Verdict::Invalid
        );
        assert_eq!(
            verdict(&h, &[row("a", 100.0)], Level::Work),
            Verdict::Invalid
        );
        // After sampling stopped (2 s), the harness stops the replicas: b still led, a did not.
        assert_eq!(
            verdict(&h, &[row("b", 2900.0)], Level::Work),
            Verdict::Valid
        );
        assert_eq!(
            verdict(&h, &[row("a", 2900.0)], Level::Work),
            Verdict::Invalid
        );
        // At level 3 the spans are the events', and this history has none.
        assert_eq!(
            verdict(&h, &[row("a", 900.0)], Level::Events),
            Verdict::Invalid
        );
    }

    #[test]
    fn a_frozen_replica_leads_no_more_whatever_its_last_gauge_said() {
        let mut h = history();
        h.push(Entry {
            t_ms: 600.0,
            what: What::Fault {
                verb: Verb::Freeze,
                target: "a".into(),
                lifted: false,
            },
        });
        h.sort_by(|x, y| x.t_ms.total_cmp(&y.t_ms));
        assert_eq!(verdict(&h, &[row("a", 500.0)], Level::Work), Verdict::Valid);
        assert_eq!(
            verdict(&h, &[row("a", 800.0)], Level::Work),
            Verdict::Invalid
        );
    }

    /// A program at level 2 promises a `leader_work` row per pass of its leader-only work: none
    /// at all while a led for 800 ms (4 ticks of 200 ms) fails LOOP-1; a run where nobody led 3
    /// ticks in one term has nothing to decide, and at level 1 rows are not asked for.
    #[test]
    fn no_row_at_all_from_a_leader_at_level_2_fails_loop_1() {
        let b = bounds();
        let c = crate::check::no_work_from_a_leader(&history(), 2000.0, &b, Level::Work);
        let c = c.expect("a led for four ticks");
        assert_eq!(
            (c.verdict, c.clauses.as_slice()),
            (Verdict::Invalid, &["LOOP-1".to_owned()][..])
        );
        let short: Vec<Entry> = history().into_iter().filter(|e| e.t_ms < 700.0).collect();
        assert!(crate::check::no_work_from_a_leader(&short, 700.0, &b, Level::Work).is_none());
    }

    /// b stops answering at 1500 ms (it exited, or hangs) with no 0 ever sampled: its span
    /// ends there, not at the end of the run; an answer of 1 later opens a new one.
    #[test]
    fn a_span_ends_at_the_first_sample_with_no_answer() {
        let mut h = history();
        for e in &mut h {
            if let What::Gauges { values, .. } = &mut e.what {
                if (1500.0..1800.0).contains(&e.t_ms) {
                    values.insert("b".into(), None);
                }
            }
        }
        let spans = gauge_spans(&h, &bounds());
        assert_eq!(spans["b"], [(1080.0, 1500.0), (1780.0, f64::INFINITY)]);
        assert_eq!(
            verdict(&h, &[row("b", 1650.0)], Level::Work),
            Verdict::Invalid
        );
    }

    /// The same silence while pg_locks shows b's lock session (pid 20) held at every sample
    /// (chaos under load: a Python replica's HTTP server too busy to answer, its elector
    /// leading on): b led throughout, and its row then is a leader's. Had its session changed
    /// in between (pid 21 from 1600 ms), the silence is the end of a span, as above.
    #[test]
    fn a_silence_with_the_same_lock_session_held_throughout_does_not_end_a_span() {
        let with_locks = |pid_after_1600: i32| {
            let mut h = history();
            for e in &mut h {
                if let What::Gauges { values, .. } = &mut e.what {
                    if (1500.0..1800.0).contains(&e.t_ms) {
                        values.insert("b".into(), None);
                    }
                }
            }
            let locks: Vec<Entry> = (56..=100)
                .map(|k| {
                    let t_ms = f64::from(k) * 20.0 + 5.0;
                    let pid = if t_ms > 1600.0 { pid_after_1600 } else { 20 };
                    Entry {
                        t_ms,
                        what: What::Locks {
                            rows: vec![(pid, true, "b".into())],
                        },
                    }
                })
                .collect();
            h.extend(locks);
            h.sort_by(|x, y| x.t_ms.total_cmp(&y.t_ms));
            h
        };
        let h = with_locks(20);
        assert_eq!(gauge_spans(&h, &bounds())["b"], [(1080.0, f64::INFINITY)]);
        assert_eq!(
            verdict(&h, &[row("b", 1650.0)], Level::Work),
            Verdict::Valid
        );
        let h = with_locks(21);
        assert_eq!(
            gauge_spans(&h, &bounds())["b"],
            [(1080.0, 1500.0), (1780.0, f64::INFINITY)]
        );
    }
}
