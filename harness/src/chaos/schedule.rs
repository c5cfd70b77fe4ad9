//! Draws a chaos schedule from one seed: a [`Scenario`] like any file's, so it is run by the
//! same runner, checked by the same checks, written back as a scenario file and replayed with
//! `harness run`. Same seed, same parameters: same schedule.
//!
//! A schedule is a run of rounds. Each round waits for a leader (liveness between faults),
//! strikes the leader with one fault drawn from every verb the harness has (network faults with
//! and without jitter, the backend, the server, the process, the election worker), now and then
//! strikes a second time (a standby, or the struck leader again with a fault that combines),
//! holds, then lifts every fault of the round (a heal, or a restart for a process that is gone)
//! and lets the system settle. Where a round's outcome is certain, it also states the bound the
//! conformance scenarios hold it to (demotion, release, abandonment). After the last round, a
//! leader must lead within 5T of the final heal.
//!
//! When a replica goes through a transaction-mode pooler, the elector refuses to lead there
//! (POOL-1): no replica is owed leadership, and the lock's server session serves no one replica.
//! Such a schedule checks the safety properties only ([`Invariants::Safety`]): it waits by
//! sleeping, strikes replicas by name (and the lock's backend, whoever's it is), and states no
//! bound and no final liveness.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use crate::check::expect::{Awaited, Expect, Who};
use crate::check::Expectation;
use crate::check::Invariants;
use crate::event::EventKind;
use crate::fault::{Subject, Verb};
use crate::replica::control::WorkerMode;
use crate::scenario::model::{
    invariants_for, Control, DbPath, Latency, ReplicaDecl, Scenario, Span, Step, Target, WaitFor,
};
use crate::snapshot::Story;

/// The election's supervised worker in every replica.
const ELECTION_WORKER: &str = "background-leader";
/// A while-leader loop's supervised worker.
const LEADER_LOOP_WORKER: &str = "audit-archiver";

/// What a schedule is drawn for.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// The seed every draw follows.
    pub seed: u64,
    /// How long the rounds should take, at least (the schedule ends with the round that
    /// passes it, then the final liveness check).
    pub duration: Duration,
    /// How many replicas (2 or more: a round strikes the leader and a standby).
    pub replicas: usize,
    /// Their paths to the database, given out in turn (`r1` the first, ...).
    pub paths: Vec<DbPath>,
    /// The check interval T.
    pub t: Duration,
    /// Whether the replicas run the harness's own replica. Another program takes no replica
    /// flags and has no `/control`: its schedules strike with the network, database and
    /// process verbs only (no worker faults).
    pub ours: bool,
    /// X-FENCE: the harness's replicas fence their leader-only work (`--fence`), so that the
    /// history also checks that no fenced write lands after a newer term began. The schedule
    /// is drawn the same either way.
    pub fence: bool,
    /// X-WAKE: the harness's replicas keep a session queued on the lock (`--wake`). The
    /// schedule is drawn the same either way.
    pub wake: bool,
}

/// One strike of a round.
#[derive(Clone, Debug, PartialEq)]
enum Strike {
    /// A fault verb (with its latency, for [`Verb::Latency`]).
    Fault(Verb, Option<Latency>),
    /// A supervised worker's run panics or returns.
    Worker(&'static str, WorkerMode),
}

/// The link verbs both strikes draw from, first in their lists (a seed's draws follow the order).
/// The one-way partitions (`partition-requests`, `partition-answers`) are not drawn yet: their
/// first chaos runs found two defects of the harness and a misread grant its replica never
/// heard of (each fixed, each a test); they join the draws after a soak of them passes.
const LINK: [Verb; 4] = [Verb::Partition, Verb::Stall, Verb::Reset, Verb::Disable];

/// What the leader may be struck with first: every verb and worker fault.
fn first_strikes() -> Vec<Strike> {
    use Verb::*;
    let others = [
        KillBackend,
        Kill,
        Freeze,
        Terminate,
        RestartServer,
        StopServer,
    ];
    let verbs: Vec<Verb> = LINK.into_iter().chain(others).collect();
    strikes(&verbs, &[(LEADER_LOOP_WORKER, WorkerMode::Crash)])
}

/// What a standby, or the struck leader again, may be struck with second.
fn second_strikes() -> Vec<Strike> {
    use Verb::*;
    let verbs: Vec<Verb> = LINK.into_iter().chain([Kill, Freeze, Terminate]).collect();
    strikes(&verbs, &[])
}

/// `verbs`, then both latencies, then a crash and an exit of the election worker, then
/// `workers`: the order a seed's draws follow.
fn strikes(verbs: &[Verb], workers: &[(&'static str, WorkerMode)]) -> Vec<Strike> {
    let mut v: Vec<Strike> = (verbs.iter())
        .map(|&verb| Strike::Fault(verb, None))
        .collect();
    v.extend(latencies());
    v.extend([
        Strike::Worker(ELECTION_WORKER, WorkerMode::Crash),
        Strike::Worker(ELECTION_WORKER, WorkerMode::Exit),
    ]);
    v.extend(
        workers
            .iter()
            .map(|&(name, mode)| Strike::Worker(name, mode)),
    );
    v
}

/// Whether `strike` is lifted by starting its process again (a kill, a SIGTERM).
fn restarts(strike: &Strike) -> bool {
    matches!(strike, Strike::Fault(Verb::Kill | Verb::Terminate, _))
}

/// A slow link below T (ORPH-3: the leader keeps the lock) and one beyond it, with jitter.
fn latencies() -> [Strike; 2] {
    let delay = |k: f64, j: f64| Latency {
        delay: Span::T(k),
        jitter: (j > 0.0).then_some(Span::T(j)),
    };
    [
        Strike::Fault(Verb::Latency, Some(delay(0.4, 0.1))),
        Strike::Fault(Verb::Latency, Some(delay(1.5, 0.5))),
    ]
}

/// Draws the schedule of `p`.
pub fn draw(p: &Params) -> Scenario {
    drawn(p).scenario
}

/// A schedule as drawn, with its rounds marked: what a shrink keeps or drops.
#[derive(Clone, Debug, PartialEq)]
pub struct Drawn {
    /// The whole schedule.
    pub scenario: Scenario,
    /// Its rounds, in order.
    rounds: Vec<Round>,
}

/// Where one round's steps and expectations are in its schedule.
#[derive(Clone, Debug, PartialEq)]
struct Round {
    steps: Range<usize>,
    expect: Range<usize>,
    /// Its second strike's step and the step that lifts it (empty: no second strike).
    second: Vec<usize>,
}

/// A part of a schedule a shrink may drop: a whole round, or a round's second strike with its
/// lift (by the round's index).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    /// A whole round.
    Round(usize),
    /// A round's second strike and its lift.
    Second(usize),
}

impl Drawn {
    /// Every round.
    pub fn rounds(&self) -> Vec<Part> {
        (0..self.rounds.len()).map(Part::Round).collect()
    }

    /// Every second strike of the rounds in `kept`.
    pub fn seconds(&self, kept: &[Part]) -> Vec<Part> {
        (kept.iter())
            .filter_map(|p| match p {
                Part::Round(i) if !self.rounds[*i].second.is_empty() => Some(Part::Second(*i)),
                _ => None,
            })
            .collect()
    }

    /// The schedule with only the parts in `kept` of those in `among` (every part not in
    /// `among` stays), named `name`: the first wait, the final liveness check and the steps of
    /// the kept rounds, in order.
    pub fn keeping(&self, among: &[Part], kept: &[Part], name: &str) -> Scenario {
        let dropped: Vec<&Part> = among.iter().filter(|p| !kept.contains(p)).collect();
        let (mut steps, mut expect) = (BTreeSet::new(), BTreeSet::new());
        for part in dropped {
            match *part {
                Part::Round(i) => {
                    steps.extend(self.rounds[i].steps.clone());
                    expect.extend(self.rounds[i].expect.clone());
                }
                Part::Second(i) => steps.extend(self.rounds[i].second.iter().copied()),
            }
        }
        let s = &self.scenario;
        Scenario {
            name: name.to_owned(),
            file: PathBuf::from(format!("{name}.toml")),
            steps: but(&s.steps, &steps),
            expect: but(&s.expect, &expect),
            ..s.clone()
        }
    }
}

/// `all` but the items at the indices in `dropped`.
fn but<T: Clone>(all: &[T], dropped: &BTreeSet<usize>) -> Vec<T> {
    (all.iter().enumerate())
        .filter(|(i, _)| !dropped.contains(i))
        .map(|(_, x)| x.clone())
        .collect()
}

/// How many strikes `scenario` plays: every fault step but a process restart (a schedule's
/// lift of a kill) and every control step but a switch back to `ok`.
pub fn strike_count(scenario: &Scenario) -> usize {
    (scenario.steps.iter())
        .filter(|s| match s {
            Step::Fault { verb, .. } => *verb != Verb::Restart,
            Step::Control { command, .. } => !command.lifts(),
            _ => false,
        })
        .count()
}

/// Draws the schedule of `p`, its rounds marked.
pub fn drawn(p: &Params) -> Drawn {
    let mut d = Drawer {
        rng: fastrand::Rng::with_seed(p.seed),
        steps: Vec::new(),
        expect: Vec::new(),
        rounds: Vec::new(),
        planned_t: 0.0,
        pooled: None,
        ours: p.ours,
    };
    let replicas = replicas(p);
    if invariants_for(&replicas) == Invariants::Safety {
        d.pooled = Some(replicas.keys().cloned().collect());
    }
    d.wait(WaitFor::Leader, 5.0, None);
    let rounds_t = p.duration.as_secs_f64() / p.t.as_secs_f64();
    let mut round = 0;
    while d.planned_t < rounds_t {
        round += 1;
        d.round(round);
    }
    if d.pooled.is_none() {
        d.wait(WaitFor::Leader, 5.0, Some("final".into()));
    }
    d.sleep(2.0);
    let name = format!("chaos-{}", p.seed);
    let scenario = Scenario {
        name: name.clone(),
        file: PathBuf::from(format!("{name}.toml")),
        description: format!(
            "A chaos schedule drawn by `harness chaos` from seed {}: {round} round(s) of \
             faults on {} replicas, each round waiting for a leader, striking it (and now and \
             then a standby, or the leader again), holding, and lifting every fault; checked \
             as a history. Replay it with `harness run` on this file.",
            p.seed, p.replicas
        ),
        clauses: ["MET-1", "LOCK-3", "ISL-1", "DEM-3", "RUN-3", "ORPH-2"]
            .map(String::from)
            .to_vec(),
        t: Some(Span::Abs(p.t)),
        tick: None,
        default_interval: false,
        seed: Some(p.seed),
        invariants: invariants_for(&replicas),
        story: Story::Faults,
        replicas,
        steps: d.steps,
        expect: d.expect,
    };
    Drawn {
        scenario,
        rounds: d.rounds,
    }
}

/// `r1`..`rN`, their paths given out in turn, with a restart budget that chaos cannot use up
/// and a back-off of T, so a crashed worker is back within the round.
fn replicas(p: &Params) -> BTreeMap<String, ReplicaDecl> {
    let backoff = p.t.as_millis().to_string();
    (1..=p.replicas)
        .map(|i| {
            let path = p.paths.get((i - 1) % p.paths.len().max(1)).copied();
            let args = [
                "--restart-budget",
                "1000",
                "--restart-window-ms",
                "60000",
                "--restart-backoff-ms",
                &backoff,
            ]
            .map(String::from)
            .to_vec();
            let args = (args.into_iter())
                .chain(p.fence.then(|| "--fence".to_owned()))
                .collect();
            let decl = ReplicaDecl {
                path: path.unwrap_or_default(),
                args: if p.ours { args } else { Vec::new() },
                wake: p.wake && p.ours,
                ..ReplicaDecl::default()
            };
            (format!("r{i}"), decl)
        })
        .collect()
}

/// The schedule as it is drawn.
struct Drawer {
    rng: fastrand::Rng,
    steps: Vec<Step>,
    expect: Vec<Expectation>,
    /// The rounds drawn so far.
    rounds: Vec<Round>,
    /// The rounds' planned length so far, in T (waits counted at a typical 1T).
    planned_t: f64,
    /// The replicas' names when one goes through a transaction-mode pooler: the schedule then
    /// owes no liveness (see the module's docs).
    pooled: Option<Vec<String>>,
    /// Whether worker faults can be struck (the harness's own replica).
    ours: bool,
}

impl Drawer {
    /// `strikes` without the worker faults when the program is not the harness's own.
    fn only_reachable(&self, strikes: Vec<Strike>) -> Vec<Strike> {
        let ours = self.ours;
        (strikes.into_iter())
            .filter(|s| ours || matches!(s, Strike::Fault(..)))
            .collect()
    }

    /// A multiple of 0.25T in `lo..=hi` (in T).
    fn quarter(&mut self, lo: f64, hi: f64) -> f64 {
        let steps = ((hi - lo) * 4.0).round() as u32;
        lo + f64::from(self.rng.u32(0..=steps)) / 4.0
    }

    fn sleep(&mut self, k: f64) {
        if k > 0.0 {
            self.planned_t += k;
            self.steps.push(Step::Sleep {
                span: Span::T(k),
                name: None,
            });
        }
    }

    fn wait(&mut self, until: WaitFor, within: f64, name: Option<String>) {
        if self.pooled.is_some() {
            self.sleep(1.0);
            return;
        }
        self.planned_t += 1.0;
        self.steps.push(Step::WaitFor {
            until,
            within: Some(Span::T(within)),
            name,
        });
    }

    /// Where a strike meant for `target` goes: there, or on a pooled schedule, a replica drawn
    /// by name for the leader or a standby (and the lock's backend, whoever's it is, for a
    /// backend kill).
    fn aim(&mut self, strike: &Strike, target: Target) -> Target {
        let Some(names) = self.pooled.clone() else {
            return target;
        };
        match (strike, target) {
            (Strike::Fault(Verb::KillBackend, _), _) => Target::Server,
            (_, Target::Leader | Target::Standby) => {
                Target::Replica(names[self.rng.usize(..names.len())].clone())
            }
            (_, target) => target,
        }
    }

    fn strike(&mut self, strike: &Strike, target: Target, name: &str) {
        let target = self.aim(strike, target);
        let name = Some(name.to_owned());
        self.steps.push(match strike {
            Strike::Fault(verb, latency) => Step::Fault {
                verb: *verb,
                target: if verb.subject() == Subject::Server {
                    Target::Server
                } else {
                    target
                },
                latency: *latency,
                name,
            },
            Strike::Worker(worker, mode) => Step::Control {
                command: Control::Worker {
                    name: (*worker).to_owned(),
                    mode: *mode,
                },
                target,
                name,
            },
        });
    }

    /// Expects `awaited` of the target of step `after` within `within` T.
    fn expect(&mut self, clause: &str, kind: EventKind, after: &str, within: f64) {
        self.expect.push(Expectation {
            clause: clause.to_owned(),
            expect: Expect::Event {
                awaited: Awaited::Event(kind),
                replica: Who::Named(after.to_owned()),
                after: Some(after.to_owned()),
                within: Some(Span::T(within)),
                not_before: None,
                absent: false,
            },
        });
    }

    /// One round: a leader, a strike on it, maybe a second strike, a hold, every fault lifted.
    fn round(&mut self, n: usize) {
        let (steps, expect) = (self.steps.len(), self.expect.len());
        let mut second_steps = Vec::new();
        self.wait(WaitFor::Leader, 10.0, None);
        let first = format!("r{n}-leader");
        let a = self.pick(&self.only_reachable(first_strikes()));
        self.strike(&a, Target::Leader, &first);
        let mut struck = vec![(a.clone(), first.clone())];
        let combines = matches!(&a, Strike::Fault(v, _) if v.subject() == Subject::Link);
        let second = if self.rng.u8(0..3) == 0 {
            let again = combines && self.rng.bool();
            let b = self.pick(&self.only_reachable(second_strikes()));
            let (target, name) = if again {
                (Target::Named(first.clone()), format!("r{n}-again"))
            } else {
                (Target::Standby, format!("r{n}-standby"))
            };
            second_steps.push(self.steps.len());
            self.strike(&b, target, &name);
            struck.push((b, name));
            Some(again)
        } else {
            None
        };
        let hold = self.quarter(0.5, 5.0);
        self.sleep(hold);
        // Bounds whose outcome the round makes certain: nothing else struck the leader.
        if second != Some(true) && self.pooled.is_none() {
            self.bounds_of(&a, &first, hold);
        }
        // A process is restarted after every other lift of the round: it needs its link and
        // the server to start (a pooled schedule may strike one replica twice: a kill, then a
        // partition of its link).
        let mut lifts: Vec<(usize, &(Strike, String))> = struck.iter().enumerate().collect();
        lifts.sort_by_key(|(_, (strike, _))| restarts(strike));
        for (i, (strike, name)) in lifts {
            let at = self.steps.len();
            self.lift(strike, name);
            if i == 1 && self.steps.len() > at {
                second_steps.push(at);
            }
        }
        let settle = self.quarter(0.0, 2.0);
        self.sleep(settle);
        self.rounds.push(Round {
            steps: steps..self.steps.len(),
            expect: expect..self.expect.len(),
            second: second_steps,
        });
    }

    /// The conformance bounds of the leader's strike `a` (named `name`) held for `hold` T.
    fn bounds_of(&mut self, a: &Strike, name: &str, hold: f64) {
        match a {
            Strike::Fault(
                Verb::Partition | Verb::PartitionRequests | Verb::PartitionAnswers | Verb::Stall,
                _,
            ) if hold >= 2.5 => {
                self.expect("DEM-2", EventKind::Demoted, name, 2.0);
            }
            Strike::Worker(ELECTION_WORKER, WorkerMode::Crash) => {
                self.expect("RUN-7", EventKind::Abandoned, name, 0.25);
            }
            Strike::Fault(Verb::Terminate, _) => {
                self.expect("RUN-6", EventKind::Released, name, 1.0);
            }
            _ => {}
        }
    }

    /// Lifts strike `name`: its verb's inverse, or a restart of a process that is gone.
    fn lift(&mut self, strike: &Strike, name: &str) {
        match strike {
            Strike::Fault(verb, _) if verb.inverse().is_some() => self.steps.push(Step::Heal {
                fault: name.to_owned(),
                name: None,
            }),
            Strike::Fault(Verb::Kill | Verb::Terminate, _) => self.steps.push(Step::Fault {
                verb: Verb::Restart,
                target: Target::Named(name.to_owned()),
                latency: None,
                name: None,
            }),
            _ => {}
        }
    }

    fn pick(&mut self, from: &[Strike]) -> Strike {
        from[self.rng.usize(..from.len())].clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(seed: u64) -> Params {
        Params {
            seed,
            duration: Duration::from_secs(60),
            replicas: 3,
            paths: vec![DbPath::Direct, DbPath::PgbouncerSession],
            t: Duration::from_millis(200),
            ours: true,
            fence: false,
            wake: false,
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_schedule_and_another_seed_another() {
        assert_eq!(draw(&params(7)), draw(&params(7)));
        assert_ne!(draw(&params(7)).steps, draw(&params(8)).steps);
    }

    #[test]
    fn a_schedule_is_a_valid_scenario_file_that_reads_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        for seed in 0..40 {
            let s = draw(&params(seed));
            let path = dir.path().join(&s.file);
            std::fs::write(&path, s.to_toml()).unwrap();
            let back = Scenario::load(&path).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert_eq!(back.steps, s.steps, "seed {seed}");
            assert_eq!(back.expect, s.expect, "seed {seed}");
            assert_eq!((back.seed, back.t), (s.seed, s.t));
        }
    }

    #[test]
    fn every_round_lifts_what_it_struck_and_the_run_ends_on_a_liveness_check() {
        for seed in 0..40 {
            let s = draw(&params(seed));
            let mut open: Vec<&str> = Vec::new();
            for step in &s.steps {
                match step {
                    Step::Fault { verb, name, .. } if verb.inverse().is_some() => {
                        open.push(name.as_deref().unwrap());
                    }
                    Step::Heal { fault, .. } => open.retain(|n| n != fault),
                    _ => {}
                }
            }
            assert!(open.is_empty(), "seed {seed}: {open:?} never healed");
            let tail: Vec<_> = s.steps.iter().rev().take(2).collect();
            assert!(
                matches!(tail[1], Step::WaitFor { until: WaitFor::Leader, within: Some(Span::T(k)), .. } if *k == 5.0),
                "seed {seed}: {:?}",
                tail[1]
            );
        }
    }

    /// POOL-1: a schedule with a replica behind a transaction-mode pooler holds the run to the
    /// safety properties only, owes no liveness (no wait for a leader, no bound), strikes
    /// replicas by name and the lock's backend on the server, and reads back the same.
    #[test]
    fn a_pooled_schedule_owes_safety_only() {
        let dir = tempfile::tempdir().unwrap();
        for seed in 0..20 {
            let mut p = params(seed);
            p.paths = vec![DbPath::PgbouncerTransaction, DbPath::Direct];
            let s = draw(&p);
            assert_eq!(s.invariants, Invariants::Safety);
            assert!(s.expect.is_empty(), "seed {seed}: {:?}", s.expect);
            for step in &s.steps {
                match step {
                    Step::WaitFor { .. } => panic!("seed {seed}: a wait for {step:?}"),
                    Step::Fault {
                        verb: Verb::KillBackend,
                        target,
                        ..
                    } => assert_eq!(*target, Target::Server, "seed {seed}"),
                    Step::Fault { target, .. } | Step::Control { target, .. } => assert!(
                        matches!(
                            target,
                            Target::Replica(_) | Target::Named(_) | Target::Server
                        ),
                        "seed {seed}: {target:?}"
                    ),
                    _ => {}
                }
            }
            let path = dir.path().join(&s.file);
            std::fs::write(&path, s.to_toml()).unwrap();
            let back = Scenario::load(&path).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert_eq!((back.steps, back.invariants), (s.steps, s.invariants));
        }
    }

    /// A shrink's candidates: keeping every part is the schedule itself; dropping a round
    /// drops its steps and its bounds and keeps the first wait and the final liveness check;
    /// dropping a second strike drops it and its lift, nothing else.
    #[test]
    fn a_schedule_keeps_the_rounds_and_second_strikes_a_shrink_asks_for() {
        for seed in 0..20 {
            let d = drawn(&params(seed));
            let all = d.rounds();
            assert!(all.len() >= 2, "seed {seed}");
            let same = d.keeping(&all, &all, "chaos");
            assert_eq!(
                (same.steps, same.expect),
                (d.scenario.steps.clone(), d.scenario.expect.clone())
            );
            let one = d.keeping(&all, &all[..1], "chaos-one");
            assert_eq!(one.name, "chaos-one");
            let r = &d.rounds[0];
            assert_eq!(
                one.steps.len(),
                1 + r.steps.len() + (d.scenario.steps.len() - d.rounds.last().unwrap().steps.end)
            );
            assert_eq!(one.expect.len(), r.expect.len(), "seed {seed}");
            assert_eq!(one.steps[0], d.scenario.steps[0]);
            assert_eq!(one.steps.last(), d.scenario.steps.last());
            for second in d.seconds(&all) {
                let Part::Second(i) = second else {
                    unreachable!()
                };
                let without = d.keeping(&[second], &[], "chaos");
                assert_eq!(
                    without.steps.len(),
                    d.scenario.steps.len() - d.rounds[i].second.len()
                );
                assert_eq!(
                    strike_count(&without),
                    strike_count(&d.scenario) - 1,
                    "seed {seed}"
                );
                assert_eq!(without.expect, d.scenario.expect);
            }
        }
    }

    /// A replica is started again only once its link is healed: CI's pooled seed 5 killed r3,
    /// then partitioned its link one way (a pooled schedule strikes replicas by name, twice
    /// the same one at times), and restarted it before the heal; it could not reach the
    /// server to start, five times in 30 s.
    #[test]
    fn a_process_is_restarted_after_its_link_is_healed() {
        for seed in 0..200 {
            let mut p = params(seed);
            p.paths = vec![DbPath::PgbouncerTransaction, DbPath::Direct];
            let s = draw(&p);
            let mut cut: BTreeMap<String, Target> = BTreeMap::new();
            let mut target_of: BTreeMap<String, Target> = BTreeMap::new();
            for step in &s.steps {
                match step {
                    Step::Fault {
                        verb: Verb::Restart,
                        target: Target::Named(n),
                        ..
                    } => {
                        let t = &target_of[n];
                        assert!(
                            !cut.values().any(|c| c == t),
                            "seed {seed}: {t:?} restarted with its link cut: {cut:?}"
                        );
                    }
                    Step::Fault {
                        verb,
                        target,
                        name: Some(n),
                        ..
                    } => {
                        target_of.insert(n.clone(), target.clone());
                        if verb.subject() == Subject::Link {
                            cut.insert(n.clone(), target.clone());
                        }
                    }
                    Step::Heal { fault, .. } => {
                        cut.remove(fault);
                    }
                    _ => {}
                }
            }
        }
    }

    #[test]
    fn across_seeds_every_verb_and_worker_fault_is_drawn() {
        let mut verbs = std::collections::BTreeSet::new();
        let mut workers = std::collections::BTreeSet::new();
        for seed in 0..20 {
            for step in draw(&params(seed)).steps {
                match step {
                    Step::Fault { verb, .. } => {
                        verbs.insert(verb);
                    }
                    Step::Control {
                        command: Control::Worker { name, mode },
                        ..
                    } => {
                        workers.insert(format!("{name} {mode:?}"));
                    }
                    _ => {}
                }
            }
        }
        // A stray unlock is survived only with X-VERIFY, beyond the spec: chaos never draws it;
        // nor the one-way partitions yet (see `LINK`).
        let one_way = [
            Verb::Unlock,
            Verb::PartitionRequests,
            Verb::PartitionAnswers,
        ];
        let drawn: Vec<Verb> = (Verb::ALL.into_iter())
            .filter(|v| !one_way.contains(v))
            .collect();
        assert_eq!(verbs.into_iter().collect::<Vec<_>>(), drawn);
        assert_eq!(workers.len(), 3, "{workers:?}");
    }
}
