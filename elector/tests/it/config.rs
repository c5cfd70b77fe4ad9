//! Config (CFG-1) at the type level.

/// CFG-1: the spec's `ErrNilPool` is unrepresentable: a `Config` without a pool does not
/// compile (see `elector::Config`).
#[test]
fn config_without_a_pool_does_not_compile() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/compile_fail/config_without_pool.rs");
}
