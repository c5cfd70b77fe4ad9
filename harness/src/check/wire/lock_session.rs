//! The wire checks of the lock session, the connection that held the lock
//! ([`super::checks`]): it carries only the checks (RUN-3, SESS-1), one per term (SESS-2),
//! named for its replica (X-WHO), ended only by a demotion or a release (SESS-1), with
//! `idle_session_timeout` = 4T (ORPH-1), checked every T (RUN-5) and closed after a failed
//! check (DEM-1).

use std::collections::BTreeMap;

use wiretap::Outcome;

use super::model::{LockSession, Stmt};
use super::sql::Arg;
use super::{median, Wire, BOUND_INTERVALS, CADENCE_TOLERANCE, IDLE_TIMEOUT};
use crate::check::{count_at_most, in_t, ms_of, t_of, verdict_of, Check, Measure, Unit};
use crate::fault::UNLOCK_ALL;

/// The statements on a lock session after its grant, while it held the lock.
pub(super) fn held_statements<'a>(
    w: &'a Wire,
    l: &'a LockSession,
) -> impl Iterator<Item = &'a Stmt> + 'a {
    (w.conns[l.conn].statements.iter().skip(l.grant + 1))
        .take_while(move |s| l.ended_ms.is_none_or(|e| s.sent_ms <= e))
}

/// Whether `s` is work rather than a check or the release: it writes, or names a table that is
/// not the catalogs'.
fn work(s: &Stmt) -> bool {
    (s.reading.as_ref()).is_ok_and(|r| r.inserts || r.tables.iter().any(|t| !t.starts_with("pg_")))
}

/// The lock sessions of replicas whose sessions can be told (not behind a transaction pooler).
pub(super) fn visible_sessions<'a>(w: &'a Wire) -> impl Iterator<Item = &'a LockSession> + 'a {
    (w.sessions.iter()).filter(|l| w.setup.sessions_visible(&l.replica))
}

/// RUN-3, SESS-1: the lock's connection is out of the pool: while it holds the lock, nothing
/// but checks and the release runs on it (no statement names a table other than the
/// catalogs'), so the pool's work runs on other sessions.
pub(super) fn lock_session_carries_only_checks(w: &Wire) -> Check {
    let (mut n, mut bad) = (0usize, Vec::new());
    for l in visible_sessions(w) {
        n += 1;
        for s in held_statements(w, l) {
            if work(s) {
                bad.push(format!(
                    "{} ran {:?} on its lock session at {:.0} ms ({})",
                    l.replica,
                    s.sql,
                    s.sent_ms,
                    l.describe(w.conns)
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
        verdict_of(n, bad.is_empty()),
        message,
    )
    .figure("lock sessions", n.to_string())
    .with_measures(count_at_most(
        "statements of work on a lock session",
        n,
        bad.len(),
        0,
    ))
}

/// SESS-2: a leader keeps one connection for the lock for its whole term: the lock never
/// passes to another session of the same replica within 2T of leaving the first while that
/// first connection stays open (a demotion closes it, DEM-1).
pub(super) fn one_lock_session_per_term(w: &Wire) -> Check {
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
                    "{r}'s lock moved from connection {} to {} at {:.0} ms, the first still open \
                     (ended at {left:.0} ms; {}; then {})",
                    w.conns[old.conn].id,
                    w.conns[new.conn].id,
                    new.granted_ms,
                    old.describe(w.conns),
                    new.describe(w.conns)
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
        verdict_of(n, bad.is_empty()),
        message,
    )
    .with_measures(count_at_most("lock moves mid-term", n, bad.len(), 0))
}

/// X-WHO: the lock session carries the replica's identity: the `application_name` in force on
/// it (its startup packet's, or a later `SET`, as the client sent them) is the replica's name
/// when the lock is granted and stays so until the session ends, so the spec's leader-finding
/// query says which replica leads.
pub(super) fn lock_session_names_its_replica(w: &Wire) -> Check {
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
        verdict_of(n, bad.is_empty()),
        message,
    )
    .with_measures(count_at_most("lock sessions misnamed", n, bad.len(), 0))
}

/// SESS-1: the lock connection is outside the pool, so nothing closes it but the replica's own
/// demotion (after a check that failed: an error, or no answer) or release (an unlock first):
/// a close by the replica with neither, away from faults, before the harness stops the
/// replicas and with no end of its term reported within T (a replica with the event stream
/// that abandons its lock as its worker exits, RUN-7), is a pool retiring it (its max
/// lifetime, idle recycling, a health check).
pub(super) fn ended_only_by_demotion_or_release(w: &Wire) -> Check {
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
        let released = after_grant().any(Stmt::unlocks);
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
        verdict_of(n, bad.is_empty()),
        message,
    )
    .with_measures(count_at_most(
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
pub(super) fn idle_timeout_on_the_lock_session(w: &Wire) -> Check {
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
        w.interval_clause(&["ORPH-1"]),
        verdict_of(n, bad.is_empty()),
        message,
    )
    .with_measures(count_at_most("lock sessions without 4T", n, bad.len(), 0))
}

/// RUN-5 (its cadence): the leader checks its session every T: the gaps between the checks
/// on a lock session (its statements but any work, which RUN-3 judges, and the release),
/// away from faults, have a median within a tenth of T of T.
pub(super) fn leader_cadence(w: &Wire) -> Check {
    let t = ms_of(w.b.t);
    let mut gaps = Vec::new();
    for l in visible_sessions(w) {
        let checks: Vec<&Stmt> = (held_statements(w, l))
            .filter(|s| !work(s) && !s.unlocks())
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
        w.interval_clause(&["RUN-5"]),
        verdict_of(n, held),
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
/// the connection closed: by the replica within T of the failure (of its thaw, when its process
/// was frozen then), or by the server before.
pub(super) fn closed_after_a_failed_check(w: &Wire) -> Check {
    let (t, slack) = (ms_of(w.b.t), ms_of(w.b.slack));
    let (mut failed, mut bad, mut worst) = (0usize, Vec::new(), 0.0f64);
    for l in visible_sessions(w) {
        let c = &w.conns[l.conn];
        // The release is not a check: its unlock has a deadline of its own (RUN-6), and once
        // it has begun a check still in flight fails into it, not into a demotion.
        let released = (held_statements(w, l))
            .find(|s| s.unlocks())
            .map(|s| s.sent_ms);
        let checks = held_statements(w, l).take_while(|s| !s.unlocks());
        for s in checks {
            let Some(failed_at) = s.failed_at(t, slack, w.end_ms) else {
                continue;
            };
            if released.is_some_and(|r| r <= failed_at) {
                break;
            }
            failed += 1;
            // A frozen process closes nothing until it is thawed.
            let due = w.can_act(&l.replica, failed_at) + t + slack;
            match c.closed {
                Some((at, ..)) if at <= due => worst = worst.max(at - failed_at),
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
        verdict_of(failed, bad.is_empty()),
        message,
    )
    .with_measures(count_at_most(
        "lock connections left open after a failed check",
        failed,
        bad.len(),
        0,
    ))
}

/// X-VERIFY: a leader whose lock is released behind its back (the `unlock` fault: its proxy
/// runs `pg_advisory_unlock_all()` on its idle lock session) learns it at its next check, within
/// T, and demotes: it closes that connection within T and the slack of the unlock. One that
/// only runs `SELECT 1` keeps the connection, believing it leads while another does.
pub(super) fn closed_after_a_stray_unlock(w: &Wire) -> Check {
    let bound = ms_of(w.b.t) + ms_of(w.b.slack);
    let (mut n, mut bad) = (0usize, Vec::new());
    for l in visible_sessions(w) {
        let c = &w.conns[l.conn];
        let held_at = |x: f64| l.granted_ms < x && c.open_at(x);
        let unlocks = (c.injected.iter()).filter(|(x, sql)| held_at(*x) && sql == UNLOCK_ALL);
        for (x, _) in unlocks {
            n += 1;
            let closed = c.closed.map(|(at, ..)| at);
            if closed.is_none_or(|at| at - x > bound) {
                bad.push(format!(
                    "{}'s lock was released behind its back at {x:.0} ms and its lock connection \
                     was {} (bound T + slack)",
                    l.replica,
                    closed.map_or("never closed".into(), |at| format!(
                        "closed {} later",
                        in_t(at - x, w.b.t)
                    ))
                ));
            }
        }
    }
    let message = match bad.first() {
        None => format!("{n} stray unlocks of a lock session, each noticed within T"),
        Some(first) => first.clone(),
    };
    Check::new(
        "lock connection closed after a stray unlock",
        &["X-VERIFY"],
        verdict_of(n, bad.is_empty()),
        message,
    )
    .with_measures(count_at_most(
        "stray unlocks not noticed within T",
        n,
        bad.len(),
        0,
    ))
}
