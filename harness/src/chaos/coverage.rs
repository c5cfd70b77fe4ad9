//! Which faults a chaos run played, at which role, in which phase of the election, read off its
//! history alone (the fault and control entries, the wire and pg_locks), so that a soak shows
//! what it exercised and what it never reached.
//!
//! A strike's role is what its target was when its step began: the replica that held the lock
//! (the leader) or another (a standby); the lock's backend (`kill-backend`); the server. Its
//! phase is where the election stood then: nobody held the lock (mid-handover, between one
//! term's end and the next grant); the struck replica (for the server and the backend, the
//! leader) had a check in flight on the wire (a leader's statement on its lock session, a
//! standby's attempt: mid-check); it had a blocking lock call queued (X-WAKE's waiter, or the
//! server had such a call of anyone's queued: queued); else steady. A process restart is the lift
//! of a kill in a schedule, and a switch back to `ok` the lift of a worker fault: neither is a
//! strike.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

use crate::check::wire::model::{Conn, Stmt, WireModel};
use crate::fault::{Subject, Verb};
use crate::replica::control::Switch;
use crate::report::Table;
use crate::scenario::model::word;
use crate::timeline::{Entry, What};

/// What struck: a fault verb, or a fault switch of a replica's loop or worker.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Strike {
    /// A fault verb.
    Fault(Verb),
    /// A loop's or a supervised worker's fault switch.
    Switch(Switch),
}

impl fmt::Display for Strike {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Strike::Fault(verb) => write!(f, "{verb}"),
            Strike::Switch(Switch::Loop { name, mode }) => {
                write!(f, "{} loop {name}", word(mode))
            }
            Strike::Switch(Switch::Worker { name, mode }) => {
                write!(f, "{} worker {name}", word(mode))
            }
        }
    }
}

/// What the target of a strike was when it took effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// The replica that held the lock.
    Leader,
    /// A replica that did not.
    Standby,
    /// The lock's backend on the server.
    Backend,
    /// The server.
    Server,
}

/// Where the election stood when a strike took effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// A leader held the lock, with no check or queued call of the target in flight.
    Steady,
    /// The target's check (the leader's, for the server and the backend) was in flight.
    MidCheck,
    /// Nobody held the lock: between one term's end and the next grant.
    MidHandover,
    /// A blocking lock call was queued on the server (the target's, or for the server and
    /// the backend anyone's).
    Queued,
}

impl Phase {
    /// Every phase, in the table's order.
    pub const ALL: [Phase; 4] = [
        Phase::Steady,
        Phase::MidCheck,
        Phase::MidHandover,
        Phase::Queued,
    ];
}

/// How often each strike met each role in each phase, over one run or many.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    cells: BTreeMap<(Strike, Role, Phase), usize>,
}

impl Coverage {
    /// The strikes of one run's history, each with its role and phase.
    pub fn of(entries: &[Entry], model: &WireModel) -> Self {
        let at = Moment { entries, model };
        let mut cells = BTreeMap::new();
        // When the last step that acts began: a strike is read as things stood then (a
        // `disable` has closed the leader's connections by the time its call returns).
        let mut step_ms = None;
        for e in entries {
            if let What::Step { acts: true, .. } = e.what {
                step_ms = Some(e.t_ms);
            }
            let Some((strike, target)) = struck(e) else {
                continue;
            };
            let t_ms = step_ms.map_or(e.t_ms, |s: f64| s.min(e.t_ms));
            let role = at.role(&strike, target, t_ms);
            let phase = at.phase(role, target, t_ms);
            *cells.entry((strike, role, phase)).or_default() += 1;
        }
        Self { cells }
    }

    /// This run's counts and `other`'s, added.
    pub fn add(&mut self, other: &Coverage) {
        for (cell, n) in &other.cells {
            *self.cells.entry(cell.clone()).or_default() += n;
        }
    }

    /// How many strikes it counts.
    pub fn strikes(&self) -> usize {
        self.cells.values().sum()
    }

    /// How many strikes of this kind met `role` in `phase`.
    pub fn count(&self, strike: &Strike, role: Role, phase: Phase) -> usize {
        (self.cells.get(&(strike.clone(), role, phase)))
            .copied()
            .unwrap_or_default()
    }

    /// A row per strike and role met, a column per phase, and which phases no strike reached.
    pub fn table(&self) -> Table {
        let mut rows: Vec<(&Strike, Role)> = self.cells.keys().map(|(s, r, _)| (s, *r)).collect();
        rows.dedup();
        let kinds: BTreeSet<&Strike> = rows.iter().map(|(s, _)| *s).collect();
        let unreached: Vec<String> = (Phase::ALL.iter())
            .filter(|p| !self.cells.keys().any(|(_, _, q)| q == *p))
            .map(word)
            .collect();
        let unreached = match unreached.is_empty() {
            true => "none".to_owned(),
            false => unreached.join(", "),
        };
        let count = |n: usize| match n {
            0 => "·".to_owned(),
            n => n.to_string(),
        };
        let row = |(s, r): &(&Strike, Role)| -> Vec<String> {
            [s.to_string(), word(r)]
                .into_iter()
                .chain(Phase::ALL.iter().map(|p| count(self.count(s, *r, *p))))
                .collect()
        };
        Table {
            title: "Fault coverage".into(),
            note: format!(
                "{} strike(s) of {} kind(s), {} row(s) of a strike and a role; phases no strike \
                 reached: {unreached}",
                self.strikes(),
                kinds.len(),
                rows.len(),
            ),
            columns: (["strike", "role"].into_iter().map(str::to_owned))
                .chain(Phase::ALL.iter().map(word))
                .collect(),
            rows: rows.iter().map(row).collect(),
        }
    }
}

/// The strike an entry records, and its target; `None` for any other entry, for a lift, and
/// for a process restart (a schedule's lift of a kill).
fn struck(e: &Entry) -> Option<(Strike, &str)> {
    match &e.what {
        What::Fault {
            verb,
            target,
            lifted: false,
        } if *verb != Verb::Restart => Some((Strike::Fault(*verb), target.as_str())),
        What::Control { replica, switch } if !switch.lifts() => {
            Some((Strike::Switch(switch.clone()), replica.as_str()))
        }
        _ => None,
    }
}

/// The history, asked about one moment.
struct Moment<'a> {
    entries: &'a [Entry],
    model: &'a WireModel,
}

impl Moment<'_> {
    /// The role of `target` under `strike` at `t_ms`.
    fn role(&self, strike: &Strike, target: &str, t_ms: f64) -> Role {
        match strike {
            Strike::Fault(v) if v.subject() == Subject::Backend => Role::Backend,
            Strike::Fault(v) if v.subject() == Subject::Server => Role::Server,
            _ if self.holders(t_ms).iter().any(|h| h == target) => Role::Leader,
            _ => Role::Standby,
        }
    }

    /// Where the election stood for `target` in `role` at `t_ms`.
    fn phase(&self, role: Role, target: &str, t_ms: f64) -> Phase {
        let holders = self.holders(t_ms);
        if holders.is_empty() {
            return Phase::MidHandover;
        }
        let whose: Vec<&str> = match role {
            Role::Leader | Role::Standby => vec![target],
            Role::Backend | Role::Server => holders.iter().map(String::as_str).collect(),
        };
        let in_flight = |c: &Conn, check: fn(&Stmt) -> bool| {
            c.open_at(t_ms)
                && (c.statements.iter()).any(|s| {
                    s.sent_ms <= t_ms
                        && s.answer.as_ref().is_none_or(|(at, _)| t_ms < *at)
                        && check(s)
                })
        };
        let checking = (self.model.conns.iter())
            .filter(|c| whose.contains(&c.replica.as_str()))
            .any(|c| in_flight(c, |s| !s.unlocks()) && self.checks_on(c, t_ms));
        let queued = (self.model.conns.iter())
            .filter(|c| matches!(role, Role::Backend | Role::Server) || c.replica == target)
            .any(|c| in_flight(c, blocks));
        match (checking, queued) {
            (true, _) => Phase::MidCheck,
            (false, true) => Phase::Queued,
            (false, false) => Phase::Steady,
        }
    }

    /// Whether a statement in flight on `c` at `t_ms` is a check: `c` is a lock session held
    /// then (the leader's `SELECT 1`), or its statement in flight asks for the lock without
    /// waiting (a standby's attempt).
    fn checks_on(&self, c: &Conn, t_ms: f64) -> bool {
        let held = (self.model.sessions.iter()).any(|l| {
            self.model
                .conns
                .get(l.conn)
                .is_some_and(|h| h.id == c.id && h.replica == c.replica)
                && l.granted_ms <= t_ms
                && l.ended_ms.is_none_or(|e| t_ms <= e)
        });
        held || (c.statements.iter()).any(|s| {
            s.sent_ms <= t_ms
                && s.answer.as_ref().is_none_or(|(at, _)| t_ms < *at)
                && s.asks()
                && !blocks(s)
        })
    }

    /// The replicas that held the lock at `t_ms` (a session the strike itself ended, e.g. a
    /// server restart's, still held at its moment): on the wire where it was tapped, else in
    /// the last pg_locks sample before it.
    fn holders(&self, t_ms: f64) -> Vec<String> {
        if !self.model.conns.is_empty() {
            return (self.model.sessions.iter())
                .filter(|l| l.granted_ms <= t_ms && l.ended_ms.is_none_or(|e| t_ms <= e))
                .map(|l| l.replica.clone())
                .collect();
        }
        (self.entries.iter().rev())
            .filter(|e| e.t_ms <= t_ms)
            .find_map(|e| match &e.what {
                What::Locks { rows } => {
                    Some(rows.iter().filter(|r| r.1).map(|r| r.2.clone()).collect())
                }
                _ => None,
            })
            .unwrap_or_default()
    }
}

/// Whether `s` is a blocking lock call (`pg_advisory_lock`, which waits in the server's queue).
fn blocks(s: &Stmt) -> bool {
    (s.reading.as_ref()).is_ok_and(|r| r.calls_to("pg_advisory_lock").next().is_some())
}

#[cfg(test)]
mod tests;
