//! The records of a wire journal: what one client connection of a proxy opened, said, was told
//! and how it ended, in the order the proxy read it. Both the Toxiproxy-compatible server (which
//! writes them) and the harness (which reads them) use these types.

use serde::{Deserialize, Serialize};

/// One entry of a proxy's journal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Its place in the proxy's journal, from 1, without gaps unless records were dropped
    /// ([`Page::dropped`]).
    pub seq: u64,
    /// The client connection, numbered from 1 per proxy in the order they were accepted.
    pub conn: u64,
    /// When the proxy read it off the socket (the client's or the server's), before any toxic
    /// acted on it: `CLOCK_MONOTONIC` in microseconds ([`crate::monotonic_us`]).
    pub at_us: u64,
    /// What happened.
    #[serde(flatten)]
    pub event: WireEvent,
}

/// What a record says happened on one connection.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "wire", rename_all = "snake_case")]
pub enum WireEvent {
    /// The proxy accepted a client connection.
    Opened,
    /// The client's startup message: who it says it is (never its password).
    Startup {
        /// `user`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
        /// `database`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        database: Option<String>,
        /// `application_name`, when the client sent one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        application_name: Option<String>,
        /// `options` (e.g. `-c idle_session_timeout=800`), when sent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        options: Option<String>,
    },
    /// The server's BackendKeyData: the pid of the server process serving this connection
    /// (behind PgBouncer, PgBouncer's own key: not a PostgreSQL pid).
    Backend {
        /// The pid.
        pid: i32,
    },
    /// The connection is a cancel request for the backend `pid` (it says nothing else).
    Cancel {
        /// The backend whose query it cancels.
        pid: i32,
    },
    /// The server reported a parameter's value (ParameterStatus), at the start and whenever
    /// it changes; only `application_name` is kept.
    Parameter {
        /// Its name.
        name: String,
        /// Its value.
        value: String,
    },
    /// The client sent a statement: a simple Query, or an extended Execute with the text of
    /// its Parse and the values of its Bind.
    Statement {
        /// Its number on the connection, from 1: its [`WireEvent::Answer`] carries it.
        id: u64,
        /// The SQL, as sent (cut at [`MAX_TEXT`] bytes).
        sql: String,
        /// The Bind's values, rendered as text (`None`: SQL NULL); empty for a simple Query.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        params: Vec<Option<String>>,
    },
    /// The server answered the statement `id`.
    Answer {
        /// The statement's number.
        id: u64,
        /// What it said.
        outcome: Outcome,
    },
    /// The transaction state the server reported (ReadyForQuery), recorded when it changes.
    Ready {
        /// The state.
        tx: TxState,
    },
    /// The server sent an error that answers no statement: a login refused, or the session
    /// ended by the server (`57P05` idle-session timeout, `57P01` terminated by an
    /// administrator or `pg_terminate_backend`).
    ServerError {
        /// The SQLSTATE.
        code: String,
        /// The message.
        message: String,
    },
    /// The proxy ran `sql` on this connection's session itself, as a simple Query sent while
    /// the session was idle between the client's statements (`POST /proxies/{p}/inject`):
    /// what a stray statement on a shared session does, a pool's `DISCARD ALL` or another
    /// client's unlock. Neither it nor its answer reached the client.
    Injected {
        /// The statement.
        sql: String,
    },
    /// The server delivered a notification on this connection (a `NOTIFY` on a channel it
    /// listens to: X-WAKE's wake-up).
    Notified {
        /// The channel (cut at [`MAX_TEXT`]).
        channel: String,
    },
    /// The connection ended.
    Closed {
        /// Which side ended it.
        by: Closer,
        /// Whether the client said goodbye first (a Terminate message).
        terminate: bool,
    },
    /// The tap stopped decoding one direction of this connection (TLS, or bytes it could not
    /// decode); the bytes flowed on untouched.
    Undecoded {
        /// Whether it was the client's direction.
        from_client: bool,
        /// Why.
        reason: String,
    },
}

/// What the server answered a statement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// It completed.
    Done {
        /// The command tags (CommandComplete), one per statement a simple Query held, e.g.
        /// `SELECT 1`, `INSERT 0 1`; an empty query answers none.
        tags: Vec<String>,
        /// How many rows it returned.
        rows: u64,
        /// The values of its row, when it returned exactly one (each cut at [`MAX_TEXT`]):
        /// `pg_try_advisory_lock`'s answer is `["t"]` or `["f"]`. Of a simple Query that held
        /// several statements: its first statement's row, when that one returned exactly one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        row: Option<Vec<Option<String>>>,
    },
    /// It failed (ErrorResponse).
    Error {
        /// The SQLSTATE, e.g. `57014` (canceled).
        code: String,
        /// The message.
        message: String,
    },
    /// It never ran: an earlier message of the same pipeline failed.
    Skipped,
}

/// The transaction state of a ReadyForQuery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxState {
    /// Not in a transaction block.
    Idle,
    /// In a transaction block.
    InTransaction,
    /// In a failed transaction block.
    Failed,
}

/// Which side ended a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Closer {
    /// The client closed its socket first.
    Client,
    /// The server closed its socket first.
    Server,
    /// The proxy ended it: a fault (a toxic removed or fired, the proxy disabled or stopped).
    Proxy,
}

/// The longest text a record keeps of a statement or a value, in bytes.
pub const MAX_TEXT: usize = 8 * 1024;

/// One page of a proxy's journal, as `GET /proxies/{name}/journal?after=SEQ` answers it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Page {
    /// The records after `after`, in order.
    pub records: Vec<Record>,
    /// The last record's `seq` (or `after` when there is none): ask for the next page after it.
    pub next: u64,
    /// Records lost since the proxy started because nobody read them in time (the journal
    /// keeps at most [`JOURNAL_CAPACITY`] unread records): a reader that sees this above zero
    /// cannot judge the connections whose records are missing.
    pub dropped: u64,
    /// The proxy's `CLOCK_MONOTONIC` in microseconds when it answered: a reader on another
    /// clock can tell.
    pub now_us: u64,
    /// What the tap cost the proxy so far.
    pub cost: Cost,
}

/// What decoding cost the proxy, per message decoded (both directions, every connection of
/// the proxy since it started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// Messages decoded.
    pub messages: u64,
    /// Median time spent decoding one message, in nanoseconds.
    pub p50_ns: u64,
    /// 99th percentile, in nanoseconds.
    pub p99_ns: u64,
}

/// The most records one page holds: a page this full may have more behind it.
pub const PAGE_LIMIT: usize = 10_000;

/// The most records a proxy's journal keeps unread; older ones are dropped and counted.
pub const JOURNAL_CAPACITY: usize = 200_000;

/// The path of a proxy's journal on the server's HTTP API.
pub fn journal_path(proxy: &str) -> String {
    format!("/proxies/{proxy}/journal")
}

/// The route of proxy `proxy`'s injection (an extension of Toxiproxy's API): a POST of an
/// [`Injection`] runs its statement once on each of the proxy's connections that is idle, or
/// goes idle within its window.
pub fn inject_path(proxy: &str) -> String {
    format!("/proxies/{proxy}/inject")
}

/// A statement the proxy runs on its connections' sessions itself
/// ([`WireEvent::Injected`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Injection {
    /// The statement, sent as one simple Query.
    pub sql: String,
    /// How long a connection busy with a statement of its own may take to go idle and still
    /// get it, in milliseconds (a session waiting in a lock never does).
    pub within_ms: u64,
}
