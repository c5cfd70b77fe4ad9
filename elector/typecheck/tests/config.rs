//! Config (CFG-1) at the type level.

/// CFG-1: the spec's `ErrNilPool` is unrepresentable: a `Config` without a pool does not
/// compile (see `elector::Config`), and neither does one whose pool is `None`. Each case names
/// every other field, so it fails for the pool alone (its `.stderr` file holds the one
/// expected error).
#[test]
fn config_without_a_pool_does_not_compile() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/compile_fail/config_without_pool.rs");
    cases.compile_fail("tests/compile_fail/config_with_pool_none.rs");
}
