//! A barrier on the wire (`wait_for = "leader-check"`): the next step begins just after the
//! leader's check was answered, so a fault lands a known time before the leader's next check
//! (a whole T, less the barrier's own lateness), not at whatever phase of the program's
//! schedule a delay happened to reach. Without it, whether a leader that shrugs off one failed
//! check demotes within a bound depends on where in its check period the fault fell.

use std::time::Duration;

use anyhow::anyhow;
use wiretap::WireEvent;

use crate::timeline::{Entry, Timeline, What};

/// How often the timeline is looked at while waiting (the journals are read every
/// [`HURRIED`](crate::observe::wire::HURRIED) meanwhile).
const LOOK_EVERY: Duration = Duration::from_millis(1);

/// The connection of `leader` that carries its lock: the last one on which it asked for the
/// lock (a grant takes that connection out of the pool; a leader asks no more). `None`: none
/// of its connections asked for it, or that one has closed.
pub(super) fn lock_conn(entries: &[Entry], leader: &str) -> Option<u64> {
    let mut found = None;
    for e in entries {
        let What::Wire {
            replica,
            conn,
            event,
        } = &e.what
        else {
            continue;
        };
        if replica != leader {
            continue;
        }
        match event {
            WireEvent::Statement { sql, .. } if asks_for_the_lock(sql) => found = Some(*conn),
            WireEvent::Closed { .. } if found == Some(*conn) => found = None,
            _ => {}
        }
    }
    found
}

/// Whether `sql` calls one of the functions that take an advisory lock (any form: session or
/// transaction, exclusive or shared, waiting or not).
fn asks_for_the_lock(sql: &str) -> bool {
    let sql = sql.to_ascii_lowercase();
    [
        "pg_try_advisory_",
        "pg_advisory_lock",
        "pg_advisory_xact_lock",
    ]
    .iter()
    .any(|f| sql.contains(f))
}

/// A barrier before a scenario's first step: waits until every replica of `names` has asked
/// for the lock on the wire (its first check, as its proxy read it), so that the steps' bounds
/// count from an election under way, not from a delay since the processes were spawned, which
/// a program's boot can use up (a Python replica's imports on a loaded machine took 1.1 s, and
/// a first wait for a leader within 5T had given up before it asked). Gives up after `limit`,
/// or as soon as `untapped` says no wire will come; returns the replicas that had not asked.
pub(super) async fn first_asks(
    timeline: &Timeline,
    names: &[String],
    limit: Duration,
    untapped: impl Fn() -> bool,
) -> Vec<String> {
    let not_asked = |entries: &[Entry]| -> Vec<String> {
        (names.iter())
            .filter(|n| !entries.iter().any(|e| asks(e, n)))
            .cloned()
            .collect()
    };
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let left = not_asked(&timeline.entries());
        if left.is_empty() || untapped() || tokio::time::Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(SEARCH_EVERY).await;
    }
}

/// Whether `e` is a statement of `replica` that asks for the lock.
fn asks(e: &Entry, replica: &str) -> bool {
    matches!(&e.what, What::Wire { replica: r, event: WireEvent::Statement { sql, .. }, .. }
        if r == replica && asks_for_the_lock(sql))
}

/// Whether `e` is an answer on `leader`'s connection `conn`.
fn answers(e: &Entry, leader: &str, conn: u64) -> bool {
    matches!(&e.what, What::Wire { replica, conn: c, event: WireEvent::Answer { .. } }
        if replica == leader && *c == conn)
}

/// How often the whole timeline is searched for the leader's lock connection while it is not
/// there yet (a copy of the timeline each time: less often than the answer is looked for).
const SEARCH_EVERY: Duration = Duration::from_millis(10);

/// Waits until an answer on `leader`'s lock connection is on `timeline` later than `since_ms`
/// (the journals must be read fast meanwhile: the caller holds a hurry); fails after `limit`.
/// The grant that names that connection may reach the timeline after the wait began (the
/// reader was between two reads): it is waited for too, within the same limit.
pub(super) async fn next_answer(
    timeline: &Timeline,
    leader: &str,
    since_ms: f64,
    limit: Duration,
) -> anyhow::Result<f64> {
    let wait = async {
        let conn = loop {
            if let Some(conn) = lock_conn(&timeline.entries(), leader) {
                break conn;
            }
            tokio::time::sleep(SEARCH_EVERY).await;
        };
        loop {
            let later = timeline.entries_after(since_ms);
            if let Some(e) = later.iter().find(|e| answers(e, leader, conn)) {
                return e.t_ms;
            }
            tokio::time::sleep(LOOK_EVERY).await;
        }
    };
    tokio::time::timeout(limit, wait).await.map_err(|_| {
        let seen = lock_conn(&timeline.entries(), leader);
        match seen {
            None => anyhow!(
                "{leader}'s lock connection did not reach the wire within {limit:?} (no journal, \
                 or no lock call seen)"
            ),
            Some(conn) => anyhow!(
                "no check of {leader}'s answered on its lock connection {conn} within {limit:?}"
            ),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(t_ms: f64, conn: u64, event: WireEvent) -> Entry {
        Entry {
            t_ms,
            what: What::Wire {
                replica: "r1".into(),
                conn,
                event,
            },
        }
    }

    fn statement(sql: &str) -> WireEvent {
        WireEvent::Statement {
            id: 1,
            sql: sql.into(),
            params: Vec::new(),
        }
    }

    fn answer() -> WireEvent {
        WireEvent::Answer {
            id: 1,
            outcome: wiretap::Outcome::Done {
                tags: vec!["SELECT 1".into()],
                rows: 1,
                row: None,
            },
        }
    }

    /// Clean-clone CI at 3a09d32 (`gallery::case_31_unlock_no_deadline`): the barrier began
    /// before the wire reader had put the leader's grant on the timeline (at 5 times the
    /// suite's T it reads every 500 ms, woken by the hurry), looked once after 4 ms and gave
    /// up: "r1's lock connection is not on the wire". It must wait for the grant as for the
    /// answer, within its limit.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn the_barrier_waits_for_the_grant_to_reach_the_timeline() {
        let timeline = Timeline::new();
        let late = timeline.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            let grant = statement("SELECT pg_try_advisory_lock(1886156915, 1)");
            for (ms, event) in [(0, grant), (40, answer())] {
                let at = late.start() + Duration::from_millis(ms);
                let what = What::Wire {
                    replica: "r1".into(),
                    conn: 2,
                    event,
                };
                late.record_at(at, what);
            }
        });
        let got = next_answer(&timeline, "r1", 10.0, Duration::from_secs(1)).await;
        assert_eq!(got.ok(), Some(40.0));
    }

    /// Before the first step: done once every replica asked for the lock (in whatever form),
    /// at the moment the last one's call reached the timeline; given up at the limit with the
    /// replica that never asked; at once when the proxies keep no journal.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn the_first_step_waits_for_each_replicas_first_lock_call() {
        let timeline = Timeline::new();
        let later = timeline.clone();
        let ask = |replica: &str, sql: &str| What::Wire {
            replica: replica.into(),
            conn: 1,
            event: statement(sql),
        };
        later.record(ask("r1", "SELECT 1"));
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            later.record(ask("r1", "SELECT pg_try_advisory_lock(1886156915, 1)"));
            tokio::time::sleep(Duration::from_millis(300)).await;
            later.record(ask("r2", "SELECT pg_try_advisory_xact_lock(1886156915, 1)"));
        });
        let names = ["r1".to_owned(), "r2".to_owned()];
        let limit = Duration::from_secs(10);
        let began = tokio::time::Instant::now();
        assert!(first_asks(&timeline, &names, limit, || false)
            .await
            .is_empty());
        let waited = began.elapsed();
        assert!(waited >= Duration::from_millis(330), "{waited:?}");
        assert!(
            waited < Duration::from_millis(330) + SEARCH_EVERY * 2,
            "{waited:?}"
        );
        let three = ["r1".to_owned(), "r3".to_owned()];
        let began = tokio::time::Instant::now();
        assert_eq!(first_asks(&timeline, &three, limit, || false).await, ["r3"]);
        assert!(began.elapsed() >= limit);
        let began = tokio::time::Instant::now();
        assert_eq!(first_asks(&timeline, &three, limit, || true).await, ["r3"]);
        assert_eq!(began.elapsed(), Duration::ZERO, "no wire will come");
    }

    #[test]
    fn the_lock_connection_is_the_last_that_asked_for_the_lock_and_is_open() {
        let mut entries = vec![
            wire(
                1.0,
                1,
                statement("SELECT pg_try_advisory_lock(1886156915, 1)"),
            ),
            wire(
                2.0,
                2,
                statement("SELECT pg_try_advisory_lock(1886156915, 1)"),
            ),
            wire(3.0, 2, statement("SELECT 1")),
            wire(4.0, 1, statement("INSERT INTO leader_work VALUES (1)")),
            wire(
                5.0,
                3,
                statement("SELECT pg_advisory_unlock(1886156915, 1)"),
            ),
        ];
        assert_eq!(lock_conn(&entries, "r1"), Some(2));
        assert_eq!(lock_conn(&entries, "r2"), None);
        entries.push(wire(
            6.0,
            2,
            WireEvent::Closed {
                by: wiretap::Closer::Client,
                terminate: true,
            },
        ));
        assert_eq!(lock_conn(&entries, "r1"), None);
    }
}
