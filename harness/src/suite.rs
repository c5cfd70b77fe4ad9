//! `harness run`: the conformance suite. Validates every scenario file before anything starts,
//! runs them one by one with a progress bar, folds in the elector's own test results (from
//! nextest's JUnit file), and writes the report.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Args;
use tokio::time::Instant;

use crate::check::{Check, Measure, Verdict};
use crate::exit::Failure;
use crate::level::Need;
use crate::replica::program::Program;
use crate::report::{ClauseVerdict, Report, Source};
use crate::scenario::run::{self, RunOptions};
use crate::scenario::Scenario;
use crate::topology::{Images, Teardowns};

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
    /// nextest's JUnit file of the elector's tests, whose verdicts join the report for the
    /// clauses `elector/tests/clauses.json` gives each test.
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
    /// Runs only the K-th of N shards of the scenarios (`2/3`), dealt out in turn in the order
    /// of their file names, for a suite spread over N machines; `harness report merge` joins
    /// the shards' output folders into one report. Every file is still validated.
    #[arg(long, value_name = "K/N", value_parser = crate::flags::shard)]
    pub shard: Option<crate::flags::Shard>,
    /// How many scenarios run at once, 1 to 4, each on servers and replicas of its own; one by
    /// default. A scenario behind a transaction-mode pooler or one that must show a hazard runs
    /// with no other at once; even so, two such scenarios missed what they show in runs at 2
    /// (docs/findings.md), so the main job runs one at a time.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=4))]
    pub jobs: u8,
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
            .find(|v| facts::images::Major::of(**v).is_none())
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
    let all = load_from(&args.scenarios, &args.scenarios_dir)?;
    let Some(shard) = args.shard else {
        return Ok(all);
    };
    let count = all.len();
    let mine: Vec<Scenario> = (all.into_iter().enumerate())
        .filter(|(i, _)| shard.holds(*i))
        .map(|(_, s)| s)
        .collect();
    if mine.is_empty() {
        bail!(
            "--shard {}/{}: there are {count} scenario(s), so this shard has none; use at most              {count} shards",
            shard.index,
            shard.count
        );
    }
    Ok(mine)
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

/// Runs the suite; the exit code is non-zero when any clause fails.
pub async fn main(args: RunArgs) -> anyhow::Result<ExitCode> {
    args.validate().context(Failure::Usage)?;
    let scenarios = load(&args).context(Failure::Usage)?;
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..));
    let images = Images::from(&args.images);
    let binary = std::env::current_exe().context("locating the harness binary")?;
    if !args.implementations.is_empty() {
        return compare(&args, &scenarios, seed, &binary).await;
    }
    if !args.pg.is_empty() {
        let program = args.program.program(binary).context(Failure::Usage)?;
        return versions(&args, &scenarios, seed, program).await;
    }
    let opts = RunOptions {
        t: args.t,
        seed,
        out: args.out.clone(),
        program: args.program.program(binary).context(Failure::Usage)?,
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
    print_summary(&report);
    conclude_report(&report, &args.out)
}

/// Writes `report` to `out`, prints its summary line, and exits non-zero when a clause failed.
pub(crate) fn conclude_report(report: &Report, out: &Path) -> anyhow::Result<ExitCode> {
    report.write(out).context(Failure::Report)?;
    let setup: Vec<(&str, &str)> = report.setup_failures().collect();
    if let Some((scenario, why)) = setup.first() {
        eprintln!(
            "harness run: {} scenario(s) not run, their servers could not start; {scenario}: {why}",
            setup.len()
        );
    }
    println!("{}", report.summary_line());
    println!("report: {}", out.join("report.md").display());
    Ok(crate::exit::of_run(report.failed(), report.setup_failed()))
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
        (Some(junit), true) => sources.push(crate::in_process::elector_tests(junit)?),
        (_, false) => sources.push(crate::in_process::in_process_only()),
        (None, true) => {}
    }
    sources.extend(
        run_all(
            scenarios,
            opts,
            usize::from(args.repeat),
            usize::from(args.jobs),
        )
        .await,
    );
    Ok(Report::new(
        report_t(scenarios, args.t).as_millis() as u64,
        opts.seed,
        began.elapsed().as_secs_f64(),
        sources,
    ))
}

/// The T a report names: the one every scenario ran at (a file may pin its own, as a recorded
/// incident does), else the run's `--t`.
fn report_t(scenarios: &[Scenario], t: Duration) -> Duration {
    let mut each = scenarios.iter().map(|s| s.interval(t));
    match each.next() {
        Some(first) if each.all(|other| other == first) => first,
        _ => t,
    }
}

/// `harness run --impl ...`: the scenarios with each implementation in turn, each report in
/// `<out>/<name>/`, and the comparison in `<out>/`.
async fn compare(
    args: &RunArgs,
    scenarios: &[Scenario],
    seed: u64,
    binary: &Path,
) -> anyhow::Result<ExitCode> {
    use crate::report::compare::{self, Comparison};
    let impls = crate::replica::program::implementations(&args.implementations, binary)
        .context(Failure::Usage)?;
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

/// `harness run --pg ...` (X-PGVER): the scenarios on each version in turn, each report in
/// `<out>/pg<V>/`, and the comparison, a column per version with X-PGVER decided
/// ([`crate::matrix`]), in `<out>/`.
///
/// # Errors
/// A version is not in the matrix, the elector's JUnit file cannot be read, or a report cannot
/// be written.
async fn versions(
    args: &RunArgs,
    scenarios: &[Scenario],
    seed: u64,
    program: Program,
) -> anyhow::Result<ExitCode> {
    use crate::report::compare::{Comparison, Implementation};
    let mut versions = args.pg.clone();
    versions.sort_unstable();
    versions.dedup();
    let mut columns = Vec::new();
    for &v in &versions {
        let images = crate::matrix::images(v, &Images::from(&args.images))?;
        eprintln!(
            "harness run: PostgreSQL {v} ({}, {})",
            images.postgres, images.pgbouncer
        );
        let opts = RunOptions {
            t: args.t,
            seed,
            out: args.out.join(format!("pg{v}")),
            program: program.clone(),
            images: images.clone(),
            slack: args.slack,
            repeat: 1,
        };
        let began = Instant::now();
        let junit = args.elector_junit.as_deref();
        let mut sources = vec![crate::matrix::in_process(junit, program.is_ours(), v)?];
        sources.extend(
            run_all(
                scenarios,
                &opts,
                usize::from(args.repeat),
                usize::from(args.jobs),
            )
            .await,
        );
        let report = Report::new(
            report_t(scenarios, args.t).as_millis() as u64,
            seed,
            began.elapsed().as_secs_f64(),
            sources,
        );
        columns.push(Implementation {
            name: format!("pg{v}"),
            program: format!(
                "PostgreSQL {v} ({}, {}); {}",
                images.postgres,
                images.pgbouncer,
                program.summary()
            ),
            report,
        });
    }
    crate::matrix::decide(&mut columns);
    conclude(
        &Comparison {
            implementations: columns,
        },
        &args.out,
    )
}

/// Writes `comparison` to `out`, prints its summary lines, and exits non-zero when any column
/// failed a clause.
pub(crate) fn conclude(
    comparison: &crate::report::compare::Comparison,
    out: &Path,
) -> anyhow::Result<ExitCode> {
    comparison.write(out).context(Failure::Report)?;
    for line in comparison.summary_lines() {
        println!("{line}");
    }
    println!("report: {}", out.join("report.html").display());
    let setup_failed = (comparison.implementations.iter()).any(|i| i.report.setup_failed());
    Ok(crate::exit::of_run(comparison.failed(), setup_failed))
}

/// Runs every scenario `repeat` times, `jobs` scenarios at once (each on servers and replicas
/// of its own, its repeats one after another), with a progress bar; one source per scenario, its
/// runs merged, in the order of `scenarios`.
pub(crate) async fn run_all(
    scenarios: &[Scenario],
    opts: &RunOptions,
    repeat: usize,
    jobs: usize,
) -> Vec<Source> {
    use futures::StreamExt as _;
    let bar = indicatif::ProgressBar::new((scenarios.len() * repeat) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("template")
            .progress_chars("=> "),
    );
    // Each scenario runs in a task of its own, so that one scenario's work never waits on
    // another's polling; `buffered` starts the next only when one of `jobs` ends, and yields
    // the results in the scenarios' order. A scenario that runs alone takes the write side of
    // `alone`, the others its read side: it waits for those running to end, and those after it
    // wait for it (tokio's lock is fair).
    let alone = std::sync::Arc::new(tokio::sync::RwLock::new(()));
    // Each scenario's containers are removed while the next one's start (Teardowns).
    let teardowns = Teardowns::new();
    let sources = futures::stream::iter(scenarios.iter().cloned())
        .map(|s| {
            let (opts, bar, alone) = (opts.clone(), bar.clone(), alone.clone());
            let teardowns = teardowns.clone();
            let (name, clauses) = (s.name.clone(), s.clauses.clone());
            let task = tokio::spawn(async move {
                let runs = runs_of(&s, &opts, repeat, &bar, &teardowns);
                in_turn(&alone, s.runs_alone(), runs).await
            });
            async move { (name, clauses, task.await) }
        })
        .buffered(jobs.max(1))
        .map(|(name, clauses, joined)| {
            joined.unwrap_or_else(|e| {
                failed_run(
                    name,
                    &clauses,
                    format!("the harness's task running it ended: {e}"),
                )
            })
        })
        .collect()
        .await;
    teardowns.finish().await;
    bar.finish_and_clear();
    sources
}

/// Runs `work` when its turn comes ([`run_all`]): `alone`, once nothing else holds `turns`, and
/// holding off everything after it; else beside any other work that is not alone.
async fn in_turn<T>(
    turns: &tokio::sync::RwLock<()>,
    alone: bool,
    work: impl Future<Output = T>,
) -> T {
    if alone {
        let _alone = turns.write().await;
        work.await
    } else {
        let _beside = turns.read().await;
        work.await
    }
}

/// How many more times a scenario runs when its runs failed on near misses alone
/// ([`Check::near_miss`]: a liveness bound missed by less than the scheduling noise the run
/// measured of itself). Its clause is then flaky (undecided) if some run held, failed if none
/// did; a failure of anything else, safety above all, is decided by the run that showed it
/// and is never run again.
pub const RERUNS: usize = 2;

/// One scenario's `repeat` runs, and [`RERUNS`] more when they failed on near misses alone,
/// merged into one source; its line printed above the bar.
async fn runs_of(
    s: &Scenario,
    opts: &RunOptions,
    repeat: usize,
    bar: &indicatif::ProgressBar,
    teardowns: &Teardowns,
) -> Source {
    let runs = repeated(repeat, |i, planned| {
        if i == repeat + 1 {
            bar.inc_length(RERUNS as u64);
            bar.println(format!(
                "{:<40} a bound missed within the run's own noise: {RERUNS} more runs",
                s.name
            ));
        }
        bar.set_message(if planned > 1 {
            format!("{} ({i}/{planned})", s.name)
        } else {
            s.name.clone()
        });
        let opts = RunOptions {
            repeat: i,
            ..opts.clone()
        };
        async move {
            let source = run_one(s, &opts, Some(teardowns)).await;
            bar.inc(1);
            source
        }
    })
    .await;
    let source = merge_repeats(runs);
    let verdict = if source.not_run() {
        "not-run"
    } else if source.passed() {
        "pass"
    } else if source.flaky() {
        "flaky"
    } else {
        "FAIL"
    };
    bar.println(format!(
        "{:<40} {verdict} ({:.1} s)",
        source.name, source.seconds
    ));
    source
}

/// The sources of `run(i, planned)` for `i` from 1 to `repeat`, and to `repeat` + [`RERUNS`]
/// when those failed on near misses alone ([`near_misses_only`]); `planned` is how many runs
/// are planned when run `i` starts.
pub async fn repeated<F, Fut>(repeat: usize, mut run: F) -> Vec<Source>
where
    F: FnMut(usize, usize) -> Fut,
    Fut: Future<Output = Source>,
{
    let mut runs = Vec::with_capacity(repeat);
    let mut planned = repeat;
    let mut i = 0;
    while i < planned {
        i += 1;
        runs.push(run(i, planned).await);
        if i == repeat && near_misses_only(&runs) {
            planned += RERUNS;
        }
    }
    runs
}

/// Whether some run failed a check on near misses and no run failed any check otherwise.
fn near_misses_only(runs: &[Source]) -> bool {
    let checks = || runs.iter().flat_map(|r| r.checks.iter());
    checks().any(Check::near_miss)
        && checks().all(|c| c.verdict != Verdict::Invalid || c.near_miss())
}

/// The source of a scenario run that could not complete (it failed to start, or its task
/// ended): a failed check of its clauses.
fn failed_run(name: String, clauses: &[String], message: String) -> Source {
    Source {
        checks: vec![
            Check::new("scenario ran", &[], Verdict::Invalid, message).with_clauses(clauses)
        ],
        name,
        seconds: 0.0,
        evidence: None,
    }
}

/// Runs one scenario once; a run that could not complete is a failed check of its clauses. A
/// scenario whose steps the replica program cannot play is not run: its clauses say what it
/// would need (a level, the harness's own replica, a feature beyond the spec), as are those
/// whose servers could not start or are too old for a replica's program.
pub async fn run_one(s: &Scenario, opts: &RunOptions, teardowns: Option<&Teardowns>) -> Source {
    let offer = s.observes(&opts.program);
    if let Some(need) = s.needs().filter(|n| !n.met_by(&offer)) {
        let why = format!(
            "not run: its steps need {need}; the program is at {}",
            offer.level
        );
        return not_run(s, need, why);
    }
    match run::run_after(s, opts, teardowns).await {
        Ok(outcome) => outcome.source,
        Err(e) => match (Failure::of(&e), e.downcast_ref::<run::ServerTooOld>()) {
            (Some(Failure::Setup), _) => not_run(s, Need::Setup, format!("{e:#}")),
            (_, Some(old)) => not_run(s, Need::Postgres(old.needs), e.to_string()),
            _ => Source {
                evidence: Some(opts.evidence_dir(&s.name)),
                ..failed_run(s.name.clone(), &s.clauses, format!("{e:#}"))
            },
        },
    }
}

/// The source of a scenario that did not run for what it needs (of the program, the server or
/// the machine): its clauses are not run, with `why`.
fn not_run(s: &Scenario, need: Need, why: String) -> Source {
    Source {
        name: s.name.clone(),
        seconds: 0.0,
        checks: vec![Check {
            needs: Some(need),
            ..Check::new("scenario ran", &[], Verdict::Unknown, why)
        }
        .with_clauses(&s.clauses)],
        evidence: None,
    }
}

/// Folds the repeated runs of one scenario into one source: a check holds only if it held in
/// every run that reported it (the first failing run's message is kept, with its run number; a
/// run that did not report it decided nothing there), and each figure
/// becomes `median …, max … (of N)` over the runs. A check that failed on near misses in some
/// runs and held in the others, and failed otherwise in none, is flaky: unknown, with every
/// run's figure.
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
            merge_check(&all, n)
        })
        .collect();
    merged
}

/// One check over the `n` runs that measured it (`all`, with their indices).
fn merge_check(all: &[(usize, &Check)], n: usize) -> Check {
    let mut check = all[0].1.clone();
    let failed = all.iter().find(|(_, c)| c.verdict == Verdict::Invalid);
    let decided = all
        .iter()
        .find(|(_, c)| c.verdict == Verdict::Invalid && !c.near_miss());
    let unknown = all.iter().find(|(_, c)| c.verdict == Verdict::Unknown);
    let held = all.iter().any(|(_, c)| c.verdict == Verdict::Valid);
    if let (None, Some(_), true) = (decided, failed, held) {
        return flaky(check, all, n);
    }
    check.measures = worst_measures(all);
    if let Some((i, c)) = failed.or(unknown) {
        check.verdict = c.verdict;
        check.message = format!("run {} of {n}: {}", i + 1, c.message);
    } else if all.len() < n {
        // A run that did not report it decided nothing there (a wire check with nothing to
        // read): undecided in that run, not failed.
        check.message = format!(
            "held in the {} runs that decided it (not decided in {} of {n}); first: {}",
            all.len(),
            n - all.len(),
            check.message
        );
    } else {
        check.message = format!("held in all {n} runs; first: {}", check.message);
    }
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
}

/// `check` as flaky over `all`: unknown, every run's measures with its run number, and which
/// runs missed (within their noise) and which held.
fn flaky(mut check: Check, all: &[(usize, &Check)], n: usize) -> Check {
    let runs = |which: fn(&Check) -> bool| -> Vec<String> {
        (all.iter())
            .filter(|(_, c)| which(c))
            .map(|(i, _)| (i + 1).to_string())
            .collect()
    };
    let (missed, held) = (
        runs(Check::near_miss),
        runs(|c| c.verdict == Verdict::Valid),
    );
    let first = (all.iter())
        .find(|(_, c)| c.near_miss())
        .map(|(i, c)| (i + 1, &c.message));
    let (k, message) = first.expect("a run that missed");
    check.verdict = Verdict::Unknown;
    check.flaky = true;
    check.message = format!(
        "flaky over {n} runs: a bound missed within the run's own noise in run(s) {}, held in \
         run(s) {}; run {k}: {message}",
        missed.join(", "),
        held.join(", ")
    );
    check.measures = each_run_s_measures(all).collect();
    check
}

/// Every measure of `all`, each with the number of the run that measured it.
fn each_run_s_measures<'a>(all: &'a [(usize, &Check)]) -> impl Iterator<Item = Measure> + 'a {
    (all.iter()).flat_map(|(i, c)| {
        c.measures.iter().map(move |m| Measure {
            run: Some(i + 1),
            ..m.clone()
        })
    })
}

/// Each figure held to a bound, at its worst over the runs (closest to or furthest past its
/// bound), with the run that measured it.
fn worst_measures(all: &[(usize, &Check)]) -> Vec<Measure> {
    let mut worst: Vec<Measure> = Vec::new();
    for m in each_run_s_measures(all) {
        match (worst.iter_mut()).find(|w| w.what == m.what && w.worse == m.worse) {
            Some(w) if m.margin() < w.margin() => *w = m,
            Some(_) => {}
            None => worst.push(m),
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
mod tests;
