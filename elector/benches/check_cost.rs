//! What one check costs where users pay it: on a server whose lock table holds many locks of
//! other sessions (issue: "The hot path: one cheap statement, whatever the server holds"), and
//! against the spec's bare call on each PostgreSQL major of the matrix (issue: "The standby
//! check at the cost of the bare call").
//!
//! On each major (13, 15 and 17; `ELECTOR_BENCH_MAJORS=15` for one), for N = 0 and 200 000
//! advisory locks held by four other idle sessions of the same role (`ELECTOR_BENCH_SIZES`
//! overrides), while a fifth session holds the leader key, one connection times each statement,
//! the statements taking turns run by run, those that read `pg_locks` in a round of their own
//! after the others (median and p95 of `ELECTOR_BENCH_RUNS` runs each, default 200):
//!
//! | statement | what |
//! |---|---|
//! | `bare` | the spec's `SELECT pg_try_advisory_lock(1886156915, 1)` |
//! | `standby, pg_locks guard` | the standby check two changes ago: its guard read `pg_locks` |
//! | `standby, one for all` | the standby check one change ago, sent to every server: `elector::sql::try_lock_pre14(800, true, None)`, whose pre-14 reaping branch the server parses and plans on every check |
//! | `standby` | what the elector sends on this server: `elector::sql::try_lock(800, true, None)` on 14 and later, `try_lock_pre14` on 13 |
//! | `leader, guard off` | `elector::sql::PING` (the spec's `SELECT 1`) |
//! | `leader` | `elector::sql::PING_SESSION` (`SELECT pg_backend_pid()`, the default: the guard on) |
//! | `leader, X-VERIFY` | `elector::sql::PING_VERIFY`, which reads `pg_locks` (opt-in) |
//!
//! Goal: `standby` ≤ 1.5 × `bare` (medians) at 0 and 200 000 locks, on every major; the table
//! says for each row whether it holds.
//!
//! Run: `cargo bench -p elector --bench check_cost` (the local images of every major, see
//! `ci/build-images.sh --pg 13,15,17`). Results are printed as a table and written to
//! `target/bench/elector-check-cost.json`.

use tokio::time::Instant;
use tokio_postgres::{Client, NoTls};

/// The standby check two changes ago, verbatim: its guard read the whole lock table.
const STANDBY_PG_LOCKS_GUARD: &str = "SELECT CASE \
WHEN EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = 1886156915 \
AND objid = 1 AND objsubid = 2 AND pid = pg_backend_pid() AND granted) THEN 'shared' \
WHEN pg_try_advisory_lock(1886156915, 1) THEN 'granted' ELSE 'refused' END, pg_backend_pid()";

/// The spec's bare attempt.
const BARE: &str = "SELECT pg_try_advisory_lock(1886156915, 1)";

/// The goal: the standby check's median at most this many times the bare call's.
const GOAL: f64 = 1.5;

/// Sessions that share the held locks.
const HOLDERS: u64 = 4;

async fn connect(url: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.expect("connects");
    tokio::spawn(conn);
    client
}

/// Median and p95 of `ms`, sorted in place.
fn median_p95(ms: &mut [f64]) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    let runs = ms.len();
    (ms[runs / 2], ms[(runs * 95 / 100).min(runs - 1)])
}

/// A comma-separated list of numbers from `var`, or `default`.
fn list(var: &str, default: &[u64]) -> Vec<u64> {
    std::env::var(var)
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .filter(|v: &Vec<u64>| !v.is_empty())
        .unwrap_or_else(|| default.to_vec())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let runs: usize = std::env::var("ELECTOR_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
        .max(1);
    let majors = list("ELECTOR_BENCH_MAJORS", &[13, 15, 17]);
    let sizes = list("ELECTOR_BENCH_SIZES", &[0, 200_000]);
    let mut results = serde_json::Map::new();
    for major in majors {
        let table = bench_major(major as u32, &sizes, runs).await;
        results.insert(major.to_string(), serde_json::Value::Object(table));
    }
    results.insert("runs".into(), serde_json::json!(runs));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    std::fs::create_dir_all(&dir).expect("target/bench");
    let path = dir.join("elector-check-cost.json");
    let json = serde_json::to_string_pretty(&results).expect("JSON");
    std::fs::write(&path, json).expect("written");
    println!("written to {}", path.display());
}

/// The table of one major: a row per lock count.
async fn bench_major(
    major: u32,
    sizes: &[u64],
    runs: usize,
) -> serde_json::Map<String, serde_json::Value> {
    // The lock table holds max_locks_per_transaction × max_connections entries: room for 400 000.
    let pg = testkit::Pg::start_with(testkit::pg::PgOptions {
        settings: vec![("max_locks_per_transaction".into(), "4096".into())],
        major: Some(major),
        ..Default::default()
    })
    .await;
    let url = pg.url();
    let leader = connect(&url).await;
    leader
        .simple_query("SELECT pg_advisory_lock(1886156915, 1)")
        .await
        .expect("the leader key");
    // The leader's session is never idle for long (a live leader checks every T): on 13 the
    // reaping branch must not end it, or the checker would take the key and time another path.
    let _leading = tokio::spawn(async move {
        let _ = leader.simple_query("SELECT pg_sleep(86400)").await;
        leader
    });
    let mut holders = Vec::new();
    for _ in 0..HOLDERS {
        holders.push(connect(&url).await);
    }
    let checker = connect(&url).await;
    let version: u32 = checker
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .expect("the server's version")
        .get::<_, i32>(0)
        .try_into()
        .expect("a positive version");
    let one_for_all = elector::sql::try_lock_pre14(800, true, None);
    let sent = if version < elector::sql::IDLE_SESSION_TIMEOUT_SINCE {
        one_for_all.clone()
    } else {
        elector::sql::try_lock(800, true, None)
    };
    let statements = [
        ("bare", BARE),
        ("standby, pg_locks guard", STANDBY_PG_LOCKS_GUARD),
        ("standby, one for all", one_for_all.as_str()),
        ("standby", sent.as_str()),
        ("leader, guard off", elector::sql::PING),
        ("leader", elector::sql::PING_SESSION),
        ("leader, X-VERIFY", elector::sql::PING_VERIFY),
    ];
    println!("\nPostgreSQL {major} ({version}), {runs} runs of each statement, in turns");
    println!(
        "| locks held | {} | standby / bare |",
        statements.map(|(n, _)| n).join(" | ")
    );
    println!("|---:|{}---:|", "---:|".repeat(statements.len()));
    let mut held = 0;
    let mut table = serde_json::Map::new();
    for &n in sizes {
        // Grow the other sessions' locks to n, each taking a range of its own keys.
        let per = n.saturating_sub(held) / HOLDERS;
        for (k, holder) in holders.iter().enumerate() {
            let from = 1 + k as u64 * 1_000_000 + held / HOLDERS;
            holder
                .simple_query(&format!(
                    "SELECT count(pg_advisory_lock(i)) FROM generate_series({from}, {}) i",
                    from + per - 1
                ))
                .await
                .expect("locks taken");
        }
        held = held.max(n);
        // The holders sit idle from here on, as a pool's connections do: on 13 they are what the
        // reaping branch looks at.
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        // Those that read `pg_locks` (or may: the pre-14 statements) take their turns apart, after
        // the others: a read of the whole lock table slows the statement that follows it.
        let mut ms = vec![Vec::with_capacity(runs); statements.len()];
        let heavy = |i: usize| i == 1 || i == 2 || i == 6 || (i == 3 && sent == one_for_all);
        for group in [false, true] {
            for _ in 0..runs {
                for (i, (_, sql)) in statements.iter().enumerate() {
                    if heavy(i) != group {
                        continue;
                    }
                    let started = Instant::now();
                    checker.simple_query(sql).await.expect("the statement runs");
                    ms[i].push(started.elapsed().as_secs_f64() * 1000.0);
                }
            }
        }
        // Every standby statement was refused: the checker never held the key.
        for (name, sql) in &statements[..4] {
            let answer = checker.simple_query(sql).await.expect("the statement runs");
            let first = answer.iter().find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
                _ => None,
            });
            let refused = if *name == "bare" { "f" } else { "refused" };
            assert_eq!(first.as_deref(), Some(refused), "{name} at {n} locks");
        }
        let mut row = serde_json::Map::new();
        let mut cells = Vec::new();
        let mut medians = Vec::new();
        for ((name, _), ms) in statements.iter().zip(ms.iter_mut()) {
            let (median, p95) = median_p95(ms);
            medians.push(median);
            cells.push(format!("{median:.3} ms (p95 {p95:.3})"));
            row.insert(
                (*name).into(),
                serde_json::json!({"median_ms": median, "p95_ms": p95}),
            );
        }
        let ratio = medians[3] / medians[0];
        let verdict = if ratio <= GOAL { "met" } else { "NOT met" };
        println!(
            "| {n} | {} | {ratio:.2} (goal ≤ {GOAL}: {verdict}) |",
            cells.join(" | ")
        );
        row.insert("standby_over_bare".into(), serde_json::json!(ratio));
        row.insert("goal_met".into(), serde_json::json!(ratio <= GOAL));
        table.insert(n.to_string(), serde_json::Value::Object(row));
    }
    table.insert("server_version_num".into(), serde_json::json!(version));
    table
}
