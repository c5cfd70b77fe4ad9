//! The orphaned lock session bound (ORPH-1, ORPH-2 in-process, ORPH-3).

use elector::IDLE_SESSION_INTERVALS;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::fixture::*;

/// ORPH-1: `idle_session_timeout` = 4·T is set on the lock session as soon as the lock is
/// granted, read from the server side (the lock backend's last statement, before its first
/// check replaces it).
#[tokio::test]
async fn idle_session_timeout_is_set_at_grant() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (a, _r) = elector_on(&pg.url(), "a", T).await;
    let (stop, run) = lead(&a).await;
    let pid = lock_pid(&observer).await;
    let query: String = observer
        .query_one("SELECT query FROM pg_stat_activity WHERE pid = $1", &[&pid])
        .await
        .unwrap()
        .get(0);
    let expected = (T * IDLE_SESSION_INTERVALS).as_millis();
    assert_eq!(IDLE_SESSION_INTERVALS, 4);
    assert_eq!(query, format!("SET idle_session_timeout = {expected}"));
    halt(stop, run).await;
}

/// ORPH-2 (in one process): a leader that stops talking without closing its socket loses the
/// lock server-side 4·T after its last query; a standby leads within one more T. The leader is
/// "frozen" by no longer polling its `run` future, which keeps the socket open and silent.
#[tokio::test(flavor = "current_thread")]
async fn silent_leader_loses_the_lock_after_four_intervals() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (logs, _guard) = Logs::capture();
    let (a, _ra) = elector_on(&pg.url(), "a", T).await;
    let (b, _rb) = elector_on(&pg.url(), "b", T).await;
    let token = CancellationToken::new();
    let mut frozen_run = Box::pin(a.run(token.clone()));
    tokio::select! {
        r = &mut frozen_run => panic!("run ended early: {r:?}"),
        _ = until_leader(&a, 2 * T) => {}
    }
    let (bstop, brun) = spawn_run(&b);
    tokio::select! {
        r = &mut frozen_run => panic!("run ended early: {r:?}"),
        () = tokio::time::sleep(T + T / 2) => {}
    }
    // From here on `frozen_run` is not polled: no more checks.
    let last_query = logs
        .matching("background leader check passed")
        .last()
        .expect("a check passed")
        .at;
    let pid = lock_pid(&observer).await;
    assert!(
        backend_gone(&observer, pid, 6 * T).await,
        "the server ends the idle session"
    );
    let released = last_query.elapsed();
    let bound = T * IDLE_SESSION_INTERVALS;
    assert!(
        released + SLACK >= bound && released <= bound + SLACK,
        "released {released:?} after the last query (bound {bound:?} ± {SLACK:?})"
    );
    let at = Instant::now();
    until_leader(&b, T + SLACK).await;
    assert!(at.elapsed() <= T + SLACK);
    drop(frozen_run);
    assert!(!a.is_leader(), "dropping the run future ends the term");
    halt(bstop, brun).await;
}

/// ORPH-3: a live leader never comes near the timeout: it keeps one term for 20 T (5 times the
/// idle bound).
#[tokio::test]
async fn live_leader_keeps_the_lock() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (a, _r) = elector_on(&pg.url(), "a", T).await;
    let (stop, run) = lead(&a).await;
    let (term, _) = a.term(&stop);
    let pid = lock_pid(&observer).await;
    tokio::time::sleep(20 * T).await;
    assert!(!term.is_cancelled());
    assert_eq!(lock_pid(&observer).await, pid);
    assert_eq!(a.current_term(), Some(1));
    halt(stop, run).await;
}

/// ORPH-1 (review: the term began before the bound was set): no term is live before the lock
/// session's `idle_session_timeout` is set. Every byte to the server is delayed by T/2, so a
/// term that began at the grant would be seen while the server still runs the attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_term_is_live_before_the_orphan_bound_is_set() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let proxy = Proxy::start(pg.port).await;
    let (a, _r) = elector_on(&pg.url_via(proxy.port), "a", T).await;
    proxy.latency("upstream", (T / 2).as_millis() as u64).await;
    let (stop, run) = lead(&a).await;
    let pid = lock_pid(&observer).await;
    let query: String = observer
        .query_one("SELECT query FROM pg_stat_activity WHERE pid = $1", &[&pid])
        .await
        .unwrap()
        .get(0);
    assert!(
        query.starts_with("SET idle_session_timeout"),
        "the term is live while the server's last statement is {query:?}"
    );
    halt(stop, run).await;
}
