//! The replica process, end to end: real PostgreSQL in a container (testcontainers), real
//! replica processes (`harness replica ...`) at T = 200 ms. Clause IDs from spec/clauses.md name
//! what each test decides.

mod fixture;

mod boot;
mod contract;
mod control;
mod election;
mod failover;
