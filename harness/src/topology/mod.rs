//! The services of a run (being written).

/// The `up` subcommand's flags.
#[derive(Debug, clap::Args)]
pub struct UpArgs {}

/// Starts a topology and keeps it until Ctrl-C.
pub async fn up(_args: UpArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("the topology is not built yet")
}
