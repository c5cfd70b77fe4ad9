//! The facts the harness and the workspace's tests share, so that both judge against one copy:
//! the reference page's literal text, the images each service runs, where PostgreSQL keeps its
//! data, and which clauses each of the elector's tests decides. The shipped harness depends on
//! this crate and not on `testkit`, the tests' fixtures (containers, proxies, log capture),
//! which re-exports it.
//!
//! | fact | module |
//! |---|---|
//! | the reference page's literal text (the leader-finding query, the gauge's name) | [`spec`] |
//! | which container image each service runs; the PostgreSQL majors | [`images`] |
//! | PostgreSQL's data directory and the volume it goes on | [`pg`] |
//! | which clauses each of the elector's tests decides | [`decides`] |

pub mod decides;
pub mod images;
pub mod pg;
pub mod spec;
