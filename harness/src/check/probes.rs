//! LOOP-6 and READY-5 from the event stream: the seven boot passes before the first ready
//! report, and the spec's probe names.

use super::*;

/// The seven probe names of `/readyz`, as the spec's Readiness section lists them (READY-5):
/// `access-session-sweeper` is the probe of the loop `access-session-sweep`; the other six match
/// their loops.
pub const SPEC_PROBES: [&str; 7] = [
    "invitations-expire",
    "approvals-expire",
    "access-session-sweeper",
    "actions-timeout",
    "management-fleet-reconcile",
    "provisioning-broker-reconcile",
    "artifacts-refresh",
];

/// The loop a spec probe belongs to.
pub(crate) fn probe_loop(probe: &str) -> &str {
    if probe == "access-session-sweeper" {
        "access-session-sweep"
    } else {
        probe
    }
}

/// LOOP-6: every time a replica with an elector reports `ready`, it has run the boot pass of
/// each of the seven probed loops since it started, leader or not (the passes are ungated).
/// Unknown when no such replica reported ready.
pub fn boot_passes_before_ready(entries: &[Entry]) -> Check {
    let mut since_start: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut with_elector: BTreeSet<&str> = BTreeSet::new();
    let (mut readies, mut bad) = (0usize, Vec::new());
    for e in entries {
        let What::Replica { replica, event } = &e.what else {
            continue;
        };
        match event {
            ReplicaEvent::Started { elector, .. } => {
                since_start.insert(replica, BTreeSet::new());
                if *elector {
                    with_elector.insert(replica);
                } else {
                    with_elector.remove(replica.as_str());
                }
            }
            ReplicaEvent::BootPass { loop_name, .. } => {
                since_start.entry(replica).or_default().insert(loop_name);
            }
            ReplicaEvent::Ready if with_elector.contains(replica.as_str()) => {
                readies += 1;
                let ran = since_start
                    .get(replica.as_str())
                    .cloned()
                    .unwrap_or_default();
                let missing: Vec<&str> = SPEC_PROBES
                    .iter()
                    .map(|p| probe_loop(p))
                    .filter(|l| !ran.contains(l))
                    .collect();
                if !missing.is_empty() {
                    bad.push(format!(
                        "{replica} ready at {:.0} ms without the boot passes of {missing:?}",
                        e.t_ms
                    ));
                }
            }
            _ => {}
        }
    }
    let verdict = verdict_of(readies, bad.is_empty());
    let message = match bad.first() {
        Some(first) => first.clone(),
        None => format!("{readies} ready report(s), each after the seven boot passes"),
    };
    Check::new("boot passes before ready", &["LOOP-6"], verdict, message)
        .figure("ready reports", readies.to_string())
        .with_measures(count_at_most(
            "ready reports before the seven boot passes",
            readies,
            bad.len(),
            0,
        ))
}

/// READY-5: each replica's `/readyz` lists exactly the spec's seven probe names (plus the
/// `workers` probe of LOOP-5), whenever its list was sampled. Replicas without an elector
/// (LOOP-4) are not held to it. Unknown when no list was sampled.
pub fn probe_names(entries: &[Entry]) -> Check {
    let want: BTreeSet<&str> = SPEC_PROBES.iter().copied().chain(["workers"]).collect();
    let (mut seen, mut bad) = (0usize, Vec::new());
    let mut without_elector: BTreeSet<&str> = BTreeSet::new();
    for e in entries {
        let (replica, names) = match &e.what {
            What::Replica {
                replica,
                event: ReplicaEvent::Started { elector, .. },
            } => {
                if *elector {
                    without_elector.remove(replica.as_str());
                } else {
                    without_elector.insert(replica);
                }
                continue;
            }
            What::Probes { replica, names } if !without_elector.contains(replica.as_str()) => {
                (replica, names)
            }
            _ => continue,
        };
        seen += 1;
        let got: BTreeSet<&str> = names.iter().map(String::as_str).collect();
        if got != want || got.len() != names.len() {
            bad.push(format!(
                "{replica} lists {names:?}; missing {:?}, extra {:?}",
                want.difference(&got).collect::<Vec<_>>(),
                got.difference(&want).collect::<Vec<_>>()
            ));
        }
    }
    let verdict = verdict_of(seen, bad.is_empty());
    let message = match bad.first() {
        Some(first) => first.clone(),
        None => format!("{seen} probe list(s), each the spec's seven and `workers`"),
    };
    Check::new("probe names", &["READY-5"], verdict, message).with_measures(count_at_most(
        "probe lists other than the spec's",
        seen,
        bad.len(),
        0,
    ))
}

#[cfg(test)]
pub(crate) mod tests;
