//! The timeline of a run: the replicas' events, the faults, and the observers' samples, merged
//! in the order the harness saw them, with monotonic times relative to the run's start
//! (Jepsen's history: faults are entries of the same history as the replicas' transitions).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::event::ReplicaEvent;
use crate::fault::Verb;

/// One entry of the timeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Milliseconds since the run's start (monotonic clock of the harness).
    pub t_ms: f64,
    /// What happened.
    #[serde(flatten)]
    pub what: What,
}

/// What an entry records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum What {
    /// A replica's event, stamped when the harness read it.
    Replica {
        /// The replica.
        replica: String,
        /// The event.
        event: ReplicaEvent,
    },
    /// A fault applied or lifted (`lifted` false when applied).
    Fault {
        /// The verb, e.g. `partition`.
        verb: Verb,
        /// The replica or service it targets.
        target: String,
        /// Whether this entry lifts the fault.
        lifted: bool,
    },
    /// One sample of every replica's gauge (`None`: unreachable, e.g. frozen or dead).
    Gauges {
        /// Replica → gauge value.
        values: BTreeMap<String, Option<i64>>,
        /// When the oldest of these values was asked for (ms on the run's clock): each shows
        /// its replica at some moment between then and this entry's time (`None`: at it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        asked_ms: Option<f64>,
    },
    /// One run of the spec's leader-finding query: the granted rows' holders.
    Locks {
        /// `(pid, granted, application_name)` per row.
        rows: Vec<(i32, bool, String)>,
    },
    /// A backend's granted lock row left pg_locks, and whether that backend still existed then:
    /// alive means an unlock (RUN-6); gone means its session ended (a close, a kill, the
    /// server's idle_session_timeout, a restart).
    LockLeft {
        /// The replica whose session held it (its `application_name`).
        replica: String,
        /// The backend.
        pid: i32,
        /// Whether the backend was still in pg_stat_activity when the row was seen gone.
        backend_alive: bool,
    },
    /// A replica's gauge carries labels (the page's has none: MET-1), when first seen and
    /// whenever they change; its value is read all the same.
    GaugeLabels {
        /// The replica.
        replica: String,
        /// Its label set as served, e.g. `{replica="r1"}`.
        labels: String,
    },
    /// The harness spawned a replica's process (RUN-1: its first check is timed from here).
    Spawned {
        /// The replica.
        replica: String,
    },
    /// A replica's process ended, when the harness reaped it (RUN-6: after SIGTERM it must
    /// exit by itself, with status 0).
    Exited {
        /// The replica.
        replica: String,
        /// Its exit code, when it exited by itself.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<i32>,
        /// The signal that ended it, when one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
    },
    /// One line of a replica's log (its stderr, and its stdout below level 3), when the
    /// harness read it: the spec's log lines are clauses of their own (RUN-4, DEM-1).
    Log {
        /// The replica.
        replica: String,
        /// The line.
        line: String,
    },
    /// One sample of every replica's `/readyz` status (`None`: unreachable).
    Readiness {
        /// Replica → HTTP status.
        status: BTreeMap<String, Option<u16>>,
        /// Replica → the checks that do not pass, each as `name: error` (READY-2, READY-4).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        failing: BTreeMap<String, Vec<String>>,
    },
    /// The names of a replica's `/readyz` checks, recorded when first seen and whenever they
    /// change (READY-5).
    Probes {
        /// The replica.
        replica: String,
        /// Its check names, in registration order.
        names: Vec<String>,
    },
    /// One reading of the server's clock (`clock_timestamp()`, ms since the Unix epoch), asked
    /// at `asked_ms` on the run's clock and answered at the entry's time. `leader_work` rows
    /// carry the server's time; these readings put them on the run's clock even when the host's
    /// wall clock is slewed or stepped during the run ([`server_time_on_run_clock`]).
    ServerClock {
        /// What the server's clock read.
        epoch_ms: f64,
        /// When the reading was asked for (ms on the run's clock).
        asked_ms: f64,
    },
    /// What a replica said to the database or was told, as its proxy read it off the wire
    /// ([`wiretap`]), at the moment the proxy read it.
    Wire {
        /// The replica (its proxy's name).
        replica: String,
        /// The connection, numbered per proxy from 1.
        conn: u64,
        /// What happened on it.
        #[serde(flatten)]
        event: wiretap::WireEvent,
    },
    /// The harness set a fault switch on a replica (its `POST /control`: a loop's or a
    /// supervised worker's next runs fail, crash or exit, or run normally again), when the
    /// replica took it.
    Control {
        /// The replica.
        replica: String,
        /// The switch.
        switch: crate::replica::control::Switch,
    },
    /// A scenario step began (for the reader of the timeline).
    Step {
        /// The step, as written in the scenario.
        label: String,
        /// Whether the step acts at once (a fault, heal, control or sql step) rather than
        /// waiting or sleeping.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        acts: bool,
    },
}

/// A timeline shared by the samplers, the event readers and the runner.
#[derive(Clone, Debug)]
pub struct Timeline {
    start: Instant,
    entries: Arc<Mutex<Vec<Entry>>>,
}

impl Timeline {
    /// An empty timeline whose clock starts now.
    pub fn new() -> Self {
        Self::starting_at(Instant::now())
    }

    /// An empty timeline whose clock started at `start`.
    pub fn starting_at(start: Instant) -> Self {
        Self {
            start,
            entries: Arc::default(),
        }
    }

    /// The run's start.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// The time since the start of the run of `at`.
    pub fn offset(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.start)
    }

    /// Records `what` as seen at `at`.
    pub fn record_at(&self, at: Instant, what: What) {
        let entry = Entry {
            t_ms: self.offset(at).as_secs_f64() * 1000.0,
            what,
        };
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        // Keep the order by time: samplers and readers race by microseconds.
        let pos = entries
            .iter()
            .rposition(|e| e.t_ms <= entry.t_ms)
            .map_or(0, |p| p + 1);
        entries.insert(pos, entry);
    }

    /// Records `what` now.
    pub fn record(&self, what: What) {
        self.record_at(Instant::now(), what);
    }

    /// A copy of the entries later than `t_ms`, in time order.
    pub fn entries_after(&self, t_ms: f64) -> Vec<Entry> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let from = entries.partition_point(|e| e.t_ms <= t_ms);
        entries[from..].to_vec()
    }

    /// A copy of every entry so far, in time order.
    pub fn entries(&self) -> Vec<Entry> {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Default for Timeline {
    fn default() -> Self {
        Self::new()
    }
}

/// A moment a scenario step named with `as`: whom it concerned and when it took effect.
#[derive(Clone, Debug, PartialEq)]
pub struct Mark {
    /// The replica it concerned: a fault's or control's target, the leader a wait saw; empty
    /// when none.
    pub target: String,
    /// When it took effect (ms since the run's start): a fault's call returned, a wait's
    /// condition held, a sleep ended.
    pub at_ms: f64,
    /// When the step began: a fault's call can take a while (a server restart) and its
    /// effects can show before it returns.
    pub began_ms: f64,
}

/// The readings of the server's clock in `entries` ([`What::ServerClock`]), each as
/// `(run_ms, epoch_ms)`: its moment on the run's clock (the middle of its round trip) and what
/// the server's clock read.
pub fn server_clock_readings(entries: &[Entry]) -> Vec<(f64, f64)> {
    (entries.iter())
        .filter_map(|e| match e.what {
            What::ServerClock { epoch_ms, asked_ms } => Some(((asked_ms + e.t_ms) / 2.0, epoch_ms)),
            _ => None,
        })
        .collect()
}

/// A server time (`epoch_ms`, ms since the Unix epoch) on the run's clock, by the latest of
/// `readings` ([`server_clock_readings`]) at or before it (the earliest for a time before them
/// all): the reading's moment plus the time the server's clock moved on since. `None` without
/// readings. The server shares the host's wall clock, which may be slewed (this machine's was,
/// by 1 ms/s after boot) or stepped during a run; a single reading at the start mapped every
/// later row by the same offset and so misplaced them.
pub fn server_time_on_run_clock(readings: &[(f64, f64)], epoch_ms: f64) -> Option<f64> {
    let latest = (readings.iter()).rfind(|(_, at)| *at <= epoch_ms);
    latest
        .or(readings.first())
        .map(|(run_ms, at)| run_ms + (epoch_ms - at))
}

/// The named moments of a run, by their `as` names.
pub type Marks = BTreeMap<String, Mark>;

/// One fault from the entry that applied it to the entry that lifted it (`lifted_ms` is `None`
/// when the run ended with it in place). A fault applied again before it was lifted restarts its
/// span.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultSpan {
    /// The verb, e.g. `freeze`.
    pub verb: Verb,
    /// The replica or service it targeted.
    pub target: String,
    /// When it was applied (ms since the run's start).
    pub applied_ms: f64,
    /// When it was lifted, if it was.
    pub lifted_ms: Option<f64>,
}

/// The fault spans of a timeline: the lifted ones in the order they were lifted, then those
/// still in place by verb and target.
pub fn fault_spans(entries: &[Entry]) -> Vec<FaultSpan> {
    let mut open: BTreeMap<(Verb, String), f64> = BTreeMap::new();
    let mut spans = Vec::new();
    for e in entries {
        let What::Fault {
            verb,
            target,
            lifted,
        } = &e.what
        else {
            continue;
        };
        let key = (*verb, target.clone());
        if !*lifted {
            open.insert(key, e.t_ms);
        } else if let Some(applied_ms) = open.remove(&key) {
            spans.push(FaultSpan {
                verb: *verb,
                target: target.clone(),
                applied_ms,
                lifted_ms: Some(e.t_ms),
            });
        }
    }
    let mut in_place: Vec<FaultSpan> = open
        .into_iter()
        .map(|((verb, target), applied_ms)| FaultSpan {
            verb,
            target,
            applied_ms,
            lifted_ms: None,
        })
        .collect();
    in_place.sort_by_cached_key(|f| (f.verb.to_string(), f.target.clone()));
    spans.extend(in_place);
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_stay_in_time_order_and_serialise() {
        let tl = Timeline::new();
        let t0 = tl.start();
        tl.record_at(
            t0 + Duration::from_millis(20),
            What::Step {
                label: "b".into(),
                acts: false,
            },
        );
        tl.record_at(
            t0 + Duration::from_millis(10),
            What::Step {
                label: "a".into(),
                acts: false,
            },
        );
        tl.record_at(
            t0 + Duration::from_millis(30),
            What::Fault {
                verb: Verb::Partition,
                target: "r1".into(),
                lifted: false,
            },
        );
        let labels: Vec<f64> = tl.entries().iter().map(|e| e.t_ms).collect();
        assert_eq!(labels, vec![10.0, 20.0, 30.0]);
        let json = serde_json::to_string(&tl.entries()[2]).unwrap();
        assert_eq!(
            json,
            r#"{"t_ms":30.0,"kind":"fault","verb":"partition","target":"r1","lifted":false}"#
        );
    }

    /// The host's wall clock stepped 30 s forward at 8.5 s into a chaos run (seed 9): mapped by
    /// one reading at the start, every later `leader_work` row sat 30 s late, and 1616 rows
    /// looked written outside their terms.
    #[test]
    fn server_times_follow_the_latest_clock_reading_across_a_step() {
        let reading = |t_ms: f64, epoch_ms: f64| Entry {
            t_ms,
            what: What::ServerClock {
                epoch_ms,
                asked_ms: t_ms - 2.0,
            },
        };
        let e0 = 1_000_000.0;
        let entries = [
            reading(2.0, e0),
            reading(8_002.0, e0 + 8_000.0),
            // Stepped 30 s forward between these two readings.
            reading(9_002.0, e0 + 39_000.0),
        ];
        let readings = server_clock_readings(&entries);
        let on_run = |epoch| server_time_on_run_clock(&readings, epoch).unwrap();
        assert_eq!(on_run(e0 + 500.0), 501.0);
        assert_eq!(on_run(e0 + 8_100.0), 8_101.0);
        assert_eq!(on_run(e0 + 39_100.0), 9_101.0);
        // Before the first reading: by the first reading.
        assert_eq!(on_run(e0 - 100.0), -99.0);
        assert_eq!(server_time_on_run_clock(&[], e0), None);
    }

    #[test]
    fn faults_pair_with_their_lifts() {
        let fault = |t_ms: f64, verb: Verb, target: &str, lifted: bool| Entry {
            t_ms,
            what: What::Fault {
                verb,
                target: target.into(),
                lifted,
            },
        };
        let spans = fault_spans(&[
            fault(1.0, Verb::Freeze, "a", false),
            fault(2.0, Verb::Partition, "b", false),
            fault(3.0, Verb::Freeze, "a", true),
            fault(4.0, Verb::Partition, "a", true),
        ]);
        let got: Vec<(Verb, &str, f64, Option<f64>)> = spans
            .iter()
            .map(|f| (f.verb, f.target.as_str(), f.applied_ms, f.lifted_ms))
            .collect();
        // A lift of a fault never applied pairs with nothing.
        assert_eq!(
            got,
            vec![
                (Verb::Freeze, "a", 1.0, Some(3.0)),
                (Verb::Partition, "b", 2.0, None)
            ]
        );
    }
}
