//! PgBouncer paths: the transaction-mode hazard (POOL-1) and session mode behaving like a direct
//! connection (POOL-2), as plain clients see them through their proxies.

use crate::common::{client, first, show};
use harness::fault::Nemesis;
use harness::topology::{PoolMode, ReplicaPath, Topology, TopologyConfig};
use tokio::time::Instant;

const TRY_LOCK: &str = "SELECT pg_try_advisory_lock(1886156915, 1)";
const UNLOCK: &str = "SELECT pg_advisory_unlock(1886156915, 1)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_mode_refuses_the_second_client_transaction_mode_grants_both() {
    let topology = Topology::start(
        TopologyConfig::docker()
            .pgbouncer(PoolMode::Session)
            .pgbouncer(PoolMode::Transaction),
    )
    .await
    .expect("topology");
    eprintln!("start-up with both PgBouncers: {}", topology.startup());
    let proxies = topology
        .add_proxies(&[
            ("s1".into(), ReplicaPath::PgBouncerSession),
            ("s2".into(), ReplicaPath::PgBouncerSession),
            ("t1".into(), ReplicaPath::PgBouncerTransaction),
            ("t2".into(), ReplicaPath::PgBouncerTransaction),
        ])
        .await
        .expect("proxies");
    show(&topology).await;
    assert!(proxies[0].upstream.contains("pgbouncer-session"));
    assert!(proxies[2].upstream.contains("pgbouncer-transaction"));
    let nemesis = Nemesis::new(&topology, Instant::now());

    // Session mode: as on a direct connection, the second client is refused.
    let s1 = client(&proxies[0].dsn(), "t-s1").await;
    let s2 = client(&proxies[1].dsn(), "t-s2").await;
    assert_eq!(first(&s1, TRY_LOCK).await, "t");
    assert_eq!(first(&s2, TRY_LOCK).await, "f", "session mode: refused");
    let holder = nemesis.leader_backend_pid().await.expect("leader query");
    assert!(holder.is_some());
    assert_eq!(first(&s1, UNLOCK).await, "t");
    assert_eq!(nemesis.leader_backend_pid().await.expect("query"), None);

    // Transaction mode: both clients are granted the lock while pg_locks has one row.
    let t1 = client(&proxies[2].dsn(), "t-t1").await;
    let t2 = client(&proxies[3].dsn(), "t-t2").await;
    assert_eq!(first(&t1, TRY_LOCK).await, "t");
    assert_eq!(
        first(&t2, TRY_LOCK).await,
        "t",
        "the hazard: both believe they lead"
    );
    let observer = topology.observer().await.expect("observer");
    let rows = observer
        .query(testkit::SPEC_LEADER_QUERY, &[])
        .await
        .expect("leader query");
    eprintln!(
        "transaction mode: both granted; pg_locks rows: {:?}",
        rows.iter()
            .map(|r| (r.get::<_, i32>(0), r.get::<_, bool>(1)))
            .collect::<Vec<_>>()
    );
    assert_eq!(rows.len(), 1, "one pg_locks row for two 'leaders'");
    // The session-mode clients, by contrast, are refused: the shared server session holds it.
    assert_eq!(first(&s2, TRY_LOCK).await, "f");
    topology.shutdown().await;
}
