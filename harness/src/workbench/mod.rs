//! `harness up`, the incident workbench: a topology and N replicas kept running for a person,
//! sampled as a scenario is, with a live timeline on the terminal; faults are typed at it from
//! another terminal (`harness fault partition r1`, `harness heal`); on exit it writes the run's
//! evidence folder and a scenario file of what was done, which `harness run` replays.
//!
//! ```text
//! harness up --replicas 3 --t 500ms            # terminal 1: addresses, then the live timeline
//! harness fault partition leader               # terminal 2: the same verbs as scenario files
//! harness heal                                 # lifts every fault in effect
//! # Ctrl-C in terminal 1: target/up/scenarios/up-<run>/ and target/up/up-<run>.toml
//! harness run target/up/up-<run>.toml          # replays it
//! ```
//!
//! | concern | module |
//! |---|---|
//! | the socket `harness fault` / `heal` talk to | [`control`] |
//! | the live timeline and the live checks | [`stream`] |
//! | what was done, as a scenario | [`incident`] |
//! | what removes the run after a SIGKILL | [`reaper`] |
//!
//! The run itself is a [`Session`]: the scenario runner's stage, player, samplers, timeline,
//! checks and evidence writer, played one step at a time.

pub mod control;
pub mod incident;
pub mod reaper;
pub mod stream;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _};
use tokio::sync::mpsc;

use crate::check::Verdict;
use crate::scenario::model::{DbPath, ReplicaDecl};
use crate::scenario::run::{RunOptions, Session};
use crate::topology::images::{ImageArgs, Images};
use crate::topology::{random_run_id, BackendKind, PoolMode, ReplicaPath, TopologyConfig};
use control::{Call, Listener, Played, Reply, Request};
use incident::Incident;

/// The `up` subcommand's flags.
#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// How many replicas to start (`r1`, `r2`, ...), at most 10; 0 starts the services only.
    #[arg(long, short = 'n', default_value = "3", value_parser = crate::flags::replicas)]
    pub replicas: usize,
    /// The replicas' check interval T (`500ms`, `5s`: a unit is required), 50 ms to 10 min.
    #[arg(long = "t", value_name = "DURATION", default_value = "5s",
          value_parser = crate::flags::check_interval)]
    pub check_interval: Duration,
    /// Each replica's path to PostgreSQL, in order (`direct`, `pgbouncer-session`,
    /// `pgbouncer-transaction`); replicas without one go direct.
    #[arg(long, value_delimiter = ',')]
    pub paths: Vec<ReplicaPath>,
    /// Also run these PgBouncers (those the paths need always run).
    #[arg(long = "pgbouncer", value_name = "MODE")]
    pub pgbouncers: Vec<PoolMode>,
    /// Where the services run.
    #[arg(long, value_enum, default_value_t = BackendKind::Docker)]
    pub backend: BackendKind,
    /// The images (Docker backend).
    #[command(flatten)]
    pub images: ImageArgs,
    /// Where the evidence folder (`scenarios/<name>/`, the replicas' logs included) and the
    /// scenario file (`<name>.toml`) go.
    #[arg(long, default_value = "target/up")]
    pub out: PathBuf,
    /// The name of the recorded scenario (default: `up-<run id>`).
    #[arg(long)]
    pub name: Option<String>,
    /// The seed of the random choices (which replica a `standby` target picks).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop by itself after this long instead of waiting for Ctrl-C.
    #[arg(long, value_name = "DURATION", value_parser = crate::flags::positive)]
    pub hold: Option<Duration>,
    /// The control folder, where `harness fault` and `harness heal` find this instance.
    #[arg(long, env = control::ENV_CONTROL_DIR, default_value_os_t = control::default_dir())]
    pub control_dir: PathBuf,
    /// The replica program (default: the harness's own replica), to reproduce an incident
    /// with a team's own service.
    #[command(flatten)]
    pub program: crate::replica::program::ProgramArgs,
}

impl UpArgs {
    /// The rules between flags (each flag's own range is checked as it is parsed).
    ///
    /// # Errors
    /// More paths than replicas.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.paths.len() > self.replicas {
            bail!(
                "{} paths for {} replicas: give at most one path per replica",
                self.paths.len(),
                self.replicas
            );
        }
        Ok(())
    }

    /// `r1`, `r2`, ... with their paths.
    fn replica_decls(&self) -> std::collections::BTreeMap<String, ReplicaDecl> {
        (0..self.replicas)
            .map(|i| {
                let path = DbPath::from(self.paths.get(i).copied().unwrap_or_default());
                let decl = ReplicaDecl {
                    path,
                    ..ReplicaDecl::default()
                };
                (format!("r{}", i + 1), decl)
            })
            .collect()
    }

    fn topology(&self, run: &str) -> TopologyConfig {
        let mut config = TopologyConfig {
            backend: self.backend,
            images: Images::from(&self.images),
            // This command handles SIGINT / SIGTERM itself and shuts down in order.
            signal_guard: false,
            run_id: Some(run.to_owned()),
            ..TopologyConfig::default()
        };
        for &mode in &self.pgbouncers {
            config = config.pgbouncer(mode);
        }
        config
    }
}

/// Starts the topology and the replicas, prints where everything is, streams the timeline and
/// takes faults until Ctrl-C (or SIGTERM, or `--hold`); then stops the replicas, removes the
/// services, writes the evidence and the scenario file, and prints the checks. Exits 1 when a
/// check found a violation.
///
/// # Errors
/// A flag rule is broken, or the topology or a replica did not start (what started is
/// removed again).
pub async fn up(args: UpArgs) -> anyhow::Result<ExitCode> {
    args.validate()?;
    let run = random_run_id();
    let name = args.name.clone().unwrap_or_else(|| format!("up-{run}"));
    let binary = std::env::current_exe().context("the harness binary's path")?;
    let socket = control::socket_path(&args.control_dir, &run);
    let reaper = reaper::Reaper::spawn(&binary, &run, &socket)?;
    let incident = Incident::new(&name, args.replica_decls(), args.check_interval, &run);
    let opts = RunOptions {
        t: args.check_interval,
        seed: args.seed.unwrap_or_else(|| fastrand::u64(..)),
        out: args.out.clone(),
        program: args.program.program(binary.clone())?,
        images: Images::from(&args.images),
        slack: Duration::from_millis(50),
        repeat: 1,
    };
    let mut signals = Signals::new()?;
    eprintln!(
        "harness up: starting the {} topology (run {run})...",
        args.backend
    );
    let started = tokio::select! {
        s = Session::start(incident.so_far(), &opts, args.topology(&run)) => s?,
        s = signals.next() => {
            eprintln!("harness up: {s} while starting; stopping");
            return Ok(ExitCode::from(130));
        }
    };
    let (listener, calls) = Listener::bind(&args.control_dir, &run)?;
    let mut bench = Bench {
        session: started,
        incident,
    };
    bench.print_addresses(&listener, reaper.pid()).await;
    let monitor = stream::Monitor::start(
        bench.session.timeline().clone(),
        bench.session.events(),
        (bench.session.bounds(), bench.session.level()),
        Box::new(std::io::stdout()),
    );
    bench.serve(calls, &mut signals, args.hold).await;
    drop(listener);
    monitor.stop().await;
    let code = bench.finish(&args.out).await;
    drop(reaper);
    code
}

/// The running workbench: the session and what was done on it.
struct Bench {
    session: Session,
    incident: Incident,
}

impl Bench {
    async fn print_addresses(&self, listener: &Listener, reaper: u32) {
        println!("run {}", self.session.topology().run_id());
        println!("{}", self.session.topology().describe().await.trim_end());
        for (name, pid, base) in self.session.replicas() {
            println!("  replica    {name} (pid {pid}): {base}/metrics {base}/readyz");
        }
        println!(
            "  control    {} (reaper pid {reaper})",
            listener.path().display()
        );
        println!("  evidence   {}", self.session.evidence());
        println!("Faults from another terminal: `harness fault VERB [TARGET]`, `harness heal`.");
        println!("Ctrl-C to stop, write the evidence and the scenario, and remove everything.");
    }

    /// Plays the calls until a signal or the end of `hold`.
    async fn serve(
        &mut self,
        mut calls: mpsc::Receiver<Call>,
        signals: &mut Signals,
        hold: Option<Duration>,
    ) {
        let end = async {
            match hold {
                Some(hold) => tokio::time::sleep(hold).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(end);
        loop {
            tokio::select! {
                () = &mut end => break,
                s = signals.next() => {
                    eprintln!("harness up: {s}");
                    break;
                }
                Some((request, reply)) = calls.recv() => {
                    let answer = self.call(request).await;
                    if let Some(e) = &answer.error {
                        eprintln!("harness up: refused: {e}");
                    }
                    let _ = reply.send(answer);
                }
            }
        }
    }

    /// Reads a request as steps (the scenario file's reader) and plays them in order.
    async fn call(&mut self, request: Request) -> Reply {
        let steps = match request {
            Request::Fault { step } => self.incident.fault(step).map(|s| vec![s]),
            Request::Heal { what } => self.incident.heals(what.as_deref()),
        };
        let mut reply = Reply::default();
        for step in steps.unwrap_or_else(|e| {
            reply.error = Some(e);
            Vec::new()
        }) {
            match self.session.act(&step).await {
                Ok(acted) => {
                    reply.steps.push(Played {
                        label: step.label(),
                        at_ms: acted.began_ms,
                        records: acted.records.clone(),
                    });
                    self.incident.played(step, &acted);
                }
                Err(e) => {
                    reply.error = Some(format!("{}: {e:#}", step.label()));
                    break;
                }
            }
        }
        reply
    }

    /// Stops everything, writes the evidence and the scenario file, prints the checks.
    async fn finish(self, out: &std::path::Path) -> anyhow::Result<ExitCode> {
        let end_ms = self.session.now_ms();
        let recorded = self.incident.scenario(end_ms);
        eprintln!("harness up: stopping the replicas and removing the services...");
        let evidence = self.session.evidence().to_owned();
        let outcome = self.session.finish(&recorded, &[]).await?;
        let mut violated = false;
        for c in &outcome.source.checks {
            violated |= c.verdict == Verdict::Invalid;
            println!(
                "{:>8}  {}: {}",
                format!("{:?}", c.verdict).to_lowercase(),
                c.name,
                c.message
            );
        }
        println!("evidence: {}", out.join(&evidence).display());
        if recorded.replicas.is_empty() {
            println!("no replicas: no scenario file");
        } else {
            let file = out.join(&recorded.file);
            std::fs::write(&file, recorded.to_toml())
                .with_context(|| format!("writing {}", file.display()))?;
            println!(
                "scenario: {} (replay: harness run {})",
                file.display(),
                file.display()
            );
        }
        Ok(if violated {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        })
    }
}

/// SIGINT and SIGTERM.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            int: signal(SignalKind::interrupt()).context("listening for SIGINT")?,
            term: signal(SignalKind::terminate()).context("listening for SIGTERM")?,
        })
    }

    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.int.recv() => "SIGINT",
            _ = self.term.recv() => "SIGTERM",
        }
    }
}
