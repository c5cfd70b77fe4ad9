//! The gallery of flawed implementations: the Python example written to the spec, with one
//! deliberate violation each (`replicas/python/replica.py --flaw NAME`), run through the
//! black-box path at contract level 2 on the scenarios that decide the clause it breaks. The
//! harness must fail each by exactly the clauses it breaks, and pass the rest it decides: a flaw
//! that slips through is a missing check, a clause failed that it does not break a wrong one.
//! The table, with the check that catches each, is in docs/gallery.md.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use harness::replica::program::{Command, Level, Program};
use harness::report::{ClauseVerdict, Report, Source};
use harness::scenario::run::{run, RunOptions};
use harness::scenario::Scenario;
use rstest::rstest;

const T: Duration = Duration::from_millis(200);
const SLACK: Duration = Duration::from_millis(50);
const SEED: u64 = 20_261_205;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Runs `scenarios` with the Python example's `flaw` at level 2; the report.
async fn judged(flaw: &str, scenarios: &[&str]) -> Report {
    let script = repo().join("replicas/python/replica.py");
    let template = format!("python3 {} --flaw {flaw}", script.display());
    let program = Program::External(Command::parse(&template, Level::Work).expect("a template"));
    let opts = RunOptions {
        t: T,
        seed: SEED,
        out: Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("gallery")
            .join(flaw),
        program,
        images: harness::topology::Images::from_env(),
        slack: SLACK,
        repeat: 1,
    };
    let mut sources: Vec<Source> = Vec::new();
    for name in scenarios {
        let file = repo().join("scenarios").join(format!("{name}.toml"));
        let scenario = Scenario::load(&file).unwrap_or_else(|e| panic!("{e}"));
        let outcome =
            (run(&scenario, &opts).await).unwrap_or_else(|e| panic!("{flaw}: {name}: {e:#}"));
        sources.push(outcome.source);
    }
    Report::new(T.as_millis() as u64, SEED, 0.0, sources)
}

/// Each failing check, one per line, with its scenario.
fn failures(report: &Report) -> String {
    (report.sources.iter())
        .flat_map(|s| {
            (s.checks.iter())
                .filter(|c| c.verdict == harness::check::Verdict::Invalid)
                .map(move |c| format!("{}: {c}", s.name))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Each flaw, the clauses it breaks (the report must fail exactly these), and the scenarios
/// that decide them.
#[rstest]
#[case::fresh_backend("fresh-backend", &["RUN-2"], &["steady-election"])]
#[case::set_before_outcome("set-before-outcome", &["RUN-2"], &["steady-election"])]
#[case::lock_on_pool("lock-on-pool", &["RUN-3", "SESS-1"], &["steady-election"])]
#[case::moving_lock("moving-lock", &["SESS-2"], &["steady-election"])]
#[case::timeout_4_1t("timeout-4.1T", &["ORPH-1"], &["steady-election"])]
#[case::no_timeout("no-timeout", &["ORPH-1", "ORPH-2"], &["steady-election", "frozen-leader"])]
#[case::slow_poll("slow-poll", &["RUN-1"], &["steady-election"])]
#[case::fast_poll("fast-poll", &["RUN-1"], &["steady-election"])]
#[case::queue("queue", &["RUN-1"], &["steady-election"])]
#[case::keep_open("keep-open", &["DEM-1"], &["leader-partition"])]
// The spec's query never shows the bigint key: no acquisition of the spec's lock is seen
// (RUN-3), while the gauge says one leads (ISL-1, LOCK-3).
#[case::bigint_key("bigint-key", &["LOCK-1", "LOCK-3", "ISL-1", "RUN-3"], &["steady-election"])]
#[case::xact_lock("xact-lock", &["LOCK-1", "ORPH-1"], &["steady-election"])]
#[case::half_deadline("half-deadline", &["RUN-5"], &["slow-leader"])]
// A check with no deadline never gives the silent partition up: its lock connection stays open
// (DEM-1) and its gauge stays 1 until its 4T lease runs out (DEM-2).
#[case::no_deadline("no-deadline", &["DEM-1", "DEM-2"], &["leader-partition"])]
// Below level 3 the terms are read off the gauge: a gauge that never says 1 puts every row of
// the leader-only work outside a term (LOOP-1).
#[case::gauge_zero("gauge-zero", &["ISL-1", "LOOP-1", "MET-1"], &["steady-election"])]
#[case::late_work("late-work", &["LOOP-1"], &["backend-kill"])]
#[case::shared_lock("shared-lock", &["LOCK-1", "LOCK-3", "MET-1", "ISL-1"], &["steady-election"])]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flaw_fails_exactly_the_clauses_it_breaks(
    #[case] flaw: &str,
    #[case] breaks: &[&str],
    #[case] scenarios: &[&str],
) {
    let report = judged(flaw, scenarios).await;
    let verdicts: BTreeMap<&str, ClauseVerdict> = (report.clauses.iter())
        .map(|c| (c.id.as_str(), c.verdict))
        .collect();
    let failed: Vec<&str> = (verdicts.iter())
        .filter(|(_, v)| **v == ClauseVerdict::Fail)
        .map(|(id, _)| *id)
        .collect();
    let mut want = breaks.to_vec();
    want.sort_unstable();
    let mut got = failed.clone();
    got.sort_unstable();
    assert_eq!(got, want, "{flaw}:\n{}", failures(&report));
}
