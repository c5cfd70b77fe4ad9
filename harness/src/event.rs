//! The replica event stream: one JSON object per line on a replica's stdout.
//!
//! This is the contract between a replica process (`replica` module) and the harness's observers
//! (`observe` module). Every line is an [`EventLine`]; unknown lines are kept as
//! [`ReplicaEvent::Unparsed`] by the reader, never dropped.

use serde::{Deserialize, Serialize};

/// The table leader-only loop passes write to, so the database itself shows which replica did
/// leader-only work, in which term, and when. Created by the harness (and, idempotently, by
/// replicas) before any pass runs.
pub const WORK_TABLE_DDL: &str = "CREATE TABLE IF NOT EXISTS leader_work (
    id bigserial PRIMARY KEY,
    loop_name text NOT NULL,
    replica text NOT NULL,
    term bigint NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    fence bigint
)";

/// One line of a replica's event stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventLine {
    /// The replica's wall clock, in milliseconds since the Unix epoch (for the record only; the
    /// harness orders events by its own monotonic receive time).
    pub ts_ms: u64,
    /// The replica's name (also its `application_name`).
    pub replica: String,
    /// What happened.
    #[serde(flatten)]
    pub event: ReplicaEvent,
}

/// How one tick of a ticked loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TickKind {
    /// The pass ran on the leader and succeeded.
    Ok,
    /// The pass ran on the leader and failed.
    Failed,
    /// The pass panicked.
    Panicked,
    /// Leadership was lost while the pass ran (not a failure).
    Lost,
}

/// What a leader's graceful unlock did (RUN-6); the session is closed after it in every case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseOutcome {
    /// `pg_advisory_unlock` answered true: the lock left while the session lived.
    Unlocked,
    /// The server answered false or an error.
    Refused,
    /// No answer within the 2 s deadline; the close releases the lock.
    TimedOut,
    /// No answer within T: the term ended then, and the unlock went on before the close (the
    /// elector's deviation from the spec's order under a slow link, issue 35 item 7).
    Slow,
}

/// What a replica reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ReplicaEvent {
    /// The process is up: its pid, its HTTP address (`/metrics`, `/readyz`, `/workers`,
    /// `/control`), its check interval, and whether it runs an elector (no DSN: none, LOOP-4).
    Started {
        /// The OS process id.
        pid: u32,
        /// `host:port` of its HTTP server.
        http: String,
        /// T in milliseconds.
        check_interval_ms: u64,
        /// Whether an elector (and the background loops) run.
        elector: bool,
    },
    /// One boot pass of a probed loop ran, ungated, before the replica reported ready (LOOP-6,
    /// READY-1); every replica runs them, leader or not.
    BootPass {
        /// The loop's name.
        #[serde(rename = "loop")]
        loop_name: String,
        /// How it ended (`ok`, `failed` or `panicked`).
        outcome: TickKind,
        /// The error, or the probe's panic text, if any.
        error: Option<String>,
    },
    /// The boot passes ran and the replica serves (LOOP-6).
    Ready,
    /// A standby's check was refused: another session holds the lock.
    CheckRefused,
    /// A standby's check failed (`leader: acquire lock connection: <cause>`).
    CheckFailed {
        /// The cause.
        error: String,
    },
    /// The lock was granted: a term began.
    Acquired {
        /// The term's number on this replica.
        term: u64,
        /// The lock session's backend pid.
        backend_pid: i32,
    },
    /// The leader's check failed or went unanswered: the term ended (DEM-1).
    Demoted {
        /// The term's number.
        term: u64,
        /// The check's error.
        error: String,
    },
    /// The leader gave the lock up on shutdown (RUN-6): the unlock's outcome, then the close.
    Released {
        /// The term's number.
        term: u64,
        /// What the unlock did.
        outcome: ReleaseOutcome,
        /// What the server said, when it refused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A leader's run ended by a panic or a dropped future (RUN-7).
    Abandoned {
        /// The term's number.
        term: u64,
        /// Whether a panic unwound `run` (else the future was dropped).
        panicked: bool,
    },
    /// One tick of a leader-ticked loop that ran a pass (standby ticks are not reported).
    Tick {
        /// The loop's name.
        #[serde(rename = "loop")]
        loop_name: String,
        /// How it ended.
        outcome: TickKind,
        /// The term it ran in.
        term: Option<u64>,
        /// The error or panic value, if any.
        error: Option<String>,
    },
    /// A supervised worker changed state (restarting, exhausted, stopped).
    Worker {
        /// The worker's name.
        worker: String,
        /// `restarting`, `exhausted` or `stopped`.
        state: String,
        /// Why it ended.
        exit: Option<String>,
    },
    /// The replica is shutting down (SIGTERM or SIGINT).
    Shutdown,
    /// A line the reader could not parse, kept verbatim.
    Unparsed {
        /// The raw line.
        line: String,
    },
}

/// The kind of a [`ReplicaEvent`], without its fields: what scenario files name in an
/// expectation (`event = "demoted"`). Its names are the events' own `event` tags.
///
/// A new [`ReplicaEvent`] variant needs a kind of the same name here and an arm in
/// [`ReplicaEvent::kind`] (the compiler asks for the arm; a test checks the names agree).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// [`ReplicaEvent::Started`].
    Started,
    /// [`ReplicaEvent::BootPass`].
    BootPass,
    /// [`ReplicaEvent::Ready`].
    Ready,
    /// [`ReplicaEvent::CheckRefused`].
    CheckRefused,
    /// [`ReplicaEvent::CheckFailed`].
    CheckFailed,
    /// [`ReplicaEvent::Acquired`].
    Acquired,
    /// [`ReplicaEvent::Demoted`].
    Demoted,
    /// [`ReplicaEvent::Released`].
    Released,
    /// [`ReplicaEvent::Abandoned`].
    Abandoned,
    /// [`ReplicaEvent::Tick`].
    Tick,
    /// [`ReplicaEvent::Worker`].
    Worker,
    /// [`ReplicaEvent::Shutdown`].
    Shutdown,
    /// [`ReplicaEvent::Unparsed`].
    Unparsed,
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.serialize(f)
    }
}

/// How an event changes its replica's term ([`ReplicaEvent::term_change`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TermChange {
    /// An acquisition: a term begins.
    Begins,
    /// A demotion, a release, an abandonment, or a (re)start of the process: any term that was
    /// open has ended.
    Ends,
}

impl ReplicaEvent {
    /// How it changes the replica's term, if it does: the one rule the checks' terms
    /// ([`crate::check::history::terms`]) and a scenario's waits read events by.
    pub fn term_change(&self) -> Option<TermChange> {
        match self {
            ReplicaEvent::Acquired { .. } => Some(TermChange::Begins),
            ReplicaEvent::Demoted { .. }
            | ReplicaEvent::Released { .. }
            | ReplicaEvent::Abandoned { .. }
            | ReplicaEvent::Started { .. } => Some(TermChange::Ends),
            _ => None,
        }
    }

    /// The event's kind.
    pub fn kind(&self) -> EventKind {
        match self {
            ReplicaEvent::Started { .. } => EventKind::Started,
            ReplicaEvent::BootPass { .. } => EventKind::BootPass,
            ReplicaEvent::Ready => EventKind::Ready,
            ReplicaEvent::CheckRefused => EventKind::CheckRefused,
            ReplicaEvent::CheckFailed { .. } => EventKind::CheckFailed,
            ReplicaEvent::Acquired { .. } => EventKind::Acquired,
            ReplicaEvent::Demoted { .. } => EventKind::Demoted,
            ReplicaEvent::Released { .. } => EventKind::Released,
            ReplicaEvent::Abandoned { .. } => EventKind::Abandoned,
            ReplicaEvent::Tick { .. } => EventKind::Tick,
            ReplicaEvent::Worker { .. } => EventKind::Worker,
            ReplicaEvent::Shutdown => EventKind::Shutdown,
            ReplicaEvent::Unparsed { .. } => EventKind::Unparsed,
        }
    }
}

impl EventLine {
    /// Parses one line; a line that is not an event becomes [`ReplicaEvent::Unparsed`] for
    /// `replica`.
    pub fn parse(line: &str, replica: &str) -> EventLine {
        serde_json::from_str(line).unwrap_or_else(|_| EventLine {
            ts_ms: 0,
            replica: replica.to_owned(),
            event: ReplicaEvent::Unparsed {
                line: line.to_owned(),
            },
        })
    }

    /// The line as JSON (no trailing newline).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("events serialise")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_keeps_unparsed_lines() {
        let line = EventLine {
            ts_ms: 1,
            replica: "r1".into(),
            event: ReplicaEvent::Tick {
                loop_name: "invitations-expire".into(),
                outcome: TickKind::Failed,
                term: Some(2),
                error: Some("boom".into()),
            },
        };
        let json = line.to_json();
        assert!(
            json.contains(r#""event":"tick""#) && json.contains(r#""loop":"invitations-expire""#)
        );
        assert_eq!(EventLine::parse(&json, "r1"), line);
        let junk = EventLine::parse("thread main panicked", "r2");
        assert_eq!(junk.replica, "r2");
        assert!(matches!(junk.event, ReplicaEvent::Unparsed { .. }));
    }

    #[test]
    fn kinds_are_named_as_the_events_are_tagged() {
        let error = || Some("e".to_owned());
        let events = [
            ReplicaEvent::Started {
                pid: 1,
                http: "h".into(),
                check_interval_ms: 1,
                elector: true,
            },
            ReplicaEvent::BootPass {
                loop_name: "l".into(),
                outcome: TickKind::Ok,
                error: error(),
            },
            ReplicaEvent::Ready,
            ReplicaEvent::CheckRefused,
            ReplicaEvent::CheckFailed { error: "e".into() },
            ReplicaEvent::Acquired {
                term: 1,
                backend_pid: 1,
            },
            ReplicaEvent::Demoted {
                term: 1,
                error: "e".into(),
            },
            ReplicaEvent::Released {
                term: 1,
                outcome: ReleaseOutcome::Unlocked,
                reason: None,
            },
            ReplicaEvent::Abandoned {
                term: 1,
                panicked: true,
            },
            ReplicaEvent::Tick {
                loop_name: "l".into(),
                outcome: TickKind::Ok,
                term: None,
                error: error(),
            },
            ReplicaEvent::Worker {
                worker: "w".into(),
                state: "s".into(),
                exit: error(),
            },
            ReplicaEvent::Shutdown,
            ReplicaEvent::Unparsed { line: "x".into() },
        ];
        for e in events {
            let tag = serde_json::to_value(&e).unwrap()["event"].clone();
            assert_eq!(serde_json::to_value(e.kind()).unwrap(), tag);
            assert_eq!(Some(e.kind().to_string().as_str()), tag.as_str());
        }
    }
}
