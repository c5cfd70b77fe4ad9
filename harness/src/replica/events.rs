//! The replica's event stream: [`EventLine`]s on stdout, one per line, flushed per line; and the
//! tracing layer that turns the elector's fixed log messages into events.
//!
//! Human-readable logs go to stderr (tracing's fmt layer, filtered by `RUST_LOG`, default
//! `info`); stdout carries nothing but event lines.
//!
//! | elector log line (message prefix, level) | event |
//! |---|---|
//! | `background leader lock held elsewhere` (DEBUG) | `check_refused` |
//! | `leader: acquire lock connection: …` (WARN, `error`) | `check_failed { error }` |
//! | `background leader lock acquired` (INFO, `term`, `backend_pid`) | `acquired { term, backend_pid }` |
//! | `background leader lock lost: …` (WARN, `term`, `error`) | `demoted { term, error }` |
//! | `background leader lock released` (INFO) or `background leader unlock failed…` (WARN) | `released { term }` |
//! | `background leader lock abandoned…` (WARN, after a panic or a dropped run) | `abandoned { term }` |
//! | `worker ended; restarting` (WARN, `worker`, `exit`) | `worker { state: "restarting" }` |
//! | `worker exhausted its restart budget…` (ERROR, `worker`, `exit`) | `worker { state: "exhausted" }` |
//!
//! The replica itself emits `started`, `boot_pass`, `ready`, `tick` (from the leader ticker's
//! `on_tick`, standby ticks left out), `shutdown`, and `worker { state: "stopped" }` for each
//! worker once the supervisor has ended.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Level, Subscriber};
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer;

use crate::event::{EventLine, ReplicaEvent};

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

/// Installs the replica's subscriber: fmt to stderr under `RUST_LOG` (default `info`), and the
/// event layer, which sees the elector's events down to DEBUG whatever `RUST_LOG` says.
pub(crate) fn init_tracing(emitter: Emitter) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_filter(filter);
    let events =
        EventLayer { emitter }.with_filter(Targets::new().with_target("elector", Level::DEBUG));
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(events)
        .try_init();
}

/// Turns the elector's log events into [`ReplicaEvent`]s, matching on the fixed message prefix
/// and reading the structured fields.
struct EventLayer {
    emitter: Emitter,
}

impl<S: Subscriber> Layer<S> for EventLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        if let Some(mapped) = map(&fields) {
            self.emitter.emit(mapped);
        }
    }
}

/// The mapping from the elector's fixed messages to events (see `elector/src/run.rs`,
/// `session.rs`, `supervisor.rs`).
fn map(f: &Fields) -> Option<ReplicaEvent> {
    let msg = f.message.as_str();
    let event = if msg.starts_with("background leader lock held elsewhere") {
        ReplicaEvent::CheckRefused
    } else if msg.starts_with("leader: acquire lock connection:") {
        ReplicaEvent::CheckFailed {
            error: f.text("error").unwrap_or_else(|| {
                msg.trim_start_matches("leader: acquire lock connection:")
                    .trim()
                    .to_owned()
            }),
        }
    } else if msg.starts_with("background leader lock acquired") {
        ReplicaEvent::Acquired {
            term: f.u64("term")?,
            backend_pid: i32::try_from(f.i64("backend_pid")?).ok()?,
        }
    } else if msg.starts_with("background leader lock lost") {
        ReplicaEvent::Demoted {
            term: f.u64("term")?,
            error: f.text("error").unwrap_or_default(),
        }
    } else if msg.starts_with("background leader lock released")
        || msg.starts_with("background leader unlock failed")
    {
        // A failed unlock still releases: the session is closed right after, and the server
        // drops the lock with it.
        ReplicaEvent::Released {
            term: f.u64("term")?,
        }
    } else if msg.starts_with("background leader lock abandoned") {
        ReplicaEvent::Abandoned {
            term: f.u64("term")?,
        }
    } else if msg.starts_with("worker ended; restarting") {
        ReplicaEvent::Worker {
            worker: f.text("worker")?,
            state: "restarting".to_owned(),
            exit: f.text("exit"),
        }
    } else if msg.starts_with("worker exhausted its restart budget") {
        ReplicaEvent::Worker {
            worker: f.text("worker")?,
            state: "exhausted".to_owned(),
            exit: f.text("exit"),
        }
    } else {
        return None;
    };
    Some(event)
}

/// The fields of one event, as text and, where recorded so, as numbers.
#[derive(Default, Debug)]
struct Fields {
    message: String,
    text: BTreeMap<&'static str, String>,
    unsigned: BTreeMap<&'static str, u64>,
    signed: BTreeMap<&'static str, i64>,
}

impl Fields {
    fn text(&self, name: &str) -> Option<String> {
        self.text.get(name).cloned()
    }

    fn u64(&self, name: &str) -> Option<u64> {
        self.unsigned
            .get(name)
            .copied()
            .or_else(|| self.signed.get(name).and_then(|v| u64::try_from(*v).ok()))
            .or_else(|| self.text.get(name).and_then(|v| v.parse().ok()))
    }

    fn i64(&self, name: &str) -> Option<i64> {
        self.signed
            .get(name)
            .copied()
            .or_else(|| self.unsigned.get(name).and_then(|v| i64::try_from(*v).ok()))
            .or_else(|| self.text.get(name).and_then(|v| v.parse().ok()))
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = text;
        } else {
            self.text.insert(field.name(), text);
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            self.text.insert(field.name(), value.to_owned());
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.unsigned.insert(field.name(), value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.signed.insert(field.name(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(message: &str, pairs: &[(&'static str, &str)]) -> Fields {
        let mut f = Fields {
            message: message.to_owned(),
            ..Fields::default()
        };
        for (k, v) in pairs {
            f.text.insert(k, (*v).to_owned());
        }
        f
    }

    #[test]
    fn maps_the_elector_messages() {
        let mut acquired = fields("background leader lock acquired", &[]);
        acquired.unsigned.insert("term", 3);
        acquired.signed.insert("backend_pid", 77);
        assert_eq!(
            map(&acquired),
            Some(ReplicaEvent::Acquired {
                term: 3,
                backend_pid: 77
            })
        );
        let failed = fields(
            "leader: acquire lock connection: pool: timed out",
            &[("error", "pool: timed out")],
        );
        assert_eq!(
            map(&failed),
            Some(ReplicaEvent::CheckFailed {
                error: "pool: timed out".into()
            })
        );
        let mut lost = fields(
            "background leader lock lost: no answer",
            &[("error", "no answer")],
        );
        lost.unsigned.insert("term", 2);
        assert_eq!(
            map(&lost),
            Some(ReplicaEvent::Demoted {
                term: 2,
                error: "no answer".into()
            })
        );
        let mut abandoned = fields("background leader lock abandoned after a panic", &[]);
        abandoned.unsigned.insert("term", 1);
        assert_eq!(map(&abandoned), Some(ReplicaEvent::Abandoned { term: 1 }));
        let exhausted = fields(
            "worker exhausted its restart budget and stays down",
            &[("worker", "audit-archiver"), ("exit", "panicked: x")],
        );
        assert_eq!(
            map(&exhausted),
            Some(ReplicaEvent::Worker {
                worker: "audit-archiver".into(),
                state: "exhausted".into(),
                exit: Some("panicked: x".into())
            })
        );
        assert_eq!(map(&fields("background leader check passed", &[])), None);
    }
}
