//! What one check costs where users pay it: on a server whose lock table holds many locks of
//! other sessions (issue: "The hot path: one cheap statement, whatever the server holds").
//!
//! For N = 0, 20 000, 100 000 and 200 000 advisory locks held by four other sessions, while a
//! fifth session holds the leader key, one connection times each statement (median and p95 of
//! `ELECTOR_BENCH_RUNS` runs, default 100):
//!
//! | statement | what |
//! |---|---|
//! | `bare` | the spec's `SELECT pg_try_advisory_lock(1886156915, 1)` |
//! | `standby, before` | the standby check as it was: the shared-session guard read `pg_locks` |
//! | `standby, now` | `elector::sql::try_lock(800, true, None)`: the guard reads a session marker; a grant would also set the bound |
//! | `leader, guard off` | `elector::sql::PING` (the spec's `SELECT 1`) |
//! | `leader` | `elector::sql::PING_SESSION` (`SELECT pg_backend_pid()`, the default: the guard on) |
//! | `leader, X-VERIFY` | `elector::sql::PING_VERIFY`, which reads `pg_locks` (opt-in) |
//!
//! Run: `cargo bench -p elector --bench check_cost`. Results are printed as a table and written
//! to `target/bench/elector-check-cost.json`.

use tokio::time::Instant;
use tokio_postgres::{Client, NoTls};

/// The standby check before this change, verbatim: its guard read the whole lock table.
const STANDBY_BEFORE: &str = "SELECT CASE \
WHEN EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = 1886156915 \
AND objid = 1 AND objsubid = 2 AND pid = pg_backend_pid() AND granted) THEN 'shared' \
WHEN pg_try_advisory_lock(1886156915, 1) THEN 'granted' ELSE 'refused' END, pg_backend_pid()";

/// The spec's bare attempt.
const BARE: &str = "SELECT pg_try_advisory_lock(1886156915, 1)";

/// Lock counts held by other sessions.
const SIZES: [u64; 4] = [0, 20_000, 100_000, 200_000];

/// Sessions that share the held locks.
const HOLDERS: u64 = 4;

async fn connect(url: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.expect("connects");
    tokio::spawn(conn);
    client
}

/// Median and p95 of `runs` runs of `sql`, in milliseconds.
async fn time(client: &Client, sql: &str, runs: usize) -> (f64, f64) {
    let mut ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        client.simple_query(sql).await.expect("the statement runs");
        ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    (ms[runs / 2], ms[(runs * 95 / 100).min(runs - 1)])
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let runs: usize = std::env::var("ELECTOR_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
        .max(1);
    // The lock table holds max_locks_per_transaction × max_connections entries: room for 400 000.
    let pg = testkit::Pg::start_with(testkit::pg::PgOptions {
        settings: vec![("max_locks_per_transaction".into(), "4096".into())],
        ..Default::default()
    })
    .await;
    let url = pg.url();
    let leader = connect(&url).await;
    leader
        .simple_query("SELECT pg_advisory_lock(1886156915, 1)")
        .await
        .expect("the leader key");
    let mut holders = Vec::new();
    for _ in 0..HOLDERS {
        holders.push(connect(&url).await);
    }
    let checker = connect(&url).await;
    let standby_now = elector::sql::try_lock(800, true, None);
    let statements = [
        ("bare", BARE),
        ("standby, before", STANDBY_BEFORE),
        ("standby, now", standby_now.as_str()),
        ("leader, guard off", elector::sql::PING),
        ("leader", elector::sql::PING_SESSION),
        ("leader, X-VERIFY", elector::sql::PING_VERIFY),
    ];
    let mut held = 0;
    let mut results = serde_json::Map::new();
    println!(
        "| locks held | {} |",
        statements.map(|(n, _)| n).join(" | ")
    );
    println!("|---:|{}", "---:|".repeat(statements.len()));
    for n in SIZES {
        // Grow the other sessions' locks to n, each taking a range of its own keys.
        let per = (n - held) / HOLDERS;
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
        held = n;
        let mut row = serde_json::Map::new();
        let mut cells = Vec::new();
        for (name, sql) in statements {
            let (median, p95) = time(&checker, sql, runs).await;
            cells.push(format!("{median:.3} ms (p95 {p95:.3})"));
            row.insert(
                name.into(),
                serde_json::json!({"median_ms": median, "p95_ms": p95}),
            );
        }
        println!("| {n} | {} |", cells.join(" | "));
        results.insert(n.to_string(), serde_json::Value::Object(row));
    }
    results.insert("runs".into(), serde_json::json!(runs));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    std::fs::create_dir_all(&dir).expect("target/bench");
    let path = dir.join("elector-check-cost.json");
    let json = serde_json::to_string_pretty(&results).expect("JSON");
    std::fs::write(&path, json).expect("written");
    println!("written to {}", path.display());
}
