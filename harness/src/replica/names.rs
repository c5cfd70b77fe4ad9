//! The replica's workers by name: the election worker and the spec's loops (their tables), read
//! by the loops that run them and by the fault switches that name them.

pub(crate) use elector::supervisor::ELECTION_WORKER;

/// The loops ticked on the leader through the leader-ticker launcher (LOOP-1), in the spec's
/// order. Seven of them carry a readiness probe (READY-5).
pub const TICKED_LOOPS: [&str; 15] = [
    "invitations-expire",
    "approvals-expire",
    "actions-timeout",
    "access-session-sweep",
    "auth-state-sweep",
    "rate-budget-sweep",
    "sse-nonce-sweep",
    "credentials-sweeper",
    "cloud-credentials-sweeper",
    "management-fleet-reconcile",
    "provisioning-broker-reconcile",
    "artifacts-refresh",
    "blueprint-catalogs-tracking",
    "peers-endpoint-sweeper",
    "reachability-evaluator",
];

/// The self-paced loops run through the while-leader launcher (LOOP-2).
pub const WHILE_LEADER_LOOPS: [&str; 2] = ["audit-archiver", "authz-outbox-consumer"];

/// The loops that stay on every replica (LOOP-3), with the name of their leader-gated step, if
/// they have one.
pub const EVERY_REPLICA_LOOPS: [(&str, Option<&str>); 5] = [
    ("capacity-collector", Some("crossing")),
    ("observability-routing-consume", Some("durable-deletion")),
    ("sse-relay", None),
    ("sse-signing-key-rotation-watcher", None),
    ("peers-relay-assigner", None),
];

/// Every loop name, in the order above.
pub(crate) fn all_loop_names() -> impl Iterator<Item = &'static str> {
    TICKED_LOOPS
        .iter()
        .chain(WHILE_LEADER_LOOPS.iter())
        .copied()
        .chain(EVERY_REPLICA_LOOPS.iter().map(|(n, _)| *n))
}
