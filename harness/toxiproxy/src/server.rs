//! The server: the HTTP API on a listener, and the proxies it manages.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::api::{self, AppState};
use crate::collection::{parse_body, Proxies};
use crate::error::Error;
use crate::net::resolve_listen;
use crate::proxy::{ProxyOptions, ProxyView};
use crate::toxic::TimeoutMode;

/// A Toxiproxy-compatible server, to start in-process.
///
/// ```no_run
/// # async fn demo() -> Result<(), toxiproxy_server::Error> {
/// let handle = toxiproxy_server::Server::new().start("127.0.0.1:0").await?;
/// let api = handle.local_addr(); // point a Toxiproxy client here
/// # let _ = api;
/// handle.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct Server {
    seed: Option<u64>,
    timeout_mode: TimeoutMode,
}

impl Server {
    /// A server with a random seed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Seeds the randomness of toxicity rolls and jitter (upstream's `-seed`).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Sets what an applied `timeout` toxic does when its input ends (see the crate docs, "The
    /// `timeout` toxic"). Default: [`TimeoutMode::Upstream`].
    pub fn timeout_mode(mut self, mode: TimeoutMode) -> Self {
        self.timeout_mode = mode;
        self
    }

    /// Binds the HTTP API on `addr` (e.g. `127.0.0.1:0`, `localhost:8474`, `0.0.0.0:8474`) and
    /// serves it in a background task of the current tokio runtime. Logs
    /// `Starting Toxiproxy HTTP server` once listening.
    pub async fn start(self, addr: &str) -> Result<ServerHandle, Error> {
        let listen_err = |source| Error::Listen {
            addr: addr.to_owned(),
            source,
        };
        let mut last = None;
        let mut listener = None;
        for candidate in resolve_listen(addr).await.map_err(listen_err)? {
            match TcpListener::bind(candidate).await {
                Ok(l) => {
                    listener = Some(l);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let listener = listener.ok_or_else(|| {
            listen_err(last.unwrap_or_else(|| std::io::Error::other("no address")))
        })?;
        let local_addr = listener.local_addr().map_err(listen_err)?;
        let rng = match self.seed {
            Some(seed) => fastrand::Rng::with_seed(seed),
            None => fastrand::Rng::new(),
        };
        let state: AppState = Arc::new(tokio::sync::Mutex::new(Proxies::new(ProxyOptions {
            seeds: Arc::new(Mutex::new(rng)),
            timeout_mode: self.timeout_mode,
        })));
        let cancel = CancellationToken::new();
        let app = api::router(state.clone());
        let stop = cancel.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await
        });
        info!(address = %local_addr, timeout_mode = %self.timeout_mode,
            "Starting Toxiproxy HTTP server");
        Ok(ServerHandle {
            local_addr,
            state,
            cancel,
            task,
        })
    }
}

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    local_addr: SocketAddr,
    state: AppState,
    cancel: CancellationToken,
    task: JoinHandle<std::io::Result<()>>,
}

impl ServerHandle {
    /// The address the HTTP API is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Creates or replaces proxies from a JSON list, like `POST /populate` and upstream's
    /// `-config` file; returns the proxies.
    pub async fn populate_json(&self, json: &[u8]) -> Result<Vec<ProxyView>, Error> {
        let body = parse_body(json).map_err(Error::Populate)?;
        let (views, error) = self.state.lock().await.populate(&body).await;
        match error {
            Some(e) => Err(Error::Populate(e)),
            None => Ok(views),
        }
    }

    /// Stops the HTTP API (letting requests in flight finish), then stops every proxy and
    /// closes its connections.
    pub async fn shutdown(self) {
        self.cancel.cancel();
        let mut task = self.task;
        if tokio::time::timeout(Duration::from_secs(5), &mut task)
            .await
            .is_err()
        {
            task.abort();
        }
        self.state.lock().await.stop_all().await;
        info!("Shutdown complete");
    }
}
