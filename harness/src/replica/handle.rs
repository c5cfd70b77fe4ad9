//! The parent side of a replica process: spawn it, read its event stream, signal it like a pod,
//! and query its HTTP API.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use std::time::Duration;
//! use harness::replica::{ReplicaProcess, ReplicaSpec};
//!
//! let spec = ReplicaSpec::new("r1", Duration::from_millis(200))
//!     .dsn("postgres://postgres:postgres@127.0.0.1:5432/plexsphere");
//! let mut r1 = ReplicaProcess::spawn(std::path::Path::new("target/debug/harness"), spec).await?;
//! println!("{} serves on {}", r1.name(), r1.base_url());
//! r1.sigterm()?;
//! let status = r1.wait().await?;
//! # Ok(()) }
//! ```

use std::collections::VecDeque;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use nix::sys::signal::Signal;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::api::{ControlReply, ControlRequest, LeaderInfo, ReadyReport, WorkerInfo};
use super::control::{LoopMode, WorkerMode};
use super::program::Program;
use super::reaper::{Exit, Exits, Reaper};
use crate::event::{EventLine, ReplicaEvent};
use crate::topology::cleanup::Registration;

mod spec;
mod start;

pub use spec::ReplicaSpec;
use start::start;
pub use start::LEVEL0_SETTLE;

/// How long an HTTP call to a replica may take: short, so a SIGSTOPped replica cannot hang the
/// caller.
pub const HTTP_TIMEOUT: Duration = Duration::from_millis(500);

/// How long [`ReplicaProcess::restart`] goes on starting a replica that exits at boot (a
/// server stopped for longer than the program's own boot patience, the harness replica's 5 s,
/// with a pooler that holds off its logins for a while after).
pub const RESTART_PATIENCE: Duration = Duration::from_secs(30);

/// The pause between two of those starts, as an orchestrator's first restart backoff.
pub const RESTART_BACKOFF: Duration = Duration::from_secs(1);

/// How many lines of a replica's stderr are kept for error messages.
const STDERR_TAIL: usize = 40;

/// How many events a slow [`ReplicaProcess::events`] subscriber may lag behind.
const EVENT_CAPACITY: usize = 16_384;

/// One event line with the harness's own monotonic receive time.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceivedEvent {
    /// When the harness read the line.
    pub at: Instant,
    /// The line.
    pub line: EventLine,
}

impl ReceivedEvent {
    /// The event.
    pub fn event(&self) -> &ReplicaEvent {
        &self.line.event
    }
}

/// Every event received from a replica (across restarts), with a counter to wait on.
#[derive(Clone, Debug)]
struct History {
    events: Arc<Mutex<Vec<ReceivedEvent>>>,
    count: watch::Sender<usize>,
    sender: broadcast::Sender<ReceivedEvent>,
    /// How each incarnation ended, when the harness reaped it.
    exits: Exits,
    /// Every line of its log (stderr, and stdout below level 3), with when the harness read it.
    lines: Lines,
    /// When the harness spawned each of its processes (RUN-1 times the first check from it).
    spawns: Arc<Mutex<Vec<Instant>>>,
}

/// A replica's log lines, each with when the harness read it.
type Lines = Arc<Mutex<Vec<(Instant, String)>>>;

impl History {
    fn new() -> Self {
        Self {
            events: Arc::default(),
            count: watch::Sender::new(0),
            sender: broadcast::Sender::new(EVENT_CAPACITY),
            exits: Exits::default(),
            lines: Lines::default(),
            spawns: Arc::default(),
        }
    }

    fn push(&self, event: ReceivedEvent) {
        let n = {
            let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
            events.push(event.clone());
            events.len()
        };
        let _ = self.sender.send(event);
        self.count.send_replace(n);
    }

    fn find_from(
        &self,
        from: usize,
        pred: &mut impl FnMut(&ReplicaEvent) -> bool,
    ) -> Option<(usize, ReceivedEvent)> {
        let events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        events
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, e)| pred(&e.line.event))
            .map(|(i, e)| (i, e.clone()))
    }
}

/// The running child and what reads its pipes.
#[derive(Debug)]
struct Incarnation {
    /// Owns the child and sees it exit.
    child: Reaper,
    pid: u32,
    http: String,
    elector: bool,
    /// Set by the stdout reader when the child's stdout closed.
    eof: watch::Receiver<bool>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    readers: Vec<JoinHandle<()>>,
    /// The child's pid in the signal guard's registry while this lives: a SIGINT or SIGTERM of
    /// the harness kills it (a program other than ours does not die with its parent).
    _registered: Registration,
}

/// A replica process started by the harness. Dropping it SIGKILLs and reaps the child.
#[derive(Debug)]
pub struct ReplicaProcess {
    program: Program,
    spec: ReplicaSpec,
    history: History,
    http: reqwest::Client,
    current: Incarnation,
}

impl ReplicaProcess {
    /// Starts `binary replica ...` per `spec` and waits for its `started` event.
    ///
    /// # Errors
    /// The binary cannot be started, or the child exits or stays silent for
    /// `spec.start_timeout` before `started`; the error carries the tail of its stderr.
    pub async fn spawn(binary: &Path, spec: ReplicaSpec) -> anyhow::Result<ReplicaProcess> {
        Self::spawn_program(Program::Ours(binary.to_owned()), spec).await
    }

    /// Starts `program` for `spec` and waits until it has started, as its level shows it: the
    /// `started` event (level 3), `/metrics` serving the gauge (levels 1 and 2), or the process
    /// still running after [`LEVEL0_SETTLE`] (level 0).
    ///
    /// # Errors
    /// The program cannot be started, exits early, or does not show it started within
    /// `spec.start_timeout` (the error names the replica and what was expected, with the tail of
    /// its output); or `spec` asks for a flag only this harness's own replica takes.
    pub async fn spawn_program(
        program: Program,
        spec: ReplicaSpec,
    ) -> anyhow::Result<ReplicaProcess> {
        let mut spec = spec;
        if !program.is_ours() && spec.listen().ends_with(":0") {
            // Another program cannot report the port it bound: give it one.
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            spec.http = Some(format!("127.0.0.1:{port}"));
        }
        let history = History::new();
        let http = reqwest::Client::builder()
            .timeout(HTTP_TIMEOUT)
            .connect_timeout(HTTP_TIMEOUT)
            .no_proxy()
            .build()
            .context("the HTTP client")?;
        let current = start(&program, &spec, &history, &http).await?;
        Ok(ReplicaProcess {
            program,
            spec,
            history,
            http,
            current,
        })
    }

    /// Starts the replica again with the same spec, after SIGKILLing the running child if it
    /// still runs. The event history and the [`events`](Self::events) subscribers carry on.
    /// A new process that fails to start (it exits at boot: the server or the pooler in front
    /// of it still refuses it) is started again every [`RESTART_BACKOFF`] for up to
    /// [`RESTART_PATIENCE`], as an orchestrator restarts a pod that crashes at boot; each
    /// attempt's exit is kept ([`exits`](Self::exits)).
    ///
    /// # Errors
    /// As [`spawn`](Self::spawn), when no attempt started within [`RESTART_PATIENCE`].
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        if self.is_running() {
            self.sigkill()?;
        }
        self.wait().await?;
        let deadline = Instant::now() + RESTART_PATIENCE;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            match start(&self.program, &self.spec, &self.history, &self.http).await {
                Ok(incarnation) => {
                    self.current = incarnation;
                    return Ok(());
                }
                Err(e) if Instant::now() + RESTART_BACKOFF < deadline => {
                    crate::topology::cleanup::refuse_if_closing(&format!(
                        "replica {}",
                        self.spec.name
                    ))?;
                    tracing::warn!(replica = %self.spec.name, attempt = attempts, "restarted replica did not start; starting it again: {e:#}");
                    tokio::time::sleep(RESTART_BACKOFF).await;
                }
                Err(e) => {
                    return Err(e.context(format!(
                        "{attempts} attempts to restart it within {RESTART_PATIENCE:?}"
                    )))
                }
            }
        }
    }

    /// The replica's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The spec it was started with.
    pub fn spec(&self) -> &ReplicaSpec {
        &self.spec
    }

    /// The program it runs.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The OS process id of the running child.
    pub fn pid(&self) -> u32 {
        self.current.pid
    }

    /// `host:port` of its HTTP server.
    pub fn http_addr(&self) -> &str {
        &self.current.http
    }

    /// `http://host:port`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.current.http)
    }

    /// Whether it runs an elector (it was given a DSN), as its `started` event said.
    pub fn has_elector(&self) -> bool {
        self.current.elector
    }

    /// A subscription to the events received from now on (with their receive time).
    pub fn events(&self) -> broadcast::Receiver<ReceivedEvent> {
        self.history.sender.subscribe()
    }

    /// Every event received so far, across restarts.
    pub fn history(&self) -> Vec<ReceivedEvent> {
        self.history
            .events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How many events were received so far: a mark for [`wait_for_event`](Self::wait_for_event).
    pub fn history_len(&self) -> usize {
        *self.history.count.borrow()
    }

    /// The first event at index `from` or later of the history that satisfies `pred`, waiting
    /// for it at most `within`; returns its index and the event.
    ///
    /// # Errors
    /// No such event within `within`.
    pub async fn wait_for_event(
        &self,
        from: usize,
        within: Duration,
        mut pred: impl FnMut(&ReplicaEvent) -> bool,
    ) -> anyhow::Result<(usize, ReceivedEvent)> {
        let deadline = Instant::now() + within;
        let mut count = self.history.count.subscribe();
        loop {
            count.borrow_and_update();
            if let Some(found) = self.history.find_from(from, &mut pred) {
                return Ok(found);
            }
            if tokio::time::timeout_at(deadline, count.changed())
                .await
                .is_err()
            {
                bail!(
                    "replica {}: no matching event within {within:?} (from #{from}); stderr tail:\n{}",
                    self.spec.name,
                    self.stderr_tail()
                );
            }
        }
    }

    /// The last lines the child wrote to stderr.
    pub fn stderr_tail(&self) -> String {
        tail_text(&self.current.stderr_tail)
    }

    /// Sends `signal` to the running child; a no-op once it has exited.
    ///
    /// # Errors
    /// The signal could not be sent.
    pub fn signal(&mut self, signal: Signal) -> anyhow::Result<()> {
        (self.current.child.signal(signal))
            .with_context(|| format!("kill -{signal} {} ({})", self.current.pid, self.spec.name))
    }

    /// SIGKILL: the process dies at once; its sockets close.
    ///
    /// # Errors
    /// As [`signal`](Self::signal).
    pub fn sigkill(&mut self) -> anyhow::Result<()> {
        self.signal(Signal::SIGKILL)
    }

    /// SIGSTOP: the process freezes; its sockets stay open.
    ///
    /// # Errors
    /// As [`signal`](Self::signal).
    pub fn sigstop(&mut self) -> anyhow::Result<()> {
        self.signal(Signal::SIGSTOP)
    }

    /// SIGCONT: a frozen process resumes.
    ///
    /// # Errors
    /// As [`signal`](Self::signal).
    pub fn sigcont(&mut self) -> anyhow::Result<()> {
        self.signal(Signal::SIGCONT)
    }

    /// SIGTERM: a graceful shutdown (the elector unlocks, RUN-6).
    ///
    /// # Errors
    /// As [`signal`](Self::signal).
    pub fn sigterm(&mut self) -> anyhow::Result<()> {
        self.signal(Signal::SIGTERM)
    }

    /// Whether the child still runs.
    pub fn is_running(&self) -> bool {
        self.current.child.exited().is_none()
    }

    /// How each of this replica's processes ended (across restarts), with the harness's time of
    /// each exit, in order.
    pub fn exits(&self) -> Vec<Exit> {
        self.history
            .exits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// When the harness spawned each of its processes (across restarts), in order.
    pub fn spawns(&self) -> Vec<Instant> {
        (self.history.spawns.lock())
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Every line of its log so far (across restarts), with when the harness read it.
    pub fn log_lines(&self) -> Vec<(Instant, String)> {
        (self.history.lines.lock())
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits for the child to exit and for its pipes to be read to the end.
    ///
    /// # Errors
    /// Waiting failed.
    pub async fn wait(&mut self) -> anyhow::Result<ExitStatus> {
        let exit = self.current.child.wait().await;
        for reader in self.current.readers.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
        }
        exit.status.context("waiting for the replica")
    }

    /// [`wait`](Self::wait) for at most `within`; `None` when the child still runs.
    ///
    /// # Errors
    /// Waiting failed.
    pub async fn wait_timeout(&mut self, within: Duration) -> anyhow::Result<Option<ExitStatus>> {
        match tokio::time::timeout(within, self.wait()).await {
            Ok(r) => r.map(Some),
            Err(_) => Ok(None),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.current.http)
    }

    /// The text of `/metrics`.
    ///
    /// # Errors
    /// No answer within [`HTTP_TIMEOUT`], or an HTTP error.
    pub async fn metrics_text(&self) -> anyhow::Result<String> {
        let r = self.http.get(self.url("/metrics")).send().await?;
        Ok(r.error_for_status()?.text().await?)
    }

    /// The value of `plexsphere_background_leader` on `/metrics`, or `None` when the replica
    /// has no such gauge or does not answer within [`HTTP_TIMEOUT`] (see
    /// [`try_metrics_gauge`](Self::try_metrics_gauge) to tell the two apart).
    pub async fn metrics_gauge(&self) -> Option<i64> {
        self.try_metrics_gauge().await.ok().flatten()
    }

    /// The value of the gauge: `Ok(None)` when the replica answers without it, `Err` when it
    /// does not answer.
    ///
    /// # Errors
    /// As [`metrics_text`](Self::metrics_text).
    pub async fn try_metrics_gauge(&self) -> anyhow::Result<Option<i64>> {
        gauge_value(&self.metrics_text().await?, facts::spec::GAUGE)
            .map_err(|e| anyhow!("replica {}: /metrics: {e}", self.spec.name))
    }

    /// `/readyz`: the status code (200 or 503) and the body.
    ///
    /// # Errors
    /// No answer within [`HTTP_TIMEOUT`].
    pub async fn readyz(&self) -> anyhow::Result<(u16, String)> {
        let r = self.http.get(self.url("/readyz")).send().await?;
        let status = r.status().as_u16();
        Ok((status, r.text().await?))
    }

    /// `/readyz`, parsed.
    ///
    /// # Errors
    /// No answer within [`HTTP_TIMEOUT`], or a body that is not a [`ReadyReport`].
    pub async fn ready_report(&self) -> anyhow::Result<(u16, ReadyReport)> {
        let (status, body) = self.readyz().await?;
        let report = serde_json::from_str(&body)
            .with_context(|| format!("/readyz answered {status} with {body:?}"))?;
        Ok((status, report))
    }

    /// `/workers`.
    ///
    /// # Errors
    /// No answer within [`HTTP_TIMEOUT`], or an unexpected body.
    pub async fn workers(&self) -> anyhow::Result<Vec<WorkerInfo>> {
        let r = self.http.get(self.url("/workers")).send().await?;
        Ok(r.error_for_status()?.json().await?)
    }

    /// `/leader`.
    ///
    /// # Errors
    /// No answer within [`HTTP_TIMEOUT`], or an unexpected body.
    pub async fn leader(&self) -> anyhow::Result<LeaderInfo> {
        let r = self.http.get(self.url("/leader")).send().await?;
        Ok(r.error_for_status()?.json().await?)
    }

    /// `POST /control` with any JSON body: the status code and the body of the answer.
    ///
    /// # Errors
    /// No answer within [`HTTP_TIMEOUT`].
    pub async fn control(&self, body: &serde_json::Value) -> anyhow::Result<(u16, String)> {
        let r = self
            .http
            .post(self.url("/control"))
            .json(body)
            .send()
            .await?;
        let status = r.status().as_u16();
        Ok((status, r.text().await?))
    }

    /// Makes `loop_name`'s next passes fail, panic, or run normally again.
    ///
    /// # Errors
    /// No answer, or the replica refused (e.g. an unknown loop: 404).
    pub async fn set_loop_mode(&self, loop_name: &str, mode: LoopMode) -> anyhow::Result<()> {
        self.control_typed(ControlRequest {
            loop_name: Some(loop_name.to_owned()),
            worker: None,
            mode: mode_text(&mode)?,
        })
        .await
    }

    /// Makes the worker `worker` crash, exit, crash on every run, or run normally again.
    ///
    /// # Errors
    /// No answer, or the replica refused (e.g. an unknown worker: 404).
    pub async fn set_worker_mode(&self, worker: &str, mode: WorkerMode) -> anyhow::Result<()> {
        self.control_typed(ControlRequest {
            loop_name: None,
            worker: Some(worker.to_owned()),
            mode: mode_text(&mode)?,
        })
        .await
    }

    async fn control_typed(&self, req: ControlRequest) -> anyhow::Result<()> {
        let (status, body) = self.control(&serde_json::to_value(&req)?).await?;
        let reply: Option<ControlReply> = serde_json::from_str(&body).ok();
        if status == 200 {
            return Ok(());
        }
        Err(anyhow!(
            "replica {}: /control answered {status}: {}",
            self.spec.name,
            reply.map_or(body, |r| r.message)
        ))
    }
}

fn mode_text(mode: &impl serde::Serialize) -> anyhow::Result<String> {
    match serde_json::to_value(mode)? {
        serde_json::Value::String(s) => Ok(s),
        other => Err(anyhow!("unexpected mode {other}")),
    }
}

/// One reading of a gauge in Prometheus text: its value, and its labels when its sample
/// carries any (the spec's gauge has none: MET-1 fails a labelled one, and the value still
/// counts for the other clauses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GaugeReading {
    /// The sample's value, truncated to an integer (the gauge is 0 or 1).
    pub value: i64,
    /// The sample's label set as written (`{replica="r1"}`), when it has one.
    pub labels: Option<String>,
}

/// The value of the gauge `name` in Prometheus text, or `None` when no sample of it is there;
/// `Err` names a sample whose value is not a number, or a second series of it (the spec's
/// gauge is one series). See [`gauge_reading`] for its labels.
pub fn gauge_value(text: &str, name: &str) -> Result<Option<i64>, String> {
    gauge_reading(text, name).map(|r| r.map(|r| r.value))
}

/// The one sample of the gauge `name` in Prometheus text, with its labels, or `None` when
/// there is none. Written by hand: the contract needs this one sample read strictly, and a
/// malformed line named, where a general parser would skip it.
pub fn gauge_reading(text: &str, name: &str) -> Result<Option<GaugeReading>, String> {
    let mut found: Option<(GaugeReading, &str)> = None;
    for line in text.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (labels, rest) = match rest.strip_prefix('{') {
            Some(inner) => {
                let close = inner
                    .rfind('}')
                    .ok_or_else(|| format!("malformed gauge sample {line:?}: no closing brace"))?;
                (
                    Some(format!("{{{}}}", &inner[..close])),
                    &inner[close + 1..],
                )
            }
            None => (None, rest),
        };
        if !rest.starts_with([' ', '\t']) {
            continue; // another metric whose name starts with this one
        }
        if let Some((_, first)) = found {
            return Err(format!(
                "the gauge has more than one series ({first:?}, {line:?}); the spec's has one"
            ));
        }
        let value = rest.split_whitespace().next().unwrap_or_default();
        let value = match value.parse::<f64>() {
            Ok(v) if v.is_finite() => v as i64,
            _ => {
                return Err(format!(
                    "malformed gauge sample {line:?}: {value:?} is not a number"
                ))
            }
        };
        found = Some((GaugeReading { value, labels }, line));
    }
    Ok(found.map(|(r, _)| r))
}

fn tail_text(tail: &Mutex<VecDeque<String>>) -> String {
    let tail = tail.lock().unwrap_or_else(|e| e.into_inner());
    tail.iter().cloned().collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests;
