//! The normalised timeline of a scenario, for snapshot tests: no absolute times, ports, pids or
//! container ids; only the transitions a scenario makes deterministic (terms, faults, steps),
//! grouped by the step they fall in, each term's own order kept. A step that acts at once (a
//! fault, heal, control or sql step) shares its group with the step after it, so an effect that
//! comes a few milliseconds sooner or later than the next step's start reads the same.
//!
//! Replicas are not named: each term is, in the order terms begin (`L1` for the first
//! acquisition, `L2` for the next, …), and a replica's later events and faults carry the label
//! of its latest term (`S` if it never led). So "the leader demotes and some standby leads" reads
//! the same whichever standby won the race, while "the thawed leader demotes" still names the
//! first term. Events before the first step fall into it.

use std::collections::BTreeMap;

use crate::event::{ReleaseOutcome, ReplicaEvent};
use crate::timeline::{Entry, What};

/// How much of the story a scenario's snapshot keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Story {
    /// Steps, faults and every term's transitions.
    #[default]
    Full,
    /// Steps and faults only: for scenarios that let leadership move by design (a flapping
    /// network), whose invariants are checked but whose terms are not deterministic.
    Faults,
}

/// Collapses an error text to its category, so the snapshot does not carry driver wording.
fn category(error: &str) -> &'static str {
    if error.contains("no answer within") {
        "timeout"
    } else if error.contains("shared") {
        "shared session"
    } else if error.contains("no longer holds") {
        "lock gone"
    } else {
        "connection error"
    }
}

/// The normalised story of a run, one line per step and per term with transitions in it.
pub fn normalise(entries: &[Entry], story: Story) -> String {
    let mut n = Narrator {
        story,
        ..Narrator::default()
    };
    for e in entries {
        match &e.what {
            What::Step { label, acts } => n.step(label, *acts),
            What::Fault {
                verb,
                target,
                lifted,
            } => n.fault(*verb, target, *lifted),
            What::Replica { replica, event } if story == Story::Full => n.replica(replica, event),
            _ => {}
        }
    }
    n.finish()
}

/// Tells the story entry by entry: the lines so far, and the group of the current step.
#[derive(Default)]
struct Narrator<'a> {
    story: Story,
    /// Each replica's label: its latest term's.
    label_of: BTreeMap<&'a str, String>,
    terms: usize,
    out: String,
    /// The current group's lines, with their labels.
    segment: Vec<(String, String)>,
    /// The first step's label, held back until the events before it are in.
    pending_label: Option<&'a str>,
    started: bool,
    /// Whether the previous step acted at once, so this one continues its group.
    joined: bool,
}

impl<'a> Narrator<'a> {
    fn step(&mut self, label: &'a str, acts: bool) {
        if !self.started {
            // Events before the first step belong to it: hold its label back until the next
            // step (or the end) flushes them under it.
            self.pending_label = Some(label);
            self.started = true;
            self.joined = acts;
            return;
        }
        if let Some(first) = self.pending_label.take() {
            self.out.push_str(&format!("{first}\n"));
        }
        if !self.joined {
            self.flush();
        }
        self.out.push_str(&format!("{label}\n"));
        self.joined = acts;
    }

    fn fault(&mut self, verb: crate::fault::Verb, target: &str, lifted: bool) {
        let t = if target == crate::fault::SERVER {
            target.to_owned()
        } else if self.story == Story::Faults {
            "a replica".into()
        } else {
            self.label(target)
        };
        let lift = if lifted { "lift " } else { "" };
        (self.segment).push(("fault".into(), format!("{lift}{verb} {t}")));
    }

    fn replica(&mut self, replica: &'a str, event: &ReplicaEvent) {
        let line = match event {
            ReplicaEvent::Acquired { .. } => {
                self.terms += 1;
                self.label_of.insert(replica, format!("L{}", self.terms));
                "acquired".to_owned()
            }
            ReplicaEvent::Demoted { error, .. } => format!("demoted ({})", category(error)),
            ReplicaEvent::Released { outcome, .. } => match outcome {
                ReleaseOutcome::Unlocked => "released".to_owned(),
                ReleaseOutcome::Refused => "released (unlock refused)".to_owned(),
                ReleaseOutcome::TimedOut => "released (unlock timed out)".to_owned(),
                ReleaseOutcome::Slow => "released (unlock slow: the term ended first)".to_owned(),
            },
            ReplicaEvent::Abandoned { .. } => "abandoned".to_owned(),
            ReplicaEvent::Worker { worker, state, .. } if state == "exhausted" => {
                format!("worker {worker} exhausted")
            }
            _ => return,
        };
        let label = self.label(replica);
        self.segment.push((label, line));
    }

    /// A replica's label: its latest term's, `S` if it never led.
    fn label(&self, replica: &str) -> String {
        self.label_of.get(replica).cloned().unwrap_or("S".into())
    }

    /// Writes the current group: each term's own order kept, labels in name order.
    fn flush(&mut self) {
        let mut by_label: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (label, line) in self.segment.drain(..) {
            by_label.entry(label).or_default().push(line);
        }
        for (label, mut lines) in by_label {
            lines.dedup();
            self.out
                .push_str(&format!("  {label}: {}\n", lines.join(", ")));
        }
    }

    fn finish(mut self) -> String {
        if let Some(first) = self.pending_label.take() {
            self.out.push_str(&format!("{first}\n"));
        }
        self.flush();
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::tests::ev;

    fn step(t_ms: f64, label: &str) -> Entry {
        Entry {
            t_ms,
            what: What::Step {
                label: label.into(),
                acts: label.contains("restart"),
            },
        }
    }

    fn story(winner: &str) -> Vec<Entry> {
        let acquired = |term| ReplicaEvent::Acquired {
            term,
            backend_pid: 7,
        };
        vec![
            ev(0.0, "a", acquired(1)),
            step(1.0, "1: wait for leader"),
            step(2.0, "2: restart-server"),
            ev(
                3.0,
                "a",
                ReplicaEvent::Demoted {
                    term: 1,
                    error: "connection closed".into(),
                },
            ),
            ev(4.0, winner, acquired(if winner == "a" { 2 } else { 1 })),
            Entry {
                t_ms: 5.0,
                what: What::Fault {
                    verb: crate::fault::Verb::Freeze,
                    target: winner.into(),
                    lifted: false,
                },
            },
        ]
    }

    #[test]
    fn terms_are_labelled_by_order_not_by_replica() {
        let want = "1: wait for leader\n  L1: acquired\n2: restart-server\n  \
                    L1: demoted (connection error)\n  L2: acquired\n  fault: freeze L2\n";
        // Whichever replica wins the race after the restart, the story is the same.
        assert_eq!(normalise(&story("a"), Story::Full), want);
        assert_eq!(normalise(&story("b"), Story::Full), want);
        // An acting step shares its group with the next: the demotion reads the same whether
        // it came before or after the next step began.
        for at in [3.5, 2.5] {
            let mut entries = story("b");
            entries.push(step(at, "3: wait for leader"));
            entries.sort_by(|x, y| x.t_ms.total_cmp(&y.t_ms));
            assert_eq!(
                normalise(&entries, Story::Full),
                "1: wait for leader\n  L1: acquired\n2: restart-server\n3: wait for leader\n  \
                 L1: demoted (connection error)\n  L2: acquired\n  fault: freeze L2\n"
            );
        }
        assert_eq!(
            normalise(&story("b"), Story::Faults),
            "1: wait for leader\n2: restart-server\n  fault: freeze a replica\n"
        );
    }
}
