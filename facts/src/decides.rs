//! Which clauses each of the elector's tests decides: `elector/tests/clauses.json`, keyed by
//! nextest's binary ID (`elector`, `elector::it`, `elector-typecheck::config`), then by the
//! test's name as its binary lists it, each with the clause IDs it decides (none: it decides
//! no clause on its own). The harness reads the same file to turn the elector's JUnit results
//! into verdicts; each test binary of the elector checks with [`assert_every_test_listed`]
//! that the file names exactly its tests, so a new test cannot go unlisted.

use std::collections::{BTreeMap, BTreeSet};

/// The file, as embedded at build time.
pub const CLAUSES_JSON: &str = include_str!("../../elector/tests/clauses.json");

/// Binary ID → test name → the clause IDs it decides.
pub type Decides = BTreeMap<String, BTreeMap<String, Vec<String>>>;

/// The file, read.
///
/// # Panics
/// The file is not an object of objects of lists of strings.
pub fn decides() -> Decides {
    serde_json::from_str(CLAUSES_JSON).unwrap_or_else(|e| panic!("elector/tests/clauses.json: {e}"))
}

/// Fails the calling test unless `elector/tests/clauses.json` lists, under `binary`, every test
/// of the running test binary and no other: the binary lists its own tests (libtest's
/// `--list --format terse`, one `name: test` line each).
///
/// # Panics
/// The binary cannot list its tests, or the lists differ (the message names each difference).
pub fn assert_every_test_listed(binary: &str) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(&exe)
        .args(["--list", "--format", "terse"])
        .output()
        .unwrap_or_else(|e| panic!("{} --list: {e}", exe.display()));
    assert!(
        out.status.success(),
        "{} --list: {}",
        exe.display(),
        out.status
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let tests: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .collect();
    let file = decides();
    let listed: BTreeSet<&str> = (file.get(binary).into_iter())
        .flat_map(|m| m.keys().map(String::as_str))
        .collect();
    let unlisted: Vec<&&str> = tests.difference(&listed).collect();
    let gone: Vec<&&str> = listed.difference(&tests).collect();
    assert!(
        unlisted.is_empty() && gone.is_empty(),
        "elector/tests/clauses.json under {binary:?}: add {unlisted:?} (with the clause IDs each \
         decides, or none), remove {gone:?} (no such test)"
    );
}
