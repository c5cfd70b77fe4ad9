//! `harness report merge --out DIR SHARD...`: one report from the output folders of runs made
//! apart (CI shards: scenarios split by `--shard K/N`, a job per PostgreSQL major, chaos seed
//! ranges), as if one run had made them all.
//!
//! Each shard is what `harness run` or `harness chaos` wrote: a report (`report.json`) or a
//! comparison (`comparison.json`, a column per implementation or per major). Shards of one
//! kind merge: their sources (scenarios, suites, chaos seeds) join, column by column, and every
//! clause is decided again from all of them, so a clause fails in the merged report when it
//! failed in any shard. A version matrix decides X-PGVER again from the merged columns. Each
//! shard's evidence folders are copied beside the merged report, where its links point.
//!
//! A merge refuses what would lose or mix up results: shards run with different T, a
//! scenario that ran in two shards, a column whose shards ran different programs, an output
//! folder that already holds files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};

use crate::in_process::{ELECTOR_TESTS, IN_PROCESS_NOT_RUN};
use crate::report::compare::{Comparison, Implementation};
use crate::report::{Report, Source};

/// `harness report ...`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// What to do with reports.
    #[command(subcommand)]
    pub command: ReportCommand,
}

/// The subcommands of `harness report`.
#[derive(Debug, Subcommand)]
pub enum ReportCommand {
    /// Merges the output folders of shards (runs of `harness run` or `harness chaos` made
    /// apart, e.g. on several CI runners) into one report, as one run would have written it,
    /// with every shard's evidence. Exits non-zero when a clause failed in the merged report.
    Merge(MergeArgs),
}

/// The flags of `harness report merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Where the merged report goes: a new or empty folder.
    #[arg(long, default_value = "target/conformance")]
    pub out: PathBuf,
    /// The shards' output folders (each `--out` of a `harness run` or `harness chaos`).
    #[arg(required = true, value_name = "SHARD")]
    pub shards: Vec<PathBuf>,
}

/// The files a report writes at its root; the merge writes its own.
const REPORT_FILES: [&str; 6] = [
    "report.md",
    "report.json",
    "report.html",
    "junit.xml",
    "comparison.json",
    "comparison.md",
];

/// One shard's output folder, read back.
#[derive(Debug)]
enum Shard {
    /// A single report (`report.json`).
    One(Report),
    /// A comparison (`comparison.json`): a report per column.
    Columns(Comparison),
}

impl Shard {
    fn read(dir: &Path) -> anyhow::Result<Shard> {
        let json = |name: &str| -> anyhow::Result<Option<String>> {
            let file = dir.join(name);
            match std::fs::read_to_string(&file) {
                Ok(text) => Ok(Some(text)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e).with_context(|| format!("reading {}", file.display())),
            }
        };
        let bad = |name: &str| format!("{}: not a report", dir.join(name).display());
        if let Some(text) = json("comparison.json")? {
            return Ok(Shard::Columns(
                serde_json::from_str(&text).with_context(|| bad("comparison.json"))?,
            ));
        }
        if let Some(text) = json("report.json")? {
            return Ok(Shard::One(
                serde_json::from_str(&text).with_context(|| bad("report.json"))?,
            ));
        }
        bail!(
            "{}: no report.json or comparison.json: not the output folder of harness run or \
             harness chaos",
            dir.display()
        )
    }
}

/// Runs `harness report ...`.
///
/// # Errors
/// A shard cannot be read or merged, or the merged report cannot be written.
pub fn main(args: ReportArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        ReportCommand::Merge(args) => merge_command(&args),
    }
}

fn merge_command(args: &MergeArgs) -> anyhow::Result<ExitCode> {
    check_out(&args.out, &args.shards)?;
    let (mut ones, mut columns) = (Vec::new(), Vec::new());
    for dir in &args.shards {
        match Shard::read(dir)? {
            Shard::One(r) => ones.push((dir.clone(), r)),
            Shard::Columns(c) => columns.push((dir.clone(), c)),
        }
    }
    match (ones.is_empty(), columns.is_empty()) {
        (false, true) => {
            for (dir, r) in &ones {
                eprintln!(
                    "harness report merge: {}: {}",
                    dir.display(),
                    r.summary_line()
                );
            }
            let report = merge_reports(&ones)?;
            for (dir, _) in &ones {
                copy_evidence(dir, &args.out)?;
            }
            crate::suite::conclude_report(&report, &args.out)
        }
        (true, false) => {
            let comparison = merge_comparisons(&columns)?;
            for (dir, c) in &columns {
                for i in &c.implementations {
                    copy_evidence(&dir.join(&i.name), &args.out.join(&i.name))?;
                }
            }
            crate::suite::conclude(&comparison, &args.out)
        }
        _ => bail!(
            "the shards are of two kinds: {} hold a single report, {} a comparison (--pg or \
             --impl); run every shard the same way",
            names(&ones),
            names(&columns)
        ),
    }
}

fn names<T>(shards: &[(PathBuf, T)]) -> String {
    let v: Vec<String> = shards
        .iter()
        .map(|(d, _)| d.display().to_string())
        .collect();
    v.join(", ")
}

/// The output folder must be new or empty, and no shard's: a merge never overwrites a report
/// or mixes its evidence with an earlier run's.
fn check_out(out: &Path, shards: &[PathBuf]) -> anyhow::Result<()> {
    if let Some(s) = shards.iter().find(|s| same_dir(s, out)) {
        bail!(
            "--out {} is a shard ({}): merge into a folder of its own",
            out.display(),
            s.display()
        );
    }
    let mut entries = match std::fs::read_dir(out) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", out.display())),
    };
    if entries.next().is_some() {
        bail!(
            "--out {}: the folder is not empty; the merged report goes into a new or empty \
             folder (remove it, or name another)",
            out.display()
        );
    }
    Ok(())
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// One report from the shards' reports: their sources and further runs joined (see
/// [`join_sources`]) and every clause decided again. T must be the same in every shard; the
/// seed is the lowest shard's (each chaos source names its own seed) and the time the sum of
/// the shards' (the machine time the runs took, not the wall time of parallel shards).
///
/// # Errors
/// Shards ran with different T, or one source ran in two shards.
pub fn merge_reports(parts: &[(PathBuf, Report)]) -> anyhow::Result<Report> {
    let Some((first_dir, first)) = parts.first() else {
        bail!("no shards to merge");
    };
    if let Some((dir, r)) = parts.iter().find(|(_, r)| r.t_ms != first.t_ms) {
        bail!(
            "the shards ran with different T: {} ms in {}, {} ms in {}; bounds in units of T \
             do not merge",
            first.t_ms,
            first_dir.display(),
            r.t_ms,
            dir.display()
        );
    }
    let sources = join_sources(parts.iter().map(|(d, r)| (d.as_path(), &r.sources)))?;
    let extra = join_sources(parts.iter().map(|(d, r)| (d.as_path(), &r.extra_runs)))?;
    let seed = parts
        .iter()
        .map(|(_, r)| r.seed)
        .min()
        .unwrap_or(first.seed);
    let seconds = parts.iter().map(|(_, r)| r.seconds).sum();
    let mut report = Report::new(first.t_ms, seed, seconds, sources);
    report.extra_runs = extra;
    // Each shard's own tables, in shard order (they count what that shard ran).
    report.tables = parts.iter().flat_map(|(_, r)| r.tables.clone()).collect();
    Ok(report)
}

/// The shards' sources in shard order, each name once. A source not run (its checks all
/// need what the program lacks) gives way to one of the same name that ran; the elector's
/// tests replace the placeholder that lists their clauses as not run. The same source run in
/// two shards is an error: its verdicts would count twice, or one would be lost.
fn join_sources<'a>(
    shards: impl Iterator<Item = (&'a Path, &'a Vec<Source>)>,
) -> anyhow::Result<Vec<Source>> {
    let mut joined: Vec<(&Path, Source)> = Vec::new();
    for (dir, sources) in shards {
        for s in sources {
            match joined.iter_mut().find(|(_, j)| j.name == s.name) {
                None => joined.push((dir, s.clone())),
                Some(_) if s.not_run() => {}
                Some((d, j)) if j.not_run() => {
                    *d = dir;
                    *j = s.clone();
                }
                Some((d, _)) => bail!(
                    "{} ran in two shards ({} and {}): give each shard its own scenarios \
                     (harness run --shard K/N) or seeds",
                    s.name,
                    d.display(),
                    dir.display()
                ),
            }
        }
    }
    if joined.iter().any(|(_, s)| s.name == ELECTOR_TESTS) {
        joined.retain(|(_, s)| s.name != IN_PROCESS_NOT_RUN);
    }
    Ok(joined.into_iter().map(|(_, s)| s).collect())
}

/// One comparison from the shards' comparisons: each column (by name, in the order the
/// shards first name them; a version matrix's by version) merged from every shard that has
/// it, as [`merge_reports`] merges; a version matrix's X-PGVER decided again from the merged
/// columns.
///
/// # Errors
/// A column's shards ran different programs, or [`merge_reports`] refuses a column.
pub fn merge_comparisons(parts: &[(PathBuf, Comparison)]) -> anyhow::Result<Comparison> {
    let mut by_name: BTreeMap<&str, Vec<(PathBuf, &Implementation)>> = BTreeMap::new();
    let mut order: Vec<&str> = Vec::new();
    for (dir, c) in parts {
        for i in &c.implementations {
            if !order.contains(&i.name.as_str()) {
                order.push(&i.name);
            }
            by_name
                .entry(&i.name)
                .or_default()
                .push((dir.join(&i.name), i));
        }
    }
    let mut columns = Vec::new();
    for name in order {
        let shards = by_name.remove(name).unwrap_or_default();
        let Some((first_dir, first)) = shards.first() else {
            continue;
        };
        if let Some((dir, i)) = shards.iter().find(|(_, i)| i.program != first.program) {
            bail!(
                "column {name}: {} ran `{}`, {} ran `{}`; a column merges runs of one program",
                first_dir.display(),
                first.program,
                dir.display(),
                i.program
            );
        }
        for (dir, i) in &shards {
            eprintln!(
                "harness report merge: {}: {}",
                dir.display(),
                i.report.summary_line()
            );
        }
        let reports: Vec<(PathBuf, Report)> = (shards.iter())
            .map(|(d, i)| (d.clone(), i.report.clone()))
            .collect();
        columns.push(Implementation {
            name: name.to_owned(),
            program: first.program.clone(),
            report: merge_reports(&reports).with_context(|| format!("column {name}"))?,
        });
    }
    if crate::matrix::is_matrix(&columns) {
        columns.sort_by(|a, b| a.name.cmp(&b.name));
        crate::matrix::decide(&mut columns);
    }
    Ok(Comparison {
        implementations: columns,
    })
}

/// Copies everything under the shard folder `from` but its report files into `to`: the
/// evidence folders the report links. A file already there is an error (two shards wrote the
/// same evidence), never overwritten.
fn copy_evidence(from: &Path, to: &Path) -> anyhow::Result<()> {
    for entry in walkdir::WalkDir::new(from).min_depth(1) {
        let entry = entry.with_context(|| format!("reading {}", from.display()))?;
        let rel = entry.path().strip_prefix(from).unwrap_or(entry.path());
        let at_root = rel.components().count() == 1;
        let name = rel.to_string_lossy();
        if at_root && REPORT_FILES.contains(&name.as_ref()) {
            continue;
        }
        let dest = to.join(rel);
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&dest)
                .with_context(|| format!("creating {}", dest.display()))?;
            continue;
        }
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        let mut src = std::fs::File::open(entry.path())
            .with_context(|| format!("reading {}", entry.path().display()))?;
        let mut dst = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&dest)
            .with_context(|| {
                format!(
                    "writing {}: two shards wrote this file (copying {})",
                    dest.display(),
                    entry.path().display()
                )
            })?;
        std::io::copy(&mut src, &mut dst)
            .with_context(|| format!("copying {}", entry.path().display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{Check, Verdict};
    use crate::report::ClauseVerdict;

    /// A scenario source `name` deciding `clause` with `verdict`, its evidence in
    /// `scenarios/<name>`.
    fn source(name: &str, clause: &str, verdict: Verdict) -> Source {
        Source {
            name: name.into(),
            seconds: 2.0,
            checks: vec![Check::new("a check", &[clause], verdict, "m".into())],
            evidence: Some(format!("scenarios/{name}")),
        }
    }

    /// Writes a report of `sources` (T = `t_ms`) into `dir`, with an evidence file for each.
    fn shard(dir: &Path, t_ms: u64, seed: u64, sources: Vec<Source>) -> Report {
        for s in &sources {
            if let Some(ev) = &s.evidence {
                std::fs::create_dir_all(dir.join(ev)).unwrap();
                std::fs::write(dir.join(ev).join("timeline.jsonl"), &s.name).unwrap();
            }
        }
        let r = Report::new(t_ms, seed, 10.0, sources);
        r.write(dir).unwrap();
        r
    }

    fn merge(out: &Path, shards: &[&Path]) -> anyhow::Result<ExitCode> {
        merge_command(&MergeArgs {
            out: out.to_owned(),
            shards: shards.iter().map(|p| p.to_path_buf()).collect(),
        })
    }

    fn verdict(r: &Report, id: &str) -> ClauseVerdict {
        r.clauses.iter().find(|c| c.id == id).unwrap().verdict
    }

    fn read(dir: &Path) -> Report {
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap()
    }

    /// Two shards' scenarios join in one report; a clause failed in one shard fails there;
    /// every shard's evidence is copied where the report links it.
    #[test]
    fn shards_join_and_a_failure_in_one_fails_the_merged_report() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b, out) = (
            tmp.path().join("a"),
            tmp.path().join("b"),
            tmp.path().join("m"),
        );
        shard(
            &a,
            200,
            9,
            vec![source("killed-leader", "DEM-2", Verdict::Valid)],
        );
        shard(
            &b,
            200,
            7,
            vec![source("frozen-leader", "DEM-2", Verdict::Invalid)],
        );
        let code = merge(&out, &[&a, &b]).unwrap();
        assert_eq!(code, ExitCode::FAILURE, "a clause failed in shard b");
        let r = read(&out);
        let names: Vec<&str> = r.sources.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["killed-leader", "frozen-leader"]);
        assert_eq!(verdict(&r, "DEM-2"), ClauseVerdict::Fail);
        assert_eq!((r.seed, r.seconds), (7, 20.0), "lowest seed, summed time");
        for name in ["killed-leader", "frozen-leader"] {
            let file = out.join("scenarios").join(name).join("timeline.jsonl");
            assert_eq!(std::fs::read_to_string(file).unwrap(), name);
        }
        for file in ["report.md", "report.html", "junit.xml"] {
            assert!(out.join(file).exists(), "{file}");
        }

        let (c, out2) = (tmp.path().join("c"), tmp.path().join("m2"));
        shard(
            &c,
            200,
            7,
            vec![source("frozen-leader", "DEM-2", Verdict::Valid)],
        );
        assert_eq!(merge(&out2, &[&a, &c]).unwrap(), ExitCode::SUCCESS);
        assert_eq!(verdict(&read(&out2), "DEM-2"), ClauseVerdict::Pass);
    }

    /// What would lose or mix results is refused, with what to do: one scenario in two shards,
    /// shards of two T, an output folder that holds files, a folder that is not a report, two
    /// kinds of shard.
    #[test]
    fn a_merge_that_would_lose_or_mix_results_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let p = |n: &str| tmp.path().join(n);
        shard(&p("a"), 200, 1, vec![source("s1", "DEM-2", Verdict::Valid)]);
        shard(&p("b"), 200, 1, vec![source("s1", "DEM-2", Verdict::Valid)]);
        shard(&p("t"), 250, 1, vec![source("s2", "DEM-2", Verdict::Valid)]);
        let err = |shards: &[&Path], out: &Path| merge(out, shards).unwrap_err().to_string();
        let e = err(&[&p("a"), &p("b")], &p("o1"));
        assert!(e.starts_with("s1 ran in two shards ("), "{e}");
        let e = err(&[&p("a"), &p("t")], &p("o2"));
        assert!(
            e.contains("different T: 200 ms in") && e.contains("250 ms in"),
            "{e}"
        );
        std::fs::create_dir_all(p("full")).unwrap();
        std::fs::write(p("full").join("x"), "").unwrap();
        let e = err(&[&p("a")], &p("full"));
        assert!(e.contains("the folder is not empty"), "{e}");
        let e = err(&[&p("a")], &p("a"));
        assert!(e.contains("is a shard"), "{e}");
        let e = err(&[&p("a"), &p("full")], &p("o3"));
        assert!(e.contains("no report.json or comparison.json"), "{e}");
        let cmp = Comparison {
            implementations: vec![Implementation {
                name: "pg15".into(),
                program: "p".into(),
                report: read(&p("t")),
            }],
        };
        cmp.write(&p("cmp")).unwrap();
        let e = err(&[&p("a"), &p("cmp")], &p("o4"));
        assert!(e.starts_with("the shards are of two kinds"), "{e}");
        assert!(
            !p("o1").join("report.json").exists(),
            "nothing written on a refusal"
        );
    }

    /// A source not run in one shard gives way to the same source run in another; the elector's
    /// tests replace the placeholder of their clauses.
    #[test]
    fn a_source_that_ran_replaces_one_not_run() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b, out) = (
            tmp.path().join("a"),
            tmp.path().join("b"),
            tmp.path().join("m"),
        );
        let not_run = Source {
            evidence: None,
            checks: vec![Check {
                needs: Some(crate::level::Need::OwnReplica),
                ..Check::new(
                    "scenario ran",
                    &["DEM-2"],
                    Verdict::Unknown,
                    "not run".into(),
                )
            }],
            ..source("s1", "DEM-2", Verdict::Unknown)
        };
        let tests = Source {
            name: ELECTOR_TESTS.into(),
            evidence: None,
            ..source("", "RUN-1", Verdict::Valid)
        };
        let placeholder = crate::in_process::in_process_not_run("not run here");
        shard(&a, 200, 1, vec![placeholder, not_run]);
        shard(
            &b,
            200,
            1,
            vec![tests, source("s1", "DEM-2", Verdict::Valid)],
        );
        merge(&out, &[&a, &b]).unwrap();
        let r = read(&out);
        let names: Vec<&str> = r.sources.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["s1", ELECTOR_TESTS]);
        assert_eq!(verdict(&r, "DEM-2"), ClauseVerdict::Pass);
        assert_eq!(verdict(&r, "RUN-1"), ClauseVerdict::Pass);
    }

    /// X-PGVER: a job per major, merged, decides the matrix again; with a major missing it is
    /// not run, as `harness run --pg` leaves it.
    #[test]
    fn a_version_per_shard_merges_into_the_matrix() {
        let tmp = tempfile::tempdir().unwrap();
        let column = |v: u32| {
            let dir = tmp.path().join(format!("job{v}"));
            let report = shard(
                &dir.join(format!("pg{v}")),
                200,
                1,
                vec![source("frozen-leader", "ORPH-2", Verdict::Valid)],
            );
            let c = Comparison {
                implementations: vec![Implementation {
                    name: format!("pg{v}"),
                    program: format!("PostgreSQL {v}"),
                    report,
                }],
            };
            c.write(&dir).unwrap();
            dir
        };
        let (j13, j15, j17) = (column(13), column(15), column(17));
        let x_pgver = |out: &Path| -> Vec<ClauseVerdict> {
            let c: Comparison = serde_json::from_str(
                &std::fs::read_to_string(out.join("comparison.json")).unwrap(),
            )
            .unwrap();
            (c.implementations.iter())
                .map(|i| verdict(&i.report, "X-PGVER"))
                .collect()
        };
        let out = tmp.path().join("all");
        assert_eq!(merge(&out, &[&j17, &j13, &j15]).unwrap(), ExitCode::SUCCESS);
        assert_eq!(x_pgver(&out), [ClauseVerdict::Pass; 3]);
        let names: Vec<String> = (std::fs::read_to_string(out.join("comparison.md")).unwrap())
            .lines()
            .filter(|l| l.starts_with("| clause"))
            .map(str::to_owned)
            .collect();
        assert_eq!(names, ["| clause | pg13 | pg15 | pg17 |"], "by version");
        assert!(out
            .join("pg13/scenarios/frozen-leader/timeline.jsonl")
            .exists());
        let out = tmp.path().join("two");
        merge(&out, &[&j13, &j15]).unwrap();
        assert_eq!(x_pgver(&out), [ClauseVerdict::NotRun; 2]);
    }
}
