//! The replica contract's levels (`docs/replica-contract.md`): what a replica program lets the
//! harness observe. Each check and scenario step needs a level; a program below it leaves that
//! check not run, with the level that would decide it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What a replica program lets the harness observe (the contract's levels, ordered).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "u8", try_from = "u8")]
pub enum Level {
    /// A process and the database: its lock row in pg_locks (by `application_name`), signals.
    Process = 0,
    /// Plus HTTP `/metrics` with the gauge and `/readyz`.
    Metrics = 1,
    /// Plus its leader-only work as rows in `leader_work`.
    Work = 2,
    /// Plus the structured event stream on stdout.
    Events = 3,
}

impl Level {
    /// Every level, lowest first.
    pub const ALL: [Level; 4] = [Level::Process, Level::Metrics, Level::Work, Level::Events];

    /// The level's number.
    pub fn number(self) -> u8 {
        self as u8
    }

    /// What the level adds, in a few words.
    pub fn adds(self) -> &'static str {
        match self {
            Level::Process => "a process and its lock row in pg_locks",
            Level::Metrics => "/metrics (the gauge) and /readyz",
            Level::Work => "leader-only work rows in leader_work",
            Level::Events => "the JSON-lines event stream on stdout",
        }
    }
}

impl From<Level> for u8 {
    fn from(l: Level) -> u8 {
        l.number()
    }
}

impl TryFrom<u8> for Level {
    type Error = String;
    fn try_from(n: u8) -> Result<Self, String> {
        Level::ALL
            .into_iter()
            .find(|l| l.number() == n)
            .ok_or_else(|| format!("level {n}: the contract's levels are 0, 1, 2 and 3"))
    }
}

impl FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let n: u8 = s
            .trim()
            .parse()
            .map_err(|_| format!("level {s:?}: expected 0, 1, 2 or 3"))?;
        Level::try_from(n)
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "level {}", self.number())
    }
}

/// What a check or a scenario needs of the replica program that the program may lack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Need {
    /// Observations of this contract level.
    Level(Level),
    /// The harness's own replica: its flags (a scenario's `args`) or its `/control` endpoint,
    /// which the contract does not ask of other programs.
    OwnReplica,
    /// An in-process test: only the elector's own tests decide it, on the Rust crate.
    InProcess,
    /// A PostgreSQL server of this major or later: a replica's program does not run on an
    /// older one (its `postgres_from`). Not a need of the program but of the server, so
    /// [`Need::met_by`] leaves it to the run, which reads the server's version.
    Postgres(u32),
    /// The harness's own Toxiproxy-compatible server, whose proxies keep a journal of what
    /// each replica said on the wire: a need of the topology, not of the program (upstream
    /// Toxiproxy keeps none).
    Wire,
    /// Servers that start: this run's could not (Docker, an image, a port), so nothing of the
    /// scenario ran; its check says why. A need of the machine, not of the program.
    Setup,
    /// A program with this opt-in feature beyond the spec, declared with `--replica-features`
    /// (the harness's own replica has every one).
    Feature(Feature),
}

/// An opt-in feature beyond the spec that a program may have, and declares
/// (`--replica-features guard,wake,fence,verify`): a scenario that needs it is not run for a program without
/// it, and one that turns it off tells the program so through a contract variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Feature {
    /// POOL-1's guard: the program finds its lock attempt on a server session that another
    /// client's lock is on (a transaction-mode pooler) and refuses to lead, with a clear error.
    /// On by default in a program that has it; `REPLICA_SHARED_SESSION_GUARD=0` turns it off.
    Guard,
    /// X-WAKE: standbys queue on the lock, so one leads within milliseconds of a release or a
    /// crash; on with `REPLICA_WAKE=1`.
    Wake,
    /// X-FENCE: each term draws a token from the fence's sequence on its lock session, and
    /// leader-only work writes a twin guarded by it; on with `REPLICA_FENCE=1`.
    Fence,
    /// X-VERIFY: the leader's check also asks whether its session still holds the lock, and
    /// demotes when it does not (an unlock or `DISCARD ALL` on the lock session); on with
    /// `REPLICA_VERIFY_LOCK=1`.
    Verify,
}

impl Feature {
    /// Every feature, in order.
    pub const ALL: [Feature; 4] = [
        Feature::Guard,
        Feature::Wake,
        Feature::Fence,
        Feature::Verify,
    ];

    /// Its name on the command line and in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Guard => "guard",
            Feature::Wake => "wake",
            Feature::Fence => "fence",
            Feature::Verify => "verify",
        }
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Feature {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        (Feature::ALL.into_iter())
            .find(|f| f.name() == s.trim())
            .ok_or_else(|| format!("feature {s:?}: the features are guard, wake, fence and verify"))
    }
}

/// What a program offers the harness: its level, whether it is the harness's own replica (its
/// flags and `/control`), and the features beyond the spec it declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offer {
    /// Its contract level.
    pub level: Level,
    /// Whether it is the harness's own replica.
    pub ours: bool,
    /// Its declared features (the harness's own replica: every one, so where `ours` is set
    /// every feature is here: [`Program::offer`](crate::replica::program::Program::offer) and
    /// [`Scenario::observes`](crate::scenario::Scenario::observes) build it so, and
    /// [`Need::met_by`] reads a feature here alone).
    pub features: std::collections::BTreeSet<Feature>,
}

impl Offer {
    /// A program at `level` with no feature beyond the spec.
    pub fn plain(level: Level) -> Offer {
        Offer {
            level,
            ours: false,
            features: std::collections::BTreeSet::new(),
        }
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Need::Level(l) => write!(f, "{l} ({})", l.adds()),
            Need::OwnReplica => f.write_str("the harness's own replica (its flags or /control)"),
            Need::InProcess => f.write_str("an in-process test (the elector's own tests)"),
            Need::Postgres(v) => write!(f, "PostgreSQL {v} or later (a replica's postgres_from)"),
            Need::Wire => f.write_str("the harness's proxy (its wire journal)"),
            Need::Setup => f.write_str("servers that start (Docker, the images, free ports)"),
            Need::Feature(x) => write!(
                f,
                "a program with the {x} feature beyond the spec (declared with --replica-features {x})"
            ),
        }
    }
}

impl Need {
    /// Its place in order: the levels, then the harness's own replica, then an in-process test.
    pub fn rank(self) -> u8 {
        match self {
            Need::Level(l) => l.number(),
            Need::OwnReplica => 100,
            Need::InProcess => 101,
            Need::Postgres(v) => 50u8.saturating_add(u8::try_from(v).unwrap_or(u8::MAX)),
            Need::Wire => 40,
            Need::Setup => 102,
            Need::Feature(_) => 30,
        }
    }

    /// Whether a program that offers `offer` meets it.
    pub fn met_by(self, offer: &Offer) -> bool {
        match self {
            Need::Level(l) => l <= offer.level,
            Need::OwnReplica => offer.ours,
            Need::Feature(f) => offer.features.contains(&f),
            Need::InProcess => false,
            Need::Postgres(_) | Need::Wire | Need::Setup => true,
        }
    }

    /// The short form a report cell shows, e.g. `needs level 3`.
    pub fn short(self) -> String {
        match self {
            Need::Level(l) => format!("needs {l}"),
            Need::OwnReplica => "needs the harness's replica".to_owned(),
            Need::InProcess => "in-process test only".to_owned(),
            Need::Postgres(v) => format!("needs PostgreSQL {v}+"),
            Need::Wire => "needs the harness's proxy".to_owned(),
            Need::Setup => "setup failed".to_owned(),
            Need::Feature(f) => format!("needs {f}"),
        }
    }
}
