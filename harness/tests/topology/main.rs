//! Integration tests of the topology (Docker and local backends) and the fault verbs, against
//! real PostgreSQL, PgBouncer and Toxiproxy.
//!
//! The Docker tests need the images named by `ELECTOR_POSTGRES_IMAGE`, `ELECTOR_PGBOUNCER_IMAGE`
//! and `ELECTOR_TOXIPROXY_IMAGE` (`source ci/env.sh` after `bash ci/build-images.sh`). Each test
//! owns one topology and checks several things on it, to keep the binary fast.

mod cleanup;
mod common;
mod exit_codes;
mod faults;
mod local;
mod pgbouncer;
mod startup;
mod wire;
