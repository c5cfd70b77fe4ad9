//! DEM-1's order: after a failed check the term ends (the gauge reads 0) before the replica
//! closes its lock connection, and its WARN line comes after that close.

use std::collections::BTreeMap;

use wiretap::Closer;

use super::{History, T};
use crate::check::Verdict;
use crate::timeline::What;

const CHECK: &str = "the demotion's order";

/// The leader `a` checks every T until 1000 ms, where its check goes unanswered (it fails at
/// 1200 ms); `closed` is when, and by whom, its lock connection closed; its gauge reads 1 when
/// asked for before `gauge_zero_ms` and 0 from then on, every 20 ms until 2000 ms; `warn_ms`
/// is when its WARN line was read.
fn demotion(closed: (f64, Closer), gauge_zero_ms: f64, warn_ms: Option<f64>) -> History {
    let mut h = History::election(T, T, 1000.0);
    h.unanswered(1000.0, "a", 1, "SELECT 1");
    h.close_by(closed.0, "a", 1, closed.1);
    h.locks(1000.0, 2000.0, Some((10, "a")));
    h.standby_until(1000.0, 2000.0);
    let mut asked = 10.0;
    while asked < 2000.0 {
        let value = i64::from(asked < gauge_zero_ms);
        let values = BTreeMap::from([("a".to_owned(), Some(value))]);
        let asked_ms = Some(asked);
        h.push(asked + 3.0, What::Gauges { values, asked_ms });
        asked += 20.0;
    }
    if let Some(at) = warn_ms {
        let line = "WARN background leader lock lost: no answer within 0.2s".into();
        let what = What::Log {
            replica: "a".into(),
            line,
        };
        h.push(at, what);
    }
    h
}

#[test]
fn the_term_ends_then_the_connection_closes_then_the_warn_line() {
    // In the page's order: the gauge 0 at 1202, the close at 1203, the WARN read at 1204.
    let c = demotion((1203.0, Closer::Client), 1202.0, Some(1204.0)).judge(CHECK);
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
    // The same, but the close stamped 30 ms late (a loaded proxy) after the WARN line's read:
    // within a quarter of T, not judged out of order.
    let c = demotion((1234.0, Closer::Client), 1202.0, Some(1204.0)).judge(CHECK);
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
}

#[test]
fn a_term_that_outlives_its_connection_fails_dem_1() {
    // Closed at 1203, the gauge still 1 until 1400 (flaw gauge-late).
    let c = demotion((1203.0, Closer::Client), 1400.0, Some(1404.0)).judge(CHECK);
    assert_eq!(c.verdict, Verdict::Invalid, "{c}");
    assert_eq!(c.clauses, ["DEM-1"]);
    assert!(c.message.contains("gauge read 1"), "{c}");
}

#[test]
fn a_warn_line_long_before_the_close_fails_dem_1() {
    // The WARN read at 1201, the term ended and the connection closed at 1400 (flaw warn-first).
    let c = demotion((1401.0, Closer::Client), 1400.0, Some(1201.0)).judge(CHECK);
    assert_eq!(c.verdict, Verdict::Invalid, "{c}");
    assert!(c.message.contains("logged its WARN line"), "{c}");
    assert!(c.message.contains("none near the close"), "{c}");
}

#[test]
fn a_session_the_server_ended_or_no_reading_after_the_close_is_not_judged() {
    // The server closed it (a killed backend): the replica notices at its next check.
    let c = demotion((1203.0, Closer::Server), 1400.0, None).judge(CHECK);
    assert_eq!(c.verdict, Verdict::Unknown, "{c}");
    // No gauge (level 0) and no WARN line: nothing shows the order.
    let mut h = demotion((1203.0, Closer::Client), 1202.0, None);
    h.entries.retain(|e| !matches!(e.what, What::Gauges { .. }));
    let c = h.judge(CHECK);
    assert_eq!(c.verdict, Verdict::Unknown, "{c}");
}

#[test]
fn a_line_between_a_check_let_pass_and_the_demotion_is_not_judged_here() {
    // The check at 1000 fails at 1200 and is let pass (a WARN of other work read at 1201); the
    // next, at 1400, fails at 1600 and demotes in order. Letting one pass is RUN-5's finding.
    let mut h = demotion((1601.0, Closer::Client), 1600.0, Some(1201.0));
    h.unanswered(1400.0, "a", 1, "SELECT 1");
    let c = h.judge(CHECK);
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
}

#[test]
fn a_close_just_before_the_wires_deadline_is_the_demotion() {
    // The program's deadline began before its check reached the proxy: it closed at 1199.6,
    // 0.4 ms before the failure the wire computes (1200); its gauge still read 1 after.
    let c = demotion((1199.6, Closer::Client), 1400.0, None).judge(CHECK);
    assert_eq!(c.verdict, Verdict::Invalid, "{c}");
}

/// Seen in the chaos seeds: a sample's ask is the oldest of its replicas', so a reading of the
/// replica's next term (granted at 1500) can carry an ask from before that grant.
#[test]
fn a_reading_answered_after_the_next_grant_is_of_the_next_term() {
    let mut h = demotion((1203.0, Closer::Client), 1202.0, Some(1204.0));
    h.open(1400.0, "a", 2, 11);
    h.said(1499.0, "a", 2, super::LOCK, "t");
    let values = BTreeMap::from([("a".to_owned(), Some(1))]);
    let asked_ms = Some(1490.0);
    h.push(1505.0, What::Gauges { values, asked_ms });
    let c = h.judge(CHECK);
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
}

/// A correct program whose loop tick failed on the same bad link and logged a WARN, while the
/// program's own check deadline fired 0.4T late (a starved process): its demotion's WARN
/// comes right after the close, and the earlier line is not it.
#[test]
fn an_earlier_warn_of_other_work_is_not_the_demotions() {
    let mut h = demotion((1281.0, Closer::Client), 1280.0, Some(1282.0));
    let what = What::Log {
        replica: "a".into(),
        line: "WARN background loop tick failed: timeout".into(),
    };
    h.push(1210.0, what);
    let c = h.judge(CHECK);
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
}

/// Seen in `ci/gallery-rate.sh` (warn-first, 1 run of 10): the program's deadline began before
/// its check reached the proxy, so its WARN was read 0.5 ms before the failure the wire
/// computes; the close came 1T later.
#[test]
fn a_warn_line_just_before_the_wires_deadline_is_the_demotions() {
    let c = demotion((1400.0, Closer::Client), 1400.0, Some(1199.5)).judge(CHECK);
    assert_eq!(c.verdict, Verdict::Invalid, "{c}");
}
