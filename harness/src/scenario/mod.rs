//! Scenarios: a file ([`file`]) read into the typed [`model`] and validated once, and the
//! [runner](run) that interprets its steps.
//!
//! The data flows one way: file → [topology](crate::topology) → [faults](crate::fault) →
//! [samplers](crate::observe) → [timeline](crate::timeline) → [checks](crate::check) →
//! [report](crate::report). The runner only interprets steps: it starts the topology and the
//! replicas, carries each step out (a fault through [`Nemesis`](crate::fault::Nemesis)), and
//! hands the timeline to the checks and the evidence to the report.

pub mod file;
pub mod model;
pub mod run;

pub use file::FileError;
pub use model::{Scenario, Span, Step, Target, WaitFor};
