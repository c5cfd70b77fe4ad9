//! The local-process backend: the same interface and verbs without Docker.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use harness::fault::{Nemesis, Verb};
use harness::topology::{PoolMode, ReplicaPath, Topology, TopologyConfig};
use tokio::time::Instant;

use crate::common::{backend_pid, backend_state, client, connects, eventually, show};

fn pgbouncer_installed() -> bool {
    ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
        .iter()
        .any(|p| Path::new(p).exists())
}

/// Whether the host has PostgreSQL server binaries. Without them the local-backend tests say so
/// and return, unless `ELECTOR_REQUIRE_LOCAL=1` makes that a failure (CI installs
/// `postgresql-15` and `pgbouncer` from Debian to run them).
fn local_postgres_available() -> bool {
    let found = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.path().join("bin/postgres").exists())
        || std::env::var_os("ELECTOR_PG_BIN").is_some();
    if !found {
        assert!(
            std::env::var_os("ELECTOR_REQUIRE_LOCAL").is_none(),
            "ELECTOR_REQUIRE_LOCAL is set but no PostgreSQL server binaries are installed"
        );
        eprintln!(
            "SKIPPED: no PostgreSQL server binaries under /usr/lib/postgresql/*/bin \
             (apt-get install postgresql-15 pgbouncer)"
        );
    }
    found
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

fn pids(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_backend_serves_the_same_verbs_and_cleans_up() {
    if !local_postgres_available() {
        return;
    }
    let mut config = TopologyConfig::local();
    let with_pgbouncer = pgbouncer_installed();
    if with_pgbouncer {
        config = config.pgbouncer(PoolMode::Transaction);
    } else {
        assert!(
            std::env::var_os("ELECTOR_REQUIRE_LOCAL").is_none(),
            "ELECTOR_REQUIRE_LOCAL is set but pgbouncer is not installed"
        );
        eprintln!("SKIPPED in part: pgbouncer is not installed (apt-get install pgbouncer)");
    }
    let clock = Instant::now();
    let topology = Topology::start(config).await.expect("local topology");
    eprintln!(
        "local start-up: {:?} [{}]",
        clock.elapsed(),
        topology.startup()
    );
    let mut wanted = vec![("l1".to_owned(), ReplicaPath::Direct)];
    if with_pgbouncer {
        wanted.push(("l2".to_owned(), ReplicaPath::PgBouncerTransaction));
    }
    let proxies = topology.add_proxies(&wanted).await.expect("proxies");
    show(&topology).await;
    let dir = topology.local().expect("local").dir().to_owned();
    let nemesis = Nemesis::new(&topology, Instant::now());
    let observer = topology.observer().await.expect("observer");

    // partition / heal through the in-process Toxiproxy.
    let c = Arc::new(client(&proxies[0].dsn(), "t-local").await);
    let pid = backend_pid(&c).await;
    nemesis.partition("l1").await.expect("partition");
    let pending = tokio::spawn({
        let c = c.clone();
        async move { c.simple_query("SELECT 1").await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!pending.is_finished());
    assert_eq!(backend_state(&observer, pid).await.as_deref(), Some("idle"));
    nemesis.heal("l1").await.expect("heal");
    let outcome = tokio::time::timeout(Duration::from_secs(3), pending)
        .await
        .expect("ends")
        .unwrap();
    assert!(outcome.is_err());

    // kill_backend.
    let c = client(&proxies[0].dsn(), "t-local-kill").await;
    nemesis
        .kill_backend(backend_pid(&c).await)
        .await
        .expect("kill");
    assert!(c.simple_query("SELECT 1").await.is_err());

    // The PgBouncer path.
    if with_pgbouncer {
        let b = client(&proxies[1].dsn(), "t-local-pgb").await;
        b.simple_query("SELECT 1").await.expect("through pgbouncer");
    }

    // restart_server: the same port, the observer and the proxies work again.
    nemesis.restart_server().await.expect("restart");
    assert!(connects(&topology.observer_dsn()).await);
    assert!(connects(&proxies[0].dsn()).await);
    if with_pgbouncer {
        let dsn = proxies[1].dsn();
        assert!(
            eventually(Duration::from_secs(5), || connects(&dsn))
                .await
                .is_some(),
            "pgbouncer reconnects to the restarted server"
        );
    }

    // Shutdown: processes and directory gone.
    let children = pids(&dir);
    assert!(!children.is_empty());
    topology.shutdown().await;
    assert!(!dir.exists(), "{} removed", dir.display());
    for pid in children {
        assert!(!alive(pid), "process {pid} still runs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_local_topology_kills_its_processes() {
    if !local_postgres_available() {
        return;
    }
    let topology = Topology::start(TopologyConfig::local())
        .await
        .expect("local topology");
    let dir = topology.local().expect("local").dir().to_owned();
    let children = pids(&dir);
    assert!(children.iter().all(|&p| alive(p)));
    drop(topology);
    assert!(!dir.exists());
    for pid in children {
        assert!(!alive(pid), "process {pid} still runs");
    }
}

/// The replica-process verbs, on a real replica process connected through a local proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_verbs_signal_a_replica() {
    if !local_postgres_available() {
        return;
    }
    use harness::replica::{ReplicaProcess, ReplicaSpec};

    let topology = Topology::start(TopologyConfig::local())
        .await
        .expect("local topology");
    let proxy = topology
        .add_proxy("r1", ReplicaPath::Direct)
        .await
        .expect("proxy");
    let nemesis = Nemesis::new(&topology, Instant::now());
    let spec = ReplicaSpec::new("r1", Duration::from_millis(200)).dsn(proxy.dsn());
    let mut replica = ReplicaProcess::spawn(Path::new(env!("CARGO_BIN_EXE_harness")), spec)
        .await
        .expect("replica");
    let state = |pid: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .unwrap_or('?')
    };
    let pid = replica.pid();

    let rec = nemesis.freeze(&mut replica).expect("freeze");
    assert_eq!((rec.verb, rec.target.as_str()), (Verb::Freeze, "r1"));
    assert!(
        eventually(Duration::from_secs(2), || async { state(pid) == 'T' })
            .await
            .is_some(),
        "SIGSTOP stops it"
    );
    let rec = nemesis.thaw(&mut replica).expect("thaw");
    assert!(rec.lifted);
    assert!(
        eventually(Duration::from_secs(2), || async { state(pid) != 'T' })
            .await
            .is_some(),
        "SIGCONT resumes it"
    );

    nemesis.kill(&mut replica).expect("kill");
    assert!(
        eventually(Duration::from_secs(2), || async { !alive(pid) })
            .await
            .is_some()
            || !replica.is_running(),
        "SIGKILL ends it"
    );
    let rec = nemesis.restart(&mut replica).await.expect("restart");
    assert_eq!(rec.verb, Verb::Restart);
    assert_ne!(replica.pid(), pid, "a new process");
    assert!(replica.is_running());

    nemesis.terminate(&mut replica).expect("terminate");
    let status = tokio::time::timeout(Duration::from_secs(10), replica.wait())
        .await
        .expect("SIGTERM ends it")
        .expect("status");
    eprintln!("after SIGTERM: {status}");
    let verbs: Vec<Verb> = nemesis.records().into_iter().map(|r| r.verb).collect();
    assert_eq!(
        verbs,
        [
            Verb::Freeze,
            Verb::Freeze,
            Verb::Kill,
            Verb::Restart,
            Verb::Terminate
        ]
    );
    topology.shutdown().await;
}
