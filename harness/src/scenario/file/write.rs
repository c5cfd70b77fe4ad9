//! From the model to the file as written: what [`read`](super::read) reads back as the same
//! scenario, in the syntax a person writes (replicas and control commands as inline tables).

use toml::Spanned;

use super::word::Word;
use super::{ControlToml, ExpectToml, FileToml, StepToml};
use crate::check::expect::{Expect, Expectation, Who};
use crate::fault::Subject;
use crate::scenario::model::{word, Control, Scenario, Step, Target};

/// A value as written; where it stood is of no use to a file being written.
fn spanned<T>(value: T) -> Spanned<T> {
    Spanned::new(0..0, value)
}

/// The file that says `s`.
pub(super) fn file(s: &Scenario) -> FileToml {
    FileToml {
        description: s.description.clone(),
        clauses: s.clauses.iter().cloned().map(spanned).collect(),
        t: s.t,
        tick: s.tick,
        default_interval: s.default_interval,
        seed: s.seed,
        invariants: s.invariants,
        story: s.story,
        replicas: spanned(
            (s.replicas.iter())
                .map(|(name, decl)| (spanned(name.clone()), decl.clone()))
                .collect(),
        ),
        step: s.steps.iter().map(|x| spanned(step(x))).collect(),
        expect: s.expect.iter().map(|x| spanned(expectation(x))).collect(),
    }
}

fn step(step: &Step) -> StepToml {
    let mut raw = StepToml {
        name: step.name().map(|n| spanned(n.to_owned())),
        ..StepToml::default()
    };
    match step {
        Step::Sleep { span, .. } => raw.sleep = Some(*span),
        Step::WaitFor { until, within, .. } => {
            raw.wait_for = Some(Word(*until));
            raw.within = *within;
        }
        Step::Fault {
            verb,
            target,
            latency,
            ..
        } => {
            raw.fault = Some(Word(*verb));
            raw.target = target_word(target, verb.subject() == Subject::Server);
            raw.latency = latency.map(|l| l.delay);
            raw.jitter = latency.and_then(|l| l.jitter);
        }
        Step::Heal { fault, .. } => raw.heal = Some(spanned(fault.clone())),
        Step::Control {
            command, target, ..
        } => {
            raw.control = Some(spanned(control(command)));
            raw.target = target_word(target, false);
        }
        Step::Sql { sql, hold, .. } => {
            raw.sql = Some(sql.clone());
            raw.hold = *hold;
        }
    }
    raw
}

/// A target as written; the server verbs' target goes without saying.
fn target_word(target: &Target, server_verb: bool) -> Option<Spanned<String>> {
    (*target != Target::Server || !server_verb).then(|| spanned(target.word().to_owned()))
}

fn control(command: &Control) -> ControlToml {
    match command {
        Control::Loop { name, mode } => ControlToml {
            loop_name: Some(name.clone()),
            worker: None,
            mode: word(mode),
        },
        Control::Worker { name, mode } => ControlToml {
            loop_name: None,
            worker: Some(name.clone()),
            mode: word(mode),
        },
    }
}

fn expectation(ex: &Expectation) -> ExpectToml {
    let mut raw = ExpectToml {
        clause: spanned(ex.clause.clone()),
        event: None,
        gauge_sum_reaches: None,
        granted_at_once: None,
        fence_tokens_rise: None,
        pool_recycled: None,
        handover: None,
        lock_rows_at_most: None,
        work_rows: None,
        fence_rejects: None,
        readyz: None,
        readyz_says: None,
        log: Vec::new(),
        replica: None,
        after: None,
        within: None,
        not_before: None,
        absent: false,
    };
    let who = |w: &Who| Some(spanned(w.to_string()));
    let after = |a: &Option<String>| a.clone().map(spanned);
    match &ex.expect {
        Expect::Event {
            awaited,
            replica,
            after: a,
            within,
            not_before,
            absent,
        } => {
            raw.event = Some(Word(*awaited));
            (raw.replica, raw.after) = (who(replica), after(a));
            (raw.within, raw.not_before, raw.absent) = (*within, *not_before, *absent);
        }
        Expect::GaugeSumReaches(n) => raw.gauge_sum_reaches = Some(*n),
        Expect::GrantedAtOnce(n) => raw.granted_at_once = Some(*n),
        Expect::FenceTokensRise(n) => raw.fence_tokens_rise = Some(*n),
        Expect::PoolRecycled(n) => raw.pool_recycled = Some(*n),
        Expect::Handover { after, within } => {
            (raw.handover, raw.within) = (Some(spanned(after.clone())), Some(*within));
        }
        Expect::LockRowsAtMost(n) => raw.lock_rows_at_most = Some(*n),
        Expect::WorkRows(n) => raw.work_rows = Some(*n),
        Expect::FenceRejects(n) => raw.fence_rejects = Some(*n),
        Expect::Readyz {
            status,
            replica,
            after: a,
        } => (raw.readyz, raw.replica, raw.after) = (Some(*status), who(replica), after(a)),
        Expect::ReadyzSays {
            text,
            replica,
            after: a,
        } => {
            (raw.readyz_says, raw.replica, raw.after) = (Some(text.clone()), who(replica), after(a))
        }
        Expect::Log {
            texts,
            replica,
            after: a,
            within,
        } => {
            (raw.log, raw.replica) = (texts.clone(), who(replica));
            (raw.after, raw.within) = (after(a), *within);
        }
    }
    raw
}

/// `text` with each replica and each step's `control` as an inline table
/// (`r1 = { path = "direct" }`) rather than a table of its own (`[replicas.r1]`).
pub(super) fn inline_tables(text: &str) -> String {
    let Ok(mut doc) = text.parse::<toml_edit::DocumentMut>() else {
        return text.to_owned();
    };
    if let Some(replicas) = doc.get_mut("replicas").and_then(|i| i.as_table_mut()) {
        replicas.set_implicit(false);
        for (_, item) in replicas.iter_mut() {
            item.make_value();
        }
        replicas.fmt();
    }
    let steps = doc.get_mut("step").and_then(|i| i.as_array_of_tables_mut());
    for step in steps.into_iter().flat_map(|s| s.iter_mut()) {
        if let Some(control) = step.get_mut("control") {
            control.make_value();
            // The action first, as a person writes it.
            step.sort_values_by(|a, _, b, _| (a.get() != "control").cmp(&(b.get() != "control")));
            step.fmt();
        }
    }
    doc.to_string()
}
