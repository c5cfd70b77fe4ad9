//! From the file as written to the model: every reference and every key checked once, each
//! mistake at its line.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use toml::Spanned;

use super::{word, ControlToml, ExpectToml, FileToml, Located, StepToml};
use crate::check::expect::{Expect, Expectation, Who};
use crate::clauses;
use crate::fault::{Subject, Verb};
use crate::level::Level;
use crate::replica::program::Command;
use crate::scenario::model::{Control, Latency, ReplicaDecl, Scenario, Step, Target};

fn at<T>(span: Range<usize>, message: String) -> Result<T, Located> {
    Err((Some(span), message))
}

/// The scenario `raw` says, read from `path`.
pub(super) fn scenario(raw: FileToml, path: &Path) -> Result<Scenario, Located> {
    let replicas_span = raw.replicas.span();
    let replicas = raw.replicas.into_inner();
    if replicas.is_empty() {
        return at(replicas_span, "no replicas in [replicas]".into());
    }
    if let Some(name) = replicas
        .keys()
        .find(|n| RESERVED.contains(&n.as_ref().as_str()))
    {
        let message = format!(
            "the replica name {:?} is reserved ({})",
            name.as_ref(),
            RESERVED.join(", ")
        );
        return at(name.span(), message);
    }
    for (name, decl) in &replicas {
        let bad = |message: String| {
            at(
                name.span(),
                format!("replica {:?}: {message}", name.as_ref()),
            )
        };
        if let Some(cmd) = &decl.cmd {
            if let Err(e) = Command::parse(cmd, Level::Metrics) {
                return bad(format!("cmd: {e}"));
            }
            if !decl.args.is_empty() {
                return bad("args are flags of the harness's own replica; a replica with a cmd of its own takes its flags in the cmd".into());
            }
        } else if decl.level.is_some() {
            return bad("level is the level of a cmd: give the cmd, or leave level out".into());
        }
    }
    if raw.default_interval && raw.t.is_some() {
        return Err((
            None,
            "default_interval runs the scenario at the page's default T, 5 s: leave t out".into(),
        ));
    }
    let mut reader = Reader {
        replicas: (replicas.into_iter())
            .map(|(name, decl)| (name.into_inner(), decl))
            .collect(),
        names: BTreeMap::new(),
    };
    let clauses = raw
        .clauses
        .into_iter()
        .map(clause)
        .collect::<Result<_, _>>()?;
    let steps = (raw.step.into_iter())
        .map(|s| reader.step(s))
        .collect::<Result<_, _>>()?;
    let expect = (raw.expect.into_iter())
        .map(|e| reader.expectation(e))
        .collect::<Result<_, _>>()?;
    Ok(Scenario {
        name: path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        file: path.to_owned(),
        description: raw.description,
        clauses,
        t: raw.t,
        tick: raw.tick,
        default_interval: raw.default_interval,
        seed: raw.seed,
        invariants: raw.invariants,
        story: raw.story,
        replicas: reader.replicas,
        steps,
        expect,
    })
}

/// Reads `raw` as the step after `scenario`'s steps, with the checks of a file's `[[step]]`:
/// its replicas and the `as` names its steps took are known.
pub(super) fn next_step(scenario: &Scenario, raw: StepToml) -> Result<Step, String> {
    let names = (scenario.steps.iter())
        .filter_map(|s| {
            let verb = match s {
                Step::Fault { verb, .. } => Some(*verb),
                _ => None,
            };
            s.name().map(|n| (n.to_owned(), verb))
        })
        .collect();
    let mut reader = Reader {
        replicas: scenario.replicas.clone(),
        names,
    };
    reader.step(Spanned::new(0..0, raw)).map_err(|(_, m)| m)
}

/// The words a target or an expectation's replica means by itself: no replica or `as` name
/// may be one of them.
const RESERVED: [&str; 5] = ["leader", "standby", "server", "any", "other"];

fn clause(c: Spanned<String>) -> Result<String, Located> {
    if clauses::exists(c.as_ref()) {
        Ok(c.into_inner())
    } else {
        at(c.span(), format!("unknown clause ID {:?}", c.as_ref()))
    }
}

/// Reads the steps and expectations in order: the names steps define (`as`) are known to the
/// ones after them.
struct Reader {
    replicas: BTreeMap<String, ReplicaDecl>,
    /// Every `as` name so far, with the verb when it names a fault step.
    names: BTreeMap<String, Option<Verb>>,
}

/// A key of a step or expectation: its name, whether it is there, whether it may be there,
/// and where it belongs.
type Key = (&'static str, bool, bool, &'static str);

/// Exactly one of the `kinds` keys is there, and no key that belongs elsewhere.
fn check_keys(what: &str, kinds: &[(&str, bool)], keys: &[Key]) -> Result<(), String> {
    if kinds.iter().filter(|k| k.1).count() != 1 {
        let names: Vec<&str> = kinds.iter().map(|k| k.0).collect();
        return Err(format!("{what} takes exactly one of {}", names.join(", ")));
    }
    match keys.iter().find(|(_, there, may, _)| *there && !*may) {
        Some((key, _, _, owner)) => Err(format!("`{key}` belongs to {owner}")),
        None => Ok(()),
    }
}

fn step_keys(raw: &StepToml) -> Result<(), String> {
    let kinds = [
        ("sleep", raw.sleep.is_some()),
        ("wait_for", raw.wait_for.is_some()),
        ("fault", raw.fault.is_some()),
        ("heal", raw.heal.is_some()),
        ("control", raw.control.is_some()),
        ("sql", raw.sql.is_some()),
    ];
    let latency = raw.fault.as_ref().is_some_and(|v| v.0 == Verb::Latency);
    let targeted = raw.fault.is_some() || raw.control.is_some();
    let keys = [
        (
            "target",
            raw.target.is_some(),
            targeted,
            "a `fault` or `control` step",
        ),
        (
            "latency",
            raw.latency.is_some(),
            latency,
            "a `latency` fault",
        ),
        ("jitter", raw.jitter.is_some(), latency, "a `latency` fault"),
        (
            "hold",
            raw.hold.is_some(),
            raw.sql.is_some(),
            "an `sql` step",
        ),
        (
            "within",
            raw.within.is_some(),
            raw.wait_for.is_some(),
            "a `wait_for` step",
        ),
    ];
    check_keys("a step", &kinds, &keys)?;
    if latency && raw.latency.is_none() {
        return Err("a latency fault needs `latency = \"…\"`".into());
    }
    Ok(())
}

fn expect_keys(raw: &ExpectToml) -> Result<(), String> {
    let kinds = [
        ("event", raw.event.is_some()),
        ("gauge_sum_reaches", raw.gauge_sum_reaches.is_some()),
        ("granted_at_once", raw.granted_at_once.is_some()),
        ("fence_tokens_rise", raw.fence_tokens_rise.is_some()),
        ("pool_recycled", raw.pool_recycled.is_some()),
        ("handover", raw.handover.is_some()),
        ("lock_rows_at_most", raw.lock_rows_at_most.is_some()),
        ("work_rows", raw.work_rows.is_some()),
        ("fence_rejects", raw.fence_rejects.is_some()),
        ("readyz", raw.readyz.is_some()),
        ("readyz_says", raw.readyz_says.is_some()),
        ("log", !raw.log.is_empty()),
    ];
    let event = raw.event.is_some();
    let readyz = raw.readyz.is_some() || raw.readyz_says.is_some();
    let keys = [
        (
            "replica",
            raw.replica.is_some(),
            event || readyz || !raw.log.is_empty(),
            "an `event`, `readyz`, `readyz_says` or `log` expectation",
        ),
        (
            "after",
            raw.after.is_some(),
            event || readyz || !raw.log.is_empty(),
            "an `event`, `readyz`, `readyz_says` or `log` expectation",
        ),
        (
            "within",
            raw.within.is_some(),
            event || !raw.log.is_empty() || raw.handover.is_some(),
            "an `event`, `log` or `handover` expectation",
        ),
        (
            "not_before",
            raw.not_before.is_some(),
            event,
            "an `event` expectation",
        ),
        ("absent", raw.absent, event, "an `event` expectation"),
    ];
    check_keys("an expectation", &kinds, &keys)?;
    if raw.handover.is_some() && raw.within.is_none() {
        return Err("a `handover` expectation needs `within = \"…\"`".into());
    }
    Ok(())
}

impl Reader {
    fn step(&mut self, raw: Spanned<StepToml>) -> Result<Step, Located> {
        let span = raw.span();
        let raw = raw.into_inner();
        step_keys(&raw).map_err(|m| (Some(span), m))?;
        let name = raw.name.clone();
        let step = self.action(raw, name.as_ref().map(|n| n.as_ref().clone()))?;
        if let Some(n) = name {
            if self.replicas.contains_key(n.as_ref()) || self.names.contains_key(n.as_ref()) {
                return at(
                    n.span(),
                    format!("the name {:?} is already taken", n.as_ref()),
                );
            }
            if RESERVED.contains(&n.as_ref().as_str()) {
                return at(n.span(), format!("the name {:?} is reserved", n.as_ref()));
            }
            let verb = match &step {
                Step::Fault { verb, .. } => Some(*verb),
                _ => None,
            };
            self.names.insert(n.into_inner(), verb);
        }
        Ok(step)
    }

    /// The step's one action (its keys checked).
    fn action(&self, raw: StepToml, name: Option<String>) -> Result<Step, Located> {
        if let Some(span) = raw.sleep {
            Ok(Step::Sleep { span, name })
        } else if let Some(until) = raw.wait_for {
            let within = raw.within;
            Ok(Step::WaitFor {
                until: until.0,
                within,
                name,
            })
        } else if let Some(verb) = raw.fault {
            self.fault(verb.0, raw, name)
        } else if let Some(fault) = raw.heal {
            self.heal(fault, name)
        } else if let Some(control) = raw.control {
            self.control(control, raw.target, name)
        } else {
            let (sql, hold) = (raw.sql.unwrap_or_default(), raw.hold);
            Ok(Step::Sql { sql, hold, name })
        }
    }

    fn fault(&self, verb: Verb, raw: StepToml, name: Option<String>) -> Result<Step, Located> {
        let on_server = verb.subject() == Subject::Server;
        // `kill-backend` on the server: the backend that holds the lock, whoever's it is.
        let may_be_server = on_server || verb == Verb::KillBackend;
        let target = match raw.target {
            None if on_server => Target::Server,
            None => Target::Leader,
            Some(t) => {
                let target = self.target(&t)?;
                let is_server = target == Target::Server;
                if (on_server && !is_server) || (is_server && !may_be_server) {
                    let on = if on_server { "the server" } else { "a replica" };
                    return at(
                        t.span(),
                        format!("`{verb}` acts on {on}, not {:?}", t.as_ref()),
                    );
                }
                target
            }
        };
        let latency = raw.latency.map(|delay| Latency {
            delay,
            jitter: raw.jitter,
        });
        Ok(Step::Fault {
            verb,
            target,
            latency,
            name,
        })
    }

    fn heal(&self, fault: Spanned<String>, name: Option<String>) -> Result<Step, Located> {
        match self.names.get(fault.as_ref()) {
            Some(Some(verb)) if verb.inverse().is_none() => at(
                fault.span(),
                format!("heal {:?}: `{verb}` has no inverse to lift", fault.as_ref()),
            ),
            Some(Some(_)) => Ok(Step::Heal {
                fault: fault.into_inner(),
                name,
            }),
            _ => at(
                fault.span(),
                format!("heal names no earlier fault: {:?}", fault.as_ref()),
            ),
        }
    }

    fn control(
        &self,
        raw: Spanned<ControlToml>,
        target: Option<Spanned<String>>,
        name: Option<String>,
    ) -> Result<Step, Located> {
        let target = match target {
            None => Target::Leader,
            Some(t) if t.as_ref() == "server" => {
                return at(
                    t.span(),
                    "`control` acts on a replica, not the server".into(),
                )
            }
            Some(t) => self.target(&t)?,
        };
        let span = raw.span();
        let command = control(raw.into_inner()).map_err(|m| (Some(span), m))?;
        Ok(Step::Control {
            command,
            target,
            name,
        })
    }

    /// A step's target: `leader`, `standby`, `server`, a replica or an earlier `as` name.
    fn target(&self, t: &Spanned<String>) -> Result<Target, Located> {
        let v = t.as_ref();
        Ok(match v.as_str() {
            "leader" => Target::Leader,
            "standby" => Target::Standby,
            "server" => Target::Server,
            _ if self.replicas.contains_key(v) => Target::Replica(v.clone()),
            _ if self.names.contains_key(v) => Target::Named(v.clone()),
            _ => {
                let replicas: Vec<&str> = self.replicas.keys().map(String::as_str).collect();
                let message = format!("unknown replica {v:?} (replicas: {})", replicas.join(", "));
                return at(t.span(), message);
            }
        })
    }

    fn expectation(&self, raw: Spanned<ExpectToml>) -> Result<Expectation, Located> {
        let raw = raw.into_inner();
        let clause_span = raw.clause.span();
        let clause = clause(raw.clause.clone())?;
        expect_keys(&raw).map_err(|m| (Some(clause_span.clone()), m))?;
        let replica = raw.replica.as_ref().map(|r| self.who(r)).transpose()?;
        let after = match raw.after {
            Some(a) if !self.names.contains_key(a.as_ref()) => {
                return at(a.span(), format!("`after` names no step: {:?}", a.as_ref()))
            }
            a => a.map(Spanned::into_inner),
        };
        let who = replica.clone().unwrap_or(Who::Any);
        let expect = if let Some(awaited) = raw.event {
            Expect::Event {
                awaited: awaited.0,
                replica: who,
                after,
                within: raw.within,
                not_before: raw.not_before,
                absent: raw.absent,
            }
        } else if let Some(n) = raw.gauge_sum_reaches {
            Expect::GaugeSumReaches(n)
        } else if let Some(n) = raw.granted_at_once {
            Expect::GrantedAtOnce(n)
        } else if let Some(n) = raw.fence_tokens_rise {
            Expect::FenceTokensRise(n)
        } else if let Some(n) = raw.pool_recycled {
            Expect::PoolRecycled(n)
        } else if let (Some(step), Some(within)) = (raw.handover, raw.within) {
            if !self.names.contains_key(step.as_ref()) {
                return at(
                    step.span(),
                    format!("`handover` names no step: {:?}", step.as_ref()),
                );
            }
            Expect::Handover {
                after: step.into_inner(),
                within,
            }
        } else if let Some(n) = raw.lock_rows_at_most {
            Expect::LockRowsAtMost(n)
        } else if let Some(n) = raw.work_rows {
            Expect::WorkRows(n)
        } else if let Some(n) = raw.fence_rejects {
            Expect::FenceRejects(n)
        } else if let Some(status) = raw.readyz {
            Expect::Readyz {
                status,
                replica: who,
                after,
            }
        } else if let Some(text) = raw.readyz_says {
            Expect::ReadyzSays {
                text,
                replica: who,
                after,
            }
        } else {
            let Some(replica @ (Who::Replica(_) | Who::Named(_) | Who::Any | Who::Other)) = replica
            else {
                let message = "a `log` expectation names one replica (its name or an `as` name), \
                               `other` (one but the step's target) or `any`";
                return at(clause_span, message.into());
            };
            Expect::Log {
                texts: raw.log,
                replica,
                after,
                within: raw.within,
            }
        };
        Ok(Expectation { clause, expect })
    }

    /// An expectation's replica: `any`, `other`, a replica or an `as` name.
    fn who(&self, r: &Spanned<String>) -> Result<Who, Located> {
        let v = r.as_ref();
        Ok(match v.as_str() {
            "any" => Who::Any,
            "other" => Who::Other,
            _ if self.replicas.contains_key(v) => Who::Replica(v.clone()),
            _ if self.names.contains_key(v) => Who::Named(v.clone()),
            _ => return at(r.span(), format!("unknown replica {v:?}")),
        })
    }
}

/// A `control` table's command: one of `loop` and `worker`, and a mode it takes.
fn control(raw: ControlToml) -> Result<Control, String> {
    // The replica reads `crash-loop` as `crash_loop`; so does the file.
    let mode = raw.mode.replace('-', "_");
    match (raw.loop_name, raw.worker) {
        (Some(name), None) => Ok(Control::Loop {
            name,
            mode: word::parse_as("mode", &mode)?,
        }),
        (None, Some(name)) => Ok(Control::Worker {
            name,
            mode: word::parse_as("mode", &mode)?,
        }),
        _ => Err("a `control` takes exactly one of loop, worker (and a mode)".into()),
    }
}
