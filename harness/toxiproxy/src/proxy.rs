//! A proxy: its listener, its accept loop and its live connections.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::conn::{self, ConnCtx, Order};
use crate::error::ApiError;
use crate::journal::Journal;
use crate::net::{resolve_for_compare, resolve_listen};
use crate::toxic::{TimeoutMode, ToxicView};
use crate::toxics::{ToxicCollection, ToxicSet};

/// Shared source of per-connection random seeds (seeded by `-seed` for reproducible runs).
pub(crate) type SeedSource = Arc<Mutex<fastrand::Rng>>;

/// What every proxy of a server shares.
#[derive(Clone, Debug)]
pub(crate) struct ProxyOptions {
    /// Seeds of the connections' randomness.
    pub seeds: SeedSource,
    /// What an applied `timeout` toxic does when its input ends.
    pub timeout_mode: TimeoutMode,
}

/// The JSON form of a proxy: `{name, listen, upstream, enabled, toxics}`.
#[derive(Clone, Debug, Serialize)]
pub struct ProxyView {
    /// Name.
    pub name: String,
    /// Listen address; the bound address once the proxy has started (port 0 resolved).
    pub listen: String,
    /// Upstream address.
    pub upstream: String,
    /// Whether the proxy listens.
    pub enabled: bool,
    /// Its toxics.
    pub toxics: Vec<ToxicView>,
}

/// A running listener and its connections.
#[derive(Debug)]
struct Running {
    cancel: CancellationToken,
    tracker: TaskTracker,
}

/// A proxy.
#[derive(Debug)]
pub(crate) struct Proxy {
    pub name: String,
    pub listen: String,
    pub upstream: String,
    pub toxics: ToxicCollection,
    /// What its connections said (kept across a disable and an enable).
    pub journal: Arc<Journal>,
    /// The latest statement its connections are to run themselves (`POST .../inject`).
    orders: watch::Sender<Option<Arc<Order>>>,
    running: Option<Running>,
    options: ProxyOptions,
}

impl Proxy {
    /// A stopped proxy.
    pub fn new(name: String, listen: String, upstream: String, options: ProxyOptions) -> Self {
        Self {
            name,
            listen,
            upstream,
            toxics: ToxicCollection::new(),
            journal: Arc::default(),
            orders: watch::Sender::new(None),
            running: None,
            options,
        }
    }

    /// Whether the proxy listens.
    /// Each live connection runs `injection`'s statement once, when its session is idle
    /// within the injection's window; connections opened later do not.
    pub fn inject(&self, injection: wiretap::Injection) {
        let until =
            tokio::time::Instant::now() + std::time::Duration::from_millis(injection.within_ms);
        self.orders.send_replace(Some(Arc::new(Order {
            sql: injection.sql,
            until,
        })));
    }

    pub fn enabled(&self) -> bool {
        self.running.is_some()
    }

    /// The JSON form.
    pub fn view(&self) -> ProxyView {
        ProxyView {
            name: self.name.clone(),
            listen: self.listen.clone(),
            upstream: self.upstream.clone(),
            enabled: self.enabled(),
            toxics: self.toxics.views(),
        }
    }

    /// Whether `listen` and `upstream` name another proxy than this one's, like upstream's
    /// `Proxy.Differs`: the new listen address is resolved first (`localhost:8666` is the
    /// stored `127.0.0.1:8666`), the upstream is compared as given. An address that does not
    /// resolve is a 500 with the resolver's error, as upstream answers it.
    pub async fn differs(&self, listen: &str, upstream: &str) -> Result<bool, ApiError> {
        let resolved = resolve_for_compare(listen)
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?;
        Ok(self.listen != resolved.to_string() || self.upstream != upstream)
    }

    /// Starts listening; afterwards `listen` is the bound address. A listen failure is a 500
    /// with Go's wording (`listen tcp ADDR: ...`), as upstream answers it.
    pub async fn start(&mut self) -> Result<(), ApiError> {
        if self.running.is_some() {
            return Ok(());
        }
        let listener = bind(&self.listen)
            .await
            .map_err(|e| ApiError::internal(format!("listen tcp {}: {e}", self.listen)))?;
        let local = listener
            .local_addr()
            .map_err(|e| ApiError::internal(e.to_string()))?;
        self.listen = local.to_string();
        let cancel = CancellationToken::new();
        let tracker = TaskTracker::new();
        tracker.spawn(accept_loop(
            listener,
            AcceptCtx {
                name: self.name.clone(),
                upstream: self.upstream.clone(),
                local,
                toxics: self.toxics.subscribe(),
                journal: self.journal.clone(),
                orders: self.orders.subscribe(),
                cancel: cancel.clone(),
                tracker: tracker.clone(),
                options: self.options.clone(),
            },
        ));
        self.running = Some(Running { cancel, tracker });
        info!(name = %self.name, proxy = %self.listen, upstream = %self.upstream, "Started proxy");
        Ok(())
    }

    /// Stops listening and closes every connection; returns once they are closed.
    pub async fn stop(&mut self) {
        let Some(running) = self.running.take() else {
            return;
        };
        running.cancel.cancel();
        running.tracker.close();
        running.tracker.wait().await;
        info!(name = %self.name, proxy = %self.listen, upstream = %self.upstream, "Terminated proxy");
    }
}

/// Binds like Go's `net.Listen("tcp", addr)` (SO_REUSEADDR is set by tokio on Unix).
async fn bind(listen: &str) -> std::io::Result<TcpListener> {
    let candidates = resolve_listen(listen).await?;
    let mut last = None;
    for addr in candidates {
        match TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no address to listen on")))
}

/// What the accept loop needs.
struct AcceptCtx {
    name: String,
    upstream: String,
    local: SocketAddr,
    toxics: watch::Receiver<Arc<ToxicSet>>,
    journal: Arc<Journal>,
    orders: watch::Receiver<Option<Arc<Order>>>,
    cancel: CancellationToken,
    tracker: TaskTracker,
    options: ProxyOptions,
}

async fn accept_loop(listener: TcpListener, ctx: AcceptCtx) {
    loop {
        let accepted = tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => break,
            r = listener.accept() => r,
        };
        let (socket, peer) = match accepted {
            Ok(x) => x,
            Err(err) => {
                warn!(proxy = %ctx.name, listen = %ctx.local, %err, "Error while accepting client");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        info!(name = %ctx.name, client = %peer, proxy = %ctx.local, upstream = %ctx.upstream,
            "Accepted client");
        let seed = ctx
            .options
            .seeds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .u64(..);
        let conn_ctx = ConnCtx {
            proxy: ctx.name.clone(),
            upstream: ctx.upstream.clone(),
            toxics: ctx.toxics.clone(),
            journal: ctx.journal.clone(),
            orders: ctx.orders.clone(),
            cancel: ctx.cancel.child_token(),
            rng: fastrand::Rng::with_seed(seed),
            timeout_mode: ctx.options.timeout_mode,
        };
        ctx.tracker.spawn(conn::serve(socket, peer, conn_ctx));
    }
}
