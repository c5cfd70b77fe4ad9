//! The conformance report: every clause ID with its verdict, the scenario or test that decided
//! it and the figures it measured, as `report.md`, `report.json` and `junit.xml`, plus one
//! evidence folder per scenario run ([`evidence`]) with its SVG timeline ([`svg`]).

pub mod evidence;
pub mod svg;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::check::{Check, Verdict};
use crate::clauses;

/// A clause's verdict in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClauseVerdict {
    /// Decided, and every check that decided it held.
    Pass,
    /// A check that decides it failed.
    Fail,
    /// No check decided it: a gap, not a pass.
    NotRun,
}

impl ClauseVerdict {
    /// The word used in the report.
    pub fn as_str(&self) -> &'static str {
        match self {
            ClauseVerdict::Pass => "pass",
            ClauseVerdict::Fail => "fail",
            ClauseVerdict::NotRun => "not-run",
        }
    }
}

/// One clause's row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClauseRow {
    /// The clause ID.
    pub id: String,
    /// The verdict.
    pub verdict: ClauseVerdict,
    /// The scenarios or tests that decided it (the failing one first).
    pub scenario: Option<String>,
    /// The figures measured, e.g. `demoted after 1.04T (median of 5)`.
    pub figures: Vec<String>,
    /// The clause's section in the spec.
    pub section: String,
    /// The checks' messages, for a reader chasing a failure.
    pub notes: Vec<String>,
}

/// Where checks came from: a scenario (or the elector's test suite) and what it decided.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// The scenario's name, or `elector tests`.
    pub name: String,
    /// How long it ran, in seconds.
    pub seconds: f64,
    /// Its checks.
    pub checks: Vec<Check>,
    /// Its evidence folder, relative to the report.
    pub evidence: Option<String>,
}

impl Source {
    /// Whether every check held (unknown counts as not held).
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.verdict == Verdict::Valid)
    }
}

/// The whole report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// T in milliseconds.
    pub t_ms: u64,
    /// The seed of the run.
    pub seed: u64,
    /// Wall time of the run in seconds.
    pub seconds: f64,
    /// One row per clause ID of the spec, in its order.
    pub clauses: Vec<ClauseRow>,
    /// The scenarios and test suites that ran.
    pub sources: Vec<Source>,
}

impl Report {
    /// Builds the clause table from the sources' checks: every clause ID appears once.
    pub fn new(t_ms: u64, seed: u64, seconds: f64, sources: Vec<Source>) -> Report {
        let mut by_clause: BTreeMap<String, Vec<(&Source, &Check)>> = BTreeMap::new();
        for s in &sources {
            for c in &s.checks {
                for id in &c.clauses {
                    by_clause.entry(id.clone()).or_default().push((s, c));
                }
            }
        }
        let clauses = clauses::all()
            .into_iter()
            .map(|clause| {
                let found = by_clause.remove(&clause.id).unwrap_or_default();
                clause_row(clause, &found)
            })
            .collect();
        Report {
            t_ms,
            seed,
            seconds,
            clauses,
            sources,
        }
    }

    /// How many clauses have each verdict: (pass, fail, not-run).
    pub fn counts(&self) -> (usize, usize, usize) {
        let n = |v| self.clauses.iter().filter(|c| c.verdict == v).count();
        (
            n(ClauseVerdict::Pass),
            n(ClauseVerdict::Fail),
            n(ClauseVerdict::NotRun),
        )
    }

    /// The one-line summary, e.g. `47 passed, 0 failed, 3 not-run (50 clauses) …`.
    pub fn summary_line(&self) -> String {
        let (p, f, n) = self.counts();
        let scen_failed = self.sources.iter().filter(|s| !s.passed()).count();
        format!(
            "{p} passed, {f} failed, {n} not-run ({} clauses); {} scenario(s)/suite(s), {scen_failed} failing; T = {} ms, seed {}, {:.0} s",
            self.clauses.len(),
            self.sources.len(),
            self.t_ms,
            self.seed,
            self.seconds
        )
    }

    /// Whether any clause failed (the run exits non-zero then).
    pub fn failed(&self) -> bool {
        self.counts().1 > 0
    }

    /// The Markdown report.
    pub fn markdown(&self) -> String {
        let mut md = String::from("# Conformance report: background leader\n\n");
        md.push_str(&format!("{}\n\n", self.summary_line()));
        md.push_str("| clause | verdict | decided by | figures |\n|---|---|---|---|\n");
        for c in &self.clauses {
            let verdict = match c.verdict {
                ClauseVerdict::Pass => "pass",
                ClauseVerdict::Fail => "**FAIL**",
                ClauseVerdict::NotRun => "not-run",
            };
            md.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                c.id,
                verdict,
                c.scenario.as_deref().unwrap_or("—"),
                escape(&c.figures.join("; "))
            ));
        }
        md.push_str("\n## Scenarios and suites\n\n");
        for s in &self.sources {
            md.push_str(&format!(
                "### {} — {} ({:.1} s)\n\n",
                s.name,
                if s.passed() { "pass" } else { "FAIL" },
                s.seconds
            ));
            if let Some(ev) = &s.evidence {
                md.push_str(&format!(
                    "Evidence: [`{ev}/`]({ev}/), timeline: ![timeline]({ev}/timeline.svg)\n\n"
                ));
            }
            md.push_str(
                "| check | clauses | verdict | figures | message |\n|---|---|---|---|---|\n",
            );
            for c in &s.checks {
                let figs: Vec<String> =
                    c.figures.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                md.push_str(&format!(
                    "| {} | {} | {:?} | {} | {} |\n",
                    escape(&c.name),
                    c.clauses.join(", "),
                    c.verdict,
                    escape(&figs.join("; ")),
                    escape(&c.message)
                ));
            }
            md.push('\n');
        }
        md
    }

    /// The JUnit XML: a suite per scenario (a case per check) and a suite of clauses.
    pub fn junit(&self) -> String {
        use quick_junit::{NonSuccessKind, TestCase, TestCaseStatus, TestSuite};
        let mut report = quick_junit::Report::new("conformance");
        for s in &self.sources {
            let mut suite = TestSuite::new(s.name.as_str());
            for c in &s.checks {
                let status = match c.verdict {
                    Verdict::Valid => TestCaseStatus::success(),
                    Verdict::Invalid => {
                        let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                        st.set_message(c.message.as_str());
                        st
                    }
                    Verdict::Unknown => {
                        let mut st = TestCaseStatus::skipped();
                        st.set_message(c.message.as_str());
                        st
                    }
                };
                suite.add_test_case(TestCase::new(c.name.as_str(), status));
            }
            report.add_test_suite(suite);
        }
        let mut suite = TestSuite::new("clauses");
        for c in &self.clauses {
            let status = match c.verdict {
                ClauseVerdict::Pass => TestCaseStatus::success(),
                ClauseVerdict::Fail => {
                    let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    st.set_message(c.notes.join("; "));
                    st
                }
                ClauseVerdict::NotRun => {
                    let mut st = TestCaseStatus::skipped();
                    st.set_message("no scenario or test decides this clause");
                    st
                }
            };
            suite.add_test_case(TestCase::new(c.id.as_str(), status));
        }
        report.add_test_suite(suite);
        report.to_string().unwrap_or_default()
    }

    /// Writes `report.md`, `report.json` and `junit.xml` into `dir`.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("report.md"), self.markdown())?;
        std::fs::write(dir.join("report.json"), serde_json::to_string_pretty(self)?)?;
        std::fs::write(dir.join("junit.xml"), self.junit())
    }
}

/// A clause's row from the checks that name it (`found`, with their sources): failed if any
/// decided check failed, not run if none decided it.
fn clause_row(clause: clauses::Clause, found: &[(&Source, &Check)]) -> ClauseRow {
    let decided: Vec<(&Source, &Check)> = found
        .iter()
        .copied()
        .filter(|(_, c)| c.verdict != Verdict::Unknown)
        .collect();
    let failed: Vec<(&Source, &Check)> = decided
        .iter()
        .copied()
        .filter(|(_, c)| c.verdict == Verdict::Invalid)
        .collect();
    let verdict = if !failed.is_empty() {
        ClauseVerdict::Fail
    } else if decided.is_empty() {
        ClauseVerdict::NotRun
    } else {
        ClauseVerdict::Pass
    };
    let mut names: Vec<String> = failed
        .iter()
        .chain(decided.iter())
        .map(|(s, _)| s.name.clone())
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    names.retain(|n| seen.insert(n.clone()));
    let figures = decided
        .iter()
        .flat_map(|(s, c)| {
            c.figures
                .iter()
                .map(move |(k, v)| format!("{k} {v} ({})", s.name))
        })
        .collect();
    let notes = found
        .iter()
        .map(|(s, c)| format!("{}: {}: {}", s.name, c.name, c.message))
        .collect();
    ClauseRow {
        id: clause.id,
        verdict,
        scenario: (!names.is_empty()).then(|| names.join(", ")),
        figures,
        section: clause.section,
        notes,
    }
}

fn escape(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(clause: &str, verdict: Verdict) -> Check {
        Check {
            name: format!("check of {clause}"),
            clauses: vec![clause.into()],
            verdict,
            figures: [("demoted after".to_owned(), "1.04T".to_owned())].into(),
            message: "m".into(),
            measures: Vec::new(),
        }
    }

    #[test]
    fn every_clause_has_a_row_and_gaps_are_not_run() {
        let sources = vec![
            Source {
                name: "partition".into(),
                seconds: 1.0,
                checks: vec![check("DEM-2", Verdict::Valid)],
                evidence: None,
            },
            Source {
                name: "kill".into(),
                seconds: 1.0,
                checks: vec![
                    check("RUN-6", Verdict::Invalid),
                    check("RUN-5", Verdict::Unknown),
                ],
                evidence: None,
            },
        ];
        let r = Report::new(200, 7, 3.0, sources);
        assert_eq!(r.clauses.len(), clauses::all().len());
        let row = |id: &str| r.clauses.iter().find(|c| c.id == id).unwrap();
        assert_eq!(row("DEM-2").verdict, ClauseVerdict::Pass);
        assert_eq!(
            row("DEM-2").figures,
            vec!["demoted after 1.04T (partition)".to_owned()]
        );
        assert_eq!(row("RUN-6").verdict, ClauseVerdict::Fail);
        assert_eq!(
            row("RUN-5").verdict,
            ClauseVerdict::NotRun,
            "unknown is a gap, not a pass"
        );
        assert_eq!(row("LOCK-1").verdict, ClauseVerdict::NotRun);
        assert!(r.failed());
        let json: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(json["clauses"][0]["id"], "LOCK-1");
        assert_eq!(json["clauses"][0]["verdict"], "not-run");
        assert!(r.markdown().contains("| RUN-6 | **FAIL** | kill |"));
        let junit = r.junit();
        assert!(
            junit.contains("<testsuite name=\"clauses\"") && junit.contains("failures=\"1\""),
            "{junit}"
        );
    }
}
