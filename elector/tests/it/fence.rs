//! X-FENCE (beyond the spec): with fencing on, each term carries a token from a database
//! sequence, drawn by the granting statement, larger than every earlier term's of any elector,
//! so that a write of an older term that reaches its store late is rejected.
//!
//! The sequence and the guarded write are the test's own SQL, not the crate's constants, so a
//! misspelt sequence name in the crate fails here.

use elector::{Config, Elector, Role};
use tokio_util::sync::CancellationToken;

use crate::fixture::*;

/// The guarded write of the documented pattern: lands only while `$1` is the newest token.
const FENCED_INSERT: &str = "INSERT INTO fenced_work (fence, writer) SELECT $1, $2 \
     WHERE $1 = (SELECT last_value FROM plexsphere_background_leader_fence)";
/// The same write with no guard.
const UNFENCED_INSERT: &str = "INSERT INTO fenced_work (fence, writer) VALUES ($1, $2)";

/// An elector for `app` on the database at `url` with fencing as given.
async fn elector(url: &str, app: &str, fencing: bool) -> Elector {
    let pool = pool_for(url, app, 4, Default::default());
    drop(pool.get().await.expect("a first pooled connection"));
    Elector::new(Config::new(pool).check_interval(T).fencing(fencing)).expect("elector")
}

/// The live term's token, by the term handed out and by the leadership watch (they agree).
fn fence_of(elector: &Elector) -> i64 {
    let (term, live) = elector.term(&CancellationToken::new());
    assert!(live, "leading");
    let fence = term
        .fence()
        .expect("a fencing leader's term carries a token");
    match &elector.subscribe().borrow().role {
        Role::Leading(info) => assert_eq!(info.fence, Some(fence), "the watch's term"),
        Role::Standby => panic!("not leading"),
    }
    fence
}

/// The sequence's newest value (the test's own query).
async fn last_value(observer: &tokio_postgres::Client) -> i64 {
    observer
        .query_one(
            "SELECT last_value FROM plexsphere_background_leader_fence",
            &[],
        )
        .await
        .expect("the fence's sequence exists")
        .get(0)
}

/// How many rows `sql` wrote for (`fence`, `writer`).
async fn write(observer: &tokio_postgres::Client, sql: &str, fence: i64, writer: &str) -> u64 {
    observer
        .execute(sql, &[&fence, &writer])
        .await
        .expect("the write runs")
}

/// X-FENCE: the first term's token is drawn on its grant and a standby's refused attempts draw
/// none (the electors connect as the database's owner, who may create the sequence: the one test
/// of the elector creating it); when the lock's backend is killed and the other elector takes over, its term's token
/// is larger; the old term's late write is rejected by the guard while the same write unguarded
/// lands, and the new term's guarded write lands.
#[tokio::test]
async fn each_term_carries_a_larger_token_and_an_older_terms_late_write_is_rejected() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let a = elector(&pg.owner_url(), "fence-a", true).await;
    let b = elector(&pg.owner_url(), "fence-b", true).await;
    let (stop_a, run_a) = lead(&a).await;
    let old = fence_of(&a);
    let (stop_b, run_b) = spawn_run(&b);
    // Three of b's refused attempts.
    tokio::time::sleep(3 * T + SLACK).await;
    assert!(!b.is_leader(), "b is a standby while a leads");
    assert_eq!(last_value(&observer).await, old, "refusals draw no token");
    observer
        .batch_execute("CREATE TABLE fenced_work (fence bigint NOT NULL, writer text NOT NULL)")
        .await
        .expect("the work table");
    assert_eq!(write(&observer, FENCED_INSERT, old, "a").await, 1);

    terminate(&observer, lock_pid(&observer).await).await;
    until_leader(&b, 3 * T + SLACK).await;
    let new = fence_of(&b);
    assert!(new > old, "b's token {new} after a's {old}");
    assert!(!a.is_leader(), "a lost its session");

    assert_eq!(
        write(&observer, FENCED_INSERT, old, "a, late").await,
        0,
        "the older term's guarded write is rejected"
    );
    assert_eq!(
        write(&observer, UNFENCED_INSERT, old, "a, late, unguarded").await,
        1,
        "the same write unguarded lands"
    );
    assert_eq!(write(&observer, FENCED_INSERT, new, "b").await, 1);
    halt(stop_b, run_b).await;
    halt(stop_a, run_a).await;
}

/// X-FENCE is opt-in: with fencing off (the default) a term carries no token and the elector
/// creates no sequence.
#[tokio::test]
async fn fencing_off_draws_no_token_and_creates_no_sequence() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (a, _) = elector_on(&pg.url(), "plain", T).await;
    let (stop, run) = lead(&a).await;
    let (term, live) = a.term(&CancellationToken::new());
    assert!(live);
    assert_eq!(term.fence(), None);
    let exists: bool = observer
        .query_one(
            "SELECT to_regclass('plexsphere_background_leader_fence') IS NOT NULL",
            &[],
        )
        .await
        .expect("to_regclass")
        .get(0);
    assert!(!exists, "no sequence without fencing");
    halt(stop, run).await;
}

/// X-FENCE under an ordinary application role, as the README says to deploy it on PostgreSQL
/// 15 and later (where `public` grants no CREATE): the operator creates the sequence ahead and
/// grants the role `USAGE, SELECT` on it, nothing more. The elector must lead. Before, it sent
/// `CREATE SEQUENCE IF NOT EXISTS` before every attempt, which checks CREATE on the schema before
/// it checks existence: "permission denied for schema public", and no replica ever led.
#[tokio::test]
async fn a_fencing_elector_leads_under_a_role_that_cannot_create_the_sequence() {
    let pg = Pg::start().await;
    let owner = pg.observer().await;
    owner
        .batch_execute(
            "CREATE ROLE app LOGIN PASSWORD 'app'; \
             REVOKE CREATE ON SCHEMA public FROM PUBLIC; \
             CREATE SEQUENCE public.plexsphere_background_leader_fence; \
             GRANT USAGE, SELECT ON SEQUENCE public.plexsphere_background_leader_fence TO app",
        )
        .await
        .expect("the operator's set-up");
    let url = pg.owner_url().replace("postgres:postgres@", "app:app@");
    let pool = pool_for(&url, "fence-app", 4, Default::default());
    drop(pool.get().await.expect("the application role connects"));
    let e = Elector::new(Config::new(pool).check_interval(T).fencing(true)).expect("elector");
    let run = spawn_run(&e);
    until_leader(&e, 2 * T + SLACK).await;
    assert_eq!(fence_of(&e), 1, "the first term's token");
    halt(run.0, run.1).await;
}

/// X-FENCE not set up (issue 48, item 4): fencing on, the sequence missing, and a role that may
/// not create it. The standby can never lead; it must say so once at ERROR, naming what the
/// operator must create, and keep its pooled connection (RUN-2: refused or failed checks leave
/// the pool alone). Before, each check's failed `CREATE SEQUENCE` dropped its loan, which
/// closes the connection: a new backend every T (21 in 4 s at T = 200 ms).
#[tokio::test]
async fn a_fence_not_set_up_is_said_once_and_keeps_the_connection() {
    let pg = Pg::start().await;
    let owner = pg.observer().await;
    owner
        .batch_execute(
            "CREATE ROLE app LOGIN PASSWORD 'app'; REVOKE CREATE ON SCHEMA public FROM PUBLIC",
        )
        .await
        .expect("the role, with no right to create in public");
    let (logs, _guard) = Logs::capture();
    let url = pg.owner_url().replace("postgres:postgres@", "app:app@");
    let pool = pool_for(&url, "fence-missing", 4, Default::default());
    drop(pool.get().await.expect("the application role connects"));
    let e = Elector::new(Config::new(pool).check_interval(T).fencing(true).wake(true))
        .expect("elector");
    let run = spawn_run(&e);
    // The standby's backends, four times a check for ten checks: its one pooled connection,
    // open between the checks too.
    let mut seen = Vec::new();
    for _ in 0..40 {
        tokio::time::sleep(T / 4).await;
        let rows = owner
            .query(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'fence-missing'",
                &[],
            )
            .await
            .expect("pg_stat_activity");
        seen.push(rows.iter().map(|r| r.get::<_, i32>(0)).collect::<Vec<_>>());
    }
    assert!(!e.is_leader(), "led with no fence");
    halt(run.0, run.1).await;
    let first = seen[0].clone();
    assert!(
        first.len() == 1 && seen.iter().all(|pids| *pids == first),
        "the standby's backends, sampled every T/4: {seen:?}"
    );
    let said: Vec<_> = (logs.matching("background leader: fencing"))
        .into_iter()
        .filter(|e| e.level == tracing::Level::ERROR)
        .collect();
    assert_eq!(said.len(), 1, "one ERROR line: {said:#?}");
    for needed in ["CREATE SEQUENCE", "GRANT USAGE, SELECT"] {
        assert!(
            said[0].message.contains(needed),
            "{needed}: {:?}",
            said[0].message
        );
    }
}

/// X-FENCE, what the guard guarantees (issue 35, item 4): the guard is a read, evaluated when
/// its statement runs, not a conflict. A transaction whose guarded write ran under term N and
/// whose COMMIT arrives after term N+1 drew its token (the writer froze, or a pooler or the
/// network held the COMMIT) commits, and its row lands: the documented guarantee covers a
/// guarded statement that runs after the newer grant (rejected, as the autocommit write above),
/// not one already run inside an open transaction. The test also holds the documented remedy
/// for multi-statement work: a row of the application's own that each term claims with an
/// `UPDATE` before its first write, and that guarded writers lock `FOR SHARE` until they commit.
/// The new term's claim waits for the old term's open transaction (the wait falls on the new
/// term's work, never on the election: it leads meanwhile), and once it is claimed, the old
/// term's guard finds it and writes nothing.
#[tokio::test]
async fn a_guarded_transaction_open_across_a_handover_commits_and_a_claimed_row_fences_it() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    observer
        .batch_execute(
            "CREATE TABLE fenced_work (fence bigint NOT NULL, writer text NOT NULL); \
             CREATE TABLE fence_claim (id int PRIMARY KEY, token bigint NOT NULL); \
             INSERT INTO fence_claim VALUES (1, 0); \
             CREATE SEQUENCE public.plexsphere_background_leader_fence; \
             GRANT USAGE, SELECT ON SEQUENCE public.plexsphere_background_leader_fence \
             TO elector_app; \
             GRANT SELECT, INSERT, UPDATE ON fenced_work, fence_claim TO elector_app",
        )
        .await
        .expect("the work tables, and the sequence ahead as the README says");
    let a = elector(&pg.url(), "fence-a", true).await;
    let b = elector(&pg.url(), "fence-b", true).await;
    let (stop_a, run_a) = lead(&a).await;
    let old = fence_of(&a);
    // Term `old` claims the row before its first write.
    assert_eq!(write(&observer, CLAIM, old, "a claims").await, 1);
    let (stop_b, run_b) = spawn_run(&b);

    // a's two writers open their transactions and pass their guards under term `old`.
    let guarded = pg.observer().await;
    guarded.batch_execute("BEGIN").await.expect("BEGIN");
    assert_eq!(write(&guarded, FENCED_INSERT, old, "a, guard").await, 1);
    let claimed = pg.observer().await;
    claimed.batch_execute("BEGIN").await.expect("BEGIN");
    assert_eq!(write(&claimed, CLAIMED_INSERT, old, "a, claim").await, 1);

    // The handover: a's lock backend is killed, b is granted and draws a newer token.
    terminate(&observer, lock_pid(&observer).await).await;
    until_leader(&b, 3 * T + SLACK).await;
    let new = fence_of(&b);
    assert!(new > old, "b's token {new} after a's {old}");
    assert_eq!(last_value(&observer).await, new, "term {new} began");

    // The read guard: the open transaction's COMMIT succeeds and its row of term `old` lands.
    guarded.batch_execute("COMMIT").await.expect("COMMIT");
    assert_eq!(
        rows_of(&observer, "a, guard").await,
        1,
        "the guard is read when its statement runs: the old term's row landed after term {new} began"
    );
    // A guarded write sent now is rejected, as documented.
    assert_eq!(write(&observer, FENCED_INSERT, old, "a, late").await, 0);

    // The claimed row: b's claim waits for a's open transaction, while b leads.
    let b_claim = tokio::spawn({
        let url = pg.url();
        async move {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .expect("b's work connects");
            tokio::spawn(conn);
            client
                .execute(CLAIM, &[&new, &"b claims"])
                .await
                .expect("b's claim")
        }
    });
    tokio::time::sleep(2 * T).await;
    assert!(
        !b_claim.is_finished(),
        "b's claim waits for a's open transaction"
    );
    assert!(b.is_leader(), "the election does not wait: b leads");
    claimed.batch_execute("COMMIT").await.expect("COMMIT");
    assert_eq!(
        b_claim.await.expect("b's claim task"),
        1,
        "b claims the row"
    );
    // a's row committed before b's claim, hence before any write of b's; a's next one is refused.
    assert_eq!(write(&observer, CLAIMED_INSERT, old, "a, after").await, 0);
    assert_eq!(write(&observer, CLAIMED_INSERT, new, "b").await, 1);
    assert_eq!(rows_of(&observer, "a, claim").await, 1);
    assert_eq!(rows_of(&observer, "a, after").await, 0);
    halt(stop_b, run_b).await;
    halt(stop_a, run_a).await;
}

/// The claim a term makes before its first write (`$2` unused but typed like the writes'): the
/// row takes the term's token unless a newer term claimed it; it waits for the transactions
/// that locked the row `FOR SHARE`.
const CLAIM: &str =
    "UPDATE fence_claim SET token = $1 WHERE id = 1 AND token < $1 AND $2::text IS NOT NULL";

/// A write guarded by the claimed row: locks it `FOR SHARE` (until its transaction ends) and
/// writes only while the row carries the writer's token.
const CLAIMED_INSERT: &str = "INSERT INTO fenced_work (fence, writer) \
     SELECT $1, $2 FROM (SELECT token FROM fence_claim WHERE id = 1 FOR SHARE) AS c \
     WHERE c.token = $1";

/// How many rows `writer` landed.
async fn rows_of(observer: &tokio_postgres::Client, writer: &str) -> i64 {
    observer
        .query_one(
            "SELECT count(*) FROM fenced_work WHERE writer = $1",
            &[&writer],
        )
        .await
        .expect("count")
        .get(0)
}
