//! A barrier on the wire (`wait_for = "leader-check"`): the next step begins just after the
//! leader's check was answered, so a fault lands a known time before the leader's next check
//! (a whole T, less the barrier's own lateness), not at whatever phase of the program's
//! schedule a delay happened to reach. Without it, whether a leader that shrugs off one failed
//! check demotes within a bound depends on where in its check period the fault fell.

use std::time::Duration;

use anyhow::{anyhow, bail};
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

/// Whether `sql` calls one of the functions that take an advisory lock.
fn asks_for_the_lock(sql: &str) -> bool {
    let sql = sql.to_ascii_lowercase();
    sql.contains("pg_try_advisory_lock") || sql.contains("pg_advisory_lock(")
}

/// Whether `e` is an answer on `leader`'s connection `conn`.
fn answers(e: &Entry, leader: &str, conn: u64) -> bool {
    matches!(&e.what, What::Wire { replica, conn: c, event: WireEvent::Answer { .. } }
        if replica == leader && *c == conn)
}

/// Waits until an answer on `leader`'s lock connection is on `timeline` later than `since_ms`
/// (the journals must be read fast meanwhile: the caller holds a hurry); fails after `limit`,
/// or at once when the leader's lock connection is not on the wire.
pub(super) async fn next_answer(
    timeline: &Timeline,
    leader: &str,
    since_ms: f64,
    limit: Duration,
) -> anyhow::Result<f64> {
    // What the reader read before the hurry began is on the timeline within one fast read.
    tokio::time::sleep(LOOK_EVERY * 4).await;
    let Some(conn) = lock_conn(&timeline.entries(), leader) else {
        bail!("{leader}'s lock connection is not on the wire (no journal, or no lock call seen)");
    };
    let wait = async {
        loop {
            let later = timeline.entries_after(since_ms);
            if let Some(e) = later.iter().find(|e| answers(e, leader, conn)) {
                return e.t_ms;
            }
            tokio::time::sleep(LOOK_EVERY).await;
        }
    };
    tokio::time::timeout(limit, wait).await.map_err(|_| {
        anyhow!("no check of {leader}'s answered on its lock connection {conn} within {limit:?}")
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
