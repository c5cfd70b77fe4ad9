//! The control channel of a running `harness up`: a Unix socket `<run id>.sock` in the control
//! folder (`$TMPDIR/elector-up/`, or `--control-dir` / `ELECTOR_UP_DIR`), one JSON [`Request`]
//! a connection, answered by one JSON [`Reply`].
//!
//! `harness fault VERB [TARGET]` and `harness heal [WHAT]` find the running instance there,
//! send, print the reply, and exit non-zero when no instance runs, several do and `--run` does
//! not pick one, or the instance refused. A fault is a scenario file's fault step as data
//! ([`TypedStep`]), read by the file's own reader: the same verbs, targets and messages.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use clap::builder::{PossibleValuesParser, TypedValueParser as _};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

use crate::fault::{FaultRecord, Verb};
use crate::scenario::file::{self, TypedStep};
use crate::span::Span;

/// The environment variable naming the control folder.
pub const ENV_CONTROL_DIR: &str = "ELECTOR_UP_DIR";

/// How long a client waits for its reply: a server restart takes seconds.
const REPLY_TIMEOUT: Duration = Duration::from_secs(120);

/// The control folder when none is named: `elector-up` under the temp directory.
pub fn default_dir() -> PathBuf {
    std::env::temp_dir().join("elector-up")
}

/// What a client asks of the running instance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum Request {
    /// Apply a fault: a scenario file's fault step.
    Fault {
        /// The step's keys.
        step: TypedStep,
    },
    /// Lift faults in effect: the one with this `as` name, every one on this target (a replica
    /// or `server`), or every one (`None`).
    Heal {
        /// A fault's name or a target.
        what: Option<String>,
    },
}

/// The answer: the steps the request played, and what stopped it, if anything did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// Each step played, in order.
    pub steps: Vec<Played>,
    /// Why the request was refused or stopped (what was played before stays played).
    pub error: Option<String>,
}

/// One step a request played.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Played {
    /// The step as the timeline labels it, e.g. `partition leader`.
    pub label: String,
    /// When it began, in ms since the run's start.
    pub at_ms: f64,
    /// The faults it applied or lifted.
    pub records: Vec<FaultRecord>,
}

impl Reply {
    /// A refusal: nothing was done.
    pub fn refused(message: impl Into<String>) -> Reply {
        Reply {
            steps: Vec::new(),
            error: Some(message.into()),
        }
    }
}

/// A request and where its reply goes.
pub type Call = (Request, oneshot::Sender<Reply>);

/// The listening socket of a running instance; dropping it stops listening and removes the
/// socket file.
#[derive(Debug)]
pub struct Listener {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Listener {
    /// Listens on `<dir>/<run>.sock` (the folder made, readable by this user only); the calls
    /// arrive on the receiver, one at a time in order.
    ///
    /// # Errors
    /// The folder or the socket could not be made.
    pub fn bind(dir: &Path, run: &str) -> anyhow::Result<(Listener, mpsc::Receiver<Call>)> {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating the control folder {}", dir.display()))?;
        let path = socket_path(dir, run);
        let socket = UnixListener::bind(&path)
            .with_context(|| format!("listening on {}", path.display()))?;
        let (tx, rx) = mpsc::channel(8);
        let task = tokio::spawn(accept(socket, tx));
        Ok((Listener { path, task }, rx))
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The socket of run `run` in `dir`.
pub fn socket_path(dir: &Path, run: &str) -> PathBuf {
    dir.join(format!("{run}.sock"))
}

async fn accept(socket: UnixListener, tx: mpsc::Sender<Call>) {
    while let Ok((stream, _)) = socket.accept().await {
        let tx = tx.clone();
        tokio::spawn(async move {
            if let Err(e) = answer(stream, tx).await {
                tracing::warn!(error = %format!("{e:#}"), "control channel: a call failed");
            }
        });
    }
}

/// Reads one request, hands it over, writes the reply.
async fn answer(stream: UnixStream, tx: mpsc::Sender<Call>) -> anyhow::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    BufReader::new(read).read_line(&mut line).await?;
    let reply = match serde_json::from_str::<Request>(&line) {
        Ok(request) => {
            let (reply_tx, reply_rx) = oneshot::channel();
            tx.send((request, reply_tx))
                .await
                .map_err(|_| anyhow!("the instance is stopping"))?;
            reply_rx
                .await
                .unwrap_or_else(|_| Reply::refused("the instance is stopping"))
        }
        Err(e) => Reply::refused(format!("not a request: {e}")),
    };
    let mut text = serde_json::to_string(&reply)?;
    text.push('\n');
    write.write_all(text.as_bytes()).await?;
    Ok(())
}

/// Which running instance a client talks to.
#[derive(Clone, Debug, clap::Args)]
pub struct Instance {
    /// The control folder of the running `harness up`.
    #[arg(long, env = ENV_CONTROL_DIR, default_value_os_t = default_dir())]
    pub control_dir: PathBuf,
    /// The run id of the instance, when several run.
    #[arg(long)]
    pub run: Option<String>,
}

impl Instance {
    /// The socket of the one running instance (stale sockets of ended runs are removed).
    ///
    /// # Errors
    /// None runs, or several do and `--run` picks none of them.
    pub fn socket(&self) -> anyhow::Result<PathBuf> {
        let dir = &self.control_dir;
        let none = || {
            anyhow!(
                "no `harness up` is running (no control socket in {}; start one with \
                 `harness up`)",
                dir.display()
            )
        };
        let entries = std::fs::read_dir(dir).map_err(|_| none())?;
        let mut live = Vec::new();
        for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
            let Some(run) = run_of(&path) else { continue };
            if std::os::unix::net::UnixStream::connect(&path).is_ok() {
                live.push((run, path));
            } else {
                let _ = std::fs::remove_file(&path);
            }
        }
        if let Some(wanted) = &self.run {
            return (live.into_iter().find(|(run, _)| run == wanted))
                .map(|(_, p)| p)
                .ok_or_else(|| anyhow!("no `harness up` with run id {wanted:?} is running"));
        }
        match live.len() {
            0 => Err(none()),
            1 => Ok(live.remove(0).1),
            _ => {
                let runs: Vec<String> = live.into_iter().map(|(r, _)| r).collect();
                bail!(
                    "several `harness up` are running: pick one with --run ({})",
                    runs.join(", ")
                )
            }
        }
    }

    /// Sends `request` to the running instance and waits for the reply.
    ///
    /// # Errors
    /// No instance, or the channel broke.
    pub async fn send(&self, request: &Request) -> anyhow::Result<Reply> {
        let path = self.socket()?;
        let mut stream = UnixStream::connect(&path)
            .await
            .with_context(|| format!("connecting to {}", path.display()))?;
        let mut text = serde_json::to_string(request)?;
        text.push('\n');
        stream.write_all(text.as_bytes()).await?;
        let mut line = String::new();
        tokio::time::timeout(REPLY_TIMEOUT, BufReader::new(stream).read_line(&mut line))
            .await
            .map_err(|_| anyhow!("no reply within {REPLY_TIMEOUT:?}"))??;
        serde_json::from_str(&line)
            .with_context(|| format!("a reply that does not parse: {line:?}"))
    }
}

/// The run id of a socket file's path.
fn run_of(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    name.strip_suffix(".sock").map(str::to_owned)
}

/// The flags of `harness fault`.
#[derive(Clone, Debug, clap::Args)]
pub struct FaultArgs {
    /// The fault verb, as scenario files name it.
    #[arg(value_parser = PossibleValuesParser::new(file::verbs()).try_map(|w| file::verb(&w)))]
    pub verb: Verb,
    /// Its target: `leader`, `standby`, a replica (`r1`, ...) or an earlier fault's name; the
    /// server verbs take none. Default: the leader (the server for the server verbs).
    pub target: Option<String>,
    /// The delay of a `latency` fault: a duration (`100ms`) or a multiple of T (`2T`).
    #[arg(long, value_parser = crate::flags::span)]
    pub latency: Option<Span>,
    /// The jitter of a `latency` fault (± this much).
    #[arg(long, value_parser = crate::flags::span)]
    pub jitter: Option<Span>,
    /// A name for the fault, for `harness heal NAME` (default: `f1`, `f2`, ...).
    #[arg(long = "as", value_name = "NAME")]
    pub name: Option<String>,
    /// The instance.
    #[command(flatten)]
    pub instance: Instance,
}

/// The flags of `harness heal`.
#[derive(Clone, Debug, clap::Args)]
pub struct HealArgs {
    /// What to lift: a fault's name (`f1`), every fault on a target (`r1`, `server`); default:
    /// every fault in effect.
    pub what: Option<String>,
    /// The instance.
    #[command(flatten)]
    pub instance: Instance,
}

/// `harness fault`: applies a fault on the running instance and prints what it did.
///
/// # Errors
/// No instance runs, or the channel broke (a refusal is printed and exits 1).
pub async fn fault(args: FaultArgs) -> anyhow::Result<ExitCode> {
    let step = TypedStep {
        fault: Some(args.verb),
        target: args.target,
        latency: args.latency,
        jitter: args.jitter,
        name: args.name,
        ..TypedStep::default()
    };
    let reply = args.instance.send(&Request::Fault { step }).await?;
    Ok(print_reply("harness fault", &reply))
}

/// `harness heal`: lifts faults on the running instance and prints what it did.
///
/// # Errors
/// No instance runs, or the channel broke (a refusal is printed and exits 1).
pub async fn heal(args: HealArgs) -> anyhow::Result<ExitCode> {
    let reply = (args.instance)
        .send(&Request::Heal { what: args.what })
        .await?;
    if reply.steps.is_empty() && reply.error.is_none() {
        println!("nothing to heal: no fault with an inverse is in effect there");
    }
    Ok(print_reply("harness heal", &reply))
}

fn print_reply(command: &str, reply: &Reply) -> ExitCode {
    for step in &reply.steps {
        println!("{:>9.3}s  {}", step.at_ms / 1000.0, step.label);
        for r in &step.records {
            println!("{:>9.3}s    {}", r.end_ms() / 1000.0, r.label);
        }
    }
    match &reply.error {
        None => ExitCode::SUCCESS,
        Some(e) => {
            eprintln!("{command}: refused: {e}");
            ExitCode::FAILURE
        }
    }
}
