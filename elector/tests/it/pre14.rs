//! X-PGVER: the elector on PostgreSQL 13, a server without `idle_session_timeout` (it came in
//! 14), where nothing on the server ends an orphaned lock session. The standbys end it instead,
//! once it has sat idle for 3·T, and a term's lease there is 3·T: the spec's bound (ORPH-2)
//! holds as on 15.
//!
//! Needs the PostgreSQL 13 image (`bash ci/build-images.sh --pg 13`, which `ci/test.sh` runs).

use elector::{IDLE_SESSION_INTERVALS, PRE14_IDLE_INTERVALS};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::fixture::*;

/// ORPH-2 on PostgreSQL 13, the pre-14 path: a leader leads with the documented WARN line and
/// keeps its term while it lives (6·T, twice the idle limit, with a standby checking); once it
/// goes silent (its `run` no longer polled, its socket open), its lease ends 3·T after its last
/// answered check, a standby ends its session after 3·T and within 4·T of its last query (the
/// spec's bound), and leads within one more T.
#[tokio::test(flavor = "current_thread")]
async fn on_postgres_13_a_standby_ends_a_silent_leaders_session_within_the_bound() {
    let pg = Pg::start_with(testkit::pg::PgOptions {
        major: Some(13),
        ..testkit::pg::PgOptions::default()
    })
    .await;
    let observer = pg.observer().await;
    assert!(
        observer
            .simple_query("SHOW idle_session_timeout")
            .await
            .is_err(),
        "the server under test has no idle_session_timeout"
    );
    let (logs, _guard) = Logs::capture();
    let (a, _ra) = elector_on(&pg.url(), "a", T).await;
    let (b, _rb) = elector_on(&pg.url(), "b", T).await;
    let token = CancellationToken::new();
    // a checks at `started` + k·T; b starts half a T between two of them, so that it ends the
    // session T/2 after the first of its checks that finds it idle long enough: a limit off by
    // T/2 or more lands outside the bounds below.
    let started = Instant::now();
    let mut frozen_run = Box::pin(a.run(token.clone()));
    tokio::select! {
        r = &mut frozen_run => panic!("run ended early: {r:?}"),
        _ = until_leader(&a, 2 * T) => {}
    }
    assert_eq!(
        logs.matching("idle_session_timeout is not supported by this server")
            .len(),
        1,
        "the pre-14 WARN line, once per term"
    );
    tokio::select! {
        r = &mut frozen_run => panic!("run ended early: {r:?}"),
        () = tokio::time::sleep_until(started + 2 * T + T / 2) => {}
    }
    let (bstop, brun) = spawn_run(&b);
    tokio::select! {
        r = &mut frozen_run => panic!("run ended early: {r:?}"),
        () = tokio::time::sleep(6 * T) => {}
    }
    assert_eq!(a.current_term(), Some(1), "a live leader keeps its term");
    assert!(
        !b.is_leader(),
        "the standby does not end a live leader's session"
    );
    // From here on `frozen_run` is not polled: no more checks.
    let last_query = logs
        .matching("background leader check passed")
        .last()
        .expect("a check passed")
        .at;
    let rows = leader_rows(&observer).await;
    let pid = rows.iter().find(|r| r.1).expect("a holds the key").0;
    assert!(
        backend_gone(&observer, pid, 6 * T).await,
        "a standby ends the idle session"
    );
    let ended = last_query.elapsed();
    let (earliest, latest) = (T * PRE14_IDLE_INTERVALS, T * IDLE_SESSION_INTERVALS);
    assert!(
        ended + SLACK >= earliest && ended <= latest + SLACK,
        "ended {ended:?} after the last query (between {earliest:?} and {latest:?}, ± {SLACK:?})"
    );
    assert!(
        !a.is_leader(),
        "the silent leader's lease (3·T) ran out before its session could be ended"
    );
    let at = Instant::now();
    until_leader(&b, T + SLACK).await;
    assert!(at.elapsed() <= T + SLACK);
    assert_eq!(
        logs.matching("background leader: ended the lock session, idle for over 3·T")
            .len(),
        1,
        "the standby says once that it ended the session"
    );
    drop(frozen_run);
    halt(bstop, brun).await;
}
