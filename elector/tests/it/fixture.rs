//! Shared fixtures: the testkit's PostgreSQL container, proxy and log capture, plus electors.

use std::time::Duration;

use elector::{Config, Elector};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use testkit::pg::{backend_alive, backend_gone, leader_rows, pool_for, terminate};
pub use testkit::{Logs, Pg, Proxy};

/// The check interval the tests run at.
pub const T: Duration = Duration::from_millis(200);
/// Scheduling and round-trip noise allowed on top of a bound stated in units of T: small
/// against T (a quarter of it), never a multiple of it.
pub const SLACK: Duration = Duration::from_millis(50);

/// The spec's gauge name, from the reference page's text (not the crate's constant).
pub const SPEC_GAUGE: &str = testkit::spec::GAUGE;

/// An elector for `app` at interval `t` on `url`, on a registry of its own. Its pool is warm
/// (one idle connection), so the first check does not wait for a handshake.
pub async fn elector_on(url: &str, app: &str, t: Duration) -> (Elector, prometheus::Registry) {
    let registry = prometheus::Registry::new();
    let pool = pool_for(url, app, 4, Default::default());
    drop(pool.get().await.expect("a first pooled connection"));
    let config = Config::new(pool)
        .check_interval(t)
        .registry(registry.clone());
    (Elector::new(config).expect("elector"), registry)
}

/// The value of the leader gauge on `registry`, or `None` when it is not registered.
pub fn gauge(registry: &prometheus::Registry) -> Option<i64> {
    registry
        .gather()
        .iter()
        .find(|mf| mf.name() == SPEC_GAUGE)
        .map(|mf| mf.get_metric()[0].get_gauge().get_value() as i64)
}

/// Runs `elector` in a task until the returned token is cancelled.
pub fn spawn_run(elector: &Elector) -> Running {
    let token = CancellationToken::new();
    let (e, t) = (elector.clone(), token.clone());
    (token, tokio::spawn(async move { e.run(t).await }))
}

/// A running elector: the token that stops it and its task.
pub type Running = (
    CancellationToken,
    tokio::task::JoinHandle<Result<(), elector::Error>>,
);

/// Runs `elector` and waits (at most 10 T) until it leads.
pub async fn lead(elector: &Elector) -> Running {
    let running = spawn_run(elector);
    until_leader(elector, 10 * T).await;
    running
}

/// Cancels a running elector's token and waits for its `run` to return `Ok`.
pub async fn halt(
    token: CancellationToken,
    run: tokio::task::JoinHandle<Result<(), elector::Error>>,
) {
    token.cancel();
    run.await
        .expect("run does not panic")
        .expect("run returns Ok");
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

/// The pid of the backend that holds the leader lock.
pub async fn lock_pid(observer: &tokio_postgres::Client) -> i32 {
    let rows = leader_rows(observer).await;
    assert_eq!(rows.len(), 1, "one lock row: {rows:?}");
    rows[0].0
}

/// Sessions waiting in the lock queue for the spec's key (the test's own query).
pub async fn queued(observer: &tokio_postgres::Client) -> i64 {
    observer
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1886156915 \
             AND objid = 1 AND objsubid = 2 AND NOT granted",
            &[],
        )
        .await
        .expect("pg_locks")
        .get(0)
}
