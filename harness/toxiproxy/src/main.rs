//! `toxiproxy-server`: the workspace's Toxiproxy-compatible server, a drop-in for the upstream
//! binary and image (`-host`, `-port`, `-config`, `-seed`, `-version`), plus its own
//! `-timeout-mode` / `TOXIPROXY_TIMEOUT_MODE`.

use std::io::IsTerminal;
use std::process::ExitCode;

use toxiproxy_server::cli::{Args, ENV_TIMEOUT_MODE, USAGE};
use toxiproxy_server::{Server, TimeoutMode, VERSION};
use tracing::{error, info};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    if args.help {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if args.version {
        println!("toxiproxy-server version {VERSION}");
        return ExitCode::SUCCESS;
    }
    let env_mode = std::env::var_os(ENV_TIMEOUT_MODE).map(|v| v.to_string_lossy().into_owned());
    let timeout_mode = match args.timeout_mode(env_mode.as_deref()) {
        Ok(mode) => mode,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let filter = std::env::var("RUST_LOG")
        .ok()
        .or_else(|| std::env::var("LOG_LEVEL").ok())
        .and_then(|f| EnvFilter::try_new(f.to_ascii_lowercase()).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("cannot start the tokio runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(args, timeout_mode))
}

async fn run(args: Args, timeout_mode: TimeoutMode) -> ExitCode {
    let mut server = Server::new().timeout_mode(timeout_mode);
    if let Some(seed) = args.seed {
        server = server.seed(seed);
    }
    let handle = match server.start(&args.listen_addr()).await {
        Ok(h) => h,
        Err(err) => {
            error!(%err, "Failed to start the HTTP server");
            return ExitCode::FAILURE;
        }
    };
    if let Some(path) = &args.config {
        match std::fs::read(path) {
            Ok(json) => match handle.populate_json(&json).await {
                Ok(proxies) => info!(config = %path, proxies = proxies.len(),
                    "Populated proxies from file"),
                Err(err) => error!(config = %path, %err, "Failed to populate proxies from file"),
            },
            Err(err) => error!(config = %path, %err, "Error reading config file"),
        }
    }
    let signal = wait_for_signal().await;
    info!(signal, "Shutting down");
    handle.shutdown().await;
    ExitCode::SUCCESS
}

async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        },
        _ => {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}
