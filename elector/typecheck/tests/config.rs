//! Config (CFG-1) at the type level.
//!
//! Each case (`examples/*.rs`) is checked by cargo itself, in the workspace's own target
//! directory, where the elector's dependencies are already checked or built (16 s in a clean
//! clone after the lints, under a second once its cases were checked there).
//! (trybuild, used before, builds every case in a project and target directory of its own:
//! all the elector's dependencies anew, 52 s of every core on the project's 2-core machine,
//! while no other test could run.) The test asks for the compiler's own error, so a case that
//! stops compiling for another reason fails it.

use std::process::Command;

/// `cargo check` of the example `name`: whether it compiled, and what the compiler said.
fn check(name: &str) -> (bool, String) {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let out = Command::new(env!("CARGO"))
        .args([
            "check",
            "--quiet",
            "--message-format",
            "short",
            "--manifest-path",
        ])
        .arg(manifest)
        .args(["--features", "compile-fail", "--example", name])
        .output()
        .unwrap_or_else(|e| panic!("cargo check --example {name}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// CFG-1: the spec's `ErrNilPool` is unrepresentable: a `Config` without a pool does not
/// compile (see `elector::Config`), and neither does one whose pool is `None`. Each case names
/// every other field, so it fails for the pool alone, with the one error expected.
#[test]
fn config_without_a_pool_does_not_compile() {
    for (case, error) in [
        (
            "config_without_pool",
            "error[E0063]: missing field `pool` in initializer of `Config`",
        ),
        (
            "config_with_pool_none",
            "error[E0308]: mismatched types: expected `Pool<Manager>`, found `Option<_>`",
        ),
    ] {
        let (compiled, said) = check(case);
        assert!(!compiled, "{case} compiled:\n{said}");
        assert!(said.contains(error), "{case}: not {error:?}:\n{said}");
        let errors = said.lines().filter(|l| l.contains(": error")).count();
        assert_eq!(errors, 1, "{case}: one error, for the pool alone:\n{said}");
    }
}
