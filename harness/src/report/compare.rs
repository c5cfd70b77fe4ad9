//! One report for several implementations, as Autobahn|Testsuite reports every case for every
//! implementation: each implementation's own report goes to `<out>/<name>/` (report.md,
//! report.json, junit.xml, report.html and its evidence), and the comparison to `<out>/`:
//! `report.html` (a row per clause, a column per implementation, each cell the verdict linking
//! to the evidence that decided it), `comparison.md` and `comparison.json`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::html::{esc, HEAD};
use super::{ClauseVerdict, Report};
use crate::clauses;

/// One implementation's report, under its name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Implementation {
    /// The name given on the command line (`--impl NAME...`).
    pub name: String,
    /// What it runs: `the harness's own replica`, or the command template and level.
    pub program: String,
    /// Its report (its folder is `<out>/<name>/`).
    pub report: Report,
}

/// One cell of the table: the verdict as the report says it, the verdict, and its link.
type Cell = (String, ClauseVerdict, String);

/// The comparison of several implementations over the same scenarios.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The implementations, in the command line's order.
    pub implementations: Vec<Implementation>,
}

impl Comparison {
    /// One line per implementation: its name and its report's summary line.
    pub fn summary_lines(&self) -> Vec<String> {
        (self.implementations.iter())
            .map(|i| format!("{}: {}", i.name, i.report.summary_line()))
            .collect()
    }

    /// Whether any implementation failed a clause.
    pub fn failed(&self) -> bool {
        self.implementations.iter().any(|i| i.report.failed())
    }

    /// Writes each implementation's report into `<dir>/<name>/`, then `report.html`,
    /// `comparison.md` (also as `report.md`), `comparison.json` and `junit.xml` (every
    /// implementation's suites, each name after `<name>: `) into `dir`.
    ///
    /// # Errors
    /// A file could not be written.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        for i in &self.implementations {
            i.report.write(&dir.join(&i.name))?;
        }
        std::fs::write(
            dir.join("comparison.json"),
            serde_json::to_string_pretty(self)?,
        )?;
        std::fs::write(dir.join("comparison.md"), self.markdown())?;
        std::fs::write(dir.join("report.md"), self.markdown())?;
        std::fs::write(dir.join("junit.xml"), self.junit())?;
        std::fs::write(dir.join("report.html"), self.html())
    }

    /// One JUnit file of every implementation's suites, each name after `<name>: `.
    pub fn junit(&self) -> String {
        let mut report = quick_junit::Report::new("conformance");
        for i in &self.implementations {
            report.add_test_suites(i.report.junit_suites(&format!("{}: ", i.name)));
        }
        report.to_string().unwrap_or_default()
    }

    /// Each clause's verdict per implementation, with the link of its cell: the evidence folder
    /// of the run that decided it, else the implementation's report.
    fn cells(&self) -> Vec<(String, Vec<Cell>)> {
        (clauses::all().into_iter())
            .map(|clause| {
                let cells = (self.implementations.iter())
                    .map(|i| {
                        let row = i.report.clauses.iter().find(|c| c.id == clause.id);
                        let (text, verdict) = row
                            .map_or(("not-run".into(), ClauseVerdict::NotRun), |r| {
                                (r.verdict_text(), r.verdict)
                            });
                        let evidence = row.and_then(|r| r.deciding.as_ref()?.evidence.clone());
                        let link = match evidence {
                            Some(ev) => format!("{}/{ev}/", i.name),
                            None => format!("{}/report.html", i.name),
                        };
                        (text, verdict, link)
                    })
                    .collect();
                (clause.id, cells)
            })
            .collect()
    }

    /// `comparison.md`: the summary lines, then the table.
    pub fn markdown(&self) -> String {
        let mut md = String::from("# Conformance: implementations side by side\n\n");
        for line in self.summary_lines() {
            md.push_str(&format!("- {line}\n"));
        }
        let names: Vec<&str> = self
            .implementations
            .iter()
            .map(|i| i.name.as_str())
            .collect();
        md.push_str(&format!("\n| clause | {} |\n|---|", names.join(" | ")));
        md.push_str(&"---|".repeat(names.len()));
        md.push('\n');
        for (id, cells) in self.cells() {
            let texts: Vec<String> = (cells.into_iter())
                .map(|(text, v, _)| match v {
                    ClauseVerdict::Fail => format!("**{text}**"),
                    _ => text,
                })
                .collect();
            md.push_str(&format!("| {id} | {} |\n", texts.join(" | ")));
        }
        md
    }

    /// `report.html`: a column per implementation, each cell its verdict linking to evidence.
    pub fn html(&self) -> String {
        let mut h = HEAD.replace(
            "<title>Conformance report: background leader</title>",
            "<title>Conformance: implementations side by side</title>",
        );
        h.push_str("<h1>Conformance: implementations side by side</h1>\n<ul>\n");
        for i in &self.implementations {
            let class = if i.report.failed() { "fail" } else { "pass" };
            h.push_str(&format!(
                "<li><a href=\"{0}/report.html\"><b>{0}</b></a> <span class=\"muted\">({1})\
                 </span>: <span class=\"badge {class}\">{2}</span></li>\n",
                esc(&i.name),
                esc(&i.program),
                esc(&i.report.summary_line())
            ));
        }
        h.push_str("</ul>\n<table>\n<tr><th>clause</th>");
        for i in &self.implementations {
            h.push_str(&format!("<th>{}</th>", esc(&i.name)));
        }
        h.push_str("</tr>\n");
        for (id, cells) in self.cells() {
            h.push_str(&format!("<tr><td><b>{}</b></td>", esc(&id)));
            for (text, verdict, link) in cells {
                h.push_str(&format!(
                    "<td><a href=\"{}\"><span class=\"badge {}\">{}</span></a></td>",
                    esc(&link),
                    verdict.as_str(),
                    esc(&text)
                ));
            }
            h.push_str("</tr>\n");
        }
        h.push_str("</table>\n</body>\n</html>\n");
        h
    }
}
