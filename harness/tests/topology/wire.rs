//! The wire journal of a replica's proxy: what a real client said to a real PostgreSQL through
//! it and what it was told, stamped on the clock of `Instant`.

use std::time::Duration;

use harness::topology::Topology;
use wiretap::{monotonic_us, Closer, Outcome, Record, WireEvent};

use crate::common::{backend_pid, client, with_direct_proxy};

/// Every record of proxy `name` so far.
async fn records(topology: &Topology, name: &str, seen: &mut Vec<Record>) {
    let after = seen.last().map_or(0, |r| r.seq);
    let page = (topology.toxiproxy().journal(name, after).await)
        .expect("journal")
        .expect("the workspace's server has a journal");
    assert_eq!(page.dropped, 0);
    seen.extend(page.records);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_journals_what_its_client_said_and_was_told() {
    let (topology, proxy) = with_direct_proxy("r1").await;
    let before = monotonic_us();
    let c = client(&proxy.dsn(), "r1").await;
    let pid = backend_pid(&c).await;
    let lock_sent = monotonic_us();
    let granted: bool = c
        .query_one(
            "SELECT pg_try_advisory_lock($1, $2)",
            &[&1886156915i32, &1i32],
        )
        .await
        .expect("lock")
        .get(0);
    assert!(granted);
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relname = $1",
            &[&"none"],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(n, 0);
    let failed = c.simple_query("SELECT 1/0").await;
    assert!(failed.is_err());
    drop(c);
    let mut seen = Vec::new();
    // Until the close is in (the connection task ends after the drop).
    for _ in 0..100 {
        records(&topology, "r1", &mut seen).await;
        if seen
            .iter()
            .any(|r| matches!(r.event, WireEvent::Closed { .. }))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = monotonic_us();
    let events: Vec<&WireEvent> = seen.iter().map(|r| &r.event).collect();
    eprintln!("{}", serde_json_lines(&seen));
    assert_eq!(events[0], &WireEvent::Opened);
    assert!(seen
        .iter()
        .all(|r| r.conn == 1 && (before..=after).contains(&r.at_us)));
    assert!(events.iter().any(|e| matches!(e,
        WireEvent::Startup { application_name: Some(a), user: Some(u), .. } if a == "r1" && u == harness::topology::APP_USER)));
    assert!(
        events.contains(&&WireEvent::Backend { pid }),
        "the server's pid: {pid}"
    );
    // The lock call, its key as sent, and its answer, sent when the client sent it.
    let (id, at) = seen
        .iter()
        .find_map(|r| match &r.event {
            WireEvent::Statement { id, sql, params } if sql.contains("pg_try_advisory_lock") => {
                assert_eq!(params, &vec![Some("1886156915".into()), Some("1".into())]);
                Some((*id, r.at_us))
            }
            _ => None,
        })
        .expect("the lock call");
    assert!(at >= lock_sent, "stamped when sent");
    assert!(events.iter().any(
        |e| matches!(e, WireEvent::Answer { id: i, outcome: Outcome::Done { row: Some(row), .. } }
        if *i == id && row == &vec![Some("t".to_owned())])
    ));
    assert!(events.iter().any(
        |e| matches!(e, WireEvent::Answer { outcome: Outcome::Error { code, .. }, .. }
        if code == "22012")
    ));
    assert!(
        events.iter().any(|e| matches!(
            e,
            WireEvent::Closed {
                by: Closer::Client,
                terminate: true
            }
        )),
        "{events:?}"
    );
    let page = topology
        .toxiproxy()
        .journal("r1", 0)
        .await
        .expect("journal")
        .expect("page");
    assert!(page.cost.messages > 10, "{:?}", page.cost);
    assert!(page.now_us >= after);
}

fn serde_json_lines(records: &[Record]) -> String {
    (records.iter())
        .map(|r| serde_json::to_string(r).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The count of advisory locks `pid` holds, as the server says.
async fn locks_of(observer: &tokio_postgres::Client, pid: i32) -> i64 {
    observer
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1 AND granted",
            &[&pid],
        )
        .await
        .expect("pg_locks")
        .get(0)
}

/// A statement injected by the proxy runs on the idle session of each of its connections,
/// between the client's statements: the client's lock is gone (as after a stray
/// `pg_advisory_unlock_all()` or `DISCARD ALL`), the client is told nothing and its next
/// statements get their own answers, and the journal records the injection; a session that
/// stays busy past the window is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_statement_runs_on_the_idle_session_unseen_by_its_client() {
    let (topology, proxy) = with_direct_proxy("r1").await;
    let observer = topology.observer().await.expect("observer");
    let c = client(&proxy.dsn(), "r1").await;
    let pid = backend_pid(&c).await;
    c.simple_query("SELECT pg_try_advisory_lock(1886156915, 1)")
        .await
        .expect("lock");
    assert_eq!(locks_of(&observer, pid).await, 1);
    let sent = monotonic_us();
    (topology.toxiproxy())
        .inject(
            "r1",
            "SELECT pg_advisory_unlock_all()",
            Duration::from_secs(1),
        )
        .await
        .expect("inject");
    testkit::eventually(Duration::from_secs(5), || async {
        locks_of(&observer, pid).await == 0
    })
    .await
    .expect("the injected unlock ran on the client's session");
    // The client's own statements still get their own answers, on the same session.
    assert_eq!(backend_pid(&c).await, pid);
    let held: bool = c
        .query_one("SELECT pg_try_advisory_lock(1886156915, 1)", &[])
        .await
        .expect("lock again")
        .get(0);
    assert!(held);
    // A session busy past the window (a statement sleeping 1 s) is left alone.
    let sleeping = c.simple_query("SELECT pg_sleep(1)");
    let injected = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        (topology.toxiproxy())
            .inject(
                "r1",
                "SELECT pg_advisory_unlock_all()",
                Duration::from_millis(300),
            )
            .await
    };
    let (slept, injected) = tokio::join!(sleeping, injected);
    slept.expect("the client's sleep");
    injected.expect("inject");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(locks_of(&observer, pid).await, 1, "busy past the window");
    let mut seen = Vec::new();
    records(&topology, "r1", &mut seen).await;
    let injections: Vec<u64> = (seen.iter())
        .filter(|r| matches!(&r.event, WireEvent::Injected { sql } if sql == "SELECT pg_advisory_unlock_all()"))
        .map(|r| r.at_us)
        .collect();
    assert_eq!(injections.len(), 1, "{}", serde_json_lines(&seen));
    assert!(injections[0] >= sent);
    // The tap saw none of the injected answer: every answer is to a statement of the client.
    let asked: Vec<u64> = (seen.iter())
        .filter_map(|r| match r.event {
            WireEvent::Statement { id, .. } => Some(id),
            _ => None,
        })
        .collect();
    assert!(seen.iter().all(|r| match r.event {
        WireEvent::Answer { id, .. } => asked.contains(&id),
        _ => true,
    }));
}
