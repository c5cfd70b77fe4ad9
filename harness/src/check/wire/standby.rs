//! The wire checks of a replica's lock calls and its standby checks ([`super::checks`]): the
//! spec's calls on the spec's key (LOCK-1), a standby's cadence (RUN-1), and refused checks
//! that leave the pool alone (RUN-2).

use super::model::Stmt;
use super::sql::Arg;
use super::{median, Wire, CADENCE_TOLERANCE, QUEUE, SPEC_KEY, TRY_LOCK, UNLOCK};
use crate::check::{count_at_most, in_t, ms_of, t_of, verdict_of, Check, Measure, Unit};

/// LOCK-1: every advisory-lock call a replica sends is the spec's: the session-level,
/// exclusive, two-int4 functions on (1886156915, 1) (`pg_try_advisory_lock`, `pg_advisory_unlock`,
/// and `pg_advisory_lock`, which takes the same lock by queueing for it: RUN-1 judges the
/// queueing), never a `_shared`, an `_xact` or a single-bigint form, never another key.
pub(super) fn lock_calls(w: &Wire) -> Check {
    let (mut calls, mut bad) = (0usize, Vec::new());
    for c in w.conns {
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
        verdict_of(calls, bad.is_empty()),
        message,
    )
    .figure("advisory-lock calls", calls.to_string())
    .with_measures(count_at_most("calls not the spec's", calls, bad.len(), 0))
}

fn show(a: &Arg) -> String {
    match a {
        Arg::Int(n) => n.to_string(),
        Arg::Text(s) => format!("'{s}'"),
        Arg::Other(s) => s.clone(),
    }
}

/// The shortest T at which a program's first check is timed from its process's start: an
/// interpreter's imports or a JVM's start take a good part of a second (five Python replicas
/// started at once on 2 cores: 0.95 s to their first lock call), which is not small against
/// a shorter T, and small against half of this one.
const FIRST_CHECK_MIN_T: std::time::Duration = std::time::Duration::from_secs(4);
/// How soon after its start a process's first lock call must come, as a share of T: half, so
/// that a first check one whole interval late (a ticker that fires first after T) fails by
/// half an interval however fast the program boots, and a program has T/2 (2.5 s at the
/// page's default) to boot.
const FIRST_CHECK_WITHIN_T: f64 = 0.5;

/// RUN-1, "it checks once when it starts": each process's first lock call comes within T/2
/// (and the slack) of the harness spawning it. When Run starts is not seen from outside, so
/// the process's start stands for it, and only where T is at least [`FIRST_CHECK_MIN_T`] (the
/// page's default of 5 s, `default-interval`): a program that boots for longer than T/2
/// before it runs its elector fails there. A process that made no lock call before it ended
/// (or before the wire's end) made its first that late at least; a replica that never asks
/// for the lock is not judged here.
pub(super) fn first_check_at_start(w: &Wire) -> Check {
    let (t, slack) = (ms_of(w.b.t), ms_of(w.b.slack));
    let (mut n, mut bad, mut worst) = (0usize, Vec::new(), 0.0f64);
    let judged = w.b.t >= FIRST_CHECK_MIN_T;
    for (i, (r, spawned, _)) in (w.lives.iter().enumerate()).filter(|(_, l)| judged && l.2) {
        let ended = (w.lives[i + 1..].iter())
            .find(|(o, _, spawn)| o == r && !spawn)
            .map_or(f64::INFINITY, |e| e.1);
        let calls = (w.conns.iter().filter(|c| &c.replica == r))
            .flat_map(|c| c.statements.iter())
            .filter(|s| s.asks());
        let first = (calls.clone())
            .filter(|s| s.sent_ms >= *spawned && s.sent_ms <= ended)
            .map(|s| s.sent_ms)
            .reduce(f64::min);
        // A replica that never asks for the lock runs no elector, or is judged elsewhere;
        // one of whose processes made no lock call in all its life made its first late.
        let took = match first {
            Some(first) => first - spawned,
            None if calls.count() == 0 => continue,
            None if ended.is_finite() => ended - spawned,
            None => w.end_ms - spawned,
        };
        n += 1;
        worst = worst.max(took);
        if took > FIRST_CHECK_WITHIN_T * t + slack {
            bad.push(format!(
                "{r}'s first lock call came {} after its start at {spawned:.0} ms, or later \
                 (Run checks once when it starts)",
                in_t(took, w.b.t)
            ));
        }
    }
    let message = match bad.first() {
        None => format!(
            "{n} starts, each first lock call within T/2 (latest {})",
            in_t(worst, w.b.t)
        ),
        Some(first) => first.clone(),
    };
    Check::new(
        "first check at start",
        &["RUN-1"],
        verdict_of(n, bad.is_empty()),
        message,
    )
    .with_measures((n > 0).then(|| {
        Measure::at_most(
            "first lock call after the start".into(),
            Some(t_of(worst, w.b.t)),
            FIRST_CHECK_WITHIN_T,
            Unit::T,
        )
        .with_slack(t_of(slack, w.b.t))
    }))
}

/// A replica's standby checks: its lock calls that did not grant it the lock, in the order
/// sent, each with its connection.
fn standby_checks<'a>(w: &'a Wire, replica: &str) -> Vec<(usize, &'a Stmt)> {
    let mut v: Vec<(usize, &Stmt)> = (w.conns.iter().enumerate())
        .filter(|(_, c)| c.replica == replica)
        .flat_map(|(i, c)| {
            (c.statements.iter().enumerate())
                .filter(move |(j, s)| {
                    s.asks()
                        && !s.granted()
                        && !w.sessions.iter().any(|l| l.conn == i && l.grant <= *j)
                })
                .map(move |(_, s)| (i, s))
        })
        .collect();
    v.sort_by(|a, b| a.1.sent_ms.total_cmp(&b.1.sent_ms));
    v
}

/// RUN-1: a standby checks every T: it never queues for the lock (`pg_advisory_lock`, unless
/// it does so by design, X-WAKE), and the gaps between its checks, away from faults and from
/// its terms, have a median within a tenth of T of T. (A single short gap is no violation: a
/// ticker on a fixed schedule follows a check that started late with one on time. When a
/// program's Run starts is not seen from outside, so its first check is not judged here: a
/// program may boot for a while before it runs its elector.)
pub(super) fn standby_cadence(w: &Wire) -> Check {
    let t = ms_of(w.b.t);
    let (mut gaps, mut bad) = (Vec::new(), Vec::new());
    let mut queued = 0usize;
    for (i, c) in (w.conns.iter().enumerate()).filter(|(_, c)| !w.setup.waking.contains(&c.replica))
    {
        // A lock call on a session that already holds the lock is the leader's, not a
        // standby's queueing (RUN-5 judges it: `leader checks take no lock`).
        let holds = |j: usize| w.sessions.iter().any(|l| l.conn == i && l.grant < j);
        for (_, s) in (c.statements.iter().enumerate()).filter(|(j, _)| !holds(*j)) {
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
    let verdict = verdict_of(decided, bad.is_empty());
    let mut c = Check::new(
        "standby cadence",
        w.interval_clause(&["RUN-1"]),
        verdict,
        message,
    )
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
pub(super) fn refused_checks_leave_the_pool_alone(w: &Wire) -> Check {
    let t = ms_of(w.b.t);
    let (mut refused, mut churned, mut changed) = (0usize, Vec::new(), Vec::new());
    for (i, c) in w.conns.iter().enumerate() {
        // A refusal is a lock call answered within T, and not with a grant (what the wire
        // says decides, whether or not a pg_locks sample caught the grant): one answered later
        // failed (the program gave it up, and closing its connection is what it must do then).
        let refusals: Vec<usize> = (c.statements.iter().enumerate())
            .filter(|(j, s)| {
                s.locks()
                    && !s.granted()
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
        verdict_of(refused, bad.is_empty()),
        message,
    )
    .figure("refused checks", refused.to_string())
    .figure(
        "connections opened and closed for one",
        churned.len().to_string(),
    )
    .with_measures(count_at_most(
        "connections opened and closed around refused checks",
        refused,
        churned.len(),
        0,
    ))
    .with_measures(count_at_most(
        "session settings changed next to refused checks",
        refused,
        changed.len(),
        0,
    ))
}
