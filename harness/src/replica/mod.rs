//! The replica process: one stand-in API replica, run as `harness replica ...` so tests can
//! SIGKILL, SIGSTOP or SIGTERM it like a pod.
//!
//! With a DSN it runs the elector as the supervised worker `background-leader`, the spec's
//! loops as supervised workers by their names, an HTTP server (`/metrics`, `/readyz`,
//! `/workers`, `/leader`, `/control`) and a JSON-lines event stream on stdout
//! ([`crate::event::EventLine`], one per line). Without a DSN it builds no elector and wires no
//! background loop at all (LOOP-4): only HTTP and the event stream.
//!
//! | concern | module |
//! |---|---|
//! | flags, boot, shutdown | this module |
//! | the database: reachability check, pool, `leader_work` | `db` |
//! | the loops and their passes, boot passes | `loops` |
//! | the workers' names: the election worker and the loop tables | `names` |
//! | fault injection through `/control` | [`control`] |
//! | the HTTP server | `http` |
//! | the event stream on stdout, from the elector's and the supervisor's watches | `events` |
//! | the wire types of the HTTP API, shared by server and client | [`api`] |
//! | the parent side: spawn, signal and query a replica process | [`handle`] |
//! | the child's reaper: every exit, with when the harness saw it | `reaper` |
//! | which program a replica runs: ours, or any the contract fits, from a command template | [`program`] |

pub mod api;
pub mod control;
mod db;
mod events;
pub mod handle;
mod http;
mod loops;
mod names;
pub mod program;
mod reaper;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use elector::supervisor::{RestartBudget, Supervisor, WorkerState};
use elector::{Config, Elector};
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

use crate::event::ReplicaEvent;

pub use handle::{ReceivedEvent, ReplicaProcess, ReplicaSpec};
pub use names::{EVERY_REPLICA_LOOPS, TICKED_LOOPS, WHILE_LEADER_LOOPS};
pub use reaper::Exit;

/// How long the boot check may take to reach PostgreSQL before the replica gives up.
pub const BOOT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a graceful shutdown waits for the workers to end.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The environment variables the `replica` flags read. [`ReplicaProcess`] clears them in the
/// child's environment, so a variable set in the harness's own environment never changes a
/// replica behind its spec's back (a stray `PLEXSPHERE_DSN` would wire loops into a replica
/// meant to have none).
pub const ENV_VARS: [&str; 14] = [
    "REPLICA_NAME",
    "PLEXSPHERE_DSN",
    "REPLICA_CHECK_INTERVAL_MS",
    "REPLICA_HTTP",
    "REPLICA_TICK_MS",
    "REPLICA_POOL_MAX_SIZE",
    "REPLICA_POOL_MAX_LIFETIME_MS",
    "REPLICA_RESTART_BUDGET",
    "REPLICA_RESTART_WINDOW_MS",
    "REPLICA_RESTART_BACKOFF_MS",
    "REPLICA_VERIFY_LOCK",
    "REPLICA_FENCE",
    "REPLICA_WAKE",
    "REPLICA_SHARED_SESSION_GUARD",
];

/// The variable that carries the DSN (`--dsn`) to a replica the harness starts: unlike a
/// command line, a process's environment is not shown by `ps`.
pub const ENV_DSN: &str = "PLEXSPHERE_DSN";

/// The variable in which the harness passes its pid to the replicas it starts.
pub const ENV_PARENT: &str = "ELECTOR_REPLICA_PARENT";

/// Makes this process die with the harness that started it: the kernel SIGKILLs it when its
/// parent ends (`PR_SET_PDEATHSIG`), a frozen (SIGSTOPped) replica too, so a SIGKILLed harness
/// leaves no replica polling the database. The signal follows the parent *thread*: the harness
/// spawns replicas from its runtime's worker threads, which live as long as it does. A parent
/// that ended before this call (its pid in [`ENV_PARENT`] is no longer the parent) ends the
/// replica at once.
///
/// # Errors
/// The kernel refused, or the parent is gone already.
fn die_with_parent() -> anyhow::Result<()> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .context("PR_SET_PDEATHSIG")?;
    let expected = std::env::var(ENV_PARENT)
        .ok()
        .and_then(|p| p.parse::<i32>().ok());
    let parent = nix::unistd::getppid().as_raw();
    if let Some(expected) = expected.filter(|e| *e != parent) {
        bail!("the harness that started this replica (pid {expected}) is gone");
    }
    Ok(())
}

/// The `replica` subcommand's flags (each also readable from the environment variable named).
#[derive(Clone, Debug, clap::Args)]
pub struct ReplicaArgs {
    /// The replica's name; also the Postgres `application_name` of its connections, so
    /// pg_stat_activity maps a backend to a replica.
    #[arg(long, env = "REPLICA_NAME")]
    pub name: String,

    /// The PostgreSQL connection string. Without one the replica builds no elector and wires no
    /// background loop (LOOP-4).
    #[arg(long, env = ENV_DSN, hide_env_values = true)]
    pub dsn: Option<String>,

    /// The elector's check interval T, in milliseconds; 0 hands the elector a zero interval,
    /// which it takes as its default, 5 s (CFG-2).
    #[arg(long, env = "REPLICA_CHECK_INTERVAL_MS", default_value_t = 5000)]
    pub check_interval_ms: u64,

    /// The HTTP listen address (`/metrics`, `/readyz`, `/workers`, `/leader`, `/control`).
    #[arg(long, env = "REPLICA_HTTP", default_value = "127.0.0.1:0")]
    pub http: SocketAddr,

    /// The cadence of the ticked loops, in milliseconds. Default: T.
    #[arg(long, env = "REPLICA_TICK_MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub tick_ms: Option<u64>,

    /// The size of the replica's connection pool (all opened at boot).
    #[arg(long, env = "REPLICA_POOL_MAX_SIZE", default_value_t = 8,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub pool_max_size: u64,

    /// Retire pooled connections older than this many milliseconds (`Pool::retain` on a
    /// timer). The elector's lock connection is outside the pool and never retired (SESS-1).
    #[arg(long, env = "REPLICA_POOL_MAX_LIFETIME_MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub pool_max_lifetime_ms: Option<u64>,

    /// Restarts allowed per worker within the restart window (LOOP-5).
    #[arg(long, env = "REPLICA_RESTART_BUDGET", default_value_t = 5)]
    pub restart_budget: u32,

    /// The sliding window the restarts are counted in, in milliseconds.
    #[arg(long, env = "REPLICA_RESTART_WINDOW_MS", default_value_t = 60_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub restart_window_ms: u64,

    /// The pause before a worker is restarted, in milliseconds.
    #[arg(long, env = "REPLICA_RESTART_BACKOFF_MS", default_value_t = 1000)]
    pub restart_backoff_ms: u64,

    /// X-VERIFY: the leader's check also proves its session still holds the lock.
    #[arg(long, env = "REPLICA_VERIFY_LOCK", value_parser = clap::builder::BoolishValueParser::new())]
    pub verify_lock: bool,

    /// X-FENCE: each term carries a fencing token, and each leader-only pass writes its row
    /// twice in one statement, unfenced and fenced by the token.
    #[arg(long, env = "REPLICA_FENCE", value_parser = clap::builder::BoolishValueParser::new())]
    pub fence: bool,

    /// X-WAKE: a standby keeps a session queued on the lock, so it leads within milliseconds
    /// of a release (graceful or a crash) instead of at its next check.
    #[arg(long, env = "REPLICA_WAKE", value_parser = clap::builder::BoolishValueParser::new())]
    pub wake: bool,

    /// Turn off the elector's shared-session guard (POOL-1), to show the transaction-mode
    /// pooler hazard: the spec's plain `pg_try_advisory_lock`.
    #[arg(long)]
    pub no_shared_session_guard: bool,

    /// The same as the contract's variable: `0` (or `false`, `off`) turns the guard off.
    #[arg(long, env = "REPLICA_SHARED_SESSION_GUARD", value_name = "ON", hide = true,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub shared_session_guard: Option<bool>,

    /// Make this loop's passes fail from the start (repeatable; `/control` can undo it).
    #[arg(long = "fail-loop", value_name = "LOOP")]
    pub fail_loops: Vec<String>,

    /// Make this loop's passes panic from the start (repeatable; `/control` can undo it).
    #[arg(long = "panic-loop", value_name = "LOOP")]
    pub panic_loops: Vec<String>,
}

impl ReplicaArgs {
    /// The interval as told: zero asks the elector for its default.
    fn check_interval(&self) -> Duration {
        Duration::from_millis(self.check_interval_ms)
    }

    /// The loops' cadence: `--tick-ms`, else the interval the elector runs at.
    fn tick(&self) -> Duration {
        match self.tick_ms {
            Some(ms) => Duration::from_millis(ms),
            None if self.check_interval_ms == 0 => elector::DEFAULT_CHECK_INTERVAL,
            None => self.check_interval(),
        }
    }

    fn budget(&self) -> RestartBudget {
        RestartBudget {
            max_restarts: self.restart_budget,
            window: Duration::from_millis(self.restart_window_ms),
            backoff: Duration::from_millis(self.restart_backoff_ms),
        }
    }
}

/// Runs one replica until SIGTERM or SIGINT, then shuts down gracefully and exits 0.
///
/// # Errors
/// A bad flag, or a DSN that is invalid or unreachable at boot (checked once, within
/// [`BOOT_CONNECT_TIMEOUT`]); the caller prints the error on one line and exits non-zero.
/// A database that goes away later is not an error: the elector logs and retries.
pub async fn run(args: ReplicaArgs) -> anyhow::Result<ExitCode> {
    die_with_parent()?;
    // RUN-7: the elector's hook keeps a panic's stack unresolved for the ERROR line, written
    // after the unwind. The default hook would resolve and print a backtrace first when
    // RUST_BACKTRACE is set, delaying the unwind (and the abandonment) by a symbol load: print
    // the panic on its own lines instead, whatever the environment says.
    std::panic::set_hook(Box::new(|info| eprintln!("{info}")));
    let emitter = events::Emitter::new(&args.name);
    events::init_tracing();

    let mut sigterm = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut sigint = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;

    let interval = args.check_interval();
    let tick = args.tick();
    let control = Arc::new(control::Control::new(args.dsn.is_some()));
    for (names, mode) in [
        (&args.fail_loops, control::LoopMode::Fail),
        (&args.panic_loops, control::LoopMode::Panic),
    ] {
        for name in names {
            if let Err(e) = control.set_loop(name, mode) {
                bail!("--fail-loop/--panic-loop: {e}");
            }
        }
    }

    // The database comes first: an invalid or unreachable DSN ends the boot with a clear error.
    let database = match &args.dsn {
        None => None,
        Some(dsn) => {
            let pool_max = usize::try_from(args.pool_max_size).unwrap_or(usize::MAX);
            Some(db::Database::connect(dsn, &args.name, pool_max, BOOT_CONNECT_TIMEOUT).await?)
        }
    };

    let registry = prometheus::Registry::new();
    let shutdown = CancellationToken::new();
    let mut supervisor = Supervisor::new(args.budget());
    let readiness = elector::readiness::Readiness::new();

    let mut elector_handle = None;
    let mut leadership = None;
    let mut boot = None;
    if let Some(database) = &database {
        let mut config = Config::new(database.pool.clone())
            .check_interval(interval)
            .registry(registry.clone());
        config.verify_lock = args.verify_lock;
        config.fencing = args.fence;
        config.wake = args.wake;
        config.detect_shared_session =
            !args.no_shared_session_guard && args.shared_session_guard != Some(false);
        let elector = Elector::new(config).context("cannot build the elector")?;
        if let Some(ms) = args.pool_max_lifetime_ms {
            database.enforce_max_lifetime(Duration::from_millis(ms), shutdown.clone());
        }
        let ctx = loops::LoopContext::new(
            elector.clone(),
            database.clone(),
            control.clone(),
            emitter.clone(),
            tick,
        );
        boot =
            Some(loops::wire(&ctx, &mut supervisor, &readiness).context("cannot build the loops")?);
        leadership = Some(events::LeadershipStream::start(
            emitter.clone(),
            elector.subscribe(),
        ));
        elector_handle = Some(elector);
    }
    readiness.add(supervisor.probe());
    let statuses = supervisor.statuses();
    events::stream_workers(emitter.clone(), statuses.subscribe());

    let listener = tokio::net::TcpListener::bind(args.http)
        .await
        .with_context(|| format!("cannot listen on {}", args.http))?;
    let addr = listener.local_addr().context("the listener's address")?;
    let app = http::AppState {
        replica: args.name.clone(),
        registry,
        readiness,
        statuses: statuses.clone(),
        elector: elector_handle.clone(),
        control: control.clone(),
    };
    let server = tokio::spawn(http::serve(listener, app, shutdown.clone()));
    let ending = Ending {
        emitter: emitter.clone(),
        shutdown: shutdown.clone(),
        server,
        statuses,
        leadership,
    };
    tracing::info!(http = %addr, elector = database.is_some(), "replica started");
    emitter.emit(ReplicaEvent::Started {
        pid: std::process::id(),
        http: addr.to_string(),
        check_interval_ms: args.check_interval_ms,
        elector: database.is_some(),
    });

    // LOOP-6: the boot passes run on every replica, ungated, before it reports ready; the
    // supervisor starts every worker just before the replica serves.
    if let Some(boot) = boot {
        tokio::select! {
            () = boot.run() => {}
            _ = sigterm.recv() => return ending.finish(None).await,
            _ = sigint.recv() => return ending.finish(None).await,
        }
    }
    let workers = tokio::spawn(supervisor.run(shutdown.clone()));
    emitter.emit(ReplicaEvent::Ready);
    tracing::info!("replica ready");

    tokio::select! {
        _ = sigterm.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = sigint.recv() => tracing::info!("SIGINT: shutting down"),
    }
    ending.finish(Some(workers)).await
}

/// What the graceful end needs.
struct Ending {
    emitter: events::Emitter,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    statuses: elector::supervisor::WorkerStatuses,
    leadership: Option<events::LeadershipStream>,
}

impl Ending {
    /// The graceful end (RUN-6): `shutdown` first, then the token (the elector unlocks), then
    /// the workers are awaited within [`SHUTDOWN_GRACE`], the last leadership transition (the
    /// release) is reported, and each worker's `stopped`.
    async fn finish(
        mut self,
        workers: Option<tokio::task::JoinHandle<()>>,
    ) -> anyhow::Result<ExitCode> {
        self.emitter.emit(ReplicaEvent::Shutdown);
        self.shutdown.cancel();
        // Workers that never started (a shutdown during the boot passes) report nothing.
        if let Some(workers) = workers {
            if tokio::time::timeout(SHUTDOWN_GRACE, workers).await.is_err() {
                tracing::warn!(
                    grace = ?SHUTDOWN_GRACE,
                    "workers did not end within the shutdown grace; exiting anyway"
                );
            }
            if let Some(leadership) = &mut self.leadership {
                leadership.flush();
            }
            self.report_stopped();
        }
        if tokio::time::timeout(Duration::from_secs(1), self.server)
            .await
            .is_err()
        {
            tracing::warn!("the HTTP server did not stop within 1 s");
        }
        tracing::info!("replica stopped");
        Ok(ExitCode::SUCCESS)
    }

    fn report_stopped(&self) {
        for status in self.statuses.snapshot() {
            if status.state == WorkerState::Stopped {
                self.emitter.emit(ReplicaEvent::Worker {
                    worker: status.name,
                    state: "stopped".to_owned(),
                    exit: status.last_exit,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Args as _;

    use super::*;

    #[test]
    fn every_env_var_of_the_flags_is_listed() {
        let cmd = ReplicaArgs::augment_args(clap::Command::new("replica"));
        let read: Vec<String> = cmd
            .get_arguments()
            .filter_map(|a| a.get_env())
            .map(|e| e.to_string_lossy().into_owned())
            .collect();
        let mut listed: Vec<String> = ENV_VARS.iter().map(|s| (*s).to_owned()).collect();
        let mut read_sorted = read.clone();
        read_sorted.sort();
        listed.sort();
        assert_eq!(read_sorted, listed);
    }
}
