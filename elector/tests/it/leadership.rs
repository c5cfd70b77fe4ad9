//! The leadership watch (beyond the spec): `Elector::subscribe` shows the whole state as typed
//! values, at every transition.

use std::time::SystemTime;

use elector::leadership::{Abandon, CheckOutcome, Release, TermEnd};
use elector::{Leadership, Role};
use tokio::sync::watch;

use crate::fixture::*;

/// Waits until the watch shows a state for which `cond` holds; returns it.
async fn until_state(
    rx: &mut watch::Receiver<Leadership>,
    cond: impl FnMut(&Leadership) -> bool,
) -> Leadership {
    tokio::time::timeout(10 * T, rx.wait_for(cond))
        .await
        .expect("the state within 10 T")
        .expect("the elector lives")
        .clone()
}

/// Standby checks, then a term (number, start, backend pid as pg_locks shows it), then a loss
/// with its cause, a release with the unlock's outcome, and an abandonment, each as a value.
#[tokio::test]
async fn the_watch_shows_every_transition_as_a_value() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (holder, _rh) = elector_on(&pg.url(), "holder", T).await;
    let (hstop, hrun) = lead(&holder).await;

    let (a, _ra) = elector_on(&pg.url(), "a", T).await;
    let mut rx = a.subscribe();
    assert_eq!(*rx.borrow(), Leadership::default());
    let (stop, run) = spawn_run(&a);
    let refused = until_state(&mut rx, |s| s.last_check.is_some()).await;
    let check = refused.last_check.expect("a check");
    assert_eq!((check.number, &check.outcome), (1, &CheckOutcome::Refused));
    assert_eq!(refused.role, Role::Standby);

    let before = SystemTime::now();
    halt(hstop, hrun).await;
    let leading = until_state(&mut rx, |s| matches!(s.role, Role::Leading(_))).await;
    let Role::Leading(term) = leading.role else {
        unreachable!()
    };
    assert_eq!(term.number, 1);
    assert!(term.since >= before);
    assert_eq!(term.backend_pid, lock_pid(&observer).await);

    terminate(&observer, term.backend_pid).await;
    let lost = until_state(&mut rx, |s| s.last_term.is_some()).await;
    let ended = lost.last_term.expect("the ended term");
    assert_eq!(ended.term, term);
    assert!(
        matches!(&ended.end, TermEnd::Lost { cause } if cause.contains("postgres")),
        "{:?}",
        ended.end
    );
    assert_eq!(lost.role, Role::Standby);

    until_state(&mut rx, |s| matches!(s.role, Role::Leading(_))).await;
    halt(stop, run).await;
    let released = rx.borrow().clone();
    assert_eq!(released.role, Role::Standby);
    let ended = released.last_term.expect("the released term");
    assert_eq!(
        (ended.term.number, &ended.end),
        (2, &TermEnd::Released(Release::Unlocked))
    );

    // A run future dropped while leading abandons its term.
    let token = tokio_util::sync::CancellationToken::new();
    let run = a.run(token);
    tokio::select! {
        _ = run => unreachable!("run returns only when cancelled"),
        _ = until_state(&mut rx, |s| matches!(s.role, Role::Leading(_))) => {}
    }
    let abandoned = rx.borrow().clone();
    let ended = abandoned.last_term.expect("the abandoned term");
    assert_eq!(
        (ended.term.number, &ended.end),
        (3, &TermEnd::Abandoned(Abandon::Dropped))
    );
}

/// POOL-1, the guard's reading side: a standby whose own session carries the lock's session
/// marker shares that server session with the leader (as behind a transaction-mode pooler), so
/// its check fails with the shared-session error and stacks no grant. The marker is set here by
/// hand on the only connection of the standby's pool, which the pool hands out unchanged, with
/// the moment a live leader last checked on it (now: a session no leader checked on for 4T is
/// freed instead, see the pooler tests).
#[tokio::test]
async fn a_session_carrying_the_leaders_marker_is_refused_by_the_guard() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let pool = pool_for(&pg.url(), "shared", 1, Default::default());
    let marked = pool.get().await.expect("a pooled connection");
    marked
        .simple_query(
            "SELECT set_config('plexsphere.background_leader', '1886156915:1', false), \
             set_config('plexsphere.background_leader_checked', \
             (date_part('epoch', clock_timestamp()) * 1000)::bigint::text, false)",
        )
        .await
        .expect("the marker");
    drop(marked);
    let registry = prometheus::Registry::new();
    let config = elector::Config::new(pool)
        .check_interval(T)
        .registry(registry);
    let a = elector::Elector::new(config).expect("elector");
    let mut rx = a.subscribe();
    let (stop, run) = spawn_run(&a);
    let checked = until_state(&mut rx, |s| s.last_check.is_some()).await;
    let outcome = checked.last_check.expect("a check").outcome;
    assert!(
        matches!(&outcome, CheckOutcome::Failed { error } if error.contains("shared with another client")),
        "{outcome:?}"
    );
    assert_eq!(checked.role, Role::Standby);
    assert!(leader_rows(&observer).await.is_empty(), "no grant stacked");
    halt(stop, run).await;
}
