//! The live timeline of `harness up`: the run's timeline and the replicas' events, told as
//! they settle, one readable line each (transitions, faults, steps, the gauges and the pg_locks
//! holder when they change, readiness changes), and the scenario checks run again and again
//! over the history so far, so an invariant violation is printed the moment it shows.
//!
//! ```text
//!     4.212s   21.1T  r2 acquired the lock: term 1, backend 4711
//!     4.260s   21.3T  pg_locks: r2 holds the lock (backend 4711)
//!     4.262s   21.3T  gauges: r1=0 r2=1 r3=0 (sum 1)
//!    11.030s   55.2T  > 1: partition leader
//!    11.034s   55.2T  fault: partition r2
//! ```

use crate::level::Level;
use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::check::{self, Bounds, Check, Facts, Verdict};
use crate::event::ReplicaEvent;
use crate::replica::ReceivedEvent;
use crate::scenario::run::ReplicaEvents;
use crate::timeline::{Entry, Marks, Timeline, What};

/// How often the stream looks for new entries.
const PASS: Duration = Duration::from_millis(100);

/// How long an entry waits before it is told: samplers and event readers race by
/// milliseconds, so what is older than this is settled.
const SETTLE_MS: f64 = 250.0;

/// The live stream; stop it with [`Monitor::stop`].
pub struct Monitor {
    token: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Monitor {
    /// Starts telling `timeline` and the replicas' `events` to `out`, checking the history
    /// with `bounds` as it grows.
    pub fn start(
        timeline: Timeline,
        events: Vec<ReplicaEvents>,
        (bounds, level): (Bounds, Level),
        out: Box<dyn Write + Send>,
    ) -> Monitor {
        let token = CancellationToken::new();
        let watch = Watch::new(timeline, events, (bounds, level), out);
        let task = tokio::spawn(watch.run(token.clone()));
        Monitor { token, task }
    }

    /// Tells what is left and stops.
    pub async fn stop(self) {
        self.token.cancel();
        let _ = self.task.await;
    }
}

/// The stream's state: what it has read and told.
pub struct Watch {
    timeline: Timeline,
    /// Each replica's subscription, and the receive time of the last event read from it.
    events: Vec<(String, broadcast::Receiver<ReceivedEvent>, Option<Instant>)>,
    bounds: Bounds,
    /// What the replica program lets the checks observe.
    level: Level,
    out: Box<dyn Write + Send>,
    /// Replica events read but not yet settled.
    pending: Vec<Entry>,
    /// Every settled entry, in time order: the history the checks read.
    settled: Vec<Entry>,
    /// Entries up to this time are settled.
    cut_ms: f64,
    narration: Narration,
    verdicts: BTreeMap<String, Verdict>,
    /// When the checks may run next (they wait twenty times as long as they took).
    next_check: Instant,
}

impl Watch {
    /// A stream of `timeline` and `events` to `out`.
    pub fn new(
        timeline: Timeline,
        events: Vec<ReplicaEvents>,
        (bounds, level): (Bounds, Level),
        out: Box<dyn Write + Send>,
    ) -> Watch {
        let mut pending = Vec::new();
        let mut subscriptions = Vec::new();
        for ev in events {
            let last = ev.so_far.last().map(|e| e.at);
            pending.extend(
                ev.so_far
                    .into_iter()
                    .map(|e| entry(&timeline, &ev.replica, e)),
            );
            subscriptions.push((ev.replica, ev.live, last));
        }
        Watch {
            timeline,
            events: subscriptions,
            bounds,
            level,
            out,
            pending,
            settled: Vec::new(),
            cut_ms: -1.0,
            narration: Narration::default(),
            verdicts: BTreeMap::new(),
            next_check: Instant::now(),
        }
    }

    async fn run(mut self, token: CancellationToken) {
        let mut tick = tokio::time::interval(PASS);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                () = token.cancelled() => break,
                _ = tick.tick() => {}
            }
            let now_ms = self.timeline.offset(Instant::now()).as_secs_f64() * 1000.0;
            self.pass(now_ms - SETTLE_MS);
        }
        self.pass(f64::INFINITY);
    }

    /// Reads what came, tells what settled up to `cut_ms`, and checks the history when due.
    pub fn pass(&mut self, cut_ms: f64) {
        self.read_events();
        let mut fresh: Vec<Entry> = (self.timeline.entries_after(self.cut_ms).into_iter())
            .filter(|e| e.t_ms <= cut_ms)
            .collect();
        let (settled, pending) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|e| e.t_ms <= cut_ms);
        self.pending = pending;
        fresh.extend::<Vec<Entry>>(settled);
        fresh.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
        for e in &fresh {
            if let Some(line) = self.narration.line(e) {
                self.say(e.t_ms, &line);
            }
        }
        self.settled.extend(fresh);
        if cut_ms.is_finite() {
            self.cut_ms = cut_ms;
            if Instant::now() >= self.next_check {
                self.check();
            }
        }
        let _ = self.out.flush();
    }

    fn read_events(&mut self) {
        for (name, rx, last) in &mut self.events {
            loop {
                match rx.try_recv() {
                    // Already read with the history so far.
                    Ok(ev) if last.is_some_and(|l| ev.at <= l) => {}
                    Ok(ev) => {
                        *last = Some(ev.at);
                        self.pending.push(entry(&self.timeline, name, ev));
                    }
                    Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
                    Err(_) => break,
                }
            }
        }
    }

    /// Runs the scenario checks (the invariants, with no expectation) over the settled
    /// history and tells each that turns invalid.
    fn check(&mut self) {
        let began = Instant::now();
        let (marks, logs) = (Marks::new(), BTreeMap::new());
        let facts = Facts {
            entries: &self.settled,
            rows: &[],
            // Read only after the run.
            work_read: false,
            marks: &marks,
            logs: &logs,
            bounds: self.bounds,
            pooled: &check::expect::NONE_POOLED,
            wire: &check::expect::NO_WIRE,
        };
        let checks = check::scenario(check::Invariants::All, &[], &[], &facts, self.level);
        for c in checks {
            let before = self.verdicts.insert(c.name.clone(), c.verdict);
            if c.verdict == Verdict::Invalid && before != Some(Verdict::Invalid) {
                let at = self.settled.last().map_or(0.0, |e| e.t_ms);
                self.say(at, &violation(&c));
            }
        }
        self.next_check = Instant::now() + began.elapsed() * 20;
    }

    fn say(&mut self, t_ms: f64, line: &str) {
        let t = self.bounds.t.as_secs_f64() * 1000.0;
        let _ = writeln!(
            self.out,
            "{:>9.3}s {:>7.1}T  {line}",
            t_ms / 1000.0,
            t_ms / t
        );
    }
}

/// A replica's event as a timeline entry, at the time the harness read it.
fn entry(timeline: &Timeline, replica: &str, ev: ReceivedEvent) -> Entry {
    Entry {
        t_ms: timeline.offset(ev.at).as_secs_f64() * 1000.0,
        what: What::Replica {
            replica: replica.to_owned(),
            event: ev.line.event,
        },
    }
}

fn violation(c: &Check) -> String {
    format!(
        "!! VIOLATED: {} ({}): {}",
        c.name,
        c.clauses.join(", "),
        c.message
    )
}

/// What the last gauges, locks and readiness said, so only changes are told.
#[derive(Debug, Default)]
struct Narration {
    gauges: Option<BTreeMap<String, Option<i64>>>,
    holders: Option<Vec<(i32, String)>>,
    ready: BTreeMap<String, Option<u16>>,
}

impl Narration {
    /// The line that tells `e`, if it tells anything new.
    fn line(&mut self, e: &Entry) -> Option<String> {
        match &e.what {
            What::Replica { replica, event } => replica_line(replica, event),
            What::Fault {
                verb,
                target,
                lifted,
            } => Some(if *lifted {
                format!("fault lifted: {verb} {target}")
            } else {
                format!("fault: {verb} {target}")
            }),
            What::Step { label, .. } => Some(format!("> {label}")),
            What::Control { replica, switch } => Some(format!(
                "control: {} on {replica}",
                crate::chaos::coverage::Strike::Switch(switch.clone())
            )),
            What::Gauges { values, .. } => self.gauges(values),
            What::Locks { rows } => self.locks(rows),
            What::LockLeft {
                replica,
                pid,
                backend_alive,
            } => Some(if *backend_alive {
                format!("pg_locks: {replica} unlocked (backend {pid} still there)")
            } else {
                format!("pg_locks: {replica}'s lock went with its session (backend {pid} gone)")
            }),
            What::Readiness { status, failing } => self.readiness(status, failing),
            What::Exited {
                replica,
                code,
                signal,
            } => Some(match (code, signal) {
                (Some(code), _) => format!("{replica} exited with status {code}"),
                (_, Some(signal)) => format!("{replica} ended by signal {signal}"),
                _ => format!("{replica} ended (status unknown)"),
            }),
            What::Spawned { replica } => Some(format!("{replica} spawned")),
            What::GaugeLabels { replica, labels } => Some(format!(
                "{replica}'s gauge has labels {labels} (MET-1: the page's has none)"
            )),
            What::Probes { .. }
            | What::ServerClock { .. }
            | What::Wire { .. }
            | What::Log { .. } => None,
        }
    }

    fn gauges(&mut self, values: &BTreeMap<String, Option<i64>>) -> Option<String> {
        if self.gauges.as_ref() == Some(values) {
            return None;
        }
        self.gauges = Some(values.clone());
        let shown: Vec<String> = (values.iter())
            .map(|(r, v)| format!("{r}={}", v.map_or("-".to_owned(), |v| v.to_string())))
            .collect();
        let sum: i64 = values.values().flatten().sum();
        Some(format!("gauges: {} (sum {sum})", shown.join(" ")))
    }

    fn locks(&mut self, rows: &[(i32, bool, String)]) -> Option<String> {
        let granted: Vec<(i32, String)> = (rows.iter())
            .filter(|r| r.1)
            .map(|r| (r.0, r.2.clone()))
            .collect();
        if self.holders.as_ref() == Some(&granted) {
            return None;
        }
        self.holders = Some(granted.clone());
        Some(match granted.as_slice() {
            [] => "pg_locks: nobody holds the lock".to_owned(),
            [(pid, app)] => format!("pg_locks: {app} holds the lock (backend {pid})"),
            many => {
                let all: Vec<String> = many.iter().map(|(p, a)| format!("{a} ({p})")).collect();
                format!("pg_locks: {} granted rows: {}", many.len(), all.join(", "))
            }
        })
    }

    fn readiness(
        &mut self,
        status: &BTreeMap<String, Option<u16>>,
        failing: &BTreeMap<String, Vec<String>>,
    ) -> Option<String> {
        let mut changed = Vec::new();
        for (replica, s) in status {
            if self.ready.insert(replica.clone(), *s) != Some(*s) {
                let why = failing
                    .get(replica)
                    .map(|f| failing_names(f))
                    .unwrap_or_default();
                changed.push(match s {
                    Some(code) if why.is_empty() => format!("{replica} {code}"),
                    Some(code) => format!("{replica} {code} ({why})"),
                    None => format!("{replica} no answer"),
                });
            }
        }
        (!changed.is_empty()).then(|| format!("/readyz: {}", changed.join(", ")))
    }
}

/// The names of failing checks (`name: error` each), at most three and how many more.
fn failing_names(failing: &[String]) -> String {
    let names: Vec<&str> = (failing.iter())
        .map(|f| f.split(':').next().unwrap_or_default())
        .collect();
    match names.len() {
        0..=3 => format!("failing: {}", names.join(", ")),
        n => format!("failing: {} +{} more", names[..3].join(", "), n - 3),
    }
}

/// A replica's transition as a line; events that are not transitions (ticks, boot passes,
/// standby checks) tell nothing.
fn replica_line(replica: &str, event: &ReplicaEvent) -> Option<String> {
    let text = match event {
        ReplicaEvent::Started { pid, elector, .. } => {
            let what = if *elector { "" } else { ", no elector" };
            format!("started (pid {pid}{what})")
        }
        ReplicaEvent::Ready => "ready".to_owned(),
        ReplicaEvent::Acquired { term, backend_pid } => {
            format!("acquired the lock: term {term}, backend {backend_pid}")
        }
        ReplicaEvent::Demoted { term, error } => {
            format!("demoted, term {term} ended: {}", first_line(error))
        }
        ReplicaEvent::Released { term, outcome, .. } => {
            format!("released the lock (term {term}, unlock {outcome:?})")
        }
        ReplicaEvent::Abandoned { term, panicked } => {
            let how = if *panicked {
                "a panic"
            } else {
                "a dropped future"
            };
            format!("abandoned term {term} ({how})")
        }
        ReplicaEvent::Worker {
            worker,
            state,
            exit,
        } => match exit {
            Some(exit) => format!("worker {worker} {state}: {}", first_line(exit)),
            None => format!("worker {worker} {state}"),
        },
        ReplicaEvent::Shutdown => "shutting down".to_owned(),
        _ => return None,
    };
    Some(format!("{replica} {text}"))
}

/// The first line of `text`, at most 120 characters.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::fault::Verb;

    /// A writer whose text the test reads afterwards.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    fn gauges(pairs: &[(&str, Option<i64>)]) -> What {
        What::Gauges {
            values: pairs.iter().map(|(r, v)| ((*r).to_owned(), *v)).collect(),
            asked_ms: None,
        }
    }

    /// The stream tells changes once, faults and transitions as lines, and a gauge sum of 2
    /// outside any overlap of terms as a violation the pass it settles, not before.
    #[tokio::test]
    async fn tells_changes_and_violations_as_they_settle() {
        let timeline = Timeline::new();
        let t0 = timeline.start();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let bounds = Bounds {
            t: Duration::from_millis(100),
            tick: Duration::from_millis(100),
            sample: Duration::from_millis(10),
            slack: Duration::from_millis(5),
        };
        let out = Captured::default();
        let mut watch = Watch::new(
            timeline.clone(),
            Vec::new(),
            (bounds, Level::Events),
            Box::new(out.clone()),
        );
        timeline.record_at(at(10), gauges(&[("r1", Some(1)), ("r2", Some(0))]));
        timeline.record_at(at(20), gauges(&[("r1", Some(1)), ("r2", Some(0))]));
        let fault = What::Fault {
            verb: Verb::Partition,
            target: "r1".into(),
            lifted: false,
        };
        timeline.record_at(at(30), fault);
        watch.pass(25.0);
        assert_eq!(
            out.text(),
            "    0.010s     0.1T  gauges: r1=1 r2=0 (sum 1)\n",
            "told once; the fault is not settled yet"
        );
        timeline.record_at(at(40), gauges(&[("r1", Some(1)), ("r2", Some(1))]));
        // The checks wait twenty times as long as they took; a busy test machine may make that
        // long, so the test makes them due.
        watch.next_check = Instant::now();
        watch.pass(50.0);
        let text = out.text();
        assert!(
            text.contains("0.030s     0.3T  fault: partition r1\n"),
            "{text}"
        );
        assert!(text.contains("gauges: r1=1 r2=1 (sum 2)\n"), "{text}");
        assert!(
            text.contains("!! VIOLATED: gauge sum (MET-1): 1 bad samples, first: sum 2 at 40 ms"),
            "{text}"
        );
        let lines = text.lines().count();
        watch.next_check = Instant::now();
        watch.pass(60.0);
        assert_eq!(
            out.text().lines().count(),
            lines,
            "a violation is told once"
        );
    }
}
