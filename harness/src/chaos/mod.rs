//! `harness chaos`: seeded random fault schedules, run against a fresh topology each and checked
//! as one history.
//!
//! Each seed draws a [schedule](schedule::draw), which is a scenario like any file's: the same
//! runner plays it, the same checks decide it (the continuous invariants, the history checks of
//! [`check::history`](crate::check::history), the bounds the schedule states, liveness after
//! the final heal), and it is written back as a scenario file beside its evidence. A seed that
//! finds a violation prints itself and the command that replays its file; `harness run` on that
//! file runs the same schedule with the same seed. After each seed the harness also checks that
//! nothing of the run is left: no replica process, no container or network.
//!
//! `--seeds N` runs N consecutive seeds; `--soak 8h` keeps drawing seeds until the time is up.
//! Each seed prints one line with the running counts of seeds, fault events and violations;
//! at the end, the [coverage] of the fault space (which strike met which role in which phase)
//! is printed and joins the report.

pub mod coverage;
pub mod schedule;
pub mod shrink;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Args;
use tokio::time::Instant;

use crate::check::wire::model::WireModel;
use crate::check::{Check, Verdict};
use crate::event::ReplicaEvent;
use crate::replica::program::Program;
use crate::report::{Report, Source};
use crate::scenario::model::{DbPath, Scenario};
use crate::scenario::run::{RunOptions, Session};
use crate::timeline::{Entry, What};
use crate::topology::cleanup::{sweep, SweepScope};
use crate::topology::{random_run_id, Images, ReplicaPath, TopologyConfig};
use coverage::Coverage;

/// The flags of `harness chaos`.
#[derive(Debug, Args)]
pub struct ChaosArgs {
    /// The first seed (default: random, printed); seeds are at most 2^63 - 1, so a scenario
    /// file can hold them.
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=i64::MAX as u64))]
    pub seed: Option<u64>,
    /// How long each seed's fault rounds last, at least (`1m`, `90s`).
    #[arg(long, default_value = "1m", value_parser = crate::flags::positive)]
    pub duration: Duration,
    /// How many consecutive seeds to run.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub seeds: u32,
    /// The soak: keep drawing seeds until this much time has passed (`30m`, `8h`); overrides
    /// `--seeds`.
    #[arg(long, value_parser = crate::flags::positive)]
    pub soak: Option<Duration>,
    /// How many replicas (2 to 10).
    #[arg(long, short = 'n', default_value = "3", value_parser = crate::flags::replicas)]
    pub replicas: usize,
    /// The replicas' paths to PostgreSQL, given out in turn (`direct`, `pgbouncer-session`,
    /// `pgbouncer-transaction`, `pgbouncer-transaction-1`). With a transaction-mode path the
    /// elector refuses to lead (POOL-1): the seeds check the safety properties only.
    #[arg(long, value_delimiter = ',', default_value = "direct")]
    pub paths: Vec<ReplicaPath>,
    /// The check interval T (`200ms`, `1s`: a unit is required), 50 ms to 10 min.
    #[arg(long = "t", default_value = "200ms", value_parser = crate::flags::check_interval)]
    pub t: Duration,
    /// X-FENCE: the replicas fence their leader-only work with their terms' tokens, and every
    /// history also checks that no fenced write landed after a newer term began (the harness's
    /// own replica only).
    #[arg(long)]
    pub fence: bool,
    /// X-WAKE: each standby keeps a session queued on the lock (the harness's own replica
    /// only); every history is checked as without it.
    #[arg(long)]
    pub wake: bool,
    /// Scheduling noise allowed on top of each bound (small against T; less than T).
    #[arg(long, default_value = "50ms", value_parser = crate::flags::duration)]
    pub slack: Duration,
    /// Where each seed's evidence (`scenarios/chaos-<seed>/`, with its schedule as
    /// `chaos-<seed>.toml`) and the report go.
    #[arg(long, default_value = "target/chaos")]
    pub out: PathBuf,
    /// Images (default: `ELECTOR_*_IMAGE`, else the local ones, else upstream).
    #[command(flatten)]
    pub images: crate::topology::images::ImageArgs,
    /// The replica program (default: the harness's own replica).
    #[command(flatten)]
    pub program: crate::replica::program::ProgramArgs,
    /// Compares implementations: runs the same seeds against each and writes one report.html
    /// with a column per implementation (each one's own report and evidence in `<out>/<NAME>/`).
    /// Repeat it: `ours` (the harness's own replica), `NAME=CMD` (a program at level 1) or
    /// `NAME:LEVEL=CMD`.
    #[arg(long = "impl", value_name = "IMPL", conflicts_with = "replica_cmd")]
    pub implementations: Vec<String>,
    /// Shrink each seed that finds a violation to the smallest schedule that still violates
    /// the same clause (delta debugging over its rounds, then its second strikes; each try a
    /// fresh run), written beside the seed's schedule as `chaos-<seed>-shrunk.toml`.
    #[arg(long)]
    pub shrink: bool,
    /// The most runs a shrink may try, per violating seed.
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..), requires = "shrink")]
    pub shrink_tries: u32,
}

impl ChaosArgs {
    /// The rules between flags (each flag's own range is checked as it is parsed).
    ///
    /// # Errors
    /// Fewer than two replicas, or `--slack` not below `--t`.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.replicas < 2 {
            bail!(
                "--replicas {}: chaos strikes a leader and a standby, so it needs at least 2",
                self.replicas
            );
        }
        let other =
            self.program.replica_cmd.is_some() || self.implementations.iter().any(|i| i != "ours");
        if self.fence && other {
            bail!("--fence is a flag of the harness's own replica; a program of --replica-cmd or --impl fences in its own way");
        }
        if self.wake && other {
            bail!("--wake is a flag of the harness's own replica; a program of --replica-cmd or --impl wakes in its own way");
        }
        if self.slack >= self.t {
            bail!("--slack must be less than --t: the slack is scheduling noise, small against T");
        }
        Ok(())
    }

    fn params(&self, seed: u64, ours: bool) -> schedule::Params {
        schedule::Params {
            seed,
            duration: self.duration,
            replicas: self.replicas,
            paths: (self.paths.iter()).map(|&p| DbPath::from(p)).collect(),
            t: self.t,
            ours,
            fence: self.fence,
            wake: self.wake,
        }
    }
}

/// What one seed's run found.
#[derive(Debug)]
pub struct SeedRun {
    /// The seed.
    pub seed: u64,
    /// Its checks, as a report source.
    pub source: Source,
    /// How many fault events it played: faults, heals, restarts and worker faults.
    pub fault_events: usize,
    /// Its schedule's scenario file.
    pub file: PathBuf,
    /// Which strike met which role in which phase, read off its history.
    pub coverage: Coverage,
}

impl SeedRun {
    /// The checks that did not hold.
    pub fn violations(&self) -> impl Iterator<Item = &Check> {
        // A check not run for what the program lacks (its level) is no violation.
        (self.source.checks.iter()).filter(|c| c.verdict != Verdict::Valid && c.needs.is_none())
    }
}

/// Runs the seeds the flags ask for, prints a running count after each, writes the report;
/// fails when any seed found a violation. With `--impl`, the same seeds run against each
/// implementation in turn, and one report compares them.
///
/// # Errors
/// Bad flags, or a seed's topology could not start.
pub async fn main(args: ChaosArgs) -> anyhow::Result<ExitCode> {
    use crate::exit::Failure;
    args.validate().context(Failure::Usage)?;
    let first = args
        .seed
        .unwrap_or_else(|| fastrand::u64(..=i64::MAX as u64));
    let binary = std::env::current_exe().context("locating the harness binary")?;
    if !args.implementations.is_empty() {
        return compare(&args, first, &binary).await;
    }
    let program = args.program.program(binary).context(Failure::Usage)?;
    let soak = run_seeds(&args, &program, &args.out, &Seeds::Flags(first)).await?;
    soak.report.write(&args.out).context(Failure::Report)?;
    print!("\n{}\n", soak.coverage.table().markdown());
    println!("{}", soak.report.summary_line());
    println!("report: {}", args.out.join("report.html").display());
    Ok(if soak.violating.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Which seeds a run plays.
enum Seeds {
    /// From this one on, as many as the flags ask for (`--seeds`, or `--soak`'s time).
    Flags(u64),
    /// Exactly these (those another implementation ran).
    These(Vec<u64>),
}

/// What a run of seeds found.
struct Soak {
    /// Its report: a source per seed.
    report: Report,
    /// The seeds it ran, in order.
    seeds: Vec<u64>,
    /// The fault events it played.
    events: usize,
    /// The seeds that found a violation.
    violating: Vec<u64>,
    /// What its strikes met, over every seed.
    coverage: Coverage,
}

impl Soak {
    /// `ran N seed(s), E fault event(s), no violation` or `..., a violation at seed(s) ...`.
    fn counts(&self) -> String {
        let found = if self.violating.is_empty() {
            "no violation".to_owned()
        } else {
            let seeds: Vec<String> = self.violating.iter().map(u64::to_string).collect();
            format!("a violation at seed(s) {}", seeds.join(", "))
        };
        format!(
            "{} seed(s), {} fault event(s), {found}",
            self.seeds.len(),
            self.events
        )
    }
}

/// Runs `seeds` with `program`, evidence under `out`, printing each seed's line and the running
/// counts.
async fn run_seeds(
    args: &ChaosArgs,
    program: &Program,
    out: &Path,
    seeds: &Seeds,
) -> anyhow::Result<Soak> {
    let first = match seeds {
        Seeds::Flags(first) => *first,
        Seeds::These(these) => these.first().copied().unwrap_or_default(),
    };
    let opts = RunOptions {
        t: args.t,
        seed: first,
        out: out.to_owned(),
        program: program.clone(),
        images: Images::from(&args.images),
        slack: args.slack,
        repeat: 1,
    };
    eprintln!(
        "harness chaos: seeds from {first}, {} each, {} replicas, T = {:?}, {}, output in {}",
        humantime::format_duration(args.duration),
        args.replicas,
        args.t,
        program.summary(),
        out.display()
    );
    let began = Instant::now();
    let (mut ran, mut events, mut violating, mut sources) = (Vec::new(), 0, Vec::new(), Vec::new());
    let mut coverage = Coverage::default();
    for (i, seed) in (first..=i64::MAX as u64).enumerate() {
        let seed = match seeds {
            Seeds::Flags(_) if args.soak.is_some_and(|soak| began.elapsed() >= soak) => break,
            Seeds::Flags(_) if args.soak.is_none() && i >= args.seeds as usize => break,
            Seeds::Flags(_) => seed,
            Seeds::These(these) => match these.get(i) {
                Some(&seed) => seed,
                None => break,
            },
        };
        let run = run_seed(&args.params(seed, program.is_ours()), &opts).await?;
        events += run.fault_events;
        coverage.add(&run.coverage);
        ran.push(seed);
        let found: Vec<&Check> = run.violations().collect();
        if !found.is_empty() {
            violating.push(seed);
        }
        print_seed(&run, &found);
        if args.shrink && !found.is_empty() {
            let drawn = schedule::drawn(&args.params(seed, program.is_ours()));
            let tries = args.shrink_tries as usize;
            eprintln!("  shrinking seed {seed}: at most {tries} runs of its schedule's parts");
            let shrunk = shrink::shrink(&drawn, &run, &opts, tries).await?;
            println!("  shrunk {shrunk}");
            println!("  replay:   harness run {}", shrunk.file.display());
        }
        println!(
            "  so far: {} seed(s), {events} fault event(s), {} seed(s) with a violation, {}",
            i + 1,
            violating.len(),
            humantime::format_duration(Duration::from_secs(began.elapsed().as_secs()))
        );
        sources.push(run.source);
    }
    let mut report = Report::new(
        args.t.as_millis() as u64,
        first,
        began.elapsed().as_secs_f64(),
        sources,
    );
    report.tables.push(coverage.table());
    Ok(Soak {
        report,
        seeds: ran,
        events,
        violating,
        coverage,
    })
}

/// `harness chaos --impl ...`: the seeds with each implementation in turn (the first one's
/// seeds, under `--soak` as many as its time allowed, are every other one's), each report in
/// `<out>/<name>/`, and the comparison in `<out>/`; then a line per implementation with its
/// counts and the seeds that found a violation. A program the harness cannot reach inside
/// draws no election-worker fault, so its schedule of a seed may differ from ours in those.
async fn compare(args: &ChaosArgs, first: u64, binary: &Path) -> anyhow::Result<ExitCode> {
    use crate::report::compare::{Comparison, Implementation};
    let impls = crate::replica::program::implementations(&args.implementations, binary)?;
    let mut seeds = Seeds::Flags(first);
    let (mut columns, mut counts) = (Vec::new(), Vec::new());
    for i in impls {
        let soak = run_seeds(args, &i.program, &args.out.join(&i.name), &seeds).await?;
        counts.push(format!(
            "{}: {}\n\n{}",
            i.name,
            soak.counts(),
            soak.coverage.table().markdown()
        ));
        seeds = Seeds::These(soak.seeds);
        columns.push(Implementation {
            name: i.name,
            program: i.program.summary(),
            report: soak.report,
        });
    }
    for line in &counts {
        println!("{line}");
    }
    crate::suite::conclude(
        &Comparison {
            implementations: columns,
        },
        &args.out,
    )
}

fn print_seed(run: &SeedRun, found: &[&Check]) {
    if found.is_empty() {
        println!(
            "seed {}: pass, {} fault event(s) ({:.0} s)",
            run.seed, run.fault_events, run.source.seconds
        );
        return;
    }
    println!(
        "seed {}: VIOLATION after {} fault event(s) ({:.0} s)",
        run.seed, run.fault_events, run.source.seconds
    );
    for c in found {
        println!("  {c}");
    }
    println!("  schedule: {}", run.file.display());
    println!("  replay:   harness run {}", run.file.display());
}

/// Draws `p`'s schedule, writes it beside its evidence, runs it on a fresh topology, decides
/// its checks and checks that nothing of the run is left.
///
/// # Errors
/// The schedule could not be written, or the topology could not start.
pub async fn run_seed(p: &schedule::Params, opts: &RunOptions) -> anyhow::Result<SeedRun> {
    run_scenario(&schedule::draw(p), p.seed, opts).await
}

/// Runs `scenario`, seed `seed`'s schedule or a part of it, as [`run_seed`] does.
///
/// # Errors
/// The schedule could not be written, or the topology could not start.
pub async fn run_scenario(
    scenario: &Scenario,
    seed: u64,
    opts: &RunOptions,
) -> anyhow::Result<SeedRun> {
    let run_id = format!("chaos-{seed}-{}", random_run_id());
    let topology = TopologyConfig {
        run_id: Some(run_id.clone()),
        ..(TopologyConfig::docker().images(opts.images.clone()))
            .data_in_memory(!scenario.stops_server())
    };
    let mut session = Session::start(scenario, opts, topology).await?;
    let file = write_schedule(scenario, &opts.out.join(session.evidence()))?;
    session.await_first_asks(scenario).await;
    let step_errors = session.play(&scenario.steps).await;
    let outcome = session.finish(scenario, &step_errors).await?;
    let mut source = outcome.source;
    source
        .checks
        .push(nothing_left(&outcome.entries, &run_id).await);
    Ok(SeedRun {
        seed,
        fault_events: fault_events(&outcome.entries),
        source,
        file,
        coverage: Coverage::of(&outcome.entries, &WireModel::of(&outcome.entries)),
    })
}

/// Writes `scenario` as `<its name>.toml` in `dir`.
fn write_schedule(scenario: &Scenario, dir: &Path) -> anyhow::Result<PathBuf> {
    let file = dir.join(&scenario.file);
    std::fs::write(&file, scenario.to_toml())
        .with_context(|| format!("writing {}", file.display()))?;
    Ok(file)
}

/// The fault events a run played: every step that acted (a fault, a heal, a restart, a worker
/// fault), as the timeline recorded it.
fn fault_events(entries: &[Entry]) -> usize {
    (entries.iter())
        .filter(|e| matches!(e.what, What::Step { acts: true, .. }))
        .count()
}

/// After the run: no replica process of it still runs (every pid its replicas reported is
/// gone), and no container or network of it is left (a sweep of the run finds nothing).
async fn nothing_left(entries: &[Entry], run_id: &str) -> Check {
    let pids: Vec<u32> = (entries.iter())
        .filter_map(|e| match &e.what {
            What::Replica {
                event: ReplicaEvent::Started { pid, .. },
                ..
            } => Some(*pid),
            _ => None,
        })
        .collect();
    let running: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    let swept = sweep(SweepScope::Run(run_id.to_owned())).await;
    let (verdict, message) = match (&running[..], swept) {
        ([], Ok(s)) if s.is_empty() => (
            Verdict::Valid,
            format!(
                "{} replica process(es) started, none left; no container or network left",
                pids.len()
            ),
        ),
        (running, Ok(s)) => (
            Verdict::Invalid,
            format!(
                "left behind: replica pids {running:?}, containers {:?}, networks {:?}",
                s.containers, s.networks
            ),
        ),
        (_, Err(e)) => (Verdict::Unknown, format!("the sweep failed: {e:#}")),
    };
    Check::new("nothing left after the run", &[], verdict, message)
}

/// Whether process `pid` still exists (signal 0 reaches it).
fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}
