//! Term (TERM-1, TERM-2) and Do (DO-1..DO-3).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use elector::{Done, TermCause};
use tokio_util::sync::CancellationToken;

use crate::fixture::*;

/// TERM-2, DO-1: a standby gets an already-cancelled term and false; Do does not call fn.
#[tokio::test]
async fn standby_term_is_cancelled_and_do_skips() {
    let pg = Pg::start().await;
    let (leader, _r1) = elector_on(&pg.url(), "leader", T).await;
    let (lstop, lrun) = lead(&leader).await;
    let (standby, _r2) = elector_on(&pg.url(), "standby", T).await;
    let (sstop, srun) = spawn_run(&standby);
    tokio::time::sleep(T / 2).await;

    let parent = CancellationToken::new();
    let (term, leading) = standby.term(&parent);
    assert!(!leading);
    assert!(term.is_cancelled() && term.token().is_cancelled());
    assert_eq!(term.cause(), Some(TermCause::NotLeader));

    let called = Arc::new(AtomicBool::new(false));
    let flag = called.clone();
    let done = standby
        .do_work(&parent, |_term| async move {
            flag.store(true, Ordering::SeqCst);
            Ok::<(), String>(())
        })
        .await;
    assert_eq!(done, Done::Standby);
    assert!(!called.load(Ordering::SeqCst));
    assert_eq!(done.into_result(), Ok(false));
    for (stop, run) in [(sstop, srun), (lstop, lrun)] {
        halt(stop, run).await;
    }
}

/// TERM-1, DO-2: the leader's term is live and ends with the parent; Do returns fn's result.
#[tokio::test]
async fn leader_term_lives_until_parent_ends_and_do_returns_fn_result() {
    let pg = Pg::start().await;
    let (a, _r) = elector_on(&pg.url(), "a", T).await;
    let (stop, run) = lead(&a).await;

    let parent = CancellationToken::new();
    let (term, leading) = a.term(&parent);
    assert!(leading);
    assert!(!term.is_cancelled());
    assert_eq!(term.cause(), None);
    assert_eq!(term.number(), Some(1));
    parent.cancel();
    tokio::time::timeout(T, term.cancelled())
        .await
        .expect("ends with the parent");
    assert_eq!(term.cause(), Some(TermCause::ParentEnded));
    assert!(a.is_leader(), "the parent ending does not end leadership");

    let live = CancellationToken::new();
    let ok = a.do_work(&live, |_t| async { Ok::<_, String>(7) }).await;
    assert_eq!(ok, Done::Ran(Ok(7)));
    let err = a
        .do_work(&live, |_t| async { Err::<(), _>("pass failed".to_owned()) })
        .await;
    assert_eq!(err, Done::Ran(Err("pass failed".to_owned())));
    assert_eq!(err.into_result(), Err("pass failed".to_owned()));

    halt(stop, run).await;
}

/// DO-3, TERM-1: leadership lost while fn runs cancels fn's term (cause LeadershipLost); Do
/// reports not-run, logged at INFO.
#[tokio::test]
async fn leadership_lost_while_fn_runs() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (logs, _guard) = Logs::capture();
    let (a, _r) = elector_on(&pg.url(), "a", T).await;
    let (stop, run) = lead(&a).await;
    let pid = lock_pid(&observer).await;

    let live = CancellationToken::new();
    let work = a.do_work(&live, |term| async move {
        term.cancelled().await;
        assert_eq!(term.cause(), Some(TermCause::LeadershipLost));
        Err::<(), _>("cancelled".to_owned())
    });
    let kill = async {
        tokio::time::sleep(T / 4).await;
        terminate(&observer, pid).await;
    };
    let (done, ()) = tokio::time::timeout(3 * T, async { tokio::join!(work, kill) })
        .await
        .expect("fn sees its term cancelled");
    assert_eq!(done, Done::Lost, "not counted as fn's error");
    let info = logs.matching("background leader: leadership lost while work ran");
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].level, tracing::Level::INFO);
    assert!(!live.is_cancelled());
    halt(stop, run).await;
}

/// TERM-1 (review: a later loss replaced the first cause): the first cause wins, as with Go's
/// `context.Cause`: a term whose parent ended first keeps `ParentEnded` after leadership is lost.
#[tokio::test]
async fn the_first_cause_of_a_term_wins() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (a, _r) = elector_on(&pg.url(), "a", T).await;
    let (stop, run) = lead(&a).await;
    let parent = CancellationToken::new();
    let (first_parent, leading) = a.term(&parent);
    assert!(leading);
    let (first_loss, _) = a.term(&stop);
    parent.cancel();
    assert_eq!(first_parent.cause(), Some(TermCause::ParentEnded));

    terminate(&observer, lock_pid(&observer).await).await;
    tokio::time::timeout(2 * T, first_loss.cancelled())
        .await
        .expect("demoted");
    assert_eq!(first_loss.cause(), Some(TermCause::LeadershipLost));
    assert_eq!(
        first_parent.cause(),
        Some(TermCause::ParentEnded),
        "the parent ended first"
    );
    halt(stop, run).await;
    assert_eq!(
        first_loss.cause(),
        Some(TermCause::LeadershipLost),
        "the loss came first"
    );
}
