//! A scenario's own expectations (`[[expect]]` in its file), decided over the run's facts:
//! its timeline, its `leader_work` rows, the moments its steps named, and its replicas' logs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use super::{in_t, t_of, Bounds, Check, Measure, Unit, Verdict, Window, WorkRow};
use crate::event::EventKind;
use crate::level::Level;
use crate::span::Span;
use crate::timeline::{Entry, Mark, Marks, What};

/// Which replica an expectation is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Who {
    /// Any replica.
    Any,
    /// Any replica but the target of the `after` step.
    Other,
    /// The replica of this name.
    Replica(String),
    /// The target of the step with this `as` name.
    Named(String),
}

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Who::Any => f.write_str("any"),
            Who::Other => f.write_str("other"),
            Who::Replica(name) | Who::Named(name) => f.write_str(name),
        }
    }
}

/// What an event expectation looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Awaited {
    /// A replica reports an event of this kind.
    Event(EventKind),
    /// pg_locks shows no granted row of the `after` step's target any more.
    LockReleased,
    /// The `after` step's target's lock row left pg_locks while its backend still existed: an
    /// unlock, not a close (RUN-6).
    Unlocked,
    /// The server ended a session of the replica for `idle_session_timeout` (SQLSTATE `57P05`
    /// on its wire, read by its proxy even where a fault keeps it from the replica): the lock
    /// lost to the orphan bound, not given up (ORPH-3).
    TimedOut,
    /// The replica's process exited by itself with status 0 (RUN-6: after SIGTERM, Run
    /// returns Ok and the program ends), seen when the harness reaped it.
    Exited,
}

impl Awaited {
    /// The scenario files' name of the pg_locks observation that the lock was released.
    pub const LOCK_RELEASED: &'static str = "lock_released";
    /// The scenario files' name of the pg_locks observation that the lock was unlocked.
    pub const UNLOCKED: &'static str = "unlocked";
    /// The scenario files' name of the wire observation that the server ended a session for
    /// `idle_session_timeout`.
    pub const TIMED_OUT: &'static str = "timed_out";
    /// The scenario files' name of the process observation that a replica exited with status 0.
    pub const EXITED: &'static str = "exited";
    /// The SQLSTATE of a session ended by `idle_session_timeout` (PostgreSQL's
    /// `ERRCODE_IDLE_SESSION_TIMEOUT`).
    pub const IDLE_SESSION_TIMEOUT: &'static str = "57P05";
    /// The observations that are not a replica's event: the server's, the wire's, the
    /// process's.
    pub const OBSERVED: [Awaited; 4] = [
        Awaited::LockReleased,
        Awaited::Unlocked,
        Awaited::TimedOut,
        Awaited::Exited,
    ];
}

impl fmt::Display for Awaited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Awaited::Event(kind) => kind.fmt(f),
            Awaited::LockReleased => f.write_str(Self::LOCK_RELEASED),
            Awaited::Unlocked => f.write_str(Self::UNLOCKED),
            Awaited::TimedOut => f.write_str(Self::TIMED_OUT),
            Awaited::Exited => f.write_str(Self::EXITED),
        }
    }
}

/// One expectation: what must hold, and the clause it decides.
#[derive(Clone, Debug, PartialEq)]
pub struct Expectation {
    /// The clause ID it decides.
    pub clause: String,
    /// What must hold.
    pub expect: Expect,
}

/// What an expectation holds to.
#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    /// An event happens (or, `absent`, does not), measured from the `after` step.
    Event {
        /// What happens.
        awaited: Awaited,
        /// Who reports it (ignored by [`Awaited::LockReleased`]).
        replica: Who,
        /// The named step it is measured from (default: the run's start).
        after: Option<String>,
        /// The upper bound.
        within: Option<Span>,
        /// The lower bound.
        not_before: Option<Span>,
        /// It must not happen within `within`.
        absent: bool,
    },
    /// The gauge sum reaches this value at some sample.
    GaugeSumReaches(i64),
    /// This many replicas held a grant of the lock at once, on the wire: each had a lock call
    /// answered granted on a connection it had neither closed nor unlocked since (POOL-1's
    /// hazard, which pg_locks cannot show: behind a transaction-mode pooler the second grant
    /// stacks on the first one's server session, one row).
    GrantedAtOnce(usize),
    /// The number of granted lock rows stays at most this.
    LockRowsAtMost(usize),
    /// The `leader_work` table ends with exactly this many rows.
    WorkRows(usize),
    /// X-FENCE: the fence rejected at least this many late writes (passes of a fencing
    /// replica that landed after a newer term began, as their unfenced row alone), and let
    /// none land ([`FenceTally`](crate::check::FenceTally)).
    FenceRejects(usize),
    /// A replica's `/readyz` answers this status at some sample after the `after` step.
    Readyz {
        /// The HTTP status.
        status: u16,
        /// Whose `/readyz`.
        replica: Who,
        /// The named step it is looked for after.
        after: Option<String>,
    },
    /// A replica's `/readyz` reports a failing check whose `name: error` contains `text`.
    ReadyzSays {
        /// The text.
        text: String,
        /// Whose `/readyz`.
        replica: Who,
        /// The named step it is looked for after.
        after: Option<String>,
    },
    /// One line of the replica's log contains every text, read after the `after` step and
    /// within `within` of it when they are given.
    Log {
        /// The texts.
        texts: Vec<String>,
        /// Whose log: a replica, the target of a named step, or any.
        replica: Who,
        /// The named step the line is looked for after (default: the run's start).
        after: Option<String>,
        /// How long after it the line may come.
        within: Option<Span>,
    },
}

impl Expect {
    /// The contract level whose observations decide it: pg_locks, the wire and the logs are
    /// there at level 0, the gauge and `/readyz`'s status at 1, `leader_work` at 2, and the
    /// events and `/readyz`'s named checks (the event stream's companion) at 3. Two events are
    /// also seen from outside: `acquired` in pg_locks (level 0), `demoted` on the wire (level
    /// 0: the lock connection closed) and in the gauge (level 1).
    pub fn needs(&self) -> Level {
        match self {
            Expect::Event {
                awaited: Awaited::Event(EventKind::Acquired | EventKind::Demoted),
                ..
            } => Level::Process,
            Expect::Event {
                awaited: Awaited::Event(_),
                ..
            }
            | Expect::ReadyzSays { .. } => Level::Events,
            Expect::Event { .. }
            | Expect::LockRowsAtMost(_)
            | Expect::GrantedAtOnce(_)
            | Expect::Log { .. } => Level::Process,
            Expect::GaugeSumReaches(_) | Expect::Readyz { .. } => Level::Metrics,
            Expect::WorkRows(_) | Expect::FenceRejects(_) => Level::Work,
        }
    }

    /// Whether, for a program at `level`, it is decided on the wire, which only the harness's
    /// own proxy records: `timed_out` and `granted_at_once` always, `demoted` below level 1 (no
    /// gauge to show it).
    pub fn needs_wire(&self, level: Level) -> bool {
        match self {
            Expect::GrantedAtOnce(_) => true,
            Expect::Event {
                awaited: Awaited::TimedOut,
                ..
            } => true,
            Expect::Event {
                awaited: Awaited::Event(EventKind::Demoted),
                ..
            } => level < Level::Metrics,
            _ => false,
        }
    }
}

/// A replica's log, as the run's evidence holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaLog {
    /// Where it is.
    pub path: PathBuf,
    /// Its text, or why it could not be read.
    pub text: Result<String, String>,
}

/// What a run leaves for its checks.
#[derive(Clone, Copy, Debug)]
pub struct Facts<'a> {
    /// The whole timeline.
    pub entries: &'a [Entry],
    /// The `leader_work` rows.
    pub rows: &'a [WorkRow],
    /// Whether the `leader_work` table could be read after the run (when not, `rows` is empty
    /// for want of it, and no row is missing).
    pub work_read: bool,
    /// The moments the steps named.
    pub marks: &'a Marks,
    /// Each replica's log, by replica name.
    pub logs: &'a BTreeMap<String, ReplicaLog>,
    /// The bounds.
    pub bounds: Bounds,
    /// The replicas that reach the server through PgBouncer, which holds their queries while
    /// the server is down.
    pub pooled: &'a BTreeSet<String>,
    /// What the checks of the replicas' wire need to know ([`super::wire`]).
    pub wire: &'a super::wire::WireSetup,
}

/// No replica behind PgBouncer ([`Facts::pooled`]).
pub static NONE_POOLED: BTreeSet<String> = BTreeSet::new();

/// No wire journal ([`Facts::wire`]): the wire checks are not run.
pub static NO_WIRE: super::wire::WireSetup = super::wire::WireSetup {
    tapped: false,
    hops: std::collections::BTreeMap::new(),
    waking: BTreeSet::new(),
};

impl Facts<'_> {
    /// When the timeline ends (ms since the start).
    pub fn end_ms(&self) -> f64 {
        self.entries.last().map_or(0.0, |e| e.t_ms)
    }
}

/// Where an expectation is measured from.
struct Origin<'a> {
    mark: Option<&'a Mark>,
    /// Delays are measured from the moment the named step took effect (a fault's call
    /// returned); an effect that showed while the call still ran (e.g. a take-over during a
    /// server restart) counts, with a delay of zero.
    from_ms: f64,
    search_ms: f64,
    /// The backends whose granted rows the step's target held when the step began (the last
    /// pg_locks sample before it): its lock is released when these rows are gone, whatever
    /// the target's later sessions are granted.
    held: BTreeSet<i32>,
}

impl<'a> Origin<'a> {
    fn of(after: Option<&String>, marks: &'a Marks) -> Self {
        let mark = after.and_then(|a| marks.get(a));
        Self {
            mark,
            from_ms: mark.map_or(0.0, |m| m.at_ms),
            search_ms: mark.map_or(0.0, |m| m.began_ms),
            held: BTreeSet::new(),
        }
    }

    /// With [`Origin::held`] read off `entries`.
    fn holding(mut self, entries: &[Entry]) -> Self {
        let Some(target) = self.mark.map(|m| &m.target) else {
            return self;
        };
        let before = (entries.iter().rev())
            .filter(|e| e.t_ms <= self.search_ms)
            .find_map(|e| match &e.what {
                What::Locks { rows } => Some(rows),
                _ => None,
            });
        self.held = (before.into_iter().flatten())
            .filter(|r| r.1 && &r.2 == target)
            .map(|r| r.0)
            .collect();
        self
    }

    /// Whether `replica` is `who`, with `other` meaning not the target of the `after` step.
    fn matches(&self, who: &Who, marks: &Marks, replica: &str) -> bool {
        match who {
            Who::Any => true,
            Who::Other => self.mark.is_none_or(|m| m.target != replica),
            Who::Replica(name) => name == replica,
            Who::Named(name) => marks.get(name).is_some_and(|m| m.target == replica),
        }
    }
}

/// Decides one expectation with every observation at hand (the event stream included).
pub fn decide(ex: &Expectation, facts: &Facts) -> Check {
    decide_at(ex, facts, Level::Events)
}

/// Decides one expectation with what a program at `level` shows: below level 3, `acquired`
/// is seen in pg_locks and `demoted` on the wire (the lock connection's close) or in the
/// gauge, each with its sampling error allowed (see `seen_from_outside`).
pub fn decide_at(ex: &Expectation, facts: &Facts, level: Level) -> Check {
    let mut c = match &ex.expect {
        Expect::Event { .. } => event(&ex.expect, facts, level),
        Expect::GaugeSumReaches(n) => gauge_sum_reaches(*n, facts.entries),
        Expect::GrantedAtOnce(n) => granted_at_once(*n, facts),
        Expect::LockRowsAtMost(n) => lock_rows_at_most(*n, facts.entries),
        Expect::WorkRows(n) => work_rows(*n, facts.rows),
        Expect::FenceRejects(n) => fence_rejects(*n, facts),
        Expect::Readyz {
            status,
            replica,
            after,
        } => readyz(*status, replica, after.as_ref(), facts),
        Expect::ReadyzSays {
            text,
            replica,
            after,
        } => readyz_says(text, replica, after.as_ref(), facts),
        Expect::Log {
            texts,
            replica,
            after,
            within,
        } => log(texts, replica, after.as_ref(), *within, facts),
    };
    c.clauses = vec![ex.clause.clone()];
    if ex.expect.needs_wire(level) && !facts.wire.tapped {
        return super::wire::untapped(c);
    }
    c
}

fn check(name: String, verdict: Verdict, message: String) -> Check {
    Check {
        name,
        clauses: Vec::new(),
        verdict,
        figures: BTreeMap::new(),
        message,
        measures: Vec::new(),
        needs: None,
    }
}

fn ms(span: &Option<Span>, b: &Bounds) -> Option<f64> {
    span.map(|s| s.at(b.t).as_secs_f64() * 1000.0)
}

fn event(expect: &Expect, facts: &Facts, level: Level) -> Check {
    let Expect::Event {
        awaited,
        replica,
        after,
        within,
        not_before,
        absent,
    } = expect
    else {
        unreachable!("an event expectation")
    };
    let b = &facts.bounds;
    let from = Origin::of(after.as_ref(), facts.marks).holding(facts.entries);
    let label_after = after
        .as_ref()
        .map(|a| format!(" after {a}"))
        .unwrap_or_default();
    let name = format!(
        "{}{awaited} by {replica}{label_after}",
        if *absent { "no " } else { "" }
    );
    let outside = match awaited {
        Awaited::Event(kind @ (EventKind::Acquired | EventKind::Demoted))
            if level < Level::Events =>
        {
            Some(*kind)
        }
        _ => None,
    };
    // (when it was seen, how late that can be against the moment it happened)
    let found: Option<(f64, f64)> = match outside {
        Some(kind) => seen_from_outside(kind, replica, &from, facts, level),
        None => (facts.entries.iter())
            .find(|e| {
                e.t_ms >= from.search_ms && observed(e, *awaited, replica, &from, facts.marks)
            })
            .map(|e| (e.t_ms, 0.0)),
    };
    let delay = found.map(|(at, _)| (at - from.from_ms).max(0.0));
    // A lower bound is measured from when the step began: a fault's call can take a while
    // (the toxics of a partition go on one by one), and its effect may have begun with it.
    let since_began = found.map(|(at, _)| (at - from.search_ms).max(0.0));
    // Seen late by at most the sampling error: an upper bound allows it; a lower bound and an
    // absence need none (what is seen late happened no later).
    let error_ms = found.map_or(0.0, |(_, e)| if *absent { 0.0 } else { e });
    let slack_ms = b.slack.as_secs_f64() * 1000.0;
    let in_window = |d: f64| ms(within, b).is_none_or(|w| d <= w + slack_ms + error_ms);
    let verdict = match (absent, delay) {
        (true, Some(d)) if in_window(d) => Verdict::Invalid,
        (true, _) => Verdict::Valid,
        (false, None) => Verdict::Invalid,
        (false, Some(d)) => {
            let early =
                (ms(not_before, b).zip(since_began)).is_some_and(|(nb, s)| s + slack_ms < nb);
            if in_window(d) && !early {
                Verdict::Valid
            } else {
                Verdict::Invalid
            }
        }
    };
    let message = match delay {
        Some(d) => format!(
            "{awaited} {d:.0} ms ({}){}; bound {}{}",
            in_t(d, b.t),
            if label_after.is_empty() {
                " after the start"
            } else {
                label_after.as_str()
            },
            within.map_or("none".into(), |w| w.to_string()),
            not_before.map_or(String::new(), |w| format!(", not before {w}"))
        ),
        None => format!(
            "no {awaited} by {replica}{label_after}{}",
            if *awaited == Awaited::Exited {
                other_exit(replica, &from, facts)
            } else {
                String::new()
            }
        ),
    };
    let message = match outside {
        Some(_) if error_ms > 0.0 => format!(
            "{message}; seen from outside (sampling error up to {} allowed)",
            in_t(error_ms, b.t)
        ),
        _ => message,
    };
    let mut c = check(name, verdict, message);
    if let Some(d) = delay {
        c.figures.insert(format!("{awaited} after"), in_t(d, b.t));
    }
    if outside.is_some() {
        c.figures
            .insert("sampling error".into(), in_t(error_ms, b.t));
    }
    let what = format!(
        "{awaited} after {}",
        after.as_deref().unwrap_or("the start")
    );
    let bounds = Delay {
        what: &what,
        from_ms: from.from_ms,
        delay_ms: delay,
        error_ms,
        b,
    };
    let since = Delay {
        from_ms: from.search_ms,
        delay_ms: since_began,
        ..bounds
    };
    let upper = bounds.measures(ms(within, b), None, *absent);
    c.with_measures(
        upper
            .into_iter()
            .chain(since.measures(None, ms(not_before, b), *absent)),
    )
}

/// An event's delay from its origin, to be held to the expectation's bounds.
#[derive(Clone, Copy)]
struct Delay<'a> {
    what: &'a str,
    from_ms: f64,
    /// `None`: the event never came.
    delay_ms: Option<f64>,
    /// How late the event may have been seen (sampled from outside), allowed on an upper bound.
    error_ms: f64,
    b: &'a Bounds,
}

impl Delay<'_> {
    /// One measure per bound: `within` is an upper bound (a lower one, cleared by the slack,
    /// when the event must be `absent` within it), `not_before` a lower one.
    fn measures(&self, within: Option<f64>, not_before: Option<f64>, absent: bool) -> Vec<Measure> {
        let slack = t_of(self.b.slack.as_secs_f64() * 1000.0, self.b.t);
        let error = t_of(self.error_ms, self.b.t);
        let upper = within.map(|w| match absent {
            false => self.measure(Measure::at_most, w).with_slack(slack + error),
            true => self.measure(Measure::at_least, w).with_slack(-slack),
        });
        let lower = not_before.map(|nb| self.measure(Measure::at_least, nb).with_slack(slack));
        upper.into_iter().chain(lower).collect()
    }

    fn measure(
        &self,
        side: fn(String, Option<f64>, f64, Unit) -> Measure,
        bound_ms: f64,
    ) -> Measure {
        let t = self.b.t;
        let value = self.delay_ms.map(|d| t_of(d, t));
        side(self.what.to_owned(), value, t_of(bound_ms, t), Unit::T).with_window(Window {
            from_ms: self.from_ms,
            bound_ms: self.from_ms + bound_ms,
            at_ms: self.delay_ms.map(|d| self.from_ms + d),
        })
    }
}

/// When a program without the event stream is first seen to have `acquired` (a pg_locks sample
/// shows a replica that `who` names holding the lock on a backend the previous sample did not
/// show it holding) or
/// `demoted` (its gauge answers 0 after its last answer was 1, or its proxy saw it close a
/// connection that held the lock: the wire, with no sampling error) since the origin; with the
/// sampling error, the time since the previous sample of the same kind: the change happened
/// between the two, so it was seen at most that late. At level 0 there is no gauge: any close
/// of its lock connection is its demotion; above, a close counts only where it led again after
/// (else its gauge says when its term ended).
fn seen_from_outside(
    kind: EventKind,
    who: &Who,
    from: &Origin,
    facts: &Facts,
    level: Level,
) -> Option<(f64, f64)> {
    let sampled = seen_in_samples(kind, who, from, facts);
    if kind == EventKind::Acquired {
        return sampled.map(|s| granted_on_the_wire(s, who, from, facts).unwrap_or(s));
    }
    let closes = if level < Level::Metrics {
        super::wire::model::lock_connection_closes(facts.entries)
    } else {
        super::wire::model::lock_closes(facts.entries)
    };
    let closed = (closes.into_iter())
        .find(|(r, at)| *at >= from.search_ms && from.matches(who, facts.marks, r))
        .map(|(_, at)| (at, 0.0));
    match (sampled, closed) {
        (Some(s), Some(c)) => Some(if c.0 <= s.0 { c } else { s }),
        (s, c) => s.or(c),
    }
}

/// An acquisition pg_locks showed at `sampled.0` (seen up to `sampled.1` late), timed by the
/// wire where the proxies kept a journal: the answer of the lock call that granted it, within
/// the sampling period around the sample (the server grants before its answer reaches the
/// proxy, so a sample can show the row first), with no sampling error.
fn granted_on_the_wire(
    sampled: (f64, f64),
    who: &Who,
    from: &Origin,
    facts: &Facts,
) -> Option<(f64, f64)> {
    if !facts.wire.tapped {
        return None;
    }
    let (at, error) = sampled;
    let conns = super::wire::model::conversations(facts.entries);
    (super::wire::model::lock_sessions(facts.entries, &conns).into_iter())
        .filter(|l| from.matches(who, facts.marks, &l.replica))
        .filter(|l| (at - error..=at + error.max(1.0)).contains(&l.granted_ms))
        .min_by(|a, b| {
            (at - a.granted_ms)
                .abs()
                .total_cmp(&(at - b.granted_ms).abs())
        })
        .map(|l| (l.granted_ms, 0.0))
}

/// [`seen_from_outside`] in the samples (pg_locks, the gauges).
fn seen_in_samples(kind: EventKind, who: &Who, from: &Origin, facts: &Facts) -> Option<(f64, f64)> {
    // Each holder with its backend: the same replica granted again on a new session (after a
    // server restart, which leaves no sample between the two) is a new acquisition.
    let (mut holders, mut locks_ms): (Vec<(i32, &String)>, Option<f64>) = (Vec::new(), None);
    let mut last_gauge: BTreeMap<&String, (i64, f64)> = BTreeMap::new();
    for e in facts.entries {
        let due = e.t_ms >= from.search_ms;
        match (kind, &e.what) {
            (EventKind::Acquired, What::Locks { rows }) => {
                let now: Vec<(i32, &String)> =
                    rows.iter().filter(|r| r.1).map(|r| (r.0, &r.2)).collect();
                let new = (now.iter())
                    .find(|h| !holders.contains(h) && from.matches(who, facts.marks, h.1));
                if let (true, Some(_)) = (due, new) {
                    return Some((e.t_ms, e.t_ms - locks_ms.unwrap_or(e.t_ms)));
                }
                (holders, locks_ms) = (now, Some(e.t_ms));
            }
            (EventKind::Demoted, What::Gauges { values, asked_ms }) => {
                for (r, v) in values {
                    let Some(v) = *v else { continue };
                    if let Some((1, asked_before)) = last_gauge.get(r).copied() {
                        if due && v == 0 && from.matches(who, facts.marks, r) {
                            return Some((e.t_ms, e.t_ms - asked_before));
                        }
                    }
                    last_gauge.insert(r, (v, asked_ms.unwrap_or(e.t_ms)));
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether entry `e` is what an event expectation awaits.
fn observed(e: &Entry, awaited: Awaited, who: &Who, from: &Origin, marks: &Marks) -> bool {
    match (awaited, &e.what) {
        // The rows the target held when the step began are gone; where it held none, it
        // holds no row at all.
        (Awaited::LockReleased, What::Locks { rows }) if !from.held.is_empty() => {
            !rows.iter().any(|r| r.1 && from.held.contains(&r.0))
        }
        (Awaited::LockReleased, What::Locks { rows }) => {
            let target = from.mark.map(|m| &m.target);
            !rows.iter().any(|r| r.1 && Some(&r.2) == target)
        }
        (
            Awaited::Unlocked,
            What::LockLeft {
                replica,
                backend_alive,
                ..
            },
        ) => *backend_alive && from.mark.is_some_and(|m| &m.target == replica),
        (
            Awaited::TimedOut,
            What::Wire {
                replica,
                event: wiretap::WireEvent::ServerError { code, .. },
                ..
            },
        ) => code == Awaited::IDLE_SESSION_TIMEOUT && from.matches(who, marks, replica),
        (Awaited::Exited, What::Exited { replica, code, .. }) => {
            *code == Some(0) && from.matches(who, marks, replica)
        }
        (Awaited::Event(kind), What::Replica { replica, event }) => {
            event.kind() == kind && from.matches(who, marks, replica)
        }
        _ => false,
    }
}

/// How `who` ended instead of an exit with status 0 after the origin, for the message: by a
/// signal (the harness's SIGKILL when it did not end within the run), or another status.
fn other_exit(who: &Who, from: &Origin, facts: &Facts) -> String {
    let seen = (facts.entries.iter()).find_map(|e| match &e.what {
        What::Exited {
            replica,
            code,
            signal,
        } if e.t_ms >= from.search_ms && from.matches(who, facts.marks, replica) => {
            Some((e.t_ms, *code, *signal))
        }
        _ => None,
    });
    let after = |at: f64| in_t(at - from.from_ms, facts.bounds.t);
    match seen {
        Some((at, Some(code), _)) => format!("; it exited with status {code} {} later", after(at)),
        Some((at, _, Some(9))) => format!(
            "; it did not exit until the harness's SIGKILL, {} later",
            after(at)
        ),
        Some((at, _, Some(signal))) => {
            format!("; it was ended by signal {signal} {} later", after(at))
        }
        _ => "; it did not exit within the run".to_owned(),
    }
}

fn gauge_sum_reaches(n: i64, entries: &[Entry]) -> Check {
    let sum = |what: &What| match what {
        What::Gauges { values, .. } => Some(values.values().flatten().sum::<i64>()),
        _ => None,
    };
    let (verdict, max) = peak(entries, sum, |m| m >= n);
    let reached = max.map(|m| {
        Measure::at_least(
            "max gauge sum".into(),
            Some(m as f64),
            n as f64,
            Unit::Count,
        )
    });
    check(
        format!("gauge sum reaches {n}"),
        verdict,
        format!("max gauge sum {max:?}"),
    )
    .figure("max gauge sum", max.unwrap_or(0).to_string())
    .with_measures(reached)
}

/// [`Expect::GrantedAtOnce`]: the most replicas that held a grant at one moment, on the wire.
fn granted_at_once(n: usize, facts: &Facts) -> Check {
    let conns = super::wire::model::conversations(facts.entries);
    let held = super::wire::model::grants_held(&conns);
    // Sweep the moments a grant began: who held one then.
    let mut best: (usize, f64, Vec<&str>) = (0, 0.0, Vec::new());
    for (_, from, _) in &held {
        let mut who: Vec<&str> = (held.iter())
            .filter(|(_, f, to)| f <= from && to.is_none_or(|t| *from < t))
            .map(|(r, ..)| r.as_str())
            .collect();
        who.sort_unstable();
        who.dedup();
        if who.len() > best.0 {
            best = (who.len(), *from, who);
        }
    }
    let (max, at, who) = best;
    let verdict = if max >= n {
        Verdict::Valid
    } else {
        Verdict::Invalid
    };
    let message = match max {
        0 => "no replica was granted the lock on the wire".to_owned(),
        1 => format!(
            "never more than one replica held a grant at once ({} grants in all): a program with POOL-1's guard refuses the shared session, and must turn it off when told REPLICA_SHARED_SESSION_GUARD=0, as here",
            held.len()
        ),
        _ => format!(
            "{} held grants at once from {}",
            who.join(" and "),
            in_t(at, facts.bounds.t)
        ),
    };
    check(format!("{n} replicas granted at once"), verdict, message)
        .figure("most replicas granted at once", max.to_string())
        .with_measures(Some(Measure::at_least(
            "replicas granted at once".into(),
            Some(max as f64),
            n as f64,
            Unit::Count,
        )))
}

fn lock_rows_at_most(n: usize, entries: &[Entry]) -> Check {
    let granted = |what: &What| match what {
        What::Locks { rows } => Some(rows.iter().filter(|r| r.1).count()),
        _ => None,
    };
    let (verdict, max) = peak(entries, granted, |m| m <= n);
    let rows = max.map(|m| {
        Measure::at_most(
            "granted lock rows".into(),
            Some(m as f64),
            n as f64,
            Unit::Count,
        )
    });
    check(
        format!("at most {n} granted lock row(s)"),
        verdict,
        format!("max granted rows {max:?}"),
    )
    .figure("max granted rows", max.unwrap_or(0).to_string())
    .with_measures(rows)
}

/// The largest figure `of` reads from the samples, and whether it `holds` (unknown when no
/// sample had one).
fn peak<T: Ord + Copy>(
    entries: &[Entry],
    of: impl Fn(&What) -> Option<T>,
    holds: impl Fn(T) -> bool,
) -> (Verdict, Option<T>) {
    let max = entries.iter().filter_map(|e| of(&e.what)).max();
    let verdict = match max {
        None => Verdict::Unknown,
        Some(m) if holds(m) => Verdict::Valid,
        Some(_) => Verdict::Invalid,
    };
    (verdict, max)
}

fn work_rows(n: usize, rows: &[WorkRow]) -> Check {
    let verdict = if rows.len() == n {
        Verdict::Valid
    } else {
        Verdict::Invalid
    };
    check(
        format!("{n} leader_work rows"),
        verdict,
        format!("{} rows", rows.len()),
    )
    .figure("rows", rows.len().to_string())
}

fn fence_rejects(n: usize, facts: &Facts) -> Check {
    let tally = crate::check::FenceTally::of(facts.entries, facts.rows, &facts.bounds);
    let verdict = if tally.rejected() >= n && tally.late_fenced == 0 {
        Verdict::Valid
    } else {
        Verdict::Invalid
    };
    check(
        format!("the fence rejects at least {n} late write(s)"),
        verdict,
        format!(
            "{} pass(es) of fencing replicas landed after a newer term began: their unfenced \
             rows landed, {} fenced twin(s) rejected, {} landed",
            tally.late_unfenced,
            tally.rejected(),
            tally.late_fenced
        ),
    )
    .figure(
        "late unfenced writes landed",
        tally.late_unfenced.to_string(),
    )
    .figure("fenced writes rejected", tally.rejected().to_string())
    .figure("fenced writes landed late", tally.late_fenced.to_string())
}

fn readyz(status: u16, who: &Who, after: Option<&String>, facts: &Facts) -> Check {
    let from = Origin::of(after, facts.marks);
    let seen = facts.entries.iter().find(|e| {
        e.t_ms >= from.search_ms
            && matches!(&e.what, What::Readiness { status: s, .. }
                if s.iter().any(|(r, s)| from.matches(who, facts.marks, r) && *s == Some(status)))
    });
    let name = format!("/readyz of {who} answers {status}");
    let Some(e) = seen else {
        return check(name, Verdict::Invalid, "never seen".into());
    };
    let delay = in_t((e.t_ms - from.from_ms).max(0.0), facts.bounds.t);
    check(name, Verdict::Valid, "seen".into()).figure(&format!("{status} after"), delay)
}

fn readyz_says(text: &str, who: &Who, after: Option<&String>, facts: &Facts) -> Check {
    let from = Origin::of(after, facts.marks);
    let seen = facts.entries.iter().find_map(|e| match &e.what {
        What::Readiness { failing, .. } if e.t_ms >= from.search_ms => failing
            .iter()
            .filter(|(r, _)| from.matches(who, facts.marks, r))
            .flat_map(|(_, checks)| checks)
            .find(|check| check.contains(text))
            .map(|check| (e.t_ms, check.clone())),
        _ => None,
    });
    let name = format!("/readyz of {who} reports {text:?}");
    let Some((t_ms, said)) = seen else {
        return check(name, Verdict::Invalid, "never reported".into());
    };
    let delay = in_t((t_ms - from.from_ms).max(0.0), facts.bounds.t);
    check(name, Verdict::Valid, format!("reported {said:?}")).figure("reported after", delay)
}

fn log(
    texts: &[String],
    who: &Who,
    after: Option<&String>,
    within: Option<Span>,
    facts: &Facts,
) -> Check {
    let from = Origin::of(after, facts.marks);
    let b = &facts.bounds;
    let slack_ms = b.slack.as_secs_f64() * 1000.0;
    let until_ms = ms(&within, b).map(|w| from.from_ms + w + slack_ms);
    let window = match (after, within) {
        (Some(a), Some(w)) => format!(" within {w} after {a}"),
        (Some(a), None) => format!(" after {a}"),
        (None, Some(w)) => format!(" within {w} of the start"),
        (None, None) => String::new(),
    };
    let name = format!("log of {who} has a line with {texts:?}{window}");
    let found = (facts.entries.iter()).find_map(|e| match &e.what {
        What::Log { replica, line }
            if e.t_ms >= from.search_ms
                && until_ms.is_none_or(|u| e.t_ms <= u)
                && from.matches(who, facts.marks, replica)
                && texts.iter().all(|t| line.contains(t)) =>
        {
            Some((e.t_ms, replica, line))
        }
        _ => None,
    });
    match found {
        Some((at, replica, line)) => {
            let step = after.map_or("the start", String::as_str);
            let when = if at < from.from_ms {
                format!(
                    "while {step} ran, {} after it began",
                    in_t(at - from.search_ms, b.t)
                )
            } else {
                format!("{} after {step}", in_t(at - from.from_ms, b.t))
            };
            check(
                name,
                Verdict::Valid,
                format!("{replica}'s, {when}: {}", line.trim()),
            )
        }
        None => {
            let logs: Vec<String> = (facts.logs.iter())
                .filter(|(r, _)| from.matches(who, facts.marks, r))
                .map(|(_, log)| log.path.display().to_string())
                .collect();
            let message = format!("no such line{window} in {}", logs.join(", "));
            check(name, Verdict::Invalid, message)
        }
    }
}

#[cfg(test)]
mod tests;
