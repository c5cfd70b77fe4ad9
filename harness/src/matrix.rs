//! `harness run --pg 13,15,17` (X-PGVER): every scenario on each PostgreSQL major, one report
//! with a column per version, as `--impl` compares implementations (see
//! [`crate::report::compare`]). Each version runs on the images of its Debian release
//! ([`testkit::images::MAJORS`]); the elector's in-process tests (`--elector-junit`) ran on 15
//! and decide that column's in-process clauses only.

use std::process::ExitCode;

use testkit::images::{Major, MAJORS};
use tokio::time::Instant;

use crate::check::{Check, Verdict};
use crate::replica::program::Program;
use crate::report::compare::{self, Comparison};
use crate::report::{ClauseVerdict, Report, Source};
use crate::scenario::run::RunOptions;
use crate::scenario::Scenario;
use crate::suite::{elector_tests, in_process_not_run, run_all, RunArgs};

/// The major the elector's own tests run on (the default image).
const TESTED_MAJOR: u32 = 15;

/// The matrix's majors, as a message names them: `13, 15 and 17`.
pub fn majors() -> String {
    let v: Vec<String> = MAJORS.iter().map(|m| m.version.to_string()).collect();
    match v.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => v.join(""),
    }
}

/// Runs the scenarios on each version of `--pg` in turn, each report in `<out>/pg<V>/`, and
/// writes the comparison to `<out>/`.
///
/// # Errors
/// A version is not in the matrix, the elector's JUnit file cannot be read, or a report cannot
/// be written.
pub async fn run(
    args: &RunArgs,
    scenarios: &[Scenario],
    seed: u64,
    program: Program,
) -> anyhow::Result<ExitCode> {
    let mut versions = args.pg.clone();
    versions.sort_unstable();
    versions.dedup();
    let mut columns = Vec::new();
    for &v in &versions {
        let major = Major::of(v).ok_or_else(|| {
            anyhow::anyhow!("--pg {v}: not in the matrix; its majors are {}", majors())
        })?;
        // 15's images are the usual ones (flags and environment); the others' are their own.
        let mut images = crate::topology::Images::from(&args.images);
        if v != TESTED_MAJOR {
            images.postgres = major.postgres.resolve();
            images.pgbouncer = major.pgbouncer.resolve();
        }
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
        let mut sources = vec![in_process(args, &program, v)?];
        sources.extend(run_all(scenarios, &opts, usize::from(args.repeat)).await);
        let report = Report::new(
            args.t.as_millis() as u64,
            seed,
            began.elapsed().as_secs_f64(),
            sources,
        );
        columns.push(compare::Implementation {
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
    // Without every major X-PGVER is not run: no source decides it (an undecided source would
    // be listed as a failing one).
    let matrix = matrix_check(&columns);
    for c in &mut columns {
        let mut sources = std::mem::take(&mut c.report.sources);
        sources.extend(matrix.clone());
        c.report = Report::new(c.report.t_ms, c.report.seed, c.report.seconds, sources);
    }
    let comparison = Comparison {
        implementations: columns,
    };
    crate::suite::conclude(&comparison, &args.out)
}

/// The in-process clauses of version `v`'s column: decided by the elector's tests on the major
/// they ran on, not run on the others (and for another program than the harness's replica).
fn in_process(args: &RunArgs, program: &Program, v: u32) -> anyhow::Result<Source> {
    Ok(match (&args.elector_junit, program.is_ours()) {
        (Some(junit), true) if v == TESTED_MAJOR => elector_tests(junit)?,
        (_, false) => in_process_not_run(
            "not run: the elector's own tests decide these on the Rust crate only",
        ),
        _ => in_process_not_run(&format!(
            "not run on PostgreSQL {v}: the elector's tests (--elector-junit) ran on \
             {TESTED_MAJOR}"
        )),
    })
}

/// X-PGVER, decided once the columns ran: the report gives every clause a verdict on each
/// major of the matrix, and on the one without `idle_session_timeout` (13) the orphan bound
/// held from outside (ORPH-2, measured by the scenarios on that server).
fn matrix_check(columns: &[compare::Implementation]) -> Option<Source> {
    let missing: Vec<String> = (MAJORS.iter())
        .filter(|m| !columns.iter().any(|c| c.name == format!("pg{}", m.version)))
        .map(|m| m.version.to_string())
        .collect();
    let pre14 = columns.iter().find(|c| c.name == "pg13").map(|c| {
        (c.report.clauses.iter())
            .find(|r| r.id == "ORPH-2")
            .map_or(ClauseVerdict::NotRun, |r| r.verdict)
    });
    if !missing.is_empty() {
        return None;
    }
    let (verdict, message) = match pre14 {
        Some(ClauseVerdict::Pass) => (
            Verdict::Valid,
            format!(
                "every clause has a verdict on PostgreSQL {}; on 13 (no idle_session_timeout) \
                 the orphan bound held (ORPH-2)",
                majors()
            ),
        ),
        other => (
            Verdict::Invalid,
            format!(
                "on PostgreSQL 13 (no idle_session_timeout) ORPH-2 is {}",
                other.map_or("not run", |v| v.as_str())
            ),
        ),
    };
    Some(Source {
        name: "version matrix".into(),
        seconds: 0.0,
        checks: vec![Check::new("version matrix", &["X-PGVER"], verdict, message)],
        evidence: None,
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    /// A column `pg<v>` whose ORPH-2 has `verdict` (`None`: no check decides it).
    fn column(v: u32, verdict: Option<Verdict>) -> compare::Implementation {
        let checks = verdict
            .map(|v| Check::new("orphan bound", &["ORPH-2"], v, String::new()))
            .into_iter()
            .collect();
        let source = Source {
            name: "frozen-leader".into(),
            seconds: 1.0,
            checks,
            evidence: None,
        };
        compare::Implementation {
            name: format!("pg{v}"),
            program: String::new(),
            report: Report::new(200, 1, 1.0, vec![source]),
        }
    }

    fn verdict(columns: &[compare::Implementation]) -> Option<Verdict> {
        matrix_check(columns).map(|s| s.checks[0].verdict)
    }

    /// X-PGVER: the three majors with the bound held on 13 pass; a missing major leaves it undecided;
    /// the bound broken or not decided on 13 fails.
    #[test]
    fn the_matrix_passes_with_every_major_and_the_bound_held_on_13() {
        let held = Some(Verdict::Valid);
        let all = [column(13, held), column(15, held), column(17, held)];
        assert_eq!(verdict(&all), Some(Verdict::Valid));
        assert_eq!(verdict(&all[1..]), None, "13 missing: not decided");
        assert_eq!(verdict(&all[..2]), None, "17 missing: not decided");
        let broken = [
            column(13, Some(Verdict::Invalid)),
            column(15, held),
            column(17, held),
        ];
        assert_eq!(verdict(&broken), Some(Verdict::Invalid));
        let undecided = [column(13, None), column(15, held), column(17, held)];
        assert_eq!(verdict(&undecided), Some(Verdict::Invalid));
    }

    /// `--pg` takes only the majors the images exist for, and says which those are.
    #[test]
    fn a_major_outside_the_matrix_is_refused_by_name() {
        let cli =
            crate::cli::Cli::try_parse_from(["harness", "run", "--pg", "13,16"]).expect("parses");
        let crate::cli::Command::Run(args) = cli.command else {
            panic!("run")
        };
        let e = args.validate().expect_err("16 is refused").to_string();
        assert_eq!(
            e,
            "--pg 16: PostgreSQL 16 is not in the matrix; its majors are 13, 15 and 17"
        );
    }
}
