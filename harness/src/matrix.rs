//! `harness run --pg 13,15,17` (X-PGVER): every scenario on each PostgreSQL major, one report
//! with a column per version (the run itself is [`crate::suite`]'s), as `--impl` compares implementations (see
//! [`crate::report::compare`]). Each version runs on the images of its Debian release
//! ([`facts::images::MAJORS`]); the elector's in-process tests (`--elector-junit`) ran on 15
//! and decide that column's in-process clauses only.

use std::path::Path;

use facts::images::{Major, MAJORS};

use crate::check::{Check, Verdict};
use crate::in_process::{elector_tests, in_process_not_run};
use crate::report::compare;
use crate::report::{ClauseVerdict, Report, Source};
use crate::topology::Images;

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

/// The images of major `v`: 15's are the usual ones (`base`: flags and environment), the
/// others' are their own.
pub fn images(v: u32, base: &Images) -> anyhow::Result<Images> {
    let major = Major::of(v).ok_or_else(|| {
        anyhow::anyhow!("--pg {v}: not in the matrix; its majors are {}", majors())
    })?;
    let mut images = base.clone();
    if v != TESTED_MAJOR {
        images.postgres = major.postgres.resolve();
        images.pgbouncer = major.pgbouncer.resolve();
    }
    Ok(images)
}

/// The name of the source that decides X-PGVER in every column.
const MATRIX_SOURCE: &str = "version matrix";

/// Whether `columns` are a version matrix's (each named `pg<major>` of the matrix), as
/// `harness run --pg` writes them.
pub fn is_matrix(columns: &[compare::Implementation]) -> bool {
    !columns.is_empty()
        && (columns.iter()).all(|c| MAJORS.iter().any(|m| c.name == format!("pg{}", m.version)))
}

/// Decides X-PGVER in every column from the columns as they are now: an earlier decision (a
/// merged shard's) is dropped first. Without every major X-PGVER is not run: no source decides
/// it (an undecided source would be listed as a failing one).
pub fn decide(columns: &mut [compare::Implementation]) {
    let matrix = matrix_check(columns);
    for c in columns {
        let mut sources = std::mem::take(&mut c.report.sources);
        sources.retain(|s| s.name != MATRIX_SOURCE);
        sources.extend(matrix.clone());
        let extra = std::mem::take(&mut c.report.extra_runs);
        c.report = Report::new(c.report.t_ms, c.report.seed, c.report.seconds, sources);
        c.report.extra_runs = extra;
    }
}

/// The in-process clauses of version `v`'s column: decided by the elector's tests (`junit`)
/// on the major they ran on, not run on the others (and for another program than the
/// harness's replica, `ours` false).
pub fn in_process(junit: Option<&Path>, ours: bool, v: u32) -> anyhow::Result<Source> {
    Ok(match (junit, ours) {
        (Some(junit), true) if v == TESTED_MAJOR => elector_tests(junit)?,
        (_, false) => in_process_not_run(
            "not run: the elector's own tests decide these on the Rust crate only",
        ),
        (None, true) if v == TESTED_MAJOR => in_process_not_run(&format!(
            "not run: no --elector-junit given (the elector's tests run on {TESTED_MAJOR})"
        )),
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
        name: MATRIX_SOURCE.into(),
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
