//! Demotion (RUN-5, DEM-1) and take-over after a backend kill.

use std::time::Duration;

use elector::TermCause;
use tokio::time::Instant;

use crate::fixture::*;

/// RUN-5 (error), DEM-1, TERM-1: a killed lock backend demotes the leader at its next check, in
/// the spec's order, and a second elector takes over within T of the kill.
#[tokio::test]
async fn backend_kill_demotes_at_next_check_and_standby_takes_over() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (logs, _guard) = Logs::capture();
    let (a, ra) = pg.elector("a", T).await;
    let (b, rb) = pg.elector("b", T).await;
    let (astop, arun) = spawn_run(&a);
    until_leader(&a, 10 * T).await;
    let (bstop, brun) = spawn_run(&b);
    let pid = lock_pid(&observer).await;
    let (term, _) = a.term(&astop);
    // A task that records what it sees when the term ends: IsLeader and the gauge already off.
    let seen = tokio::spawn({
        let a = a.clone();
        async move {
            term.cancelled().await;
            (Instant::now(), a.is_leader(), gauge(&ra), term.cause())
        }
    });

    let killed = Instant::now();
    terminate(&observer, pid).await;
    let (ended, leading, gauge_at_end, cause) = seen.await.unwrap();
    assert!(
        !leading && gauge_at_end == Some(0),
        "DEM-1 step 1 before the term's waiters wake"
    );
    assert_eq!(cause, Some(TermCause::LeadershipLost));
    let demoted = ended - killed;
    assert!(
        demoted <= T + SLACK,
        "demoted {demoted:?} after the kill (bound T + {SLACK:?})"
    );
    let took = until_leader(&b, T + SLACK).await;
    assert!(
        killed.elapsed() <= T + SLACK,
        "b led {:?} after the kill ({took:?})",
        killed.elapsed()
    );
    assert_eq!(gauge(&rb), Some(1));

    // DEM-1 order in the log: term ended, connection closed, then the WARN with the ping error.
    let ended_at = logs.position("background leader term ended").unwrap();
    let closed_at = logs
        .position("background leader lock connection closed")
        .unwrap();
    let warned_at = logs.position("background leader lock lost").unwrap();
    assert!(
        ended_at < closed_at && closed_at < warned_at,
        "{:#?}",
        logs.events()
    );
    let warn = &logs.events()[warned_at];
    assert_eq!(warn.level, tracing::Level::WARN);
    assert!(warn.fields["error"].contains("postgres"), "{warn:?}");

    // The demoted replica is a standby again and is refused at its next checks.
    tokio::time::sleep(2 * T).await;
    assert!(!a.is_leader());
    assert_eq!(leader_rows(&observer).await[0].2, "b");
    astop.cancel();
    bstop.cancel();
    arun.await.unwrap().unwrap();
    brun.await.unwrap().unwrap();
}

/// RUN-5 (silence): a `SELECT 1` that stays unanswered for T demotes the leader. The lock
/// backend is frozen with SIGSTOP, so the session stays open but answers nothing.
#[tokio::test]
async fn unanswered_check_demotes_within_two_intervals() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (logs, _guard) = Logs::capture();
    let (a, _ra) = pg.elector("a", T).await;
    let (astop, arun) = spawn_run(&a);
    until_leader(&a, 10 * T).await;
    let pid = lock_pid(&observer).await;
    let (term, _) = a.term(&astop);

    signal_backend(&pg, pid, "STOP").await;
    let frozen = Instant::now();
    tokio::time::timeout(2 * T + SLACK, term.cancelled())
        .await
        .expect("demoted within 2T of the freeze: the next check, then T without an answer");
    let demoted = frozen.elapsed();
    assert!(
        demoted >= T - SLACK,
        "not before the check timed out: {demoted:?}"
    );
    assert_eq!(term.cause(), Some(TermCause::LeadershipLost));
    let lost = logs.matching("background leader lock lost");
    assert_eq!(lost.len(), 1);
    assert!(
        lost[0].fields["error"].contains("no answer within"),
        "{:?}",
        lost[0]
    );

    // The frozen backend still holds the lock server-side; once it runs again it sees the
    // closed socket and the lock goes with it.
    signal_backend(&pg, pid, "CONT").await;
    assert!(backend_gone(&observer, pid, Duration::from_secs(2)).await);
    astop.cancel();
    arun.await.unwrap().unwrap();
}
