//! The conformance scenarios: one TOML file per scenario in this folder (data, not code), run
//! by `harness run` and, one test case per file, by `tests/scenarios.rs`.
