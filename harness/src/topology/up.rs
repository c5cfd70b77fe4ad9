//! `harness up`: a topology and N replicas kept running for a person (to reproduce a failover
//! locally, or to poke at the replicas' HTTP APIs and the Toxiproxy API by hand), until Ctrl-C.
//!
//! ```text
//! harness up --replicas 3 --t 1s --paths direct,direct,pgbouncer-transaction
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _};

use super::images::{ImageArgs, Images};
use super::{BackendKind, ReplicaPath, Topology, TopologyConfig};
use crate::replica::{ReplicaProcess, ReplicaSpec};

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
    pub pgbouncers: Vec<super::PoolMode>,
    /// Where the services run.
    #[arg(long, value_enum, default_value_t = BackendKind::Docker)]
    pub backend: BackendKind,
    /// The images (Docker backend).
    #[command(flatten)]
    pub images: ImageArgs,
    /// A directory for the replicas' logs (default: a new directory under the temp dir).
    #[arg(long)]
    pub logs: Option<PathBuf>,
    /// Stop by itself after this long instead of waiting for Ctrl-C.
    #[arg(long, value_name = "DURATION", value_parser = crate::flags::positive)]
    pub hold: Option<Duration>,
}

/// Starts the topology and the replicas, prints where everything is, waits for Ctrl-C (or
/// SIGTERM, or `--hold`), then stops the replicas (SIGTERM) and removes the services.
///
/// # Errors
/// The topology or a replica did not start (what started is removed again).
pub async fn up(args: UpArgs) -> anyhow::Result<ExitCode> {
    if args.paths.len() > args.replicas {
        bail!(
            "{} paths for {} replicas: give at most one path per replica",
            args.paths.len(),
            args.replicas
        );
    }
    let paths: Vec<ReplicaPath> = (0..args.replicas)
        .map(|i| args.paths.get(i).copied().unwrap_or_default())
        .collect();
    let mut config = TopologyConfig {
        backend: args.backend,
        images: Images::from(&args.images),
        // This command handles SIGINT / SIGTERM itself and shuts down in order.
        signal_guard: false,
        ..TopologyConfig::default()
    }
    .for_paths(paths.iter().copied())
    .proxies(args.replicas);
    for &mode in &args.pgbouncers {
        config = config.pgbouncer(mode);
    }
    let mut signals = Signals::new()?;
    eprintln!("harness up: starting the {} topology...", args.backend);
    let topology = tokio::select! {
        t = Topology::start(config) => t?,
        s = signals.next() => {
            eprintln!("harness up: {s} while starting; stopping");
            return Ok(ExitCode::from(130));
        }
    };
    println!("run {}", topology.run_id());
    let result = serve(&topology, &args, &paths, &mut signals).await;
    eprintln!("harness up: removing the services...");
    topology.shutdown().await;
    eprintln!("harness up: done");
    result
}

async fn serve(
    topology: &Topology,
    args: &UpArgs,
    paths: &[ReplicaPath],
    signals: &mut Signals,
) -> anyhow::Result<ExitCode> {
    let wanted: Vec<(String, ReplicaPath)> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| (format!("r{}", i + 1), *p))
        .collect();
    let proxies = topology.add_proxies(&wanted).await?;
    let mut replicas = Vec::new();
    if !proxies.is_empty() {
        let logs = match &args.logs {
            Some(dir) => dir.clone(),
            None => std::env::temp_dir().join(format!("elector-up-{}", topology.run_id())),
        };
        std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
        let binary = std::env::current_exe().context("the harness binary's path")?;
        let spawns = proxies.iter().map(|p| {
            let mut spec = ReplicaSpec::new(&p.name, args.check_interval).dsn(p.dsn());
            spec.stderr_log = Some(logs.join(format!("{}.log", p.name)));
            ReplicaProcess::spawn(&binary, spec)
        });
        let started = tokio::select! {
            r = futures::future::join_all(spawns) => r,
            s = signals.next() => {
                eprintln!("harness up: {s} while starting the replicas; stopping");
                return Ok(ExitCode::from(130));
            }
        };
        for r in started {
            replicas.push(r.context("starting a replica")?);
        }
        eprintln!("harness up: replica logs in {}", logs.display());
    }
    println!("{}", topology.describe().await.trim_end());
    for r in &replicas {
        let base = r.base_url();
        println!(
            "  replica    {} (pid {}): {base}/metrics {base}/readyz",
            r.name(),
            r.pid()
        );
    }
    println!("Ctrl-C to stop and remove everything.");
    let code = match args.hold {
        Some(hold) => tokio::select! {
            _ = tokio::time::sleep(hold) => ExitCode::SUCCESS,
            s = signals.next() => { eprintln!("harness up: {s}"); ExitCode::SUCCESS }
        },
        None => {
            let s = signals.next().await;
            eprintln!("harness up: {s}");
            ExitCode::SUCCESS
        }
    };
    eprintln!("harness up: stopping the replicas...");
    for r in &mut replicas {
        let _ = r.sigterm();
    }
    for r in &mut replicas {
        if tokio::time::timeout(Duration::from_secs(5), r.wait())
            .await
            .is_err()
        {
            let _ = r.sigkill();
            let _ = r.wait().await;
        }
    }
    Ok(code)
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
