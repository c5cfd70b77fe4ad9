//! The conformance and chaos harness for the `elector` crate.
//!
//! | concern | module |
//! |---|---|
//! | the replica event stream (contract between replica and observers) | [`event`] |
//! | the replica process (elector, supervisor, loops, HTTP, events) | [`replica`] |
//! | services: PostgreSQL, PgBouncer, Toxiproxy (Docker or local processes) | [`topology`] |
//! | fault verbs | [`fault`] |
//! | the command line | [`cli`] |

pub mod check;
pub mod clauses;
pub mod cli;
pub mod event;
pub mod fault;
pub mod observe;
pub mod replica;
pub mod report;
pub mod scenario;
pub mod snapshot;
pub mod suite;
pub mod timeline;
pub mod topology;
