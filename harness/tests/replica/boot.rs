//! Booting: without a DSN (LOOP-4), with bad flags, with an unreachable or invalid DSN, and
//! READY-1 (the boot pass's outcome is what a probe reports before the first tick).

use std::process::Command;
use std::time::Duration;

use harness::event::{ReplicaEvent, TickKind};
use harness::replica::control::injected_failure;
use harness::replica::{ReplicaProcess, ReplicaSpec};

use crate::fixture::{binary, start_ready, Pg, T};

/// LOOP-4: no DSN: `started` says elector:false; no worker, no gauge, no loop; /readyz 200;
/// SIGTERM exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_dsn_no_elector_and_no_loops() {
    let _serial = crate::fixture::shared().await;
    let mut r = start_ready(ReplicaSpec::new("n1", T)).await;
    assert!(!r.has_elector());
    assert!(matches!(
        r.history()[0].event(),
        ReplicaEvent::Started {
            elector: false,
            check_interval_ms: 200,
            ..
        }
    ));
    assert_eq!(r.workers().await.unwrap(), vec![]);
    assert_eq!(
        r.try_metrics_gauge().await.unwrap(),
        None,
        "no gauge registered"
    );
    let info = r.leader().await.unwrap();
    assert!(!info.elector && !info.is_leader && info.term.is_none());
    let (status, report) = r.ready_report().await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(report.checks.len(), 1, "only the workers probe: {report:?}");
    let (status, _) = r
        .control(&serde_json::json!({"loop": "invitations-expire", "mode": "fail"}))
        .await
        .unwrap();
    assert_eq!(status, 404, "no loop is wired");
    tokio::time::sleep(3 * T).await;
    assert!(
        r.history().iter().all(|e| matches!(
            e.event(),
            ReplicaEvent::Started { .. } | ReplicaEvent::Ready
        )),
        "{:?}",
        r.history()
    );
    r.sigterm().unwrap();
    assert_eq!(r.wait().await.unwrap().code(), Some(0));
}

fn run_replica(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(binary())
        .arg("replica")
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A bad flag, an invalid DSN or an unknown loop name: non-zero exit and a clear message.
#[test]
fn bad_flags_fail_clearly() {
    // 0 is taken (the elector's default, CFG-2); a word is not a number.
    let (code, err) = run_replica(&["--name", "b", "--check-interval-ms", "soon"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--check-interval-ms"), "{err}");
    let (code, err) = run_replica(&["--name", "b", "--bogus"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--bogus"), "{err}");
    let (code, err) = run_replica(&["--check-interval-ms", "200"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--name"), "{err}");
    let (code, err) = run_replica(&["--name", "b", "--dsn", "not a dsn"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("harness: error: invalid --dsn"), "{err}");
    let (code, err) = run_replica(&["--name", "b", "--fail-loop", "no-such-loop"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no loop named \"no-such-loop\""), "{err}");
}

/// An unreachable DSN at boot: a refused port is tried again until the boot timeout, then
/// fails with the last error and the number of attempts; a server that accepts but never
/// answers fails after the boot timeout. Either way: non-zero exit, one clear line, and
/// `ReplicaProcess::spawn` reports it with the stderr tail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_dsn_fails_at_boot() {
    let _serial = crate::fixture::shared().await;
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let spec = ReplicaSpec::new("u1", T).dsn(format!(
        "postgres://postgres:x@127.0.0.1:{refused}/plexsphere"
    ));
    let err = ReplicaProcess::spawn(binary(), spec).await.unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.contains("did not start")
            && text.contains("cannot connect to PostgreSQL at 127.0.0.1"),
        "{text}"
    );
    assert!(text.contains("(exit status: 1)"), "{text}");
    assert!(text.contains("attempts in 5s)"), "{text}");

    // A black hole: the kernel accepts, nobody answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let started = std::time::Instant::now();
    let (code, err) = tokio::task::spawn_blocking(move || {
        run_replica(&[
            "--name",
            "u2",
            "--dsn",
            &format!("postgres://postgres:x@127.0.0.1:{port}/plexsphere"),
        ])
    })
    .await
    .unwrap();
    drop(silent);
    assert_eq!(code, Some(1));
    assert!(err.contains("did not answer within 5s"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(8));
}

/// A database that refuses the replica at first (a server still starting, or PgBouncer
/// refusing logins for `server_login_retry` after a server stop: chaos seeds 110 and 117 on
/// `pgbouncer-session`, where a restarted replica exited with "server login has been failing")
/// and answers within the boot timeout: the replica retries and boots. Behind the proxy, every
/// connection is reset at once for the first second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_answers_within_the_boot_timeout_is_waited_for() {
    let _serial = crate::fixture::shared().await;
    let pg = Pg::start().await;
    let proxy = testkit::proxy::Proxy::start(pg.port()).await;
    let refuse = serde_json::json!({"timeout": 0});
    proxy
        .add_toxic("refuse", "reset_peer", "downstream", refuse)
        .await;
    let mut spec = pg.spec("late1");
    spec.dsn = Some(pg.url_via(proxy.port));
    let booting = tokio::spawn(ReplicaProcess::spawn(binary(), spec));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!booting.is_finished(), "the replica gave up at once");
    proxy.remove_toxic("refuse").await;
    let mut r = booting
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("the replica did not boot: {e:#}"));
    assert!(r.has_elector());
    r.wait_for_event(0, Duration::from_secs(10), |e| {
        matches!(e, ReplicaEvent::Ready)
    })
    .await
    .unwrap_or_else(|e| panic!("not ready: {e:#}"));
    r.sigterm().unwrap();
    assert_eq!(r.wait().await.unwrap().code(), Some(0));
}

/// A refusal that waiting cannot cure fails at once: a database that does not exist (3D000).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_database_fails_at_once() {
    let _serial = crate::fixture::shared().await;
    let pg = Pg::start().await;
    let dsn = pg.url().replace("/plexsphere", "/no_such_database");
    let started = std::time::Instant::now();
    let (code, err) =
        tokio::task::spawn_blocking(move || run_replica(&["--name", "m1", "--dsn", &dsn]))
            .await
            .unwrap();
    assert_eq!(code, Some(1));
    assert!(
        err.contains("cannot connect to PostgreSQL at 127.0.0.1")
            && err.contains("\"no_such_database\" does not exist")
            && !err.contains("attempts"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

/// READY-1: before its first tick a probe reports the boot pass; a failing boot pass keeps the
/// replica out of service (503) until a later tick succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_boot_pass_is_reported_until_a_tick_succeeds() {
    let _serial = crate::fixture::shared().await;
    let pg = Pg::start().await;
    let mut spec = pg.spec("bp1");
    spec.fail_loops.push("artifacts-refresh".into());
    // Ticks far apart, so the boot pass's outcome is what the probe shows for a while.
    spec.tick = Some(Duration::from_secs(2));
    let r = start_ready(spec).await;
    let boot = r
        .history()
        .into_iter()
        .find_map(|e| match e.line.event {
            ReplicaEvent::BootPass {
                loop_name,
                outcome,
                error,
            } if loop_name == "artifacts-refresh" => Some((outcome, error)),
            _ => None,
        })
        .expect("boot pass event");
    assert_eq!(
        boot,
        (
            TickKind::Failed,
            Some(injected_failure("artifacts-refresh"))
        )
    );
    let (status, report) = r.ready_report().await.unwrap();
    assert_eq!(status, 503);
    assert_eq!(
        report
            .check("artifacts-refresh")
            .and_then(|c| c.error.clone()),
        Some(injected_failure("artifacts-refresh"))
    );
    r.set_loop_mode("artifacts-refresh", harness::replica::control::LoopMode::Ok)
        .await
        .unwrap();
    // The first tick comes one tick period after the start.
    let mark = 0;
    r.wait_for_event(mark, Duration::from_secs(4), |e| {
        matches!(e, ReplicaEvent::Tick { loop_name, outcome: TickKind::Ok, .. } if loop_name == "artifacts-refresh")
    })
    .await
    .expect("a passing tick");
    assert_eq!(r.readyz().await.unwrap().0, 200);
}
