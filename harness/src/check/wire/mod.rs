//! Checks decided from what each replica did on the wire, not from what it says of itself:
//! its proxy's journal ([`wiretap`]) put on the timeline, joined to pg_locks. They need no
//! cooperation of the program (contract level 0), only the harness's own proxy; with an
//! upstream Toxiproxy they are not run.
//!
//! | check | clause | what it asks of every replica |
//! |---|---|---|
//! | `lock calls` | LOCK-1 | every advisory-lock call is the spec's two-int4 session form on (1886156915, 1) |
//! | `first check at start` | RUN-1 | the first lock call comes within T/2 of the process's start (judged where T is at least 4 s) |
//! | `standby cadence` | RUN-1 | a standby tries the lock every T, and never queues for it |
//! | `refused checks leave the pool alone` | RUN-2 | no connection opened and closed around a refused check, no session setting changed next to one |
//! | `the lock session carries only the checks` | RUN-3, SESS-1 | no table touched on the session that holds the lock |
//! | `one lock session per term` | SESS-2 | the lock never moves to another session while the first one stays open |
//! | `the lock connection ends only at a demotion or a release` | SESS-1 | the replica never closes its lock connection while it works (a pool retiring it) |
//! | `idle_session_timeout on the lock session` | ORPH-1 | 4T in force on the lock session from its grant |
//! | `leader cadence` | RUN-5 | a check on the lock session every T |
//! | `lock connection closed after a failed check` | DEM-1 | an error or no answer within T on the lock session closes it |
//! | `the demotion's order` | DEM-1 | after a failed check the replica closes its lock connection itself with its term already ended (no gauge reading of 1 asked after the close) and writes its WARN line after the close (a WARN read a quarter of T or more before it, none near it, fails) |
//! | `leader checks take no lock` | RUN-5 | a check on the lock session never asks for the lock again (session locks stack: one unlock would not release it) |
//! | `the first failed check demotes` | RUN-5 | once a check on the lock session has failed, nothing but the release is sent on it: the first failed check demotes |
//! | `release within its deadline` | RUN-6 | after a SIGTERM, the leader closes its lock connection within the unlock's 2 s deadline, answered or not |
//! | `lock connection closed after a stray unlock` | X-VERIFY | a lock released behind the leader's back (the `unlock` fault) ends its lock connection within T |
//! | `the lock session names its replica` | X-WHO | the lock session's `application_name` is the replica's name from its grant to its end |
//!
//! Behind a transaction-mode pooler a replica's statements run on whichever server session the
//! pooler picks, and the pid its client sees is PgBouncer's: the lock-session checks skip such
//! replicas (POOL-1 shows that hazard). Behind a session-mode pooler a client connection keeps
//! one server session, so the lock session is found by the holder's `application_name`.

mod demotion;
mod leader;
mod lock_session;
pub mod model;
pub mod sql;
mod standby;

use std::collections::{BTreeMap, BTreeSet};

use self::demotion::{demotion_in_order, GaugeRead};
use self::leader::{
    leader_checks_take_no_lock, nothing_after_a_failed_check, release_within_its_deadline,
};
use self::lock_session::{
    closed_after_a_failed_check, closed_after_a_stray_unlock, ended_only_by_demotion_or_release,
    idle_timeout_on_the_lock_session, leader_cadence, lock_session_carries_only_checks,
    lock_session_names_its_replica, one_lock_session_per_term,
};
use self::model::{Conn, LockSession, WireModel};
use self::standby::{
    first_check_at_start, lock_calls, refused_checks_leave_the_pool_alone, standby_cadence,
};
use super::{ms_of, Bounds, Check, Verdict};
use crate::check::log_level::LogLevel;
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
pub(crate) const QUEUE: &str = "pg_advisory_lock";
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
    /// Every replica was told a CheckInterval of 0 and the run's T is the page's default: the
    /// cadences measure that default (CFG-2) rather than an interval the replicas were told.
    pub default_interval: bool,
    /// The scenario releases a leader's lock behind its back (the `unlock` fault): X-VERIFY is
    /// judged, by what follows each stray unlock.
    pub stray_unlocks: bool,
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
    conns: &'a [Conn],
    sessions: &'a [LockSession],
    faults: Vec<(String, f64, f64)>,
    /// Each SIGTERM the scenario sent (the `terminate` fault): the replica and when.
    terminations: Vec<(String, f64)>,
    /// Each time a replica's process was frozen (the `freeze` fault): the replica, from, to.
    frozen: Vec<(String, f64, f64)>,
    /// Each process the harness spawned and each that ended: the replica, when, and whether
    /// it was a spawn.
    lives: Vec<(String, f64, bool)>,
    /// When the samplers stopped: the harness stops the replicas after it.
    sampled_until: f64,
    /// The last moment the wire shows: its last statement sent or connection closed.
    end_ms: f64,
    /// Each term's end a replica reported (its event stream: demoted, released, abandoned).
    ended: Vec<(String, f64)>,
    /// Each gauge reading of a replica, when it was asked for (level 1 and above).
    gauges: Vec<GaugeRead>,
    /// Each WARN line (or above) of a replica's log, when the harness read it.
    warns: Vec<(String, f64)>,
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

    /// When `replica` could act on what happened at `t_ms`: then, or, if its process was
    /// frozen then, when it was thawed.
    fn can_act(&self, replica: &str, t_ms: f64) -> f64 {
        (self.frozen.iter())
            .filter(|(r, a, z)| r == replica && *a <= t_ms && t_ms <= *z)
            .map(|(_, _, z)| *z)
            .fold(t_ms, f64::max)
    }

    fn is_replica(&self, name: &str) -> bool {
        self.conns.iter().any(|c| c.replica == name)
    }

    fn replicas(&self) -> BTreeSet<&str> {
        self.conns.iter().map(|c| c.replica.as_str()).collect()
    }

    /// What a measure in units of T (a cadence, the orphan bound) decides: `clause`; where
    /// every replica was told 0 and T is the page's default, CFG-2 instead (a program whose
    /// default is not 5 s is true to its own interval and breaks only CFG-2).
    fn interval_clause<'c>(&self, clause: &'c [&'c str]) -> &'c [&'c str] {
        if self.setup.default_interval {
            &["CFG-2"]
        } else {
            clause
        }
    }
}

/// Every wire check over `entries` (whose conversations and lock sessions are `model`), or
/// (when the proxies kept no journal) each one not run.
pub fn checks(entries: &[Entry], model: &WireModel, b: &Bounds, setup: &WireSetup) -> Vec<Check> {
    let (conns, sessions) = (&model.conns[..], &model.sessions[..]);
    let all_faults = self::model::faults(entries);
    let terminations = (all_faults.iter())
        .filter(|f| f.0 == crate::fault::Verb::Terminate)
        .map(|(_, target, applied, _)| (target.clone(), *applied))
        .collect();
    let frozen = (all_faults.iter())
        .filter(|f| f.0 == crate::fault::Verb::Freeze)
        .map(|(_, target, applied, lifted)| (target.clone(), *applied, *lifted))
        .collect();
    let faults = (all_faults.into_iter())
        .map(|(_, target, applied, lifted)| (target, applied, lifted))
        .collect();
    let sampled_until = self::model::sampled_until(entries);
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
    let lives = (entries.iter())
        .filter_map(|e| match &e.what {
            What::Spawned { replica } => Some((replica.clone(), e.t_ms, true)),
            What::Exited { replica, .. } => Some((replica.clone(), e.t_ms, false)),
            _ => None,
        })
        .collect();
    let w = Wire {
        conns,
        sessions,
        faults,
        terminations,
        frozen,
        lives,
        sampled_until,
        end_ms: last_seen(conns),
        ended,
        gauges: gauge_reads(entries),
        warns: warn_lines(entries),
        setup,
        b,
    };
    let mut all = vec![
        lock_calls(&w),
        first_check_at_start(&w),
        standby_cadence(&w),
        refused_checks_leave_the_pool_alone(&w),
        lock_session_carries_only_checks(&w),
        one_lock_session_per_term(&w),
        ended_only_by_demotion_or_release(&w),
        idle_timeout_on_the_lock_session(&w),
        leader_cadence(&w),
        closed_after_a_failed_check(&w),
        demotion_in_order(&w),
        leader_checks_take_no_lock(&w),
        nothing_after_a_failed_check(&w),
        release_within_its_deadline(&w),
        lock_session_names_its_replica(&w),
    ];
    if setup.stray_unlocks {
        all.push(closed_after_a_stray_unlock(&w));
    }
    if setup.tapped {
        return all;
    }
    all.into_iter().map(untapped).collect()
}

/// Every replica's gauge readings on the timeline, each with when it was asked for: a sample's
/// oldest ask stands for all of its values (each was asked for at or after it).
fn gauge_reads(entries: &[Entry]) -> Vec<GaugeRead> {
    (entries.iter())
        .flat_map(|e| match &e.what {
            What::Gauges { values, asked_ms } => (values.iter())
                .filter_map(|(r, v)| {
                    v.map(|value| GaugeRead {
                        replica: r.clone(),
                        asked_ms: asked_ms.unwrap_or(e.t_ms),
                        read_ms: e.t_ms,
                        value,
                    })
                })
                .collect(),
            _ => Vec::new(),
        })
        .collect()
}

/// Every log line at WARN or above ([`LogLevel::of`]), with when the harness read it.
fn warn_lines(entries: &[Entry]) -> Vec<(String, f64)> {
    (entries.iter())
        .filter_map(|e| match &e.what {
            What::Log { replica, line } if LogLevel::of(line) >= Some(LogLevel::Warn) => {
                Some((replica.clone(), e.t_ms))
            }
            _ => None,
        })
        .collect()
}

/// The last moment `conns` show: their last statement sent or connection closed.
fn last_seen(conns: &[Conn]) -> f64 {
    (conns.iter())
        .flat_map(|c| {
            c.statements
                .iter()
                .map(|s| s.sent_ms)
                .chain(c.closed.map(|c| c.0))
        })
        .fold(0.0, f64::max)
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

/// The median of `gaps`, when there are enough to judge a cadence on ([`CADENCE_GAPS`]).
fn median(gaps: &[f64]) -> Option<f64> {
    let mut v = gaps.to_vec();
    v.sort_by(f64::total_cmp);
    (v.len() >= CADENCE_GAPS).then(|| v[v.len() / 2])
}

#[cfg(test)]
mod tests;
