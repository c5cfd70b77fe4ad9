//! Runs one scenario against a fresh topology: starts the services and the replicas
//! ([`stage`]), interprets the steps ([`steps`]), stops everything, then hands the timeline to
//! the [checks](crate::check) and the evidence to the [report](crate::report::evidence).
//! [`Session`] is the same run taken a step at a time (`harness up`).

mod barrier;
mod stage;
mod steps;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::check::{self, Bounds, Facts};
use crate::fault::FaultRecord;
use crate::replica::program::Program;
use crate::replica::ReceivedEvent;
use crate::report::evidence::{Evidence, Record};
use crate::report::Source;
use crate::scenario::model::{Scenario, Step};
use crate::timeline::{Entry, Timeline};
use crate::topology::{Images, Teardowns, Topology, TopologyConfig};
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
    /// The program every replica runs: the harness binary re-executed as `harness replica`,
    /// or another program from `--replica-cmd`.
    pub program: Program,
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

/// A scenario whose replica's program needs a newer PostgreSQL than the run's server (its
/// `postgres_from`): the run stops before any replica starts, and the scenario is not run.
#[derive(Debug, thiserror::Error)]
#[error(
    "not run: replica {replica}'s program needs PostgreSQL {needs} or later (postgres_from); \
     the server is PostgreSQL {server}"
)]
pub struct ServerTooOld {
    /// The replica that declares the need.
    pub replica: String,
    /// The oldest major its program runs on.
    pub needs: u32,
    /// The server's major.
    pub server: u32,
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
    run_after(scenario, opts, None).await
}

/// As [`run`], with the topology started [`after`](TopologyConfig::after) `teardowns` (when
/// given): its start waits for their removals, and its own removal joins them instead of
/// holding up the outcome.
///
/// # Errors
/// As [`run`].
pub async fn run_after(
    scenario: &Scenario,
    opts: &RunOptions,
    teardowns: Option<&Teardowns>,
) -> anyhow::Result<Outcome> {
    let mut topology = TopologyConfig::docker()
        .images(opts.images.clone())
        .data_in_memory(!scenario.stops_server());
    if let Some(queue) = teardowns {
        topology = topology.after(queue.clone());
    }
    let mut session = Session::start(scenario, opts, topology).await?;
    session.await_first_asks(scenario).await;
    let step_errors = session.play(&scenario.steps).await;
    session.finish(scenario, &step_errors).await
}

/// How long a scenario waits for its replicas' first lock calls before its first step
/// ([`Session::await_first_asks`]): a program's boot, on a loaded machine.
pub const FIRST_ASKS_WITHIN: Duration = Duration::from_secs(10);

/// One scenario run in progress: its stage (topology, replicas, nemesis, samplers, timeline),
/// the step player, and its evidence folder. [`run`] plays a file's steps at once; `harness
/// up` plays steps one at a time, as a person types them.
pub struct Session {
    player: Player,
    evidence: Evidence,
    bounds: Bounds,
    began: Instant,
    played: usize,
    level: crate::level::Level,
}

/// A replica's events: the history so far and the live rest.
#[derive(Debug)]
pub struct ReplicaEvents {
    /// The replica.
    pub replica: String,
    /// Every event received before the subscription began (or just after).
    pub so_far: Vec<ReceivedEvent>,
    /// The events from the subscription on.
    pub live: broadcast::Receiver<ReceivedEvent>,
}

/// What one step did: when it began and ended (ms since the run's start) and the faults it
/// applied or lifted.
#[derive(Clone, Debug, PartialEq)]
pub struct Acted {
    /// When the step began.
    pub began_ms: f64,
    /// When it was done.
    pub ended_ms: f64,
    /// The faults it applied or lifted, in order.
    pub records: Vec<FaultRecord>,
}

impl Session {
    /// Creates the evidence folder, starts the topology `topology` describes (plus what the
    /// replicas need), the replicas of `scenario` and the samplers.
    ///
    /// # Errors
    /// The folder, the topology or a replica could not be made (what started is removed).
    pub async fn start(
        scenario: &Scenario,
        opts: &RunOptions,
        topology: TopologyConfig,
    ) -> anyhow::Result<Session> {
        let began = Instant::now();
        let t = scenario.interval(opts.t);
        let tick = scenario.tick.map_or(t, |s| s.at(t));
        let evidence = Evidence::create(&opts.out, opts.evidence_dir(&scenario.name))
            .map_err(|e| e.context(crate::exit::Failure::Report))?;
        let stage = Stage::start(scenario, topology, &opts.program, (t, tick), &evidence).await?;
        let bounds = Bounds {
            t,
            tick,
            sample: stage.sample_every(),
            slack: opts.slack,
        };
        Ok(Session {
            player: Player::new(stage, t, scenario.seed.unwrap_or(opts.seed)),
            evidence,
            bounds,
            began,
            played: 0,
            level: scenario.observes(&opts.program).level,
        })
    }

    /// Waits, before `scenario`'s first step, until each of its replicas that starts with the
    /// run and reaches the database has asked for the lock on the wire (at most
    /// [`FIRST_ASKS_WITHIN`]): its steps' bounds count from an election under way, whatever
    /// a program's boot took. Nothing is judged here; a replica that never asks is left to the
    /// checks.
    pub async fn await_first_asks(&self, scenario: &Scenario) {
        let names: Vec<String> = (scenario.replicas.iter())
            .filter(|(_, d)| d.path.replica_path().is_some() && d.start_after.is_none())
            .map(|(name, _)| name.clone())
            .collect();
        let stage = &self.player.stage;
        let missing = stage.first_asks(&names, FIRST_ASKS_WITHIN).await;
        if !missing.is_empty() {
            tracing::info!(?missing, "no lock call on the wire before the first step");
        }
    }

    /// Plays `steps` in order until one fails; returns what failed.
    pub async fn play(&mut self, steps: &[Step]) -> Vec<String> {
        self.played += steps.len();
        self.player.play(steps).await
    }

    /// Plays one more step, numbered after those played so far.
    ///
    /// # Errors
    /// The step could not be carried out; nothing is recorded for it but its label.
    pub async fn act(&mut self, step: &Step) -> anyhow::Result<Acted> {
        let before = self.player.stage.nemesis.records().len();
        let began_ms = self.player.now_ms();
        self.played += 1;
        self.player.play_one(self.played, step).await?;
        let records = self.player.stage.nemesis.records().split_off(before);
        Ok(Acted {
            began_ms,
            ended_ms: self.player.now_ms(),
            records,
        })
    }

    /// The run's timeline (faults, steps and samples as they are recorded; the replicas' events
    /// join it when the run finishes: [`events`](Self::events) has them live).
    pub fn timeline(&self) -> &Timeline {
        &self.player.stage.timeline
    }

    /// Each replica's events: those received so far, and a subscription to the rest (which
    /// may repeat the last few of those so far: skip what is not later than them).
    pub fn events(&self) -> Vec<ReplicaEvents> {
        (self.player.stage.replicas.iter())
            .map(|(name, p)| {
                let live = p.events();
                ReplicaEvents {
                    replica: name.clone(),
                    so_far: p.history(),
                    live,
                }
            })
            .collect()
    }

    /// Each replica's name, pid and HTTP base URL.
    pub fn replicas(&self) -> Vec<(String, u32, String)> {
        (self.player.stage.replicas.iter())
            .map(|(name, p)| (name.clone(), p.pid(), p.base_url()))
            .collect()
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.player.stage.topology
    }

    /// Milliseconds since the run's start.
    pub fn now_ms(&self) -> f64 {
        self.player.now_ms()
    }

    /// The bounds the checks use.
    pub fn bounds(&self) -> Bounds {
        self.bounds
    }

    /// What the replica program lets the checks observe.
    pub fn level(&self) -> crate::level::Level {
        self.level
    }

    /// The evidence folder, relative to the output folder.
    pub fn evidence(&self) -> &str {
        self.evidence.relative()
    }

    /// Stops everything, decides the checks of `scenario` (its clauses, invariants and
    /// expectations, and `step_errors`) and writes the evidence.
    ///
    /// # Errors
    /// The evidence could not be written.
    pub async fn finish(
        self,
        scenario: &Scenario,
        step_errors: &[String],
    ) -> anyhow::Result<Outcome> {
        let (stage, marks) = self.player.into_parts();
        let (entries, rows, wire) = stage.stop().await;
        let logs = self.evidence.read_logs(scenario.replicas.keys());
        let pooled = scenario.pooled();
        let wire_setup = scenario.wire_setup(wire.tapped);
        let work_read = rows.is_some();
        let rows = rows.unwrap_or_default();
        let facts = Facts {
            entries: &entries,
            rows: &rows,
            work_read,
            marks: &marks,
            logs: &logs,
            bounds: self.bounds,
            pooled: &pooled,
            wire: &wire_setup,
        };
        let checks = check::scenario(
            scenario.invariants,
            &scenario.expect,
            step_errors,
            &facts,
            self.level,
        );
        let replicas: Vec<String> = scenario.replicas.keys().cloned().collect();
        self.evidence.write(&Record {
            scenario: &scenario.name,
            entries: &entries,
            replicas: &replicas,
            t: self.bounds.t,
            checks: &checks,
            rows: &rows,
        })?;
        self.evidence.write_wire(&wire)?;
        let source = Source {
            name: scenario.name.clone(),
            seconds: self.began.elapsed().as_secs_f64(),
            checks,
            evidence: Some(self.evidence.relative().to_owned()),
        };
        Ok(Outcome { source, entries })
    }
}

/// Where the scenario files are, by default: `scenarios/` at the workspace root.
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}
