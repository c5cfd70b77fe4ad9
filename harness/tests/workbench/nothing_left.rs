//! A SIGKILLed `harness up` leaves nothing behind: its replica processes die with it (a frozen
//! one too), and its reaper removes its containers, network and control socket, then ends.

use std::time::Duration;

use harness::topology::docker::count_labelled;
use nix::sys::signal::Signal;

use testkit::eventually;

use crate::common::{fresh_dir, running, text, Up};

/// How long the replicas may outlive the harness.
const REPLICAS_GONE: Duration = Duration::from_secs(5);
/// How long the reaper may take to remove the containers and the network.
const SERVICES_GONE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_up_takes_its_replicas_and_containers_along() {
    let out = fresh_dir("killed");
    let out_s = out.display().to_string();
    let mut up = Up::start(&["--replicas", "2", "--t", "200ms", "--out", &out_s], &[]);
    let ready = up
        .wait_line(0, Duration::from_secs(120), |l| l.starts_with("Ctrl-C"))
        .await;
    up.wait_line(ready, Duration::from_secs(30), |l| {
        l.contains("holds the lock")
    })
    .await;
    let run = up.value_after("run ");
    let control = up.value_after("  control");
    let socket = std::path::PathBuf::from(control.split(" (").next().unwrap());
    let reaper: i32 = (control.split("reaper pid ").nth(1))
        .and_then(|p| p.trim_end_matches(')').parse().ok())
        .expect("the reaper's pid");
    assert!(socket.exists(), "{}", socket.display());
    let pids = up.replica_pids();
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|p| running(*p)) && running(reaper));
    let frozen = up.harness(&["fault", "freeze", "r1"]).await;
    assert!(frozen.status.success(), "{:?}", text(&frozen));
    assert_eq!(
        count_labelled(&run).await.unwrap(),
        (2, 1),
        "postgres, toxiproxy, network"
    );

    up.signal_and_wait(Signal::SIGKILL).await;
    let took = eventually(REPLICAS_GONE, || async {
        !pids.iter().any(|p| running(*p))
    })
    .await;
    eprintln!("replicas gone after {took:?}");
    assert!(took.is_some(), "replicas still run: {pids:?}");
    let took = eventually(SERVICES_GONE, || async {
        count_labelled(&run).await.unwrap() == (0, 0)
    })
    .await;
    eprintln!("containers and network gone after {took:?}");
    assert!(
        took.is_some(),
        "the reaper left {:?}",
        count_labelled(&run).await
    );
    let took = eventually(Duration::from_secs(10), || async { !running(reaper) }).await;
    assert!(took.is_some(), "the reaper still runs");
    // The reaper's own trace: the stale sweep of another run's start removes containers too.
    assert!(!socket.exists(), "the reaper left the control socket");
}
