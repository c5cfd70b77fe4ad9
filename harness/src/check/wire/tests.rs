//! The wire checks on made-up conversations: each one passes a program that keeps its clause
//! and fails one that breaks it (the gallery does the same against real programs).

use wiretap::{Closer, Outcome, WireEvent};

use super::model::WireModel;
use super::{checks, WireSetup};
use crate::check::tests::bounds;
use crate::check::{Check, Verdict};
use crate::fault::Verb;
use crate::timeline::{Entry, What};

mod demotion;
mod holders;
mod leader;

const T: f64 = 200.0;
const LOCK: &str = "SELECT pg_try_advisory_lock(1886156915, 1)";

/// A made-up history: replicas' connections and the pg_locks samples.
#[derive(Default)]
struct History {
    entries: Vec<Entry>,
    ids: u64,
}

impl History {
    fn wire(&mut self, t_ms: f64, replica: &str, conn: u64, event: WireEvent) {
        self.entries.push(Entry {
            t_ms,
            what: What::Wire {
                replica: replica.into(),
                conn,
                event,
            },
        });
    }

    /// A connection named for its replica (the contract's `application_name`).
    fn open(&mut self, t_ms: f64, replica: &str, conn: u64, pid: i32) {
        self.open_named(t_ms, replica, conn, pid, Some(replica));
    }

    fn open_named(&mut self, t_ms: f64, replica: &str, conn: u64, pid: i32, name: Option<&str>) {
        self.wire(t_ms, replica, conn, WireEvent::Opened);
        let startup = WireEvent::Startup {
            user: Some("app".into()),
            database: Some("plexsphere".into()),
            application_name: name.map(str::to_owned),
            options: None,
        };
        self.wire(t_ms, replica, conn, startup);
        self.wire(t_ms, replica, conn, WireEvent::Backend { pid });
    }

    /// `sql` sent at `t_ms`, answered 1 ms later with the one-row `answer`.
    fn said(&mut self, t_ms: f64, replica: &str, conn: u64, sql: &str, answer: &str) {
        self.answered(t_ms, t_ms + 1.0, (replica, conn), sql, answer);
    }

    /// `sql` sent at `t_ms`, answered at `answered_ms` with the one-row `answer`.
    fn answered(
        &mut self,
        t_ms: f64,
        answered_ms: f64,
        (replica, conn): (&str, u64),
        sql: &str,
        answer: &str,
    ) {
        self.ids += 1;
        let id = self.ids;
        let sql = sql.into();
        self.wire(
            t_ms,
            replica,
            conn,
            WireEvent::Statement {
                id,
                sql,
                params: vec![],
            },
        );
        let outcome = Outcome::Done {
            tags: vec!["SELECT 1".into()],
            rows: 1,
            row: Some(vec![Some(answer.into())]),
        };
        self.wire(
            answered_ms,
            replica,
            conn,
            WireEvent::Answer { id, outcome },
        );
    }

    /// `sql` sent at `t_ms`, answered 1 ms later with the one row `row`.
    fn said_row(&mut self, t_ms: f64, replica: &str, conn: u64, sql: &str, row: &[&str]) {
        self.said(t_ms, replica, conn, sql, "");
        let Some(Entry {
            what:
                What::Wire {
                    event: WireEvent::Answer { outcome, .. },
                    ..
                },
            ..
        }) = self.entries.last_mut()
        else {
            unreachable!("said ends with the answer")
        };
        *outcome = Outcome::Done {
            tags: vec!["SELECT 1".into()],
            rows: 1,
            row: Some(row.iter().map(|v| Some((*v).to_owned())).collect()),
        };
    }

    fn close(&mut self, t_ms: f64, replica: &str, conn: u64) {
        self.close_by(t_ms, replica, conn, Closer::Client);
    }

    fn close_by(&mut self, t_ms: f64, replica: &str, conn: u64, by: Closer) {
        self.wire(
            t_ms,
            replica,
            conn,
            WireEvent::Closed {
                by,
                terminate: true,
            },
        );
    }

    /// pg_locks samples every 20 ms over `[from, to)` showing `holder` (pid, replica).
    fn locks(&mut self, from: f64, to: f64, holder: Option<(i32, &str)>) {
        let mut t = from;
        while t < to {
            let rows = holder
                .iter()
                .map(|(p, r)| (*p, true, (*r).to_owned()))
                .collect();
            self.entries.push(Entry {
                t_ms: t,
                what: What::Locks { rows },
            });
            t += 20.0;
        }
    }

    /// A leader `a` (pid 10) granted at 0 and checking every `every` until `to`, and a standby
    /// `b` (pid 20) trying every `standby_every`.
    fn election(every: f64, standby_every: f64, to: f64) -> History {
        let mut h = History::default();
        h.open(0.0, "a", 1, 10);
        h.said(1.0, "a", 1, LOCK, "t");
        h.said(
            2.0,
            "a",
            1,
            "SELECT set_config('idle_session_timeout', '800', false)",
            "800",
        );
        let mut t = every;
        while t < to {
            h.said(t, "a", 1, "SELECT 1", "1");
            t += every;
        }
        h.open(0.0, "b", 1, 20);
        let mut t = 5.0;
        while t < to {
            h.said(t, "b", 1, LOCK, "f");
            t += standby_every;
        }
        h.locks(10.0, to, Some((10, "a")));
        h
    }

    fn judge(self, name: &str) -> Check {
        self.judge_told(name, false)
    }

    /// `name`'s check, the replicas told a CheckInterval of 0 (`default_interval`) or not.
    fn judge_told(mut self, name: &str, default_interval: bool) -> Check {
        self.entries.sort_by(|x, y| x.t_ms.total_cmp(&y.t_ms));
        let setup = WireSetup {
            tapped: true,
            default_interval,
            stray_unlocks: true,
            ..WireSetup::default()
        };
        let model = WireModel::of(&self.entries);
        (checks(&self.entries, &model, &bounds(), &setup).into_iter())
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no check {name}"))
    }
}

#[test]
fn a_standby_that_polls_every_t_passes_and_one_at_1_2t_or_t_20_fails() {
    let c = History::election(T, T, 20.0 * T).judge("standby cadence");
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
    for every in [1.2 * T, T / 20.0] {
        let c = History::election(T, every, 20.0 * T).judge("standby cadence");
        assert_eq!(c.verdict, Verdict::Invalid, "{every}: {c}");
    }
    let c = History::election(T, T, 20.0 * T).judge("leader cadence");
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
    let c = History::election(2.0 * T, T, 20.0 * T).judge("leader cadence");
    assert_eq!(c.verdict, Verdict::Invalid, "{c}");
}

/// X-VERIFY: a stray unlock of the leader's session at 10T must close its lock connection
/// within T (and the slack); one still open after that fails, and with no unlock nothing is
/// decided.
#[test]
fn a_stray_unlock_must_end_the_lock_connection_within_t() {
    let name = "lock connection closed after a stray unlock";
    let unlocked = |close_after: Option<f64>| {
        let mut h = History::election(T, T, 20.0 * T);
        h.wire(
            10.0 * T + 5.0,
            "a",
            1,
            WireEvent::Injected {
                sql: "SELECT pg_advisory_unlock_all()".into(),
            },
        );
        if let Some(after) = close_after {
            h.close_by(10.0 * T + 5.0 + after, "a", 1, Closer::Client);
        }
        h.judge(name)
    };
    let c = unlocked(Some(0.9 * T));
    assert_eq!(
        (c.verdict, c.clauses.clone()),
        (Verdict::Valid, vec!["X-VERIFY".to_owned()]),
        "{c}"
    );
    for late in [Some(1.5 * T), None] {
        let c = unlocked(late);
        assert_eq!(c.verdict, Verdict::Invalid, "{late:?}: {c}");
    }
    let c = History::election(T, T, 20.0 * T).judge(name);
    assert_eq!(c.verdict, Verdict::Unknown, "{c}");
}

/// Told a CheckInterval of 0, a program's cadences measure its default: one that is not the
/// page's (T here) fails CFG-2, not RUN-1 or RUN-5, whose "every T" it keeps at its own T.
#[test]
fn told_zero_a_cadence_off_the_default_fails_cfg_2_alone() {
    for name in ["standby cadence", "leader cadence"] {
        let c = History::election(T / 5.0, T / 5.0, 20.0 * T).judge_told(name, true);
        assert_eq!(
            (c.verdict, c.clauses.clone()),
            (Verdict::Invalid, vec!["CFG-2".to_owned()]),
            "{c}"
        );
        let c = History::election(T, T, 20.0 * T).judge_told(name, true);
        assert_eq!(
            (c.verdict, c.clauses.clone()),
            (Verdict::Valid, vec!["CFG-2".to_owned()]),
            "{c}"
        );
    }
    let c = History::election(T, T, 20.0 * T).judge("standby cadence");
    assert_eq!(c.clauses, vec!["RUN-1".to_owned()]);
}

#[test]
fn the_lock_call_must_be_the_specs_on_the_specs_key() {
    let c = History::election(T, T, 10.0 * T).judge("lock calls");
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
    for call in [
        "SELECT pg_try_advisory_lock(1886156915, 2)",
        "SELECT pg_try_advisory_lock_shared(1886156915, 1)",
        "SELECT pg_try_advisory_xact_lock(1886156915, 1)",
        "SELECT pg_try_advisory_lock((1886156915::bigint << 32) | 1)",
    ] {
        let mut h = History::election(T, T, 10.0 * T);
        h.said(700.0, "b", 1, call, "f");
        let c = h.judge("lock calls");
        assert_eq!(c.verdict, Verdict::Invalid, "{call}: {c}");
    }
}

#[test]
fn a_connection_opened_and_closed_for_a_refused_check_fails_run_2() {
    let mut h = History::election(T, T, 10.0 * T);
    h.open(1000.0, "b", 2, 21);
    h.said(1005.0, "b", 2, LOCK, "f");
    h.close(1010.0, "b", 2);
    let c = h.judge("refused checks leave the pool alone");
    assert_eq!(c.verdict, Verdict::Invalid, "{c}");
    let mut h = History::election(T, T, 10.0 * T);
    h.said(1004.0, "b", 1, "SET idle_session_timeout = 800", "");
    let c = h.judge("refused checks leave the pool alone");
    assert_eq!(c.verdict, Verdict::Invalid, "{c}");
    let c = History::election(T, T, 10.0 * T).judge("refused checks leave the pool alone");
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
}

#[test]
fn work_on_the_lock_session_and_a_lock_moved_mid_term_fail() {
    let mut h = History::election(T, T, 10.0 * T);
    h.said(
        450.0,
        "a",
        1,
        "INSERT INTO leader_work (loop_name) VALUES ('x')",
        "",
    );
    let c = h.judge("the lock session carries only the checks");
    assert_eq!(c.verdict, Verdict::Invalid, "{c}");
    let c = History::election(T, T, 10.0 * T).judge("the lock session carries only the checks");
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
    // The lock moves from connection 1 (pid 10) to connection 2 (pid 11), 1 left open.
    let mut h = History::election(T, T, 10.0 * T);
    h.entries
        .retain(|e| !matches!(e.what, What::Locks { .. }) || e.t_ms < 1000.0);
    h.said(
        1001.0,
        "a",
        1,
        "SELECT pg_advisory_unlock(1886156915, 1)",
        "t",
    );
    h.open(1001.0, "a", 2, 11);
    h.said(1003.0, "a", 2, LOCK, "t");
    h.locks(1010.0, 2000.0, Some((11, "a")));
    let c = h.judge("one lock session per term");
    assert_eq!(c.verdict, Verdict::Invalid, "{c}");
}

#[test]
fn the_bound_on_the_lock_session_must_be_4t() {
    let c = History::election(T, T, 10.0 * T).judge("idle_session_timeout on the lock session");
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
    let mut h = History::election(T, T, 10.0 * T);
    let bound = "SELECT set_config('idle_session_timeout', '820', false)";
    h.said(3.0, "a", 1, bound, "820");
    let c = h.judge("idle_session_timeout on the lock session");
    assert_eq!(c.verdict, Verdict::Invalid, "{c}");
}

#[test]
fn a_failed_check_must_close_the_lock_connection() {
    // The check at 1000 ms goes unanswered; the replica closes at 1210 (within T of the
    // deadline at 1200) or never.
    let build = |close: Option<f64>| {
        let mut h = History::election(T, T, 1000.0);
        h.ids += 1;
        let (id, sql) = (h.ids, "SELECT 1".into());
        h.wire(
            1000.0,
            "a",
            1,
            WireEvent::Statement {
                id,
                sql,
                params: vec![],
            },
        );
        if let Some(at) = close {
            h.close(at, "a", 1);
        }
        h.locks(1000.0, 2000.0, Some((10, "a")));
        h.said(1990.0, "b", 1, LOCK, "f");
        h
    };
    let name = "lock connection closed after a failed check";
    assert_eq!(build(Some(1210.0)).judge(name).verdict, Verdict::Valid);
    assert_eq!(build(None).judge(name).verdict, Verdict::Invalid);
    assert_eq!(build(Some(1900.0)).judge(name).verdict, Verdict::Invalid);
}

/// A failed check while the replica's process is frozen is closed within T of its thaw (or
/// by the server before): CI's chaos seed 3, after the verbs were redrawn, partitioned its
/// leader and froze it 0.1 ms later with a check in flight; the check failed during the freeze
/// and the server closed the session at the orphan bound, 2.02T after the failure, which the
/// check failed as a replica that kept its connection open.
#[test]
fn a_frozen_replica_closes_after_its_thaw() {
    let build = |close: f64| {
        let mut h = History::election(T, T, 1000.0);
        h.ids += 1;
        let (id, sql) = (h.ids, "SELECT 1".into());
        let stmt = WireEvent::Statement {
            id,
            sql,
            params: vec![],
        };
        h.wire(1000.0, "a", 1, stmt);
        h.entries
            .push(crate::check::tests::fault(1050.0, Verb::Freeze, "a", false));
        h.entries
            .push(crate::check::tests::fault(2000.0, Verb::Freeze, "a", true));
        h.close(close, "a", 1);
        h.locks(1000.0, 2500.0, Some((10, "a")));
        h.said(2490.0, "b", 1, LOCK, "f");
        h
    };
    let name = "lock connection closed after a failed check";
    assert_eq!(
        build(1700.0).judge(name).verdict,
        Verdict::Valid,
        "the server's"
    );
    assert_eq!(
        build(2150.0).judge(name).verdict,
        Verdict::Valid,
        "after the thaw"
    );
    assert_eq!(build(2400.0).judge(name).verdict, Verdict::Invalid);
}

/// `partition-answers`: the proxy reads the server's answer before its toxics drop it, and the
/// replica never gets it. A check answered on the wire while the replica's answers were lost is
/// a failed check: the leader that closed its lock connection within T of its deadline passes,
/// as one whose check got no answer at all (before, the history showed the check answered and
/// the close as one with no failed check before it).
#[test]
fn an_answer_the_proxy_read_while_the_answers_were_lost_never_came() {
    let build = |lost: bool| {
        let mut h = History::election(T, T, 1000.0);
        if lost {
            h.entries.push(crate::check::tests::fault(
                990.0,
                Verb::PartitionAnswers,
                "a",
                false,
            ));
        }
        h.said(1000.0, "a", 1, "SELECT 1", "1");
        h.close(1210.0, "a", 1);
        h.locks(1000.0, 2000.0, Some((10, "a")));
        h.said(1990.0, "b", 1, LOCK, "f");
        h
    };
    let name = "lock connection closed after a failed check";
    assert_eq!(build(true).judge(name).verdict, Verdict::Valid);
    let model = |h: History| {
        let mut e = h.entries;
        e.sort_by(|x, y| x.t_ms.total_cmp(&y.t_ms));
        WireModel::of(&e)
    };
    let check_answered = |m: &WireModel| {
        (m.conns.iter())
            .find(|c| c.replica == "a" && c.id == 1)
            .and_then(|c| c.statements.iter().find(|s| s.sent_ms == 1000.0))
            .map(|s| s.answer.is_some())
    };
    assert_eq!(check_answered(&model(build(true))), Some(false));
    assert_eq!(check_answered(&model(build(false))), Some(true));
}

/// X-WHO: the lock session carries its replica's name from the grant to its end; one without
/// a name, or renamed while it holds the lock, fails.
#[test]
fn the_lock_session_must_name_its_replica() {
    const CHECK: &str = "the lock session names its replica";
    let c = History::election(T, T, 10.0 * T).judge(CHECK);
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
    // Renamed after the grant (a program that calls its lock session "leader").
    let mut h = History::election(T, T, 10.0 * T);
    let renamed = WireEvent::Parameter {
        name: "application_name".into(),
        value: "leader".into(),
    };
    h.wire(3.0 * T, "a", 1, renamed);
    let c = h.judge(CHECK);
    assert_eq!(c.verdict, Verdict::Invalid, "{c}");
    assert!(c.message.contains("\"leader\""), "{c}");
    // Never named: the lock row's holder is found by its pid alone.
    let mut h = History::default();
    h.open_named(0.0, "a", 1, 10, None);
    h.said(1.0, "a", 1, LOCK, "t");
    h.locks(10.0, 5.0 * T, Some((10, "")));
    let c = h.judge(CHECK);
    assert_eq!(c.verdict, Verdict::Invalid, "{c}");
}

/// A journal of the harness's own proxies.
fn tapped() -> WireSetup {
    WireSetup {
        tapped: true,
        ..Default::default()
    }
}

/// `decide` on the facts of `entries` alone (no rows, marks or logs), with `wire`, and the
/// conversations and lock sessions of `entries`.
fn with_facts<T>(
    entries: &[Entry],
    wire: &WireSetup,
    decide: impl FnOnce(&crate::check::expect::Facts, &WireModel) -> T,
) -> T {
    with_marks(entries, wire, &crate::timeline::Marks::new(), decide)
}

/// [`with_facts`] with the moments the steps named.
fn with_marks<T>(
    entries: &[Entry],
    wire: &WireSetup,
    marks: &crate::timeline::Marks,
    decide: impl FnOnce(&crate::check::expect::Facts, &WireModel) -> T,
) -> T {
    let logs = std::collections::BTreeMap::new();
    let facts = crate::check::expect::Facts {
        entries,
        rows: &[],
        work_read: true,
        marks,
        logs: &logs,
        bounds: bounds(),
        pooled: &crate::check::expect::NONE_POOLED,
        wire,
    };
    decide(&facts, &WireModel::of(entries))
}

/// POOL-1's hazard on the wire: behind a transaction-mode pooler a standby's attempt lands on
/// the leader's server session and is granted again (one pg_locks row). Two replicas that each
/// hold a grant they neither closed nor unlocked pass `granted_at_once = 2`; a program whose
/// guard refuses the shared session, or whose leader let go before the second grant, fails it;
/// and without a journal nothing is decided.
#[test]
fn two_grants_held_at_once_show_the_pooler_hazard() {
    use crate::check::expect::{decide_at, Expect, Expectation};
    let pooler = |second: &str, a_closes: Option<f64>| {
        let mut h = History::default();
        // PgBouncer's key for both clients: the pooler's, not a server backend's.
        h.open(0.0, "a", 1, 900);
        h.said(10.0, "a", 1, LOCK, "t");
        h.open(0.0, "b", 1, 901);
        for k in 1..6 {
            h.said(10.0 + k as f64 * T, "a", 1, "SELECT 1", "1");
        }
        if let Some(at) = a_closes {
            h.close(at, "a", 1);
        }
        h.said(300.0, "b", 1, LOCK, second);
        h.locks(0.0, 1_200.0, Some((4242, "a")));
        h.entries.sort_by(|x, y| x.t_ms.total_cmp(&y.t_ms));
        h.entries
    };
    let ex = Expectation {
        clause: "POOL-1".into(),
        expect: Expect::GrantedAtOnce(2),
    };
    let tapped = tapped();
    let judge = |entries: &[Entry], wire: &WireSetup| {
        with_facts(entries, wire, |f, model| {
            decide_at(&ex, f, model, crate::level::Level::Process)
        })
    };
    let c = judge(&pooler("t", None), &tapped);
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    assert!(c.message.contains("a and b"), "{c}");
    // The elector's own answer for a grant counts as one.
    assert_eq!(
        judge(&pooler("granted", None), &tapped).verdict,
        Verdict::Valid
    );
    // A guard that refuses the shared session: one grant only.
    let c = judge(&pooler("shared", None), &tapped);
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
    assert!(c.message.contains("REPLICA_SHARED_SESSION_GUARD=0"), "{c}");
    assert_eq!(judge(&pooler("f", None), &tapped).verdict, Verdict::Invalid);
    // The leader closed its connection before the second grant: one at a time.
    let c = judge(&pooler("t", Some(250.0)), &tapped);
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
    let untapped = judge(&pooler("t", None), &WireSetup::default());
    assert_eq!(untapped.verdict, Verdict::Unknown, "{untapped:?}");
}

/// DEM-3 on the wire: a leader that closes its lock connection when it loses the lock, before
/// the standby is granted, makes no overlap; one that keeps it open for 6T after another replica
/// was granted overlaps it past 2T + one tick.
#[test]
fn grants_held_at_once_past_the_overlap_bound_fail_dem_3() {
    let handover = |a_closes: f64| {
        let mut h = History::default();
        h.open(0.0, "a", 1, 10);
        h.said(1.0, "a", 1, LOCK, "t");
        h.open(0.0, "b", 1, 20);
        h.said(3.0, "b", 1, LOCK, "f");
        h.close(a_closes, "a", 1);
        h.said(1_000.0, "b", 1, LOCK, "t");
        h.locks(10.0, 2_600.0, Some((10, "a")));
        h.entries.sort_by(|x, y| x.t_ms.total_cmp(&y.t_ms));
        h.entries
    };
    let tapped = tapped();
    let judge = |entries: &[Entry], wire: &WireSetup| {
        with_facts(entries, wire, |f, model| {
            crate::check::overlap_seen_from_outside(f, model, crate::level::Level::Process)
        })
    };
    let c = judge(&handover(900.0), &tapped);
    assert_eq!(c.name, "overlap of two grants on the wire");
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    assert!(c.message.contains("0 overlap(s)"), "{c}");
    let c = judge(&handover(2_200.0), &tapped);
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
    assert_eq!(c.figures["max overlap"], "6.00T", "{c:?}");
    let c = judge(&handover(2_200.0), &WireSetup::default());
    assert_eq!(c.verdict, Verdict::Unknown, "{c:?}");
}

/// X-FENCE on the wire: each term draws its token from the fence's sequence on its lock
/// session, in the granting statement. A handover whose new term drew a larger token passes
/// `fence_tokens_rise = 2`; a new term whose token is not larger, a term that drew none (a token
/// counted by the program, or read with `last_value`), and a run with one term fail it.
#[test]
fn fencing_tokens_must_be_drawn_on_the_lock_session_and_rise() {
    use crate::check::expect::{decide_at, Expect, Expectation};
    const FENCED: &str = "SELECT a.answer, a.pid, CASE WHEN a.answer = 'granted' \
        THEN nextval('public.plexsphere_background_leader_fence') END \
        FROM (SELECT 'granted', pg_backend_pid() WHERE pg_try_advisory_lock(1886156915, 1) \
        OFFSET 0) AS a(answer, pid)";
    const LATEST: &str = "SELECT pg_try_advisory_lock(1886156915, 1), \
        (SELECT last_value FROM public.plexsphere_background_leader_fence)";
    let handover = |second: Option<(&str, &str)>| {
        let mut h = History::default();
        h.open(0.0, "a", 1, 10);
        h.said_row(1.0, "a", 1, FENCED, &["granted", "10", "7"]);
        h.close(500.0, "a", 1);
        h.open(0.0, "b", 1, 20);
        if let Some((sql, token)) = second {
            h.said_row(600.0, "b", 1, sql, &["granted", "20", token]);
            h.locks(620.0, 1_000.0, Some((20, "b")));
        }
        h.locks(10.0, 500.0, Some((10, "a")));
        h.entries.sort_by(|x, y| x.t_ms.total_cmp(&y.t_ms));
        h.entries
    };
    let ex = Expectation {
        clause: "X-FENCE".into(),
        expect: Expect::FenceTokensRise(2),
    };
    let tapped = tapped();
    let judge = |entries: &[Entry]| {
        with_facts(entries, &tapped, |f, model| {
            decide_at(&ex, f, model, crate::level::Level::Process)
        })
    };
    let c = judge(&handover(Some((FENCED, "8"))));
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    assert!(c.message.contains("7 < 8"), "{c}");
    let c = judge(&handover(Some((FENCED, "7"))));
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
    assert!(c.message.contains("not above"), "{c}");
    let c = judge(&handover(Some((LATEST, "7"))));
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
    assert!(c.message.contains("drew no token"), "{c}");
    let c = judge(&handover(None));
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
    assert!(c.message.contains("fewer than 2"), "{c}");
    let untapped = with_facts(
        &handover(Some((FENCED, "8"))),
        &WireSetup::default(),
        |f, m| decide_at(&ex, f, m, crate::level::Level::Process),
    );
    assert_eq!(untapped.verdict, Verdict::Unknown, "{untapped:?}");
}

/// SESS-1's premise on the wire: a replica whose pool retired connections (closed by it, never
/// holding the lock, while the run was watched) passes `pool_recycled = 1`; one that closed none
/// but its lock connection fails it, naming the contract's variable.
#[test]
fn a_pool_that_retires_nothing_leaves_sess_1_untested() {
    use crate::check::expect::{decide_at, Expect, Expectation};
    let run_with = |a_retires: bool, b_retires: bool| {
        let mut h = History::default();
        h.open(0.0, "a", 1, 10);
        h.said(1.0, "a", 1, LOCK, "t");
        h.open(0.0, "a", 2, 11);
        h.said(5.0, "a", 2, "SELECT 1", "1");
        if a_retires {
            h.close(300.0, "a", 2);
        }
        h.open(0.0, "b", 1, 20);
        h.said(3.0, "b", 1, LOCK, "f");
        if b_retires {
            h.close(400.0, "b", 1);
        } else {
            // The server ended it (a backend kill, its idle timeout): no retirement either.
            h.close_by(400.0, "b", 1, Closer::Server);
        }
        h.close(500.0, "a", 1);
        h.locks(10.0, 1_000.0, Some((10, "a")));
        h.entries.sort_by(|x, y| x.t_ms.total_cmp(&y.t_ms));
        h.entries
    };
    let run = |b_retires| run_with(true, b_retires);
    let ex = Expectation {
        clause: "SESS-1".into(),
        expect: Expect::PoolRecycled(1),
    };
    let tapped = tapped();
    let judge = |entries: &[Entry]| {
        with_facts(entries, &tapped, |f, model| {
            decide_at(&ex, f, model, crate::level::Level::Process)
        })
    };
    let c = judge(&run(true));
    assert_eq!(c.verdict, Verdict::Valid, "{c:?}");
    let c = judge(&run(false));
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
    assert!(c.message.contains("REPLICA_POOL_MAX_LIFETIME_MS"), "{c}");
    assert!(c.message.starts_with("b retired 0"), "{c}");
    // The close of a lock connection is no retirement.
    let c = judge(&run_with(false, true));
    assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
    assert!(c.message.starts_with("a retired 0"), "{c}");
}

/// X-WAKE's handover on the wire: after the leader `a` lets the key go at 1 006 ms (its unlock
/// answered), a standby `b` whose lock call waited in the queue passes however late its grant
/// shows, one that asked 7 ms after a notification passes a 20 ms bound, and one that asked as
/// soon with no notification (a poll that happened to come then), or 150 ms after it, fails.
#[test]
fn a_handover_passes_on_a_queued_or_notified_call_and_fails_on_a_poll() {
    use crate::check::expect::{decide_at, Expect, Expectation};
    use crate::timeline::{Mark, Marks};
    const WAIT: &str = "SELECT pg_advisory_lock(1886156915, 1)";
    const UNLOCK: &str = "SELECT pg_advisory_unlock(1886156915, 1)";
    // (when b's granting call was sent, when its answer came, whether b was notified at 1 006)
    let run = |sent: f64, granted: f64, notified: bool| {
        let mut h = History::default();
        h.open(0.0, "a", 1, 10);
        h.said(1.0, "a", 1, LOCK, "t");
        h.open(0.0, "b", 2, 20);
        h.said(3.0, "b", 2, LOCK, "f");
        h.said(1_005.0, "a", 1, UNLOCK, "t");
        if notified {
            let channel = "background_leader".into();
            h.wire(1_006.0, "b", 2, WireEvent::Notified { channel });
        }
        h.close(1_010.0, "a", 1);
        let call = if sent < 1_006.0 { WAIT } else { LOCK };
        h.answered(sent, granted, ("b", 2), call, "t");
        h.locks(10.0, 1_000.0, Some((10, "a")));
        h.locks(granted.max(1_000.0) + 5.0, 1_500.0, Some((20, "b")));
        h.entries.sort_by(|x, y| x.t_ms.total_cmp(&y.t_ms));
        h.entries
    };
    let ex = Expectation {
        clause: "X-WAKE".into(),
        expect: Expect::Handover {
            after: "stop".into(),
            within: crate::span::Span::parse("20ms").expect("a span"),
        },
    };
    let mut marks = Marks::new();
    let stop = Mark {
        target: "a".into(),
        at_ms: 1_001.0,
        began_ms: 1_000.0,
    };
    marks.insert("stop".into(), stop);
    let tapped = tapped();
    let judge = |entries: &[Entry]| {
        with_marks(entries, &tapped, &marks, |f, model| {
            decide_at(&ex, f, model, crate::level::Level::Process)
        })
    };
    let c = judge(&run(500.0, 1_060.0, false));
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
    assert!(c.message.contains("waited in the server's queue"), "{c}");
    let c = judge(&run(1_013.0, 1_014.0, true));
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
    assert!(c.message.contains("0.04T after a notification"), "{c}");
    let c = judge(&run(1_013.0, 1_014.0, false));
    assert_eq!(c.verdict, Verdict::Invalid, "{c}");
    assert!(c.message.contains("neither queued nor notified"), "{c}");
    let c = judge(&run(1_156.0, 1_157.0, true));
    assert_eq!(c.verdict, Verdict::Invalid, "{c}");
    assert!(c.message.contains("0.75T after a notification"), "{c}");
    // A waiter that gives its queued call up after T (`lock_timeout`, 55P03) and queues again at
    // once (the elector's X-WAKE): a crash whose end falls in that gap of a millisecond or two
    // (main job, wake-handover, once in about 27 runs: "neither queued nor notified") is still a
    // wake-up, the gap measured against `within`; a gap longer than it is not.
    let requeued = |gap: f64| {
        let mut entries = run(1_010.0 + gap, 1_011.0 + gap, false);
        let timed_out = Outcome::Error {
            code: "55P03".into(),
            message: "canceling statement due to lock timeout".into(),
        };
        let queued = [
            (
                850.0,
                WireEvent::Statement {
                    id: 900,
                    sql: WAIT.into(),
                    params: vec![],
                },
            ),
            (
                1_010.0,
                WireEvent::Answer {
                    id: 900,
                    outcome: timed_out,
                },
            ),
        ];
        for (t_ms, event) in queued {
            entries.push(Entry {
                t_ms,
                what: What::Wire {
                    replica: "b".into(),
                    conn: 2,
                    event,
                },
            });
        }
        entries.sort_by(|x, y| x.t_ms.total_cmp(&y.t_ms));
        for e in &mut entries {
            // The granting call is the waiter's next queued call, not a try.
            if let What::Wire {
                event: WireEvent::Statement { sql, .. },
                ..
            } = &mut e.what
            {
                if e.t_ms > 1_010.0 && sql == LOCK {
                    *sql = WAIT.into();
                }
            }
        }
        entries
    };
    let c = judge(&requeued(1.0));
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
    assert!(c.message.contains("queued again"), "{c}");
    let c = judge(&requeued(60.0));
    assert_eq!(c.verdict, Verdict::Invalid, "{c}");
    // Nobody took over.
    let mut h = History::default();
    h.open(0.0, "a", 1, 10);
    h.said(1.0, "a", 1, LOCK, "t");
    h.close(1_010.0, "a", 1);
    h.locks(10.0, 1_000.0, Some((10, "a")));
    let c = judge(&h.entries);
    assert_eq!(c.verdict, Verdict::Invalid, "{c}");
    assert!(c.message.contains("no other replica"), "{c}");
}
