//! The unit tests of `check`.

use super::*;
use crate::check::probes::tests::started;

/// A fault entry: `verb` on `target` applied (or, with `lifted`, lifted) at `t_ms`.
pub(crate) fn fault(t_ms: f64, verb: Verb, target: &str, lifted: bool) -> Entry {
    Entry {
        t_ms,
        what: What::Fault {
            verb,
            target: target.into(),
            lifted,
        },
    }
}

/// A replica's event at `t_ms` (shared with the snapshot tests).
pub(crate) fn ev(t_ms: f64, replica: &str, event: ReplicaEvent) -> Entry {
    Entry {
        t_ms,
        what: What::Replica {
            replica: replica.into(),
            event,
        },
    }
}

pub(crate) fn gauges(t_ms: f64, pairs: &[(&str, i64)]) -> Entry {
    Entry {
        t_ms,
        what: What::Gauges {
            values: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Some(*v)))
                .collect(),
            asked_ms: None,
        },
    }
}

/// Below level 3 (no events), two gauges at 1 are an overlap as long as they last no
/// longer than DEM-3's bound (2T + one tick = 600 ms here) plus a sample period and the
/// slack (60 ms): 640 ms passes, 700 ms does not; three at once never does.
#[test]
fn without_events_a_gauge_sum_of_2_is_held_to_the_overlap_bound() {
    let b = bounds();
    let run = |two_for_ms: f64| {
        let mut entries = vec![gauges(0.0, &[("a", 1), ("b", 0)])];
        let mut t = 100.0;
        while t <= 100.0 + two_for_ms {
            entries.push(gauges(t, &[("a", 1), ("b", 1)]));
            t += 20.0;
        }
        entries.push(gauges(t, &[("a", 0), ("b", 1)]));
        gauge_sum_at(&entries, t, &b, Level::Metrics).verdict
    };
    assert_eq!(run(640.0), Verdict::Valid);
    assert_eq!(run(700.0), Verdict::Invalid);
    let three = [gauges(0.0, &[("a", 1), ("b", 1), ("c", 1)])];
    assert_eq!(
        gauge_sum_at(&three, 0.0, &b, Level::Metrics).verdict,
        Verdict::Invalid
    );
    // With the event stream, unexplained sums of 2 are bad at once.
    let mut short = vec![gauges(0.0, &[("a", 1), ("b", 0)])];
    short.push(gauges(100.0, &[("a", 1), ("b", 1)]));
    assert_eq!(gauge_sum(&short, 100.0, &b).verdict, Verdict::Invalid);
}

/// The bounds of the checkers' tests: T = 200 ms (shared with the history checks' tests).
pub(crate) fn bounds() -> Bounds {
    let ms = Duration::from_millis;
    Bounds {
        t: ms(200),
        tick: ms(200),
        sample: ms(20),
        slack: ms(40),
    }
}

pub(crate) fn acquired(term: u64) -> ReplicaEvent {
    ReplicaEvent::Acquired {
        term,
        backend_pid: 1,
    }
}

pub(crate) fn demoted(term: u64) -> ReplicaEvent {
    ReplicaEvent::Demoted {
        term,
        error: "x".into(),
    }
}

#[test]
fn overlap_within_and_beyond_the_bound() {
    let ok = vec![
        ev(0.0, "a", acquired(1)),
        ev(100.0, "b", acquired(1)),
        ev(400.0, "a", demoted(1)),
    ];
    let c = overlap_bound(&ok, 1000.0, &bounds());
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    assert_eq!(c.figures["max overlap"], "1.50T");
    let m = &c.measures[0];
    assert_eq!((m.value, m.bound, m.worse), (Some(1.5), 3.0, Worse::Above));
    let window = Window {
        from_ms: 100.0,
        bound_ms: 700.0,
        at_ms: Some(400.0),
    };
    assert_eq!(
        m.window,
        Some(window),
        "from the overlap's start to 2T + tick"
    );

    let bad = vec![
        ev(0.0, "a", acquired(1)),
        ev(100.0, "b", acquired(1)),
        ev(800.0, "a", demoted(1)),
    ];
    let c = overlap_bound(&bad, 1000.0, &bounds());
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
    assert_eq!(c.figures["max overlap"], "3.50T");
}

#[test]
fn gauge_sum_two_only_inside_overlap() {
    let mut tl = vec![
        ev(0.0, "a", acquired(1)),
        gauges(10.0, &[("a", 1), ("b", 0)]),
    ];
    tl.push(ev(100.0, "b", acquired(1)));
    tl.push(gauges(150.0, &[("a", 1), ("b", 1)]));
    tl.push(ev(300.0, "a", demoted(1)));
    tl.push(gauges(330.0, &[("a", 0), ("b", 1)]));
    assert_eq!(gauge_sum(&tl, 400.0, &bounds()).verdict, Verdict::Valid);
    // A sum of 2 with no overlap by the events is a violation.
    tl.push(gauges(390.0, &[("a", 1), ("b", 1)]));
    let c = gauge_sum(&tl, 400.0, &bounds());
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
    assert_eq!(gauge_sum(&[], 0.0, &bounds()).verdict, Verdict::Unknown);
}

/// Chaos seed 4 (CI, stop 13): a sum of 2 at a handover with no overlap of terms, on a
/// loaded host. A value answered late shows its replica as it was when asked for, and the
/// new leader's gauge goes to 1 before the harness reads its `acquired`: neither is a
/// second leader. A value that no moment of the sample's stretch explains still is.
#[test]
fn a_sum_of_two_from_a_stale_value_or_a_late_event_is_no_overlap() {
    let stale = |t_ms: f64, asked: f64| Entry {
        t_ms,
        what: What::Gauges {
            values: [("a".to_owned(), Some(1)), ("b".to_owned(), Some(1))].into(),
            asked_ms: Some(asked),
        },
    };
    // a's last answer was asked for at 280 ms, before its demotion; b took over at 320 ms.
    let handover = vec![
        ev(0.0, "a", acquired(1)),
        ev(300.0, "a", demoted(1)),
        ev(320.0, "b", acquired(1)),
        stale(380.0, 280.0),
    ];
    let c = gauge_sum(&handover, 500.0, &bounds());
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    // The same values asked for after a's demotion (plus a period and the slack) are two
    // leaders by the gauges that the events do not show.
    let mut fresh = handover.clone();
    fresh[3] = stale(380.0, 370.0);
    let c = gauge_sum(&fresh, 500.0, &bounds());
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
    // b's gauge is 1 at 150 ms, its `acquired` read 180 ms later (within T), a still leads.
    let late = vec![
        ev(0.0, "a", acquired(1)),
        gauges(150.0, &[("a", 1), ("b", 1)]),
        ev(330.0, "b", acquired(1)),
        ev(400.0, "a", demoted(1)),
    ];
    let c = gauge_sum(&late, 500.0, &bounds());
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    // Read 450 ms later, more than the report lag (T), it is a second leader by the gauges.
    let mut too_late = late.clone();
    too_late[2].t_ms = 600.0;
    too_late.swap(2, 3);
    let c = gauge_sum(&too_late, 700.0, &bounds());
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
}

#[test]
fn lock_rows_and_agreement() {
    let locks = |t_ms: f64, holder: Option<&str>| Entry {
        t_ms,
        what: What::Locks {
            rows: holder
                .map(|h| vec![(1, true, h.to_owned())])
                .unwrap_or_default(),
        },
    };
    let tl = vec![
        gauges(0.0, &[("a", 1)]),
        locks(5.0, Some("a")),
        gauges(20.0, &[("a", 0)]),
        locks(25.0, None),
    ];
    assert_eq!(one_lock_row(&tl).verdict, Verdict::Valid);
    assert_eq!(gauge_matches_locks(&tl, &bounds()).verdict, Verdict::Valid);
    let two = vec![Entry {
        t_ms: 0.0,
        what: What::Locks {
            rows: vec![(1, true, "a".into()), (2, true, "b".into())],
        },
    }];
    assert_eq!(one_lock_row(&two).verdict, Verdict::Invalid);
    // The gauge says b while pg_locks says a for a whole second.
    let long = vec![
        ev(0.0, "a", acquired(1)),
        gauges(0.0, &[("b", 1)]),
        locks(1.0, Some("a")),
        locks(1000.0, Some("a")),
    ];
    assert_eq!(
        gauge_matches_locks(&long, &bounds()).verdict,
        Verdict::Invalid
    );
    // A frozen holder answers no gauge for seconds: those samples decide nothing, but a
    // readable replica that claims to lead meanwhile still disagrees.
    let frozen = |t_ms: f64, b: i64| Entry {
        t_ms,
        what: What::Gauges {
            values: [("a".to_owned(), None), ("b".to_owned(), Some(b))].into(),
            asked_ms: None,
        },
    };
    let tl = vec![
        frozen(0.0, 0),
        locks(1.0, Some("a")),
        frozen(900.0, 0),
        locks(901.0, Some("a")),
    ];
    let c = gauge_matches_locks(&tl, &bounds());
    assert_eq!(c.verdict, Verdict::Unknown, "{c:?}");
    let tl: Vec<Entry> = (0..=45)
        .flat_map(|k| {
            let t = f64::from(k) * 20.0;
            [frozen(t, 1), locks(t + 1.0, None)]
        })
        .collect();
    assert_eq!(
        gauge_matches_locks(&tl, &bounds()).verdict,
        Verdict::Invalid
    );
    // The server restarts: pg_locks cannot be read for a second while the old holder's
    // gauge went to 0. The stale sample decides nothing; fresh samples still do.
    let restart = vec![
        gauges(0.0, &[("a", 1)]),
        locks(1.0, Some("a")),
        gauges(20.0, &[("a", 0)]),
        gauges(500.0, &[("a", 0)]),
        gauges(1000.0, &[("a", 0)]),
        locks(1001.0, None),
    ];
    let c = gauge_matches_locks(&restart, &bounds());
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    let fresh = vec![
        ev(0.0, "a", acquired(1)),
        gauges(0.0, &[("a", 0)]),
        locks(1.0, Some("a")),
        locks(300.0, Some("a")),
        gauges(301.0, &[("a", 0)]),
        locks(600.0, Some("a")),
        locks(1000.0, Some("a")),
    ];
    let c = gauge_matches_locks(&fresh, &bounds());
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
}

/// LOCK-3's half that asks for the row: a leader by its gauge whose row went, and the
/// server stopped just after (CI chaos seed 9): no pg_locks sample for 1.3 s while the
/// leader demotes. Nothing was seen in the gap; sampled all along, the same gauge without
/// a row is a leader without its lock.
#[test]
fn a_leader_without_its_row_is_judged_where_pg_locks_was_read() {
    let locks = |t_ms: f64, held: bool| Entry {
        t_ms,
        what: What::Locks {
            rows: if held {
                vec![(1, true, "a".to_owned())]
            } else {
                vec![]
            },
        },
    };
    let samples = |from: f64, to: f64, gauge: i64, held: bool| {
        let mut t = from;
        let mut v = Vec::new();
        while t < to {
            v.push(gauges(t, &[("a", gauge), ("b", 0)]));
            v.push(locks(t + 1.0, held));
            t += 20.0;
        }
        v
    };
    let mut gap = samples(0.0, 200.0, 1, true);
    gap.extend(samples(200.0, 240.0, 1, false));
    gap.extend(samples(1500.0, 1700.0, 0, false));
    let c = lock_row_while_leading(&gap, &bounds());
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    // The first sample after the gap decides nothing (a replica killed meanwhile answers
    // no gauge): the stretch still ends before the gap (chaos seed 2, stop-server).
    let mut unanswered = samples(0.0, 200.0, 1, true);
    unanswered.extend(samples(200.0, 240.0, 1, false));
    unanswered.push(Entry {
        t_ms: 1500.0,
        what: What::Gauges {
            values: [("a".to_owned(), None), ("b".to_owned(), Some(0))].into(),
            asked_ms: None,
        },
    });
    unanswered.push(locks(1501.0, false));
    let c = lock_row_while_leading(&unanswered, &bounds());
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    let mut seen = samples(0.0, 200.0, 1, true);
    seen.extend(samples(200.0, 1500.0, 1, false));
    seen.extend(samples(1500.0, 1700.0, 0, false));
    let c = lock_row_while_leading(&seen, &bounds());
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
}

/// Chaos seed 4: a leader behind a link slower than T demotes, and its standby attempts,
/// each given up after T, are granted anyway: for 4T pg_locks shows one short-lived row of
/// no term after another while no gauge says 1. Each row is a grant nobody checks, which
/// `rows_belong_to_terms` bounds; none says who leads. A row of no term that outlives that
/// allowance is a disagreement from its first sighting.
#[test]
fn given_up_grants_say_nothing_of_who_leads() {
    let row = |t_ms: f64, pid: i32| Entry {
        t_ms,
        what: What::Locks {
            rows: vec![(pid, true, "c".to_owned())],
        },
    };
    let mut tl = vec![
        ev(0.0, "c", acquired(1)),
        gauges(10.0, &[("c", 1), ("d", 0)]),
        row(11.0, 1),
        ev(100.0, "c", demoted(1)),
    ];
    for k in 0..40 {
        let t = 120.0 + f64::from(k) * 20.0;
        // A new given-up attempt's session every T (200 ms), each seen for 180 ms.
        tl.push(gauges(t, &[("c", 0), ("d", 0)]));
        tl.push(row(t + 1.0, 100 + k / 10));
    }
    let mut stuck = tl.clone();
    tl.push(gauges(1000.0, &[("c", 0), ("d", 0)]));
    tl.push(Entry {
        t_ms: 1001.0,
        what: What::Locks { rows: Vec::new() },
    });
    let c = gauge_matches_locks(&tl, &bounds());
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    for k in 40..80 {
        let t = 120.0 + f64::from(k) * 20.0;
        stuck.push(gauges(t, &[("c", 0), ("d", 0)]));
        stuck.push(row(t + 1.0, 103));
    }
    let c = gauge_matches_locks(&stuck, &bounds());
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
}

#[test]
fn a_thawed_leader_that_abandons_leads_no_longer() {
    let fault = |t_ms, lifted| fault(t_ms, Verb::Freeze, "a", lifted);
    let abandoned = ReplicaEvent::Abandoned {
        term: 1,
        panicked: false,
    };
    let h = vec![
        ev(0.0, "a", acquired(1)),
        fault(100.0, false),
        fault(200.0, true),
        ev(250.0, "a", abandoned),
    ];
    let spans = leadership_spans(&h, 5000.0);
    assert_eq!(spans["a"], vec![(0.0, 100.0), (200.0, 250.0)]);
}

/// CI chaos seed 3: r2 led from 17 102 ms, was SIGTERMed while partitioned and still waited
/// on its unlock when the round's `restart` SIGKILLed it (the call began at 18 690 ms); r1
/// acquired at 18 752 and the new r2 reported `started` at 18 770. The old process led no
/// longer once killed: the restart closes its span as a `kill` does.
#[test]
fn a_restart_ends_the_old_process_leadership_as_it_begins() {
    let h = vec![
        ev(17_102.0, "r2", acquired(1)),
        fault(17_300.0, Verb::Terminate, "r2", false),
        fault(18_690.0, Verb::Restart, "r2", false),
        ev(18_752.0, "r1", acquired(1)),
        ev(18_770.0, "r2", started(true)),
    ];
    let spans = leadership_spans(&h, 20_000.0);
    assert_eq!(spans["r2"], vec![(17_102.0, 18_690.0)]);
    let c = overlap_bound(&h, 20_000.0, &bounds());
    assert_eq!(c.figures["overlaps"], "0", "{c:?}");
}

/// Chaos seed 3 with the elector's lease: r3 was frozen while it led, and when SIGCONT came
/// its lease had run out, so it demoted at once: its `demoted` (36 866.07 ms) came before
/// the thaw's call returned (36 866.36). Placed at that return, the thaw seemed to resume a
/// leader that never demoted afterwards, until its next `acquired` at 39 559: an overlap of
/// 4.97T with r2's and r1's terms. A thaw takes effect as its call begins.
#[test]
fn a_thawed_leader_that_demotes_as_it_wakes_leads_no_longer() {
    let thaw = crate::fault::FaultRecord {
        verb: Verb::Freeze,
        target: "r3".into(),
        lifted: true,
        label: "SIGCONT r3".into(),
        start: Duration::from_micros(36_865_900),
        end: Duration::from_micros(36_866_360),
    };
    let thaw_ms = thaw.took_effect().as_secs_f64() * 1000.0;
    let h = vec![
        ev(35_762.0, "r3", acquired(5)),
        fault(36_061.0, Verb::Freeze, "r3", false),
        ev(36_803.0, "r2", acquired(1)),
        ev(36_866.07, "r3", demoted(5)),
        fault(thaw_ms, Verb::Freeze, "r3", true),
        ev(37_401.0, "r2", demoted(1)),
        ev(37_463.0, "r1", acquired(3)),
        ev(38_566.0, "r1", demoted(3)),
        ev(39_559.0, "r3", acquired(6)),
        ev(39_900.0, "r3", demoted(6)),
    ];
    let mut h = h;
    h.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
    let spans = leadership_spans(&h, 40_000.0);
    let resumed = (36_865.9, 36_866.07);
    assert_eq!(
        spans["r3"],
        vec![(35_762.0, 36_061.0), resumed, (39_559.0, 39_900.0)]
    );
    let c = overlap_bound(&h, 40_000.0, &bounds());
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
}

#[test]
fn frozen_leader_is_not_counted_while_frozen() {
    let fault = |t_ms, lifted| fault(t_ms, Verb::Freeze, "a", lifted);
    let tl = vec![
        ev(0.0, "a", acquired(1)),
        fault(100.0, false),
        ev(1000.0, "b", acquired(1)),
        fault(2000.0, true),
        ev(2010.0, "a", demoted(1)),
    ];
    let spans = leadership_spans(&tl, 3000.0);
    assert_eq!(spans["a"], vec![(0.0, 100.0), (2000.0, 2010.0)]);
    let c = overlap_bound(&tl, 3000.0, &bounds());
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    assert_eq!(c.figures["max overlap"], "0.05T");
}
