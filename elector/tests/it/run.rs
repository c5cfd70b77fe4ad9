//! Run (RUN-1, RUN-2, RUN-4, RUN-6, RUN-7, RUN-8) and the spec's log lines (CFG-3).

use std::time::Duration;

use elector::{Config, Elector, Error, TermCause};
use tokio::time::Instant;

use crate::fixture::*;

/// RUN-1: the first check comes at once, then one every T (seen on a refused standby).
#[tokio::test]
async fn checks_at_start_then_every_interval() {
    let pg = Pg::start().await;
    let (leader, _r1) = pg.elector("leader", T).await;
    let (lstop, lrun) = spawn_run(&leader);
    until_leader(&leader, 10 * T).await;

    let (logs, _guard) = Logs::capture();
    let (standby, _r2) = pg.elector("standby", T).await;
    let started = Instant::now();
    let (sstop, srun) = spawn_run(&standby);
    tokio::time::sleep(5 * T + T / 2).await;
    sstop.cancel();
    srun.await.unwrap().unwrap();

    let checks: Vec<Duration> = logs
        .matching("background leader lock held elsewhere")
        .iter()
        .map(|e| e.at - started)
        .collect();
    assert_eq!(checks.len(), 6, "checks at 0, T, .., 5T: {checks:?}");
    for (k, at) in checks.iter().enumerate() {
        let due = T * k as u32;
        assert!(
            *at >= due && *at <= due + SLACK,
            "check {k} at {at:?}, due at {due:?} (+{SLACK:?})"
        );
    }
    lstop.cancel();
    lrun.await.unwrap().unwrap();
}

/// RUN-2: 200 refused checks open and close no backend: the same pooled backend answers all.
#[tokio::test]
async fn refused_checks_reuse_the_pooled_connection() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (leader, _r1) = pg.elector("leader", T).await;
    let (lstop, lrun) = spawn_run(&leader);
    until_leader(&leader, 10 * T).await;

    let backends = || async {
        observer
            .query(
                "SELECT pid, backend_start::text FROM pg_stat_activity \
                 WHERE application_name = 'standby' ORDER BY pid",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get::<_, i32>(0), r.get::<_, String>(1)))
            .collect::<Vec<_>>()
    };
    let (logs, _guard) = Logs::capture();
    // A fast standby (the interval is not what this test measures, but it bounds each query:
    // 20 ms leaves a loopback round trip ample room even on a loaded machine).
    let fast = Duration::from_millis(20);
    let pool = pg.pool("standby", 4);
    drop(pool.get().await.unwrap());
    let standby = Elector::new(Config::new(pool).check_interval(fast)).unwrap();
    let (sstop, srun) = spawn_run(&standby);
    wait_for(Duration::from_secs(5), || {
        !logs
            .matching("background leader lock held elsewhere")
            .is_empty()
    })
    .await
    .expect("a first refused check");
    let before = backends().await;
    let first = logs.matching("background leader lock held elsewhere").len();
    wait_for(Duration::from_secs(20), || {
        logs.matching("background leader lock held elsewhere").len() >= first + 200
    })
    .await
    .expect("200 refused checks");
    let after = backends().await;
    sstop.cancel();
    srun.await.unwrap().unwrap();

    assert_eq!(before.len(), 1, "one pooled backend: {before:?}");
    assert_eq!(
        before, after,
        "no backend opened or closed across 200 refused checks"
    );
    assert!(!standby.is_leader());
    lstop.cancel();
    lrun.await.unwrap().unwrap();
}

/// RUN-4, CFG-3: a failed acquire logs the spec's WARN line, stays standby, retries every T,
/// and never ends `run`.
#[tokio::test]
async fn failed_acquire_warns_and_retries() {
    let (logs, _guard) = Logs::capture();
    // Nothing listens on port 1: every acquire fails.
    let pool = pool_for(
        "postgres://nobody@127.0.0.1:1/none",
        "x",
        1,
        Default::default(),
    );
    let elector = Elector::new(Config::new(pool).check_interval(T)).unwrap();
    let (stop, run) = spawn_run(&elector);
    tokio::time::sleep(3 * T + T / 2).await;
    assert!(
        !run.is_finished(),
        "run does not return on a failed acquire"
    );
    let warns = logs.matching("leader: acquire lock connection: ");
    assert_eq!(warns.len(), 4, "a WARN at 0, T, 2T, 3T: {warns:?}");
    assert!(warns.iter().all(|e| e.level == tracing::Level::WARN));
    assert!(!elector.is_leader());
    stop.cancel();
    run.await.unwrap().unwrap();
}

/// RUN-6: on cancellation, unlock (after the token fired), close, end the term, return Ok; a
/// standby leads within T.
#[tokio::test]
async fn graceful_shutdown_hands_over_within_one_interval() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (logs, _guard) = Logs::capture();
    let (a, _ra) = pg.elector("a", T).await;
    let (b, _rb) = pg.elector("b", T).await;
    let (astop, arun) = spawn_run(&a);
    until_leader(&a, 10 * T).await;
    let (bstop, brun) = spawn_run(&b);
    tokio::time::sleep(T / 2).await;
    let lock_pid = leader_rows(&observer).await[0].0;
    let (term, _) = a.term(&astop.child_token());

    let cancelled = Instant::now();
    astop.cancel();
    arun.await.unwrap().expect("run returns Ok");
    assert_eq!(term.cause(), Some(TermCause::Released));
    assert!(
        !logs.matching("background leader lock released").is_empty(),
        "unlocked"
    );
    let took = until_leader(&b, T + SLACK).await;
    let handover = cancelled.elapsed();
    assert!(
        handover <= T + SLACK,
        "standby led {handover:?} after the cancel ({took:?})"
    );
    assert!(
        backend_gone(&observer, lock_pid, Duration::from_secs(1)).await,
        "the lock connection is closed"
    );
    bstop.cancel();
    brun.await.unwrap().unwrap();
}

/// RUN-7: a panic that unwinds run ends the term with LeadershipLost, closes the connection
/// without unlocking, logs the WARN line, propagates; the server releases the lock.
#[tokio::test]
async fn panic_in_run_abandons_the_lock() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (logs, _guard) = Logs::capture();
    let (a, registry) = pg.elector("a", T).await;
    let (stop, run) = spawn_run(&a);
    until_leader(&a, 10 * T).await;
    let (term, _) = a.term(&stop);
    logs.panic_on("background leader check passed");

    let joined = tokio::time::timeout(2 * T, run).await.expect("run ends");
    let err = joined.expect_err("the panic propagates");
    assert!(err.is_panic());
    assert_eq!(term.cause(), Some(TermCause::LeadershipLost));
    assert!(!a.is_leader());
    assert_eq!(gauge(&registry), Some(0));
    let abandoned = logs.matching("background leader lock abandoned after a panic");
    assert_eq!(abandoned.len(), 1);
    assert_eq!(abandoned[0].level, tracing::Level::WARN);
    assert!(
        logs.matching("background leader lock released").is_empty(),
        "no unlock"
    );
    let released = async {
        loop {
            if leader_rows(&observer).await.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(T, released)
        .await
        .expect("the server releases the lock");

    // RUN-8: run may be called again after a panic.
    let (stop2, run2) = spawn_run(&a);
    until_leader(&a, 10 * T).await;
    stop2.cancel();
    run2.await.unwrap().unwrap();
}

/// RUN-8: a second concurrent run is refused at once; a later one works.
#[tokio::test]
async fn concurrent_run_is_refused_and_rerun_works() {
    let pg = Pg::start().await;
    let (a, _r) = pg.elector("a", T).await;
    let (stop, run) = spawn_run(&a);
    until_leader(&a, 10 * T).await;
    let second = tokio::time::timeout(T, a.run(stop.child_token()))
        .await
        .expect("refused at once");
    assert!(matches!(second, Err(Error::AlreadyRunning)), "{second:?}");
    assert!(
        a.is_leader(),
        "the refused call does not disturb the running one"
    );
    stop.cancel();
    run.await.unwrap().unwrap();

    let (stop, run) = spawn_run(&a);
    until_leader(&a, 10 * T).await;
    assert_eq!(a.current_term(), Some(2));
    stop.cancel();
    run.await.unwrap().unwrap();
}
