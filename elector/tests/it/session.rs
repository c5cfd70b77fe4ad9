//! The session connection (SESS-1, SESS-2).

use std::time::Duration;

use deadpool_postgres::RecyclingMethod;
use elector::{Config, Elector};

use crate::fixture::*;

/// SESS-1, SESS-2: a pool that retires every connection older than T/2 and health-checks each
/// one it hands out never touches the lock session: one backend holds the lock for 15 T.
#[tokio::test]
async fn pool_lifetime_and_health_checks_never_close_the_lock_session() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let pool = pool_for(&pg.url(), "a", 4, RecyclingMethod::Verified);
    let max_age = T / 2;
    // deadpool's documented way to enforce a max lifetime: retain() on a timer.
    let retire = tokio::spawn({
        let pool = pool.clone();
        async move {
            loop {
                pool.retain(|_, metrics| metrics.age() < max_age);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let a = Elector::new(Config::new(pool.clone()).check_interval(T)).unwrap();
    let (stop, run) = lead(&a).await;
    let (term, _) = a.term(&stop);
    let pid = lock_pid(&observer).await;

    for _ in 0..15 {
        tokio::time::sleep(T).await;
        // The pool is busy recycling other connections meanwhile.
        drop(pool.get().await.unwrap());
        assert_eq!(
            lock_pid(&observer).await,
            pid,
            "SESS-2: one lock connection all term"
        );
        assert!(!term.is_cancelled(), "SESS-1: the term never ended");
    }
    let status = pool.status();
    assert!(
        status.size <= 1,
        "the lock connection is not counted by the pool: {status:?}"
    );
    retire.abort();
    halt(stop, run).await;
}
