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
