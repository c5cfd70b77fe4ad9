//! The elector's integration tests, against a real PostgreSQL started per test with
//! testcontainers. `elector/tests/clauses.json` names the clauses each test decides.

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

/// `elector/tests/clauses.json` lists every test of this binary, and no other.
#[test]
fn every_test_names_the_clauses_it_decides() {
    testkit::decides::assert_every_test_listed("elector::it");
}
