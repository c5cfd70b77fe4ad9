//! The `harness` command line: `replica` (one replica process), `up` (a topology kept running
//! for a person), and, with the conformance suite, `run`.

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
    /// Starts PostgreSQL, PgBouncer, Toxiproxy and N replicas and keeps them running until Ctrl-C.
    Up(crate::topology::UpArgs),
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
            Command::Up(args) => crate::topology::up(args).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("harness: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
