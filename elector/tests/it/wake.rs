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

/// The pid of the one session granted the key (the leader's lock session, `granted`) or queued
/// on it (the standby's waiter), by the spec's leader query.
async fn pid_on_key(observer: &tokio_postgres::Client, granted: bool) -> i32 {
    let rows: Vec<i32> = (leader_rows(observer).await.into_iter())
        .filter(|r| r.1 == granted)
        .map(|r| r.0)
        .collect();
    assert_eq!(rows.len(), 1, "one row with granted = {granted}: {rows:?}");
    rows[0]
}

/// X-WAKE's cost to the database around it: a queued attempt is a running statement, and a
/// running statement holds a snapshot (`pg_stat_activity.backend_xmin`) that VACUUM must keep
/// every row version for. The waiter gives its attempt up and queues again every T
/// (`lock_timeout`), so the horizon it holds back is never older than T: rows deleted while it
/// waits are removable T later, however long the leader leads. Before, the waiter's snapshot
/// stayed as old as the wait (by hand on PostgreSQL 15: "10000 are dead but not yet
/// removable").
#[tokio::test]
async fn a_queued_standby_holds_back_vacuum_for_at_most_t() {
    let pg = Pg::start().await;
    let (observer, electors, running) = a_leads_b_queues(&pg).await;
    let waiter = pid_on_key(&observer, false).await;
    observer
        .batch_execute(
            "CREATE TABLE bloat (x int); \
             INSERT INTO bloat SELECT generate_series(1, 10000); \
             DELETE FROM bloat",
        )
        .await
        .expect("rows that die");
    let died: i64 = observer
        .query_one("SELECT txid_current()", &[])
        .await
        .expect("txid")
        .get(0);
    // One T for the attempt under way to give up, and 0.2·T for it to queue again and for the
    // observer's own queries on a loaded machine.
    tokio::time::sleep(T_WAKE + T_WAKE / 5).await;
    let xmin: Option<i64> = observer
        .query_one(
            "SELECT backend_xmin::text::bigint FROM pg_stat_activity WHERE pid = $1",
            &[&waiter],
        )
        .await
        .expect("the waiter's backend")
        .get(0);
    assert!(
        xmin.is_none_or(|x| x > died),
        "the waiter still holds back the horizon to xid {xmin:?}, before the deletion ({died})"
    );
    observer
        .batch_execute("VACUUM bloat")
        .await
        .expect("VACUUM");
    let dead: i64 = observer
        .query_one(
            "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'bloat'",
            &[],
        )
        .await
        .expect("the table's statistics")
        .get(0);
    assert_eq!(
        dead, 0,
        "VACUUM left dead rows the waiter's snapshot still sees"
    );
    assert!(electors[0].is_leader() && !electors[1].is_leader());
    until_queued(&observer).await;
    assert_eq!(
        pid_on_key(&observer, false).await,
        waiter,
        "the same session queued again"
    );
    let [a, b] = running;
    halt(b.0, b.1).await;
    halt(a.0, a.1).await;
}

/// X-WAKE's snapshot, by its age: sampled every 20 ms for 6·T while a standby waits, the
/// queued attempt's transaction (whose snapshot is the xmin horizon it holds back) is never older
/// than T plus 0.2·T (the re-queue after `lock_timeout` and the sampling on a loaded machine).
/// Before the waiter gave up and queued again every T, its age was the whole wait (6·T here).
#[tokio::test]
async fn a_queued_standbys_snapshot_is_never_older_than_t() {
    let pg = Pg::start().await;
    let (observer, electors, running) = a_leads_b_queues(&pg).await;
    let waiter = pid_on_key(&observer, false).await;
    let (start, mut oldest, mut samples) = (Instant::now(), 0.0_f64, 0);
    while start.elapsed() < 6 * T_WAKE {
        let age: Option<f64> = observer
            .query_one(
                "SELECT extract(epoch FROM clock_timestamp() - xact_start)::float8 \
                 FROM pg_stat_activity WHERE pid = $1 AND backend_xmin IS NOT NULL",
                &[&waiter],
            )
            .await
            .ok()
            .and_then(|row| row.get(0));
        if let Some(age) = age {
            oldest = oldest.max(age);
            samples += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("the queued attempt's snapshot: oldest {oldest:.3} s in {samples} samples (T = 1 s)");
    assert!(
        samples > 100,
        "the waiter held a snapshot in {samples} samples only"
    );
    assert!(
        oldest <= (T_WAKE + T_WAKE / 5).as_secs_f64(),
        "the waiter's snapshot was {oldest:.3} s old, over T + 0.2·T"
    );
    assert!(electors[0].is_leader() && !electors[1].is_leader());
    let [a, b] = running;
    halt(b.0, b.1).await;
    halt(a.0, a.1).await;
}

/// X-WAKE under a database's safety settings: `lock_timeout` and `statement_timeout` of 300 ms
/// (0.3·T) set for the whole database would cancel every queued attempt, and the standby would
/// open and close a backend at every check, what RUN-2 exists to prevent. The waiter sets its
/// own on its session: one session stays queued, across 3·T.
#[tokio::test]
async fn database_timeouts_do_not_cancel_the_queued_attempt() {
    let pg = Pg::start().await;
    let setup = pg.observer().await;
    setup
        .batch_execute(
            "ALTER DATABASE plexsphere SET lock_timeout = '300ms'; \
             ALTER DATABASE plexsphere SET statement_timeout = '300ms'",
        )
        .await
        .expect("database settings");
    let (observer, electors, running) = a_leads_b_queues(&pg).await;
    let waiter = pid_on_key(&observer, false).await;
    tokio::time::sleep(3 * T_WAKE).await;
    until_queued(&observer).await;
    assert_eq!(
        pid_on_key(&observer, false).await,
        waiter,
        "the queued session was replaced: the database's timeouts cancelled it"
    );
    assert!(electors[0].is_leader() && !electors[1].is_leader());
    let [a, b] = running;
    halt(b.0, b.1).await;
    halt(a.0, a.1).await;
}

/// X-WAKE gives a queued session up by the statement it runs (`sql::end_waiter`): the queued
/// attempt begins with a comment naming its waiter (`sql::tagged_wait`), and the statement ends
/// only a backend that runs that very attempt and waits on the key. Before, the waiter's pid was
/// learned in a statement of its own, which behind a pooler (or once the pid was handed out
/// again) may name another client's session. Here two sessions of the application role wait on
/// the key, each in its own tagged attempt: ending one leaves the other waiting, and leaves the
/// leader's lock session and an idle session alone.
#[tokio::test]
async fn giving_a_queued_session_up_ends_that_attempt_and_no_other_waiter() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let a = waking(&pg, "wake-a").await;
    let running = lead(&a).await;
    let attempt = elector::sql::wait_lock(800, true, None);
    let (ours, theirs) = (0x0123_4567_89ab_cdef_u64, 0xfedc_ba98_7654_3210_u64);
    let mut waiting = Vec::new();
    for tag in [ours, theirs] {
        let (client, conn) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
            .await
            .expect("an application session");
        tokio::spawn(conn);
        let statement = elector::sql::tagged_wait(tag, &attempt);
        waiting.push(tokio::spawn(async move {
            let answer = client.simple_query(&statement).await.map(drop);
            (answer, client)
        }));
    }
    let start = Instant::now();
    while queued(&observer).await < 2 {
        assert!(start.elapsed() < T_WAKE, "two attempts queued on the key");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let bystander = pg.observer().await;
    let leader_pid = pid_on_key(&observer, true).await;
    observer
        .batch_execute(&elector::sql::end_waiter(ours))
        .await
        .expect("end_waiter runs");
    let (ended, _) = tokio::time::timeout(T_WAKE, waiting.remove(0))
        .await
        .expect("the tagged attempt was not ended within T")
        .expect("its task");
    assert!(ended.is_err(), "the ended attempt answered {ended:?}");
    tokio::time::sleep(T_WAKE / 10).await;
    assert_eq!(
        queued(&observer).await,
        1,
        "the other attempt was ended too"
    );
    assert_eq!(
        pid_on_key(&observer, true).await,
        leader_pid,
        "the lock session was ended"
    );
    bystander
        .query_one("SELECT 1", &[])
        .await
        .expect("the idle session was ended");
    assert!(a.is_leader());
    observer
        .batch_execute(&elector::sql::end_waiter(theirs))
        .await
        .expect("end_waiter runs");
    halt(running.0, running.1).await;
}
