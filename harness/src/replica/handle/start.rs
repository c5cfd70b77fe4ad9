//! Starting one child: its command line and environment, the readers of its pipes, and the
//! wait until it shows it has started, as its program's level shows it.

use std::collections::VecDeque;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Command;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{gauge_value, tail_text, History, Incarnation, Lines, ReceivedEvent, STDERR_TAIL};
use crate::event::{EventLine, ReplicaEvent};
use crate::replica::program::{Level, Program, Values};
use crate::replica::reaper::{Exit, Reaper};
use crate::replica::ReplicaSpec;
use crate::topology::cleanup::{Registration, Resource};

/// How long a level-0 program must keep running before it counts as started (it shows nothing
/// else the harness could wait for).
pub const LEVEL0_SETTLE: Duration = Duration::from_millis(500);

/// How often a starting program's `/metrics` is asked.
const START_POLL: Duration = Duration::from_millis(50);

/// The child's command: `binary replica ...` for ours, the filled template for another program;
/// the contract's variables set, the harness's own flags' variables cleared.
pub(super) fn command(program: &Program, spec: &ReplicaSpec) -> anyhow::Result<Command> {
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
    for var in crate::replica::ENV_VARS {
        cmd.env_remove(var);
    }
    if !program.is_ours() {
        // The contract's variables (ours takes the same through its flags).
        cmd.env("REPLICA_NAME", &spec.name)
            .env("REPLICA_HTTP", spec.listen())
            .env(
                "REPLICA_CHECK_INTERVAL_MS",
                spec.check_interval.as_millis().to_string(),
            )
            .envs(spec.contract_env());
    }
    if let Some(dsn) = &spec.dsn {
        cmd.env(crate::replica::ENV_DSN, dsn);
    }
    cmd.env(crate::replica::ENV_PARENT, std::process::id().to_string());
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
pub(super) async fn start(
    program: &Program,
    spec: &ReplicaSpec,
    history: &History,
    http: &reqwest::Client,
) -> anyhow::Result<Incarnation> {
    crate::topology::cleanup::refuse_if_closing(&format!("replica {}", spec.name))?;
    let mut command = command(program, spec)?;
    (history.spawns.lock().unwrap_or_else(|e| e.into_inner())).push(Instant::now());
    let mut child = command
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
                match gauge_value(&text, facts::spec::GAUGE) {
                    Ok(Some(_)) => return Ok(()),
                    Ok(None) => {
                        last = format!(
                            "/metrics answered without the gauge {} (its first lines: {:?})",
                            facts::spec::GAUGE,
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
