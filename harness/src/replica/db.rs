//! The replica's database side: the boot-time reachability check, the pool (whose connections
//! carry `application_name` = the replica's name), the `leader_work` table and the optional
//! pool max lifetime.

use std::time::Duration;

use anyhow::{anyhow, bail};
use deadpool_postgres::{
    ManagerConfig, Object, Pool, PoolConfig, PoolError, RecyclingMethod, Runtime,
};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::NoTls;
use tokio_util::sync::CancellationToken;

use crate::event::WORK_TABLE_DDL;

/// Whether `leader_work` exists, asked before [`WORK_TABLE_DDL`].
const WORK_TABLE_EXISTS: &str = "SELECT to_regclass('leader_work') IS NOT NULL";

/// The statement a leader-only pass writes (LOOP-1, LOOP-2, LOOP-3).
const INSERT_WORK: &str = "INSERT INTO leader_work (loop_name, replica, term) VALUES ($1, $2, $3)";

/// X-FENCE: a fencing replica's pass writes twins in one statement: the unfenced row
/// (`fence` NULL), which always lands, and the fenced one, which lands only while the term's
/// token is the newest (the guard of [`elector::sql::FENCE_LATEST`]). A pass held in transit
/// until a newer term began lands as its unfenced row alone: the fence rejected its twin.
static INSERT_FENCED_WORK: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "INSERT INTO leader_work (loop_name, replica, term, fence) \
         SELECT $1, $2, $3, twin.fence FROM (VALUES (NULL::bigint), ($4::bigint)) AS twin(fence) \
         WHERE twin.fence IS NULL OR twin.fence = {}",
        elector::sql::FENCE_LATEST
    )
});

/// The read a boot pass and an every-replica sample take.
const COUNT_WORK: &str = "SELECT count(*) FROM leader_work WHERE loop_name = $1";

/// The replica's pool and name. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct Database {
    pub(crate) pool: Pool,
    replica: String,
}

impl Database {
    /// Parses `dsn`, builds the pool, proves the server is reachable within `timeout` (one
    /// pooled connection, which also creates `leader_work`; a refusal is tried again until
    /// then), and opens the pool's other connections (`pool_max` in all).
    ///
    /// # Errors
    /// An invalid DSN, a refusal that waiting cannot cure (authorization, a missing database,
    /// no right to create the table), or a server that does not let the replica in within
    /// `timeout`.
    pub(crate) async fn connect(
        dsn: &str,
        replica: &str,
        pool_max: usize,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let mut cfg = deadpool_postgres::Config::new();
        cfg.url = Some(dsn.to_owned());
        cfg.application_name = Some(replica.to_owned());
        cfg.manager = Some(ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        });
        cfg.pool = Some(PoolConfig::new(pool_max));
        let pg = cfg
            .get_pg_config()
            .map_err(|e| anyhow!("invalid --dsn: {e}"))?;
        let target = describe(&pg);

        let pool = cfg
            .create_pool(Some(Runtime::Tokio1), NoTls)
            .map_err(|e| anyhow!("cannot build the pool: {e}"))?;
        // The first connection proves the server is there and stays in the pool, warm for the
        // elector's first check and the boot passes.
        let client = first_connection(&pool, &target, timeout).await?;
        // Warm the pool to its size now, so no connection is opened while the loops run: a
        // connection's handshake (SCRAM above all, in a debug build) takes CPU from the runtime
        // the election's checks run on.
        let warm = futures::future::join_all((1..pool_max).map(|_| pool.get()));
        match tokio::time::timeout(timeout, warm).await {
            Ok(objects) => {
                let failed = objects.iter().filter(|o| o.is_err()).count();
                if failed > 0 {
                    tracing::warn!(failed, "pool: some connections could not be opened at boot");
                }
            }
            Err(_) => tracing::warn!("pool: warming did not finish within {timeout:?}"),
        }
        drop(client);
        Ok(Self {
            pool,
            replica: replica.to_owned(),
        })
    }

    /// Writes one `leader_work` row for `loop_name` in `term`, on a pooled connection; with the
    /// term's `fence` token (X-FENCE), its fenced twin too ([`INSERT_FENCED_WORK`]).
    ///
    /// Like every statement of the replica's own work, an unnamed statement with typed
    /// parameters: one round trip, and nothing prepared that a transaction-mode pooler would
    /// hand to another server session (where a named statement does not exist).
    pub(crate) async fn record_work(
        &self,
        loop_name: &str,
        term: u64,
        fence: Option<i64>,
    ) -> Result<(), String> {
        let term = i64::try_from(term).map_err(|e| e.to_string())?;
        let client = self.pool.get().await.map_err(|e| format!("pool: {e}"))?;
        let params = [
            (
                &loop_name as &(dyn tokio_postgres::types::ToSql + Sync),
                Type::TEXT,
            ),
            (&self.replica, Type::TEXT),
            (&term, Type::INT8),
        ];
        let written = match fence {
            None => client.execute_typed(INSERT_WORK, &params).await,
            Some(fence) => {
                let mut fenced = params.to_vec();
                fenced.push((&fence, Type::INT8));
                (client.execute_typed(&INSERT_FENCED_WORK, &fenced)).await
            }
        };
        written.map(|_| ()).map_err(db_error)
    }

    /// A cheap real read on a pooled connection: the number of `leader_work` rows of
    /// `loop_name` (a boot pass's sweep, an every-replica loop's sample).
    pub(crate) async fn sample(&self, loop_name: &str) -> Result<i64, String> {
        let client = self.pool.get().await.map_err(|e| format!("pool: {e}"))?;
        client
            .query_typed_one(COUNT_WORK, &[(&loop_name, Type::TEXT)])
            .await
            .map(|row| row.get(0))
            .map_err(db_error)
    }

    /// Retires pooled connections older than `max` (SESS-1: the elector's lock connection is
    /// out of the pool, so this never touches it), checking every `max / 4` (at least 10 ms)
    /// until `shutdown`.
    pub(crate) fn enforce_max_lifetime(&self, max: Duration, shutdown: CancellationToken) {
        let pool = self.pool.clone();
        let every = (max / 4).max(Duration::from_millis(10));
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = ticks.tick() => {}
                }
                let retired = pool.retain(|_, metrics| metrics.age() < max).removed.len();
                if retired > 0 {
                    tracing::debug!(retired, "pool: retired connections past their max lifetime");
                }
            }
        });
    }
}

/// The pause between two boot attempts on a database that refused the replica.
const BOOT_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The first pooled connection, with `leader_work` created on it. A database that refuses or
/// drops the replica is tried again every [`BOOT_RETRY_PAUSE`] until `timeout`: a server still
/// starting or restarting, or PgBouncer refusing logins for `server_login_retry` after a server
/// stop (chaos seeds 110 and 117 on `pgbouncer-session`). A refusal that waiting cannot cure (a
/// wrong password, a missing database, no right to create the table) fails at once.
async fn first_connection(pool: &Pool, target: &str, timeout: Duration) -> anyhow::Result<Object> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let failed = match tokio::time::timeout_at(deadline, attempt(pool)).await {
            Err(_) => bail!("PostgreSQL at {target} did not answer within {timeout:?}"),
            Ok(Ok(client)) => return Ok(client),
            Ok(Err(failed)) => failed,
        };
        let retry_at = tokio::time::Instant::now() + BOOT_RETRY_PAUSE;
        if failed.lasts() || retry_at >= deadline {
            let tried = if attempts > 1 {
                format!(" ({attempts} attempts in {timeout:?})")
            } else {
                String::new()
            };
            return Err(match failed {
                BootFailure::Connect(_) => {
                    anyhow!("cannot connect to PostgreSQL at {target}: {failed}{tried}")
                }
                BootFailure::Create(_) => {
                    anyhow!("cannot create leader_work at {target}: {failed}{tried}")
                }
            });
        }
        tracing::warn!(attempt = attempts, error = %failed, "boot: PostgreSQL at {target} refused the replica; trying again");
        tokio::time::sleep_until(retry_at).await;
    }
}

/// Why one boot attempt failed.
#[derive(Debug)]
enum BootFailure {
    /// No pooled connection.
    Connect(PoolError),
    /// The connection came, but `leader_work` could not be created on it.
    Create(tokio_postgres::Error),
}

impl BootFailure {
    /// Whether waiting cannot cure it: the server answered with an authorization (class 28),
    /// missing-database (3D) or access-rule (42) error.
    fn lasts(&self) -> bool {
        let code = match self {
            BootFailure::Connect(PoolError::Backend(e)) | BootFailure::Create(e) => e.code(),
            BootFailure::Connect(_) => None,
        };
        code.is_some_and(|c| {
            ["28", "3D", "42"]
                .iter()
                .any(|class| c.code().starts_with(class))
        })
    }
}

impl std::fmt::Display for BootFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BootFailure::Connect(PoolError::Backend(e)) | BootFailure::Create(e) => {
                // The server's own message (e.g. PgBouncer's "server login has been failing"),
                // not only "db error".
                match e.as_db_error() {
                    Some(db) => write!(f, "{e}: {}", db.message()),
                    None => write!(f, "{e}"),
                }
            }
            BootFailure::Connect(e) => write!(f, "{e}"),
        }
    }
}

/// One boot attempt: a pooled connection, then `leader_work` created on it unless it is there.
/// The harness creates the table ahead, as an operator would: the application role may not
/// create anything (PostgreSQL 15 and later grant no CREATE on `public`, and `CREATE TABLE IF
/// NOT EXISTS` asks for that right before it looks whether the table exists).
async fn attempt(pool: &Pool) -> Result<Object, BootFailure> {
    let client = pool.get().await.map_err(BootFailure::Connect)?;
    // The simple protocol: behind a transaction-mode pooler a named prepared statement would
    // meet another client's of the same name on a shared server session.
    let answer = (client.simple_query(WORK_TABLE_EXISTS).await).map_err(BootFailure::Create)?;
    let there = answer.iter().any(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0) == Some("t"),
        _ => false,
    });
    if there {
        return Ok(client);
    }
    match client.batch_execute(WORK_TABLE_DDL).await {
        Ok(()) => Ok(client),
        // Replicas booting together race on CREATE TABLE IF NOT EXISTS; the loser's error
        // means the table is there.
        Err(e)
            if [
                SqlState::UNIQUE_VIOLATION,
                SqlState::DUPLICATE_TABLE,
                SqlState::DUPLICATE_OBJECT,
            ]
            .iter()
            .any(|c| e.code() == Some(c)) =>
        {
            tracing::debug!(error = %e, "leader_work: created concurrently by another replica");
            Ok(client)
        }
        Err(e) => Err(BootFailure::Create(e)),
    }
}

/// `host:port/dbname` of a connection config, for error messages (never the password).
fn describe(pg: &tokio_postgres::Config) -> String {
    let host = pg
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".to_owned());
    let port = pg.get_ports().first().copied().unwrap_or(5432);
    let db = pg.get_dbname().unwrap_or_default();
    format!("{host}:{port}/{db}")
}

/// A driver error as text, with the server's own message when it sent one (tokio-postgres
/// shows a server error as `db error` alone).
fn db_error(e: tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("postgres: {db}"),
        None => format!("postgres: {e}"),
    }
}
