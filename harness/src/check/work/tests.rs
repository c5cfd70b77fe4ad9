//! The unit tests of `work`.

use super::*;
use crate::check::tests::{acquired, bounds, demoted, ev, fault};
use crate::fault::FaultRecord;

#[test]
fn work_rows_must_come_from_the_leader() {
    let tl = vec![
        ev(0.0, "a", acquired(1)),
        ev(500.0, "a", demoted(1)),
        ev(520.0, "b", acquired(1)),
    ];
    let row = |replica: &str, t_ms: f64| WorkRow {
        loop_name: "invitations-expire".into(),
        replica: replica.into(),
        term: 1,
        t_ms,
        fence: None,
    };
    let good = [row("a", 100.0), row("b", 700.0)];
    assert_eq!(
        work_only_from_leader(&tl, &good, 1000.0, &bounds(), &BTreeSet::new()).verdict,
        Verdict::Valid
    );
    let bad = [row("b", 200.0)];
    assert_eq!(
        work_only_from_leader(&tl, &bad, 1000.0, &bounds(), &BTreeSet::new()).verdict,
        Verdict::Invalid
    );
}

/// Chaos seed 3 with `--wake`: a standby granted the lock and frozen at once writes a row
/// of its new term before the freeze, and its `acquired` line is read after the thaw. The
/// row is its term's; a leader frozen while leading gets no such start.
#[test]
fn a_standby_granted_just_before_a_freeze_leads_from_the_freeze() {
    let row = |replica: &str, term, t_ms| WorkRow {
        loop_name: "sse-nonce-sweep".into(),
        replica: replica.into(),
        term,
        t_ms,
        fence: None,
    };
    let standby = vec![
        ev(0.0, "b", acquired(1)),
        fault(1000.0, Verb::KillBackend, "b", false),
        fault(1000.5, Verb::Freeze, "a", false),
        ev(1085.0, "b", demoted(1)),
        fault(1350.0, Verb::Freeze, "a", true),
        ev(1352.0, "a", acquired(2)),
    ];
    let early = [row("a", 2, 1000.2)];
    let check = |tl: &[Entry], rows: &[WorkRow]| {
        work_only_from_leader(tl, rows, 2000.0, &bounds(), &BTreeSet::new()).verdict
    };
    assert_eq!(check(&standby, &early), Verdict::Valid);
    // Read later than the report lag after the thaw: the term began after it.
    let mut late = standby.clone();
    late[5].t_ms = 1600.0;
    assert_eq!(check(&late, &early), Verdict::Invalid);
    // A leader frozen while leading: its span ended at the freeze, and a row during the
    // freeze is not admitted by a term reported after the thaw.
    let leader = vec![
        ev(0.0, "a", acquired(1)),
        fault(1000.0, Verb::Freeze, "a", false),
        fault(1350.0, Verb::Freeze, "a", true),
        ev(1352.0, "a", demoted(1)),
        ev(1360.0, "a", acquired(2)),
    ];
    assert_eq!(check(&leader, &[row("a", 1, 1200.0)]), Verdict::Invalid);
}

#[test]
fn a_write_held_by_its_link_is_counted_apart_and_a_late_write_without_one_is_not() {
    let fault = |t_ms, verb, lifted| fault(t_ms, verb, "a", lifted);
    let row = |t_ms| WorkRow {
        loop_name: "sweep".into(),
        replica: "a".into(),
        term: 1,
        t_ms,
        fence: None,
    };
    let stalled = vec![
        ev(0.0, "a", acquired(1)),
        fault(100.0, Verb::Stall, false),
        ev(300.0, "a", demoted(1)),
        fault(900.0, Verb::Stall, true),
    ];
    let c = work_only_from_leader(&stalled, &[row(950.0)], 2000.0, &bounds(), &BTreeSet::new());
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    assert_eq!(c.figures["late writes held in transit (unfenced)"], "1");
    // Queued in a pooler through a server stop that began in the term.
    let stopped = vec![
        ev(0.0, "a", acquired(1)),
        super::tests::fault(100.0, Verb::StopServer, "postgres", false),
        ev(300.0, "a", demoted(1)),
        super::tests::fault(900.0, Verb::StopServer, "postgres", true),
    ];
    let c = work_only_from_leader(
        &stopped,
        &[row(950.0)],
        2000.0,
        &bounds(),
        &BTreeSet::from(["a".to_owned()]),
    );
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    // A stop that began after the term ended held nothing of it.
    let after = vec![
        ev(0.0, "a", acquired(1)),
        ev(300.0, "a", demoted(1)),
        super::tests::fault(600.0, Verb::StopServer, "postgres", false),
        super::tests::fault(900.0, Verb::StopServer, "postgres", true),
    ];
    let c = work_only_from_leader(&after, &[row(950.0)], 2000.0, &bounds(), &BTreeSet::new());
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
    let clean = vec![ev(0.0, "a", acquired(1)), ev(300.0, "a", demoted(1))];
    let c = work_only_from_leader(&clean, &[row(950.0)], 2000.0, &bounds(), &BTreeSet::new());
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
}

/// X-FENCE: a fencing replica's pass held by a stall until after another replica's term
/// began lands as its unfenced row alone (the fence rejected its twin); a fenced row that
/// lands then is a fence that did not hold (LOOP-1 fails), and one that lands after its
/// term but before any newer term began is what the fence allows.
#[test]
fn a_fenced_row_may_not_land_once_a_newer_term_began() {
    let row = |replica: &str, t_ms, fence| WorkRow {
        loop_name: "sweep".into(),
        replica: replica.into(),
        term: 1,
        t_ms,
        fence,
    };
    let tl = vec![
        ev(0.0, "a", acquired(1)),
        fault(100.0, Verb::Stall, "a", false),
        ev(300.0, "a", demoted(1)),
        ev(400.0, "b", acquired(1)),
        fault(900.0, Verb::Stall, "a", true),
    ];
    let in_term = [row("a", 50.0, None), row("a", 50.0, Some(7))];
    let rejected: Vec<WorkRow> = in_term
        .iter()
        .cloned()
        .chain([row("a", 950.0, None)])
        .collect();
    let c = work_only_from_leader(&tl, &rejected, 2000.0, &bounds(), &BTreeSet::new());
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    let tally = FenceTally::of(&tl, &rejected, &bounds());
    assert_eq!(
        (tally.late_unfenced, tally.late_fenced, tally.rejected()),
        (1, 0, 1)
    );

    let landed: Vec<WorkRow> = rejected
        .iter()
        .cloned()
        .chain([row("a", 950.0, Some(7))])
        .collect();
    let c = work_only_from_leader(&tl, &landed, 2000.0, &bounds(), &BTreeSet::new());
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
    assert!(c.message.contains("after a newer term began"), "{c:?}");
    let tally = FenceTally::of(&tl, &landed, &bounds());
    assert_eq!(
        (tally.late_unfenced, tally.late_fenced, tally.rejected()),
        (1, 1, 0)
    );

    // Landed at 350 ms: after a's term, before b's began.
    let between = [row("a", 350.0, None), row("a", 350.0, Some(7))];
    let tally = FenceTally::of(&tl, &between, &bounds());
    assert_eq!(tally, FenceTally::default());
    let c = work_only_from_leader(&tl, &between[1..], 2000.0, &bounds(), &BTreeSet::new());
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    // A replica that writes no fenced row is no fencing replica.
    let plain = FenceTally::of(&tl, &[row("a", 950.0, None)], &bounds());
    assert_eq!(plain, FenceTally::default());

    // CI chaos seed 2 with --fence: a frozen leader's thaw resumes its old term (a span of
    // leadership begins there) but draws no token, so the new leader's fenced rows after
    // the thaw still carry the newest token.
    let thawed = vec![
        ev(0.0, "a", acquired(1)),
        fault(100.0, Verb::Freeze, "a", false),
        ev(400.0, "b", acquired(1)),
        fault(700.0, Verb::Freeze, "a", true),
        ev(701.0, "a", demoted(1)),
    ];
    let b_rows = [row("b", 750.0, None), row("b", 750.0, Some(8))];
    let c = work_only_from_leader(&thawed, &b_rows, 2000.0, &bounds(), &BTreeSet::new());
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
}

/// CI chaos seed 9 (r2 behind PgBouncer in session mode): r2's term ended at 12 193 ms in a
/// server restart that began at 12 083 and was back at 13 205; PgBouncer held r2's INSERT
/// through it and ran it at 13 378. A later restart (15 993) had replaced the first one's
/// opening on the timeline, and the first was never lifted there: the held write counted
/// against LOOP-1. Each restart is put on the history as the runner puts it
/// ([`FaultRecord::marks`]).
#[test]
fn a_write_held_through_an_earlier_server_restart_is_counted_apart() {
    let restart = |start: u64, end: u64| FaultRecord {
        verb: Verb::RestartServer,
        target: "postgres".into(),
        lifted: false,
        label: "restart PostgreSQL".into(),
        start: Duration::from_millis(start),
        end: Duration::from_millis(end),
    };
    let marks = |r: &FaultRecord| -> Vec<Entry> {
        (r.marks().into_iter())
            .map(|(at, lifted)| fault(at.as_secs_f64() * 1000.0, r.verb, &r.target, lifted))
            .collect()
    };
    let mut h = vec![ev(11_590.0, "a", acquired(4))];
    h.extend(marks(&restart(12_083, 13_205)));
    h.push(ev(12_193.0, "a", demoted(4)));
    h.extend(marks(&restart(15_993, 17_100)));
    h.sort_by(|x, y| x.t_ms.total_cmp(&y.t_ms));
    let row = |t_ms| WorkRow {
        loop_name: "approvals-expire".into(),
        replica: "a".into(),
        term: 4,
        t_ms,
        fence: None,
    };
    let c = work_only_from_leader(
        &h,
        &[row(13_378.0)],
        20_000.0,
        &bounds(),
        &BTreeSet::from(["a".to_owned()]),
    );
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    assert_eq!(c.figures["late writes held in transit (unfenced)"], "1");
    // Well after the server was back (more than the login retry and the overlap bound): not
    // held by it.
    let c = work_only_from_leader(
        &h,
        &[row(15_000.0)],
        20_000.0,
        &bounds(),
        &BTreeSet::from(["a".to_owned()]),
    );
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
}

/// Chaos seed 9 again: r2 (behind PgBouncer) demoted at 38 484 ms in a server restart
/// whose call returned at 39 720 ms, and its INSERTs landed at 40 522 and 40 581: PgBouncer
/// had failed a login while the server was down and tried again only after its
/// `server_login_retry` (1 s). A direct replica's connection dies with the server: nothing
/// of its is held.
#[test]
fn a_pooler_holds_a_write_through_a_restart_until_its_login_retry() {
    let mut h = vec![ev(38_032.0, "a", acquired(2))];
    h.push(fault(38_317.0, Verb::RestartServer, "postgres", false));
    h.push(ev(38_484.0, "a", demoted(2)));
    h.push(fault(39_720.0, Verb::RestartServer, "postgres", true));
    let row = WorkRow {
        loop_name: "authz-outbox-consumer".into(),
        replica: "a".into(),
        term: 2,
        t_ms: 40_581.0,
        fence: None,
    };
    let pooled = BTreeSet::from(["a".to_owned()]);
    let c = work_only_from_leader(&h, std::slice::from_ref(&row), 50_000.0, &bounds(), &pooled);
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    assert_eq!(c.figures["late writes held in transit (unfenced)"], "1");
    let direct = BTreeSet::new();
    let early = WorkRow {
        t_ms: 39_800.0,
        ..row.clone()
    };
    let c = work_only_from_leader(&h, &[early], 50_000.0, &bounds(), &direct);
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
    // Past the login retry and the overlap bound after the server was back: not held.
    let late = WorkRow {
        t_ms: 41_500.0,
        ..row
    };
    let c = work_only_from_leader(&h, &[late], 50_000.0, &bounds(), &pooled);
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
}

/// The main job on a fresh clone, PostgreSQL 13, `chaos-119`: r2 (behind PgBouncer in
/// session mode) led term 7 from 19 860 ms; the server was stopped at 21 200 and r2
/// demoted at 21 400; the server was back at about 22 250, but before PgBouncer's login
/// retry came round it was stopped again (22 800 to 23 990), and r2's INSERTs, handed to
/// PgBouncer in its term, landed at 24 409. A write held through one outage stays held
/// through the next one that begins before it could get through.
#[test]
fn a_pooler_holds_a_write_through_back_to_back_outages() {
    let mut h = vec![ev(19_860.0, "a", acquired(7))];
    h.push(fault(21_200.0, Verb::StopServer, "postgres", false));
    h.push(ev(21_400.0, "a", demoted(7)));
    h.push(fault(22_250.0, Verb::StopServer, "postgres", true));
    h.push(ev(22_500.0, "b", acquired(1)));
    h.push(fault(22_800.0, Verb::StopServer, "postgres", false));
    h.push(ev(23_000.0, "b", demoted(1)));
    h.push(fault(23_990.0, Verb::StopServer, "postgres", true));
    let row = |t_ms| WorkRow {
        loop_name: "audit-archiver".into(),
        replica: "a".into(),
        term: 7,
        t_ms,
        fence: None,
    };
    let pooled = BTreeSet::from(["a".to_owned()]);
    let c = work_only_from_leader(&h, &[row(24_409.0)], 30_000.0, &bounds(), &pooled);
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    assert_eq!(c.figures["late writes held in transit (unfenced)"], "1");
    // A second outage that began after the write could have got through holds nothing.
    let mut later = h.clone();
    for e in later.iter_mut().filter(|e| e.t_ms >= 22_800.0) {
        e.t_ms += 1_500.0;
    }
    let c = work_only_from_leader(&later, &[row(25_909.0)], 30_000.0, &bounds(), &pooled);
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
    // A direct replica's connection dies with the server: nothing of its is held.
    let c = work_only_from_leader(&h, &[row(24_409.0)], 30_000.0, &bounds(), &BTreeSet::new());
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
}

/// Chaos seed 4 under load: r1's grant was answered at 7 660 ms (its proxy saw it), its
/// leader-only work wrote a row at 7 806, and its `acquired` event was read at 7 910, a
/// quarter second late. The term began at the grant the wire shows; without the wire the
/// row is outside it.
#[test]
fn a_term_begins_at_its_grant_on_the_wire_not_when_its_event_is_read() {
    use wiretap::{Outcome, WireEvent};
    let wire = |t_ms, event| Entry {
        t_ms,
        what: What::Wire {
            replica: "r1".into(),
            conn: 38,
            event,
        },
    };
    let sql = "SELECT pg_try_advisory_lock(1886156915, 1)".to_owned();
    let granted = Outcome::Done {
        tags: vec!["SELECT 1".into()],
        rows: 1,
        row: Some(vec![Some("t".into())]),
    };
    let acquired = ReplicaEvent::Acquired {
        term: 1,
        backend_pid: 107,
    };
    let h = vec![
        wire(7_000.0, WireEvent::Opened),
        wire(7_001.0, WireEvent::Backend { pid: 107 }),
        wire(
            7_652.0,
            WireEvent::Statement {
                id: 1,
                sql,
                params: vec![],
            },
        ),
        wire(
            7_660.0,
            WireEvent::Answer {
                id: 1,
                outcome: granted,
            },
        ),
        Entry {
            t_ms: 7_670.0,
            what: What::Locks {
                rows: vec![(107, true, "r1".into())],
            },
        },
        ev(7_910.0, "r1", acquired),
    ];
    let row = WorkRow {
        loop_name: "access-session-sweep".into(),
        replica: "r1".into(),
        term: 1,
        t_ms: 7_806.0,
        fence: None,
    };
    let none = BTreeSet::new();
    let rows = std::slice::from_ref(&row);
    let c = work_only_from_leader(&h, rows, 9_000.0, &bounds(), &none);
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    let blind: Vec<Entry> = (h.iter())
        .filter(|e| !matches!(e.what, What::Wire { .. }))
        .cloned()
        .collect();
    let c = work_only_from_leader(&blind, rows, 9_000.0, &bounds(), &none);
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
}

/// A row that landed after its writer's term is held in transit when its `INSERT` left the
/// writer inside the term, as the writer's proxy read it: with no fault around (a pooler
/// queue, a slow server), and whatever faults came after. One that left after the term is
/// the writer's own late work, even with a partition on its link to excuse it.
#[test]
fn a_late_row_is_judged_by_when_its_insert_left_the_writer() {
    use wiretap::{Outcome, WireEvent};
    let wire = |t_ms: f64, event: WireEvent| Entry {
        t_ms,
        what: What::Wire {
            replica: "a".into(),
            conn: 2,
            event,
        },
    };
    let insert = |sent: f64, answered: f64, id: u64| {
        let sql = "INSERT INTO leader_work (loop_name, replica, term) VALUES ('sweep', $1, $2)";
        [
            wire(
                sent,
                WireEvent::Statement {
                    id,
                    sql: sql.into(),
                    params: vec![Some("a".into()), Some("1".into())],
                },
            ),
            wire(
                answered,
                WireEvent::Answer {
                    id,
                    outcome: Outcome::Done {
                        tags: vec!["INSERT 0 1".into()],
                        rows: 0,
                        row: None,
                    },
                },
            ),
        ]
    };
    let row = |t_ms| WorkRow {
        loop_name: "sweep".into(),
        replica: "a".into(),
        term: 1,
        t_ms,
        fence: None,
    };
    let judged = |extra: Vec<Entry>| {
        let mut tl = vec![
            wire(0.0, WireEvent::Opened),
            ev(0.0, "a", acquired(1)),
            ev(1_000.0, "a", demoted(1)),
            ev(1_020.0, "b", acquired(1)),
        ];
        tl.extend(extra);
        tl.sort_by(|x, y| x.t_ms.total_cmp(&y.t_ms));
        work_only_from_leader(&tl, &[row(2_500.0)], 4_000.0, &bounds(), &BTreeSet::new())
    };
    // Sent at 900 ms, in the term; landed at 2.5 s with no fault: held in transit.
    let c = judged(insert(900.0, 2_510.0, 1).into());
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
    assert_eq!(c.figures["late writes held in transit (unfenced)"], "1");
    // Sent at 2.4 s, after the term, with a partition on its link from 800 ms: late work.
    let mut late: Vec<Entry> = insert(2_400.0, 2_510.0, 1).into();
    late.push(fault(800.0, Verb::Partition, "a", false));
    late.push(fault(2_300.0, Verb::Partition, "a", true));
    let c = judged(late);
    assert_eq!(c.verdict, Verdict::Invalid, "{c}");
    assert!(c.message.contains("sent at 2400 ms"), "{c}");
    // Sent at 2.401 s, 1 ms after a freeze of the writer (from 800 ms, while it led) was
    // lifted: the pass was decided before the freeze, which held it (the window the lease
    // cannot close, README): held, as a write its link held is.
    let mut frozen: Vec<Entry> = insert(2_401.0, 2_510.0, 1).into();
    frozen.push(fault(800.0, Verb::Freeze, "a", false));
    frozen.push(fault(2_400.0, Verb::Freeze, "a", true));
    let c = judged(frozen);
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
    assert_eq!(c.figures["late writes held in transit (unfenced)"], "1");
    // Sent 0.5 s (2.5T) after the thaw, before the writer tried the lock again: inside the
    // overlap window the page allows a thawed leader (2T + a tick), whichever of its check and
    // its work ran first after the thaw.
    let thawed = |thaw: f64| {
        let mut v: Vec<Entry> = insert(2_400.0, 2_510.0, 1).into();
        v.push(fault(800.0, Verb::Freeze, "a", false));
        v.push(fault(thaw, Verb::Freeze, "a", true));
        v
    };
    let c = judged(thawed(1_900.0));
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
    assert_eq!(c.figures["late writes held in transit (unfenced)"], "1");
    // Sent 0.7 s (3.5T) after the thaw: past the window, late work.
    assert_eq!(judged(thawed(1_700.0)).verdict, Verdict::Invalid);
    // Sent 0.1 s after the thaw but after the writer's first lock call since it (it knew it
    // had lost and tried again as a standby): late work.
    let mut tried: Vec<Entry> = thawed(2_300.0);
    tried.push(wire(
        2_350.0,
        WireEvent::Statement {
            id: 7,
            sql: "SELECT pg_try_advisory_lock(1886156915, 1)".into(),
            params: vec![],
        },
    ));
    assert_eq!(judged(tried).verdict, Verdict::Invalid);
    // A freeze that began after the term ended held nothing of it.
    let mut later: Vec<Entry> = insert(2_401.0, 2_510.0, 1).into();
    later.push(fault(1_500.0, Verb::Freeze, "a", false));
    later.push(fault(2_400.0, Verb::Freeze, "a", true));
    assert_eq!(judged(later).verdict, Verdict::Invalid);
    // The values written inline (no parameters), as programs outside the project send them
    // (2026-12-07, frozen-leader: an INSERT 0.6 ms after the thaw was not matched, and the
    // freeze's window never applied).
    let mut inline: Vec<Entry> = insert(2_401.0, 2_510.0, 1).into();
    if let What::Wire {
        event: WireEvent::Statement { sql, params, .. },
        ..
    } = &mut inline[0].what
    {
        *sql = "INSERT INTO leader_work (loop_name, replica, term) VALUES ('sweep', 'a', 1)".into();
        params.clear();
    }
    inline.push(fault(800.0, Verb::Freeze, "a", false));
    inline.push(fault(2_400.0, Verb::Freeze, "a", true));
    let c = judged(inline);
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
    assert_eq!(c.figures["late writes held in transit (unfenced)"], "1");
    // Another term's INSERT (term 2) says nothing of this row: the fault decides.
    let mut other: Vec<Entry> = insert(900.0, 2_510.0, 1).into();
    if let What::Wire {
        event: WireEvent::Statement { params, .. },
        ..
    } = &mut other[0].what
    {
        params[1] = Some("2".into());
    }
    assert_eq!(judged(other).verdict, Verdict::Invalid);
}
