//! Runs one scenario against a fresh topology: starts the services and the replicas
//! ([`stage`]), interprets the steps ([`steps`]), stops everything, then hands the timeline to
//! the [checks](crate::check) and the evidence to the [report](crate::report::evidence).

mod stage;
mod steps;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

use crate::check::{self, Bounds, Facts};
use crate::report::evidence::{Evidence, Record};
use crate::report::Source;
use crate::scenario::model::Scenario;
use crate::timeline::Entry;
use crate::topology::Images;
use stage::Stage;
use steps::Player;

/// How to run scenarios.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// T when the scenario does not set one.
    pub t: Duration,
    /// The seed of every random choice (which standby a `standby` target picks).
    pub seed: u64,
    /// The output folder (each scenario's evidence goes to `<out>/scenarios/<name>/`).
    pub out: PathBuf,
    /// The harness binary (re-executed as `harness replica`).
    pub binary: PathBuf,
    /// The container images.
    pub images: Images,
    /// Scheduling noise allowed on top of a bound: small against T.
    pub slack: Duration,
    /// Which repetition this is (1 for the first): later ones keep their evidence in
    /// `<out>/scenarios/<name>.<repeat>/` so no run overwrites another's.
    pub repeat: usize,
}

impl RunOptions {
    /// The evidence folder of `scenario`'s run, relative to `out`.
    pub fn evidence_dir(&self, scenario: &str) -> String {
        Evidence::folder(scenario, self.repeat)
    }
}

/// What a scenario run produced.
#[derive(Debug)]
pub struct Outcome {
    /// The scenario's checks, as a report source.
    pub source: Source,
    /// The whole timeline.
    pub entries: Vec<Entry>,
}

/// Runs `scenario` and returns its checks and timeline.
///
/// # Errors
/// The topology or a replica could not start, or the evidence could not be written (a step
/// that failed, or a wait that timed out, is not an error: it fails the scenario's checks).
pub async fn run(scenario: &Scenario, opts: &RunOptions) -> anyhow::Result<Outcome> {
    let began = Instant::now();
    let t = scenario.t.map_or(opts.t, |s| s.at(opts.t));
    let tick = scenario.tick.map_or(t, |s| s.at(t));
    let evidence = Evidence::create(&opts.out, opts.evidence_dir(&scenario.name))?;
    let mut stage = Stage::start(scenario, opts, t, tick, &evidence).await?;
    let mut player = Player::new(&mut stage, t, opts.seed);
    let step_errors = player.play(&scenario.steps).await;
    let marks = player.into_marks();
    let sample = stage.sample_every();
    let (entries, rows) = stage.stop().await;

    let logs = evidence.read_logs(scenario.replicas.keys());
    let facts = Facts {
        entries: &entries,
        rows: &rows,
        marks: &marks,
        logs: &logs,
        bounds: Bounds {
            t,
            tick,
            sample,
            slack: opts.slack,
        },
    };
    let checks = check::scenario(
        &scenario.clauses,
        scenario.invariants,
        &scenario.expect,
        &step_errors,
        &facts,
    );
    let replicas: Vec<String> = scenario.replicas.keys().cloned().collect();
    evidence.write(&Record {
        scenario: &scenario.name,
        entries: &entries,
        replicas: &replicas,
        t,
        checks: &checks,
        rows: &rows,
    })?;
    let source = Source {
        name: scenario.name.clone(),
        seconds: began.elapsed().as_secs_f64(),
        checks,
        evidence: Some(evidence.relative().to_owned()),
    };
    Ok(Outcome { source, entries })
}

/// Where the scenario files are, by default: `scenarios/` at the workspace root.
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}
