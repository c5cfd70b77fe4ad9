//! `report.md`: the verdict and the failing clauses first, then one row per clause with its
//! deciding figure against its bound and a link to the evidence, then each scenario's checks.

use super::{ClauseRow, ClauseVerdict, Report, Source};
use crate::check::Check;

impl Report {
    /// The Markdown report.
    pub fn markdown(&self) -> String {
        let mut md = String::from("# Conformance report: background leader\n\n");
        md.push_str(&format!("{}\n\n", self.headline()));
        md.push_str(
            "The timelines, with each checked bound drawn as a window, are in \
             [report.html](report.html).\n\n",
        );
        md.push_str(&self.failing_md());
        md.push_str(&self.flaky_md());
        md.push_str(&self.not_run_md());
        md.push_str(&self.clause_table_md());
        for t in &self.tables {
            md.push('\n');
            md.push_str(&t.markdown());
        }
        md.push_str("\n## Scenarios and suites\n\n");
        for s in self.sources.iter().chain(&self.extra_runs) {
            md.push_str(&source_md(s));
        }
        md
    }

    /// `**PASS**: 47 of 50 clauses pass, …`: the verdict, the counts and the run's settings.
    pub fn headline(&self) -> String {
        let (p, f, n) = self.counts();
        let failing = self.sources.iter().filter(|s| !s.passed()).count();
        let flaky = self.flaky_text();
        format!(
            "**{}**: {p} of {} clauses pass, {flaky}{f} fail, {n} not run · {} scenarios and \
             suites, {failing} failing · T = {} ms · seed {} · {:.0} s",
            if self.failed() { "FAIL" } else { "PASS" },
            self.clauses.len(),
            self.sources.len(),
            self.t_ms,
            self.seed,
            self.seconds
        )
    }

    fn failing_md(&self) -> String {
        let failing: Vec<&ClauseRow> = (self.clauses.iter())
            .filter(|c| c.verdict == ClauseVerdict::Fail)
            .collect();
        if failing.is_empty() {
            return String::new();
        }
        let mut md = String::from("## Failing clauses\n\n");
        for c in failing {
            md.push_str(&format!("- **{}**: {}\n", c.id, escape(&deciding_md(c))));
        }
        md.push('\n');
        md
    }

    /// Each flaky check: which runs missed within their own noise and which held, and every
    /// run's figure with its evidence folder.
    fn flaky_md(&self) -> String {
        let flaky: Vec<(&Source, &Check)> = (self.sources.iter())
            .flat_map(|s| s.checks.iter().filter(|c| c.flaky).map(move |c| (s, c)))
            .collect();
        if flaky.is_empty() {
            return String::new();
        }
        let mut md = String::from(
            "## Flaky clauses\n\nUndecided, not passed: runs of the scenario disagreed by a \
             liveness bound missed within the scheduling noise each run measured of itself \
             (`harness run` runs such a scenario again; a safety failure is never run again).\n\n",
        );
        for (s, c) in flaky {
            md.push_str(&format!(
                "- **{}** in {}: {}\n",
                c.clauses.join(", "),
                s.name,
                escape(&c.message)
            ));
            for m in &c.measures {
                let run = m.run.unwrap_or(1);
                let folder = super::evidence::Evidence::folder(&s.name, run);
                md.push_str(&format!(
                    "  - {} ([folder]({folder}/))\n",
                    escape(&m.to_string())
                ));
            }
        }
        md.push('\n');
        md
    }

    fn not_run_md(&self) -> String {
        let ids = ClauseRow::ids(&self.clauses, ClauseVerdict::NotRun);
        if ids.is_empty() {
            return String::new();
        }
        format!(
            "Not run (no scenario or test decides them): {}.\n\n",
            ids.join(", ")
        )
    }

    fn clause_table_md(&self) -> String {
        let mut md = String::from(
            "## Clauses\n\nEach row's figure is the failing check's, else the worst case \
             against its bound over every scenario and test that decided the clause; the \
             scenarios' own figures follow below.\n\n\
             | clause | verdict | deciding figure | decided by | evidence |\n\
             |---|---|---|---|---|\n",
        );
        for c in &self.clauses {
            let verdict = match c.verdict {
                ClauseVerdict::Fail => "**FAIL**".to_owned(),
                _ => c.verdict_text(),
            };
            let figure = c.deciding.as_ref().map_or("—".into(), |d| escape(&d.text));
            md.push_str(&format!(
                "| {} | {verdict} | {figure} | {} | {} |\n",
                c.id,
                decided_by(c),
                evidence_links(c)
            ));
        }
        md
    }
}

/// The deciding figure and where it was measured, for the failing list.
fn deciding_md(c: &ClauseRow) -> String {
    match &c.deciding {
        Some(d) => format!("{} in {} ({})", d.text, d.scenario, evidence_links(c)),
        None => c.notes.join("; "),
    }
}

/// The scenario of the deciding figure, and how many others decided the clause too.
fn decided_by(c: &ClauseRow) -> String {
    let Some(d) = &c.deciding else {
        return "—".into();
    };
    match c.other_deciders() {
        0 => d.scenario.clone(),
        n => format!("{} +{n} more", d.scenario),
    }
}

/// Links to the deciding run's timeline and evidence folder.
fn evidence_links(c: &ClauseRow) -> String {
    match c.deciding.as_ref().and_then(|d| d.evidence.as_ref()) {
        Some(ev) => format!("[timeline]({ev}/timeline.svg) · [folder]({ev}/)"),
        None => "—".into(),
    }
}

/// A scenario's section: its verdict, its evidence, and every check.
fn source_md(s: &Source) -> String {
    let mut md = format!(
        "### {} — {} ({:.1} s)\n\n",
        s.name,
        if s.passed() { "pass" } else { "FAIL" },
        s.seconds
    );
    if let Some(ev) = &s.evidence {
        md.push_str(&format!(
            "Evidence: [`{ev}/`]({ev}/), timeline: ![timeline]({ev}/timeline.svg)\n\n"
        ));
    }
    md.push_str("| check | clauses | verdict | figures | message |\n|---|---|---|---|---|\n");
    for c in &s.checks {
        md.push_str(&format!(
            "| {} | {} | {:?} | {} | {} |\n",
            escape(&c.name),
            c.clauses.join(", "),
            c.verdict,
            escape(&figures(c)),
            escape(&c.message)
        ));
    }
    md.push('\n');
    md
}

/// A check's figures: those held to a bound, else its text figures.
pub(super) fn figures(c: &Check) -> String {
    if c.measures.is_empty() {
        let figs: Vec<String> = c.figures.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        figs.join("; ")
    } else {
        let figs: Vec<String> = c.measures.iter().map(ToString::to_string).collect();
        figs.join("; ")
    }
}

fn escape(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}
