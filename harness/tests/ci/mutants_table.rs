//! `ci/mutants.sh` mutates the elector file by file against the tests its table names for each
//! file: a file missing from the table is never mutated (`attempt.rs` and `who.rs` were not).

use std::collections::BTreeSet;

use crate::repo;

/// Files with no behaviour of their own to mutate: the crate root (modules and re-exports) and
/// the error enum.
const NOT_MUTATED: &[&str] = &["lib", "error"];

#[test]
fn the_mutation_table_names_every_file_of_the_elector() {
    let script = std::fs::read_to_string(repo().join("ci/mutants.sh")).expect("ci/mutants.sh");
    let table: BTreeSet<String> = (script.lines())
        .filter_map(|l| l.trim().strip_prefix('['))
        .filter_map(|l| l.split_once("]=").map(|(name, _)| name.to_owned()))
        .collect();
    let files: BTreeSet<String> = std::fs::read_dir(repo().join("elector/src"))
        .expect("elector/src")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .filter(|f| !NOT_MUTATED.contains(&f.as_str()))
        .collect();
    let missing: Vec<&String> = files.difference(&table).collect();
    let stale: Vec<&String> = table.difference(&files).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "ci/mutants.sh's table lacks {missing:?} and names files that are gone: {stale:?}"
    );
    assert!(table.len() >= 10, "the table was not read: {table:?}");
}
