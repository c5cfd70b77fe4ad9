//! Holds the elector's compile-fail tests (`tests/config.rs`); it has no code of its own.
