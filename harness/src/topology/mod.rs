//! The services of a run: PostgreSQL, optional PgBouncers (session and transaction pool mode)
//! and one Toxiproxy server, with one Toxiproxy proxy per replica so each replica can be cut off
//! alone. The harness's own observer connects to PostgreSQL directly, never through a proxy.
//!
//! Two backends sit behind [`Topology`]: Docker containers started with testcontainers (the
//! default; [`docker`]) and local processes for hosts without Docker ([`local`]). The rest of
//! the harness sees only [`Topology`], [`ProxyEndpoint`] and [`Observer`].
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use harness::topology::{PoolMode, ReplicaPath, Topology, TopologyConfig};
//!
//! let topology = Topology::start(TopologyConfig::docker().pgbouncer(PoolMode::Transaction)).await?;
//! let r1 = topology.add_proxy("r1", ReplicaPath::Direct).await?;
//! let r2 = topology.add_proxy("r2", ReplicaPath::PgBouncerTransaction).await?;
//! println!("observer {} / r1 {} / r2 {}", topology.observer_dsn(), r1.dsn(), r2.dsn());
//! topology.shutdown().await; // also done on drop
//! # Ok(()) }
//! ```
//!
//! Cleanup: [`Topology::shutdown`] removes everything in parallel; dropping the last handle
//! (after a failure or a panic) removes it too; a signal guard removes it on SIGINT / SIGTERM /
//! SIGHUP (see [`TopologyConfig::signal_guard`]); and every start sweeps what SIGKILLed runs left
//! ([`cleanup::sweep`]).

pub mod cleanup;
mod config;
pub mod docker;
mod dsn;
pub mod images;
pub mod local;
mod observer;
pub mod proxy;
mod teardown;

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};

pub use self::config::{
    BackendKind, PoolMode, ProxyEndpoint, ReplicaPath, StartupTimes, TopologyConfig,
    POOLER_LOGIN_RETRY, POSTGRES_PORT,
};
pub use self::dsn::{
    app_dsn_for, dsn_for, password, provision, redact, try_connect, APP_USER, DATABASE,
    ENV_PASSWORD, OBSERVER_APP, PASSWORD, PROVISION, USER,
};
pub use self::images::{ImageRef, Images};
pub use self::observer::Observer;
pub use self::proxy::Toxiproxy;
pub use self::teardown::Teardowns;

/// How long [`Observer`] and the server verbs wait for PostgreSQL to accept connections.
pub const READY_LIMIT: Duration = Duration::from_secs(30);

enum Backend {
    Docker(Box<docker::DockerServices>),
    Local(Box<local::LocalServices>),
}

struct Inner {
    run_id: String,
    kind: BackendKind,
    backend: Backend,
    toxiproxy: Toxiproxy,
    proxies: tokio::sync::Mutex<Vec<ProxyEndpoint>>,
    startup: StartupTimes,
    shut: AtomicBool,
    after: Option<Teardowns>,
    /// The server's data is in memory (Docker backend only): a stop is refused.
    data_in_memory: bool,
}

/// A running topology. Cheap to clone (a shared handle); the services go away with
/// [`shutdown`](Topology::shutdown) or when the last handle drops.
///
/// A topology belongs to the tokio runtime that started it: the observer connections it makes
/// and, with the local backend, the in-process Toxiproxy server run on that runtime.
#[derive(Clone)]
pub struct Topology {
    inner: Arc<Inner>,
}

impl fmt::Debug for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Topology")
            .field("run_id", &self.inner.run_id)
            .field("backend", &self.inner.kind)
            .field("postgres", &self.postgres_addr())
            .field("toxiproxy", &self.toxiproxy_api())
            .finish()
    }
}

/// A new random run id (ten lowercase letters and digits).
pub fn random_run_id() -> String {
    let alphabet: Vec<char> = ('a'..='z').chain('0'..='9').collect();
    (0..10)
        .map(|_| alphabet[fastrand::usize(..alphabet.len())])
        .collect()
}

/// Starts the backend's services, recording their start-up times in `startup`.
async fn start_backend(
    config: &TopologyConfig,
    run_id: &str,
    startup: &mut StartupTimes,
) -> anyhow::Result<Backend> {
    match config.backend {
        BackendKind::Docker => {
            let services = docker::DockerServices::start(
                run_id,
                &docker::DockerOptions {
                    images: config.images.clone(),
                    pgbouncers: config.pgbouncers.clone(),
                    proxy_ports: config.proxy_ports,
                    postgres_settings: config.postgres_settings.clone(),
                    data_in_memory: config.data_in_memory,
                },
            )
            .await?;
            let t = services.timings().clone();
            startup.services.push(("network".into(), t.network));
            startup.services.push(("postgres".into(), t.postgres));
            startup.services.push(("toxiproxy".into(), t.toxiproxy));
            for (mode, d) in t.pgbouncers {
                startup.services.push((format!("pgbouncer-{mode}"), d));
            }
            Ok(Backend::Docker(Box::new(services)))
        }
        BackendKind::Local => {
            let mut options = config.local.clone();
            options.pgbouncers = config.pgbouncers.clone();
            options.postgres_settings = config.postgres_settings.clone();
            let services = local::LocalServices::start(run_id, &options).await?;
            let t = services.timings().clone();
            startup.services.push(("initdb".into(), t.initdb));
            startup.services.push(("postgres".into(), t.postgres));
            startup.services.push(("toxiproxy".into(), t.toxiproxy));
            for (mode, d) in t.pgbouncers {
                startup.services.push((format!("pgbouncer-{mode}"), d));
            }
            Ok(Backend::Local(Box::new(services)))
        }
    }
}

impl Topology {
    /// Starts the services (in parallel where the backend can) and returns once PostgreSQL
    /// accepts connections, the PgBouncers are up and the Toxiproxy API answers. No proxy exists
    /// yet: add them with [`add_proxy`](Topology::add_proxy) / [`add_proxies`](Topology::add_proxies).
    ///
    /// # Errors
    /// Docker (or a local binary) is missing, an image cannot be found or pulled (the error says
    /// how to build it: `ci/build-images.sh`), or a service does not start; whatever started is
    /// removed again.
    pub async fn start(config: TopologyConfig) -> anyhow::Result<Topology> {
        let clock = Instant::now();
        if config.signal_guard {
            cleanup::install_signal_guard();
        }
        let mut startup = StartupTimes::default();
        if config.sweep {
            match cleanup::sweep(cleanup::SweepScope::Stale).await {
                Ok(report) if !report.is_empty() => {
                    tracing::info!(?report, "swept resources of ended runs")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "sweeping stale resources failed"),
            }
            startup.sweep = clock.elapsed();
        }
        let run_id = config.run_id.clone().unwrap_or_else(random_run_id);
        // Earlier topologies' removals finish while this one's services start.
        let pending = async {
            if let Some(after) = &config.after {
                after.finish().await;
            }
        };
        let (backend, ()) = tokio::join!(start_backend(&config, &run_id, &mut startup), pending);
        let backend = backend?;
        let api = match &backend {
            Backend::Docker(s) => s.toxiproxy_api(),
            Backend::Local(s) => s.toxiproxy_api(),
        };
        let toxiproxy = Toxiproxy::new(api);
        toxiproxy.wait_ready(READY_LIMIT).await?;
        // The local backend set the application role up before its PgBouncers, which log in as
        // it to be ready; Docker's are ready when their process is up.
        if let Backend::Docker(s) = &backend {
            provision(s.postgres_addr()).await?;
        }
        startup.total = clock.elapsed();
        tracing::info!(run = %run_id, backend = %config.backend, %startup, "topology up");
        Ok(Topology {
            inner: Arc::new(Inner {
                run_id,
                kind: config.backend,
                backend,
                toxiproxy,
                proxies: tokio::sync::Mutex::new(Vec::new()),
                startup,
                shut: AtomicBool::new(false),
                after: config.after.clone(),
                data_in_memory: config.data_in_memory && config.backend == BackendKind::Docker,
            }),
        })
    }

    /// The run id (in every container, network and directory name).
    pub fn run_id(&self) -> &str {
        &self.inner.run_id
    }

    /// The backend.
    pub fn backend(&self) -> BackendKind {
        self.inner.kind
    }

    /// How long the start took.
    pub fn startup(&self) -> &StartupTimes {
        &self.inner.startup
    }

    /// The Docker services (Docker backend only).
    pub fn docker(&self) -> Option<&docker::DockerServices> {
        match &self.inner.backend {
            Backend::Docker(s) => Some(s),
            Backend::Local(_) => None,
        }
    }

    /// The local services (local backend only).
    pub fn local(&self) -> Option<&local::LocalServices> {
        match &self.inner.backend {
            Backend::Docker(_) => None,
            Backend::Local(s) => Some(s),
        }
    }

    /// PostgreSQL's address on this host (Docker: changes after a restart).
    pub fn postgres_addr(&self) -> SocketAddr {
        match &self.inner.backend {
            Backend::Docker(s) => s.postgres_addr(),
            Backend::Local(s) => s.postgres_addr(),
        }
    }

    /// The observer's DSN: PostgreSQL directly, never through a proxy. Read it again after a
    /// server restart (the Docker host port changes).
    pub fn observer_dsn(&self) -> String {
        dsn_for(self.postgres_addr())
    }

    /// A PgBouncer's DSN on this host (not through a proxy), if it runs: as the application
    /// role, the only one PgBouncer knows.
    pub fn pgbouncer_dsn(&self, mode: PoolMode) -> Option<String> {
        match &self.inner.backend {
            Backend::Docker(s) => s.pgbouncer_addr(mode),
            Backend::Local(s) => s.pgbouncer_addr(mode),
        }
        .map(app_dsn_for)
    }

    /// The Toxiproxy API's address on this host.
    pub fn toxiproxy_api(&self) -> SocketAddr {
        self.inner.toxiproxy.api()
    }

    /// The Toxiproxy client.
    pub fn toxiproxy(&self) -> &Toxiproxy {
        &self.inner.toxiproxy
    }

    /// One connection to PostgreSQL directly (one attempt).
    ///
    /// # Errors
    /// PostgreSQL does not accept the connection.
    pub async fn observer(&self) -> anyhow::Result<tokio_postgres::Client> {
        try_connect(&self.observer_dsn(), Duration::from_secs(5)).await
    }

    /// Connects to PostgreSQL directly, retrying until it accepts connections (after a
    /// restart) or `limit` passes.
    ///
    /// # Errors
    /// No connection within `limit`.
    pub async fn wait_observer(&self, limit: Duration) -> anyhow::Result<tokio_postgres::Client> {
        let deadline = Instant::now() + limit;
        loop {
            let attempt = async {
                let client = try_connect(&self.observer_dsn(), Duration::from_secs(2)).await?;
                client.simple_query("SELECT 1").await?;
                anyhow::Ok(client)
            }
            .await;
            match attempt {
                Ok(client) => return Ok(client),
                Err(e) if Instant::now() >= deadline => {
                    return Err(e.context(format!(
                        "PostgreSQL did not accept connections within {limit:?}"
                    )))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(25)).await,
            }
        }
    }

    fn check_live(&self) -> anyhow::Result<()> {
        if self.inner.shut.load(Ordering::SeqCst) {
            bail!("topology {} is shut down", self.inner.run_id);
        }
        Ok(())
    }

    /// Creates one proxy named `name` leading along `path`; see
    /// [`add_proxies`](Topology::add_proxies).
    ///
    /// # Errors
    /// As [`add_proxies`](Topology::add_proxies).
    pub async fn add_proxy(&self, name: &str, path: ReplicaPath) -> anyhow::Result<ProxyEndpoint> {
        let mut made = self.add_proxies(&[(name.to_owned(), path)]).await?;
        made.pop().ok_or_else(|| anyhow!("no proxy was made"))
    }

    /// Creates one proxy per `(name, path)` in one call to Toxiproxy: it listens on its own port
    /// (Docker: the next free one of 8666…, mapped to a host port) and forwards to PostgreSQL or
    /// to the PgBouncer of the path.
    ///
    /// # Errors
    /// A name is taken, the path's PgBouncer does not run in this topology, the Docker proxy
    /// ports are used up, or Toxiproxy refused.
    pub async fn add_proxies(
        &self,
        wanted: &[(String, ReplicaPath)],
    ) -> anyhow::Result<Vec<ProxyEndpoint>> {
        self.check_live()?;
        let mut proxies = self.inner.proxies.lock().await;
        let mut specs = Vec::new();
        let mut planned = Vec::new();
        for (i, (name, path)) in wanted.iter().enumerate() {
            if proxies.iter().any(|p| &p.name == name) || wanted[..i].iter().any(|(n, _)| n == name)
            {
                bail!("a proxy named {name:?} exists already");
            }
            let upstream = match &self.inner.backend {
                Backend::Docker(s) => s.upstream(path.pool_mode()),
                Backend::Local(s) => s.upstream(path.pool_mode()),
            }
            .ok_or_else(|| {
                anyhow!(
                    "proxy {name:?}: path {path} needs a PgBouncer in {} mode, which this \
                     topology does not run (TopologyConfig::pgbouncer / for_paths)",
                    path.pool_mode().map(|m| m.to_string()).unwrap_or_default()
                )
            })?;
            let (listen, addr) = match &self.inner.backend {
                Backend::Docker(s) => {
                    let index = proxies.len() + i;
                    let (listen, addr) = s.proxy_slot(index).ok_or_else(|| {
                        anyhow!(
                            "proxy {name:?}: all {} proxy ports of the Toxiproxy container are \
                             used (TopologyConfig::proxy_ports)",
                            s.proxy_slots()
                        )
                    })?;
                    (listen, Some(addr))
                }
                Backend::Local(_) => ("127.0.0.1:0".to_owned(), None),
            };
            specs.push(proxy::ProxySpec {
                name: name.clone(),
                listen: listen.clone(),
                upstream: upstream.clone(),
            });
            planned.push((name.clone(), *path, upstream, addr));
        }
        let states = self.inner.toxiproxy.populate(specs).await?;
        let mut made = Vec::new();
        for (name, path, upstream, addr) in planned {
            let state = states
                .iter()
                .find(|s| s.name == name)
                .ok_or_else(|| anyhow!("Toxiproxy did not report proxy {name:?}"))?;
            let addr = match addr {
                Some(a) => a,
                None => state
                    .listen
                    .parse()
                    .with_context(|| format!("proxy {name:?} listens on {:?}", state.listen))?,
            };
            let endpoint = ProxyEndpoint {
                name,
                path,
                listen: state.listen.clone(),
                upstream,
                addr,
            };
            proxies.push(endpoint.clone());
            made.push(endpoint);
        }
        Ok(made)
    }

    /// The proxy named `name`.
    pub async fn proxy(&self, name: &str) -> Option<ProxyEndpoint> {
        self.inner
            .proxies
            .lock()
            .await
            .iter()
            .find(|p| p.name == name)
            .cloned()
    }

    /// Every proxy, in creation order.
    pub async fn proxies(&self) -> Vec<ProxyEndpoint> {
        self.inner.proxies.lock().await.clone()
    }

    /// Stops PostgreSQL (a fast shutdown). Its clients see their connections closed.
    ///
    /// # Errors
    /// The backend refused, or the topology keeps the server's data in memory
    /// ([`TopologyConfig::data_in_memory`]), where a stop would lose it.
    pub async fn stop_server(&self) -> anyhow::Result<()> {
        self.check_live()?;
        if self.inner.data_in_memory {
            bail!(
                "PostgreSQL's data is in memory in this topology (TopologyConfig::data_in_memory): \
                 a stop would lose the cluster; start the topology with its data on a volume to \
                 stop or restart the server"
            );
        }
        match &self.inner.backend {
            Backend::Docker(s) => s.stop_server().await,
            Backend::Local(s) => s.stop_server().await,
        }
    }

    /// Starts the stopped PostgreSQL and waits until it accepts connections (Docker: on a new
    /// host port; the proxies reach it by name and need nothing).
    ///
    /// # Errors
    /// It did not start, or did not accept connections within [`READY_LIMIT`].
    pub async fn start_server(&self) -> anyhow::Result<()> {
        self.check_live()?;
        match &self.inner.backend {
            Backend::Docker(s) => s.start_server().await?,
            Backend::Local(s) => s.start_server().await?,
        }
        self.wait_observer(READY_LIMIT).await.map(drop)
    }

    /// Restarts PostgreSQL (stop, start) and waits until it accepts connections again.
    ///
    /// # Errors
    /// As [`stop_server`](Topology::stop_server) and [`start_server`](Topology::start_server).
    pub async fn restart_server(&self) -> anyhow::Result<()> {
        self.stop_server().await?;
        self.start_server().await
    }

    /// Removes every service (containers in parallel, then the network; or the local processes
    /// and their directory). Idempotent; later calls on any handle fail.
    pub async fn shutdown(&self) {
        self.inner.shut.store(true, Ordering::SeqCst);
        match &self.inner.backend {
            Backend::Docker(s) => s.shutdown().await,
            Backend::Local(s) => s.shutdown().await,
        }
    }

    /// Removes every service as [`shutdown`](Topology::shutdown) does, or, when the topology
    /// started [`after`](TopologyConfig::after) a queue of removals, queues its own removal
    /// there and returns at once.
    pub async fn retire(&self) {
        match &self.inner.after {
            Some(queue) => {
                let this = self.clone();
                queue.push(tokio::spawn(async move { this.shutdown().await }));
            }
            None => self.shutdown().await,
        }
    }

    /// A human summary: the services and their addresses.
    pub async fn describe(&self) -> String {
        let mut out = format!(
            "run {} ({} backend), started in {}\n",
            self.run_id(),
            self.backend(),
            self.startup()
        );
        out.push_str(&format!("  postgres   {}\n", self.observer_dsn()));
        for mode in [
            PoolMode::Session,
            PoolMode::Transaction,
            PoolMode::TransactionOneSession,
        ] {
            if let Some(dsn) = self.pgbouncer_dsn(mode) {
                out.push_str(&format!("  pgbouncer  {mode}: {dsn}\n"));
            }
        }
        out.push_str(&format!(
            "  toxiproxy  http://{}/proxies\n",
            self.toxiproxy_api()
        ));
        if let Some(d) = self.docker() {
            out.push_str(&format!("  network    {}\n", d.network()));
            for (role, name) in d.container_names() {
                out.push_str(&format!("  container  {role}: {name}\n"));
            }
        }
        if let Some(l) = self.local() {
            out.push_str(&format!("  directory  {}\n", l.dir().display()));
        }
        for p in self.proxies().await {
            out.push_str(&format!(
                "  proxy      {} ({}): {} -> {}\n",
                p.name,
                p.path,
                p.dsn(),
                p.upstream
            ));
        }
        out
    }
}
