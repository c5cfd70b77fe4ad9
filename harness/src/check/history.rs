//! Checks of the run as one history, Jepsen style: the lock rows the server showed against the
//! terms the replicas reported. A sample decides what it shows at its moment; the history
//! decides whose it was.
//!
//! - **Every granted row belongs to a term** (RUN-3, LOCK-3): the row's backend is the lock
//!   session of a term its replica reported (`acquired` with that `backend_pid`). A grant that
//!   lands on a session nobody checks (a pooled connection after a dropped check) belongs to no
//!   term, and no leader may lead while it lasts: one may exist for about T (a slow standby's
//!   given-up attempt, until its close arrives), not longer.
//! - **No row outlives its term by more than 4T** (ORPH-2): after a term ends (demoted,
//!   released, abandoned, its process killed or restarted) its session's row leaves within the
//!   orphan bound, however the term ended.
//! - **An unlock the replica reports is one the server saw** (RUN-6): after a `released` whose
//!   outcome is `unlocked`, no sample shows that term's row again.

use std::collections::BTreeMap;

use super::{in_t, ms_of, t_of, verdict_of, Bounds, Check, Measure, Unit, Verdict, Window};
use crate::event::{ReleaseOutcome, ReplicaEvent, TermChange};
use crate::fault::Verb;
use crate::timeline::{fault_spans, Entry, FaultSpan, What};

/// The orphan bound in units of T (ORPH-1: `idle_session_timeout` = 4·T).
const ORPHAN_BOUND_T: u32 = 4;

/// One term as the replicas reported it: its lock session and when it began and ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Term {
    /// The replica that led.
    pub replica: String,
    /// The term's number on that replica (numbers restart with the process).
    pub term: u64,
    /// The lock session's backend.
    pub backend_pid: i32,
    /// When the harness read `acquired`.
    pub began_ms: f64,
    /// When it ended: `demoted`, `released` or `abandoned`, a new `started` of its replica (a
    /// restart), or a `kill` or `restart` of its process. `None`: live at the end of the run.
    pub ended_ms: Option<f64>,
    /// When the term's session was seen gone: a pg_locks sample after the term ended, or after
    /// a restart or stop of the server, showed no row of its backend (its lock, once gone, never
    /// comes back to that session). No later row is this term's, whatever its backend pid:
    /// PostgreSQL hands pids out again, and PgBouncer lends the same server session to its next
    /// client.
    pub session_gone_ms: Option<f64>,
    /// When a restart or stop of the server began after the term began, if one did. The server
    /// ends every session once it stops, which may be a while after the call began: until a
    /// sample omits the row, the session lives.
    pub server_stopping_ms: Option<f64>,
}

impl Term {
    /// Whether a row of backend `pid` sampled at `at_ms` can be this term's session.
    fn session_is(&self, pid: i32, at_ms: f64) -> bool {
        self.backend_pid == pid && self.session_gone_ms.is_none_or(|g| at_ms < g)
    }
}

/// Every term of the run, in the order they began. A frozen replica's term does not end at the
/// freeze: its session lives on and it resumes, or the server ends the session.
pub fn terms(entries: &[Entry]) -> Vec<Term> {
    let mut all: Vec<Term> = Vec::new();
    let mut open: BTreeMap<String, usize> = BTreeMap::new();
    let end = |open: &mut BTreeMap<String, usize>, all: &mut Vec<Term>, r: &str, t: f64| {
        if let Some(i) = open.remove(r) {
            all[i].ended_ms = Some(t);
        }
    };
    for e in entries {
        match &e.what {
            What::Replica { replica, event } => match event {
                ReplicaEvent::Acquired { term, backend_pid } => {
                    end(&mut open, &mut all, replica, e.t_ms);
                    open.insert(replica.clone(), all.len());
                    all.push(Term {
                        replica: replica.clone(),
                        term: *term,
                        backend_pid: *backend_pid,
                        began_ms: e.t_ms,
                        ended_ms: None,
                        session_gone_ms: None,
                        server_stopping_ms: None,
                    });
                }
                _ if event.term_change() == Some(TermChange::Ends) => {
                    end(&mut open, &mut all, replica, e.t_ms);
                }
                _ => {}
            },
            What::Fault {
                verb: Verb::Kill | Verb::Restart,
                target,
                lifted: false,
            } => end(&mut open, &mut all, target, e.t_ms),
            What::Fault {
                verb: Verb::RestartServer | Verb::StopServer,
                lifted: false,
                ..
            } => (all.iter_mut())
                .filter(|t| t.session_gone_ms.is_none() && t.server_stopping_ms.is_none())
                .for_each(|t| t.server_stopping_ms = Some(e.t_ms)),
            What::Locks { rows } => {
                let shows = |pid: i32| rows.iter().any(|r| r.1 && r.0 == pid);
                let before = |at: Option<f64>| at.is_some_and(|at| at < e.t_ms);
                (all.iter_mut())
                    .filter(|t| t.session_gone_ms.is_none())
                    .filter(|t| before(t.ended_ms) || before(t.server_stopping_ms))
                    .filter(|t| !shows(t.backend_pid))
                    .for_each(|t| t.session_gone_ms = Some(e.t_ms));
            }
            _ => {}
        }
    }
    all
}

/// The replica whose live term's lock session is backend `pid` at `at_ms`, if any: the holder of
/// a row whatever `application_name` its shared session shows (POOL-1).
pub fn live_owner(terms: &[Term], pid: i32, at_ms: f64) -> Option<&str> {
    (terms.iter().rev())
        .find(|t| {
            t.session_is(pid, at_ms) && t.began_ms <= at_ms && t.ended_ms.is_none_or(|e| e >= at_ms)
        })
        .map(|t| t.replica.as_str())
}

/// Whether backend `pid` was the lock session of a term that had ended by `at_ms` (and of no
/// live one): an orphaned row the server has not released yet, which ORPH-2 bounds.
pub fn orphaned(terms: &[Term], pid: i32, at_ms: f64) -> bool {
    live_owner(terms, pid, at_ms).is_none()
        && (terms.iter()).any(|t| t.session_is(pid, at_ms) && t.ended_ms.is_some_and(|e| e < at_ms))
}

/// What a granted lock row says of who leads, judged against the terms (see [`Rows`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RowIs {
    /// The lock session of `owner`'s live term (whatever name a shared session shows), or of
    /// nobody's term yet reported but named `owner`: its gauge must agree.
    Leading,
    /// It says nothing of who leads: its term ended and the server has not ended the session yet
    /// (ORPH-2 bounds it), or it is a grant of no term within its allowance (a standby's given-up
    /// attempt, whose close has not arrived; [`rows_belong_to_terms`] bounds it).
    Excused,
    /// A grant of no term seen longer than its allowance, first seen at `since_ms`: nobody
    /// leads while it lasts, which no gauge shows.
    Stray {
        /// When the row was first seen.
        since_ms: f64,
    },
}

/// A grant of no term: one backend's row, seen in consecutive pg_locks samples (a sample that
/// does not show it, or a server restart or stop, ends it).
#[derive(Clone, Debug, PartialEq)]
pub struct Stray {
    /// The row's `application_name` when first seen with one (`""`: never).
    pub holder: String,
    /// The row's backend.
    pub pid: i32,
    /// The first sample that showed it.
    pub first_ms: f64,
    /// The last sample that showed it.
    pub last_ms: f64,
}

/// Judges the granted rows of each pg_locks sample, in time order, against the terms the
/// replicas reported, and keeps every grant of no term ([`Stray`]) with how long consecutive
/// samples showed it: a row given up by a standby is excused for as long as its allowance
/// ([`stray_bound_ms`]) and no longer. ISL-1 and [`rows_belong_to_terms`] read the rows through
/// this one judge.
pub struct Rows {
    terms: Vec<Term>,
    faults: Vec<FaultSpan>,
    bounds: Bounds,
    lag_ms: f64,
    /// The strays the last sample showed, by backend.
    open: BTreeMap<i32, Stray>,
    /// The strays that ended.
    ended: Vec<Stray>,
}

impl Rows {
    /// A judge of the rows of `entries` against the terms they report, under the bounds `b`.
    pub fn new(entries: &[Entry], b: &Bounds) -> Self {
        Rows {
            terms: terms(entries),
            faults: fault_spans(entries),
            bounds: *b,
            lag_ms: report_lag_ms(b),
            open: BTreeMap::new(),
            ended: Vec::new(),
        }
    }

    /// What each granted row of the pg_locks sample `rows` (`(pid, granted, name)`), taken at
    /// `at_ms`, says, and whose it is: the live term's replica, else the row's name.
    pub fn sample(&mut self, at_ms: f64, rows: &[(i32, bool, String)]) -> Vec<(RowIs, String)> {
        let server_gone = |since: f64| {
            (self.faults.iter()).any(|f| {
                matches!(f.verb, Verb::RestartServer | Verb::StopServer)
                    && f.applied_ms >= since
                    && f.applied_ms <= at_ms
            })
        };
        let shown = |pid: i32| rows.iter().any(|r| r.1 && r.0 == pid);
        let (gone, open): (BTreeMap<_, _>, BTreeMap<_, _>) = std::mem::take(&mut self.open)
            .into_iter()
            .partition(|(pid, s)| !shown(*pid) || server_gone(s.last_ms));
        self.ended.extend(gone.into_values());
        self.open = open;
        (rows.iter().filter(|r| r.1))
            .map(|(pid, _, name)| self.judge(*pid, name, at_ms))
            .collect()
    }

    fn judge(&mut self, pid: i32, name: &str, at_ms: f64) -> (RowIs, String) {
        if let Some(owner) = live_owner(&self.terms, pid, at_ms) {
            return (RowIs::Leading, owner.to_owned());
        }
        if orphaned(&self.terms, pid, at_ms) {
            return (RowIs::Excused, name.to_owned());
        }
        if term_of(&self.terms, name, pid, at_ms, self.lag_ms).is_some() {
            return (RowIs::Leading, name.to_owned());
        }
        let stray = self.open.entry(pid).or_insert_with(|| Stray {
            holder: String::new(),
            pid,
            first_ms: at_ms,
            last_ms: at_ms,
        });
        stray.last_ms = at_ms;
        if stray.holder.is_empty() {
            name.clone_into(&mut stray.holder);
        }
        let since_ms = stray.first_ms;
        let bound_ms = stray_bound_ms(&self.faults, stray, &self.bounds);
        let is = if at_ms - since_ms <= bound_ms + self.lag_ms {
            RowIs::Excused
        } else {
            RowIs::Stray { since_ms }
        };
        (is, name.to_owned())
    }

    /// Every grant of no term seen, with its allowance, in the order they ended.
    fn strays(mut self) -> Vec<(Stray, f64)> {
        self.ended
            .extend(std::mem::take(&mut self.open).into_values());
        let ended = std::mem::take(&mut self.ended);
        (ended.into_iter())
            .map(|s| {
                let bound = stray_bound_ms(&self.faults, &s, &self.bounds);
                (s, bound)
            })
            .collect()
    }
}

/// Each granted row of each pg_locks sample: when, which backend, whose `application_name`.
fn granted_rows(entries: &[Entry]) -> impl Iterator<Item = (f64, i32, &str)> {
    entries.iter().flat_map(|e| match &e.what {
        What::Locks { rows } => (rows.iter())
            .filter(|r| r.1)
            .map(|r| (e.t_ms, r.0, r.2.as_str()))
            .collect::<Vec<_>>(),
        _ => Vec::new(),
    })
}

/// The term whose lock session is `pid`, reported no later than `lag_ms` after `at_ms`:
/// `replica`'s if it has one, else another replica's that had not ended at `at_ms`. A holder's name can be another's or
/// none: behind a transaction-mode pooler replicas share server sessions, whose
/// `application_name` is the last client's (POOL-1, which its own scenarios decide), and a
/// session that ended between the sampler's two queries has no name left (`""`). PostgreSQL
/// hands pids out again, so an ended term of another replica is not a match.
fn term_of<'a>(
    terms: &'a [Term],
    replica: &str,
    pid: i32,
    at_ms: f64,
    lag_ms: f64,
) -> Option<&'a Term> {
    let by_ms = at_ms + lag_ms;
    let of = |t: &&Term| t.session_is(pid, at_ms) && t.began_ms <= by_ms;
    let live = |t: &&Term| t.ended_ms.is_none_or(|end| end >= at_ms);
    (terms.iter().rev().filter(of).find(|t| t.replica == replica))
        .or_else(|| terms.iter().rev().filter(of).find(live))
}

/// How long `stray`, a grant of no term, may last: T, until the close of the standby that gave
/// its attempt up arrives; or the orphan bound (4T: the granting statement set
/// `idle_session_timeout`, ORPH-1) when a fault on its holder could hold the close back
/// meanwhile (its link partitioned both ways or for its requests, stalled or slowed, or the
/// process frozen), so that only the server ends the session.
fn stray_bound_ms(spans: &[FaultSpan], stray: &Stray, b: &Bounds) -> f64 {
    let holds_the_close = |s: &&FaultSpan| {
        matches!(
            s.verb,
            Verb::Partition | Verb::PartitionRequests | Verb::Stall | Verb::Latency | Verb::Freeze
        ) && s.target == stray.holder
            && s.applied_ms <= stray.last_ms
            && s.lifted_ms.is_none_or(|l| l >= stray.first_ms)
    };
    if spans.iter().any(|s| holds_the_close(&s)) {
        ms_of(b.t * ORPHAN_BOUND_T)
    } else {
        ms_of(b.t)
    }
}

/// How late the harness may read an `acquired` after the sampler saw its row: T, or one
/// sampling period plus the slack if that is more (a loaded host read events 74 ms late at
/// T = 200 ms, and after a server restart PostgreSQL hands the same backend pids out again, so
/// a row must not be taken for an earlier term's).
pub(crate) fn report_lag_ms(b: &Bounds) -> f64 {
    ms_of(b.t.max(b.sample + b.slack))
}

/// RUN-3 and LOCK-3: every granted row is the lock session of a term its replica reported, or a
/// grant nobody checks that is gone within its bound.
///
/// A standby whose link delays its attempt beyond T gives the attempt up and closes the session;
/// the attempt still reaches the server and may be granted, and the lock lasts until the close
/// arrives, about T later (the close travels the same slow link). If a fault on its link holds
/// that close back, the server ends the session within the orphan bound, 4T, which the granting
/// statement set (see `stray_bound_ms`). One that lasts longer sits on a session nobody checks
/// or closes (a pooled connection after a dropped check), and no replica can lead while it
/// lasts.
pub fn rows_belong_to_terms(entries: &[Entry], b: &Bounds) -> Check {
    let mut judge = Rows::new(entries, b);
    let terms = judge.terms.len();
    let lag = judge.lag_ms;
    let mut rows = 0usize;
    for e in entries {
        if let What::Locks { rows: sampled } = &e.what {
            rows += judge.sample(e.t_ms, sampled).len();
        }
    }
    let stray = judge.strays();
    // The worst stray is the one furthest over (or nearest to) its bound.
    let over = |(s, bound): &&(Stray, f64)| s.last_ms - s.first_ms - bound;
    let worst = stray.iter().max_by(|x, y| over(x).total_cmp(&over(y)));
    let (longest, bound_ms) = worst.map_or((0.0, ms_of(b.t)), |(s, bound)| {
        (s.last_ms - s.first_ms, *bound)
    });
    let held = longest <= bound_ms + lag;
    let verdict = verdict_of(rows, held);
    let message = match worst {
        Some((s, _)) if !held => format!(
            "backend {} of {:?} held the lock from {:.0} ms to {:.0} ms ({}) while {:?} \
             reported no term on it: a grant nobody checks (bound {}), and no replica can lead \
             while it lasts",
            s.pid,
            s.holder,
            s.first_ms,
            s.last_ms,
            in_t(s.last_ms - s.first_ms, b.t),
            s.holder,
            in_t(bound_ms, b.t)
        ),
        _ => format!(
            "{rows} granted row sample(s) over {} term(s); {} grant(s) of no term (a check \
             given up before its answer), the one nearest its bound seen for {} (bound {}: 1T, \
             4T when a fault held its close back)",
            terms,
            stray.len(),
            in_t(longest, b.t),
            in_t(bound_ms, b.t)
        ),
    };
    let mut m = Measure::at_most(
        "grant of no term nearest its bound".into(),
        Some(t_of(longest, b.t)),
        t_of(bound_ms, b.t),
        Unit::T,
    )
    .with_slack(t_of(lag, b.t));
    if let Some((s, _)) = worst {
        m = m.with_window(Window {
            from_ms: s.first_ms,
            bound_ms: s.first_ms + bound_ms,
            at_ms: Some(s.last_ms),
        });
    }
    Check::new(
        "every granted row belongs to a term",
        &["RUN-3", "LOCK-3"],
        verdict,
        message,
    )
    .figure("terms", terms.to_string())
    .figure("grants of no term", stray.len().to_string())
    .with_measures((rows > 0).then_some(m))
}

/// ORPH-2 over the whole history: after its term ended, a session's row is gone within 4T.
pub fn rows_leave_with_their_terms(entries: &[Entry], b: &Bounds) -> Check {
    let terms = terms(entries);
    let lag = report_lag_ms(b);
    let bound_ms = ms_of(b.t * ORPHAN_BOUND_T);
    // The last sample showing each ended term's row.
    let mut outlived: BTreeMap<(String, u64, i32), (f64, f64)> = BTreeMap::new();
    let mut ended_rows = 0usize;
    for (t_ms, pid, holder) in granted_rows(entries) {
        let Some(term) = term_of(&terms, holder, pid, t_ms, lag) else {
            continue;
        };
        let Some(end) = term.ended_ms.filter(|end| t_ms > *end) else {
            continue;
        };
        ended_rows += 1;
        let key = (term.replica.clone(), term.term, pid);
        outlived.insert(key, (end, t_ms));
    }
    let worst = (outlived.iter()).max_by(|x, y| (x.1 .1 - x.1 .0).total_cmp(&(y.1 .1 - y.1 .0)));
    let longest = worst.map_or(0.0, |(_, (end, last))| last - end);
    // A term's end is read late, if anything, which shortens what is measured here.
    let pad = ms_of(b.sample + b.slack);
    let allowed = bound_ms + pad;
    let held = longest <= allowed;
    let decided = terms.iter().filter(|t| t.ended_ms.is_some()).count();
    let verdict = if decided == 0 {
        Verdict::Unknown
    } else if held {
        Verdict::Valid
    } else {
        Verdict::Invalid
    };
    let message = match worst {
        Some(((replica, term, pid), (end, last))) if !held => format!(
            "the row of {replica:?}'s term {term} (backend {pid}) was still granted {} after \
             the term ended at {end:.0} ms (bound 4T, last seen at {last:.0} ms)",
            in_t(last - end, b.t)
        ),
        _ => format!(
            "{decided} ended term(s); {ended_rows} sample(s) of a row after its term, longest \
             {} after the end (bound 4T)",
            in_t(longest, b.t)
        ),
    };
    let mut m = Measure::at_most(
        "longest row after its term".into(),
        Some(t_of(longest, b.t)),
        f64::from(ORPHAN_BOUND_T),
        Unit::T,
    )
    .with_slack(t_of(pad, b.t));
    if let Some((_, (end, last))) = worst {
        m = m.with_window(Window {
            from_ms: *end,
            bound_ms: end + bound_ms,
            at_ms: Some(*last),
        });
    }
    Check::new("rows leave with their terms", &["ORPH-2"], verdict, message)
        .figure("longest row after its term", in_t(longest, b.t))
        .with_measures((decided > 0).then_some(m))
}

/// RUN-6 over the whole history: a term its replica reports `released` with the outcome
/// `unlocked` has no granted row in any sample taken after the report reached the harness (plus
/// one sampling period and the slack: a sample already under way may still show it).
pub fn reported_unlocks_hold(entries: &[Entry], b: &Bounds) -> Check {
    let terms = terms(entries);
    let lag = report_lag_ms(b);
    let mut unlocks: Vec<(&Term, f64)> = Vec::new();
    for e in entries {
        if let What::Replica {
            replica,
            event:
                ReplicaEvent::Released {
                    term,
                    outcome: ReleaseOutcome::Unlocked,
                    ..
                },
        } = &e.what
        {
            let of = (terms.iter().rev())
                .find(|x| &x.replica == replica && x.term == *term && x.began_ms <= e.t_ms);
            unlocks.extend(of.map(|x| (x, e.t_ms)));
        }
    }
    let rows: Vec<(f64, i32, &str)> = granted_rows(entries).collect();
    // A row after the report is the unlocked term's while no later term took the same backend
    // (PostgreSQL reuses pids, after a restart at once).
    let broken: Vec<(&Term, f64, f64)> = (unlocks.iter())
        .filter_map(|(term, at)| {
            let seen = rows.iter().find(|(t_ms, pid, holder)| {
                *t_ms > at + lag
                    && term_of(&terms, holder, *pid, *t_ms, lag).is_some_and(|x| x == *term)
            });
            seen.map(|(t_ms, ..)| (*term, *at, *t_ms))
        })
        .collect();
    let verdict = verdict_of(unlocks.len(), broken.is_empty());
    let message = match broken.first() {
        None => format!(
            "{} reported unlock(s), each row gone from pg_locks after it",
            unlocks.len()
        ),
        Some((term, at, seen)) => format!(
            "{:?} reported term {} unlocked at {at:.0} ms, but its row (backend {}) was still \
             granted at {seen:.0} ms",
            term.replica, term.term, term.backend_pid
        ),
    };
    Check::new("reported unlocks hold", &["RUN-6"], verdict, message)
        .figure("reported unlocks", unlocks.len().to_string())
        .with_measures((!unlocks.is_empty()).then(|| {
            Measure::at_most(
                "reported unlocks whose row stayed".into(),
                Some(broken.len() as f64),
                0.0,
                Unit::Count,
            )
        }))
}

#[cfg(test)]
mod tests;
