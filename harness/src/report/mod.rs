//! The conformance report: every clause ID with its verdict, the scenario or test that decided
//! it and its deciding figure against its bound, as `report.md` (`markdown`), `report.json`,
//! `junit.xml` and a self-contained `report.html` ([`html`]), plus one evidence folder per
//! scenario run ([`evidence`]) with its SVG timeline ([`svg`]).
//!
//! The report only reads what the checks produced: their verdicts, their typed
//! [`Measure`]s, and the timeline pictures in the evidence folders.

pub mod compare;
pub mod evidence;
pub mod html;
mod markdown;
pub mod svg;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::check::{Check, Measure, Verdict};
use crate::clauses;
use crate::level::Need;
use evidence::Evidence;

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
    /// No check failed it, and runs of a scenario disagreed on it by near misses alone: a
    /// liveness bound missed within the run's own noise in some, held in others
    /// ([`Check::flaky`]). Undecided, never a pass.
    Flaky,
}

impl ClauseVerdict {
    /// The word used in the report.
    pub fn as_str(&self) -> &'static str {
        match self {
            ClauseVerdict::Pass => "pass",
            ClauseVerdict::Fail => "fail",
            ClauseVerdict::NotRun => "not-run",
            ClauseVerdict::Flaky => "flaky",
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
    /// The figure that decides the row: the worst case over every check that decided it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deciding: Option<Deciding>,
    /// For a clause not run because the replica program could not show what its checks read:
    /// the least it would need (the lowest contract level, else the harness's own replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs: Option<Need>,
}

impl ClauseRow {
    /// The verdict as a report cell says it, e.g. `not-run (needs level 3)`.
    pub fn verdict_text(&self) -> String {
        match (self.verdict, self.needs) {
            (ClauseVerdict::NotRun, Some(need)) => format!("not-run ({})", need.short()),
            (v, _) => v.as_str().to_owned(),
        }
    }

    /// How many scenarios or tests decided the clause besides the deciding figure's.
    pub fn other_deciders(&self) -> usize {
        let deciding = self.deciding.as_ref().map(|d| d.scenario.as_str());
        (self.scenario.iter())
            .flat_map(|all| all.split(", "))
            .filter(|n| Some(*n) != deciding)
            .count()
    }

    /// The IDs of the clauses with this verdict, in the spec's order.
    pub fn ids(rows: &[ClauseRow], verdict: ClauseVerdict) -> Vec<&str> {
        (rows.iter())
            .filter(|c| c.verdict == verdict)
            .map(|c| c.id.as_str())
            .collect()
    }
}

/// A clause's deciding figure: the failing check's, else the figure closest to (or furthest
/// past) its bound, with where it was measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Deciding {
    /// The scenario or suite that measured it.
    pub scenario: String,
    /// The check that measured it.
    pub check: String,
    /// That check's verdict.
    pub verdict: Verdict,
    /// The figure against its bound; `None` when the check holds no figure to a bound (an
    /// elector test, a log line).
    pub measure: Option<Measure>,
    /// The figure as the report prints it, e.g. `demoted after cut 1.86T, bound ≤ 2T`.
    pub text: String,
    /// The evidence folder of the run that measured it, relative to the report.
    pub evidence: Option<String>,
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
    /// Whether every check held (unknown counts as not held, unless the check was not run for
    /// what the replica program lacks: see [`not_run`](Self::not_run)).
    pub fn passed(&self) -> bool {
        (self.checks.iter()).all(|c| c.verdict == Verdict::Valid || c.needs.is_some())
    }

    /// Whether it did not pass only for checks its runs disagreed on by near misses
    /// ([`Check::flaky`]).
    pub fn flaky(&self) -> bool {
        (self.checks.iter()).any(|c| c.flaky)
            && (self.checks.iter())
                .all(|c| c.flaky || c.verdict == Verdict::Valid || c.needs.is_some())
    }

    /// Whether none of its checks ran, for what the replica program lacks.
    pub fn not_run(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c.needs.is_some())
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
    /// Further runs shown after the scenarios (e.g. chaos runs), each with its checks and its
    /// evidence folder's timeline; they decide no clause.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_runs: Vec<Source>,
    /// Tables a run adds after the clauses (chaos's fault coverage); they decide no clause.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables: Vec<Table>,
}

/// A table a run adds to its report (e.g. which faults a chaos run played, at which role, in
/// which phase), shown in `report.md` and `report.html` after the clauses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Table {
    /// Its heading.
    pub title: String,
    /// A sentence under the heading: what it counts, what it found.
    pub note: String,
    /// The column headings.
    pub columns: Vec<String>,
    /// The rows, a cell per column.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// As Markdown: its heading, its note and the table (also what a terminal prints).
    pub fn markdown(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut md = format!("## {}\n\n{}\n\n", self.title, self.note);
        md.push_str(&line(&self.columns));
        md.push_str(&line(&vec!["---".to_owned(); self.columns.len()]));
        for r in &self.rows {
            md.push_str(&line(r));
        }
        md
    }
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
            extra_runs: Vec::new(),
            tables: Vec::new(),
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

    /// How many clauses are flaky ([`ClauseVerdict::Flaky`]).
    pub fn flaky(&self) -> usize {
        (self.clauses.iter())
            .filter(|c| c.verdict == ClauseVerdict::Flaky)
            .count()
    }

    /// `1 flaky, ` when a clause is flaky, else nothing: what the summary line and the
    /// headline say before the failed count.
    pub(crate) fn flaky_text(&self) -> String {
        match self.flaky() {
            0 => String::new(),
            k => format!("{k} flaky, "),
        }
    }

    /// The one-line summary, e.g. `47 passed, 0 failed, 3 not-run (50 clauses) …`, with
    /// `1 flaky, ` before the failed count when a clause is.
    pub fn summary_line(&self) -> String {
        let (p, f, n) = self.counts();
        let flaky = self.flaky_text();
        let scen_failed = self.sources.iter().filter(|s| !s.passed()).count();
        format!(
            "{p} passed, {flaky}{f} failed, {n} not-run ({} clauses); {} scenario(s)/suite(s), {scen_failed} failing; T = {} ms, seed {}, {:.0} s",
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

    /// Whether a scenario did not run because its servers could not start (the run exits 3
    /// then, unless a clause failed: [`crate::exit::of_run`]).
    pub fn setup_failed(&self) -> bool {
        self.setup_failures().next().is_some()
    }

    /// Each scenario that did not run because its servers could not start, with why.
    pub fn setup_failures(&self) -> impl Iterator<Item = (&str, &str)> {
        (self.sources.iter()).flat_map(|s| {
            (s.checks.iter())
                .filter(|c| c.needs == Some(crate::level::Need::Setup))
                .map(|c| (s.name.as_str(), c.message.as_str()))
        })
    }

    /// The JUnit XML: a suite per scenario (a case per check) and a suite of clauses.
    pub fn junit(&self) -> String {
        let mut report = quick_junit::Report::new("conformance");
        report.add_test_suites(self.junit_suites(""));
        report.to_string().unwrap_or_default()
    }

    /// [`Report::junit`]'s suites, each name after `prefix` (a comparison's column).
    pub fn junit_suites(&self, prefix: &str) -> Vec<quick_junit::TestSuite> {
        use quick_junit::{NonSuccessKind, TestCase, TestCaseStatus, TestSuite};
        let mut suites = Vec::new();
        for s in &self.sources {
            let mut suite = TestSuite::new(format!("{prefix}{}", s.name));
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
            suites.push(suite);
        }
        let mut suite = TestSuite::new(format!("{prefix}clauses"));
        for c in &self.clauses {
            let status = match c.verdict {
                ClauseVerdict::Pass => TestCaseStatus::success(),
                ClauseVerdict::Fail => {
                    let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    st.set_message(c.notes.join("; "));
                    st
                }
                ClauseVerdict::Flaky => {
                    let mut st = TestCaseStatus::skipped();
                    st.set_message(format!("flaky: {}", c.notes.join("; ")));
                    st
                }
                ClauseVerdict::NotRun => {
                    let mut st = TestCaseStatus::skipped();
                    st.set_message(c.needs.map_or_else(
                        || "no scenario or test decides this clause".to_owned(),
                        |n| format!("not run: {}", n.short()),
                    ));
                    st
                }
            };
            suite.add_test_case(TestCase::new(c.id.as_str(), status));
        }
        suites.push(suite);
        suites
    }

    /// Writes `report.md`, `report.json`, `junit.xml` and `report.html` into `dir`; the HTML
    /// inlines each run's `timeline.svg` from its evidence folder under `dir`.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("report.md"), self.markdown())?;
        std::fs::write(dir.join("report.json"), serde_json::to_string_pretty(self)?)?;
        std::fs::write(dir.join("junit.xml"), self.junit())?;
        std::fs::write(dir.join("report.html"), html::page(self, dir))
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
    } else if found.iter().any(|(_, c)| c.flaky) {
        ClauseVerdict::Flaky
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
        deciding: deciding(&decided),
        needs: (verdict == ClauseVerdict::NotRun)
            .then(|| least_need(found))
            .flatten(),
    }
}

/// The least of what the checks in `found` needed and lacked: the lowest level, else the
/// harness's own replica.
fn least_need(found: &[(&Source, &Check)]) -> Option<Need> {
    (found.iter())
        .filter_map(|(_, c)| c.needs)
        .min_by_key(|n| n.rank())
}

/// The worst case over the `decided` checks: a failed check before a held one, a broken
/// figure before a held one, a figure before a check that holds none, then the smallest margin.
fn deciding(decided: &[(&Source, &Check)]) -> Option<Deciding> {
    let candidates = decided.iter().flat_map(|(s, c)| {
        let measures: Vec<Option<&Measure>> = if c.measures.is_empty() {
            vec![None]
        } else {
            c.measures.iter().map(Some).collect()
        };
        measures.into_iter().map(move |m| (*s, *c, m))
    });
    let rank = |(_, c, m): &(&Source, &Check, Option<&Measure>)| {
        let failed = c.verdict != Verdict::Invalid;
        let kind = m.map_or(2, |m| u8::from(m.held()));
        (failed, kind, m.map_or(f64::INFINITY, Measure::margin))
    };
    let (s, c, m) = candidates.min_by(|a, b| {
        let (x, y) = (rank(a), rank(b));
        (x.0, x.1).cmp(&(y.0, y.1)).then(x.2.total_cmp(&y.2))
    })?;
    let evidence = match m.and_then(|m| m.run) {
        Some(run) if run > 1 => Some(Evidence::folder(&s.name, run)),
        _ => s.evidence.clone(),
    };
    let text = match m {
        Some(m) => m.to_string(),
        None if c.verdict == Verdict::Valid => format!("{}: held", c.name),
        None => format!("{}: failed", c.name),
    };
    Some(Deciding {
        scenario: s.name.clone(),
        check: c.name.clone(),
        verdict: c.verdict,
        measure: m.cloned(),
        text,
        evidence,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Unit;

    fn check(clause: &str, verdict: Verdict) -> Check {
        Check {
            name: format!("check of {clause}"),
            clauses: vec![clause.into()],
            verdict,
            figures: [("demoted after".to_owned(), "1.04T".to_owned())].into(),
            message: "m".into(),
            measures: Vec::new(),
            needs: None,
            flaky: false,
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
        let md = r.markdown();
        assert!(
            md.contains("| RUN-6 | **FAIL** | check of RUN-6: failed | kill | — |"),
            "{md}"
        );
        assert!(
            md.contains("## Failing clauses\n\n- **RUN-6**: check of RUN-6: failed in kill"),
            "{md}"
        );
        let junit = r.junit();
        assert!(
            junit.contains("<testsuite name=\"clauses\"") && junit.contains("failures=\"1\""),
            "{junit}"
        );
    }

    /// A source `name` whose check of DEM-2 measured `value` T against a bound of 2T.
    fn demoted(name: &str, value: f64, verdict: Verdict, run: Option<usize>) -> Source {
        let m = Measure {
            run,
            ..Measure::at_most("demoted after cut".into(), Some(value), 2.0, Unit::T)
        };
        Source {
            name: name.into(),
            seconds: 1.0,
            checks: vec![check("DEM-2", verdict).measure(m)],
            evidence: Some(evidence::Evidence::folder(name, 1)),
        }
    }

    #[test]
    fn the_deciding_figure_is_the_worst_case_and_links_its_evidence() {
        let sources = vec![
            demoted("a", 1.2, Verdict::Valid, None),
            demoted("b", 1.86, Verdict::Valid, None),
            demoted("c", 0.9, Verdict::Valid, None),
        ];
        let r = Report::new(200, 7, 3.0, sources);
        let row = r.clauses.iter().find(|c| c.id == "DEM-2").unwrap();
        let d = row.deciding.as_ref().unwrap();
        assert_eq!(
            (d.scenario.as_str(), d.text.as_str()),
            ("b", "demoted after cut 1.86T, bound ≤ 2T")
        );
        assert_eq!(d.evidence.as_deref(), Some("scenarios/b"));
        let md = r.markdown();
        assert!(
            md.contains(
                "| DEM-2 | pass | demoted after cut 1.86T, bound ≤ 2T | b +2 more | \
                 [timeline](scenarios/b/timeline.svg) · [folder](scenarios/b/) |"
            ),
            "{md}"
        );
        let json = serde_json::to_value(&r).unwrap();
        let dem2 = &json["clauses"][row_index(&r, "DEM-2")];
        assert_eq!(dem2["deciding"]["measure"]["value"], 1.86);
        assert_eq!(dem2["deciding"]["measure"]["worse"], "above");
        assert_eq!(
            dem2["figures"].as_array().unwrap().len(),
            3,
            "kept as before"
        );

        // A failed check decides, whatever the others measured; a repeated run's figure
        // links that run's folder.
        let sources = vec![
            demoted("a", 1.95, Verdict::Valid, None),
            demoted("b", 2.4, Verdict::Invalid, Some(3)),
        ];
        let r = Report::new(200, 7, 3.0, sources);
        let d = r.clauses[row_index(&r, "DEM-2")].deciding.clone().unwrap();
        assert_eq!(d.scenario, "b");
        assert_eq!(d.evidence.as_deref(), Some("scenarios/b.3"));
        assert_eq!(
            d.text,
            "demoted after cut 2.4T, bound ≤ 2T (broken) in run 3"
        );
    }

    fn row_index(r: &Report, id: &str) -> usize {
        r.clauses.iter().position(|c| c.id == id).unwrap()
    }
}
