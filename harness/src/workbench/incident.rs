//! What a person did at a running `harness up`, kept as a scenario: each fault and heal as a
//! step, read by the scenario file's reader, with the time it began and ended. Written out
//! with sleeps between the steps (and before the first, and after the last until the end),
//! it replays the incident with `harness run <file>`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::fault::{Verb, SERVER};
use crate::scenario::file::TypedStep;
use crate::scenario::model::{invariants_for, ReplicaDecl, Scenario, Span, Step};
use crate::scenario::run::Acted;
use crate::snapshot::Story;

/// The steps so far, and the faults still in effect.
#[derive(Clone, Debug)]
pub struct Incident {
    /// The scenario so far: the replicas, T, and the steps played (without the sleeps).
    scenario: Scenario,
    /// When each step began and ended, ms since the run's start.
    times: Vec<(f64, f64)>,
    /// The faults in effect that have an inverse, by name, in the order they were applied:
    /// their verb and the replica (or `postgres`) they hit.
    in_effect: Vec<(String, Verb, String)>,
}

impl Incident {
    /// An incident named `name` (the scenario file's stem) on `replicas` at check interval `t`.
    pub fn new(
        name: &str,
        replicas: BTreeMap<String, ReplicaDecl>,
        t: Duration,
        run: &str,
    ) -> Self {
        let scenario = Scenario {
            name: name.to_owned(),
            file: PathBuf::from(format!("{name}.toml")),
            description: format!(
                "An incident reproduced by hand at `harness up` (run {run}), recorded as it \
                 was played: each fault and heal at the time it was typed."
            ),
            clauses: Vec::new(),
            t: Some(Span::Abs(t)),
            tick: None,
            default_interval: false,
            seed: None,
            invariants: invariants_for(&replicas),
            story: Story::Full,
            replicas,
            steps: Vec::new(),
            expect: Vec::new(),
        };
        Incident {
            scenario,
            times: Vec::new(),
            in_effect: Vec::new(),
        }
    }

    /// The scenario as far as it is played, without the sleeps: what the steps to come are
    /// read against.
    pub fn so_far(&self) -> &Scenario {
        &self.scenario
    }

    /// Reads a typed fault as the next step; unnamed, it is named `f1`, `f2`, ... so that
    /// `harness heal` can name it.
    ///
    /// # Errors
    /// What a scenario file with this step would be refused for.
    pub fn fault(&self, mut typed: TypedStep) -> Result<Step, String> {
        if typed.name.is_none() {
            let taken = |n: &str| {
                self.scenario.replicas.contains_key(n)
                    || self.scenario.steps.iter().any(|s| s.name() == Some(n))
            };
            let free = (1..).map(|i| format!("f{i}")).find(|n| !taken(n));
            typed.name = free;
        }
        self.scenario.read_step(&typed)
    }

    /// The heal steps that lift `what`: the fault of that name, every fault on that target
    /// (a replica, or `server`), or every fault in effect (`None`); none when nothing is in
    /// effect there.
    ///
    /// # Errors
    /// `what` names neither a fault nor a target.
    pub fn heals(&self, what: Option<&str>) -> Result<Vec<Step>, String> {
        let target = what.map(|w| if w == "server" { SERVER } else { w });
        let names: Vec<&String> = match target {
            None => self.in_effect.iter().map(|f| &f.0).collect(),
            Some(w) if self.in_effect.iter().any(|f| f.0 == w) => self
                .in_effect
                .iter()
                .filter(|f| f.0 == w)
                .map(|f| &f.0)
                .collect(),
            Some(w) => {
                let known = w == SERVER
                    || self.scenario.replicas.contains_key(w)
                    || self.scenario.steps.iter().any(|s| s.name() == Some(w));
                if !known {
                    return Err(format!(
                        "{w:?} is neither a fault in effect ({}) nor a replica or `server`",
                        self.in_effect_names()
                    ));
                }
                self.in_effect
                    .iter()
                    .filter(|f| f.2 == w)
                    .map(|f| &f.0)
                    .collect()
            }
        };
        (names.into_iter())
            .map(|name| {
                self.scenario.read_step(&TypedStep {
                    heal: Some(name.clone()),
                    ..TypedStep::default()
                })
            })
            .collect()
    }

    fn in_effect_names(&self) -> String {
        let names: Vec<&str> = self.in_effect.iter().map(|f| f.0.as_str()).collect();
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    }

    /// Keeps `step`, which was played as `acted`: its times, and the faults it put in effect
    /// or lifted.
    pub fn played(&mut self, step: Step, acted: &Acted) {
        for r in &acted.records {
            if r.lifted {
                self.in_effect
                    .retain(|(_, verb, target)| !(*verb == r.verb && *target == r.target));
            } else if let (Some(name), Some(_)) = (step.name(), r.verb.inverse()) {
                self.in_effect
                    .push((name.to_owned(), r.verb, r.target.clone()));
            }
        }
        self.times.push((acted.began_ms, acted.ended_ms));
        self.scenario.steps.push(step);
    }

    /// The scenario that replays the incident, which ended at `end_ms`: a sleep before each
    /// step (from the end of the one before), the step, and a sleep until the end.
    pub fn scenario(&self, end_ms: f64) -> Scenario {
        let mut steps = Vec::new();
        let sleep = |from: f64, to: f64, steps: &mut Vec<Step>| {
            let ms = (to - from).round();
            if ms >= 1.0 {
                steps.push(Step::Sleep {
                    span: Span::Abs(Duration::from_millis(ms as u64)),
                    name: None,
                });
            }
        };
        let mut last = 0.0;
        for (step, (began, ended)) in self.scenario.steps.iter().zip(&self.times) {
            sleep(last, *began, &mut steps);
            steps.push(step.clone());
            last = *ended;
        }
        sleep(last, end_ms, &mut steps);
        Scenario {
            steps,
            ..self.scenario.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FaultRecord;

    fn record(verb: Verb, target: &str, lifted: bool) -> FaultRecord {
        FaultRecord {
            verb,
            target: target.into(),
            lifted,
            label: String::new(),
            start: Duration::ZERO,
            end: Duration::ZERO,
        }
    }

    fn incident() -> Incident {
        let replicas = ["r1", "r2"].map(|r| (r.to_owned(), ReplicaDecl::default()));
        Incident::new("x", replicas.into(), Duration::from_millis(200), "run")
    }

    fn typed(verb: Verb, target: Option<&str>) -> TypedStep {
        TypedStep {
            fault: Some(verb),
            target: target.map(str::to_owned),
            ..TypedStep::default()
        }
    }

    fn acted(began_ms: f64, ended_ms: f64, records: Vec<FaultRecord>) -> Acted {
        Acted {
            began_ms,
            ended_ms,
            records,
        }
    }

    #[test]
    fn faults_are_named_read_as_a_file_and_healed_by_name_target_or_all() {
        let mut inc = incident();
        let cut = inc.fault(typed(Verb::Partition, Some("r1"))).unwrap();
        assert_eq!(cut.name(), Some("f1"));
        inc.played(
            cut,
            &acted(1000.0, 1010.0, vec![record(Verb::Partition, "r1", false)]),
        );
        let frozen = inc.fault(typed(Verb::Freeze, Some("leader"))).unwrap();
        assert_eq!(frozen.label(), "freeze leader");
        inc.played(
            frozen,
            &acted(2000.0, 2001.0, vec![record(Verb::Freeze, "r2", false)]),
        );
        // The file's reader decides: an unknown replica, a server verb on a replica.
        let e = inc.fault(typed(Verb::Kill, Some("r9"))).unwrap_err();
        assert!(e.contains("unknown replica \"r9\""), "{e}");
        let e = inc
            .fault(typed(Verb::RestartServer, Some("r1")))
            .unwrap_err();
        assert!(e.contains("acts on the server"), "{e}");

        let heal = |inc: &Incident, what| {
            let steps = inc.heals(what).unwrap();
            steps.iter().map(Step::label).collect::<Vec<_>>()
        };
        assert_eq!(heal(&inc, None), ["heal f1", "heal f2"]);
        assert_eq!(heal(&inc, Some("r2")), ["heal f2"]);
        assert_eq!(heal(&inc, Some("f1")), ["heal f1"]);
        assert!(heal(&inc, Some("server")).is_empty());
        assert!(inc.heals(Some("r7")).unwrap_err().contains("f1, f2"));

        let lift = inc.heals(Some("f1")).unwrap().remove(0);
        inc.played(
            lift,
            &acted(3000.0, 3400.0, vec![record(Verb::Partition, "r1", true)]),
        );
        assert_eq!(heal(&inc, None), ["heal f2"]);
    }

    #[test]
    fn the_scenario_sleeps_between_steps_and_reads_back() {
        let mut inc = incident();
        let cut = inc.fault(typed(Verb::Partition, Some("leader"))).unwrap();
        inc.played(
            cut,
            &acted(1500.0, 1520.0, vec![record(Verb::Partition, "r1", false)]),
        );
        let lift = inc.heals(None).unwrap().remove(0);
        inc.played(
            lift,
            &acted(4020.0, 4030.0, vec![record(Verb::Partition, "r1", true)]),
        );
        let s = inc.scenario(6000.0);
        let labels: Vec<String> = s.steps.iter().map(Step::label).collect();
        assert_eq!(
            labels,
            [
                "sleep 1500ms",
                "partition leader",
                "sleep 2500ms",
                "heal f1",
                "sleep 1970ms"
            ]
        );
        let text = s.to_toml();
        let back = Scenario::parse(&s.file, &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(back, s, "{text}");
        assert!(text.contains("t = \"200ms\""), "{text}");
    }
}
