//! X-WAKE (beyond the spec): with waking on, a standby keeps a session queued on the key, so a
//! released key is taken within milliseconds, after a graceful release and after a crash,
//! instead of at the standby's next check (up to T later, T/2 on average).
//!
//! These tests run at T = 1 s, so that the wake-up and the polling it replaces are far apart:
//! a handover is allowed `WOKEN` (50 ms = 0.05·T: two round trips on a local server, a task
//! switch, and the 5 ms polling of `wait_for`), where polling alone lands within 50 ms of a
//! release in 5 % of releases, so each test's several handovers all that fast fail without it.

use std::time::Duration;

use elector::{Config, Elector};
use tokio::time::Instant;

use crate::fixture::*;

/// These tests' check interval: long against a wake-up.
const T_WAKE: Duration = Duration::from_secs(1);
/// The most a woken handover may take (0.05·T_WAKE), stated above.
const WOKEN: Duration = Duration::from_millis(50);

/// An elector for `app` on `pg` at `T_WAKE` with waking on.
async fn waking(pg: &Pg, app: &str) -> Elector {
    let pool = pool_for(&pg.url(), app, 4, Default::default());
    drop(pool.get().await.expect("a first pooled connection"));
    Elector::new(Config::new(pool).check_interval(T_WAKE).wake(true)).expect("elector")
}

/// Sessions waiting in the lock queue for the spec's key (the test's own query).
async fn queued(observer: &tokio_postgres::Client) -> i64 {
    observer
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1886156915 \
             AND objid = 1 AND objsubid = 2 AND NOT granted",
            &[],
        )
        .await
        .expect("pg_locks")
        .get(0)
}

/// Waits until a session is queued on the key (the standby's waiter), at most 2·T_WAKE.
async fn until_queued(observer: &tokio_postgres::Client) {
    let start = Instant::now();
    while queued(observer).await < 1 {
        assert!(start.elapsed() < 2 * T_WAKE, "no standby queued on the key");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Two waking electors on `pg`: a leads, b stands by with its session queued on the key.
async fn a_leads_b_queues(pg: &Pg) -> (tokio_postgres::Client, [Elector; 2], [Running; 2]) {
    let observer = pg.observer().await;
    let a = waking(pg, "wake-a").await;
    let b = waking(pg, "wake-b").await;
    let running_a = lead(&a).await;
    let running_b = spawn_run(&b);
    until_queued(&observer).await;
    (observer, [a, b], [running_a, running_b])
}

/// X-WAKE: three graceful handovers between two waking electors (each leader shut down while
/// the other stands by, at a different phase of the standby's checks, the first after more
/// than 4·T in the queue): the standby leads within 0.05·T of each release.
#[tokio::test]
async fn a_queued_standby_leads_within_milliseconds_of_a_graceful_release() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let electors = [waking(&pg, "wake-a").await, waking(&pg, "wake-b").await];
    let mut leader = lead(&electors[0]).await;
    let mut standby = spawn_run(&electors[1]);
    // The first standby waits in the queue longer than a lease (4·T): its term's lease must
    // run from the check that confirmed the grant, not from the queued statement's sending.
    for (handover, pause_ms) in [(0usize, 4150u64), (1, 480), (2, 830)] {
        let next = &electors[(handover + 1) % 2];
        until_queued(&observer).await;
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        let released = Instant::now();
        halt(leader.0, leader.1).await;
        let led = wait_for(T_WAKE, || next.is_leader()).await;
        assert!(led.is_some(), "handover {handover}: nobody led within T");
        let took = released.elapsed();
        assert!(
            took <= WOKEN,
            "handover {handover}: the standby led {took:?} after the shutdown began; a woken \
             standby leads within {WOKEN:?}"
        );
        leader = standby;
        standby = spawn_run(&electors[handover % 2]);
    }
    halt(standby.0, standby.1).await;
    halt(leader.0, leader.1).await;
}

/// X-WAKE: a crash, where nobody could send a wake-up: the leader's backend killed, then the
/// next leader's process gone (its `run` task aborted, so its socket closes without an
/// unlock). Each time the queued standby leads within 0.05·T.
#[tokio::test]
async fn a_queued_standby_leads_within_milliseconds_of_a_crash() {
    let pg = Pg::start().await;
    let (observer, [a, b], [(stop_a, run_a), (stop_b, run_b)]) = a_leads_b_queues(&pg).await;
    tokio::time::sleep(Duration::from_millis(370)).await;
    let killed = Instant::now();
    let rows = leader_rows(&observer).await;
    let held = rows.iter().find(|r| r.1).expect("a holds the key").0;
    terminate(&observer, held).await;
    let led = wait_for(T_WAKE, || b.is_leader()).await;
    assert!(led.is_some(), "b leads after a's backend was killed");
    let took = killed.elapsed();
    assert!(
        took <= WOKEN,
        "b led {took:?} after the kill; within {WOKEN:?} when woken"
    );
    // a demotes at its next check and queues in its turn.
    until_queued(&observer).await;
    tokio::time::sleep(Duration::from_millis(610)).await;
    let crashed = Instant::now();
    run_b.abort();
    let led = wait_for(T_WAKE, || a.is_leader()).await;
    assert!(led.is_some(), "a leads after b's process went");
    let took = crashed.elapsed();
    assert!(
        took <= WOKEN,
        "a led {took:?} after b's crash; within {WOKEN:?} when woken"
    );
    drop(stop_b);
    halt(stop_a, run_a).await;
}

/// X-WAKE: the queued session is the standby's only extra cost and it never outlives its use:
/// a waking standby holds two backends (its pool's, its queued one), and a standby that shuts
/// down leaves nothing queued on the key within T (a session waiting in the lock queue does not
/// notice its client's close, so the elector ends it: else the next release would go to a
/// session nobody runs).
#[tokio::test]
async fn a_standby_that_stops_leaves_no_session_queued_on_the_key() {
    let pg = Pg::start().await;
    let (observer, [_a, _b], [(stop_a, run_a), (stop_b, run_b)]) = a_leads_b_queues(&pg).await;
    // One more check, on a pooled session (the waiter took the warm one out of the pool).
    tokio::time::sleep(T_WAKE + SLACK).await;
    let backends: i64 = observer
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'wake-b'",
            &[],
        )
        .await
        .expect("pg_stat_activity")
        .get(0);
    assert_eq!(
        backends, 2,
        "a waking standby: its pool's session and its queued one ({backends} backends)"
    );
    halt(stop_b, run_b).await;
    let start = Instant::now();
    while queued(&observer).await > 0 {
        assert!(
            start.elapsed() <= T_WAKE + SLACK,
            "the stopped standby's session is still queued on the key after T"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    halt(stop_a, run_a).await;
}
