//! The lock key (LOCK-1..LOCK-3) and IsLeader (ISL-1).

use std::time::Duration;

use crate::fixture::*;

/// LOCK-1, LOCK-3, ISL-1, MET-1 (one replica), RUN-3.
#[tokio::test]
async fn leader_holds_the_two_int4_key_and_the_spec_query_finds_it() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    assert!(
        leader_rows(&observer).await.is_empty(),
        "LOCK-3: no row before anyone leads"
    );

    let (elector, registry) = elector_on(&pg.url(), "replica-a", T).await;
    assert_eq!(gauge(&registry), Some(0));
    let (stop, run) = lead(&elector).await;

    // LOCK-1: the row's columns.
    let row = observer
        .query_one(
            "SELECT locktype, classid::bigint, objid::bigint, objsubid::int, granted, pid \
             FROM pg_locks WHERE locktype = 'advisory' AND classid = 1886156915",
            &[],
        )
        .await
        .expect("one advisory row");
    assert_eq!(row.get::<_, String>(0), "advisory");
    assert_eq!(row.get::<_, i64>(1), 1_886_156_915);
    assert_eq!(row.get::<_, i64>(2), 1);
    assert_eq!(row.get::<_, i32>(3), 2);
    assert!(row.get::<_, bool>(4));

    // LOCK-3: the spec's query, verbatim, gives one granted row that maps to the replica.
    let rows = leader_rows(&observer).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].1);
    assert_eq!(rows[0].0, row.get::<_, i32>(5));
    assert_eq!(rows[0].2, "replica-a");

    // ISL-1: is_leader agrees from another thread, and with the gauge.
    let e = elector.clone();
    assert!(std::thread::spawn(move || e.is_leader()).join().unwrap());
    assert_eq!(gauge(&registry), Some(1));

    halt(stop, run).await;
    assert!(!elector.is_leader());
    assert_eq!(gauge(&registry), Some(0));
    assert!(
        leader_rows(&observer).await.is_empty(),
        "LOCK-3: no row once none leads"
    );
}

/// LOCK-2: the bigint transaction lock whose halves equal the pair neither blocks nor disturbs.
#[tokio::test]
async fn bigint_transaction_lock_does_not_collide() {
    let pg = Pg::start().await;
    let (elector, _registry) = elector_on(&pg.url(), "replica-a", T).await;
    let (stop, run) = lead(&elector).await;
    let (term, leading) = elector.term(&stop);
    assert!(leading);

    let mut other = pg.observer().await;
    let tx = other.transaction().await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(1),
        tx.execute(
            "SELECT pg_advisory_xact_lock((1886156915::bigint << 32) | 1)",
            &[],
        ),
    )
    .await
    .expect("the bigint lock is not blocked by the leader lock")
    .unwrap();
    let subids: Vec<i16> = tx
        .query(
            "SELECT objsubid FROM pg_locks WHERE locktype = 'advisory' AND classid = 1886156915 \
             AND objid = 1 ORDER BY objsubid",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        subids,
        vec![1, 2],
        "bigint key shows objsubid 1, the pair objsubid 2"
    );

    // Three more checks pass with the bigint lock held: leadership undisturbed.
    tokio::time::sleep(3 * T).await;
    assert!(elector.is_leader());
    assert!(!term.is_cancelled());
    tx.commit().await.unwrap();

    halt(stop, run).await;
}
