//! The reaper of a `harness up` run: `harness reap --run <id>`, started by `harness up` in a
//! process group of its own (a Ctrl-C in the terminal does not reach it) with its stdin a pipe
//! from `harness up`. The pipe closes when `harness up` ends, however it ends (the kernel
//! closes a SIGKILLed process's descriptors too); the reaper then removes whatever of the run
//! is left (its containers and network, or its local processes and directory, and its control
//! socket) and exits. After a clean exit there is nothing left and it exits at once.
//!
//! What it cannot do: if it is SIGKILLed as well (say `kill -9` of both, or the machine
//! reboots), the next topology start sweeps the run's resources once their owner is gone
//! ([`cleanup::sweep`](crate::topology::cleanup::sweep)).

use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode, Stdio};

use anyhow::Context as _;
use tokio::io::AsyncReadExt as _;

use crate::topology::cleanup::{sweep, SweepScope};

/// The flags of `harness reap`.
#[derive(Clone, Debug, clap::Args)]
pub struct ReapArgs {
    /// The run whose resources to remove when stdin closes.
    #[arg(long)]
    pub run: String,
    /// The run's control socket, removed too.
    #[arg(long)]
    pub socket: Option<PathBuf>,
}

/// Waits for stdin to close, then removes the run's resources.
///
/// # Errors
/// The Docker daemon answered the sweep with an error.
pub async fn reap(args: ReapArgs) -> anyhow::Result<ExitCode> {
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 256];
    while matches!(stdin.read(&mut buf).await, Ok(n) if n > 0) {}
    if let Some(socket) = &args.socket {
        let _ = std::fs::remove_file(socket);
    }
    let report = sweep(SweepScope::Run(args.run.clone())).await?;
    if !report.is_empty() {
        eprintln!("harness reap: run {}: removed {report:?}", args.run);
    }
    Ok(ExitCode::SUCCESS)
}

/// A running reaper; dropping it (or the end of this process) lets it do its work.
#[derive(Debug)]
pub struct Reaper {
    child: Child,
}

impl Reaper {
    /// Starts `binary reap --run <run> --socket <socket>` in a process group of its own.
    ///
    /// # Errors
    /// It could not be started.
    pub fn spawn(binary: &Path, run: &str, socket: &Path) -> anyhow::Result<Reaper> {
        use std::os::unix::process::CommandExt as _;
        let child = std::process::Command::new(binary)
            .args(["reap", "--run", run, "--socket"])
            .arg(socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("starting the reaper (harness reap)")?;
        Ok(Reaper { child })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        // Closing its stdin is the signal; it exits on its own.
        drop(self.child.stdin.take());
    }
}
