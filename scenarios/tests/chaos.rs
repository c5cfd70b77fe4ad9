//! The CI-sized chaos run: a few fixed seeds, about a minute of fault rounds each, against real
//! containers and replica processes; every check of the history must hold. A failure names the
//! seed and the schedule file that replays it (`harness run <file>`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::chaos::{run_seed, schedule, schedule::Params};
use harness::fault::Verb;
use harness::replica::program::Program;
use harness::scenario::model::{DbPath, Step};
use harness::scenario::run::RunOptions;
use rstest::rstest;

/// T for the chaos run, and the scheduling slack on top of each bound (small against T).
const T: Duration = Duration::from_millis(200);
const SLACK: Duration = Duration::from_millis(50);
/// How long each seed's fault rounds last, at least.
const ROUNDS: Duration = Duration::from_secs(40);

/// The opt-in features a case's replicas run with.
#[derive(Clone, Copy, Debug, Default)]
struct Features {
    /// X-FENCE: `--fence`.
    fence: bool,
    /// X-WAKE: `--wake`.
    wake: bool,
}

#[rstest]
#[case::seed_4(4, &[DbPath::Direct], Features::default())]
// X-FENCE: the replicas fence their work; no fenced write may land after a newer term began.
#[case::seed_2_fenced(2, &[DbPath::Direct], Features { fence: true, wake: false })]
// X-WAKE: each standby keeps a session queued on the lock; every property holds as without it.
#[case::seed_3_waking(3, &[DbPath::Direct], Features { fence: false, wake: true })]
// r2 behind PgBouncer in session mode: seed 9 showed a server session that PgBouncer lent again
// after a term, which the history once took for the ended term's lock.
#[case::seed_9_pgbouncer_session(9, &[DbPath::Direct, DbPath::PgbouncerSession], Features::default())]
// r2 behind PgBouncer in transaction mode at its default pool size, the guard on: the elector
// refuses to lead there (POOL-1), so the seed is held to the safety properties only.
#[case::seed_5_pgbouncer_transaction(5, &[DbPath::Direct, DbPath::PgbouncerTransaction], Features::default())]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos(#[case] seed: u64, #[case] paths: &[DbPath], #[case] features: Features) {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("chaos-runs");
    let opts = RunOptions {
        t: T,
        seed,
        out,
        program: Program::Ours(PathBuf::from(env!("CARGO_BIN_EXE_scenario-harness"))),
        images: harness::topology::Images::from_env(),
        slack: SLACK,
        repeat: 1,
    };
    let params = Params {
        seed,
        duration: ROUNDS,
        replicas: 3,
        paths: paths.to_vec(),
        t: T,
        ours: true,
        fence: features.fence,
        wake: features.wake,
    };
    let run = run_seed(&params, &opts)
        .await
        .unwrap_or_else(|e| panic!("seed {seed}: {e:#}"));
    let found: Vec<String> = run.violations().map(ToString::to_string).collect();
    assert!(
        found.is_empty(),
        "seed {seed}, after {} fault events; replay: harness run {}\n{}",
        run.fault_events,
        run.file.display(),
        found.join("\n")
    );
    assert!(
        run.fault_events >= 20,
        "seed {seed}: only {} fault events in {ROUNDS:?}",
        run.fault_events
    );
    // The coverage, read off the history alone, counts every strike the schedule drew: each
    // fault but a process restart (a kill's lift), each switch but a switch back to `ok`.
    let drawn = (schedule::draw(&params).steps.iter())
        .filter(|s| match s {
            Step::Fault { verb, .. } => *verb != Verb::Restart,
            Step::Control { command, .. } => !command.lifts(),
            _ => false,
        })
        .count();
    assert_eq!(
        run.coverage.strikes(),
        drawn,
        "seed {seed}: the coverage counts every strike drawn\n{}",
        run.coverage.table().markdown()
    );
}
