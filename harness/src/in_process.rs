//! The elector's own tests as a report source: the in-process clauses (those only a test inside
//! the replica's process can decide) take their verdicts from nextest's JUnit file of the
//! elector's tests, and each test names the clauses it decides in its doc comment.

use std::path::Path;

use anyhow::Context as _;

use crate::check::{Check, Verdict};
use crate::report::Source;

/// The name of the source of the elector's tests' verdicts ([`elector_tests`]).
pub const ELECTOR_TESTS: &str = "elector tests";

/// The name of the source that lists the in-process clauses as not run
/// ([`in_process_not_run`]): a report with [`ELECTOR_TESTS`] has no need of it.
pub const IN_PROCESS_NOT_RUN: &str = "elector tests (in-process)";

/// The elector's tests as a report source: each test decides the clause IDs its doc comment
/// names; its verdict comes from nextest's JUnit file.
pub fn elector_tests(junit: &Path) -> anyhow::Result<Source> {
    let xml =
        std::fs::read_to_string(junit).with_context(|| format!("reading {}", junit.display()))?;
    let doc =
        roxmltree::Document::parse(&xml).with_context(|| format!("parsing {}", junit.display()))?;
    let clauses = elector_test_clauses();
    let mut checks = Vec::new();
    let mut seconds = 0.0;
    for case in doc.descendants().filter(|n| n.has_tag_name("testcase")) {
        let name = case.attribute("name").unwrap_or_default();
        let fn_name = name.rsplit("::").next().unwrap_or(name);
        let Some(ids) = clauses
            .iter()
            .find(|(f, _)| f == fn_name)
            .map(|(_, ids)| ids.clone())
        else {
            continue;
        };
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

/// `(test fn, clause IDs)` of every elector test, from the doc comment above each test.
pub fn elector_test_clauses() -> Vec<(String, Vec<String>)> {
    const SOURCES: [&str; 22] = [
        include_str!("../../elector/tests/it/config.rs"),
        // CFG-1's compile-fail test, in a crate of its own (elector/typecheck).
        include_str!("../../elector/typecheck/tests/config.rs"),
        include_str!("../../elector/tests/it/demotion.rs"),
        include_str!("../../elector/tests/it/fence.rs"),
        include_str!("../../elector/tests/it/launchers.rs"),
        include_str!("../../elector/tests/it/leadership.rs"),
        include_str!("../../elector/tests/it/lock.rs"),
        include_str!("../../elector/tests/it/metrics.rs"),
        include_str!("../../elector/tests/it/orphan.rs"),
        include_str!("../../elector/tests/it/pooler.rs"),
        include_str!("../../elector/tests/it/pre14.rs"),
        include_str!("../../elector/tests/it/run.rs"),
        include_str!("../../elector/tests/it/session.rs"),
        include_str!("../../elector/tests/it/term_do.rs"),
        include_str!("../../elector/tests/it/verify.rs"),
        include_str!("../../elector/tests/it/wake.rs"),
        include_str!("../../elector/tests/it/who.rs"),
        // The unit tests in the elector's modules.
        include_str!("../../elector/src/elector.rs"),
        include_str!("../../elector/src/gate.rs"),
        include_str!("../../elector/src/gauge.rs"),
        include_str!("../../elector/src/readiness.rs"),
        include_str!("../../elector/src/supervisor.rs"),
    ];
    let mut out = Vec::new();
    for src in SOURCES {
        let mut doc = String::new();
        for line in src.lines().map(str::trim) {
            if let Some(d) = line.strip_prefix("///") {
                doc.push_str(d);
                doc.push(' ');
            } else if line.starts_with("#[") {
                continue;
            } else if let Some(rest) = line
                .strip_prefix("async fn ")
                .or_else(|| line.strip_prefix("fn "))
            {
                let name = rest.split('(').next().unwrap_or_default().to_owned();
                let ids = clause_ids(&doc);
                if !ids.is_empty() {
                    out.push((name, ids));
                }
                doc.clear();
            } else {
                doc.clear();
            }
        }
    }
    out
}

/// The clause IDs a text names, e.g. `RUN-7`, in order, once each.
fn clause_ids(text: &str) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
        if crate::clauses::exists(word) && !ids.iter().any(|i| i == word) {
            ids.push(word.to_owned());
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elector_tests_name_their_clauses() {
        let map = elector_test_clauses();
        let get = |f: &str| {
            map.iter()
                .find(|(n, _)| n == f)
                .map(|(_, ids)| ids.clone())
                .unwrap_or_default()
        };
        assert_eq!(get("panic_in_run_abandons_the_lock"), vec!["RUN-7"]);
        assert!(
            get("leader_holds_the_two_int4_key_and_the_spec_query_finds_it")
                .contains(&"LOCK-1".to_owned())
        );
        assert_eq!(get("panicking_worker_exhausts_its_budget"), vec!["LOOP-5"]);
        assert_eq!(get("config_without_a_pool_does_not_compile"), vec!["CFG-1"]);
        assert_eq!(
            get("a_leader_whose_session_lost_the_lock_demotes_at_its_next_check"),
            vec!["X-VERIFY"]
        );
        assert_eq!(
            get("the_lock_session_names_its_replica_and_who_leads_says_which"),
            vec!["X-WHO"]
        );
        assert_eq!(
            get("the_seven_probed_loops_and_their_names"),
            vec!["READY-5"]
        );
        assert!(map.len() >= 25, "{map:?}");
    }
}
