//! The elector's own tests as a report source: the in-process clauses (those only a test inside
//! the replica's process can decide) take their verdicts from nextest's JUnit file of the
//! elector's tests, and `elector/tests/clauses.json` names the clauses each test decides (each
//! test binary of the elector checks that the file lists exactly its tests).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context as _};

use crate::check::{Check, Verdict};
use crate::report::Source;

/// The name of the source of the elector's tests' verdicts ([`elector_tests`]).
pub const ELECTOR_TESTS: &str = "elector tests";

/// The name of the source that lists the in-process clauses as not run
/// ([`in_process_not_run`]): a report with [`ELECTOR_TESTS`] has no need of it.
pub const IN_PROCESS_NOT_RUN: &str = "elector tests (in-process)";

/// The elector's tests as a report source: each test decides the clause IDs
/// `elector/tests/clauses.json` gives it; its verdict comes from nextest's JUnit file.
///
/// # Errors
/// The file cannot be read or parsed, or it names a test the clauses file does not list (a new
/// test, added without saying what it decides).
pub fn elector_tests(junit: &Path) -> anyhow::Result<Source> {
    let xml =
        std::fs::read_to_string(junit).with_context(|| format!("reading {}", junit.display()))?;
    let doc =
        roxmltree::Document::parse(&xml).with_context(|| format!("parsing {}", junit.display()))?;
    let listed = listed();
    let mut checks = Vec::new();
    let mut seconds = 0.0;
    for case in doc.descendants().filter(|n| n.has_tag_name("testcase")) {
        let name = case.attribute("name").unwrap_or_default();
        let binary = case.attribute("classname").unwrap_or_default();
        let Some(ids) = listed.get(binary).and_then(|m| m.get(name)) else {
            bail!(
                "{}: the elector's test {binary} {name} is not in elector/tests/clauses.json \
                 (list it there, with the clauses it decides or none)",
                junit.display()
            );
        };
        if ids.is_empty() {
            continue;
        }
        let (ids, fn_name) = (ids.clone(), name.rsplit("::").next().unwrap_or(name));
        seconds += case
            .attribute("time")
            .and_then(|t| t.parse::<f64>().ok())
            .unwrap_or(0.0);
        let failed = case
            .children()
            .any(|c| c.has_tag_name("failure") || c.has_tag_name("error"));
        let skipped = case.children().any(|c| c.has_tag_name("skipped"));
        checks.push(Check {
            name: format!("elector test {name}"),
            clauses: ids,
            verdict: if failed {
                Verdict::Invalid
            } else if skipped {
                Verdict::Unknown
            } else {
                Verdict::Valid
            },
            figures: [("test".to_owned(), fn_name.to_owned())].into(),
            message: if failed {
                "failed (see the nextest output)".into()
            } else {
                "passed".into()
            },
            measures: Vec::new(),
            needs: None,
            flaky: false,
        });
    }
    Ok(Source {
        name: ELECTOR_TESTS.into(),
        seconds,
        checks,
        evidence: None,
    })
}

/// For another program than the harness's own replica: the clauses the elector's tests decide,
/// not run (an in-process test decides them for the Rust crate only), so that a clause no
/// scenario can decide says why.
pub(crate) fn in_process_only() -> Source {
    in_process_not_run("not run: the elector's own tests decide these on the Rust crate only")
}

/// The in-process clauses as not run, for `why` (a program other than the crate, or a server
/// version the elector's tests did not run on).
pub(crate) fn in_process_not_run(why: &str) -> Source {
    let mut ids: Vec<String> = (elector_test_clauses().into_iter())
        .flat_map(|(_, ids)| ids)
        .collect();
    ids.sort();
    ids.dedup();
    let check = Check {
        needs: Some(crate::level::Need::InProcess),
        ..Check::new("in-process tests", &[], Verdict::Unknown, why.to_owned())
    };
    Source {
        name: IN_PROCESS_NOT_RUN.into(),
        seconds: 0.0,
        checks: vec![check.with_clauses(&ids)],
        evidence: None,
    }
}

/// `elector/tests/clauses.json`, embedded at build time and read by `facts` (its shape is
/// checked by this module's tests, so a build whose file does not parse fails them; the
/// harness no longer reads such a file as "no test decides anything").
fn listed() -> facts::decides::Decides {
    facts::decides::decides()
}

/// `(test, clause IDs)` of every elector test that decides a clause, from
/// `elector/tests/clauses.json`.
pub fn elector_test_clauses() -> Vec<(String, Vec<String>)> {
    (listed().into_values())
        .flat_map(BTreeMap::into_iter)
        .filter(|(_, ids)| !ids.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file parses, every ID it names is one of the spec's, and tests are found under their
    /// binary and module path.
    #[test]
    fn elector_tests_name_their_clauses() {
        let file = facts::decides::decides();
        let bad: Vec<&String> = (file.values().flat_map(BTreeMap::values).flatten())
            .filter(|id| !crate::clauses::exists(id))
            .collect();
        assert!(bad.is_empty(), "not clause IDs: {bad:?}");
        let get = |binary: &str, test: &str| file[binary].get(test).cloned();
        let ids = |v: &[&str]| Some(v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
        assert_eq!(
            get("elector::it", "run::panic_in_run_abandons_the_lock"),
            ids(&["RUN-7"])
        );
        assert_eq!(
            get(
                "elector-typecheck::config",
                "config_without_a_pool_does_not_compile"
            ),
            ids(&["CFG-1"])
        );
        assert_eq!(
            get(
                "elector",
                "readiness::tests::the_seven_probed_loops_and_their_names"
            ),
            ids(&["READY-5"])
        );
        assert!(elector_test_clauses().len() >= 85);
    }

    fn junit(cases: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().expect("a temporary file");
        let xml =
            format!("<testsuites><testsuite name=\"elector\">{cases}</testsuite></testsuites>");
        std::fs::write(file.path(), xml).expect("a JUnit file");
        file
    }

    /// A listed test's verdict decides its clauses; a test the file does not list stops the
    /// report with its name (it would otherwise decide nothing, unseen).
    #[test]
    fn a_listed_test_decides_its_clauses_and_an_unlisted_one_is_an_error() {
        let listed = junit(
            r#"<testcase name="run::panic_in_run_abandons_the_lock" classname="elector::it" time="1.5"><failure/></testcase>
               <testcase name="standby_check::on_postgres_15_the_standby_check_reads_no_view" classname="elector::it" time="1"/>"#,
        );
        let source = elector_tests(listed.path()).expect("a source");
        assert_eq!(source.checks.len(), 1, "{:?}", source.checks);
        assert_eq!(source.checks[0].clauses, vec!["RUN-7".to_owned()]);
        assert_eq!(source.checks[0].verdict, Verdict::Invalid);
        let unlisted =
            junit(r#"<testcase name="run::a_new_test" classname="elector::it" time="1"/>"#);
        let e = elector_tests(unlisted.path()).expect_err("an unlisted test");
        assert!(e.to_string().contains("elector::it run::a_new_test"), "{e}");
    }
}
