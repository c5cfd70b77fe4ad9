//! What a standby's check sends (RUN-1, LOCK-1; X-PGVER): on a server with
//! `idle_session_timeout` (PostgreSQL 14 and later) the spec's call and nothing the server must
//! plan beyond it, no view and no relation; on PostgreSQL 13 the same call with the pre-14
//! reaping branch, which reads `pg_locks` and `pg_stat_activity` (`pre14.rs` tests what it does).
//! The statement is read where the server shows it, `pg_stat_activity.query` of the standby's
//! pooled backend, and compared with the reference page's own text of the call. Its cost against
//! the bare call is in the `check_cost` bench.

use crate::fixture::*;

/// The reference page, whose text of the lock call the statements are compared with.
const SPEC: &str = include_str!("../../../harness/spec/background-leader.md");

/// The spec's lock call as the reference page writes it ("The leader lock is ...").
fn spec_call() -> &'static str {
    let call = "pg_try_advisory_lock(1886156915, 1)";
    assert!(
        SPEC.contains(&format!("The leader lock is {call},")),
        "the reference page names the lock call {call}"
    );
    call
}

/// The statement a standby (`b`, guard on, no identity, no fencing) sent for its refused
/// checks on PostgreSQL `major` while `a` leads, as the server shows it; and the server's
/// `server_version_num`.
async fn standby_statement(major: u32) -> (String, i32) {
    // The statement is read from pg_stat_activity, which keeps its first
    // track_activity_query_size bytes (1024 by default): the pre-14 check is longer.
    let pg = Pg::start_with(testkit::pg::PgOptions {
        major: Some(major),
        settings: vec![("track_activity_query_size".into(), "4096".into())],
        ..testkit::pg::PgOptions::default()
    })
    .await;
    let observer = pg.observer().await;
    let version: i32 = observer
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .expect("the server's version")
        .get(0);
    let (a, _ra) = elector_on(&pg.url(), "a", T).await;
    let (b, _rb) = elector_on(&pg.url(), "b", T).await;
    let (astop, arun) = lead(&a).await;
    let (bstop, brun) = spawn_run(&b);
    // Three refused checks at least (the first at once, then every T).
    tokio::time::sleep(2 * T + SLACK).await;
    assert!(a.is_leader() && !b.is_leader());
    let rows = observer
        .query(
            "SELECT query FROM pg_stat_activity WHERE application_name = 'b' \
             AND query LIKE '%pg_try_advisory_lock%'",
            &[],
        )
        .await
        .expect("pg_stat_activity");
    let statements: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert!(!statements.is_empty(), "the standby's check on {major}");
    assert!(
        statements.iter().all(|s| s == &statements[0]),
        "one statement for every check: {statements:#?}"
    );
    bstop.cancel();
    brun.await.expect("b's run").expect("b ends");
    astop.cancel();
    arun.await.expect("a's run").expect("a ends");
    (statements[0].clone(), version)
}

/// On 14 and later the check sends the spec's call in a statement that names no relation (no
/// `FROM`: no `pg_locks`, no `pg_stat_activity`), whose cost is the bare call's.
async fn on_14_and_later_the_check_names_no_relation(major: u32) {
    let (statement, version) = standby_statement(major).await;
    assert!(version >= 140_000, "PostgreSQL {major} answered {version}");
    let call = spec_call();
    assert_eq!(statement.matches(call).count(), 1, "{statement}");
    for relation in ["pg_stat_activity", "pg_locks", "pg_database", "FROM"] {
        assert!(
            !statement.contains(relation),
            "the check sent on PostgreSQL {major} names {relation}: {statement}"
        );
    }
}

/// RUN-1 on PostgreSQL 15: the standby check at the cost of the spec's call.
#[tokio::test]
async fn on_postgres_15_the_standby_check_reads_no_view() {
    on_14_and_later_the_check_names_no_relation(15).await;
}

/// RUN-1 on PostgreSQL 17: as on 15.
#[tokio::test]
async fn on_postgres_17_the_standby_check_reads_no_view() {
    on_14_and_later_the_check_names_no_relation(17).await;
}

/// X-PGVER on PostgreSQL 13: the check still carries the reaping branch (the spec's call, then
/// `pg_locks` and `pg_stat_activity` on a refusal), which keeps the orphaned-session bound there.
#[tokio::test]
async fn on_postgres_13_the_standby_check_keeps_the_reaping_branch() {
    let (statement, version) = standby_statement(13).await;
    assert!(version < 140_000, "PostgreSQL 13 answered {version}");
    assert_eq!(statement.matches(spec_call()).count(), 1, "{statement}");
    for relation in ["pg_stat_activity", "pg_locks", "pg_terminate_backend"] {
        assert!(statement.contains(relation), "{relation}: {statement}");
    }
}
