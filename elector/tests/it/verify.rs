//! X-VERIFY (beyond the spec): the leader's check also proves that its own session still holds
//! the lock. And what a leader without it cannot see.
//!
//! The lock leaves a live session here the way a pooler takes it: PgBouncer in transaction mode
//! with one server session, so a second client's `pg_advisory_unlock` runs on the leader's
//! server session (as a `DISCARD ALL` on the lock session would).

use elector::{Config, Elector};
use testkit::pg::PgOptions;
use testkit::pgbouncer::{unique_name, PgBouncer};
use tokio_postgres::NoTls;

use crate::fixture::*;

/// A server behind PgBouncer in transaction mode with one server session, and a leading
/// elector through it, with or without X-VERIFY.
struct Bounced {
    pg: Pg,
    _bouncer: PgBouncer,
    url: String,
    elector: Elector,
    running: Running,
}

impl Bounced {
    async fn lead(verify_lock: bool) -> Bounced {
        let pg = Pg::start_with(PgOptions {
            network: Some(unique_name("elector-verify")),
            ..PgOptions::default()
        })
        .await;
        let bouncer = PgBouncer::start(&pg, "transaction", 1).await;
        let url = pg.url_via(bouncer.port);
        let pool = pool_for(&url, "a", 2, Default::default());
        drop(pool.get().await.expect("a first pooled connection"));
        let mut config = Config::new(pool).check_interval(T);
        config.verify_lock = verify_lock;
        let elector = Elector::new(config).expect("elector");
        let running = lead(&elector).await;
        Bounced {
            pg,
            _bouncer: bouncer,
            url,
            elector,
            running,
        }
    }

    /// Another client of the one server session unlocks the key: the lock row leaves while the
    /// leader's session lives on.
    async fn unlock_from_another_client(&self) {
        let observer = self.pg.observer().await;
        assert_eq!(leader_rows(&observer).await.len(), 1, "one lock row");
        let (other, conn) = tokio_postgres::connect(&self.url, NoTls)
            .await
            .expect("a second client of the server session");
        tokio::spawn(conn);
        let unlocked: bool = other
            .query_one("SELECT pg_advisory_unlock(1886156915, 1)", &[])
            .await
            .expect("the unlock")
            .get(0);
        assert!(unlocked, "the one server session held the lock");
        assert!(leader_rows(&observer).await.is_empty(), "the row left");
    }
}

/// X-VERIFY: with `verify_lock`, a leader whose session holds the lock passes its checks and
/// keeps leading; once the lock leaves that live session, it demotes at its next check, within
/// T + SLACK, with a lock-lost line that says why.
#[tokio::test]
async fn a_leader_whose_session_lost_the_lock_demotes_at_its_next_check() {
    let (logs, _guard) = Logs::capture();
    let b = Bounced::lead(true).await;
    tokio::time::sleep(3 * T).await;
    assert!(
        b.elector.is_leader() && b.elector.current_term() == Some(1),
        "a leader whose session holds the lock demoted"
    );
    b.unlock_from_another_client().await;
    let took = wait_for(T + SLACK, || !b.elector.is_leader())
        .await
        .unwrap_or_else(|| panic!("still leading {:?} after the lock left", T + SLACK));
    // DEM-1: the WARN line follows the close, which follows the term's end that `is_leader` saw.
    wait_for(T, || {
        !logs.matching("background leader lock lost").is_empty()
    })
    .await
    .expect("a lock-lost line");
    let lost = logs.matching("background leader lock lost");
    assert_eq!(lost.len(), 1, "one lock-lost line");
    assert!(
        lost[0].message.contains("no longer holds the leader lock"),
        "{:?} (after {took:?})",
        lost[0].message
    );
    let (stop, run) = b.running;
    halt(stop, run).await;
}

/// RUN-6 (review: "released" whatever the unlock answered): without X-VERIFY the spec's
/// `SELECT 1` still passes on a session that lost the lock, and the leader leads on; its
/// shutdown's `pg_advisory_unlock` answers false, and that is reported as refused, not released.
#[tokio::test]
async fn an_unlock_answered_false_is_reported_as_refused() {
    let (logs, _guard) = Logs::capture();
    let b = Bounced::lead(false).await;
    b.unlock_from_another_client().await;
    tokio::time::sleep(2 * T).await;
    assert!(b.elector.is_leader(), "SELECT 1 saw the lock leave");
    let (stop, run) = b.running;
    halt(stop, run).await;
    assert!(logs.matching("background leader lock released").is_empty());
    let refused = logs.matching("background leader unlock refused");
    assert_eq!(refused.len(), 1, "{:#?}", logs.events());
    assert!(
        refused[0].message.contains("answered f"),
        "{:?}",
        refused[0].message
    );
}
