//! The wire journal of a proxy (an extension of upstream's API): what each client connection
//! said to the PostgreSQL server behind it and what it was told, as [`wiretap`] decodes it,
//! kept until a reader asks for it on `GET /proxies/{name}/journal?after=SEQ`.
//!
//! Each connection task owns an [`Observed`]: it stamps what the proxy reads off either socket
//! with `CLOCK_MONOTONIC` before any toxic acts on it (so a statement's time is when it left
//! the client, even across a partition that drops it), decodes it, and appends the events to
//! the proxy's [`Journal`]. The bytes are forwarded whatever the decoding makes of them. The
//! journal holds at most [`JOURNAL_CAPACITY`] unread records (Maelstrom's journal applies back
//! pressure instead; a proxy must never slow its traffic for a reader, so the oldest are
//! dropped and counted, and a reader that sees a count knows it cannot judge what is missing).
//! A page answered drops the records up to the `after` it was asked for: one reader.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hdrhistogram::Histogram;
use wiretap::{
    monotonic_us, Closer, Cost, Page, Record, Tap, WireEvent, JOURNAL_CAPACITY, PAGE_LIMIT,
};

/// One proxy's journal, shared by its connection tasks and the API.
#[derive(Debug, Default)]
pub(crate) struct Journal {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    records: VecDeque<Record>,
    last_seq: u64,
    last_conn: u64,
    dropped: u64,
    /// Nanoseconds per decoded message (`None` only if the histogram could not be built).
    cost: Option<Histogram<u64>>,
}

impl Default for State {
    fn default() -> Self {
        State {
            records: VecDeque::new(),
            last_seq: 0,
            last_conn: 0,
            dropped: 0,
            // 1 ns to 1 s, 3 significant digits.
            cost: Histogram::new_with_bounds(1, 1_000_000_000, 3).ok(),
        }
    }
}

impl Journal {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new connection's number.
    fn open(&self) -> u64 {
        let mut s = self.lock();
        s.last_conn += 1;
        s.last_conn
    }

    fn push(&self, conn: u64, at_us: u64, events: impl IntoIterator<Item = WireEvent>) {
        let mut s = self.lock();
        for event in events {
            s.last_seq += 1;
            let seq = s.last_seq;
            if s.records.len() >= JOURNAL_CAPACITY {
                s.records.pop_front();
                s.dropped += 1;
            }
            s.records.push_back(Record {
                seq,
                conn,
                at_us,
                event,
            });
        }
    }

    /// Decoding `messages` took `took_ns`: each counts as the mean (the tap decodes a read's
    /// messages in one call).
    fn cost(&self, messages: usize, took_ns: u64) {
        if messages == 0 {
            return;
        }
        let per = (took_ns / messages as u64).clamp(1, 1_000_000_000);
        if let Some(h) = self.lock().cost.as_mut() {
            let _ = h.record_n(per, messages as u64);
        }
    }

    /// The records after `after` (at most `limit`, at most [`PAGE_LIMIT`]); those up to
    /// `after` are forgotten.
    pub fn page(&self, after: u64, limit: Option<usize>) -> Page {
        let mut s = self.lock();
        while s.records.front().is_some_and(|r| r.seq <= after) {
            s.records.pop_front();
        }
        let limit = limit.unwrap_or(PAGE_LIMIT).min(PAGE_LIMIT);
        let records: Vec<Record> = s.records.iter().take(limit).cloned().collect();
        let next = records
            .last()
            .map_or(after.max(s.first_unread()), |r| r.seq);
        Page {
            records,
            next,
            dropped: s.dropped,
            now_us: monotonic_us(),
            cost: s.cost.as_ref().map_or_else(Cost::default, |h| Cost {
                messages: h.len(),
                p50_ns: h.value_at_quantile(0.5),
                p99_ns: h.value_at_quantile(0.99),
            }),
        }
    }
}

impl State {
    /// The seq before the oldest record kept (what a reader has seen or lost).
    fn first_unread(&self) -> u64 {
        self.records
            .front()
            .map_or(self.last_seq, |r| r.seq.saturating_sub(1))
    }
}

/// One connection as the journal sees it; its drop records the end if nothing did before.
pub(crate) struct Observed {
    journal: Arc<Journal>,
    conn: u64,
    tap: Tap,
    closed: bool,
    events: Vec<WireEvent>,
}

impl Observed {
    /// A connection just accepted.
    pub fn open(journal: Arc<Journal>) -> Observed {
        let conn = journal.open();
        journal.push(conn, monotonic_us(), [WireEvent::Opened]);
        Observed {
            journal,
            conn,
            tap: Tap::new(),
            closed: false,
            events: Vec::new(),
        }
    }

    /// The proxy read `data` from the client (`from_client`) or the server.
    pub fn read(&mut self, from_client: bool, data: &[u8]) {
        let at = monotonic_us();
        let started = Instant::now();
        let n = if from_client {
            self.tap.from_client(data, &mut self.events)
        } else {
            self.tap.from_server(data, &mut self.events)
        };
        let took = started.elapsed().as_nanos() as u64;
        self.journal.cost(n, took);
        if !self.events.is_empty() {
            self.journal.push(self.conn, at, self.events.drain(..));
        }
    }

    /// Whether the session is idle between the client's statements, as the tap reads it.
    pub fn idle(&self) -> bool {
        self.tap.idle()
    }

    /// The proxy sent `sql` on this connection's session itself.
    pub fn injected(&mut self, sql: &str) {
        self.journal.push(
            self.conn,
            monotonic_us(),
            [WireEvent::Injected {
                sql: sql.to_owned(),
            }],
        );
    }

    /// The proxy read the end of the client's (`from_client`) or the server's stream: the
    /// first one read says who closed the connection, unless the client said Terminate first
    /// (the server then closes in answer, and its end may be read before the client's).
    pub fn eof(&mut self, from_client: bool) {
        let by = if from_client || self.tap.terminated() {
            Closer::Client
        } else {
            Closer::Server
        };
        self.close(by);
    }

    fn close(&mut self, by: Closer) {
        if self.closed {
            return;
        }
        self.closed = true;
        let terminate = self.tap.terminated();
        self.journal.push(
            self.conn,
            monotonic_us(),
            [WireEvent::Closed { by, terminate }],
        );
    }
}

impl Drop for Observed {
    fn drop(&mut self) {
        // Neither side closed first: the proxy ended it (a fault, a stop, a failed dial).
        self.close(Closer::Proxy);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that says Terminate closed the connection, even when the server's close (its
    /// answer to the Terminate) is read first.
    #[test]
    fn a_terminate_makes_the_client_the_closer() {
        let j = Arc::new(Journal::default());
        {
            let mut c = Observed::open(j.clone());
            c.tap.from_client(&startup_and_terminate(), &mut c.events);
            c.eof(false);
        }
        let page = j.page(0, None);
        assert!(
            page.records.iter().any(|r| r.event
                == WireEvent::Closed {
                    by: Closer::Client,
                    terminate: true
                }),
            "{:?}",
            page.records
        );
    }

    /// A startup message and a Terminate, as a client sends them.
    fn startup_and_terminate() -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&196_608i32.to_be_bytes());
        body.extend_from_slice(b"user\0app\0\0");
        let mut msg = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        msg.extend_from_slice(&body);
        msg.extend_from_slice(&[b'X', 0, 0, 0, 4]);
        msg
    }

    #[test]
    fn a_page_forgets_what_was_read_and_the_journal_drops_the_oldest_when_full() {
        let j = Arc::new(Journal::default());
        {
            let mut c = Observed::open(j.clone());
            c.eof(true);
            c.eof(false);
        }
        let page = j.page(0, None);
        let kinds: Vec<&WireEvent> = page.records.iter().map(|r| &r.event).collect();
        assert_eq!(
            kinds,
            vec![
                &WireEvent::Opened,
                &WireEvent::Closed {
                    by: Closer::Client,
                    terminate: false
                }
            ]
        );
        assert_eq!(page.next, 2);
        assert_eq!(j.page(page.next, None).records, vec![]);
        assert_eq!(j.page(page.next, None).next, 2);
        // A connection dropped without an end of stream was ended by the proxy.
        drop(Observed::open(j.clone()));
        let page = j.page(2, Some(1));
        assert_eq!(page.records.len(), 1);
        assert_eq!(page.records[0].conn, 2);
        let page = j.page(page.next, None);
        assert!(matches!(
            page.records[0].event,
            WireEvent::Closed {
                by: Closer::Proxy,
                ..
            }
        ));
        assert_eq!(page.next, 4);
        assert_eq!(j.page(4, None).records, vec![]);
        j.push(3, 0, (0..JOURNAL_CAPACITY + 5).map(|_| WireEvent::Opened));
        let page = j.page(4, Some(1));
        assert_eq!(page.dropped, 5);
        assert_eq!(page.records[0].seq, 4 + 5 + 1);
    }
}
