//! The wire types of a replica's HTTP API, shared by the server (`http`) and the parent side
//! ([`super::handle`]).

use serde::{Deserialize, Serialize};

/// One check's verdict on `/readyz`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckVerdict {
    /// The check's name: a probe name (READY-5) or `workers`.
    pub name: String,
    /// Whether it passes.
    pub ok: bool,
    /// Why it does not pass.
    pub error: Option<String>,
}

/// The body of `/readyz` (HTTP 200 when `ready`, else 503).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyReport {
    /// Whether every check passes.
    pub ready: bool,
    /// Every check's verdict, in registration order.
    pub checks: Vec<CheckVerdict>,
}

impl ReadyReport {
    /// The verdict of the check named `name`.
    pub fn check(&self, name: &str) -> Option<&CheckVerdict> {
        self.checks.iter().find(|c| c.name == name)
    }
}

/// One supervised worker on `/workers`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// The worker's name (`background-leader` or a loop name).
    pub name: String,
    /// `running`, `restarting`, `exhausted` or `stopped`.
    pub state: String,
    /// How many times it was restarted.
    pub restarts: u32,
    /// Why it last ended, if it did.
    pub last_exit: Option<String>,
}

/// The body of `/leader`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderInfo {
    /// The replica's name.
    pub replica: String,
    /// Whether the replica runs an elector (no DSN: none, LOOP-4).
    pub elector: bool,
    /// Whether it holds the lock now.
    pub is_leader: bool,
    /// The live term's number, if it leads.
    pub term: Option<u64>,
}

/// The body of `POST /control`: exactly one of `loop` and `worker`, and a `mode`.
///
/// For a loop: `ok`, `fail` or `panic` (its next passes). For a worker: `ok`, `crash` (its
/// current run panics), `exit` (its current run returns) or `crash_loop` (every run panics until
/// `ok`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlRequest {
    /// A loop name.
    #[serde(rename = "loop", default, skip_serializing_if = "Option::is_none")]
    pub loop_name: Option<String>,
    /// A worker name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// What to do.
    pub mode: String,
}

/// The answer of `POST /control`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlReply {
    /// Whether the request was applied.
    pub ok: bool,
    /// What was done, or why not.
    pub message: String,
}
