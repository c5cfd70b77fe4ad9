//! Shared fixtures: a real PostgreSQL container per test, pools, electors, a log capture.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{ManagerConfig, Pool, RecyclingMethod, Runtime};
use elector::{Config, Elector};
use testcontainers::{runners::AsyncRunner, ContainerAsync, ImageExt};
use testcontainers_modules::postgres::Postgres;
use tokio::time::Instant;
use tokio_postgres::NoTls;
use tokio_util::sync::CancellationToken;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::{Layer, Registry};

/// The check interval the tests run at.
pub const T: Duration = Duration::from_millis(200);
/// Scheduling and round-trip noise allowed on top of a bound stated in units of T: small
/// against T (a quarter of it), never a multiple of it.
pub const SLACK: Duration = Duration::from_millis(50);

/// The image to run: `ELECTOR_POSTGRES_IMAGE` (name:tag), default the upstream `postgres:15`.
fn image() -> (String, String) {
    let image = std::env::var("ELECTOR_POSTGRES_IMAGE").unwrap_or_else(|_| "postgres:15".into());
    match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name.to_owned(), tag.to_owned()),
        _ => (image, "latest".to_owned()),
    }
}

/// A PostgreSQL server in a container of its own; removed on drop.
pub struct Pg {
    pub container: ContainerAsync<Postgres>,
    pub port: u16,
}

impl Pg {
    /// Starts the server; panics with a clear message when Docker or the image is missing.
    pub async fn start() -> Pg {
        let (name, tag) = image();
        let container = Postgres::default()
            .with_db_name("plexsphere")
            .with_name(&name)
            .with_tag(&tag)
            .with_label("org.elector.test", "elector")
            .start()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "could not start PostgreSQL from {name}:{tag} ({e}). Is Docker running? \
                     Without a registry, build the local image with ci/build-images.sh and set \
                     ELECTOR_POSTGRES_IMAGE=elector-local/postgres:15."
                )
            });
        let port = container
            .get_host_port_ipv4(5432)
            .await
            .expect("mapped port");
        Pg { container, port }
    }

    pub fn url(&self) -> String {
        format!(
            "postgres://postgres:postgres@127.0.0.1:{}/plexsphere",
            self.port
        )
    }

    /// A pool whose connections carry `application_name = app`.
    pub fn pool(&self, app: &str, max_size: usize) -> Pool {
        pool_for(&self.url(), app, max_size, RecyclingMethod::Fast)
    }

    /// A direct observer connection (never through the elector's pool).
    pub async fn observer(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.url(), NoTls)
            .await
            .expect("observer connects");
        tokio::spawn(conn);
        client
    }

    /// An elector for `app` at interval `t`, on a registry of its own. Its pool is warm (one
    /// idle connection), so the first check does not wait for a handshake.
    pub async fn elector(&self, app: &str, t: Duration) -> (Elector, prometheus::Registry) {
        let registry = prometheus::Registry::new();
        let pool = self.pool(app, 4);
        drop(pool.get().await.expect("a first pooled connection"));
        let config = Config::new(pool)
            .check_interval(t)
            .registry(registry.clone());
        (Elector::new(config).expect("elector"), registry)
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
        .expect("pool config")
}

/// The spec's leader-finding query, verbatim, joined by the test to pg_stat_activity:
/// `(pid, granted, application_name)` per row.
pub async fn leader_rows(observer: &tokio_postgres::Client) -> Vec<(i32, bool, String)> {
    let rows = observer
        .query(elector::sql::LEADER_QUERY, &[])
        .await
        .expect("leader query");
    let mut out = Vec::new();
    for row in rows {
        let pid: i32 = row.get(0);
        let granted: bool = row.get(1);
        let app: String = observer
            .query_opt(
                "SELECT application_name FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .await
            .expect("pg_stat_activity")
            .map(|r| r.get(0))
            .unwrap_or_default();
        out.push((pid, granted, app));
    }
    out
}

/// The value of the leader gauge on `registry`, or `None` when it is not registered.
pub fn gauge(registry: &prometheus::Registry) -> Option<i64> {
    registry
        .gather()
        .iter()
        .find(|mf| mf.name() == elector::GAUGE_NAME)
        .map(|mf| mf.get_metric()[0].get_gauge().get_value() as i64)
}

/// Runs `elector` in a task until the returned token is cancelled.
pub fn spawn_run(
    elector: &Elector,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<Result<(), elector::Error>>,
) {
    let token = CancellationToken::new();
    let (e, t) = (elector.clone(), token.clone());
    (token, tokio::spawn(async move { e.run(t).await }))
}

/// Waits until `cond` holds, polling every 5 ms, for at most `limit`; returns the time it took.
pub async fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() <= limit {
        if cond() {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

/// Waits until `elector` leads.
pub async fn until_leader(elector: &Elector, limit: Duration) -> Duration {
    wait_for(limit, || elector.is_leader())
        .await
        .unwrap_or_else(|| panic!("no leadership within {limit:?}"))
}

/// One captured log event.
#[derive(Clone, Debug)]
pub struct Event {
    pub at: Instant,
    pub level: tracing::Level,
    pub message: String,
    pub fields: BTreeMap<String, String>,
}

/// Captures the events of this thread's tasks (use a current-thread runtime).
#[derive(Clone, Default)]
pub struct Logs {
    events: Arc<Mutex<Vec<Event>>>,
    panic_on: Arc<Mutex<Option<String>>>,
}

impl Logs {
    /// Installs the capture as this thread's default subscriber until the guard drops.
    pub fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let subscriber = Registry::default().with(logs.clone());
        let guard = tracing::subscriber::set_default(subscriber);
        (logs, guard)
    }

    /// The next event whose message starts with `prefix` panics inside the logging call, once.
    pub fn panic_on(&self, prefix: &str) {
        *self.panic_on.lock().unwrap() = Some(prefix.to_owned());
    }

    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    /// Events whose message starts with `prefix`.
    pub fn matching(&self, prefix: &str) -> Vec<Event> {
        self.events()
            .into_iter()
            .filter(|e| e.message.starts_with(prefix))
            .collect()
    }

    /// The index of the first event starting with `prefix`.
    pub fn position(&self, prefix: &str) -> Option<usize> {
        self.events()
            .iter()
            .position(|e| e.message.starts_with(prefix))
    }
}

struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: tracing::Subscriber> Layer<S> for Logs {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields(BTreeMap::new());
        event.record(&mut fields);
        let message = fields.0.remove("message").unwrap_or_default();
        let trigger = {
            let mut p = self.panic_on.lock().unwrap();
            if p.as_deref().is_some_and(|pre| message.starts_with(pre)) {
                p.take()
            } else {
                None
            }
        };
        self.events.lock().unwrap().push(Event {
            at: Instant::now(),
            level: *event.metadata().level(),
            message: message.clone(),
            fields: fields.0,
        });
        if trigger.is_some() {
            panic!("injected panic in the log call of {message:?}");
        }
    }
}

/// Whether the backend `pid` is gone from pg_stat_activity within `limit`.
pub async fn backend_gone(observer: &tokio_postgres::Client, pid: i32, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() <= limit {
        let alive: i64 = observer
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .await
            .expect("pg_stat_activity")
            .get(0);
        if alive == 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

/// The pid of the backend that holds the leader lock.
pub async fn lock_pid(observer: &tokio_postgres::Client) -> i32 {
    let rows = leader_rows(observer).await;
    assert_eq!(rows.len(), 1, "one lock row: {rows:?}");
    rows[0].0
}

/// Sends `signal` (e.g. "STOP", "CONT") to a server process inside the container.
pub async fn signal_backend(pg: &Pg, pid: i32, signal: &str) {
    let mut out = pg
        .container
        .exec(testcontainers::core::ExecCommand::new([
            "kill".to_owned(),
            format!("-{signal}"),
            pid.to_string(),
        ]))
        .await
        .expect("docker exec kill");
    // Reading the output to its end waits for the command to finish.
    let stderr =
        String::from_utf8_lossy(&out.stderr_to_vec().await.expect("exec stderr")).into_owned();
    let code = out.exit_code().await.expect("exit code");
    assert_eq!(code, Some(0), "kill -{signal} {pid}: {stderr}");
}

/// Terminates the backend `pid` from the observer connection.
pub async fn terminate(observer: &tokio_postgres::Client, pid: i32) {
    let ok: bool = observer
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .expect("pg_terminate_backend")
        .get(0);
    assert!(ok);
}
