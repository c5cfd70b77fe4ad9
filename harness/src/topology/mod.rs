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
pub mod docker;
pub mod images;
pub mod local;
pub mod proxy;

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use serde::{Deserialize, Serialize};
use tokio_postgres::NoTls;

pub use self::images::{ImageRef, Images};
pub use self::proxy::Toxiproxy;

/// The database every service serves.
pub const DATABASE: &str = "plexsphere";
/// The PostgreSQL superuser: the harness's observer and its setup connect as it, never a
/// replica.
pub const USER: &str = "postgres";
/// The ordinary application role every replica connects as, directly and through PgBouncer, as
/// a service in production does: a login role that is not a superuser, owns nothing (not the
/// database, not a table) and holds only the grants of [`PROVISION`] (on PostgreSQL 15 and later
/// `public` grants it no CREATE). Its password is [`password`]'s.
pub const APP_USER: &str = "elector_app";

/// What the harness sets up as an operator would, as the superuser, once the server is up:
/// the application role, its right to connect and to use the schema, the contract's
/// `leader_work` table with the grants to write it, and X-FENCE's sequence created ahead with
/// the grants its users need (`elector/README.md`, "What the application role needs").
/// Idempotent; `{password}` is the role's password, quoted.
pub const PROVISION: &str = "DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'elector_app') THEN
    CREATE ROLE elector_app LOGIN PASSWORD {password};
  END IF;
END $$;
GRANT CONNECT ON DATABASE plexsphere TO elector_app;
GRANT USAGE ON SCHEMA public TO elector_app;
{work_table};
GRANT SELECT, INSERT ON leader_work TO elector_app;
GRANT USAGE ON SEQUENCE leader_work_id_seq TO elector_app;
CREATE SEQUENCE IF NOT EXISTS public.plexsphere_background_leader_fence;
GRANT USAGE, SELECT ON SEQUENCE public.plexsphere_background_leader_fence TO elector_app";

/// Runs [`PROVISION`] as the superuser on the server at `addr`.
///
/// # Errors
/// The server cannot be reached, or a statement fails.
pub async fn provision(addr: SocketAddr) -> anyhow::Result<()> {
    let client = try_connect(&dsn_for(addr), Duration::from_secs(10)).await?;
    let quoted = format!("'{}'", password().replace('\'', "''"));
    let sql = PROVISION
        .replace("{password}", &quoted)
        .replace("{work_table}", crate::event::WORK_TABLE_DDL);
    client.batch_execute(&sql).await.context(
        "setting up the application role elector_app, leader_work and the fence sequence",
    )?;
    Ok(())
}
/// The PostgreSQL user's password when [`ENV_PASSWORD`] sets none.
pub const PASSWORD: &str = "postgres";
/// The environment variable that sets the throwaway database's password.
pub const ENV_PASSWORD: &str = "ELECTOR_POSTGRES_PASSWORD";

/// The PostgreSQL user's password: [`ENV_PASSWORD`], else [`PASSWORD`]. Read once per process.
/// DSNs carry it; [`redact`] takes it out of any text that is shown or written.
pub fn password() -> &'static str {
    static PASSWORD_IN_USE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PASSWORD_IN_USE.get_or_init(|| {
        std::env::var(ENV_PASSWORD)
            .ok()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| PASSWORD.to_owned())
    })
}

/// `text` with the password of every DSN in it replaced by `***`: the URL form
/// (`postgres://user:secret@host`) and the key-value form (`password=secret`).
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let authority = tail
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace())
            .unwrap_or(tail.len());
        match (tail[..authority].rfind('@'), tail[..authority].find(':')) {
            (Some(amp), Some(colon)) if colon < amp => {
                out.push_str(&tail[..=colon]);
                out.push_str("***");
                rest = &tail[amp..];
            }
            _ => rest = tail,
        }
    }
    out.push_str(rest);
    redact_key_values(&out)
}

/// The `password=…` pairs of a key-value DSN, redacted.
fn redact_key_values(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("password=") {
        let (head, tail) = rest.split_at(at + "password=".len());
        out.push_str(head);
        let end = if let Some(quoted) = tail.strip_prefix('\'') {
            quoted.find('\'').map_or(tail.len(), |e| e + 2)
        } else {
            tail.find(char::is_whitespace).unwrap_or(tail.len())
        };
        out.push_str("***");
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}
/// PostgreSQL's (and PgBouncer's) port inside a container.
pub const POSTGRES_PORT: u16 = 5432;
/// The observer's `application_name`.
pub const OBSERVER_APP: &str = "elector-harness-observer";

/// PgBouncer's `server_login_retry` in every topology: after a failed login (the server down),
/// it waits this long before it tries the server again, and holds its clients' queries
/// meanwhile (default 15 s, 75T at T = 200 ms: a replica restarted meanwhile could not start;
/// one second keeps a restart within a chaos round).
pub const POOLER_LOGIN_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
/// How long [`Observer`] and the server verbs wait for PostgreSQL to accept connections.
pub const READY_LIMIT: Duration = Duration::from_secs(30);

/// A PgBouncer as the harness runs it: its pool mode and how many server sessions it keeps per
/// database and user.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum PoolMode {
    /// `pool_mode = session`: a client keeps one server connection.
    Session,
    /// `pool_mode = transaction` at PgBouncer's default pool size (20 server sessions): server
    /// sessions are handed to another client after every transaction. What users run.
    Transaction,
    /// `pool_mode = transaction` with one server session: every client shares it, so a standby
    /// always lands on the lock session (the narrow case: the hazard is certain).
    #[serde(rename = "transaction-1")]
    #[value(name = "transaction-1")]
    TransactionOneSession,
}

impl PoolMode {
    /// PgBouncer's own default `default_pool_size`.
    pub const PGBOUNCER_DEFAULT_POOL_SIZE: u32 = 20;

    /// PgBouncer's `pool_mode` setting.
    pub fn setting(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction | PoolMode::TransactionOneSession => "transaction",
        }
    }

    /// PgBouncer's `default_pool_size` setting.
    pub fn pool_size(self) -> u32 {
        match self {
            PoolMode::Session | PoolMode::Transaction => Self::PGBOUNCER_DEFAULT_POOL_SIZE,
            PoolMode::TransactionOneSession => 1,
        }
    }
}

impl fmt::Display for PoolMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
            PoolMode::TransactionOneSession => "transaction-1",
        })
    }
}

/// How one replica reaches PostgreSQL (always through its own Toxiproxy proxy).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicaPath {
    /// Proxy → PostgreSQL.
    #[default]
    Direct,
    /// Proxy → PgBouncer in session mode → PostgreSQL.
    #[value(name = "pgbouncer-session")]
    PgBouncerSession,
    /// Proxy → PgBouncer in transaction mode, at its default pool size → PostgreSQL.
    #[value(name = "pgbouncer-transaction")]
    PgBouncerTransaction,
    /// Proxy → PgBouncer in transaction mode with one server session → PostgreSQL.
    #[value(name = "pgbouncer-transaction-1")]
    #[serde(rename = "pgbouncer-transaction-1")]
    PgBouncerTransactionOneSession,
}

impl ReplicaPath {
    /// The PgBouncer on the path, if any.
    pub fn pool_mode(self) -> Option<PoolMode> {
        match self {
            ReplicaPath::Direct => None,
            ReplicaPath::PgBouncerSession => Some(PoolMode::Session),
            ReplicaPath::PgBouncerTransaction => Some(PoolMode::Transaction),
            ReplicaPath::PgBouncerTransactionOneSession => Some(PoolMode::TransactionOneSession),
        }
    }

    /// `direct`, `pgbouncer-session` or `pgbouncer-transaction`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplicaPath::Direct => "direct",
            ReplicaPath::PgBouncerSession => "pgbouncer-session",
            ReplicaPath::PgBouncerTransaction => "pgbouncer-transaction",
            ReplicaPath::PgBouncerTransactionOneSession => "pgbouncer-transaction-1",
        }
    }
}

impl fmt::Display for ReplicaPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ReplicaPath {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "direct" => Ok(ReplicaPath::Direct),
            "pgbouncer-session" | "session" => Ok(ReplicaPath::PgBouncerSession),
            "pgbouncer-transaction" | "transaction" => Ok(ReplicaPath::PgBouncerTransaction),
            "pgbouncer-transaction-1" | "transaction-1" => {
                Ok(ReplicaPath::PgBouncerTransactionOneSession)
            }
            other => Err(format!(
                "unknown path {other:?}: expected direct, pgbouncer-session, \
                 pgbouncer-transaction or pgbouncer-transaction-1"
            )),
        }
    }
}

/// Which backend runs the services.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum BackendKind {
    /// Docker containers via testcontainers (the default).
    #[default]
    Docker,
    /// Local processes: PostgreSQL and PgBouncer binaries, Toxiproxy in-process.
    Local,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Docker => "docker",
            BackendKind::Local => "local",
        })
    }
}

/// What to start.
#[derive(Clone, Debug)]
pub struct TopologyConfig {
    /// The backend.
    pub backend: BackendKind,
    /// The images (Docker backend).
    pub images: Images,
    /// The PgBouncers to run in front of PostgreSQL.
    pub pgbouncers: Vec<PoolMode>,
    /// How many proxy ports the Toxiproxy container exposes from 8666, at most 32 (Docker
    /// backend; default 8, see [`docker::DEFAULT_PROXY_PORTS`]; the local backend has no limit).
    pub proxy_ports: u16,
    /// Extra PostgreSQL settings (`-c name=value`).
    pub postgres_settings: Vec<(String, String)>,
    /// Binaries of the local backend.
    pub local: local::LocalOptions,
    /// Install the process-wide signal guard that removes every live topology's resources on
    /// SIGINT / SIGTERM / SIGHUP and exits (default true). Turn it off when the caller handles
    /// those signals itself and calls [`Topology::shutdown`].
    pub signal_guard: bool,
    /// Sweep what SIGKILLed runs left before starting (default true).
    pub sweep: bool,
    /// The run id (default: random). Names and labels carry it.
    pub run_id: Option<String>,
}

impl Default for TopologyConfig {
    fn default() -> Self {
        TopologyConfig {
            backend: BackendKind::Docker,
            images: Images::from_env(),
            pgbouncers: Vec::new(),
            proxy_ports: docker::DEFAULT_PROXY_PORTS,
            postgres_settings: Vec::new(),
            local: local::LocalOptions::default(),
            signal_guard: true,
            sweep: true,
            run_id: None,
        }
    }
}

impl TopologyConfig {
    /// The Docker backend with the images of the environment ([`Images::from_env`]).
    pub fn docker() -> Self {
        Self::default()
    }

    /// The local-process backend.
    pub fn local() -> Self {
        TopologyConfig {
            backend: BackendKind::Local,
            ..Self::default()
        }
    }

    /// Adds a PgBouncer in `mode`.
    pub fn pgbouncer(mut self, mode: PoolMode) -> Self {
        if !self.pgbouncers.contains(&mode) {
            self.pgbouncers.push(mode);
        }
        self
    }

    /// Adds the PgBouncers the `paths` need.
    pub fn for_paths(mut self, paths: impl IntoIterator<Item = ReplicaPath>) -> Self {
        for mode in paths.into_iter().filter_map(ReplicaPath::pool_mode) {
            self = self.pgbouncer(mode);
        }
        self
    }

    /// Sets a PostgreSQL setting.
    pub fn postgres_setting(mut self, name: &str, value: &str) -> Self {
        self.postgres_settings.push((name.into(), value.into()));
        self
    }

    /// Exposes room for at least `n` proxies (Docker backend).
    pub fn proxies(mut self, n: usize) -> Self {
        let n = u16::try_from(n).unwrap_or(u16::MAX);
        self.proxy_ports = self.proxy_ports.max(n);
        self
    }

    /// Sets [`signal_guard`](Self::signal_guard).
    pub fn signal_guard(mut self, on: bool) -> Self {
        self.signal_guard = on;
        self
    }

    /// Sets the images.
    pub fn images(mut self, images: Images) -> Self {
        self.images = images;
        self
    }
}

/// One proxy of the topology: the address a replica connects to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyEndpoint {
    /// The proxy's name (the replica's name).
    pub name: String,
    /// Where it leads.
    pub path: ReplicaPath,
    /// Where it listens, as Toxiproxy sees it.
    pub listen: String,
    /// Where it forwards to, as Toxiproxy sees it.
    pub upstream: String,
    /// Where a client on this host connects.
    pub addr: SocketAddr,
}

impl ProxyEndpoint {
    /// The replica's DSN, as the application role:
    /// `postgres://elector_app:<password>@127.0.0.1:<port>/plexsphere?sslmode=disable`.
    pub fn dsn(&self) -> String {
        app_dsn_for(self.addr)
    }
}

/// How long the start took.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StartupTimes {
    /// Sweeping stale resources.
    pub sweep: Duration,
    /// Each service, started in parallel where the backend can (`network`, `postgres`,
    /// `toxiproxy`, `pgbouncer-<mode>`, `initdb`).
    pub services: Vec<(String, Duration)>,
    /// The whole start, sweep included.
    pub total: Duration,
}

impl fmt::Display for StartupTimes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "total {:.2} s (sweep {:.0} ms",
            secs(self.total),
            ms(self.sweep)
        )?;
        for (name, d) in &self.services {
            write!(f, ", {name} {:.0} ms", ms(*d))?;
        }
        write!(f, ")")
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A DSN for PostgreSQL (or a PgBouncer, or a proxy) at `addr`, with the [`password`]. It
/// asks for `sslmode=disable`: the hop a replica's proxy observes must be plain for its tap to
/// read the conversation (a client's default, `prefer`, would encrypt it wherever the server
/// offers TLS).
pub fn dsn_for(addr: SocketAddr) -> String {
    dsn_as(USER, addr)
}

/// The application role's DSN for `addr` ([`APP_USER`]): what a replica is given.
pub fn app_dsn_for(addr: SocketAddr) -> String {
    dsn_as(APP_USER, addr)
}

fn dsn_as(user: &str, addr: SocketAddr) -> String {
    format!(
        "postgres://{user}:{}@{}:{}/{DATABASE}?sslmode=disable",
        password(),
        addr.ip(),
        addr.port()
    )
}

/// Connects once to `dsn` (the connection runs in a task of the current runtime), with
/// `application_name` = [`OBSERVER_APP`] unless the DSN sets one.
///
/// # Errors
/// The connection failed or took longer than `timeout`.
pub async fn try_connect(dsn: &str, timeout: Duration) -> anyhow::Result<tokio_postgres::Client> {
    let mut config = tokio_postgres::Config::from_str(dsn).context("a PostgreSQL DSN")?;
    if config.get_application_name().is_none() {
        config.application_name(OBSERVER_APP);
    }
    config.connect_timeout(timeout);
    let (client, connection) = tokio::time::timeout(timeout, config.connect(NoTls))
        .await
        .map_err(|_| anyhow!("connecting to {}: no answer in {timeout:?}", redact(dsn)))?
        .with_context(|| format!("connecting to {}", redact(dsn)))?;
    tokio::spawn(connection);
    Ok(client)
}

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
        let backend = match config.backend {
            BackendKind::Docker => {
                let services = docker::DockerServices::start(
                    &run_id,
                    &docker::DockerOptions {
                        images: config.images.clone(),
                        pgbouncers: config.pgbouncers.clone(),
                        proxy_ports: config.proxy_ports,
                        postgres_settings: config.postgres_settings.clone(),
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
                Backend::Docker(Box::new(services))
            }
            BackendKind::Local => {
                let mut options = config.local.clone();
                options.pgbouncers = config.pgbouncers.clone();
                options.postgres_settings = config.postgres_settings.clone();
                let services = local::LocalServices::start(&run_id, &options).await?;
                let t = services.timings().clone();
                startup.services.push(("initdb".into(), t.initdb));
                startup.services.push(("postgres".into(), t.postgres));
                startup.services.push(("toxiproxy".into(), t.toxiproxy));
                for (mode, d) in t.pgbouncers {
                    startup.services.push((format!("pgbouncer-{mode}"), d));
                }
                Backend::Local(Box::new(services))
            }
        };
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
    /// The backend refused.
    pub async fn stop_server(&self) -> anyhow::Result<()> {
        self.check_live()?;
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

/// A direct connection to PostgreSQL that reconnects after a server restart (the Docker host
/// port changes).
pub struct Observer {
    topology: Topology,
    client: tokio::sync::Mutex<Option<Arc<tokio_postgres::Client>>>,
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("run", &self.topology.run_id())
            .finish()
    }
}

impl Observer {
    /// An observer of `topology` (connects on first use).
    pub fn new(topology: &Topology) -> Observer {
        Observer {
            topology: topology.clone(),
            client: tokio::sync::Mutex::new(None),
        }
    }

    /// A live client: the current one, or a new one when it was closed (polling up to
    /// [`READY_LIMIT`] while the server comes back).
    ///
    /// # Errors
    /// PostgreSQL did not accept a connection within the limit.
    pub async fn client(&self) -> anyhow::Result<Arc<tokio_postgres::Client>> {
        let mut slot = self.client.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let fresh = Arc::new(self.topology.wait_observer(READY_LIMIT).await?);
        *slot = Some(fresh.clone());
        Ok(fresh)
    }

    /// A connection of its own (not the shared one), e.g. for a step that holds a transaction
    /// open while the observer keeps sampling.
    ///
    /// # Errors
    /// PostgreSQL did not accept a connection within [`READY_LIMIT`].
    pub async fn session(&self) -> anyhow::Result<tokio_postgres::Client> {
        self.topology.wait_observer(READY_LIMIT).await
    }

    /// Drops the current connection and connects again, polling up to `limit`.
    ///
    /// # Errors
    /// No connection within `limit`.
    pub async fn reconnect(&self, limit: Duration) -> anyhow::Result<Arc<tokio_postgres::Client>> {
        let mut slot = self.client.lock().await;
        slot.take();
        let fresh = Arc::new(self.topology.wait_observer(limit).await?);
        *slot = Some(fresh.clone());
        Ok(fresh)
    }

    /// Runs `sql` (extended protocol) on a live client; after a connection error, reconnects once
    /// and runs it again.
    ///
    /// # Errors
    /// The query failed twice, or no connection could be made.
    pub async fn query(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> anyhow::Result<Vec<tokio_postgres::Row>> {
        let client = self.client().await?;
        match client.query(sql, params).await {
            Ok(rows) => Ok(rows),
            Err(e) if e.is_closed() || client.is_closed() => {
                let client = self.reconnect(READY_LIMIT).await?;
                Ok(client.query(sql, params).await?)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The spec's query plus the holders' application names, on the observer connection.
    pub async fn lock_rows(&self) -> anyhow::Result<Vec<(i32, bool, String)>> {
        // The spec's text, not the elector's constant: a typo in the crate must not pass.
        let rows = self.query(testkit::SPEC_LEADER_QUERY, &[]).await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let (pid, granted): (i32, bool) = (row.get(0), row.get(1));
            let app = self
                .query(
                    "SELECT application_name FROM pg_stat_activity WHERE pid = $1",
                    &[&pid],
                )
                .await?
                .first()
                .map(|r| r.get::<_, String>(0))
                .unwrap_or_default();
            out.push((pid, granted, app));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dsn_passwords_are_redacted() {
        assert_eq!(
            redact("connecting to postgres://postgres:s3cret@127.0.0.1:5432/plexsphere: refused"),
            "connecting to postgres://postgres:***@127.0.0.1:5432/plexsphere: refused"
        );
        assert_eq!(
            redact("a postgresql://u:p@h/db and b postgres://u:q@[::1]:5/db?sslmode=disable"),
            "a postgresql://u:***@h/db and b postgres://u:***@[::1]:5/db?sslmode=disable"
        );
        assert_eq!(
            redact("host=h user=u password=s3cret dbname=d; password='a b' x"),
            "host=h user=u password=*** dbname=d; password=*** x"
        );
        for kept in [
            "postgres://h:5432/db",
            "http://127.0.0.1:8474/proxies",
            "no dsn",
        ] {
            assert_eq!(redact(kept), kept);
        }
    }
}
