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
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::api::{ControlReply, ControlRequest, LeaderInfo, ReadyReport, WorkerInfo};
use super::control::{LoopMode, WorkerMode};
use crate::event::{EventLine, ReplicaEvent};

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
}

impl History {
    fn new() -> Self {
        Self {
            events: Arc::default(),
            count: watch::Sender::new(0),
            sender: broadcast::Sender::new(EVENT_CAPACITY),
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
    child: Child,
    pid: u32,
    http: String,
    elector: bool,
    /// Set by the stdout reader when the child's stdout closed.
    eof: watch::Receiver<bool>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

/// A replica process started by the harness. Dropping it SIGKILLs and reaps the child.
#[derive(Debug)]
pub struct ReplicaProcess {
    binary: PathBuf,
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
        let history = History::new();
        let http = reqwest::Client::builder()
            .timeout(HTTP_TIMEOUT)
            .connect_timeout(HTTP_TIMEOUT)
            .no_proxy()
            .build()
            .context("the HTTP client")?;
        let current = start(binary, &spec, &history).await?;
        Ok(ReplicaProcess {
            binary: binary.to_owned(),
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
        self.current = start(&self.binary, &self.spec, &self.history).await?;
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
        if !self.is_running() {
            return Ok(());
        }
        let pid = i32::try_from(self.current.pid).context("pid out of range")?;
        kill(Pid::from_raw(pid), signal)
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

    /// Whether the child still runs (reaps it when it has exited).
    pub fn is_running(&mut self) -> bool {
        if self.current.status.is_some() {
            return false;
        }
        match self.current.child.try_wait() {
            Ok(Some(status)) => {
                self.current.status = Some(status);
                false
            }
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// Waits for the child to exit and for its pipes to be read to the end.
    ///
    /// # Errors
    /// Waiting failed.
    pub async fn wait(&mut self) -> anyhow::Result<ExitStatus> {
        if let Some(status) = self.current.status {
            return Ok(status);
        }
        let status = self
            .current
            .child
            .wait()
            .await
            .context("waiting for the replica")?;
        self.current.status = Some(status);
        for reader in self.current.readers.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
        }
        Ok(status)
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
        Ok(parse_gauge(
            &self.metrics_text().await?,
            testkit::spec::GAUGE,
        ))
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

/// The value of an unlabelled gauge `name` in Prometheus text.
fn parse_gauge(text: &str, name: &str) -> Option<i64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let mut parts = l.split_whitespace();
            (parts.next() == Some(name)).then(|| parts.next()).flatten()
        })
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as i64)
}

fn tail_text(tail: &Mutex<VecDeque<String>>) -> String {
    let tail = tail.lock().unwrap_or_else(|e| e.into_inner());
    tail.iter().cloned().collect::<Vec<_>>().join("\n")
}

/// Starts one child and waits for its `started` event.
async fn start(
    binary: &Path,
    spec: &ReplicaSpec,
    history: &History,
) -> anyhow::Result<Incarnation> {
    let mut cmd = Command::new(binary);
    cmd.args(spec.args())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for var in super::ENV_VARS {
        cmd.env_remove(var);
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
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {} replica {}", binary.display(), spec.name))?;
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

    let (eof_tx, eof) = watch::channel(false);
    let stdout_reader = {
        let (history, name) = (history.clone(), spec.name.clone());
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
    };
    let stderr_tail: Arc<Mutex<VecDeque<String>>> = Arc::default();
    let stderr_reader = {
        let (tail, name) = (stderr_tail.clone(), spec.name.clone());
        let mut file = match &spec.stderr_log {
            Some(path) => Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("cannot open {}", path.display()))?,
            ),
            None => None,
        };
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
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
                tail.push_back(line);
            }
        })
    };

    let mut incarnation = Incarnation {
        child,
        pid,
        http: String::new(),
        elector: false,
        eof,
        stderr_tail,
        readers: vec![stdout_reader, stderr_reader],
        status: None,
    };
    match wait_started(history, mark, &mut incarnation, spec.start_timeout).await {
        Ok((http, elector)) => {
            incarnation.http = http;
            incarnation.elector = elector;
            Ok(incarnation)
        }
        Err(why) => {
            let _ = incarnation.child.start_kill();
            let status = tokio::time::timeout(Duration::from_secs(2), incarnation.child.wait())
                .await
                .ok()
                .and_then(Result::ok);
            for reader in incarnation.readers.drain(..) {
                let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
            }
            let status = status.map_or_else(|| "exit status unknown".to_owned(), |s| s.to_string());
            Err(anyhow!(
                "replica {} did not start: {why} ({status}); stderr tail:\n{}",
                spec.name,
                tail_text(&incarnation.stderr_tail)
            ))
        }
    }
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
        assert_eq!(parse_gauge(text, "plexsphere_background_leader"), Some(1));
        assert_eq!(parse_gauge("", "plexsphere_background_leader"), None);
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
