//! Each fault verb's observed effect on a plain tokio-postgres client connected through a proxy.

use std::sync::Arc;
use std::time::Duration;

use harness::fault::{Nemesis, Verb};
use harness::topology::docker::count_labelled;
use harness::topology::{ReplicaPath, Topology, TopologyConfig};
use tokio::time::Instant;

use crate::common::{
    backend_pid, backend_state, client, connects, eventually, first, round_trip, show,
    with_direct_proxy,
};

/// The network verbs, each on a proxy of its own in one topology.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_verbs_act_on_one_proxy_each() {
    let topology = Topology::start(TopologyConfig::docker())
        .await
        .expect("topology");
    let names = ["part", "stall", "lat", "reset", "dis", "bystander"];
    let wanted: Vec<(String, ReplicaPath)> = names
        .iter()
        .map(|n| ((*n).to_owned(), ReplicaPath::Direct))
        .collect();
    let proxies = topology.add_proxies(&wanted).await.expect("proxies");
    show(&topology).await;
    let dsn = |name: &str| {
        proxies
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.dsn())
            .expect("proxy")
    };
    let run_start = Instant::now();
    let nemesis = Nemesis::new(&topology, run_start);
    let observer = topology.observer().await.expect("observer");
    let bystander = client(&dsn("bystander"), "t-bystander").await;

    // partition: no answer, the server sees the session idle; healing closes the connection.
    {
        let c = Arc::new(client(&dsn("part"), "t-partition").await);
        let pid = backend_pid(&c).await;
        let rec = nemesis.partition("part").await.expect("partition");
        assert_eq!((rec.verb, rec.lifted), (Verb::Partition, false));
        assert!(rec.end >= rec.start);
        let pending = tokio::spawn({
            let c = c.clone();
            async move { c.simple_query("SELECT 1").await }
        });
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert!(!pending.is_finished(), "a partitioned query got an answer");
        assert_eq!(
            backend_state(&observer, pid).await.as_deref(),
            Some("idle"),
            "the server never saw the query"
        );
        assert!(
            !connects(&dsn("part")).await,
            "a new connection must not work either"
        );
        let recs = nemesis.heal("part").await.expect("heal");
        let lifted: Vec<_> = recs.iter().map(|r| (r.verb, r.lifted)).collect();
        assert_eq!(lifted, [(Verb::Partition, true)]);
        let outcome = tokio::time::timeout(Duration::from_secs(3), pending)
            .await
            .expect("healing must end the pending query")
            .expect("task");
        assert!(
            outcome.is_err(),
            "healing closes the connection: {outcome:?}"
        );
        assert!(
            eventually(Duration::from_secs(3), || async {
                backend_state(&observer, pid).await.is_none()
            })
            .await
            .is_some(),
            "the server session ends once the proxy closes it"
        );
        assert!(connects(&dsn("part")).await, "healed: new connections work");
    }

    // stall then heal: the query waits, then completes.
    {
        let c = Arc::new(client(&dsn("stall"), "t-stall").await);
        nemesis.stall("stall").await.expect("stall");
        let pending = tokio::spawn({
            let c = c.clone();
            async move { c.query_one("SELECT 42::int4", &[]).await }
        });
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(!pending.is_finished(), "a stalled query got an answer");
        let recs = nemesis.heal("stall").await.expect("heal");
        let lifted: Vec<_> = recs.iter().map(|r| (r.verb, r.lifted)).collect();
        assert_eq!(lifted, [(Verb::Stall, true)]);
        let row = tokio::time::timeout(Duration::from_secs(3), pending)
            .await
            .expect("healed: the query completes")
            .expect("task")
            .expect("the query succeeds");
        assert_eq!(row.get::<_, i32>(0), 42);
    }

    // latency: every round trip takes at least the latency; clearing it restores speed.
    {
        let c = client(&dsn("lat"), "t-latency").await;
        let before = round_trip(&c).await;
        let delay = Duration::from_millis(200);
        nemesis
            .latency("lat", delay, Duration::ZERO)
            .await
            .expect("latency");
        for _ in 0..3 {
            let rtt = round_trip(&c).await;
            assert!(
                rtt >= delay,
                "round trip {rtt:?} under the latency {delay:?}"
            );
            assert!(
                rtt < delay + Duration::from_millis(300),
                "round trip {rtt:?}"
            );
        }
        nemesis
            .latency("lat", Duration::from_millis(50), Duration::ZERO)
            .await
            .expect("latency replaced");
        let rtt = round_trip(&c).await;
        assert!(
            rtt >= Duration::from_millis(50) && rtt < delay,
            "replaced latency: {rtt:?}"
        );
        let rec = nemesis.clear_latency("lat").await.expect("clear");
        assert_eq!((rec.verb, rec.lifted), (Verb::Latency, true));
        let after = round_trip(&c).await;
        eprintln!("latency: before {before:?}, after clearing {after:?}");
        assert!(after < Duration::from_millis(50), "cleared: {after:?}");
    }

    // reset: the client's next query gets a connection error; new connections too, until healed.
    {
        let c = client(&dsn("reset"), "t-reset").await;
        let pid = backend_pid(&c).await;
        nemesis.reset("reset").await.expect("reset");
        let err = tokio::time::timeout(Duration::from_secs(3), c.simple_query("SELECT 1"))
            .await
            .expect("a reset answers at once")
            .expect_err("the connection is reset");
        eprintln!("reset: {err}");
        assert!(c.is_closed(), "the client's connection is closed");
        assert!(
            !connects(&dsn("reset")).await,
            "new connections are reset too"
        );
        let recs = nemesis.heal("reset").await.expect("heal");
        let lifted: Vec<_> = recs.iter().map(|r| (r.verb, r.lifted)).collect();
        assert_eq!(lifted, [(Verb::Reset, true)]);
        assert!(
            connects(&dsn("reset")).await,
            "healed: new connections work"
        );
        assert!(
            eventually(Duration::from_secs(3), || async {
                backend_state(&observer, pid).await.is_none()
            })
            .await
            .is_some(),
            "the reset session ends on the server"
        );
    }

    // disable: the existing connection is closed, new ones refused; enable restores.
    {
        let c = client(&dsn("dis"), "t-disable").await;
        nemesis.disable("dis").await.expect("disable");
        let closed = eventually(Duration::from_secs(3), || async { c.is_closed() }).await;
        assert!(
            closed.is_some() || c.simple_query("SELECT 1").await.is_err(),
            "disabling closes the existing connection"
        );
        assert!(!connects(&dsn("dis")).await, "a disabled proxy refuses");
        let rec = nemesis.enable("dis").await.expect("enable");
        assert_eq!((rec.verb, rec.lifted), (Verb::Disable, true));
        assert!(connects(&dsn("dis")).await, "enabled again");
    }

    // Nothing of the above touched the bystander's proxy.
    assert!(bystander.simple_query("SELECT 1").await.is_ok());
    let records = nemesis.records();
    assert_eq!(records.len(), 11, "{records:#?}");
    assert!(records.windows(2).all(|w| w[0].start <= w[1].start));
    nemesis.heal_all().await.expect("heal all");

    // Shutdown removes everything, is idempotent, and later calls fail.
    let clock = Instant::now();
    topology.shutdown().await;
    eprintln!("shutdown took {:?}", clock.elapsed());
    assert_eq!(count_labelled(topology.run_id()).await.unwrap(), (0, 0));
    topology.shutdown().await;
    assert!(topology
        .add_proxy("late", ReplicaPath::Direct)
        .await
        .is_err());
    assert!(nemesis.partition("part").await.is_err());
}

/// Server-side verbs: kill_backend (and the leader's lock backend), restart_server,
/// stop_server / start_server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_verbs() {
    let (topology, proxy) = with_direct_proxy("r1").await;
    let nemesis = Nemesis::new(&topology, Instant::now());

    // kill_backend: the client gets an error.
    let c = client(&proxy.dsn(), "t-kill").await;
    let pid = backend_pid(&c).await;
    let rec = nemesis.kill_backend(pid).await.expect("kill backend");
    assert_eq!(rec.verb, Verb::KillBackend);
    assert_eq!(rec.target, format!("backend {pid}"));
    let err = c.simple_query("SELECT 1").await.expect_err("terminated");
    eprintln!("kill_backend: {err}");

    // The leader's lock backend, found with the spec's query, verbatim.
    assert_eq!(nemesis.leader_backend_pid().await.expect("query"), None);
    let leader = client(&proxy.dsn(), "t-leader").await;
    assert_eq!(
        first(&leader, "SELECT pg_try_advisory_lock(1886156915, 1)").await,
        "t"
    );
    let leader_pid = backend_pid(&leader).await;
    assert_eq!(
        nemesis.leader_backend_pid().await.expect("query"),
        Some(leader_pid)
    );
    nemesis
        .kill_leader_backend()
        .await
        .expect("kill the leader's backend");
    assert!(leader.simple_query("SELECT 1").await.is_err());
    assert!(
        eventually(Duration::from_secs(2), || async {
            nemesis.leader_backend_pid().await.ok() == Some(None)
        })
        .await
        .is_some(),
        "the lock went with the backend"
    );

    // restart_server: the observer reconnects; a new connection through the proxy works.
    let through_proxy = client(&proxy.dsn(), "t-restart").await;
    let old_observer = topology.observer().await.expect("observer");
    let old_dsn = topology.observer_dsn();
    let clock = Instant::now();
    let rec = nemesis.restart_server().await.expect("restart");
    eprintln!(
        "restart_server took {:?} ({} -> {})",
        clock.elapsed(),
        old_dsn,
        topology.observer_dsn()
    );
    assert_eq!(rec.verb, Verb::RestartServer);
    assert!(old_observer.simple_query("SELECT 1").await.is_err());
    assert!(through_proxy.simple_query("SELECT 1").await.is_err());
    let observer = nemesis.observer().client().await.expect("observer again");
    observer
        .simple_query("SELECT 1")
        .await
        .expect("observer works");
    assert!(
        connects(&proxy.dsn()).await,
        "through the proxy after a restart"
    );

    // stop_server / start_server.
    let rec = nemesis.stop_server().await.expect("stop");
    assert_eq!((rec.verb, rec.lifted), (Verb::StopServer, false));
    assert!(!connects(&proxy.dsn()).await, "stopped: no connection");
    let rec = nemesis.start_server().await.expect("start");
    assert_eq!((rec.verb, rec.lifted), (Verb::StopServer, true));
    assert!(connects(&topology.observer_dsn()).await);
    assert!(connects(&proxy.dsn()).await);
    topology.shutdown().await;
}
