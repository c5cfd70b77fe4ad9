//! Scenarios: the file model (`file`) and, with the conformance suite, the runner.

pub mod file;

pub use file::{FileError, Scenario, Span};
pub mod run;
