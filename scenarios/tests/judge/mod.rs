//! What the black-box tests share (`gallery`, `implementations`): a program run through the
//! scenario runner on named scenario files, and the report over them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::check::Verdict;
use harness::level::Need;
use harness::replica::program::Program;
use harness::report::{Report, Source};
use harness::scenario::run::RunOptions;
use harness::scenario::Scenario;

/// The check interval the black-box tests run at.
pub const T: Duration = Duration::from_millis(200);
/// Their scheduling slack.
pub const SLACK: Duration = Duration::from_millis(50);

/// The repository's root.
pub fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// How the black-box tests run `program`: at [`T`] with [`SLACK`], once, on the images the
/// environment names, each run's evidence under `out`.
pub fn options(program: Program, seed: u64, out: PathBuf) -> RunOptions {
    RunOptions {
        t: T,
        seed,
        out,
        program,
        images: harness::topology::Images::from_env(),
        slack: SLACK,
        repeat: 1,
    }
}

/// Runs `scenarios` (names under `scenarios/`) one after another with `program`, each run's
/// evidence under `out`; the report over them. `label` names the program in a failure.
pub async fn judged(
    label: &str,
    program: Program,
    scenarios: &[&str],
    seed: u64,
    out: PathBuf,
) -> Report {
    let opts = options(program, seed, out);
    let mut sources: Vec<Source> = Vec::new();
    for name in scenarios {
        let file = repo().join("scenarios").join(format!("{name}.toml"));
        let scenario = Scenario::load(&file).unwrap_or_else(|e| panic!("{e}"));
        let source = harness::suite::run_one(&scenario, &opts, None).await;
        // A run that could not complete, or whose servers could not start, is the test's
        // failure, not a verdict on the program; one the program cannot play is not-run.
        let broken = (source.checks.iter()).find(|c| {
            c.name == "scenario ran"
                && (c.verdict == Verdict::Invalid || c.needs == Some(Need::Setup))
        });
        if let Some(c) = broken {
            panic!("{label}: {name}: {}", c.message);
        }
        sources.push(source);
    }
    Report::new(T.as_millis() as u64, seed, 0.0, sources)
}

/// Each failing check, one per line, with its scenario.
pub fn failures(report: &Report) -> String {
    (report.sources.iter())
        .flat_map(|s| {
            (s.checks.iter())
                .filter(|c| c.verdict == harness::check::Verdict::Invalid)
                .map(move |c| format!("{}: {c}", s.name))
        })
        .collect::<Vec<_>>()
        .join("\n")
}
