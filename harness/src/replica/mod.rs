//! The replica process (being written).

/// The `replica` subcommand's flags.
#[derive(Debug, clap::Args)]
pub struct ReplicaArgs {}

/// Runs one replica until SIGTERM.
pub async fn run(_args: ReplicaArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("the replica process is not built yet")
}
