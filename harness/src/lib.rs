//! The conformance and chaos harness for the `elector` crate.
//!
//! | concern | module |
//! |---|---|
//! | the replica event stream (contract between replica and observers) | [`event`] |
//! | the replica contract's levels: what a replica program lets the harness observe | [`level`] |
//! | the replica process (elector, supervisor, loops, HTTP, events), and any program the contract fits | [`replica`] |
//! | scenario files, their typed model, and the runner | [`scenario`] |
//! | durations in units of T | [`span`] |
//! | services: PostgreSQL, PgBouncer, Toxiproxy (Docker or local processes) | [`topology`] |
//! | fault verbs and their inverses | [`fault`] |
//! | samplers of gauges, pg_locks and readiness | [`observe`] |
//! | the run's history | [`timeline`] |
//! | invariants and expectations | [`check`] |
//! | how each clause is decided, from which contract level | [`decidable`] |
//! | the elector's own tests' verdicts, for the in-process clauses | [`in_process`] |
//! | the conformance report and each run's evidence | [`report`] |
//! | the command line, and its flags' values and limits | [`cli`], [`flags`] |
//! | `harness up`, the incident workbench: live timeline, typed faults, recorded incident | [`workbench`] |
//! | `harness chaos`: seeded fault schedules checked as a history, replayable | [`chaos`] |
//! | `harness run --pg`: a column per PostgreSQL major | [`matrix`] |
//! | `harness report merge`: one report from shards run apart | [`merge`] |
//!
//! A scenario's data flows one way: file → topology → faults → samplers → timeline → checks →
//! report.

pub mod chaos;
pub mod check;
pub mod clauses;
pub mod cli;
pub mod decidable;
pub mod event;
pub mod exit;
pub mod fault;
pub mod flags;
pub mod in_process;
pub mod level;
pub mod matrix;
pub mod merge;
pub mod observe;
pub mod replica;
pub mod report;
pub mod scenario;
pub mod snapshot;
pub mod span;
pub mod suite;
pub mod timeline;
pub mod topology;
pub mod workbench;
