//! The normalised timeline of a scenario, for snapshot tests: no absolute times, ports, pids or
//! container ids; replicas named by role (`L1`, `L2`, … in the order they first led, `S` for
//! those that never led); only the transitions a scenario makes deterministic (terms, faults,
//! steps), grouped by the step they fall in, each replica's own order kept.

use std::collections::BTreeMap;

use crate::event::ReplicaEvent;
use crate::timeline::{Entry, What};

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

/// The roles of the replicas: `L1`, `L2`, … by first acquisition, `S` for the others.
pub fn roles(entries: &[Entry], replicas: &[String]) -> BTreeMap<String, String> {
    let mut roles = BTreeMap::new();
    let mut n = 0;
    for e in entries {
        if let What::Replica {
            replica,
            event: ReplicaEvent::Acquired { .. },
        } = &e.what
        {
            if !roles.contains_key(replica) {
                n += 1;
                roles.insert(replica.clone(), format!("L{n}"));
            }
        }
    }
    for r in replicas {
        roles.entry(r.clone()).or_insert_with(|| "S".to_owned());
    }
    roles
}

/// The normalised story of a run, one line per transition.
pub fn normalise(entries: &[Entry], replicas: &[String]) -> String {
    let roles = roles(entries, replicas);
    let role = |r: &str| roles.get(r).cloned().unwrap_or_else(|| "?".into());
    let mut out = String::new();
    let mut segment: Vec<(String, Vec<String>)> = Vec::new();
    let flush = |out: &mut String, segment: &mut Vec<(String, Vec<String>)>| {
        // Each role's own order is kept; roles are listed in name order.
        let mut by_role: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (r, lines) in segment.drain(..) {
            by_role.entry(r).or_default().extend(lines);
        }
        for (r, lines) in by_role {
            let mut lines = lines;
            lines.dedup();
            out.push_str(&format!("  {r}: {}\n", lines.join(", ")));
        }
    };
    for e in entries {
        match &e.what {
            What::Step { label } => {
                flush(&mut out, &mut segment);
                out.push_str(&format!("{label}\n"));
            }
            What::Fault {
                verb,
                target,
                lifted,
            } => {
                let t = if target == "postgres" {
                    target.clone()
                } else {
                    role(target)
                };
                segment.push((
                    "fault".into(),
                    vec![format!("{}{verb} {t}", if *lifted { "lift " } else { "" })],
                ));
            }
            What::Replica { replica, event } => {
                let line = match event {
                    ReplicaEvent::Acquired { .. } => "acquired".to_owned(),
                    ReplicaEvent::Demoted { error, .. } => format!("demoted ({})", category(error)),
                    ReplicaEvent::Released { .. } => "released".to_owned(),
                    ReplicaEvent::Abandoned { .. } => "abandoned".to_owned(),
                    ReplicaEvent::Worker { worker, state, .. } if state == "exhausted" => {
                        format!("worker {worker} exhausted")
                    }
                    _ => continue,
                };
                segment.push((role(replica), vec![line]));
            }
            _ => {}
        }
    }
    flush(&mut out, &mut segment);
    out
}
