//! What a PostgreSQL client and server said to each other, as typed records.
//!
//! The Toxiproxy-compatible server (`harness/toxiproxy`) runs a [`Tap`] on every connection it
//! proxies: the messages are decoded with the `pgwire` crate, in both directions, and the tap
//! turns them into [`WireEvent`]s: the connection opened, the client's startup (user,
//! `application_name`), the server's pid (BackendKeyData), each statement with its parameters
//! and its answer (the command tag, the SQLSTATE of an error, the values of a one-row answer),
//! the transaction state, who closed the connection. The server keeps them per proxy as
//! [`Record`]s and serves them as [`Page`]s on `GET /proxies/{name}/journal`; the harness reads
//! them back with the same types. Times are `CLOCK_MONOTONIC` ([`monotonic_us`]).
//!
//! The decoding is observation only: the proxy forwards the bytes it read whatever the tap
//! makes of them, and a direction the tap cannot decode (TLS, a malformed message) is recorded
//! as [`WireEvent::Undecoded`] and left alone. The harness asks its replicas for
//! `sslmode=disable` so that the hop it observes is plain.

mod clock;
mod decode;
mod inject;
mod record;
mod value;

pub use clock::monotonic_us;
pub use decode::Tap;
pub use inject::{query_message, Swallow};
pub use record::{
    inject_path, journal_path, Closer, Cost, Injection, Outcome, Page, Record, TxState, WireEvent,
    JOURNAL_CAPACITY, MAX_TEXT, PAGE_LIMIT,
};
