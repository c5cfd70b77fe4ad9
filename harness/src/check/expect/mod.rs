//! A scenario's own expectations (`[[expect]]` in its file), decided over the run's facts:
//! its timeline, its `leader_work` rows, the moments its steps named, and its replicas' logs.

mod handover;
mod on_the_wire;
mod reports;
mod samples;
mod timing;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use self::handover::handover;
use self::on_the_wire::{fence_tokens_rise, granted_at_once, pool_recycled};
use self::reports::{log, readyz, readyz_says};
use self::samples::{fence_rejects, gauge_sum_reaches, lock_rows_at_most, work_rows};
use self::timing::event;
use super::wire::model::WireModel;
use super::{Bounds, Check, Verdict, WorkRow};
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
    /// X-FENCE on the wire: at least this many terms, each with a token its replica drew from
    /// the fence's sequence on its lock session, every token larger than the term's before.
    FenceTokensRise(usize),
    /// SESS-1's precondition, on the wire: each replica closed at least this many of its
    /// connections that never held the lock while the run was watched (its pool retired them,
    /// as `REPLICA_POOL_MAX_LIFETIME_MS` asks). A program that ignores the variable leaves
    /// SESS-1 untested, and fails here.
    PoolRecycled(usize),
    /// X-WAKE on the wire: after the named step, the lock session its target held ends and
    /// another replica is granted the key by a lock call either queued before that end or sent
    /// within `within` of a notification the server delivered it ([`handover`](self::handover)),
    /// as the proxies saw them, with no slack.
    Handover {
        /// The named step whose target held the lock when it began.
        after: String,
        /// The longest wait between a notification and the lock call it wakes.
        within: Span,
    },
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
            | Expect::FenceTokensRise(_)
            | Expect::PoolRecycled(_)
            | Expect::Handover { .. }
            | Expect::Log { .. } => Level::Process,
            Expect::GaugeSumReaches(_) | Expect::Readyz { .. } => Level::Metrics,
            Expect::WorkRows(_) | Expect::FenceRejects(_) => Level::Work,
        }
    }

    /// Whether, for a program at `level`, it is decided on the wire, which only the harness's
    /// own proxy records: `timed_out`, `granted_at_once`, `fence_tokens_rise`, `pool_recycled`
    /// and `handover` always, `demoted` below level 1 (no gauge to show it).
    pub fn needs_wire(&self, level: Level) -> bool {
        match self {
            Expect::GrantedAtOnce(_)
            | Expect::FenceTokensRise(_)
            | Expect::PoolRecycled(_)
            | Expect::Handover { .. } => true,
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
    default_interval: false,
    stray_unlocks: false,
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

/// Decides one expectation with every observation at hand (the event stream included), its
/// wire read off `facts`' timeline.
pub fn decide(ex: &Expectation, facts: &Facts) -> Check {
    decide_at(ex, facts, &WireModel::of(facts.entries), Level::Events)
}

/// Decides one expectation with what a program at `level` shows: below level 3, `acquired`
/// is seen in pg_locks and `demoted` on the wire (the lock connection's close) or in the
/// gauge, each with its sampling error allowed (see `seen_from_outside`). `model` is the wire
/// of `facts.entries`, built once for every check of the run ([`super::scenario`]).
pub fn decide_at(ex: &Expectation, facts: &Facts, model: &WireModel, level: Level) -> Check {
    let mut c = match &ex.expect {
        Expect::Event { .. } => event(&ex.expect, facts, model, level),
        Expect::GaugeSumReaches(n) => gauge_sum_reaches(*n, facts.entries),
        Expect::GrantedAtOnce(n) => granted_at_once(*n, facts, model),
        Expect::FenceTokensRise(n) => fence_tokens_rise(*n, facts, model),
        Expect::PoolRecycled(n) => pool_recycled(*n, facts, model),
        Expect::Handover { after, within } => handover(after, *within, facts, model),
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
        flaky: false,
    }
}

fn ms(span: &Option<Span>, b: &Bounds) -> Option<f64> {
    span.map(|s| s.at(b.t).as_secs_f64() * 1000.0)
}

#[cfg(test)]
mod tests;
