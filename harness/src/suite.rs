//! `harness run`: the conformance suite. Validates every scenario file before anything starts,
//! runs them one by one with a progress bar, folds in the elector's own test results (from
//! nextest's JUnit file), and writes the report.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Args;
use tokio::time::Instant;

use crate::check::{Check, Measure, Verdict};
use crate::report::{ClauseVerdict, Report, Source};
use crate::scenario::run::{self, RunOptions};
use crate::scenario::Scenario;
use crate::topology::Images;

/// The flags of `harness run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Scenario names or files to run (default: every `*.toml` in `--scenarios`).
    pub scenarios: Vec<String>,
    /// The folder of scenario files.
    #[arg(long, default_value_os_t = run::default_dir())]
    pub scenarios_dir: PathBuf,
    /// The check interval T (`200ms`, `1s`: a unit is required), 50 ms to 10 min.
    #[arg(long = "t", default_value = "200ms", value_parser = crate::flags::check_interval)]
    pub t: Duration,
    /// The seed of every random choice (default: random, printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Where the report and the evidence go.
    #[arg(long, default_value = "target/conformance")]
    pub out: PathBuf,
    /// nextest's JUnit file of the elector's tests, whose clause IDs (in their doc comments)
    /// join the report.
    #[arg(long)]
    pub elector_junit: Option<PathBuf>,
    /// Scheduling noise allowed on top of each bound (small against T; less than T).
    #[arg(long, default_value = "50ms", value_parser = crate::flags::duration)]
    pub slack: Duration,
    /// Runs every scenario this many times: a clause passes only if every run holds, and each
    /// figure is reported as the median and max over the runs.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub repeat: u16,
    /// Images (default: `ELECTOR_*_IMAGE`, else upstream).
    #[command(flatten)]
    pub images: crate::topology::images::ImageArgs,
    /// The replica program (default: the harness's own replica).
    #[command(flatten)]
    pub program: crate::replica::program::ProgramArgs,
    /// Compares implementations: runs every scenario with each and writes one report.html with
    /// a column per implementation (each one's own report in `<out>/<NAME>/`). Repeat it:
    /// `ours` (the harness's own replica), `NAME=CMD` (a program at level 1) or
    /// `NAME:LEVEL=CMD`.
    #[arg(long = "impl", value_name = "IMPL", conflicts_with = "replica_cmd")]
    pub implementations: Vec<String>,
    /// X-PGVER: runs every scenario on each PostgreSQL major given (`13,15,17`: the images
    /// `ci/build-images.sh --pg 13,15,17` builds, each with its Debian release's PgBouncer) and
    /// writes one report.html with a column per version (each version's own report in
    /// `<out>/pg<V>/`). `--elector-junit` is the elector's tests on 15: they decide the 15
    /// column's in-process clauses. Each version's images: `ELECTOR_POSTGRES_<V>_IMAGE` and
    /// `ELECTOR_PGBOUNCER_<V>_IMAGE` (15: the usual image flags), else the local build, else
    /// upstream.
    #[arg(
        long = "pg",
        value_name = "VERSIONS",
        value_delimiter = ',',
        conflicts_with = "implementations"
    )]
    pub pg: Vec<u32>,
}

impl RunArgs {
    /// The rules between flags (each flag's own range is checked as it is parsed).
    ///
    /// # Errors
    /// `--slack` is not less than `--t`.
    pub fn validate(&self) -> anyhow::Result<()> {
        if let Some(v) = self
            .pg
            .iter()
            .find(|v| testkit::images::Major::of(**v).is_none())
        {
            bail!(
                "--pg {v}: PostgreSQL {v} is not in the matrix; its majors are {}",
                crate::matrix::majors()
            );
        }
        if self.slack >= self.t {
            bail!(
                "--slack {} is not less than --t {}: the slack is scheduling noise, small against T",
                humantime::format_duration(self.slack),
                humantime::format_duration(self.t)
            );
        }
        Ok(())
    }
}

/// Finds the scenario files named on the command line (or all of them), validated.
pub fn load(args: &RunArgs) -> anyhow::Result<Vec<Scenario>> {
    load_from(&args.scenarios, &args.scenarios_dir)
}

/// The scenario files `names` (names in `dir`, or paths; all of `dir`'s when empty), validated.
///
/// # Errors
/// A file cannot be read or is not a valid scenario, or there is none.
pub fn load_from(names: &[String], dir: &Path) -> anyhow::Result<Vec<Scenario>> {
    let mut files: Vec<PathBuf> = if names.is_empty() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml") && !p.ends_with("Cargo.toml"))
            .collect();
        v.sort();
        v
    } else {
        names
            .iter()
            .map(|s| {
                let p = PathBuf::from(s);
                if p.exists() {
                    p
                } else {
                    dir.join(format!("{s}.toml"))
                }
            })
            .collect()
    };
    files.dedup();
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for f in files {
        match Scenario::load(&f) {
            Ok(s) => out.push(s),
            Err(e) => errors.push(e.to_string()),
        }
    }
    if !errors.is_empty() {
        bail!("invalid scenario file(s):\n  {}", errors.join("\n  "));
    }
    if out.is_empty() {
        bail!("no scenario files in {}", dir.display());
    }
    Ok(out)
}

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
        name: "elector tests".into(),
        seconds,
        checks,
        evidence: None,
    })
}

/// For another program than the harness's own replica: the clauses the elector's tests decide,
/// not run (an in-process test decides them for the Rust crate only), so that a clause no
/// scenario can decide says why.
fn in_process_only() -> Source {
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
        name: "elector tests (in-process)".into(),
        seconds: 0.0,
        checks: vec![check.with_clauses(&ids)],
        evidence: None,
    }
}

/// `(test fn, clause IDs)` of every elector test, from the doc comment above each test.
pub fn elector_test_clauses() -> Vec<(String, Vec<String>)> {
    const SOURCES: [&str; 21] = [
        include_str!("../../elector/tests/it/config.rs"),
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

/// Runs the suite; the exit code is non-zero when any clause fails.
pub async fn main(args: RunArgs) -> anyhow::Result<ExitCode> {
    args.validate()?;
    let scenarios = load(&args)?;
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..));
    let images = Images::from(&args.images);
    let binary = std::env::current_exe().context("locating the harness binary")?;
    if !args.implementations.is_empty() {
        return compare(&args, &scenarios, seed, &binary).await;
    }
    if !args.pg.is_empty() {
        return crate::matrix::run(&args, &scenarios, seed, args.program.program(binary)?).await;
    }
    let opts = RunOptions {
        t: args.t,
        seed,
        out: args.out.clone(),
        program: args.program.program(binary)?,
        images,
        slack: args.slack,
        repeat: 1,
    };
    let repeat = usize::from(args.repeat);
    eprintln!(
        "harness run: {} scenario(s){}, T = {:?}, seed {seed}, output in {}",
        scenarios.len(),
        if repeat > 1 {
            format!(" x {repeat}")
        } else {
            String::new()
        },
        args.t,
        args.out.display()
    );
    let report = report_of(&args, &scenarios, &opts).await?;
    report.write(&args.out)?;
    print_summary(&report);
    println!("{}", report.summary_line());
    println!("report: {}", args.out.join("report.md").display());
    Ok(if report.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The report of every scenario run `--repeat` times with `opts.program`. The elector's tests
/// (`--elector-junit`) decide the in-process clauses of the harness's own replica only: for
/// another program those clauses are not run.
async fn report_of(
    args: &RunArgs,
    scenarios: &[Scenario],
    opts: &RunOptions,
) -> anyhow::Result<Report> {
    let began = Instant::now();
    let mut sources = Vec::new();
    match (&args.elector_junit, opts.program.is_ours()) {
        (Some(junit), true) => sources.push(elector_tests(junit)?),
        (_, false) => sources.push(in_process_only()),
        (None, true) => {}
    }
    sources.extend(run_all(scenarios, opts, usize::from(args.repeat)).await);
    Ok(Report::new(
        args.t.as_millis() as u64,
        opts.seed,
        began.elapsed().as_secs_f64(),
        sources,
    ))
}

/// `harness run --impl ...`: the scenarios with each implementation in turn, each report in
/// `<out>/<name>/`, and the comparison in `<out>/`.
async fn compare(
    args: &RunArgs,
    scenarios: &[Scenario],
    seed: u64,
    binary: &Path,
) -> anyhow::Result<ExitCode> {
    use crate::replica::program::Implementation;
    use crate::report::compare::{self, Comparison};
    let impls: Vec<Implementation> = (args.implementations.iter())
        .map(|text| Implementation::parse(text, binary))
        .collect::<anyhow::Result<_>>()?;
    let mut names: Vec<&str> = impls.iter().map(|i| i.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        bail!("--impl {}: two implementations of one name", w[0]);
    }
    let mut implementations = Vec::new();
    for i in impls {
        eprintln!("harness run: {} ({})", i.name, i.program.summary());
        let opts = RunOptions {
            t: args.t,
            seed,
            out: args.out.join(&i.name),
            program: i.program.clone(),
            images: Images::from(&args.images),
            slack: args.slack,
            repeat: 1,
        };
        let report = report_of(args, scenarios, &opts).await?;
        implementations.push(compare::Implementation {
            name: i.name,
            program: i.program.summary(),
            report,
        });
    }
    conclude(&Comparison { implementations }, &args.out)
}

/// Writes `comparison` to `out`, prints its summary lines, and exits non-zero when any column
/// failed a clause.
pub(crate) fn conclude(
    comparison: &crate::report::compare::Comparison,
    out: &Path,
) -> anyhow::Result<ExitCode> {
    comparison.write(out)?;
    for line in comparison.summary_lines() {
        println!("{line}");
    }
    println!("report: {}", out.join("report.html").display());
    Ok(if comparison.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Runs every scenario `repeat` times, one after another, with a progress bar; one source per
/// scenario, its runs merged.
pub(crate) async fn run_all(
    scenarios: &[Scenario],
    opts: &RunOptions,
    repeat: usize,
) -> Vec<Source> {
    let bar = indicatif::ProgressBar::new((scenarios.len() * repeat) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("template")
            .progress_chars("=> "),
    );
    let mut sources = Vec::new();
    for s in scenarios {
        let mut runs = Vec::with_capacity(repeat);
        for i in 1..=repeat {
            bar.set_message(if repeat > 1 {
                format!("{} ({i}/{repeat})", s.name)
            } else {
                s.name.clone()
            });
            let opts = RunOptions {
                repeat: i,
                ..opts.clone()
            };
            runs.push(run_one(s, &opts).await);
            bar.inc(1);
        }
        let source = merge_repeats(runs);
        bar.println(format!(
            "{:<40} {} ({:.1} s)",
            source.name,
            if source.not_run() {
                "not-run"
            } else if source.passed() {
                "pass"
            } else {
                "FAIL"
            },
            source.seconds
        ));
        sources.push(source);
    }
    bar.finish_and_clear();
    sources
}

/// Runs one scenario once; a run that could not complete is a failed check of its clauses. A
/// scenario whose steps the replica program cannot play is not run: its clauses say what it
/// would need.
async fn run_one(s: &Scenario, opts: &RunOptions) -> Source {
    let (level, ours) = s.observes(&opts.program);
    if let Some(need) = s.needs().filter(|n| !n.met_by(level, ours)) {
        return Source {
            name: s.name.clone(),
            seconds: 0.0,
            checks: vec![Check {
                needs: Some(need),
                ..Check::new(
                    "scenario ran",
                    &[],
                    Verdict::Unknown,
                    format!("not run: its steps need {need}; the program is at {level}"),
                )
            }
            .with_clauses(&s.clauses)],
            evidence: None,
        };
    }
    match run::run(s, opts).await {
        Ok(outcome) => outcome.source,
        Err(e) => Source {
            name: s.name.clone(),
            seconds: 0.0,
            checks: vec![Check {
                name: "scenario ran".into(),
                clauses: s.clauses.clone(),
                verdict: Verdict::Invalid,
                figures: Default::default(),
                message: format!("{e:#}"),
                measures: Vec::new(),
                needs: None,
            }],
            evidence: Some(opts.evidence_dir(&s.name)),
        },
    }
}

/// Folds the repeated runs of one scenario into one source: a check holds only if it held in
/// every run (the first failing run's message is kept, with its run number), and each figure
/// becomes `median …, max … (of N)` over the runs.
pub fn merge_repeats(mut runs: Vec<Source>) -> Source {
    if runs.len() <= 1 {
        return runs.pop().expect("at least one run");
    }
    let n = runs.len();
    let mut merged = runs[0].clone();
    merged.seconds = runs.iter().map(|r| r.seconds).sum();
    let mut names: Vec<String> = Vec::new();
    for r in &runs {
        for c in &r.checks {
            if !names.contains(&c.name) {
                names.push(c.name.clone());
            }
        }
    }
    merged.checks = names
        .iter()
        .map(|name| {
            let all: Vec<(usize, &Check)> = runs
                .iter()
                .enumerate()
                .filter_map(|(i, r)| r.checks.iter().find(|c| &c.name == name).map(|c| (i, c)))
                .collect();
            let mut check = all[0].1.clone();
            let failed = all.iter().find(|(_, c)| c.verdict == Verdict::Invalid);
            let unknown = all.iter().find(|(_, c)| c.verdict == Verdict::Unknown);
            if let Some((i, c)) = failed.or(unknown) {
                check.verdict = c.verdict;
                check.message = format!("run {} of {n}: {}", i + 1, c.message);
            } else if all.len() < n {
                check.verdict = Verdict::Invalid;
                check.message = format!("missing from {} of {n} runs", n - all.len());
            } else {
                check.message = format!("held in all {n} runs; first: {}", check.message);
            }
            check.measures = worst_measures(&all);
            check.figures = check
                .figures
                .keys()
                .map(|k| {
                    let values: Vec<&str> = all
                        .iter()
                        .filter_map(|(_, c)| c.figures.get(k).map(String::as_str))
                        .collect();
                    (k.clone(), summarise(&values))
                })
                .collect();
            check
        })
        .collect();
    merged
}

/// Each figure held to a bound, at its worst over the runs (closest to or furthest past its
/// bound), with the run that measured it.
fn worst_measures(all: &[(usize, &Check)]) -> Vec<Measure> {
    let mut worst: Vec<Measure> = Vec::new();
    for (i, c) in all {
        for m in &c.measures {
            let m = Measure {
                run: Some(i + 1),
                ..m.clone()
            };
            match (worst.iter_mut()).find(|w| w.what == m.what && w.worse == m.worse) {
                Some(w) if m.margin() < w.margin() => *w = m,
                Some(_) => {}
                None => worst.push(m),
            }
        }
    }
    worst
}

/// `median 1.04T, max 1.10T (of 5)` for figures that are numbers (with or without a `T`
/// suffix); the values joined by `/` otherwise.
fn summarise(values: &[&str]) -> String {
    let unit = if values.iter().all(|v| v.ends_with('T')) {
        "T"
    } else {
        ""
    };
    let mut nums: Vec<f64> = values
        .iter()
        .filter_map(|v| v.trim_end_matches('T').parse::<f64>().ok())
        .collect();
    if nums.len() != values.len() || nums.is_empty() {
        return values.join(" / ");
    }
    nums.sort_by(f64::total_cmp);
    let median = if nums.len() % 2 == 1 {
        nums[nums.len() / 2]
    } else {
        (nums[nums.len() / 2 - 1] + nums[nums.len() / 2]) / 2.0
    };
    let max = nums[nums.len() - 1];
    let fmt = |v: f64| {
        if unit == "T" {
            format!("{v:.2}T")
        } else if v.fract() == 0.0 {
            format!("{v}")
        } else {
            format!("{v:.2}")
        }
    };
    format!(
        "median {}, max {} (of {})",
        fmt(median),
        fmt(max),
        nums.len()
    )
}

/// The first two deciders and how many more (the full list is in the report).
fn decided_by(names: &str) -> String {
    let all: Vec<&str> = names.split(", ").filter(|n| !n.is_empty()).collect();
    if all.len() <= 2 {
        all.join(", ")
    } else {
        format!("{}, {} +{} more", all[0], all[1], all.len() - 2)
    }
}

fn print_summary(report: &Report) {
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_BORDERS_ONLY);
    table.set_header(vec!["clause", "verdict", "decided by", "deciding figure"]);
    for c in &report.clauses {
        let mut figures: String = (c.deciding.as_ref()).map_or(String::new(), |d| d.text.clone());
        if figures.chars().count() > 70 {
            figures = figures.chars().take(67).collect();
            figures.push_str("...");
        }
        table.add_row(vec![
            c.id.clone(),
            match c.verdict {
                ClauseVerdict::Fail => "FAIL".into(),
                _ => c.verdict_text(),
            },
            decided_by(c.scenario.as_deref().unwrap_or_default()),
            figures,
        ]);
    }
    println!("{table}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Unit;

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

    fn source(figure: &str, verdict: Verdict) -> Source {
        Source {
            name: "s".into(),
            seconds: 1.0,
            checks: vec![Check {
                name: "demoted".into(),
                clauses: vec!["DEM-2".into()],
                verdict,
                figures: [("demoted after".to_owned(), figure.to_owned())].into(),
                message: "ok".into(),
                measures: Vec::new(),
                needs: None,
            }],
            evidence: None,
        }
    }

    #[test]
    fn repeats_give_median_and_max_and_any_failure_fails() {
        let merged = merge_repeats(vec![
            source("1.10T", Verdict::Valid),
            source("0.90T", Verdict::Valid),
            source("1.04T", Verdict::Valid),
        ]);
        assert_eq!(merged.seconds, 3.0);
        let c = &merged.checks[0];
        assert_eq!(c.verdict, Verdict::Valid);
        assert_eq!(c.figures["demoted after"], "median 1.04T, max 1.10T (of 3)");
        let merged = merge_repeats(vec![
            source("1.00T", Verdict::Valid),
            source("2.50T", Verdict::Invalid),
        ]);
        assert_eq!(merged.checks[0].verdict, Verdict::Invalid);
        assert!(merged.checks[0].message.starts_with("run 2 of 2"));
        assert_eq!(
            summarise(&["3", "1", "2", "10"]),
            "median 2.50, max 10 (of 4)"
        );
        assert_eq!(summarise(&["a", "b"]), "a / b");
    }

    #[test]
    fn repeats_keep_each_bounded_figure_at_its_worst_with_its_run() {
        let with = |v: f64| {
            let mut s = source(&format!("{v}T"), Verdict::Valid);
            let m = Measure::at_most("demoted after cut".into(), Some(v), 2.0, Unit::T);
            s.checks[0].measures.push(m);
            s
        };
        let merged = merge_repeats(vec![with(1.2), with(1.9), with(0.8)]);
        let m = &merged.checks[0].measures;
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].value, m[0].run), (Some(1.9), Some(2)));
    }
}
