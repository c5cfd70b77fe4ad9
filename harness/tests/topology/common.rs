//! Shared helpers: clients through a proxy, timing, waiting on observed state.

use std::time::Duration;

use harness::topology::{try_connect, ProxyEndpoint, ReplicaPath, Topology, TopologyConfig};
use tokio::time::Instant;
use tokio_postgres::{Client, SimpleQueryMessage};

pub use testkit::eventually;

/// A topology on Docker with one direct proxy, named `name`.
pub async fn with_direct_proxy(name: &str) -> (Topology, ProxyEndpoint) {
    let topology = Topology::start(TopologyConfig::docker())
        .await
        .expect("topology");
    let proxy = (topology.add_proxy(name, ReplicaPath::Direct).await).expect("proxy");
    (topology, proxy)
}

/// A client connected to `dsn` with `application_name` = `app`.
pub async fn client(dsn: &str, app: &str) -> Client {
    let sep = if dsn.contains('?') { '&' } else { '?' };
    let dsn = format!("{dsn}{sep}application_name={app}");
    try_connect(&dsn, Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("connect {dsn}: {e:#}"))
}

/// The client's server backend pid.
pub async fn backend_pid(client: &Client) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pg_backend_pid")
        .get(0)
}

/// One `SELECT 1` round trip, timed.
pub async fn round_trip(client: &Client) -> Duration {
    let start = Instant::now();
    client.simple_query("SELECT 1").await.expect("SELECT 1");
    start.elapsed()
}

/// `pg_stat_activity.state` of backend `pid` (None: no such backend).
pub async fn backend_state(observer: &Client, pid: i32) -> Option<String> {
    observer
        .query_opt("SELECT state FROM pg_stat_activity WHERE pid = $1", &[&pid])
        .await
        .expect("pg_stat_activity")
        .and_then(|r| r.get::<_, Option<String>>(0))
}

/// Whether a fresh connection through `dsn` works (one `SELECT 1`).
pub async fn connects(dsn: &str) -> bool {
    match try_connect(dsn, Duration::from_secs(2)).await {
        Ok(c) => c.simple_query("SELECT 1").await.is_ok(),
        Err(_) => false,
    }
}

/// Prints the topology's summary (visible with `--nocapture`).
pub async fn show(topology: &Topology) {
    eprintln!("{}", topology.describe().await);
}

/// The value of the first column of the first row of a simple query.
pub async fn first(client: &Client, sql: &str) -> String {
    let messages = client.simple_query(sql).await.expect(sql);
    messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no row from {sql}"))
}
