//! Checks decided from what each replica did on the wire, not from what it says of itself:
//! its proxy's journal ([`wiretap`]) put on the timeline, joined to pg_locks. They need no
//! cooperation of the program (contract level 0), only the harness's own proxy; with an
//! upstream Toxiproxy they are not run.
//!
//! | check | clause | what it asks of every replica |
//! |---|---|---|
//! | `lock calls` | LOCK-1 | every advisory-lock call is the spec's two-int4 session form on (1886156915, 1) |
//! | `standby cadence` | RUN-1 | a standby tries the lock every T, and never queues for it |
//! | `refused checks leave the pool alone` | RUN-2 | no connection opened and closed around a refused check, no session setting changed next to one |
//! | `the lock session carries only the checks` | RUN-3, SESS-1 | no table touched on the session that holds the lock |
//! | `one lock session per term` | SESS-2 | the lock never moves to another session while the first one stays open |
//! | `the lock connection ends only at a demotion or a release` | SESS-1 | the replica never closes its lock connection while it works (a pool retiring it) |
//! | `idle_session_timeout on the lock session` | ORPH-1 | 4T in force on the lock session from its grant |
//! | `leader cadence` | RUN-5 | a check on the lock session every T |
//! | `lock connection closed after a failed check` | DEM-1 | an error or no answer within T on the lock session closes it |
//! | `the lock session names its replica` | X-WHO | the lock session's `application_name` is the replica's name from its grant to its end |
//!
//! Behind a transaction-mode pooler a replica's statements run on whichever server session the
//! pooler picks, and the pid its client sees is PgBouncer's: the lock-session checks skip such
//! replicas (POOL-1 shows that hazard). Behind a session-mode pooler a client connection keeps
//! one server session, so the lock session is found by the holder's `application_name`.

pub mod model;
pub mod sql;

use std::collections::{BTreeMap, BTreeSet};

use wiretap::Outcome;

use self::model::{conversations, lock_sessions, Conn, LockSession};
use self::sql::Arg;
use super::{in_t, ms_of, t_of, Bounds, Check, Measure, Unit, Verdict};
use crate::event::ReplicaEvent;
use crate::timeline::{Entry, What};

/// The spec's key, as its text writes it: "The leader lock is pg_try_advisory_lock(1886156915,
/// 1), the two-int4 form of the advisory lock functions" (LOCK-1).
const SPEC_KEY: [i64; 2] = [1_886_156_915, 1];
/// The standby's call, as the spec writes it.
const TRY_LOCK: &str = "pg_try_advisory_lock";
/// The release, as the spec writes it ("Run runs pg_advisory_unlock").
const UNLOCK: &str = "pg_advisory_unlock";
/// The same lock taken by waiting for it (not the spec's standby check: RUN-1).
const QUEUE: &str = "pg_advisory_lock";
/// The orphaned-session bound's setting, as the spec writes it (ORPH-1).
const IDLE_TIMEOUT: &str = "idle_session_timeout";
/// How many check intervals the orphaned-session bound is (ORPH-1: "four CheckIntervals").
const BOUND_INTERVALS: f64 = 4.0;
/// How far the median gap between checks may be from T: a tenth of T, small against T. A
/// median holds where a mean does not: a check that starts late (a connection opened first)
/// makes one gap long and the next short, and a check given a second statement (a program's
/// own bookkeeping on the session) makes one gap of nearly nothing.
const CADENCE_TOLERANCE: f64 = 0.1;
/// The fewest undisturbed gaps a cadence is judged on.
const CADENCE_GAPS: usize = 5;

/// How a replica reaches the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hop {
    /// Straight to PostgreSQL (through its proxy).
    Direct,
    /// Through PgBouncer in session mode: one server session per client connection.
    SessionPooler,
    /// Through PgBouncer in transaction mode: server sessions shared.
    TransactionPooler,
}

/// What the wire checks need beyond the timeline.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WireSetup {
    /// Whether the proxies kept a journal (the harness's own Toxiproxy-compatible server does;
    /// upstream Toxiproxy does not, and then these checks are not run).
    pub tapped: bool,
    /// Each replica's hop to the server; a replica not listed is taken as direct.
    pub hops: BTreeMap<String, Hop>,
    /// Replicas whose program queues in `pg_advisory_lock` by design (X-WAKE, opt-in): their
    /// queued call is the feature's, judged by X-WAKE, not a standby check.
    pub waking: BTreeSet<String>,
}

impl WireSetup {
    fn hop(&self, replica: &str) -> Hop {
        self.hops.get(replica).copied().unwrap_or(Hop::Direct)
    }

    /// Whether a replica's lock session can be told from its connections.
    fn sessions_visible(&self, replica: &str) -> bool {
        self.hop(replica) != Hop::TransactionPooler
    }
}

/// What the checks read: the conversations, the lock sessions and the disturbed windows.
struct Wire<'a> {
    conns: Vec<Conn>,
    sessions: Vec<LockSession>,
    faults: Vec<(String, f64, f64)>,
    /// When the samplers stopped: the harness stops the replicas after it.
    sampled_until: f64,
    /// Each term's end a replica reported (its event stream: demoted, released, abandoned).
    ended: Vec<(String, f64)>,
    setup: &'a WireSetup,
    b: &'a Bounds,
}

impl Wire<'_> {
    /// Whether `t_ms` lies near a fault that concerns `replica` (on it, or on the server):
    /// from a T before it was applied to 3T after it was lifted (a one-shot verb: applied).
    fn disturbed(&self, replica: &str, t_ms: f64) -> bool {
        let t = ms_of(self.b.t);
        (self.faults.iter()).any(|(target, a, z)| {
            (target == replica || !self.is_replica(target)) && t_ms >= a - t && t_ms <= z + 3.0 * t
        })
    }

    fn is_replica(&self, name: &str) -> bool {
        self.conns.iter().any(|c| c.replica == name)
    }

    fn replicas(&self) -> BTreeSet<&str> {
        self.conns.iter().map(|c| c.replica.as_str()).collect()
    }
}

/// Every wire check over `entries`, or (when the proxies kept no journal) each one not run.
pub fn checks(entries: &[Entry], b: &Bounds, setup: &WireSetup) -> Vec<Check> {
    let conns = conversations(entries);
    let sessions = lock_sessions(entries, &conns);
    let faults = (model::faults(entries).into_iter())
        .map(|(_, target, applied, lifted)| (target, applied, lifted))
        .collect();
    let sampled_until = model::sampled_until(entries);
    let ended = (entries.iter())
        .filter_map(|e| match &e.what {
            What::Replica { replica, event } => matches!(
                event,
                ReplicaEvent::Demoted { .. }
                    | ReplicaEvent::Released { .. }
                    | ReplicaEvent::Abandoned { .. }
            )
            .then(|| (replica.clone(), e.t_ms)),
            _ => None,
        })
        .collect();
    let w = Wire {
        conns,
        sessions,
        faults,
        sampled_until,
        ended,
        setup,
        b,
    };
    let all = vec![
        lock_calls(&w),
        standby_cadence(&w),
        refused_checks_leave_the_pool_alone(&w),
        lock_session_carries_only_checks(&w),
        one_lock_session_per_term(&w),
        ended_only_by_demotion_or_release(&w),
        idle_timeout_on_the_lock_session(&w),
        leader_cadence(&w),
        closed_after_a_failed_check(&w),
        lock_session_names_its_replica(&w),
    ];
    if setup.tapped {
        return all;
    }
    all.into_iter().map(untapped).collect()
}

/// `c` not run for want of a wire journal (the proxies are upstream Toxiproxy's).
pub fn untapped(c: Check) -> Check {
    Check {
        verdict: Verdict::Unknown,
        figures: BTreeMap::new(),
        measures: Vec::new(),
        message: "not run: needs the harness's proxy (its wire journal); upstream Toxiproxy \
                  keeps none"
            .into(),
        needs: Some(crate::level::Need::Wire),
        ..c
    }
}

/// LOCK-1: every advisory-lock call a replica sends is the spec's: the session-level,
/// exclusive, two-int4 functions on (1886156915, 1) (`pg_try_advisory_lock`, `pg_advisory_unlock`,
/// and `pg_advisory_lock`, which takes the same lock by queueing for it: RUN-1 judges the
/// queueing), never a `_shared`, an `_xact` or a single-bigint form, never another key.
fn lock_calls(w: &Wire) -> Check {
    let (mut calls, mut bad) = (0usize, Vec::new());
    for c in &w.conns {
        for s in &c.statements {
            let Ok(r) = &s.reading else {
                if s.sql.to_ascii_lowercase().contains("advisory") {
                    bad.push(format!("{}: unreadable SQL {:?}", c.replica, s.sql));
                }
                continue;
            };
            for call in r.calls.iter().filter(|c| c.name.contains("advisory")) {
                if call.name == "pg_advisory_unlock_all" {
                    continue;
                }
                calls += 1;
                let spec_key = call.args == SPEC_KEY.map(Arg::Int);
                let spec_fn = [TRY_LOCK, UNLOCK, QUEUE].contains(&call.name.as_str());
                if !(spec_key && spec_fn) {
                    bad.push(format!(
                        "{} called {}({}) at {:.0} ms",
                        c.replica,
                        call.name,
                        (call.args.iter()).map(show).collect::<Vec<_>>().join(", "),
                        s.sent_ms
                    ));
                }
            }
        }
    }
    let message = match bad.first() {
        None => {
            format!("{calls} advisory-lock calls, each {TRY_LOCK} or {UNLOCK} on (1886156915, 1)")
        }
        Some(first) => format!("{} calls not the spec's, first: {first}", bad.len()),
    };
    Check::new(
        "lock calls",
        &["LOCK-1"],
        super::verdict_of(calls, bad.is_empty()),
        message,
    )
    .figure("advisory-lock calls", calls.to_string())
    .with_measures(super::count_at_most(
        "calls not the spec's",
        calls,
        bad.len(),
        0,
    ))
}

fn show(a: &Arg) -> String {
    match a {
        Arg::Int(n) => n.to_string(),
        Arg::Text(s) => format!("'{s}'"),
        Arg::Other(s) => s.clone(),
    }
}

/// A replica's standby checks: its lock calls that did not grant it the lock, in the order
/// sent, each with its connection.
fn standby_checks<'a>(w: &'a Wire, replica: &str) -> Vec<(usize, &'a model::Stmt)> {
    let mut v: Vec<(usize, &model::Stmt)> = (w.conns.iter().enumerate())
        .filter(|(_, c)| c.replica == replica)
        .flat_map(|(i, c)| {
            (c.statements.iter().enumerate())
                .filter(move |(j, s)| {
                    s.locks()
                        && !s
                            .reading
                            .as_ref()
                            .is_ok_and(|r| r.calls_to(UNLOCK).count() > 0)
                        && !w.sessions.iter().any(|l| l.conn == i && l.grant <= *j)
                })
                .map(move |(_, s)| (i, s))
        })
        .collect();
    v.sort_by(|a, b| a.1.sent_ms.total_cmp(&b.1.sent_ms));
    v
}

/// The median of `gaps`, when there are enough to judge a cadence on ([`CADENCE_GAPS`]).
fn median(gaps: &[f64]) -> Option<f64> {
    let mut v = gaps.to_vec();
    v.sort_by(f64::total_cmp);
    (v.len() >= CADENCE_GAPS).then(|| v[v.len() / 2])
}

/// RUN-1: a standby checks every T: it never queues for the lock (`pg_advisory_lock`, unless
/// it does so by design, X-WAKE), and the gaps between its checks, away from faults and from
/// its terms, have a median within a tenth of T of T. (A single short gap is no violation: a
/// ticker on a fixed schedule follows a check that started late with one on time. When a
/// program's Run starts is not seen from outside, so its first check is not judged here: a
/// program may boot for a while before it runs its elector.)
fn standby_cadence(w: &Wire) -> Check {
    let t = ms_of(w.b.t);
    let (mut gaps, mut bad) = (Vec::new(), Vec::new());
    let mut queued = 0usize;
    for c in w
        .conns
        .iter()
        .filter(|c| !w.setup.waking.contains(&c.replica))
    {
        for s in &c.statements {
            if s.reading
                .as_ref()
                .is_ok_and(|r| r.calls_to(QUEUE).count() > 0)
            {
                queued += 1;
                if queued == 1 {
                    bad.push(format!(
                        "{} queued for the lock ({QUEUE}) at {:.0} ms instead of trying it",
                        c.replica, s.sent_ms
                    ));
                }
            }
        }
    }
    for r in w.replicas() {
        if w.setup.waking.contains(r) {
            continue;
        }
        let checks = standby_checks(w, r);
        for pair in checks.windows(2) {
            let (a, z) = (pair[0].1, pair[1].1);
            let led_between = (w.sessions.iter()).any(|l| {
                l.replica == r
                    && l.granted_ms < z.sent_ms
                    && l.ended_ms.is_none_or(|e| e > a.sent_ms)
            });
            // After the samplers stopped, who holds the lock is not known: the shutdown.
            let calm = !w.disturbed(r, a.sent_ms)
                && !w.disturbed(r, z.sent_ms)
                && z.sent_ms <= w.sampled_until;
            if !led_between && calm {
                gaps.push(z.sent_ms - a.sent_ms);
            }
        }
    }
    let med = median(&gaps);
    if let Some(m) = med.filter(|m| (m - t).abs() > CADENCE_TOLERANCE * t) {
        bad.push(format!(
            "the median gap between standby checks is {}",
            in_t(m, w.b.t)
        ));
    }
    let message = match bad.first() {
        None => format!(
            "{} gaps between standby checks, median {}",
            gaps.len(),
            med.map_or("-".into(), |m| in_t(m, w.b.t))
        ),
        Some(first) => first.clone(),
    };
    let decided = if med.is_some() { gaps.len() } else { 0 } + queued;
    let verdict = super::verdict_of(decided, bad.is_empty());
    let mut c = Check::new("standby cadence", &["RUN-1"], verdict, message)
        .figure("standby gaps", gaps.len().to_string())
        .figure("queued lock calls", queued.to_string());
    if let Some(m) = med {
        c = c.measure(Measure::at_most(
            "median standby gap off T".into(),
            Some((t_of(m, w.b.t) - 1.0).abs()),
            CADENCE_TOLERANCE,
            Unit::T,
        ));
    }
    c
}

/// RUN-2: a refused check changes nothing: no connection is opened for it and closed after it
/// (one that carried a refused check, lived under 2T and was closed by the replica while the
/// replica went on on other connections), and no statement next to it on its connection (the
/// one before it, the one after it, each within T) changes a session setting.
fn refused_checks_leave_the_pool_alone(w: &Wire) -> Check {
    let t = ms_of(w.b.t);
    let (mut refused, mut churned, mut changed) = (0usize, Vec::new(), Vec::new());
    for (i, c) in w.conns.iter().enumerate() {
        // A refusal is a lock call answered within T: one answered later failed (the program
        // gave it up, and closing its connection is what it must do then).
        let refusals: Vec<usize> = (c.statements.iter().enumerate())
            .filter(|(j, s)| {
                s.locks()
                    && s.answer.as_ref().is_some_and(|(at, _)| at - s.sent_ms <= t)
                    && !w.sessions.iter().any(|l| l.conn == i && l.grant <= *j)
                    && !w.setup.waking.contains(&c.replica)
            })
            .map(|(j, _)| j)
            .collect();
        refused += refusals.len();
        for &j in &refusals {
            let s = &c.statements[j];
            // Another check is no change: what its granting statement sets, it sets on a grant.
            let near = |k: Option<usize>| {
                k.and_then(|k| c.statements.get(k))
                    .filter(|n| (n.sent_ms - s.sent_ms).abs() <= t)
                    .filter(|n| {
                        (n.reading.as_ref())
                            .is_ok_and(|r| !r.locks() && (r.resets || !r.sets.is_empty()))
                    })
            };
            if let Some(n) = near(j.checked_sub(1)).or_else(|| near(Some(j + 1))) {
                if !w.disturbed(&c.replica, s.sent_ms) {
                    changed.push(format!(
                        "{} sent {:?} next to a refused check at {:.0} ms",
                        c.replica, n.sql, s.sent_ms
                    ));
                }
            }
        }
        let Some((closed, wiretap::Closer::Client, _)) = c.closed else {
            continue;
        };
        let went_on = (w.conns.iter())
            .any(|o| o.replica == c.replica && o.statements.iter().any(|s| s.sent_ms > closed));
        if !refusals.is_empty()
            && closed - c.opened_ms < 2.0 * t
            && went_on
            && !w.disturbed(&c.replica, closed)
        {
            churned.push(format!(
                "{} opened a connection at {:.0} ms for a refused check and closed it {:.0} ms later",
                c.replica,
                c.opened_ms,
                closed - c.opened_ms
            ));
        }
    }
    let bad: Vec<&String> = churned.iter().chain(&changed).collect();
    let message = match bad.first() {
        None => format!("{refused} refused checks: no connection opened and closed for one, no setting changed next to one"),
        Some(first) => format!("{} ({} connections churned, {} settings changed)", first, churned.len(), changed.len()),
    };
    Check::new(
        "refused checks leave the pool alone",
        &["RUN-2"],
        super::verdict_of(refused, bad.is_empty()),
        message,
    )
    .figure("refused checks", refused.to_string())
    .figure(
        "connections opened and closed for one",
        churned.len().to_string(),
    )
    .with_measures(super::count_at_most(
        "connections opened and closed around refused checks",
        refused,
        churned.len(),
        0,
    ))
    .with_measures(super::count_at_most(
        "session settings changed next to refused checks",
        refused,
        changed.len(),
        0,
    ))
}

/// The statements on a lock session after its grant, while it held the lock.
fn held_statements<'a>(
    w: &'a Wire,
    l: &'a LockSession,
) -> impl Iterator<Item = &'a model::Stmt> + 'a {
    (w.conns[l.conn].statements.iter().skip(l.grant + 1))
        .take_while(move |s| l.ended_ms.is_none_or(|e| s.sent_ms <= e))
}

/// Whether `s` is work rather than a check or the release: it writes, or names a table that is
/// not the catalogs'.
fn work(s: &model::Stmt) -> bool {
    (s.reading.as_ref()).is_ok_and(|r| r.inserts || r.tables.iter().any(|t| !t.starts_with("pg_")))
}

/// The lock sessions of replicas whose sessions can be told (not behind a transaction pooler).
fn visible_sessions<'a>(w: &'a Wire) -> impl Iterator<Item = &'a LockSession> + 'a {
    (w.sessions.iter()).filter(|l| w.setup.sessions_visible(&l.replica))
}

/// RUN-3, SESS-1: the lock's connection is out of the pool: while it holds the lock, nothing
/// but checks and the release runs on it (no statement names a table other than the
/// catalogs'), so the pool's work runs on other sessions.
fn lock_session_carries_only_checks(w: &Wire) -> Check {
    let (mut n, mut bad) = (0usize, Vec::new());
    for l in visible_sessions(w) {
        n += 1;
        for s in held_statements(w, l) {
            if work(s) {
                bad.push(format!(
                    "{} ran {:?} on its lock session at {:.0} ms",
                    l.replica, s.sql, s.sent_ms
                ));
            }
        }
    }
    let message = match bad.first() {
        None => format!("{n} lock sessions, each carrying only checks and the release"),
        Some(first) => format!(
            "{} statements of work on a lock session, first: {first}",
            bad.len()
        ),
    };
    Check::new(
        "the lock session carries only the checks",
        &["RUN-3", "SESS-1"],
        super::verdict_of(n, bad.is_empty()),
        message,
    )
    .figure("lock sessions", n.to_string())
    .with_measures(super::count_at_most(
        "statements of work on a lock session",
        n,
        bad.len(),
        0,
    ))
}

/// SESS-2: a leader keeps one connection for the lock for its whole term: the lock never
/// passes to another session of the same replica within 2T of leaving the first while that
/// first connection stays open (a demotion closes it, DEM-1).
fn one_lock_session_per_term(w: &Wire) -> Check {
    let t = ms_of(w.b.t);
    let mut by_replica: BTreeMap<&str, Vec<&LockSession>> = BTreeMap::new();
    for l in visible_sessions(w) {
        by_replica.entry(&l.replica).or_default().push(l);
    }
    let (mut n, mut bad) = (0usize, Vec::new());
    for (r, ls) in by_replica {
        n += ls.len();
        for pair in ls.windows(2) {
            let (old, new) = (pair[0], pair[1]);
            let Some(left) = old.ended_ms else { continue };
            let old_open = w.conns[old.conn].open_at(new.granted_ms);
            if old.conn != new.conn && old_open && new.granted_ms - left < 2.0 * t {
                bad.push(format!(
                    "{r}'s lock moved from connection {} to {} at {:.0} ms, the first still open",
                    w.conns[old.conn].id, w.conns[new.conn].id, new.granted_ms
                ));
            }
        }
    }
    let message = match bad.first() {
        None => format!("{n} lock sessions, none moved mid-term"),
        Some(first) => first.clone(),
    };
    Check::new(
        "one lock session per term",
        &["SESS-2"],
        super::verdict_of(n, bad.is_empty()),
        message,
    )
    .with_measures(super::count_at_most("lock moves mid-term", n, bad.len(), 0))
}

/// X-WHO: the lock session carries the replica's identity: the `application_name` in force on
/// it (its startup packet's, or a later `SET`, as the client sent them) is the replica's name
/// when the lock is granted and stays so until the session ends, so the spec's leader-finding
/// query says which replica leads.
fn lock_session_names_its_replica(w: &Wire) -> Check {
    let (mut n, mut bad) = (0usize, Vec::new());
    for l in visible_sessions(w) {
        n += 1;
        let c = &w.conns[l.conn];
        let until = l.ended_ms.unwrap_or(f64::INFINITY);
        let at_grant = (c.names.iter().rev()).find(|(at, _)| *at <= l.granted_ms);
        let later = (c.names.iter()).filter(|(at, _)| *at > l.granted_ms && *at < until);
        let wrong = at_grant
            .into_iter()
            .chain(later)
            .find(|(_, name)| *name != l.replica);
        let why = match (at_grant, wrong) {
            (None, _) => Some("no application_name".to_owned()),
            (_, Some((at, name))) => Some(format!("application_name {name:?} at {at:.0} ms")),
            _ => None,
        };
        if let Some(why) = why {
            bad.push(format!(
                "{}'s lock session (connection {}, granted at {:.0} ms): {why}",
                l.replica, c.id, l.granted_ms
            ));
        }
    }
    let message = match bad.first() {
        None => format!("{n} lock sessions, each named for its replica"),
        Some(first) => format!(
            "{} lock sessions not named for their replica, first: {first}",
            bad.len()
        ),
    };
    Check::new(
        "the lock session names its replica",
        &["X-WHO"],
        super::verdict_of(n, bad.is_empty()),
        message,
    )
    .with_measures(super::count_at_most(
        "lock sessions misnamed",
        n,
        bad.len(),
        0,
    ))
}

/// SESS-1: the lock connection is outside the pool, so nothing closes it but the replica's own
/// demotion (after a check that failed: an error, or no answer) or release (an unlock first):
/// a close by the replica with neither, away from faults, before the harness stops the
/// replicas and with no end of its term reported within T (a replica with the event stream
/// that abandons its lock as its worker exits, RUN-7), is a pool retiring it (its max
/// lifetime, idle recycling, a health check).
fn ended_only_by_demotion_or_release(w: &Wire) -> Check {
    let t = ms_of(w.b.t);
    let (mut n, mut bad) = (0usize, Vec::new());
    for l in visible_sessions(w) {
        let c = &w.conns[l.conn];
        let Some((closed, wiretap::Closer::Client, _)) = c.closed else {
            continue;
        };
        n += 1;
        let after_grant = || {
            c.statements
                .iter()
                .skip(l.grant + 1)
                .filter(|s| s.sent_ms <= closed)
        };
        let released = after_grant().any(|s| s.reading.as_ref().is_ok_and(sql::Reading::unlocks));
        let failed = after_grant().any(|s| {
            matches!(&s.answer, None | Some((_, Outcome::Error { .. })))
                || s.answer.as_ref().is_some_and(|(at, _)| *at > closed)
        });
        let reported = (w.ended.iter()).any(|(r, at)| r == &l.replica && (at - closed).abs() <= t);
        let excused = w.disturbed(&l.replica, closed) || closed > w.sampled_until || reported;
        if !(released || failed || excused) {
            bad.push(format!(
                "{} closed its lock connection at {closed:.0} ms with no failed check and no \
                 release (a pool retiring it?)",
                l.replica
            ));
        }
    }
    let message = match bad.first() {
        None => {
            format!("{n} lock connections closed by their replica, each at a demotion or a release")
        }
        Some(first) => first.clone(),
    };
    Check::new(
        "the lock connection ends only at a demotion or a release",
        &["SESS-1"],
        super::verdict_of(n, bad.is_empty()),
        message,
    )
    .with_measures(super::count_at_most(
        "lock connections closed while they held the lock",
        n,
        bad.len(),
        0,
    ))
}

/// A setting's value in milliseconds (`800`, `'800ms'`, `'0.8s'`, `'1min'`).
fn millis(a: &Arg) -> Option<f64> {
    let text = match a {
        Arg::Int(n) => return Some(*n as f64),
        Arg::Text(s) => s.trim(),
        Arg::Other(_) => return None,
    };
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (num, unit) = text.split_at(split);
    let v: f64 = num.parse().ok()?;
    let scale = match unit.trim() {
        "" | "ms" => 1.0,
        "s" => 1000.0,
        "min" => 60_000.0,
        "us" => 0.001,
        _ => return None,
    };
    Some(v * scale)
}

/// ORPH-1: `idle_session_timeout` = 4T is in force on the lock session from its grant: set on
/// its connection before or by the granting statement, or by the next statement within T.
fn idle_timeout_on_the_lock_session(w: &Wire) -> Check {
    let (t, want) = (ms_of(w.b.t), BOUND_INTERVALS * ms_of(w.b.t));
    let (mut n, mut bad, mut seen) = (0usize, Vec::new(), Vec::new());
    for l in visible_sessions(w) {
        n += 1;
        let c = &w.conns[l.conn];
        let mut value = None;
        for (j, s) in c.statements.iter().enumerate() {
            let after = j > l.grant && s.sent_ms > l.granted_ms + t;
            if after {
                break;
            }
            if let Ok(r) = &s.reading {
                for (name, v) in &r.sets {
                    if name == IDLE_TIMEOUT {
                        value = Some(millis(v));
                    }
                }
            }
        }
        match value {
            Some(Some(ms)) if (ms - want).abs() < 0.5 => seen.push(ms),
            Some(Some(ms)) => bad.push(format!(
                "{}'s lock session got {IDLE_TIMEOUT} = {} (want 4T)",
                l.replica,
                in_t(ms, w.b.t)
            )),
            Some(None) => bad.push(format!(
                "{}'s lock session got {IDLE_TIMEOUT} set to a value the wire does not show",
                l.replica
            )),
            None => bad.push(format!(
                "{}'s lock session (granted at {:.0} ms) got no {IDLE_TIMEOUT}",
                l.replica, l.granted_ms
            )),
        }
    }
    let message = match bad.first() {
        None => format!("{n} lock sessions, each with {IDLE_TIMEOUT} = 4T from its grant"),
        Some(first) => format!("{} of {n} lock sessions wrong, first: {first}", bad.len()),
    };
    Check::new(
        "idle_session_timeout on the lock session",
        &["ORPH-1"],
        super::verdict_of(n, bad.is_empty()),
        message,
    )
    .with_measures(super::count_at_most(
        "lock sessions without 4T",
        n,
        bad.len(),
        0,
    ))
}

/// RUN-5 (its cadence): the leader checks its session every T: the gaps between the checks
/// on a lock session (its statements but any work, which RUN-3 judges, and the release),
/// away from faults, have a median within a tenth of T of T.
fn leader_cadence(w: &Wire) -> Check {
    let t = ms_of(w.b.t);
    let mut gaps = Vec::new();
    for l in visible_sessions(w) {
        let checks: Vec<&model::Stmt> = (held_statements(w, l))
            .filter(|s| !work(s) && !s.reading.as_ref().is_ok_and(sql::Reading::unlocks))
            .collect();
        for pair in checks.windows(2) {
            let (a, z) = (pair[0], pair[1]);
            let calm = !w.disturbed(&l.replica, a.sent_ms) && !w.disturbed(&l.replica, z.sent_ms);
            if calm && z.sent_ms <= w.sampled_until {
                gaps.push(z.sent_ms - a.sent_ms);
            }
        }
    }
    let med = median(&gaps);
    let n = if med.is_some() { gaps.len() } else { 0 };
    let held = med.is_none_or(|m| (m - t).abs() <= CADENCE_TOLERANCE * t);
    let message = med.map_or(
        format!(
            "{} undisturbed gaps between leader checks: too few",
            gaps.len()
        ),
        |m| format!("{n} gaps between leader checks, median {}", in_t(m, w.b.t)),
    );
    let mut c = Check::new(
        "leader cadence",
        &["RUN-5"],
        super::verdict_of(n, held),
        message,
    );
    if let Some(m) = med {
        c = c.measure(Measure::at_most(
            "median leader gap off T".into(),
            Some((t_of(m, w.b.t) - 1.0).abs()),
            CADENCE_TOLERANCE,
            Unit::T,
        ));
    }
    c
}

/// DEM-1: a check on the lock session that fails (an error, or no answer within T) ends with
/// the connection closed: by the replica within T of the failure, or by the server before.
fn closed_after_a_failed_check(w: &Wire) -> Check {
    let (t, slack) = (ms_of(w.b.t), ms_of(w.b.slack));
    let end_ms = (w.conns.iter())
        .flat_map(|c| {
            c.statements
                .iter()
                .map(|s| s.sent_ms)
                .chain(c.closed.map(|c| c.0))
        })
        .fold(0.0, f64::max);
    let (mut failed, mut bad, mut worst) = (0usize, Vec::new(), 0.0f64);
    for l in visible_sessions(w) {
        let c = &w.conns[l.conn];
        // The release is not a check: its unlock has a deadline of its own (RUN-6), and once
        // it has begun a check still in flight fails into it, not into a demotion.
        let released = (held_statements(w, l))
            .find(|s| s.reading.as_ref().is_ok_and(sql::Reading::unlocks))
            .map(|s| s.sent_ms);
        let checks = (held_statements(w, l))
            .take_while(|s| !s.reading.as_ref().is_ok_and(sql::Reading::unlocks));
        for s in checks {
            let failed_at = match &s.answer {
                Some((at, Outcome::Error { .. })) => *at,
                Some(_) => continue,
                None if s.sent_ms + t + slack < end_ms => s.sent_ms + t,
                None => continue,
            };
            if released.is_some_and(|r| r <= failed_at) {
                break;
            }
            failed += 1;
            match c.closed {
                Some((at, ..)) if at <= failed_at + t + slack => worst = worst.max(at - failed_at),
                Some((at, ..)) => bad.push(format!(
                    "{}'s lock connection closed {} after a failed check at {:.0} ms",
                    l.replica,
                    in_t(at - failed_at, w.b.t),
                    failed_at
                )),
                None => bad.push(format!(
                    "{}'s lock connection stayed open after a failed check at {:.0} ms",
                    l.replica, failed_at
                )),
            }
            break;
        }
    }
    let message = match bad.first() {
        None => format!("{failed} failed checks on a lock session, each followed by its close (latest {} after)", in_t(worst, w.b.t)),
        Some(first) => first.clone(),
    };
    Check::new(
        "lock connection closed after a failed check",
        &["DEM-1"],
        super::verdict_of(failed, bad.is_empty()),
        message,
    )
    .with_measures(super::count_at_most(
        "lock connections left open after a failed check",
        failed,
        bad.len(),
        0,
    ))
}

#[cfg(test)]
mod tests;
