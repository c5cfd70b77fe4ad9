//! `report.html`: the whole report as one self-contained page for a CI artifact viewer: the
//! verdict, the failing clauses, the clause table with each deciding figure against its bound,
//! then a section per run with its timeline inline and its checks. No script, no stylesheet or
//! image from elsewhere: everything it shows is in the file.

use std::path::Path;

use super::markdown::figures;
use super::{ClauseRow, ClauseVerdict, Report, Source};
use crate::check::{Measure, Unit, Verdict, Worse};

/// One run's section: its checks and, when its evidence folder holds one, its timeline.
#[derive(Clone, Debug)]
pub struct RunView<'a> {
    /// The run (a scenario, a test suite, a chaos run).
    pub source: &'a Source,
    /// Its `timeline.svg`, as written to its evidence folder.
    pub timeline: Option<String>,
}

/// A titled list of runs: the scenarios and suites, and any further runs (chaos runs).
#[derive(Clone, Debug)]
pub struct Group<'a> {
    /// The section's heading.
    pub title: &'a str,
    /// The prefix of its runs' anchors (`#<id>-<name>`).
    pub id: &'a str,
    /// Its runs, in order.
    pub runs: Vec<RunView<'a>>,
}

/// The anchor id of the scenarios' group: the clause table links to its runs.
const SCENARIOS: &str = "scenario";

/// The page of `report`, its runs' timelines read from their evidence folders under `dir`: the
/// scenarios and suites, then the report's extra runs.
pub fn page(report: &Report, dir: &Path) -> String {
    let mut groups = vec![Group {
        title: "Scenarios and suites",
        id: SCENARIOS,
        runs: views(&report.sources, dir),
    }];
    if !report.extra_runs.is_empty() {
        groups.push(Group {
            title: "Chaos and other runs",
            id: "run",
            runs: views(&report.extra_runs, dir),
        });
    }
    render(report, &groups)
}

/// Each source with the `timeline.svg` of its evidence folder under `dir`, if it has one.
pub fn views<'a>(sources: &'a [Source], dir: &Path) -> Vec<RunView<'a>> {
    (sources.iter())
        .map(|source| RunView {
            source,
            timeline: (source.evidence.as_ref())
                .and_then(|ev| std::fs::read_to_string(dir.join(ev).join("timeline.svg")).ok()),
        })
        .collect()
}

/// The page of `report` with these groups of runs below its clause table.
pub fn render(report: &Report, groups: &[Group]) -> String {
    let mut h = String::from(HEAD);
    h.push_str(&header(report));
    h.push_str(&failing(report));
    h.push_str(&clause_table(report));
    for t in &report.tables {
        h.push_str(&table(t));
    }
    for g in groups {
        h.push_str(&group(g));
    }
    h.push_str("</body>\n</html>\n");
    h
}

pub(super) const HEAD: &str = r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Conformance report: background leader</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin: 0 0 .3em; }
h2 { font-size: 1.15em; margin-top: 1.6em; }
.verdict { font-size: 1.1em; padding: .5em .8em; border-radius: 4px; display: inline-block; }
.verdict.pass { background: #e3f4e3; } .verdict.fail { background: #fbe1e1; }
.badge { font-weight: bold; padding: 0 .4em; border-radius: 3px; font-size: .85em; }
.badge.pass { background: #d4f0d4; color: #1a6b1a; }
.badge.fail { background: #f8cccc; color: #a00; }
.badge.not-run, .badge.unknown { background: #eee; color: #666; }
table { border-collapse: collapse; font-size: .88em; margin: .4em 0; }
th, td { border-bottom: 1px solid #e4e4e4; padding: .2em .6em; text-align: left; vertical-align: top; }
th { background: #f6f6f6; position: sticky; top: 0; }
tr.fail td { background: #fff2f2; }
.meter { display: inline-block; position: relative; width: 90px; height: 9px; background: #f0f0f0; }
.meter .fill { position: absolute; left: 0; top: 0; bottom: 0; }
.meter .edge { position: absolute; top: -2px; bottom: -2px; width: 2px; background: #333; }
.ok { background: #7cc47c; } .tight { background: #e8b04a; } .broken { background: #d9534f; }
.muted { color: #777; }
details.run { margin: .8em 0; border-top: 1px solid #ddd; padding-top: .4em; }
details.run > summary { cursor: pointer; font-size: 1.05em; }
.timeline svg { max-width: 100%; height: auto; border: 1px solid #eee; margin: .4em 0; }
</style>
</head>
<body>
"#;

/// A run's own table ([`super::Table`]): its heading, its note, the table.
fn table(t: &super::Table) -> String {
    let row = |cells: &[String], tag: &str| {
        let cells: String = (cells.iter())
            .map(|c| format!("<{tag}>{}</{tag}>", esc(c)))
            .collect();
        format!("<tr>{cells}</tr>\n")
    };
    let body: String = t.rows.iter().map(|r| row(r, "td")).collect();
    format!(
        "<h2>{}</h2>\n<p class=\"muted\">{}</p>\n<table>\n{}{body}</table>\n",
        esc(&t.title),
        esc(&t.note),
        row(&t.columns, "th")
    )
}

/// The verdict in large type, with the counts and the run's settings.
fn header(r: &Report) -> String {
    let (p, f, n) = r.counts();
    let failing = r.sources.iter().filter(|s| !s.passed()).count();
    let (class, word) = if r.failed() {
        ("fail", "FAIL")
    } else {
        ("pass", "PASS")
    };
    format!(
        "<h1>Conformance report: background leader</h1>\n\
         <p class=\"verdict {class}\"><b>{word}</b>: {p} of {} clauses pass, {f} fail, {n} not \
         run &middot; {} scenarios and suites, {failing} failing</p>\n\
         <p class=\"muted\">T = {} ms &middot; seed {} &middot; {:.0} s &middot; the same as \
         <code>report.md</code>, <code>report.json</code> and <code>junit.xml</code></p>\n",
        r.clauses.len(),
        r.sources.len(),
        r.t_ms,
        r.seed,
        r.seconds
    )
}

/// The failing clauses, each with its deciding figure and run (nothing when none fails), and
/// the clauses nothing decided.
fn failing(r: &Report) -> String {
    let rows: Vec<String> = (r.clauses.iter())
        .filter(|c| c.verdict == ClauseVerdict::Fail)
        .map(|c| {
            let figure = c.deciding.as_ref().map_or(c.notes.join("; "), |d| {
                format!("{} in {}", d.text, d.scenario)
            });
            format!("<li><b>{}</b>: {}</li>", esc(&c.id), esc(&figure))
        })
        .collect();
    let not_run = ClauseRow::ids(&r.clauses, ClauseVerdict::NotRun);
    let mut undecided = match not_run.is_empty() {
        true => String::new(),
        false => format!(
            "<p class=\"muted\">Not run (no scenario or test decides them): {}.</p>\n",
            esc(&not_run.join(", "))
        ),
    };
    let flaky = ClauseRow::ids(&r.clauses, ClauseVerdict::Flaky);
    if !flaky.is_empty() {
        undecided.push_str(&format!(
            "<p><b>Flaky</b> (undecided: runs disagreed by a bound missed within their own \
             noise; every run's figure is in report.md): {}.</p>\n",
            esc(&flaky.join(", "))
        ));
    }
    if rows.is_empty() {
        return undecided;
    }
    format!(
        "<h2>Failing clauses</h2>\n<ul>\n{}\n</ul>\n{undecided}",
        rows.join("\n")
    )
}

/// One row per clause: its verdict, its deciding figure against its bound, who decided it.
fn clause_table(r: &Report) -> String {
    let mut h = String::from(
        "<h2>Clauses</h2>\n<p class=\"muted\">Each row's figure is the failing check's, else \
         the worst case against its bound over every scenario and test that decided the clause. \
         The bar shows the figure (fill) against its bound (black edge).</p>\n<table>\n\
         <tr><th>clause</th><th>verdict</th><th>deciding figure</th><th></th>\
         <th>decided by</th><th>evidence</th></tr>\n",
    );
    let texts: std::collections::BTreeMap<String, String> = (crate::clauses::all().into_iter())
        .map(|c| (c.id, c.text))
        .collect();
    for c in &r.clauses {
        let text = texts.get(&c.id).map_or("", String::as_str);
        h.push_str(&clause_row(c, text));
    }
    h.push_str("</table>\n");
    h
}

/// A clause's row; `text` is the clause's statement (the ID's tooltip).
fn clause_row(c: &ClauseRow, text: &str) -> String {
    let verdict = c.verdict.as_str();
    let d = c.deciding.as_ref();
    let figure = d.map_or("—".into(), |d| esc(&d.text));
    let meter = d
        .and_then(|d| d.measure.as_ref())
        .map_or(String::new(), meter);
    let by = d.map_or("—".into(), |d| {
        let others = c.other_deciders();
        let more = if others > 0 {
            format!(" <span class=\"muted\">+{others} more</span>")
        } else {
            String::new()
        };
        let anchor = anchor(SCENARIOS, &d.scenario);
        format!("<a href=\"#{anchor}\">{}</a>{more}", esc(&d.scenario))
    });
    let evidence = d
        .and_then(|d| d.evidence.as_ref())
        .map_or("—".into(), |ev| {
            format!("<a href=\"{0}/\">{0}/</a>", esc(ev))
        });
    format!(
        "<tr class=\"{verdict}\"><td title=\"{}\"><b>{}</b></td><td><span class=\"badge \
         {verdict}\">{}</span></td><td>{figure}</td><td>{meter}</td><td>{by}</td>\
         <td>{evidence}</td></tr>\n",
        esc(&format!("{}: {text}", c.section)),
        esc(&c.id),
        esc(&c.verdict_text()),
    )
}

/// A small bar: the figure's fill against its bound's edge; red past it, amber for a delay
/// within 10 % of its bound (a count at its bound, such as one lock row, is as expected).
/// Nothing for a figure without a value or a zero bound.
fn meter(m: &Measure) -> String {
    let Some(v) = m.value else {
        return String::new();
    };
    let full = v.max(m.bound) * 1.25;
    if full <= 0.0 {
        return String::new();
    }
    let class = match (m.held(), m.margin()) {
        (false, _) => "broken",
        (true, x) if x < 0.1 && m.unit == Unit::T => "tight",
        _ => "ok",
    };
    let side = match m.worse {
        Worse::Above => "at most",
        Worse::Below => "at least",
    };
    format!(
        "<span class=\"meter\" title=\"{} {side} {}\"><span class=\"fill {class}\" \
         style=\"width:{:.0}%\"></span><span class=\"edge\" style=\"left:{:.0}%\"></span></span>",
        esc(&m.value_text()),
        esc(&m.unit.format(m.bound)),
        v / full * 100.0,
        m.bound / full * 100.0
    )
}

/// A group's heading and a collapsible section per run.
fn group(g: &Group) -> String {
    let mut h = format!("<h2>{}</h2>\n", esc(g.title));
    for run in &g.runs {
        h.push_str(&run_section(g.id, run));
    }
    h
}

fn run_section(id: &str, run: &RunView) -> String {
    let s = run.source;
    let (class, word) = if s.passed() {
        ("pass", "pass")
    } else {
        ("fail", "FAIL")
    };
    let evidence = s.evidence.as_ref().map_or(String::new(), |ev| {
        format!(" &middot; evidence: <a href=\"{0}/\">{0}/</a>", esc(ev))
    });
    let timeline = run.timeline.as_deref().map_or(String::new(), |svg| {
        format!("<div class=\"timeline\">{}</div>\n", inline_svg(svg))
    });
    let open = if run.timeline.is_some() || !s.passed() {
        " open"
    } else {
        ""
    };
    format!(
        "<details class=\"run\" id=\"{}\"{open}>\n<summary><span class=\"badge {class}\">{word}\
         </span> <b>{}</b> &middot; {:.1} s &middot; {} checks{evidence}</summary>\n\
         {timeline}{}</details>\n",
        anchor(id, &s.name),
        esc(&s.name),
        s.seconds,
        s.checks.len(),
        checks_table(s)
    )
}

fn checks_table(s: &Source) -> String {
    let mut h = String::from(
        "<table>\n<tr><th>check</th><th>clauses</th><th>verdict</th><th>figures</th>\
         <th>message</th></tr>\n",
    );
    for c in &s.checks {
        let verdict = match c.verdict {
            Verdict::Valid => "pass",
            Verdict::Invalid => "fail",
            Verdict::Unknown => "unknown",
        };
        h.push_str(&format!(
            "<tr class=\"{verdict}\"><td>{}</td><td>{}</td><td><span class=\"badge {verdict}\">\
             {verdict}</span></td><td>{}</td><td>{}</td></tr>\n",
            esc(&c.name),
            esc(&c.clauses.join(", ")),
            esc(&figures(c)),
            esc(&c.message)
        ));
    }
    h.push_str("</table>\n");
    h
}

/// An SVG document as an element of the page: HTML puts `<svg>` in its namespace by itself, so
/// the XML prolog and namespace declaration go (the page then names no address at all).
fn inline_svg(svg: &str) -> String {
    let start = svg.find("<svg").unwrap_or(0);
    svg[start..].replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1)
}

/// A run's anchor: the group's prefix and the run's name, with anything but letters and digits
/// as `-`.
fn anchor(prefix: &str, name: &str) -> String {
    let slug: String = (name.chars())
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("{prefix}-{slug}")
}

/// Text and attribute values, escaped.
pub(super) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::tests::ev;
    use crate::check::{Check, Window};
    use crate::event::ReplicaEvent;
    use crate::report::evidence::{Evidence, Record};
    use std::time::Duration;

    /// A check of DEM-2 that measured a demotion `value` T after a cut at 200 ms.
    fn demoted(value: f64, verdict: Verdict) -> Check {
        let m = Measure::at_most("demoted after cut".into(), Some(value), 2.0, Unit::T)
            .with_window(Window {
                from_ms: 200.0,
                bound_ms: 600.0,
                at_ms: Some(200.0 + value * 200.0),
            });
        Check::new("demoted by cut after cut", &["DEM-2"], verdict, "m".into()).measure(m)
    }

    /// A run `name` with its evidence folder `relative` written under `dir`.
    fn run(dir: &Path, relative: String, name: &str, check: Check) -> Source {
        let acquired = ReplicaEvent::Acquired {
            term: 1,
            backend_pid: 1,
        };
        let entries = [
            ev(0.0, "r1", acquired),
            ev(2000.0, "r2", ReplicaEvent::Ready),
        ];
        let checks = [check];
        let evidence = Evidence::create(dir, relative).unwrap();
        let record = Record {
            scenario: name,
            entries: &entries,
            replicas: &["r1".to_owned(), "r2".to_owned()],
            t: Duration::from_millis(200),
            checks: &checks,
            rows: &[],
        };
        evidence.write(&record).unwrap();
        Source {
            name: name.into(),
            seconds: 2.0,
            checks: checks.into(),
            evidence: Some(evidence.relative().to_owned()),
        }
    }

    #[test]
    fn the_page_is_one_file_with_every_clause_and_every_timeline() {
        let dir = std::env::temp_dir().join(format!("harness-html-{}", std::process::id()));
        let scenarios = ["leader-partition", "backend-kill"];
        let mut sources: Vec<Source> = (scenarios.iter())
            .map(|n| {
                run(
                    &dir,
                    Evidence::folder(n, 1),
                    n,
                    demoted(1.86, Verdict::Valid),
                )
            })
            .collect();
        let unit = Check::new("a <b> & c", &["RUN-7"], Verdict::Valid, "passed".into());
        sources.push(Source {
            name: "elector tests".into(),
            seconds: 1.0,
            checks: vec![unit],
            evidence: None,
        });
        let mut report = Report::new(200, 7, 9.0, sources);
        let chaos = run(
            &dir,
            "chaos/run-1".into(),
            "chaos run 1",
            demoted(2.5, Verdict::Invalid),
        );
        report.extra_runs.push(chaos);
        let html = page(&report, &dir);
        std::fs::remove_dir_all(&dir).ok();

        for c in crate::clauses::all() {
            assert!(html.contains(&format!("<b>{}</b>", c.id)), "{}", c.id);
        }
        for name in scenarios.iter().chain(&["chaos run 1"]) {
            assert!(
                html.contains(&format!("{name} — T = 200 ms")),
                "{name}'s timeline"
            );
        }
        assert_eq!(
            html.matches("<svg").count(),
            3,
            "one picture per run with evidence"
        );
        for outside in ["http", "src=", "<script", "<link", "url(", "@import"] {
            assert!(
                !html.contains(outside),
                "the page refers outside itself: {outside}"
            );
        }
        assert!(html.contains("a &lt;b&gt; &amp; c"), "text is escaped");
        assert!(html.contains("<h2>Chaos and other runs</h2>"));
        assert!(html.contains("<details class=\"run\" id=\"run-chaos-run-1\" open>"));
        assert!(
            html.contains("demoted after cut 1.86T, bound ≤ 2T</td>"),
            "the deciding figure"
        );
        assert!(html.contains("<a href=\"#scenario-leader-partition\">leader-partition</a>"));
        assert_eq!(
            html.matches("<details").count(),
            html.matches("</details>").count()
        );
    }

    #[test]
    fn a_failing_report_leads_with_its_failing_clauses() {
        let source = Source {
            name: "leader-partition".into(),
            seconds: 1.0,
            checks: vec![demoted(2.4, Verdict::Invalid)],
            evidence: None,
        };
        let report = Report::new(200, 7, 1.0, vec![source]);
        let html = render(&report, &[]);
        let verdict = html.find("<b>FAIL</b>").expect("the verdict");
        let failing = html
            .find("<h2>Failing clauses</h2>")
            .expect("the failing list");
        let table = html.find("<h2>Clauses</h2>").expect("the clause table");
        assert!(verdict < failing && failing < table);
        assert!(html.contains(
            "<li><b>DEM-2</b>: demoted after cut 2.4T, bound ≤ 2T (broken) in leader-partition</li>"
        ));
        assert!(
            html.contains("class=\"fill broken\""),
            "the bar shows it broken"
        );
    }
}
