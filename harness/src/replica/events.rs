//! The replica's event stream: [`EventLine`]s on stdout, one per line, flushed per line, built
//! from typed values only: the elector's leadership watch, the supervisor's status watch, and
//! what the replica itself does. No log message is parsed, so rewording a log line cannot change
//! what the harness sees.
//!
//! Human-readable logs go to stderr (tracing's fmt layer, filtered by `RUST_LOG`, default
//! `info`); stdout carries nothing but event lines.
//!
//! | source | change | event |
//! |---|---|---|
//! | [`elector::Leadership`] | a new `last_check` that was refused | `check_refused` |
//! | | a new `last_check` that failed | `check_failed { error }` |
//! | | `role` leading a term not yet reported | `acquired { term, backend_pid }` |
//! | | `last_term` ended by a loss | `demoted { term, error }` |
//! | | `last_term` released | `released { term, outcome, reason }` |
//! | | `last_term` abandoned | `abandoned { term, panicked }` |
//! | worker statuses | a worker's restart count grew, or it is restarting | `worker { state: "restarting" }` |
//! | | a worker exhausted its budget | `worker { state: "exhausted" }` |
//!
//! A watch keeps the latest value: a term that began and ended between two looks is still
//! reported (its `acquired` from the ended term's record, then its end); standby checks that
//! came between two looks are reported once, as the latest.
//!
//! The replica itself emits `started`, `boot_pass`, `ready`, `tick` (from the leader ticker's
//! `on_tick`, standby ticks left out), `shutdown`, and `worker { state: "stopped" }` for each
//! worker once the supervisor has ended.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use elector::leadership::{Abandon, CheckOutcome, EndedTerm, Release, TermEnd};
use elector::supervisor::{WorkerState, WorkerStatus};
use elector::{Leadership, Role};
use tokio::sync::watch;
use tracing_subscriber::filter::EnvFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer;

use crate::event::{EventLine, ReleaseOutcome, ReplicaEvent};

/// Writes event lines for one replica to stdout. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct Emitter {
    replica: Arc<str>,
}

impl Emitter {
    pub(crate) fn new(replica: &str) -> Self {
        Self {
            replica: replica.into(),
        }
    }

    /// Writes one line and flushes it. A closed stdout (the harness went away) is ignored.
    pub(crate) fn emit(&self, event: ReplicaEvent) {
        let line = EventLine {
            ts_ms: now_ms(),
            replica: self.replica.to_string(),
            event,
        };
        let mut text = line.to_json();
        text.push('\n');
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Installs the replica's subscriber: human-readable lines on stderr under `RUST_LOG` (default
/// `info`).
pub(crate) fn init_tracing() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_filter(filter);
    let _ = tracing_subscriber::registry().with(fmt).try_init();
}

/// What the leadership stream has reported so far.
#[derive(Debug, Default)]
pub(crate) struct SeenLeadership {
    acquired: u64,
    ended: u64,
    checks: u64,
}

impl SeenLeadership {
    /// The events that take the stream from what was reported to `state`, in order.
    pub(crate) fn advance(&mut self, state: &Leadership) -> Vec<ReplicaEvent> {
        let mut events = Vec::new();
        if let Some(check) = &state.last_check {
            if check.number > self.checks {
                self.checks = check.number;
                events.push(match &check.outcome {
                    CheckOutcome::Refused => ReplicaEvent::CheckRefused,
                    CheckOutcome::Failed { error } => ReplicaEvent::CheckFailed {
                        error: error.clone(),
                    },
                });
            }
        }
        if let Some(ended) = &state.last_term {
            if ended.term.number > self.ended {
                self.acquire(ended.term.number, ended.term.backend_pid, &mut events);
                self.ended = ended.term.number;
                events.push(end_event(ended));
            }
        }
        if let Role::Leading(term) = &state.role {
            self.acquire(term.number, term.backend_pid, &mut events);
        }
        events
    }

    fn acquire(&mut self, term: u64, backend_pid: i32, events: &mut Vec<ReplicaEvent>) {
        if term > self.acquired {
            self.acquired = term;
            events.push(ReplicaEvent::Acquired { term, backend_pid });
        }
    }
}

fn end_event(ended: &EndedTerm) -> ReplicaEvent {
    let term = ended.term.number;
    match &ended.end {
        TermEnd::Lost { cause } => ReplicaEvent::Demoted {
            term,
            error: cause.clone(),
        },
        TermEnd::Released(release) => {
            let (outcome, reason) = match release {
                Release::Unlocked => (ReleaseOutcome::Unlocked, None),
                Release::Refused { reason } => (ReleaseOutcome::Refused, Some(reason.clone())),
                Release::TimedOut => (ReleaseOutcome::TimedOut, None),
                Release::Slow => (ReleaseOutcome::Slow, None),
            };
            ReplicaEvent::Released {
                term,
                outcome,
                reason,
            }
        }
        TermEnd::Abandoned(how) => ReplicaEvent::Abandoned {
            term,
            panicked: *how == Abandon::Panicked,
        },
    }
}

/// The leadership watch turned into events: a task streams each change as it comes, and
/// [`LeadershipStream::flush`] reports what the task has not yet seen (at shutdown, before the
/// process exits, so the last transition is never lost).
#[derive(Clone)]
pub(crate) struct LeadershipStream {
    emitter: Emitter,
    changes: watch::Receiver<Leadership>,
    seen: Arc<std::sync::Mutex<SeenLeadership>>,
}

impl LeadershipStream {
    /// Starts streaming `changes`.
    pub(crate) fn start(emitter: Emitter, changes: watch::Receiver<Leadership>) -> Self {
        let stream = Self {
            emitter,
            changes,
            seen: Arc::default(),
        };
        let mut task = stream.clone();
        tokio::spawn(async move {
            loop {
                task.flush();
                if task.changes.changed().await.is_err() {
                    return;
                }
            }
        });
        stream
    }

    /// Emits the events between what was reported and the latest state.
    pub(crate) fn flush(&mut self) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        for event in seen.advance(&self.changes.borrow_and_update()) {
            self.emitter.emit(event);
        }
    }
}

/// What the worker stream has reported so far: per worker, how many restarts and whether its
/// exhaustion.
#[derive(Debug, Default)]
pub(crate) struct SeenWorkers {
    restarts: BTreeMap<String, u32>,
    exhausted: BTreeMap<String, bool>,
}

impl SeenWorkers {
    /// The worker events that take the stream from what was reported to `now`: one `restarting`
    /// per restart begun (a restart is begun when the worker waits in `Restarting`, or counted
    /// once it runs again, so restarts that came and went between two looks are all reported),
    /// and `exhausted` once. Stops are reported at shutdown.
    pub(crate) fn advance(&mut self, now: &BTreeMap<String, WorkerStatus>) -> Vec<ReplicaEvent> {
        let mut events = Vec::new();
        for (name, status) in now {
            let begun = status.restarts + u32::from(status.state == WorkerState::Restarting);
            let reported = self.restarts.entry(name.clone()).or_default();
            for _ in *reported..begun {
                events.push(worker_event(name, "restarting", status));
            }
            *reported = (*reported).max(begun);
            let exhausted = self.exhausted.entry(name.clone()).or_default();
            if status.state == WorkerState::Exhausted && !*exhausted {
                *exhausted = true;
                events.push(worker_event(name, "exhausted", status));
            }
        }
        events
    }
}

fn worker_event(name: &str, state: &str, status: &WorkerStatus) -> ReplicaEvent {
    ReplicaEvent::Worker {
        worker: name.to_owned(),
        state: state.to_owned(),
        exit: status.last_exit.clone(),
    }
}

/// Streams the supervisor's status watch as worker events until the supervisor goes away.
pub(crate) fn stream_workers(
    emitter: Emitter,
    mut changes: watch::Receiver<BTreeMap<String, WorkerStatus>>,
) {
    tokio::spawn(async move {
        let mut seen = SeenWorkers::default();
        loop {
            for event in seen.advance(&changes.borrow_and_update()) {
                emitter.emit(event);
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use elector::leadership::{StandbyCheck, TermInfo};

    use super::*;

    fn term(number: u64) -> TermInfo {
        TermInfo {
            number,
            since: SystemTime::UNIX_EPOCH,
            backend_pid: 70 + number as i32,
            fence: None,
        }
    }

    fn ended(number: u64, end: TermEnd) -> Option<EndedTerm> {
        Some(EndedTerm {
            term: term(number),
            at: SystemTime::UNIX_EPOCH,
            end,
        })
    }

    fn check(number: u64, outcome: CheckOutcome) -> Option<StandbyCheck> {
        Some(StandbyCheck {
            number,
            at: SystemTime::UNIX_EPOCH,
            outcome,
        })
    }

    #[test]
    fn each_transition_is_reported_once_in_order() {
        let mut seen = SeenLeadership::default();
        let mut state = Leadership {
            last_check: check(1, CheckOutcome::Refused),
            ..Leadership::default()
        };
        assert_eq!(seen.advance(&state), [ReplicaEvent::CheckRefused]);
        assert_eq!(seen.advance(&state), []);
        state.last_check = check(
            2,
            CheckOutcome::Failed {
                error: "pool: timed out".into(),
            },
        );
        state.role = Role::Leading(term(1));
        assert_eq!(
            seen.advance(&state),
            [
                ReplicaEvent::CheckFailed {
                    error: "pool: timed out".into()
                },
                ReplicaEvent::Acquired {
                    term: 1,
                    backend_pid: 71
                }
            ]
        );
        state.role = Role::Standby;
        state.last_term = ended(
            1,
            TermEnd::Lost {
                cause: "no answer within 200ms".into(),
            },
        );
        assert_eq!(
            seen.advance(&state),
            [ReplicaEvent::Demoted {
                term: 1,
                error: "no answer within 200ms".into()
            }]
        );
    }

    #[test]
    fn a_term_that_came_and_went_unseen_is_still_reported() {
        let mut seen = SeenLeadership::default();
        let state = Leadership {
            role: Role::Leading(term(3)),
            last_term: ended(2, TermEnd::Released(Release::TimedOut)),
            last_check: None,
        };
        assert_eq!(
            seen.advance(&state),
            [
                ReplicaEvent::Acquired {
                    term: 2,
                    backend_pid: 72
                },
                ReplicaEvent::Released {
                    term: 2,
                    outcome: ReleaseOutcome::TimedOut,
                    reason: None
                },
                ReplicaEvent::Acquired {
                    term: 3,
                    backend_pid: 73
                },
            ]
        );
        let abandoned = Leadership {
            last_term: ended(3, TermEnd::Abandoned(Abandon::Panicked)),
            ..Leadership::default()
        };
        assert_eq!(
            seen.advance(&abandoned),
            [ReplicaEvent::Abandoned {
                term: 3,
                panicked: true
            }]
        );
    }

    fn status(state: WorkerState, restarts: u32) -> BTreeMap<String, WorkerStatus> {
        let name = "sse-relay".to_owned();
        let status = WorkerStatus {
            name: name.clone(),
            state,
            restarts,
            last_exit: Some("panicked: x".into()),
        };
        BTreeMap::from([(name, status)])
    }

    #[test]
    fn worker_restarts_and_exhaustion_are_reported_once() {
        let event = |state: &str| ReplicaEvent::Worker {
            worker: "sse-relay".into(),
            state: state.into(),
            exit: Some("panicked: x".into()),
        };
        let mut seen = SeenWorkers::default();
        assert_eq!(seen.advance(&status(WorkerState::Running, 0)), []);
        assert_eq!(
            seen.advance(&status(WorkerState::Restarting, 0)),
            [event("restarting")]
        );
        assert_eq!(seen.advance(&status(WorkerState::Running, 1)), []);
        // Two restarts came and went unseen: both are reported.
        assert_eq!(
            seen.advance(&status(WorkerState::Restarting, 2)),
            [event("restarting"), event("restarting")]
        );
        assert_eq!(
            seen.advance(&status(WorkerState::Exhausted, 3)),
            [event("exhausted")]
        );
        assert_eq!(seen.advance(&status(WorkerState::Exhausted, 3)), []);
        let mut late = SeenWorkers::default();
        assert_eq!(
            late.advance(&status(WorkerState::Running, 1)),
            [event("restarting")],
            "a restart seen only by its count"
        );
    }
}
