//! The unit tests of `coverage`: one history, each strike's role and phase.

use super::*;
use crate::check::tests::fault;
use crate::replica::control::WorkerMode;
use wiretap::{Closer, Outcome, WireEvent};

fn wire(t_ms: f64, replica: &str, conn: u64, event: WireEvent) -> Entry {
    Entry {
        t_ms,
        what: What::Wire {
            replica: replica.into(),
            conn,
            event,
        },
    }
}

fn sent(t_ms: f64, replica: &str, conn: u64, id: u64, sql: &str) -> Entry {
    let event = WireEvent::Statement {
        id,
        sql: sql.into(),
        params: vec![],
    };
    wire(t_ms, replica, conn, event)
}

fn answered(t_ms: f64, replica: &str, conn: u64, id: u64, value: &str) -> Entry {
    let outcome = Outcome::Done {
        tags: vec!["SELECT 1".into()],
        rows: 1,
        row: Some(vec![Some(value.into())]),
    };
    wire(t_ms, replica, conn, WireEvent::Answer { id, outcome })
}

fn locks(t_ms: f64, rows: &[(i32, &str)]) -> Entry {
    let rows = (rows
        .iter()
        .map(|(pid, app)| (*pid, true, (*app).to_owned())))
    .collect();
    Entry {
        t_ms,
        what: What::Locks { rows },
    }
}

fn worker(t_ms: f64, replica: &str, mode: WorkerMode) -> Entry {
    let switch = Switch::Worker {
        name: "background-leader".into(),
        mode,
    };
    Entry {
        t_ms,
        what: What::Control {
            replica: replica.into(),
            switch,
        },
    }
}

/// r1 leads from 10 ms on its connection 1 until the server restarts at 205, its check in
/// flight from 200 to 210; r2 keeps a blocking call queued on its connection 2 throughout.
fn history() -> Vec<Entry> {
    const TRY: &str = "SELECT pg_try_advisory_lock(1886156915, 1)";
    const WAIT: &str = "SELECT pg_advisory_lock(1886156915, 1)";
    let mut e = vec![
        wire(0.0, "r1", 1, WireEvent::Opened),
        wire(0.0, "r1", 1, WireEvent::Backend { pid: 7 }),
        sent(5.0, "r1", 1, 1, TRY),
        answered(10.0, "r1", 1, 1, "t"),
        wire(0.0, "r2", 2, WireEvent::Opened),
        wire(0.0, "r2", 2, WireEvent::Backend { pid: 8 }),
        sent(15.0, "r2", 2, 1, WAIT),
        locks(20.0, &[(7, "r1")]),
        fault(100.0, Verb::Partition, "r1", false),
        fault(120.0, Verb::Partition, "r1", true),
        fault(150.0, Verb::Kill, "r2", false),
        fault(160.0, Verb::Restart, "r2", false),
        sent(200.0, "r1", 1, 2, "SELECT 1"),
        fault(205.0, Verb::RestartServer, "postgres", false),
        answered(210.0, "r1", 1, 2, "1"),
        fault(250.0, Verb::RestartServer, "postgres", true),
        locks(290.0, &[(7, "r1")]),
        wire(
            300.0,
            "r1",
            1,
            WireEvent::Closed {
                by: Closer::Client,
                terminate: true,
            },
        ),
        locks(305.0, &[]),
        fault(310.0, Verb::KillBackend, "backend 7", false),
        worker(320.0, "r2", WorkerMode::Crash),
        worker(330.0, "r2", WorkerMode::Ok),
    ];
    e.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
    e
}

#[test]
fn each_strike_has_its_role_and_phase_and_lifts_are_no_strikes() {
    let entries = history();
    let c = Coverage::of(&entries, &WireModel::of(&entries));
    let f = Strike::Fault;
    let crash = Strike::Switch(Switch::Worker {
        name: "background-leader".into(),
        mode: WorkerMode::Crash,
    });
    let expected = [
        (f(Verb::Partition), Role::Leader, Phase::Steady),
        (f(Verb::Kill), Role::Standby, Phase::Queued),
        (f(Verb::RestartServer), Role::Server, Phase::MidCheck),
        (f(Verb::KillBackend), Role::Backend, Phase::MidHandover),
        (crash, Role::Standby, Phase::MidHandover),
    ];
    for (strike, role, phase) in &expected {
        assert_eq!(
            c.count(strike, *role, *phase),
            1,
            "{strike} {role:?} {phase:?}: {c:?}"
        );
    }
    assert_eq!(
        c.strikes(),
        expected.len(),
        "a heal, a restart, a switch back to ok: {c:?}"
    );
}

#[test]
fn the_table_has_a_row_per_strike_and_role_and_names_the_phases_never_reached() {
    let entries = history();
    let mut c = Coverage::of(&entries, &WireModel::of(&entries));
    c.add(&c.clone());
    let t = c.table();
    assert_eq!(
        t.columns,
        [
            "strike",
            "role",
            "steady",
            "mid-check",
            "mid-handover",
            "queued"
        ]
    );
    assert_eq!(t.rows.len(), 5);
    let kill = (t.rows.iter())
        .find(|r| r[0] == "kill")
        .expect("a row for kill");
    assert_eq!(kill[1..], ["standby", "·", "·", "·", "2"]);
    assert!(t
        .rows
        .iter()
        .any(|r| r[0] == "crash worker background-leader"));
    assert!(t.note.starts_with("10 strike(s)"), "{}", t.note);
    assert!(
        t.note.ends_with("phases no strike reached: none"),
        "{}",
        t.note
    );
    let only_partition = [fault(100.0, Verb::Partition, "r1", false)];
    let t = Coverage::of(&only_partition, &WireModel::default()).table();
    assert!(
        t.note
            .ends_with("phases no strike reached: steady, mid-check, queued"),
        "nobody held the lock: {}",
        t.note
    );
}

/// A strike's role and phase are those of the moment its step began: a `disable` closes the
/// leader's connections before its call returns, when the history stamps it (a 20-seed soak
/// counted every `disable` of a leader as a standby's, mid-handover).
#[test]
fn a_strike_is_read_at_the_moment_its_step_began() {
    let step = |t_ms: f64| Entry {
        t_ms,
        what: What::Step {
            label: "3: disable leader".into(),
            acts: true,
        },
    };
    let mut entries = vec![
        wire(0.0, "r1", 1, WireEvent::Opened),
        wire(0.0, "r1", 1, WireEvent::Backend { pid: 7 }),
        sent(
            5.0,
            "r1",
            1,
            1,
            "SELECT pg_try_advisory_lock(1886156915, 1)",
        ),
        answered(10.0, "r1", 1, 1, "t"),
        locks(20.0, &[(7, "r1")]),
        step(400.0),
        wire(
            405.0,
            "r1",
            1,
            WireEvent::Closed {
                by: Closer::Proxy,
                terminate: false,
            },
        ),
        fault(410.0, Verb::Disable, "r1", false),
        locks(420.0, &[]),
    ];
    entries.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
    let c = Coverage::of(&entries, &WireModel::of(&entries));
    let disable = Strike::Fault(Verb::Disable);
    assert_eq!(c.count(&disable, Role::Leader, Phase::Steady), 1, "{c:?}");
}
