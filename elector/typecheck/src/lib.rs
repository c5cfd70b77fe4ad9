//! Holds the elector's compile-fail cases (`examples/`, built only with the feature `compile-fail`) and their test (`tests/config.rs`); it has no code of its own.
