//! Shared fixtures: a real PostgreSQL container per test, replica processes, waits.

use std::path::Path;
use std::time::Duration;

use harness::event::ReplicaEvent;
use harness::replica::{ReplicaProcess, ReplicaSpec};
use testkit::pg::PgOptions;
use tokio::time::Instant;

/// The check interval the tests run at.
pub const T: Duration = Duration::from_millis(200);

/// Scheduling, process and round-trip noise allowed on top of a bound stated in units of T
/// (measured: see the failover test), never a multiple of T.
pub const SLACK: Duration = Duration::from_millis(60);

/// Tests that assert timing bounds (or steady leadership at a small T) hold this exclusively;
/// the others share it. The machine has two cores: two timing tests, each with a database and
/// several replicas, would otherwise measure each other.
static SERIAL: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Runs alone: no other test of this binary runs meanwhile.
pub async fn exclusive() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    SERIAL.write().await
}

/// Runs alongside other shared tests, never alongside an exclusive one.
pub async fn shared() -> tokio::sync::RwLockReadGuard<'static, ()> {
    SERIAL.read().await
}

/// The harness binary, re-executed as `harness replica ...`.
pub fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_harness"))
}

/// The testkit's PostgreSQL, trusting every client: a debug build spends ~120 ms of CPU on each
/// SCRAM handshake, which a small T cannot afford (the replica opens its pool at boot, but the
/// lock session and a restarted replica still connect while others run).
pub struct Pg(testkit::Pg);

impl Pg {
    /// Starts the server; panics with a clear message when Docker or the image is missing.
    pub async fn start() -> Pg {
        let started = Instant::now();
        let pg = testkit::Pg::start_with(PgOptions {
            trust: true,
            label: "harness-replica",
            ..PgOptions::default()
        })
        .await;
        // The replicas connect as the application role; leader_work and the fence sequence
        // are set up ahead, as the harness's topology does.
        harness::topology::provision(std::net::SocketAddr::from(([127, 0, 0, 1], pg.port)))
            .await
            .expect("leader_work and the grants");
        eprintln!("postgres up in {:?}", started.elapsed());
        Pg(pg)
    }

    pub fn url(&self) -> String {
        self.0.url()
    }

    /// The URL of this server's database through a proxy listening on `port`.
    pub fn url_via(&self, port: u16) -> String {
        self.0.url_via(port)
    }

    /// The host port mapped to the server's 5432.
    pub fn port(&self) -> u16 {
        self.0.port
    }

    /// A direct observer connection.
    pub async fn observer(&self) -> tokio_postgres::Client {
        self.0.observer().await
    }

    /// A replica spec at T on this server.
    pub fn spec(&self, name: &str) -> ReplicaSpec {
        let mut spec = ReplicaSpec::new(name, T).dsn(self.url());
        spec.rust_log = Some("info".into());
        spec
    }
}

/// Starts a replica and waits for its `ready` event.
pub async fn start_ready(spec: ReplicaSpec) -> ReplicaProcess {
    let name = spec.name.clone();
    let r = ReplicaProcess::spawn(binary(), spec)
        .await
        .unwrap_or_else(|e| panic!("replica {name}: {e:#}"));
    r.wait_for_event(0, Duration::from_secs(10), |e| {
        matches!(e, ReplicaEvent::Ready)
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}"));
    r
}

/// Starts the named replicas on `pg`, all at once, and waits until each is ready.
pub async fn start_many(pg: &Pg, names: &[&str]) -> Vec<ReplicaProcess> {
    futures::future::join_all(names.iter().map(|n| start_ready(pg.spec(n)))).await
}

/// The index of the one replica that emitted `acquired` (waiting at most `within`); panics if
/// none or more than one did.
pub async fn the_leader(replicas: &[ReplicaProcess], within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let leaders: Vec<usize> = replicas
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                r.history()
                    .iter()
                    .any(|e| matches!(e.event(), ReplicaEvent::Acquired { .. }))
            })
            .map(|(i, _)| i)
            .collect();
        match leaders.len() {
            1 => return leaders[0],
            0 if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(10)).await,
            0 => panic!("no replica acquired within {within:?}"),
            _ => panic!("more than one replica acquired: {leaders:?}"),
        }
    }
}

/// Polls `cond` every 20 ms for at most `within`.
pub async fn eventually<F, Fut>(within: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `(replica, count)` of the `leader_work` rows, by replica.
pub async fn work_by_replica(observer: &tokio_postgres::Client) -> Vec<(String, i64)> {
    observer
        .query(
            "SELECT replica, count(*) FROM leader_work GROUP BY replica ORDER BY replica",
            &[],
        )
        .await
        .expect("leader_work")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// The replica (application_name) whose backend holds the lock, by the spec's query.
pub async fn lock_holder(observer: &tokio_postgres::Client) -> Vec<String> {
    testkit::leader_rows(observer)
        .await
        .into_iter()
        .map(|(_, _, app)| app)
        .collect()
}
