//! Which connection held the lock: the lock sessions the wire model names from pg_locks
//! samples, where a pid alone could name the wrong connection.

use wiretap::WireEvent;

use super::{History, LOCK};
use crate::check::wire::model::WireModel;
use crate::check::Verdict;
use crate::timeline::{Entry, What};

/// Clean-clone CI, chaos seed 3 with `--wake`: b's queued waiter (connection 2, pid 23) was
/// killed with b at 600 ms; the server, its backend blocked in the lock queue and not reading
/// its socket, granted it the lock at 900 ms, long after. Its connection is gone: no session of
/// b holds the lock, and b's pooled connection 1 (pid 30), whose last lock call was refused and
/// which then read `leader_work`, is no lock session.
#[test]
fn a_grant_to_a_closed_connection_is_no_lock_session() {
    let mut h = History::default();
    h.open(0.0, "b", 2, 23);
    h.wire(
        5.0,
        "b",
        2,
        WireEvent::Statement {
            id: 99,
            sql: "SELECT pg_advisory_lock(1886156915, 1)".into(),
            params: vec![],
        },
    );
    h.open(0.0, "b", 1, 30);
    h.said(500.0, "b", 1, LOCK, "f");
    h.said(
        550.0,
        "b",
        1,
        "SELECT count(*) FROM leader_work WHERE loop_name = 'x'",
        "0",
    );
    h.close(600.0, "b", 2);
    h.locks(900.0, 1000.0, Some((23, "b")));
    h.said(
        950.0,
        "b",
        1,
        "SELECT count(*) FROM leader_work WHERE loop_name = 'x'",
        "0",
    );
    let c = h.judge("the lock session carries only the checks");
    assert_ne!(c.verdict, Verdict::Invalid, "{c}");
}

/// A pid the server hands out again (a restarted server numbers its backends from the start)
/// does not make a connection whose last lock call was refused a lock session: the refusal
/// shows its backend held no key then, and it asked for none since (the chaos run of seed 3
/// once read a pooled connection's refused check as a grant, and its work as work on a lock
/// session).
#[test]
fn a_refused_call_is_no_grant_whatever_pid_the_lock_shows() {
    let mut h = History::default();
    h.open(0.0, "b", 1, 23);
    h.said(500.0, "b", 1, LOCK, "f");
    h.locks(490.0, 700.0, Some((23, "b")));
    h.said(
        600.0,
        "b",
        1,
        "INSERT INTO leader_work (loop_name, replica, term) VALUES ('x', 'b', 1)",
        "",
    );
    let c = h.judge("the lock session carries only the checks");
    assert_ne!(c.verdict, Verdict::Invalid, "{c}");
}

/// A connection opened before the server went down (a stop or a restart) holds nothing after
/// it came back, even when its close was not seen and a backend of the new server has its pid.
#[test]
fn a_connection_from_before_a_server_restart_holds_no_lock_after_it() {
    let mut h = History::default();
    h.open(0.0, "b", 1, 23);
    h.said(10.0, "b", 1, LOCK, "t");
    h.locks(20.0, 100.0, Some((23, "b")));
    server_restart(&mut h, 100.0, 300.0);
    h.locks(320.0, 500.0, Some((23, "b")));
    h.said(
        400.0,
        "b",
        1,
        "INSERT INTO leader_work (loop_name, replica, term) VALUES ('x', 'b', 1)",
        "",
    );
    h.entries.sort_by(|x, y| x.t_ms.total_cmp(&y.t_ms));
    let model = WireModel::of(&h.entries);
    let after: Vec<f64> = (model.sessions.iter())
        .filter(|l| l.granted_ms > 100.0)
        .map(|l| l.granted_ms)
        .collect();
    assert!(after.is_empty(), "sessions after the restart: {after:?}");
    let c = h.judge("the lock session carries only the checks");
    assert_ne!(c.verdict, Verdict::Invalid, "{c}");
}

/// A server stop or restart in `h`, applied at `down` and lifted at `up`.
fn server_restart(h: &mut History, down: f64, up: f64) {
    for (t_ms, lifted) in [(down, false), (up, true)] {
        h.entries.push(Entry {
            t_ms,
            what: What::Fault {
                verb: crate::fault::Verb::RestartServer,
                target: "postgres".into(),
                lifted,
            },
        });
    }
}

/// The elector's leader check: it stamps the session (a setting), on the lock session.
const LEADER_CHECK: &str =
    "SELECT pg_backend_pid(), set_config('plexsphere.background_leader_checked', '1', false)";

/// Clean-clone CI, 2026-12-07 (`chaos::case_4_seed_9_pgbouncer_session`): b reaches the server
/// through PgBouncer, so its client connection (opened before a server restart) outlives the
/// restart; after it, a lock call on that connection was answered `granted` and pg_locks
/// showed a new server backend of b holding the key. That connection is b's lock session, and
/// its leader checks are no setting changed next to a refused check (RUN-2).
#[test]
fn a_pooled_connection_from_before_a_server_restart_can_be_granted_after_it() {
    let run = |answer: &str| {
        let mut h = History::default();
        h.open(0.0, "b", 1, 1_555_000); // PgBouncer's key, not a server pid
        h.said(50.0, "b", 1, LOCK, "f");
        server_restart(&mut h, 100.0, 300.0);
        h.said(1400.0, "b", 1, LOCK, answer);
        if answer == "t" {
            h.locks(1410.0, 1700.0, Some((28, "b")));
        }
        h.said(1450.0, "b", 1, LEADER_CHECK, "28");
        h.entries.sort_by(|x, y| x.t_ms.total_cmp(&y.t_ms));
        h
    };
    let h = run("t");
    let model = WireModel::of(&h.entries);
    let granted: Vec<f64> = model.sessions.iter().map(|l| l.granted_ms).collect();
    assert_eq!(granted, vec![1401.0], "the lock sessions");
    let c = h.judge("refused checks leave the pool alone");
    assert_ne!(c.verdict, Verdict::Invalid, "{c}");
    // The same statement next to a call answered false is a setting changed by a refused check.
    let c = run("f").judge("refused checks leave the pool alone");
    assert_eq!(c.verdict, Verdict::Invalid, "{c}");
}

/// 2026-12-07, a program written to the page behind PgBouncer in session mode: a released its
/// lock and closed its client connection; PgBouncer handed the same server backend (pid 37)
/// to b, whose lock call, sent just before the release, was answered `t` after it; pg_locks
/// showed pid 37 holding the key all along, first for a, then for b. b's grant is a lock
/// session of its own (not a's going on), and the `SET` b sent after it is no setting changed
/// next to a refused check (RUN-2).
#[test]
fn a_backend_handed_from_one_replica_to_another_holds_a_new_lock_session() {
    let mut h = History::default();
    h.open(0.0, "a", 1, 111);
    h.said(1.0, "a", 1, LOCK, "t");
    h.locks(10.0, 300.0, Some((37, "a")));
    h.open(0.0, "b", 1, 222);
    h.said(90.0, "b", 1, LOCK, "f");
    h.answered(290.0, 305.0, ("b", 1), LOCK, "t");
    h.answered(
        295.0,
        299.0,
        ("a", 1),
        "SELECT pg_advisory_unlock(1886156915, 1)",
        "t",
    );
    h.close(300.0, "a", 1);
    h.said(306.0, "b", 1, "SET idle_session_timeout = 800", "");
    h.locks(310.0, 700.0, Some((37, "b")));
    h.said(500.0, "b", 1, "SELECT 1", "1");
    h.entries.sort_by(|x, y| x.t_ms.total_cmp(&y.t_ms));
    let model = WireModel::of(&h.entries);
    let held: Vec<(&str, f64)> = (model.sessions.iter())
        .map(|l| (l.replica.as_str(), l.granted_ms))
        .collect();
    assert_eq!(held, vec![("a", 2.0), ("b", 305.0)], "the lock sessions");
    let c = h.judge("refused checks leave the pool alone");
    assert_ne!(c.verdict, Verdict::Invalid, "{c}");
}
