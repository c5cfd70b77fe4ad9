//! Fault injection through `/control`: failing and panicking passes (READY-2, READY-4) and
//! crashing workers (LOOP-5, RUN-7, RUN-8).

use std::time::Duration;

use harness::event::{ReplicaEvent, TickKind};
use harness::replica::control::{injected_failure, injected_panic, LoopMode, WorkerMode};
use serde_json::json;

use crate::fixture::{eventually, start_many, start_ready, the_leader, Pg, SLACK, T};

/// READY-2, READY-3: a failing pass turns the leader's /readyz to 503 with the loop's error and
/// back to 200 after `ok`; the same switch on a standby changes nothing (it runs no pass).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_pass_turns_the_leaders_readyz_503_and_back() {
    let _serial = crate::fixture::exclusive().await;
    let pg = Pg::start().await;
    let replicas = start_many(&pg, &["f1", "f2"]).await;
    let leader = the_leader(&replicas, 3 * T).await;
    let (l, s) = (&replicas[leader], &replicas[1 - leader]);
    let loop_name = "invitations-expire";
    let mark = l.history_len();
    for r in [l, s] {
        r.set_loop_mode(loop_name, LoopMode::Fail)
            .await
            .expect("control");
    }
    // The next tick (within one tick period) fails.
    let (_, tick) = l
        .wait_for_event(mark, T + SLACK, |e| {
            matches!(e, ReplicaEvent::Tick { loop_name: n, outcome: TickKind::Failed, .. } if n == loop_name)
        })
        .await
        .expect("a failed tick");
    let ReplicaEvent::Tick { error, term, .. } = tick.event() else {
        unreachable!()
    };
    assert_eq!(error.as_deref(), Some(injected_failure(loop_name).as_str()));
    assert_eq!(*term, Some(1));
    let (status, report) = l.ready_report().await.expect("/readyz");
    assert_eq!(status, 503, "{report:?}");
    let verdict = report.check(loop_name).expect("the probe");
    assert!(!verdict.ok);
    assert_eq!(
        verdict.error.as_deref(),
        Some(injected_failure(loop_name).as_str())
    );
    assert!(
        report.checks.iter().filter(|c| !c.ok).count() == 1,
        "{report:?}"
    );
    // A standby runs no pass: its probe passes.
    tokio::time::sleep(T).await;
    assert_eq!(s.readyz().await.expect("standby /readyz").0, 200);

    // The failure is reported until a later tick succeeds.
    tokio::time::sleep(2 * T).await;
    assert_eq!(l.readyz().await.expect("/readyz").0, 503);
    l.set_loop_mode(loop_name, LoopMode::Ok)
        .await
        .expect("control");
    assert!(
        eventually(T + SLACK + Duration::from_millis(100), || async {
            l.readyz().await.map(|r| r.0).ok() == Some(200)
        })
        .await,
        "back to 200 after the next tick"
    );
}

/// READY-4: a panicking pass is a failed tick; the loop keeps ticking; the probe reports the
/// spec's text, `plexsphere: background loop "<loop>": tick panicked: <value>`, until a later
/// tick succeeds. The probe name of access-session-sweep is access-session-sweeper (READY-5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panicking_pass_reports_the_spec_text() {
    let _serial = crate::fixture::exclusive().await;
    let pg = Pg::start().await;
    let replicas = start_many(&pg, &["p1"]).await;
    let l = &replicas[the_leader(&replicas, 3 * T).await];
    let loop_name = "access-session-sweep";
    let mark = l.history_len();
    l.set_loop_mode(loop_name, LoopMode::Panic)
        .await
        .expect("control");
    // Two panicked ticks: the loop keeps ticking. (Not a timing bound: the panic hook's stack
    // capture is slow in a debug build, the first time above all.)
    let (i, _) = l
        .wait_for_event(mark, Duration::from_secs(3), |e| {
            matches!(e, ReplicaEvent::Tick { loop_name: n, outcome: TickKind::Panicked, .. } if n == loop_name)
        })
        .await
        .expect("a panicked tick");
    l.wait_for_event(i + 1, Duration::from_secs(3), |e| {
        matches!(e, ReplicaEvent::Tick { loop_name: n, outcome: TickKind::Panicked, .. } if n == loop_name)
    })
    .await
    .expect("a second panicked tick");
    let (status, report) = l.ready_report().await.expect("/readyz");
    assert_eq!(status, 503);
    let want = format!(
        "plexsphere: background loop \"{loop_name}\": tick panicked: {}",
        injected_panic(loop_name)
    );
    assert_eq!(
        report
            .check("access-session-sweeper")
            .and_then(|c| c.error.clone()),
        Some(want)
    );
    // The loop's worker did not restart: a panicking pass is caught by the launcher.
    let workers = l.workers().await.expect("/workers");
    let w = workers.iter().find(|w| w.name == loop_name).unwrap();
    assert_eq!((w.state.as_str(), w.restarts), ("running", 0));

    l.set_loop_mode(loop_name, LoopMode::Ok)
        .await
        .expect("control");
    assert!(
        eventually(T + SLACK + Duration::from_millis(100), || async {
            l.readyz().await.map(|r| r.0).ok() == Some(200)
        })
        .await
    );
}

/// LOOP-5: a worker that crashes on every run is restarted within its budget (2 here), then
/// stays down; the workers probe turns /readyz to 503; a single crash is just a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashing_worker_exhausts_its_restart_budget() {
    let _serial = crate::fixture::shared().await;
    let pg = Pg::start().await;
    let spec = pg
        .spec("w1")
        .restarts(2, Duration::from_secs(60), Duration::from_millis(50));
    let r = start_ready(spec).await;

    // One crash: restarted once, running again.
    let mark = r.history_len();
    r.set_worker_mode("sse-relay", WorkerMode::Crash)
        .await
        .expect("control");
    let (_, e) = r
        .wait_for_event(
            mark,
            Duration::from_secs(2),
            |e| matches!(e, ReplicaEvent::Worker { worker, .. } if worker == "sse-relay"),
        )
        .await
        .expect("restarting");
    assert!(
        matches!(e.event(), ReplicaEvent::Worker { state, exit: Some(exit), .. }
            if state == "restarting" && exit.contains("injected crash of worker \"sse-relay\"")),
        "{e:?}"
    );
    assert!(
        eventually(Duration::from_secs(2), || async {
            r.workers().await.is_ok_and(|ws| {
                ws.iter()
                    .any(|w| w.name == "sse-relay" && w.state == "running" && w.restarts == 1)
            })
        })
        .await
    );
    assert!(
        eventually(Duration::from_secs(2), || async {
            r.readyz().await.is_ok_and(|(status, _)| status == 200)
        })
        .await
    );

    // A crash loop: two restarts, then exhausted.
    let mark = r.history_len();
    r.set_worker_mode("audit-archiver", WorkerMode::CrashLoop)
        .await
        .expect("control");
    let (_, e) = r
        .wait_for_event(mark, Duration::from_secs(3), |e| {
            matches!(e, ReplicaEvent::Worker { worker, state, .. } if worker == "audit-archiver" && state == "exhausted")
        })
        .await
        .expect("exhausted");
    let restarting = r.history()[mark..]
        .iter()
        .filter(|x| x.at < e.at)
        .filter(|x| matches!(x.event(), ReplicaEvent::Worker { worker, state, .. } if worker == "audit-archiver" && state == "restarting"))
        .count();
    assert_eq!(restarting, 2);
    // The supervisor logs `exhausted` just before it records the state: poll briefly.
    assert!(
        eventually(Duration::from_secs(1), || async {
            r.readyz().await.is_ok_and(|(status, _)| status == 503)
        })
        .await
    );
    let (_, report) = r.ready_report().await.expect("/readyz");
    let workers = report.check("workers").expect("workers probe");
    assert!(
        workers
            .error
            .as_deref()
            .is_some_and(|e| e.contains("\"audit-archiver\" exhausted its restart budget")),
        "{workers:?}"
    );
    let ws = r.workers().await.expect("/workers");
    let w = ws.iter().find(|w| w.name == "audit-archiver").unwrap();
    assert_eq!((w.state.as_str(), w.restarts), ("exhausted", 2));
}

/// RUN-7, RUN-8: crashing the election worker of the leader abandons its lock (the session is
/// closed, not unlocked), another replica takes over, and the supervisor runs the election
/// again on the crashed replica, which stays a standby.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashing_the_election_worker_abandons_the_lock() {
    let _serial = crate::fixture::exclusive().await;
    let pg = Pg::start().await;
    let replicas = start_many(&pg, &["e1", "e2"]).await;
    let leader = the_leader(&replicas, 3 * T).await;
    let (l, s) = (&replicas[leader], &replicas[1 - leader]);
    let (lmark, smark) = (l.history_len(), s.history_len());
    l.set_worker_mode(elector::supervisor::ELECTION_WORKER, WorkerMode::Crash)
        .await
        .expect("control");
    l.wait_for_event(lmark, Duration::from_secs(4), |e| {
        matches!(
            e,
            ReplicaEvent::Abandoned {
                term: 1,
                panicked: true
            }
        )
    })
    .await
    .expect("abandoned");
    l.wait_for_event(lmark, Duration::from_secs(4), |e| {
        matches!(e, ReplicaEvent::Worker { worker, state, .. } if worker == "background-leader" && state == "restarting")
    })
    .await
    .expect("restarting");
    s.wait_for_event(smark, 2 * T, |e| matches!(e, ReplicaEvent::Acquired { .. }))
        .await
        .expect("the standby takes over");
    // The restarted election checks again and is refused.
    let after = l.history_len();
    l.wait_for_event(after, Duration::from_secs(3), |e| {
        matches!(e, ReplicaEvent::CheckRefused)
    })
    .await
    .expect("the crashed replica runs the election again");
    assert_eq!(l.metrics_gauge().await, Some(0));
    assert_eq!(s.metrics_gauge().await, Some(1));
}

/// Unknown names answer 404 with a clear message; a bad mode or body answers 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_refuses_unknown_names() {
    let _serial = crate::fixture::shared().await;
    let pg = Pg::start().await;
    let r = start_ready(pg.spec("c1")).await;
    let (status, body) = r
        .control(&json!({"loop": "no-such-loop", "mode": "fail"}))
        .await
        .unwrap();
    assert_eq!(status, 404);
    assert!(
        body.contains("no loop named \\\"no-such-loop\\\""),
        "{body}"
    );
    let (status, body) = r
        .control(&json!({"worker": "nobody", "mode": "crash"}))
        .await
        .unwrap();
    assert_eq!(status, 404);
    assert!(body.contains("no worker named"), "{body}");
    let (status, _) = r
        .control(&json!({"loop": "invitations-expire", "mode": "explode"}))
        .await
        .unwrap();
    assert_eq!(status, 400);
    let (status, _) = r.control(&json!({"mode": "ok"})).await.unwrap();
    assert_eq!(status, 400);
    let err = r.set_loop_mode("nope", LoopMode::Fail).await.unwrap_err();
    assert!(err.to_string().contains("404"), "{err}");
}
