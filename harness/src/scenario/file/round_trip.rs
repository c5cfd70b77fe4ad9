//! The model written back to TOML reads back as the same model: every shipped scenario, and
//! scenarios generated from seeds (the shape a chaos schedule will have).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::word::words;
use crate::check::expect::{Awaited, Expect, Expectation, Who};
use crate::check::Invariants;
use crate::event::EventKind;
use crate::fault::{Subject, Verb};
use crate::level::Level;
use crate::replica::control::{LoopMode, WorkerMode};
use crate::scenario::model::{
    Control, DbPath, Latency, ReplicaDecl, Scenario, Span, Step, Target, WaitFor,
};
use crate::snapshot::Story;

/// Writes `s`, reads it back, and checks both the model and the text survive.
fn assert_round_trips(s: &Scenario, context: &str) {
    let text = s.to_toml();
    let back = Scenario::parse(&s.file, &text)
        .unwrap_or_else(|e| panic!("{context}: {e}\n--- written:\n{text}"));
    assert_eq!(&back, s, "{context}\n--- written:\n{text}");
    assert_eq!(
        back.to_toml(),
        text,
        "{context}: written twice, differently"
    );
}

fn shipped() -> Vec<PathBuf> {
    let dir = crate::scenario::run::default_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml") && !p.ends_with("Cargo.toml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_shipped_scenario_round_trips() {
    let files = shipped();
    assert!(files.len() >= 15, "only {} scenario files", files.len());
    for path in files {
        let s = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_round_trips(&s, &path.display().to_string());
    }
}

#[test]
fn the_written_form_is_the_readme_syntax() {
    let path = crate::scenario::run::default_dir().join("failing-loops.toml");
    let text = Scenario::load(&path).unwrap().to_toml();
    for line in [
        "[replicas]\nr1 = {}\n",
        "[[step]]\nwait_for = \"all-ready\"\nwithin = \"5T\"\n",
        "control = { loop = \"invitations-expire\", mode = \"panic\" }\n",
        "[[expect]]\nclause = \"READY-2\"\nreadyz = 503\nreplica = \"failing\"\nafter = \"failing\"\n",
    ] {
        assert!(text.contains(line), "{line:?} not in:\n{text}");
    }
}

#[test]
fn generated_scenarios_round_trip() {
    for seed in 0..300 {
        let s = Gen::new(seed).scenario();
        assert_round_trips(&s, &format!("seed {seed}"));
    }
}

/// Generates valid scenarios from a seed: every step and expectation kind, every verb, wait
/// condition, event and control mode, names referring to earlier steps.
struct Gen {
    rng: fastrand::Rng,
    replicas: Vec<String>,
    /// `as` names so far, with the verb of a fault step.
    names: Vec<(String, Option<Verb>)>,
}

/// Every variant of a serde-derived unit enum, as its derive names them.
fn all<T: serde::de::DeserializeOwned>() -> Vec<T> {
    words::<T>()
        .iter()
        .map(|w| super::word::parse_as("word", w).unwrap())
        .collect()
}

impl Gen {
    fn new(seed: u64) -> Self {
        Self {
            rng: fastrand::Rng::with_seed(seed),
            replicas: Vec::new(),
            names: Vec::new(),
        }
    }

    fn pick<T: Clone>(&mut self, from: &[T]) -> T {
        from[self.rng.usize(..from.len())].clone()
    }

    fn maybe<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> Option<T> {
        self.rng.bool().then(|| f(self))
    }

    /// Text with the characters TOML must escape or quote.
    fn text(&mut self) -> String {
        let parts = [
            "a", "Ω", " ", "\"", "'", "\\", "\n", "\t", "…", "'''", "\"\"\"", "$$",
        ];
        (0..self.rng.usize(0..8))
            .map(|_| self.pick(&parts))
            .collect()
    }

    fn span(&mut self) -> Span {
        if self.rng.bool() {
            Span::T(self.rng.f64() * 40.0)
        } else {
            Span::Abs(Duration::from_nanos(self.rng.u64(0..100_000_000_000)))
        }
    }

    fn scenario(mut self) -> Scenario {
        let paths = all::<DbPath>();
        let mut replicas = BTreeMap::new();
        for i in 0..self.rng.usize(1..5) {
            let name = format!("{}{i}", self.pick(&["r", "replica one", "r.x", "ü"]));
            let args: Vec<String> = (0..self.rng.usize(0..3)).map(|_| self.text()).collect();
            // A replica with a cmd of its own takes no args, and a level only with a cmd.
            let cmd = (args.is_empty() && self.rng.bool()).then(|| {
                self.pick(&[
                    "python3 'my replica.py' --listen {listen}",
                    "./r --t={interval_ms} --name \"{name}\" {{literal}}",
                    "ü",
                ])
                .to_owned()
            });
            let level = (cmd.is_some() && self.rng.bool()).then(|| self.pick(&Level::ALL));
            let decl = ReplicaDecl {
                path: self.pick(&paths),
                args,
                cmd,
                level,
                guard: self.rng.bool().then(|| self.rng.bool()),
                wake: self.rng.bool(),
                fence: self.rng.bool(),
                verify: self.rng.bool(),
                pool_max_lifetime: self.rng.bool().then(|| self.span()),
                start_after: self.rng.bool().then(|| self.span()),
                postgres_from: self.rng.bool().then(|| self.rng.u32(13..=17)),
            };
            replicas.insert(name, decl);
        }
        self.replicas = replicas.keys().cloned().collect();
        let clauses: Vec<String> = crate::clauses::all().into_iter().map(|c| c.id).collect();
        let steps = (0..self.rng.usize(0..14)).map(|i| self.step(i)).collect();
        let expect = (0..self.rng.usize(0..8))
            .map(|_| Expectation {
                clause: self.pick(&clauses),
                expect: self.expect(),
            })
            .collect();
        Scenario {
            name: "generated".into(),
            file: Path::new("generated.toml").to_owned(),
            description: self.text(),
            clauses: (0..self.rng.usize(0..4))
                .map(|_| self.pick(&clauses))
                .collect(),
            t: self.maybe(Self::span),
            tick: self.maybe(Self::span),
            default_interval: false,
            seed: self.rng.bool().then(|| self.rng.u64(..=i64::MAX as u64)),
            invariants: self.pick(&[Invariants::All, Invariants::Safety, Invariants::None]),
            story: self.pick(&all::<Story>()),
            replicas,
            steps,
            expect,
        }
    }

    fn step(&mut self, i: usize) -> Step {
        let name = self.rng.bool().then(|| format!("s{i}"));
        let healable: Vec<String> = (self.names.iter())
            .filter(|(_, v)| v.is_some_and(|v| v.inverse().is_some()))
            .map(|(n, _)| n.clone())
            .collect();
        let step = match self.rng.usize(0..6) {
            0 => Step::Sleep {
                span: self.span(),
                name: name.clone(),
            },
            1 => Step::WaitFor {
                until: self.pick(&all::<WaitFor>()),
                within: self.maybe(Self::span),
                name: name.clone(),
            },
            2 if !healable.is_empty() => Step::Heal {
                fault: self.pick(&healable),
                name: name.clone(),
            },
            3 => self.control(name.clone()),
            4 => Step::Sql {
                sql: self.text(),
                hold: self.maybe(Self::span),
                name: name.clone(),
            },
            _ => self.fault(name.clone()),
        };
        let verb = match &step {
            Step::Fault { verb, .. } => Some(*verb),
            _ => None,
        };
        self.names.extend(name.map(|n| (n, verb)));
        step
    }

    fn target(&mut self) -> Target {
        let named: Vec<String> = self.names.iter().map(|(n, _)| n.clone()).collect();
        match self.rng.usize(0..4) {
            0 => Target::Leader,
            1 => Target::Standby,
            2 if !named.is_empty() => Target::Named(self.pick(&named)),
            _ => Target::Replica(self.pick(&self.replicas.clone())),
        }
    }

    fn fault(&mut self, name: Option<String>) -> Step {
        let verb = self.pick(&all::<Verb>());
        let target = match verb.subject() {
            Subject::Server => Target::Server,
            Subject::Backend if self.rng.bool() => Target::Server,
            _ => self.target(),
        };
        let latency = (verb == Verb::Latency).then(|| Latency {
            delay: self.span(),
            jitter: self.maybe(Self::span),
        });
        Step::Fault {
            verb,
            target,
            latency,
            name,
        }
    }

    fn control(&mut self, name: Option<String>) -> Step {
        let loop_or_worker = self.text();
        let command = if self.rng.bool() {
            Control::Loop {
                name: loop_or_worker,
                mode: self.pick(&all::<LoopMode>()),
            }
        } else {
            Control::Worker {
                name: loop_or_worker,
                mode: self.pick(&all::<WorkerMode>()),
            }
        };
        Step::Control {
            command,
            target: self.target(),
            name,
        }
    }

    fn who(&mut self, any_or_other: bool) -> Who {
        let named: Vec<String> = self.names.iter().map(|(n, _)| n.clone()).collect();
        match self.rng.usize(0..4) {
            0 if any_or_other => Who::Any,
            1 if any_or_other => Who::Other,
            2 if !named.is_empty() => Who::Named(self.pick(&named)),
            _ => Who::Replica(self.pick(&self.replicas.clone())),
        }
    }

    fn after(&mut self) -> Option<String> {
        let named: Vec<String> = self.names.iter().map(|(n, _)| n.clone()).collect();
        (!named.is_empty() && self.rng.bool()).then(|| self.pick(&named))
    }

    fn expect(&mut self) -> Expect {
        let events: Vec<Awaited> = Awaited::OBSERVED
            .into_iter()
            .chain(all::<EventKind>().into_iter().map(Awaited::Event))
            .collect();
        match self.rng.usize(0..12) {
            11 => match self.after() {
                Some(after) => Expect::Handover {
                    after,
                    within: self.span(),
                },
                None => Expect::PoolRecycled(self.rng.usize(0..1_000)),
            },
            10 => Expect::PoolRecycled(self.rng.usize(0..1_000)),
            9 => Expect::FenceTokensRise(self.rng.usize(0..1_000)),
            8 => Expect::GrantedAtOnce(self.rng.usize(0..1_000)),
            7 => Expect::FenceRejects(self.rng.usize(0..1_000)),
            0 => Expect::GaugeSumReaches(self.rng.i64(..)),
            1 => Expect::LockRowsAtMost(self.rng.usize(0..1_000)),
            2 => Expect::WorkRows(self.rng.usize(0..1_000)),
            3 => Expect::Readyz {
                status: self.rng.u16(..),
                replica: self.who(true),
                after: self.after(),
            },
            4 => Expect::ReadyzSays {
                text: self.text(),
                replica: self.who(true),
                after: self.after(),
            },
            5 => Expect::Log {
                texts: (0..self.rng.usize(1..4)).map(|_| self.text()).collect(),
                replica: self.who(false),
                after: self.after(),
                within: self.maybe(Self::span),
            },
            _ => Expect::Event {
                awaited: self.pick(&events),
                replica: self.who(true),
                after: self.after(),
                within: self.maybe(Self::span),
                not_before: self.maybe(Self::span),
                absent: self.rng.bool(),
            },
        }
    }
}
