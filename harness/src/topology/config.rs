//! What a topology is made of: its pool modes, replica paths and backend, the configuration
//! that starts it, its proxies' endpoints and how long it took to start.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{app_dsn_for, docker, local, Images, Teardowns};

/// PostgreSQL's (and PgBouncer's) port inside a container.
pub const POSTGRES_PORT: u16 = 5432;

/// PgBouncer's `server_login_retry` in every topology: after a failed login (the server down),
/// it waits this long before it tries the server again, and holds its clients' queries
/// meanwhile (default 15 s, 75T at T = 200 ms: a replica restarted meanwhile could not start;
/// one second keeps a restart within a chaos round).
pub const POOLER_LOGIN_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

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
    /// Keep PostgreSQL's data in memory (Docker backend: a tmpfs; default false, a volume).
    /// Faster to start (see [`facts::pg::data_in_memory`]), but a stop would lose the cluster,
    /// so [`Topology::stop_server`](super::Topology::stop_server) refuses on such a topology.
    pub data_in_memory: bool,
    /// Binaries of the local backend.
    pub local: local::LocalOptions,
    /// Install the process-wide signal guard that removes every live topology's resources on
    /// SIGINT / SIGTERM / SIGHUP and exits (default true). Turn it off when the caller handles
    /// those signals itself and calls [`Topology::shutdown`](super::Topology::shutdown).
    pub signal_guard: bool,
    /// Sweep what SIGKILLed runs left before starting (default true).
    pub sweep: bool,
    /// The run id (default: random). Names and labels carry it.
    pub run_id: Option<String>,
    /// Removals of earlier topologies to wait for while this one starts; this one's own
    /// removal then joins them ([`Topology::retire`](super::Topology::retire)). Default: none,
    /// and a topology is removed when it is retired.
    pub after: Option<Teardowns>,
}

impl Default for TopologyConfig {
    fn default() -> Self {
        TopologyConfig {
            backend: BackendKind::Docker,
            images: Images::from_env(),
            pgbouncers: Vec::new(),
            proxy_ports: docker::DEFAULT_PROXY_PORTS,
            postgres_settings: Vec::new(),
            data_in_memory: false,
            local: local::LocalOptions::default(),
            signal_guard: true,
            sweep: true,
            run_id: None,
            after: None,
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

    /// Sets [`data_in_memory`](Self::data_in_memory).
    pub fn data_in_memory(mut self, on: bool) -> Self {
        self.data_in_memory = on;
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

    /// Sets [`after`](Self::after): the start waits for `teardowns` while the services start,
    /// and [`Topology::retire`](super::Topology::retire) queues this topology's removal there.
    pub fn after(mut self, teardowns: Teardowns) -> Self {
        self.after = Some(teardowns);
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
