//! The elector's integration tests, against a real PostgreSQL started per test with
//! testcontainers. Clause IDs from spec/clauses.md name what each test decides.

mod fixture;

mod config;
mod demotion;
mod fence;
mod launchers;
mod leadership;
mod lock;
mod metrics;
mod orphan;
mod pooler;
mod pre14;
mod run;
mod session;
mod standby_check;
mod term_do;
mod verify;
mod wake;
mod who;
