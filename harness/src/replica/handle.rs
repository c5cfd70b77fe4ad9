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
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Command;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::api::{ControlReply, ControlRequest, LeaderInfo, ReadyReport, WorkerInfo};
use super::control::{LoopMode, WorkerMode};
use super::program::{Level, Program, Values};
use super::reaper::{Exit, Exits, Reaper};
use crate::event::{EventLine, ReplicaEvent};
use crate::topology::cleanup::{Registration, Resource};

/// How long an HTTP call to a replica may take: short, so a SIGSTOPped replica cannot hang the
/// caller.
pub const HTTP_TIMEOUT: Duration = Duration::from_millis(500);

/// How many lines of a replica's stderr are kept for error messages.
const STDERR_TAIL: usize = 40;

/// How many events a slow [`ReplicaProcess::events`] subscriber may lag behind.
const EVENT_CAPACITY: usize = 16_384;

/// How to start one replica process (the flags of `harness replica`).
#[derive(Clone, Debug)]
pub struct ReplicaSpec {
    /// `--name`: also the Postgres `application_name`.
    pub name: String,
    /// The DSN, handed over in the child's environment (`PLEXSPHERE_DSN`), never on its
    /// command line, where `ps` would show its password; `None` boots a replica without an
    /// elector or loops (LOOP-4).
    pub dsn: Option<String>,
    /// `--check-interval-ms`: T.
    pub check_interval: Duration,
    /// `--tick-ms`: the cadence of the loops (default T).
    pub tick: Option<Duration>,
    /// `--http`: the listen address (default `127.0.0.1:0`).
    pub http: Option<String>,
    /// `--pool-max-size`.
    pub pool_max_size: Option<usize>,
    /// `--pool-max-lifetime-ms`.
    pub pool_max_lifetime: Option<Duration>,
    /// `--restart-budget`.
    pub restart_budget: Option<u32>,
    /// `--restart-window-ms`.
    pub restart_window: Option<Duration>,
    /// `--restart-backoff-ms`.
    pub restart_backoff: Option<Duration>,
    /// `--verify-lock` (X-VERIFY).
    pub verify_lock: bool,
    /// `--no-shared-session-guard`: the elector's POOL-1 guard off (the spec's plain lock).
    pub no_shared_session_guard: bool,
    /// `--fail-loop`, once per loop.
    pub fail_loops: Vec<String>,
    /// `--panic-loop`, once per loop.
    pub panic_loops: Vec<String>,
    /// Further arguments, appended as given.
    pub extra_args: Vec<String>,
    /// Further environment variables of the child (the flags' own variables,
    /// [`ENV_VARS`](super::ENV_VARS), are cleared first and may be set here).
    pub env: Vec<(String, String)>,
    /// `RUST_LOG` of the child (its stderr log filter); `None` keeps the caller's.
    pub rust_log: Option<String>,
    /// Where the child's stderr goes (appended). `None`: the caller's stderr, each line prefixed
    /// with `[name] `.
    pub stderr_log: Option<PathBuf>,
    /// How long [`ReplicaProcess::spawn`] waits for the `started` event.
    pub start_timeout: Duration,
}

impl ReplicaSpec {
    /// A replica named `name` with check interval `check_interval`, no DSN, and every other
    /// flag at its default.
    pub fn new(name: &str, check_interval: Duration) -> Self {
        Self {
            name: name.to_owned(),
            dsn: None,
            check_interval,
            tick: None,
            http: None,
            pool_max_size: None,
            pool_max_lifetime: None,
            restart_budget: None,
            restart_window: None,
            restart_backoff: None,
            verify_lock: false,
            no_shared_session_guard: false,
            fail_loops: Vec::new(),
            panic_loops: Vec::new(),
            extra_args: Vec::new(),
            env: Vec::new(),
            rust_log: None,
            stderr_log: None,
            start_timeout: Duration::from_secs(20),
        }
    }

    /// Sets the DSN.
    pub fn dsn(mut self, dsn: impl Into<String>) -> Self {
        self.dsn = Some(dsn.into());
        self
    }

    /// Sets the supervisor's restart budget, window and back-off.
    pub fn restarts(mut self, budget: u32, window: Duration, backoff: Duration) -> Self {
        self.restart_budget = Some(budget);
        self.restart_window = Some(window);
        self.restart_backoff = Some(backoff);
        self
    }

    /// The HTTP listen address (`127.0.0.1:0` when none was set: any free port, which only this
    /// harness's own replica can report back).
    pub fn listen(&self) -> &str {
        self.http.as_deref().unwrap_or("127.0.0.1:0")
    }

    /// The flags set that only the harness's own replica takes (another program is started
    /// with its name, T, listen address and DSN only), by their names.
    pub fn flags_only_ours(&self) -> Vec<String> {
        let set = [
            ("--pool-max-size", self.pool_max_size.is_some()),
            ("--pool-max-lifetime-ms", self.pool_max_lifetime.is_some()),
            ("--restart-budget", self.restart_budget.is_some()),
            ("--restart-window-ms", self.restart_window.is_some()),
            ("--restart-backoff-ms", self.restart_backoff.is_some()),
            ("--verify-lock", self.verify_lock),
            ("--no-shared-session-guard", self.no_shared_session_guard),
            ("--fail-loop", !self.fail_loops.is_empty()),
            ("--panic-loop", !self.panic_loops.is_empty()),
        ];
        let mut named: Vec<String> = (set.iter())
            .filter(|(_, on)| *on)
            .map(|(f, _)| (*f).to_owned())
            .collect();
        named.extend(self.extra_args.iter().cloned());
        named
    }

    /// The command line after `harness`: `replica --name ...` (the DSN is not on it).
    pub fn args(&self) -> Vec<String> {
        fn ms(d: Duration) -> String {
            d.as_millis().to_string()
        }
        let mut a = vec![
            "replica".to_owned(),
            "--name".to_owned(),
            self.name.clone(),
            "--check-interval-ms".to_owned(),
            ms(self.check_interval),
        ];
        let mut opt = |flag: &str, value: Option<String>| {
            if let Some(v) = value {
                a.push(flag.to_owned());
                a.push(v);
            }
        };
        opt("--tick-ms", self.tick.map(ms));
        opt("--http", self.http.clone());
        opt("--pool-max-size", self.pool_max_size.map(|n| n.to_string()));
        opt("--pool-max-lifetime-ms", self.pool_max_lifetime.map(ms));
        opt(
            "--restart-budget",
            self.restart_budget.map(|n| n.to_string()),
        );
        opt("--restart-window-ms", self.restart_window.map(ms));
        opt("--restart-backoff-ms", self.restart_backoff.map(ms));
        if self.verify_lock {
            a.push("--verify-lock".to_owned());
        }
        if self.no_shared_session_guard {
            a.push("--no-shared-session-guard".to_owned());
        }
        for l in &self.fail_loops {
            a.extend(["--fail-loop".to_owned(), l.clone()]);
        }
        for l in &self.panic_loops {
            a.extend(["--panic-loop".to_owned(), l.clone()]);
        }
        a.extend(self.extra_args.iter().cloned());
        a
    }
}

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
    ///
    /// # Errors
    /// As [`spawn`](Self::spawn).
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        if self.is_running() {
            self.sigkill()?;
        }
        self.wait().await?;
        self.current = start(&self.program, &self.spec, &self.history, &self.http).await?;
        Ok(())
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
        gauge_value(&self.metrics_text().await?, testkit::spec::GAUGE)
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

/// The value of an unlabelled gauge `name` in Prometheus text, or `None` when no sample of it is
/// there; `Err` names a sample whose value is not a number, or a labelled one (the spec's gauge
/// has no labels). Written by hand: the contract needs this one sample read strictly, and a
/// malformed line named, where a general parser would skip it.
pub fn gauge_value(text: &str, name: &str) -> Result<Option<i64>, String> {
    for line in text.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if rest.starts_with('{') {
            return Err(format!(
                "the gauge has labels ({line:?}); the spec's has none"
            ));
        }
        if !rest.starts_with([' ', '\t']) {
            continue; // another metric whose name starts with this one
        }
        let value = rest.split_whitespace().next().unwrap_or_default();
        return match value.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Some(v as i64)),
            _ => Err(format!(
                "malformed gauge sample {line:?}: {value:?} is not a number"
            )),
        };
    }
    Ok(None)
}

fn tail_text(tail: &Mutex<VecDeque<String>>) -> String {
    let tail = tail.lock().unwrap_or_else(|e| e.into_inner());
    tail.iter().cloned().collect::<Vec<_>>().join("\n")
}

/// How long a level-0 program must keep running before it counts as started (it shows nothing
/// else the harness could wait for).
pub const LEVEL0_SETTLE: Duration = Duration::from_millis(500);

/// How often a starting program's `/metrics` is asked.
const START_POLL: Duration = Duration::from_millis(50);

/// The child's command: `binary replica ...` for ours, the filled template for another program;
/// the contract's variables set, the harness's own flags' variables cleared.
fn command(program: &Program, spec: &ReplicaSpec) -> anyhow::Result<Command> {
    let mut cmd = match program {
        Program::Ours(binary) => {
            let mut cmd = Command::new(binary);
            cmd.args(spec.args());
            cmd
        }
        Program::External(template) => {
            let ours_only = spec.flags_only_ours();
            if !ours_only.is_empty() {
                bail!(
                    "replica {}: {} only the harness's own replica takes (this one runs {})",
                    spec.name,
                    ours_only.join(", "),
                    template.display()
                );
            }
            let values = Values {
                name: &spec.name,
                listen: spec.listen(),
                interval_ms: spec.check_interval.as_millis(),
                dsn: spec.dsn.as_deref(),
            };
            let argv = template.argv_for(&values);
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..]);
            if let Some(dir) = &template.dir {
                cmd.current_dir(dir);
            }
            cmd
        }
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for var in super::ENV_VARS {
        cmd.env_remove(var);
    }
    if !program.is_ours() {
        // The contract's variables (ours takes the same through its flags).
        cmd.env("REPLICA_NAME", &spec.name)
            .env("REPLICA_HTTP", spec.listen())
            .env(
                "REPLICA_CHECK_INTERVAL_MS",
                spec.check_interval.as_millis().to_string(),
            );
    }
    if let Some(dsn) = &spec.dsn {
        cmd.env(super::ENV_DSN, dsn);
    }
    cmd.env(super::ENV_PARENT, std::process::id().to_string());
    if let Some(filter) = &spec.rust_log {
        cmd.env("RUST_LOG", filter);
    }
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    Ok(cmd)
}

/// Copies a pipe's lines into `file` (or the caller's stderr, prefixed with the replica's
/// name) and keeps the last [`STDERR_TAIL`] of them for error messages.
fn copy_lines(
    pipe: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    log: Option<&PathBuf>,
    tail: Arc<Mutex<VecDeque<String>>>,
    timed: Lines,
    name: String,
) -> anyhow::Result<JoinHandle<()>> {
    let mut file = match log {
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open {}", path.display()))?,
        ),
        None => None,
    };
    Ok(tokio::spawn(async move {
        let mut lines = BufReader::new(pipe).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let at = Instant::now();
            match &mut file {
                Some(f) => {
                    let _ = writeln!(f, "{line}");
                }
                None => eprintln!("[{name}] {line}"),
            }
            let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
            if tail.len() == STDERR_TAIL {
                tail.pop_front();
            }
            tail.push_back(line.clone());
            drop(tail);
            (timed.lock().unwrap_or_else(|e| e.into_inner())).push((at, line));
        }
    }))
}

/// Starts one child and waits until it has started, as its program's level shows it.
async fn start(
    program: &Program,
    spec: &ReplicaSpec,
    history: &History,
    http: &reqwest::Client,
) -> anyhow::Result<Incarnation> {
    crate::topology::cleanup::refuse_if_closing(&format!("replica {}", spec.name))?;
    let mut child = command(program, spec)?
        .spawn()
        .with_context(|| format!("cannot start replica {}: {}", spec.name, program.describe()))?;
    let pid = child.id().ok_or_else(|| anyhow!("the child has no pid"))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("no stdout pipe"))?;
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| anyhow!("no stderr pipe"))?;
    let mark = *history.count.borrow();
    let stderr_tail: Arc<Mutex<VecDeque<String>>> = Arc::default();
    let name = spec.name.clone();

    let (eof_tx, eof) = watch::channel(false);
    let stdout_reader = if program.level() == Level::Events {
        let (history, name) = (history.clone(), name.clone());
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let at = Instant::now();
                history.push(ReceivedEvent {
                    at,
                    line: EventLine::parse(&line, &name),
                });
            }
            eof_tx.send_replace(true);
        })
    } else {
        // Below level 3 stdout is free text: it joins the log.
        let copy = copy_lines(
            stdout,
            spec.stderr_log.as_ref(),
            stderr_tail.clone(),
            history.lines.clone(),
            name.clone(),
        )?;
        tokio::spawn(async move {
            let _ = copy.await;
            eof_tx.send_replace(true);
        })
    };
    let stderr_reader = copy_lines(
        stderr,
        spec.stderr_log.as_ref(),
        stderr_tail.clone(),
        history.lines.clone(),
        name,
    )?;

    let mut incarnation = Incarnation {
        child: Reaper::spawn(child, pid, history.exits.clone()),
        pid,
        http: spec.listen().to_owned(),
        elector: spec.dsn.is_some(),
        eof,
        stderr_tail,
        readers: vec![stdout_reader, stderr_reader],
        _registered: Registration::new(Resource::Pid(pid)),
    };
    let started = match program.level() {
        Level::Events => wait_started(history, mark, &mut incarnation, spec.start_timeout)
            .await
            .map(|(addr, elector)| {
                incarnation.http = addr;
                incarnation.elector = elector;
            }),
        Level::Metrics | Level::Work => {
            wait_metrics(&mut incarnation, http, spec.start_timeout).await
        }
        Level::Process => wait_settled(&mut incarnation).await,
    };
    match started {
        Ok(()) => Ok(incarnation),
        Err(why) => {
            let _ = incarnation.child.signal(Signal::SIGKILL);
            let status = tokio::time::timeout(Duration::from_secs(2), incarnation.child.wait())
                .await
                .ok()
                .and_then(|e| e.status);
            for reader in incarnation.readers.drain(..) {
                let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
            }
            let status = status.map_or_else(|| "exit status unknown".to_owned(), |s| s.to_string());
            Err(anyhow!(
                "replica {} did not start ({}, {}): {why} ({status}); output tail:\n{}",
                spec.name,
                program.level(),
                program.describe(),
                tail_text(&incarnation.stderr_tail)
            ))
        }
    }
}

/// Waits until the child's `/metrics` answers with the gauge (levels 1 and 2).
async fn wait_metrics(
    inc: &mut Incarnation,
    http: &reqwest::Client,
    within: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + within;
    let url = format!("http://{}/metrics", inc.http);
    let mut last = format!("nothing answered on {url}");
    loop {
        if let Some(exit) = inc.child.exited() {
            return Err(format!(
                "it exited before serving /metrics: {}",
                status_text(exit)
            ));
        }
        match http.get(&url).send().await {
            Ok(r) if r.status().is_success() => {
                let text = r.text().await.unwrap_or_default();
                match gauge_value(&text, testkit::spec::GAUGE) {
                    Ok(Some(_)) => return Ok(()),
                    Ok(None) => {
                        last = format!(
                            "/metrics answered without the gauge {} (its first lines: {:?})",
                            testkit::spec::GAUGE,
                            first_lines(&text)
                        );
                    }
                    Err(malformed) => return Err(format!("/metrics: {malformed}")),
                }
            }
            Ok(r) => last = format!("/metrics answered {}", r.status()),
            Err(e) => last = format!("{url}: {e}"),
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "no /metrics with the gauge within {within:?}; last: {last}"
            ));
        }
        tokio::time::sleep(START_POLL).await;
    }
}

/// Waits [`LEVEL0_SETTLE`] and checks the child still runs (level 0).
async fn wait_settled(inc: &mut Incarnation) -> Result<(), String> {
    tokio::time::sleep(LEVEL0_SETTLE).await;
    match inc.child.exited() {
        None => Ok(()),
        Some(exit) => Err(format!(
            "it exited within {LEVEL0_SETTLE:?}: {}",
            status_text(exit)
        )),
    }
}

fn status_text(exit: Exit) -> String {
    exit.status
        .map_or_else(|| "exit status unknown".to_owned(), |s| s.to_string())
}

fn first_lines(text: &str) -> String {
    text.lines().take(3).collect::<Vec<_>>().join(" | ")
}

/// Waits for the `started` event at index `mark` or later: `(http address, elector)`.
async fn wait_started(
    history: &History,
    mark: usize,
    inc: &mut Incarnation,
    within: Duration,
) -> Result<(String, bool), String> {
    let deadline = Instant::now() + within;
    let mut count = history.count.subscribe();
    loop {
        count.borrow_and_update();
        let started = history.find_from(mark, &mut |e| matches!(e, ReplicaEvent::Started { .. }));
        if let Some((_, e)) = started {
            if let ReplicaEvent::Started { http, elector, .. } = e.line.event {
                return Ok((http, elector));
            }
        }
        if *inc.eof.borrow() {
            return Err("it exited before reporting `started`".to_owned());
        }
        tokio::select! {
            _ = count.changed() => {}
            _ = inc.eof.changed() => {}
            () = tokio::time::sleep_until(deadline) => {
                return Err(format!("no `started` event within {within:?}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_gauge_and_builds_the_command_line() {
        let text = "# HELP plexsphere_background_leader x\n# TYPE plexsphere_background_leader gauge\nplexsphere_background_leader 1\n";
        assert_eq!(
            gauge_value(text, "plexsphere_background_leader"),
            Ok(Some(1))
        );
        assert_eq!(gauge_value("", "plexsphere_background_leader"), Ok(None));
        let longer = "plexsphere_background_leader_total 3\nplexsphere_background_leader 0.0\n";
        assert_eq!(
            gauge_value(longer, "plexsphere_background_leader"),
            Ok(Some(0))
        );
        let bad = gauge_value(
            "plexsphere_background_leader yes\n",
            "plexsphere_background_leader",
        );
        assert!(bad.unwrap_err().contains("not a number"));
        let labelled = "plexsphere_background_leader{pod=\"a\"} 1\n";
        assert!(gauge_value(labelled, "plexsphere_background_leader")
            .unwrap_err()
            .contains("labels"));
        let mut spec = ReplicaSpec::new("r1", Duration::from_millis(200)).dsn("postgres://x/y");
        spec.fail_loops.push("invitations-expire".into());
        let args = spec.args();
        assert_eq!(
            &args[..5],
            ["replica", "--name", "r1", "--check-interval-ms", "200"]
        );
        assert!(
            !args.iter().any(|a| a.contains("postgres://")),
            "the DSN stays off the command line: {args:?}"
        );
        assert!(args
            .windows(2)
            .any(|w| w == ["--fail-loop", "invitations-expire"]));
        assert_eq!(mode_text(&WorkerMode::CrashLoop).unwrap(), "crash_loop");
    }
}
