//! The `harness` command line: `replica` (one replica process), `up` (a topology kept running
//! for a person, the incident workbench) with `fault` and `heal` (faults typed at it), and, with
//! the conformance suite, `run`, `chaos` (seeded fault schedules checked as a history) and
//! `report merge` (one report from shards run apart).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The elector's conformance and chaos harness.
#[derive(Debug, Parser)]
#[command(name = "harness", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Runs one replica process: the elector, the supervisor, the spec's loops, HTTP and a
    /// JSON-lines event stream on stdout (the harness starts these itself).
    Replica(crate::replica::ReplicaArgs),
    /// Runs the conformance suite (every scenario, or those named) and writes the report.
    Run(crate::suite::RunArgs),
    /// Runs seeded random fault schedules, checks each as a history, and writes every
    /// schedule as a scenario file that `harness run` replays.
    Chaos(crate::chaos::ChaosArgs),
    /// Starts PostgreSQL, PgBouncer, Toxiproxy and N replicas, streams the live timeline, takes
    /// faults from `harness fault` / `harness heal` until Ctrl-C, then writes the evidence and a
    /// scenario file of what was done.
    Up(crate::workbench::UpArgs),
    /// Works on written reports: `merge` joins the output folders of shards (runs made apart,
    /// e.g. on several CI runners) into one report.
    Report(crate::merge::ReportArgs),
    /// Prints from which level of the replica contract (docs/replica-contract.md) each clause
    /// is decided, and by which checks, as a Markdown table.
    Contract(crate::decidable::ContractArgs),
    /// Applies a fault on the running `harness up`: the verbs and targets of scenario files.
    Fault(crate::workbench::control::FaultArgs),
    /// Lifts faults on the running `harness up`: one by name, every one on a target, or all.
    Heal(crate::workbench::control::HealArgs),
    /// Removes a `harness up` run's resources once its stdin closes (`harness up` starts it).
    #[command(hide = true)]
    Reap(crate::workbench::reaper::ReapArgs),
}

/// Parses the command line and runs it; the exit code says whether it succeeded.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("harness: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Replica(args) => crate::replica::run(args).await,
            Command::Run(args) => crate::suite::main(args).await,
            Command::Chaos(args) => crate::chaos::main(args).await,
            Command::Up(args) => crate::workbench::up(args).await,
            Command::Report(args) => crate::merge::main(args),
            Command::Contract(args) => crate::decidable::print(&args),
            Command::Fault(args) => crate::workbench::control::fault(args).await,
            Command::Heal(args) => crate::workbench::control::heal(args).await,
            Command::Reap(args) => crate::workbench::reaper::reap(args).await,
        }
    });
    crate::topology::cleanup::wait_if_closing();
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("harness: error: {e:#}");
            crate::exit::code_of(&e)
        }
    }
}
