//! The wire checks of what a leader does on its lock session beyond the cadence
//! ([`super::checks`]): what its check is (RUN-5: never a lock call), that the first failed
//! check demotes (RUN-5: nothing is sent after it but the release), and that its release after
//! a SIGTERM is bounded by the unlock's 2 s deadline, answered or not (RUN-6).

use wiretap::Closer;

use super::lock_session::{held_statements, visible_sessions as visible};
use super::model::{LockSession, Stmt};
use super::Wire;
use crate::check::{count_at_most, in_t, ms_of, t_of, verdict_of, Check, Measure, Unit};

/// RUN-6's deadline on the unlock, as the page writes it ("under a 2-second context").
const UNLOCK_DEADLINE_MS: f64 = 2000.0;
/// What the release bound allows beyond the deadline and the run's slack, as a share of T:
/// the program's own scheduling between its deadline firing and its close (a quarter of T).
const RELEASE_ALLOWANCE_T: f64 = 0.25;

/// The statements sent on a lock session's connection after its grant.
fn after_grant<'a>(w: &'a Wire, l: &LockSession) -> &'a [Stmt] {
    let c = &w.conns[l.conn];
    c.statements.get(l.grant + 1..).unwrap_or_default()
}

/// RUN-5, what the check is: "on the leader, a check runs SELECT 1 on the held connection".
/// A check that asks for the lock again (`pg_try_advisory_lock`, `pg_advisory_lock`) on the
/// session that holds it is granted at once, and each grant stacks one more hold, which the
/// single unlock of the release does not undo: the lock then outlives the release until the
/// connection closes (JasperFx/wolverine#2691 shipped this).
pub(super) fn leader_checks_take_no_lock(w: &Wire) -> Check {
    let (mut n, mut bad) = (0usize, Vec::new());
    // A grant whose answer never reached the replica (its answers were lost) is no term of its:
    // it queued again on that session without knowing it held the key.
    let heard = |l: &&LockSession| {
        (w.conns[l.conn].statements.get(l.grant)).is_some_and(|g| g.answer.is_some())
    };
    for l in visible(w).filter(heard) {
        n += 1;
        let relock = held_statements(w, l).find(|s| s.asks());
        if let Some(s) = relock {
            bad.push(format!(
                "{} asked for the lock again on the session that held it at {:.0} ms ({:?}; {})",
                l.replica,
                s.sent_ms,
                s.sql,
                l.describe(w.conns)
            ));
        }
    }
    let message = match bad.first() {
        None => format!("{n} lock sessions, none asked for the lock again while holding it"),
        Some(first) => format!("{} lock sessions re-locked, first: {first}", bad.len()),
    };
    Check::new(
        "leader checks take no lock",
        &["RUN-5"],
        verdict_of(n, bad.is_empty()),
        message,
    )
    .with_measures(count_at_most("lock sessions re-locked", n, bad.len(), 0))
}

/// When the check `s` failed, as the wire shows it ([`Stmt::failed_at`]), or T after it was
/// sent when its answer came later than T and the slack.
pub(super) fn failed_at(s: &Stmt, t: f64, slack: f64, end_ms: f64) -> Option<f64> {
    let late = || match &s.answer {
        Some((at, _)) if *at > s.sent_ms + t + slack => Some(s.sent_ms + t),
        _ => None,
    };
    s.failed_at(t, slack, end_ms).or_else(late)
}

/// RUN-5, "either one demotes the replica": once a check on the lock session has failed (an
/// error, or no answer within T), the replica has demoted and closes that connection; nothing
/// more is sent on it but the release's unlock (the harness's own replica unlocks after a slow
/// check, issue 35). A second check sent after the first failed one is a leader that shrugged
/// the failure off. (Where the failed check's connection is broken, the client sends nothing
/// more on it anyway: the demotion's timing then tells, RUN-5's and DEM-2's expectations.)
pub(super) fn nothing_after_a_failed_check(w: &Wire) -> Check {
    let (t, slack) = (ms_of(w.b.t), ms_of(w.b.slack));
    let (mut failed, mut bad) = (0usize, Vec::new());
    for l in visible(w) {
        let statements = after_grant(w, l);
        let first = (statements.iter().enumerate())
            .take_while(|(_, s)| !s.unlocks())
            .find_map(|(i, s)| failed_at(s, t, slack, w.end_ms).map(|at| (i, at)));
        let Some((i, at)) = first else { continue };
        failed += 1;
        let later = (statements[i + 1..].iter()).find(|s| !s.unlocks() && s.sent_ms > at);
        if let Some(s) = later {
            bad.push(format!(
                "{} sent {:?} on its lock session at {:.0} ms, {} after a check there failed \
                 ({:?}, sent at {:.0} ms)",
                l.replica,
                s.sql,
                s.sent_ms,
                in_t(s.sent_ms - at, w.b.t),
                statements[i].sql,
                statements[i].sent_ms
            ));
        }
    }
    let message = match bad.first() {
        None => format!("{failed} failed checks on a lock session, nothing sent on it after any"),
        Some(first) => first.clone(),
    };
    Check::new(
        "the first failed check demotes",
        &["RUN-5"],
        verdict_of(failed, bad.is_empty()),
        message,
    )
    .with_measures(count_at_most(
        "lock sessions used after a failed check",
        failed,
        bad.len(),
        0,
    ))
}

/// RUN-6 under a bad link: "Run runs pg_advisory_unlock under a 2-second context that outlives
/// ctx, closes the connection": after a SIGTERM (the `terminate` fault) to a replica whose lock
/// session was open, the replica closes that connection within 2 s, whether or not its unlock
/// was answered, plus the slack and a quarter of T for its own scheduling. A program that
/// waits for the unlock's answer with no deadline, or a longer one, holds its release (and its
/// exit) for as long as the link is bad.
///
/// The proxy records a connection's first close only. Where the server ended the session first
/// (its orphan bound), the replica had not closed it by then: that decides a violation when it
/// came after the bound, and nothing before it; likewise the end of the wire for a connection
/// never closed. A connection the proxy itself ended (a fault) is not judged.
pub(super) fn release_within_its_deadline(w: &Wire) -> Check {
    let bound = UNLOCK_DEADLINE_MS + ms_of(w.b.slack) + RELEASE_ALLOWANCE_T * ms_of(w.b.t);
    let (mut n, mut bad, mut worst) = (0usize, Vec::new(), 0.0f64);
    for (r, at) in &w.terminations {
        let held = visible(w)
            .find(|l| &l.replica == r && l.granted_ms < *at && w.conns[l.conn].open_at(*at));
        let Some(l) = held else { continue };
        // How long after the SIGTERM the replica closed it, or at least had not.
        let (by_replica, seen) = match w.conns[l.conn].closed {
            Some((_, Closer::Proxy, _)) => continue,
            Some((closed, Closer::Client, _)) => (true, closed - at),
            Some((closed, Closer::Server, _)) => (false, closed - at),
            None => (false, w.end_ms - at),
        };
        if !by_replica && seen <= bound {
            continue;
        }
        n += 1;
        worst = worst.max(seen);
        if seen > bound {
            let what = match by_replica {
                true => "closed its lock connection",
                false => "had not closed its lock connection",
            };
            bad.push(format!(
                "{r} {what} {:.2} s after its SIGTERM (the unlock's deadline is 2 s)",
                seen / 1000.0
            ));
        }
    }
    let message = match bad.first() {
        None => format!(
            "{n} releases after a SIGTERM, each lock connection closed within 2 s (latest {:.2} s)",
            worst / 1000.0
        ),
        Some(first) => first.clone(),
    };
    Check::new(
        "release within its deadline",
        &["RUN-6"],
        verdict_of(n, bad.is_empty()),
        message,
    )
    .with_measures((n > 0).then(|| {
        Measure::at_most(
            "lock connection closed after a SIGTERM".into(),
            Some(t_of(worst, w.b.t)),
            t_of(bound, w.b.t),
            Unit::T,
        )
    }))
}
