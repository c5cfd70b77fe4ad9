//! Scenario files live beside this crate; the tests that run them arrive with the conformance issue.
