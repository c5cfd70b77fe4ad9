//! The typed scenario model: what a scenario file says, as data. [`file`](super::file) reads it
//! from TOML (and validates it once, with `file:line` errors) and writes it back; the
//! [runner](super::run) interprets its steps; [`check`](crate::check) decides its
//! expectations.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::check::{Expectation, Invariants};
use crate::fault::Verb;
use crate::level::{Feature, Level, Need, Offer};
use crate::replica::program::{Command, Program};
use crate::snapshot::Story;
pub use crate::span::Span;
use crate::topology::ReplicaPath;

/// A validated scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// The scenario's name: its file stem.
    pub name: String,
    /// Where it was read from.
    pub file: PathBuf,
    /// What the scenario shows, for a person.
    pub description: String,
    /// The clause IDs it decides.
    pub clauses: Vec<String>,
    /// T for this scenario (default: the run's `--t`).
    pub t: Option<Span>,
    /// The cadence of the ticked loops (default: T).
    pub tick: Option<Span>,
    /// Every replica is told a CheckInterval of 0 (`REPLICA_CHECK_INTERVAL_MS=0`), which the
    /// page says uses the default, and the scenario runs at that default,
    /// [`SPEC_DEFAULT_INTERVAL`]: its cadence checks decide CFG-2.
    pub default_interval: bool,
    /// The seed of the scenario's random choices (which replica a `standby` target picks), so
    /// that a recorded schedule replays the same (default: the run's `--seed`).
    pub seed: Option<u64>,
    /// Which continuous invariants the run is held to (gauge sum, one lock row, gauge =
    /// pg_locks, leader-only work, overlap, the history of the lock rows): all (the default),
    /// the safety properties only (a transaction-mode pooler with the guard on), or none (a
    /// scenario that shows a hazard and expects the violation instead).
    pub invariants: Invariants,
    /// What the snapshot of the normalised timeline keeps.
    pub story: Story,
    /// The replicas by name.
    pub replicas: BTreeMap<String, ReplicaDecl>,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// The expectations.
    pub expect: Vec<Expectation>,
}

/// The page's default CheckInterval: "CheckInterval time.Duration 5s (DefaultCheckInterval)
/// ... Zero or a negative value uses the default" (CFG-2).
pub const SPEC_DEFAULT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

impl Scenario {
    /// The T this scenario runs at: the page's default when its replicas are told 0, else its
    /// own `t`, else the run's.
    pub fn interval(&self, run_t: std::time::Duration) -> std::time::Duration {
        if self.default_interval {
            return SPEC_DEFAULT_INTERVAL;
        }
        self.t.map_or(run_t, |own| own.at(run_t))
    }

    /// The CheckInterval each replica is told when the scenario runs at `t`: zero when the
    /// scenario asks for the program's default.
    pub fn told_interval(&self, t: std::time::Duration) -> std::time::Duration {
        if self.default_interval {
            std::time::Duration::ZERO
        } else {
            t
        }
    }

    /// Each replica's program: its own `cmd`, else the run's `program`.
    ///
    /// # Errors
    /// A replica's `cmd` is not a valid command template.
    pub fn programs(&self, program: &Program) -> anyhow::Result<BTreeMap<String, Program>> {
        let dir = self.file.parent().unwrap_or(Path::new("."));
        (self.replicas.iter())
            .map(|(name, d)| {
                let p = d.program(program, dir);
                Ok((
                    name.clone(),
                    p.map_err(|e| anyhow::anyhow!("replica {name}: {e}"))?,
                ))
            })
            .collect()
    }

    /// The oldest PostgreSQL major every replica's program runs on, and the replica that needs
    /// it (`postgres_from`), if any declares one.
    pub fn postgres_from(&self) -> Option<(&str, u32)> {
        (self.replicas.iter())
            .filter_map(|(name, d)| Some((name.as_str(), d.postgres_from?)))
            .max_by_key(|(_, v)| *v)
    }

    /// The replicas that reach the server through PgBouncer (either mode).
    pub fn pooled(&self) -> std::collections::BTreeSet<String> {
        (self.replicas.iter())
            .filter(|(_, d)| !matches!(d.path, DbPath::Direct | DbPath::None))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// What the wire checks need to know of the replicas: how each reaches the server, which
    /// queue on the lock by design (the harness's replica with `--wake`, X-WAKE), and whether
    /// the proxies kept a journal (`tapped`).
    pub fn wire_setup(&self, tapped: bool) -> crate::check::wire::WireSetup {
        use crate::check::wire::Hop;
        let hops = (self.replicas.iter())
            .map(|(name, d)| {
                let hop = match d.path {
                    DbPath::PgbouncerSession => Hop::SessionPooler,
                    DbPath::PgbouncerTransaction | DbPath::PgbouncerTransactionOneSession => {
                        Hop::TransactionPooler
                    }
                    DbPath::Direct | DbPath::None => Hop::Direct,
                };
                (name.clone(), hop)
            })
            .collect();
        let waking = (self.replicas.iter())
            .filter(|(_, d)| d.wake)
            .map(|(name, _)| name.clone())
            .collect();
        crate::check::wire::WireSetup {
            tapped,
            hops,
            waking,
            default_interval: self.default_interval,
            stray_unlocks: (self.steps.iter()).any(|s| {
                matches!(
                    s,
                    Step::Fault {
                        verb: crate::fault::Verb::Unlock,
                        ..
                    }
                )
            }),
        }
    }

    /// Whether a step stops the server (`restart-server`, `stop-server`): its data must then
    /// survive a stop (a volume); otherwise it may live in memory
    /// ([`TopologyConfig::data_in_memory`](crate::topology::TopologyConfig::data_in_memory)).
    pub fn stops_server(&self) -> bool {
        use crate::fault::Verb;
        (self.steps.iter()).any(|s| {
            matches!(
                s,
                Step::Fault {
                    verb: Verb::RestartServer | Verb::StopServer,
                    ..
                }
            )
        })
    }

    /// Whether it runs with no other scenario at once (`harness run --jobs`): one that must show
    /// a hazard (`invariants = false`) needs its replicas in step, and behind a transaction-mode
    /// pooler what a scenario shows depends on how its replicas' statements interleave; another
    /// scenario's load on the CPUs moves both (`pgbouncer-transaction-hazard` missed its hazard
    /// beside another scenario, and `pgbouncer-transaction-guarded` its first refusal).
    pub fn runs_alone(&self) -> bool {
        self.invariants == Invariants::None
            || (self.replicas.values()).any(|d| d.path.is_transaction_pooled())
    }

    /// What the run's programs offer when the run's program is `program`: the lowest level of
    /// them, whether all of them are the harness's own replica, and the features all of them
    /// have.
    pub fn observes(&self, program: &Program) -> Offer {
        let level = (self.replicas.values().map(|d| d.level_with(program))).min();
        // Whether every replica runs the program (none has a command of its own).
        let all_run_it = (self.replicas.values()).all(|d| d.cmd.is_none());
        let ours = all_run_it && program.is_ours();
        let features = (Feature::ALL.into_iter())
            .filter(|f| all_run_it && program.has(*f))
            .collect();
        Offer {
            level: level.unwrap_or(program.level()),
            ours,
            features,
        }
    }

    /// What its steps and replicas need of the replica program, beyond level 0: the harness's
    /// own replica for replica flags (`args`) and control steps (its `/control`), a feature
    /// beyond the spec that a replica turns on (`guard = true`, `wake = true`), level 1 for a
    /// wait on readiness. `None`: any program can play it. (Its checks each need a level of
    /// their own: see [`check::scenario`](crate::check::scenario).)
    pub fn needs(&self) -> Option<Need> {
        let own = self.replicas.values().any(|d| !d.args.is_empty())
            || (self.steps.iter()).any(|s| matches!(s, Step::Control { .. }));
        if own {
            return Some(Need::OwnReplica);
        }
        if let Some(f) = self.replicas.values().flat_map(ReplicaDecl::features).min() {
            return Some(Need::Feature(f));
        }
        let ready = self.steps.iter().any(|s| {
            matches!(
                s,
                Step::WaitFor {
                    until: WaitFor::Ready | WaitFor::AllReady,
                    ..
                }
            )
        });
        ready.then_some(Need::Level(Level::Metrics))
    }
}

/// How a replica reaches PostgreSQL (always through its own Toxiproxy proxy).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DbPath {
    /// Straight to the server.
    #[default]
    Direct,
    /// Through PgBouncer in session mode.
    PgbouncerSession,
    /// Through PgBouncer in transaction mode, at its default pool size (20 server sessions).
    PgbouncerTransaction,
    /// Through PgBouncer in transaction mode with one server session (the narrow case).
    #[serde(rename = "pgbouncer-transaction-1")]
    PgbouncerTransactionOneSession,
    /// No DSN at all: no elector, no background loop (LOOP-4).
    None,
}

impl DbPath {
    /// The topology's path for it; `None` for [`DbPath::None`].
    pub fn replica_path(self) -> Option<ReplicaPath> {
        match self {
            DbPath::Direct => Some(ReplicaPath::Direct),
            DbPath::PgbouncerSession => Some(ReplicaPath::PgBouncerSession),
            DbPath::PgbouncerTransaction => Some(ReplicaPath::PgBouncerTransaction),
            DbPath::PgbouncerTransactionOneSession => {
                Some(ReplicaPath::PgBouncerTransactionOneSession)
            }
            DbPath::None => None,
        }
    }

    /// Whether it runs through a transaction-mode pooler, where replicas share server sessions.
    pub fn is_transaction_pooled(self) -> bool {
        matches!(
            self,
            DbPath::PgbouncerTransaction | DbPath::PgbouncerTransactionOneSession
        )
    }
}

/// The invariants a run of these replicas is held to by default: all of them, or the safety
/// properties only when a replica goes through a transaction-mode pooler (see
/// [`Invariants::Safety`]).
pub fn invariants_for(replicas: &BTreeMap<String, ReplicaDecl>) -> Invariants {
    if replicas.values().any(|d| d.path.is_transaction_pooled()) {
        Invariants::Safety
    } else {
        Invariants::All
    }
}

impl From<ReplicaPath> for DbPath {
    fn from(p: ReplicaPath) -> Self {
        match p {
            ReplicaPath::Direct => DbPath::Direct,
            ReplicaPath::PgBouncerSession => DbPath::PgbouncerSession,
            ReplicaPath::PgBouncerTransaction => DbPath::PgbouncerTransaction,
            ReplicaPath::PgBouncerTransactionOneSession => DbPath::PgbouncerTransactionOneSession,
        }
    }
}

/// One replica of the scenario.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaDecl {
    /// Its path to the database. Default: direct.
    #[serde(default, skip_serializing_if = "is_direct")]
    pub path: DbPath,
    /// Extra flags for `harness replica`, e.g. `["--restart-budget", "3"]`: a scenario with
    /// them needs the harness's own replica.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// POOL-1's shared-session guard, beyond the spec: `true` needs a program that has it
    /// (`--replica-features guard`); `false` runs the program as the page describes it (one
    /// that has the guard is told to turn it off: `REPLICA_SHARED_SESSION_GUARD=0`, the
    /// harness's own replica's `--no-shared-session-guard`). Unset: the program as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<bool>,
    /// X-WAKE on (`REPLICA_WAKE=1`): needs a program that has it (`--replica-features wake`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wake: bool,
    /// X-FENCE on (`REPLICA_FENCE=1`): each term draws a token from the fence's sequence on
    /// its lock session, and each pass of leader-only work writes a fenced twin; needs a
    /// program that has it (`--replica-features fence`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fence: bool,
    /// X-VERIFY on (`REPLICA_VERIFY_LOCK=1`): the leader's check also verifies that its session
    /// holds the lock; needs a program that has it (`--replica-features verify`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verify: bool,
    /// The program's pool retires its connections after this long
    /// (`REPLICA_POOL_MAX_LIFETIME_MS`, SESS-1's "pool max lifetime far below the run time").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_max_lifetime: Option<Span>,
    /// A program of its own instead of the run's: a command template as `--replica-cmd`
    /// takes it, run in the scenario file's folder (a rolling upgrade: an old build and a new
    /// one side by side).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<String>,
    /// The contract level `cmd` meets (default 1, as `--replica-level`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<Level>,
    /// Started this long after the run's other replicas (those without one) are all ready
    /// (default: with them), however long they take to boot. Replicas started at one instant
    /// poll in step, and behind a transaction-mode pooler two queries in flight
    /// at once each get a server session of their own, which hides the pooler's hazard; replicas
    /// deployed one after another poll out of step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_after: Option<Span>,
    /// The oldest PostgreSQL major its program runs on. A program written to the spec needs
    /// 14: it sets `idle_session_timeout`, which 13 lacks, and cannot lead there. On an older
    /// server the scenario is not run, and its report says why (X-PGVER's matrix runs every
    /// scenario on 13).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgres_from: Option<u32>,
}

impl ReplicaDecl {
    /// The features beyond the spec it turns on, which its program must have.
    pub fn features(&self) -> Vec<Feature> {
        let mut v = Vec::new();
        if self.guard == Some(true) {
            v.push(Feature::Guard);
        }
        if self.wake {
            v.push(Feature::Wake);
        }
        if self.fence {
            v.push(Feature::Fence);
        }
        if self.verify {
            v.push(Feature::Verify);
        }
        v
    }

    /// The program this replica runs: its own `cmd` (run in `dir`), else the run's `program`.
    ///
    /// # Errors
    /// `cmd` is not a valid command template ([`Command::parse`]).
    pub fn program(&self, program: &Program, dir: &Path) -> anyhow::Result<Program> {
        let Some(cmd) = &self.cmd else {
            return Ok(program.clone());
        };
        let level = self.level_with(program);
        Ok(Program::External(Command::parse(cmd, level)?.in_dir(dir)))
    }

    /// The contract level of the program it runs: its `cmd`'s `level` (default 1, as
    /// `--replica-level`), else the run's `program`'s.
    pub fn level_with(&self, program: &Program) -> Level {
        match &self.cmd {
            Some(_) => self.level.unwrap_or(Level::Metrics),
            None => program.level(),
        }
    }
}

fn is_direct(p: &DbPath) -> bool {
    *p == DbPath::Direct
}

/// One step of a scenario. Each may carry an `as` name that marks its moment (and its
/// target) for later steps and expectations.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Waits this long.
    Sleep {
        /// How long.
        span: Span,
        /// Its `as` name: the moment the sleep ended.
        name: Option<String>,
    },
    /// Waits until a condition holds, judged on samples taken after the step began.
    WaitFor {
        /// The condition.
        until: WaitFor,
        /// The bound (default: 10T); a wait that times out fails the step.
        within: Option<Span>,
        /// Its `as` name: the moment the condition held, and the leader then.
        name: Option<String>,
    },
    /// Applies a fault verb.
    Fault {
        /// The verb.
        verb: Verb,
        /// Its target ([`Target::Server`] for the server verbs).
        target: Target,
        /// The delay of a [`Verb::Latency`] (and only of that).
        latency: Option<Latency>,
        /// Its `as` name: the fault, its target and the moment it took effect.
        name: Option<String>,
    },
    /// Lifts the fault of the step named `fault` with the verb's inverse.
    Heal {
        /// The `as` name of the fault step.
        fault: String,
        /// Its own `as` name: the moment the fault was lifted.
        name: Option<String>,
    },
    /// Sends a control command to a replica.
    Control {
        /// The command.
        command: Control,
        /// The replica.
        target: Target,
        /// Its `as` name: the replica and the moment the command was applied.
        name: Option<String>,
    },
    /// Runs SQL in a transaction on a connection of its own, straight to the server; it must
    /// complete within T. The transaction stays open for `hold` while the next steps run.
    Sql {
        /// The statements.
        sql: String,
        /// How long the transaction stays open (default: commit at once).
        hold: Option<Span>,
        /// Its `as` name: the moment the statements completed.
        name: Option<String>,
    },
}

/// What a `wait_for` step waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WaitFor {
    /// One replica leads by both its gauge and pg_locks.
    Leader,
    /// A replica leads that did not hold the lock when the step began.
    NewLeader,
    /// No granted lock row.
    NoLeader,
    /// Every running replica's `/readyz` answers 200.
    Ready,
    /// The same as `ready`.
    AllReady,
    /// The leader's next check answered on its lock session, as its proxy read the answer off
    /// the wire: a barrier that puts the next step at a known phase of the leader's checks
    /// (just after one, a whole T before the next), whatever the program's own schedule.
    /// Needs the harness's proxy (its journal).
    LeaderCheck,
}

/// Whom a fault or control step acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The replica that leads by pg_locks when the step runs.
    Leader,
    /// A running replica that does not lead, chosen with the run's seed.
    Standby,
    /// The replica of this name.
    Replica(String),
    /// The target of the earlier step with this `as` name.
    Named(String),
    /// The PostgreSQL server (the server verbs' only target).
    Server,
}

/// The delay of a `latency` fault.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Latency {
    /// Added to every round trip.
    pub delay: Span,
    /// ± this much (default: none).
    pub jitter: Option<Span>,
}

/// A replica's fault switch (its `POST /control`).
pub use crate::replica::control::Switch as Control;

impl Step {
    /// The step's `as` name.
    pub fn name(&self) -> Option<&str> {
        match self {
            Step::Sleep { name, .. }
            | Step::WaitFor { name, .. }
            | Step::Fault { name, .. }
            | Step::Heal { name, .. }
            | Step::Control { name, .. }
            | Step::Sql { name, .. } => name.as_deref(),
        }
    }

    /// Whether the step acts at once (a fault, heal, control or sql step) rather than waiting.
    pub fn acts(&self) -> bool {
        !matches!(self, Step::Sleep { .. } | Step::WaitFor { .. })
    }

    /// The step as the timeline labels it, e.g. `partition leader` or `sleep 3T`.
    pub fn label(&self) -> String {
        match self {
            Step::Sleep { span, .. } => format!("sleep {span}"),
            Step::WaitFor { until, .. } => format!("wait for {}", word(until)),
            Step::Fault {
                verb,
                target: Target::Server,
                ..
            } => verb.to_string(),
            Step::Fault { verb, target, .. } => format!("{verb} {}", target.word()),
            Step::Heal { fault, .. } => format!("heal {fault}"),
            Step::Control {
                command, target, ..
            } => format!("control {} {}", target.word(), command.json()),
            Step::Sql { sql, .. } => {
                let mut lines = sql.lines().map(str::trim).filter(|l| !l.is_empty());
                let first = lines.next().unwrap_or_default();
                let more = if lines.next().is_some() { " …" } else { "" };
                format!("sql {first}{more}")
            }
        }
    }
}

impl Target {
    /// The target as a scenario file writes it.
    pub fn word(&self) -> &str {
        match self {
            Target::Leader => "leader",
            Target::Standby => "standby",
            Target::Server => "server",
            Target::Replica(name) | Target::Named(name) => name,
        }
    }
}

impl Control {
    /// The command as `POST /control` takes it, keys in name order, e.g.
    /// `{"loop":"invitations-expire","mode":"fail"}`.
    pub fn json(&self) -> String {
        let (key, name, mode) = match self {
            Control::Loop { name, mode } => ("loop", name, word(mode)),
            Control::Worker { name, mode } => ("worker", name, word(mode)),
        };
        let body: BTreeMap<&str, &str> = [(key, name.as_str()), ("mode", mode.as_str())].into();
        serde_json::to_string(&body).expect("a map of strings serialises")
    }
}

/// A unit variant's serde name, e.g. `all-ready` or `crash_loop`.
pub fn word(v: &impl Serialize) -> String {
    Word(v).to_string()
}

/// Displays a unit variant as its serde name (`fmt::Formatter` is a serde serializer of unit
/// variants and plain values).
struct Word<'a, T>(&'a T);

impl<T: Serialize> std::fmt::Display for Word<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.serialize(f)
    }
}
