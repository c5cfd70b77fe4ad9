//! Start-up time of the services (printed; run with `--nocapture` to see it).

use std::time::Duration;

use harness::topology::{ReplicaPath, Topology, TopologyConfig};
use tokio::time::Instant;

/// PostgreSQL + Toxiproxy + three replica proxies, PostgreSQL's data on a volume and in
/// memory (`ELECTOR_STARTUP_ROUNDS` times each, default once: set it to 2 or more to compare a
/// cold start with warm ones).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_toxiproxy_and_three_proxies_start_quickly() {
    let rounds: usize = std::env::var("ELECTOR_STARTUP_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for (attempt, in_memory) in (1..=rounds).flat_map(|i| [(i, false), (i, true)]) {
        let clock = Instant::now();
        let config = TopologyConfig::docker().data_in_memory(in_memory);
        let topology = Topology::start(config).await.expect("topology");
        let wanted: Vec<(String, ReplicaPath)> = (1..=3)
            .map(|i| (format!("r{i}"), ReplicaPath::Direct))
            .collect();
        topology.add_proxies(&wanted).await.expect("proxies");
        let up = clock.elapsed();
        let clock = Instant::now();
        topology.shutdown().await;
        let down = clock.elapsed();
        eprintln!(
            "start-up (round {attempt}, data {}): {:.2} s with 3 proxies [{}]; shutdown {:.2} s",
            if in_memory {
                "in memory"
            } else {
                "on a volume"
            },
            up.as_secs_f64(),
            topology.startup(),
            down.as_secs_f64()
        );
        assert!(
            up < Duration::from_secs(15),
            "the topology took {up:?} to start"
        );
    }
}

/// A topology that keeps PostgreSQL's data in memory refuses to stop the server, saying why
/// (a stop would lose the cluster): the server keeps running and answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_data_is_in_memory_is_not_stopped() {
    let topology = Topology::start(TopologyConfig::docker().data_in_memory(true))
        .await
        .expect("topology");
    let refused = topology.stop_server().await.expect_err("a stop is refused");
    assert!(
        refused.to_string().contains("data is in memory"),
        "{refused:#}"
    );
    let restart = topology.restart_server().await.expect_err("a restart too");
    assert!(
        restart.to_string().contains("data_in_memory"),
        "{restart:#}"
    );
    let observer = harness::topology::Observer::new(&topology);
    let rows = observer
        .query("SELECT 1", &[])
        .await
        .expect("the server still answers");
    assert_eq!(rows.len(), 1);
    topology.shutdown().await;
}
