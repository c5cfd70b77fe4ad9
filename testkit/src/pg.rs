//! A real PostgreSQL in a container of its own, and the observer queries tests run against it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use deadpool_postgres::{ManagerConfig, Pool, RecyclingMethod, Runtime};
use testcontainers::core::ExecCommand;
use testcontainers::{runners::AsyncRunner, ContainerAsync, ImageExt};
use testcontainers_modules::postgres::Postgres;
use tokio::time::Instant;
use tokio_postgres::NoTls;

use crate::images::{BUILD_HINT, POSTGRES};
use crate::spec::LEADER_QUERY;

/// How the server is started.
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// Trust every client instead of SCRAM (a debug build spends ~120 ms of CPU per SCRAM
    /// handshake, which a small T cannot afford in tests that connect often). Default: false.
    pub trust: bool,
    /// The value of the `org.elector.test` label, naming the suite. Default: `testkit`.
    pub label: &'static str,
    /// Extra `-c name=value` settings for the server.
    pub settings: Vec<(String, String)>,
    /// A Docker network to join, under a container name of its own ([`Pg::name`]), so that
    /// another container (a [`PgBouncer`](crate::pgbouncer::PgBouncer)) reaches the server by
    /// that name. Default: none (the default bridge; reached through the mapped port only).
    pub network: Option<String>,
    /// X-PGVER: the PostgreSQL major to run ([`crate::images::MAJORS`]). Default: none (the
    /// default image, 15).
    pub major: Option<u32>,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            trust: false,
            label: "testkit",
            settings: Vec::new(),
            network: None,
            major: None,
        }
    }
}

pub use facts::pg::{data_in_memory, data_volume, PGDATA};

/// The ordinary application role the tests' electors connect as ([`Pg::url`], [`Pg::pool`],
/// [`Pg::url_via`]): a login role that is not a superuser and owns nothing, with `CONNECT` and
/// `USAGE` on the schema (on PostgreSQL 15 and later `public` grants it no CREATE). Its password
/// is its name.
pub const APP_USER: &str = "elector_app";

/// A name no other container of this machine has: the prefix, this process and a counter.
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{nanos}-{n}", std::process::id())
}

/// What [`Pg::start_with`] sets up, as the superuser, once the server is up.
const PROVISION: &str = "CREATE ROLE elector_app LOGIN PASSWORD 'elector_app'; \
    GRANT CONNECT ON DATABASE plexsphere TO elector_app; \
    GRANT USAGE ON SCHEMA public TO elector_app";

/// A PostgreSQL server (database `plexsphere`, superuser and password `postgres`, and the
/// application role [`APP_USER`]); removed on drop.
pub struct Pg {
    /// The container.
    pub container: ContainerAsync<Postgres>,
    /// The host port mapped to 5432.
    pub port: u16,
    /// The network it joined and its container name there ([`PgOptions::network`]).
    pub name: Option<(String, String)>,
}

impl Pg {
    /// Starts a server with the default options.
    pub async fn start() -> Pg {
        Pg::start_with(PgOptions::default()).await
    }

    /// Starts a server; panics with a clear message when Docker or the image is missing.
    pub async fn start_with(options: PgOptions) -> Pg {
        let service = match options.major {
            None => POSTGRES,
            Some(v) => {
                crate::images::Major::of(v)
                    .unwrap_or_else(|| panic!("PostgreSQL {v} is not a major of the matrix"))
                    .postgres
            }
        };
        let image = service.resolve();
        let mut request = Postgres::default()
            .with_db_name("plexsphere")
            .with_name(&image.name)
            .with_tag(&image.tag)
            .with_label("org.elector.test", options.label)
            // No test starts a stopped server again: the cluster may live in memory.
            .with_host_config_modifier(data_in_memory);
        if options.trust {
            request = request.with_env_var("POSTGRES_HOST_AUTH_METHOD", "trust");
        }
        if !options.settings.is_empty() {
            let mut cmd = vec!["postgres".to_owned()];
            for (name, value) in &options.settings {
                cmd.push("-c".to_owned());
                cmd.push(format!("{name}={value}"));
            }
            request = request.with_cmd(cmd);
        }
        let mut name = None;
        if let Some(network) = options.network {
            let container = unique_name("testkit-postgres");
            request = request
                .with_network(&network)
                .with_container_name(&container);
            name = Some((network, container));
        }
        let container = request.start().await.unwrap_or_else(|e| {
            panic!("could not start PostgreSQL from {image} ({e}). Is Docker running? {BUILD_HINT}")
        });
        let port = container
            .get_host_port_ipv4(5432)
            .await
            .expect("the container maps 5432");
        let pg = Pg {
            container,
            port,
            name,
        };
        (pg.observer().await)
            .batch_execute(PROVISION)
            .await
            .expect("the application role is set up");
        pg
    }

    /// The application role's URL of the `plexsphere` database on `port` (this server's, or a
    /// proxy's or a PgBouncer's in front).
    pub fn url_via(&self, port: u16) -> String {
        format!("postgres://{APP_USER}:{APP_USER}@127.0.0.1:{port}/plexsphere")
    }

    /// The application role's URL of the `plexsphere` database: what an elector is given.
    pub fn url(&self) -> String {
        self.url_via(self.port)
    }

    /// The superuser's URL, the database's owner: the observer's, and the one test that runs
    /// an elector as the owner.
    pub fn owner_url(&self) -> String {
        format!(
            "postgres://postgres:postgres@127.0.0.1:{}/plexsphere",
            self.port
        )
    }

    /// A pool of the application role whose connections carry `application_name = app`.
    pub fn pool(&self, app: &str, max_size: usize) -> Pool {
        pool_for(&self.url(), app, max_size, RecyclingMethod::Fast)
    }

    /// A direct observer connection as the superuser (never through a pool or a proxy).
    pub async fn observer(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.owner_url(), NoTls)
            .await
            .expect("the observer connects");
        tokio::spawn(conn);
        client
    }

    /// Grants the application role what a test's own table needs (`SELECT, INSERT, UPDATE` on
    /// each of `tables`), as an operator would.
    pub async fn grant_tables(&self, tables: &[&str]) {
        let sql = format!(
            "GRANT SELECT, INSERT, UPDATE ON {} TO {APP_USER}",
            tables.join(", ")
        );
        (self.observer().await)
            .batch_execute(&sql)
            .await
            .expect("the grants");
    }

    /// Sends `signal` (e.g. `STOP`, `CONT`) to a server process inside the container.
    pub async fn signal_backend(&self, pid: i32, signal: &str) {
        let command = ExecCommand::new(["kill".to_owned(), format!("-{signal}"), pid.to_string()]);
        let mut out = self
            .container
            .exec(command)
            .await
            .expect("docker exec kill");
        // Reading the output to its end waits for the command to finish.
        let stderr = out.stderr_to_vec().await.expect("exec stderr");
        let code = out.exit_code().await.expect("exit code");
        let stderr = String::from_utf8_lossy(&stderr);
        assert_eq!(code, Some(0), "kill -{signal} {pid}: {stderr}");
    }
}

/// A pool for `url` with the given recycling method.
pub fn pool_for(url: &str, app: &str, max_size: usize, recycling: RecyclingMethod) -> Pool {
    let mut cfg = deadpool_postgres::Config::new();
    cfg.url = Some(url.to_owned());
    cfg.application_name = Some(app.to_owned());
    cfg.manager = Some(ManagerConfig {
        recycling_method: recycling,
    });
    cfg.pool = Some(deadpool_postgres::PoolConfig::new(max_size));
    cfg.create_pool(Some(Runtime::Tokio1), NoTls)
        .expect("a valid pool config")
}

/// The spec's leader query, verbatim, joined by the test to pg_stat_activity:
/// `(pid, granted, application_name)` per row.
pub async fn leader_rows(observer: &tokio_postgres::Client) -> Vec<(i32, bool, String)> {
    let rows = observer
        .query(LEADER_QUERY, &[])
        .await
        .expect("the leader query");
    let mut out = Vec::new();
    for row in rows {
        let pid: i32 = row.get(0);
        let app: Option<String> = observer
            .query_opt(
                "SELECT application_name FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .await
            .expect("pg_stat_activity")
            .map(|r| r.get(0));
        out.push((pid, row.get(1), app.unwrap_or_default()));
    }
    out
}

/// When backend `pid` left pg_stat_activity (polled every 2 ms), if it did within `limit`.
pub async fn backend_gone_at(
    observer: &tokio_postgres::Client,
    pid: i32,
    limit: Duration,
) -> Option<Instant> {
    let start = Instant::now();
    while start.elapsed() <= limit {
        if !backend_alive(observer, pid).await {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    None
}

/// Whether backend `pid` is in pg_stat_activity now.
pub async fn backend_alive(observer: &tokio_postgres::Client, pid: i32) -> bool {
    let alive: i64 = observer
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
            &[&pid],
        )
        .await
        .expect("pg_stat_activity")
        .get(0);
    alive > 0
}

/// Whether backend `pid` is gone from pg_stat_activity within `limit`.
pub async fn backend_gone(observer: &tokio_postgres::Client, pid: i32, limit: Duration) -> bool {
    backend_gone_at(observer, pid, limit).await.is_some()
}

/// Terminates backend `pid` from the observer connection.
pub async fn terminate(observer: &tokio_postgres::Client, pid: i32) {
    let done: bool = observer
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .expect("pg_terminate_backend")
        .get(0);
    assert!(done, "pg_terminate_backend({pid})");
}
