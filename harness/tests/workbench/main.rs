//! `harness up` as the incident workbench, end to end: a real `harness up` (Docker topology,
//! replica processes at T = 200 ms), faults typed at it with `harness fault` / `harness heal`,
//! what it writes on exit replayed with `harness run`, and what a SIGKILL of it leaves.

mod common;
mod incident;
mod nothing_left;
