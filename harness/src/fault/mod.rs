//! The fault verbs (the nemesis): network faults on one replica's Toxiproxy proxy, faults of
//! the PostgreSQL server, and signals to replica processes.
//!
//! Every verb returns a [`FaultRecord`]: what was applied (or lifted), to what, and when —
//! `start` when the call began and `end` when it returned and the fault was in effect, both
//! relative to the run's start — so the caller puts faults on the timeline as entries of the
//! same history as the replicas' transitions. The nemesis also keeps every record
//! ([`Nemesis::records`]).
//!
//! | verb | effect | inverse |
//! |---|---|---|
//! | [`partition`](Nemesis::partition) | silent black hole both ways (`timeout` 0 and a held close on both streams) | [`heal`](Nemesis::heal) (closes the connections) |
//! | [`stall`](Nemesis::stall) | `bandwidth` 0 on both streams | [`heal`](Nemesis::heal) (data flows again) |
//! | [`latency`](Nemesis::latency) | round trip + d ± jitter | [`clear_latency`](Nemesis::clear_latency) |
//! | [`reset`](Nemesis::reset) | connections closed, new ones reset (RST), until healed | [`heal`](Nemesis::heal) |
//! | [`disable`](Nemesis::disable) | proxy closed: connections closed, new ones refused | [`enable`](Nemesis::enable) |
//! | [`unlock`](Nemesis::unlock) | `pg_advisory_unlock_all()` run by a replica's proxy on each of its idle sessions, unseen by the replica (a stray unlock, a pool's `DISCARD ALL`); the workspace's proxy only | none |
//! | [`kill_backend_of`](Nemesis::kill_backend_of) | `pg_terminate_backend` of a replica's lock session | none |
//! | [`restart_server`](Nemesis::restart_server) | PostgreSQL stopped and started | none (the history shows it lifted when the server is back: [`FaultRecord::marks`]) |
//! | [`stop_server`](Nemesis::stop_server) | PostgreSQL stopped | [`start_server`](Nemesis::start_server) |
//! | [`kill`](Nemesis::kill) | SIGKILL a replica | none ([`restart`](Nemesis::restart) brings it back) |
//! | [`freeze`](Nemesis::freeze) | SIGSTOP a replica | [`thaw`](Nemesis::thaw) (SIGCONT) |
//! | [`terminate`](Nemesis::terminate) | SIGTERM a replica | none ([`restart`](Nemesis::restart) brings it back) |
//! | [`restart`](Nemesis::restart) | start a replica again (again each second for up to 30 s while it exits at boot: [`ReplicaProcess::restart`](crate::replica::ReplicaProcess::restart)) | none |
//!
//! Verb names are the scenario files' (`partition`, `kill-backend`, `restart-server`, ...): a
//! [`Verb`] is that vocabulary as data, with its [`inverse`](Verb::inverse). [`Nemesis::apply`]
//! carries a verb out on a target and [`Nemesis::lift`] undoes it, so a caller (the scenario
//! runner, a chaos schedule) never decides by itself how a fault is lifted.

mod nemesis;
mod network;
mod process;
mod server;

#[cfg(test)]
mod tests;

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use nemesis::{Nemesis, ProcessTarget, Processes};

/// What [`Verb::Unlock`] has a replica's proxy run on its sessions ([`Nemesis::unlock`]); the
/// wire journal records it as sent, and X-VERIFY's check knows the fault by it.
pub const UNLOCK_ALL: &str = "SELECT pg_advisory_unlock_all()";

/// A fault verb, named as scenario files name it (`partition`, `kill-backend`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verb {
    /// A silent black hole on a replica's link, both ways ([`Nemesis::partition`]).
    Partition,
    /// A silent black hole on a replica's link for its requests only: the server hears nothing
    /// from it (not even its close) while its answers still arrive ([`Nemesis::partition_one_way`]).
    PartitionRequests,
    /// A silent black hole on a replica's link for the server's answers only: its requests (and
    /// its close) reach the server, so its session is never idle while it checks, and nothing
    /// comes back ([`Nemesis::partition_one_way`]).
    PartitionAnswers,
    /// Bandwidth 0 on a replica's link ([`Nemesis::stall`]).
    Stall,
    /// Extra delay on a replica's link ([`Nemesis::latency`]).
    Latency,
    /// RST on the next data of a replica's connections ([`Nemesis::reset`]).
    Reset,
    /// A replica's proxy closed ([`Nemesis::disable`]).
    Disable,
    /// Every advisory lock of a replica's sessions released behind its back
    /// ([`Nemesis::unlock`]).
    Unlock,
    /// The replica's lock backend terminated ([`Nemesis::kill_backend_of`]).
    KillBackend,
    /// PostgreSQL restarted ([`Nemesis::restart_server`]).
    RestartServer,
    /// PostgreSQL stopped ([`Nemesis::stop_server`]).
    StopServer,
    /// SIGKILL to a replica ([`Nemesis::kill`]).
    Kill,
    /// SIGSTOP to a replica ([`Nemesis::freeze`]).
    Freeze,
    /// SIGTERM to a replica ([`Nemesis::terminate`]).
    Terminate,
    /// A replica started again ([`Nemesis::restart`]).
    Restart,
}

impl Verb {
    /// Every verb, in declaration order.
    pub const ALL: [Verb; 15] = [
        Verb::Partition,
        Verb::PartitionRequests,
        Verb::PartitionAnswers,
        Verb::Stall,
        Verb::Latency,
        Verb::Reset,
        Verb::Disable,
        Verb::Unlock,
        Verb::KillBackend,
        Verb::RestartServer,
        Verb::StopServer,
        Verb::Kill,
        Verb::Freeze,
        Verb::Terminate,
        Verb::Restart,
    ];
}

/// What undoes a verb (turmoil's `repair` to its `partition`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lift {
    /// [`Nemesis::heal`]: the link's toxics removed.
    Heal,
    /// [`Nemesis::clear_latency`].
    ClearLatency,
    /// [`Nemesis::enable`].
    Enable,
    /// [`Nemesis::start_server`].
    StartServer,
    /// [`Nemesis::thaw`] (SIGCONT).
    Thaw,
}

/// What a verb acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject {
    /// A replica's link to the database (its Toxiproxy proxy), named by the replica.
    Link,
    /// The replica's lock session on the server, named by the replica.
    Backend,
    /// The PostgreSQL server: the verb takes no target.
    Server,
    /// A replica's process.
    Process,
}

impl Verb {
    /// What lifts this verb; `None` for a one-shot verb (nothing to undo: `unlock`, `kill-backend`,
    /// `restart-server`, `kill`, `terminate`, `restart`).
    pub fn inverse(self) -> Option<Lift> {
        match self {
            Verb::Partition
            | Verb::PartitionRequests
            | Verb::PartitionAnswers
            | Verb::Stall
            | Verb::Reset => Some(Lift::Heal),
            Verb::Latency => Some(Lift::ClearLatency),
            Verb::Disable => Some(Lift::Enable),
            Verb::StopServer => Some(Lift::StartServer),
            Verb::Freeze => Some(Lift::Thaw),
            Verb::Unlock
            | Verb::KillBackend
            | Verb::RestartServer
            | Verb::Kill
            | Verb::Terminate
            | Verb::Restart => None,
        }
    }

    /// What the verb acts on.
    pub fn subject(self) -> Subject {
        match self {
            Verb::Partition
            | Verb::PartitionRequests
            | Verb::PartitionAnswers
            | Verb::Stall
            | Verb::Latency
            | Verb::Reset
            | Verb::Disable
            | Verb::Unlock => Subject::Link,
            Verb::KillBackend => Subject::Backend,
            Verb::RestartServer | Verb::StopServer => Subject::Server,
            Verb::Kill | Verb::Freeze | Verb::Terminate | Verb::Restart => Subject::Process,
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.serialize(f)
    }
}

/// The parameters of a verb that takes some: the delay and jitter of [`Verb::Latency`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delay {
    /// Added to every round trip.
    pub latency: Duration,
    /// ± this much.
    pub jitter: Duration,
}

/// The name the server verbs' records carry as their target.
pub const SERVER: &str = "postgres";

/// One fault applied or lifted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FaultRecord {
    /// The verb.
    pub verb: Verb,
    /// What it targets: a replica (proxy) name, `postgres`, or `backend <pid>`.
    pub target: String,
    /// Whether this record lifts the fault (a heal) rather than applying it.
    pub lifted: bool,
    /// A human label, e.g. `partition r1 (black hole, both directions)`.
    pub label: String,
    /// When the call began, since the run's start.
    pub start: Duration,
    /// When the call returned (the fault in effect, or lifted), since the run's start.
    pub end: Duration,
}

impl FaultRecord {
    /// `start` in milliseconds.
    pub fn start_ms(&self) -> f64 {
        self.start.as_secs_f64() * 1000.0
    }

    /// `end` in milliseconds.
    pub fn end_ms(&self) -> f64 {
        self.end.as_secs_f64() * 1000.0
    }

    /// When the fault took effect, since the run's start: a server restart or stop ends every
    /// session as its call begins, and a replica restart kills the old process as its call
    /// begins (each call returns only once the server, or the new process, is back, and other
    /// replicas may have begun new sessions and terms by then); a thawed process may run, and
    /// report, from the moment SIGCONT is sent, before its call returns. Every other verb, and
    /// every other lift, when its call returned.
    pub fn took_effect(&self) -> Duration {
        match (self.verb, self.lifted) {
            (Verb::RestartServer | Verb::StopServer | Verb::Restart, false)
            | (Verb::Freeze, true) => self.start,
            _ => self.end,
        }
    }
}

impl FaultRecord {
    /// Where the record goes on the history, as `(when, lifted)`: the moment it took effect
    /// ([`took_effect`](FaultRecord::took_effect)), and for a server restart also its end as
    /// its lift: the call returns once the server accepts connections again, and a pooler
    /// holds the queries it was sent until then (CI chaos seed 9).
    pub fn marks(&self) -> Vec<(Duration, bool)> {
        let mut marks = vec![(self.took_effect(), self.lifted)];
        if self.verb == Verb::RestartServer && !self.lifted {
            marks.push((self.end, true));
        }
        marks
    }
}
