//! The scenario file model: TOML a person can read and write, validated before anything starts.
//!
//! ```toml
//! description = "The leader is cut off by a silent black hole."
//! clauses = ["DEM-2", "ORPH-2"]
//!
//! [replicas]
//! r1 = { path = "direct" }
//! r2 = { path = "direct" }
//!
//! [[step]]
//! wait_for = "leader"
//! within = "3T"
//!
//! [[step]]
//! fault = "partition"
//! target = "leader"
//! as = "cut"
//!
//! [[step]]
//! sleep = "6T"
//!
//! [[expect]]
//! event = "demoted"
//! replica = "cut"
//! after = "cut"
//! within = "2T"
//! clause = "DEM-2"
//! ```
//!
//! Errors name the file, the line and what is wrong: unknown keys, bad durations, unknown
//! replicas, fault names or clause IDs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::clauses;

/// A duration written in a scenario: `3T`, `0.5T`, `250ms` or `2s`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Span {
    /// A multiple of the check interval T.
    T(f64),
    /// An absolute duration.
    Abs(Duration),
}

impl Span {
    /// Parses `3T`, `0.5T`, `250ms`, `2s`.
    pub fn parse(s: &str) -> Result<Span, String> {
        let s = s.trim();
        let num = |n: &str| {
            n.trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| {
                    format!(
                        "bad duration {s:?}: expected e.g. \"3T\", \"0.5T\", \"250ms\" or \"2s\""
                    )
                })
        };
        if let Some(n) = s.strip_suffix('T') {
            Ok(Span::T(num(n)?))
        } else if let Some(n) = s.strip_suffix("ms") {
            Ok(Span::Abs(Duration::from_secs_f64(num(n)? / 1000.0)))
        } else if let Some(n) = s.strip_suffix('s') {
            Ok(Span::Abs(Duration::from_secs_f64(num(n)?)))
        } else {
            Err(format!(
                "bad duration {s:?}: expected e.g. \"3T\", \"0.5T\", \"250ms\" or \"2s\""
            ))
        }
    }

    /// The duration at check interval `t`.
    pub fn at(&self, t: Duration) -> Duration {
        match self {
            Span::T(k) => t.mul_f64(*k),
            Span::Abs(d) => *d,
        }
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Span::T(k) => write!(f, "{k}T"),
            Span::Abs(d) => write!(f, "{}ms", d.as_millis()),
        }
    }
}

/// How a replica reaches PostgreSQL (always through its own Toxiproxy proxy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DbPath {
    /// Straight to the server.
    Direct,
    /// Through PgBouncer in session mode.
    PgbouncerSession,
    /// Through PgBouncer in transaction mode.
    PgbouncerTransaction,
    /// No DSN at all: no elector, no background loop (LOOP-4).
    None,
}

/// One replica of the scenario.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaDecl {
    /// Its path to the database. Default: direct.
    #[serde(default = "direct")]
    pub path: DbPath,
    /// Extra flags for `harness replica`, e.g. `["--pool-max-lifetime-ms", "50"]`.
    #[serde(default)]
    pub args: Vec<String>,
}

fn yes() -> bool {
    true
}

fn direct() -> DbPath {
    DbPath::Direct
}

/// One step, as written: exactly one action key per step.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStep {
    /// Sleep this long.
    pub sleep: Option<Spanned<String>>,
    /// Wait until a condition holds: `leader`, `new-leader` (one that did not hold the lock
    /// when the step began), `no-leader`, `ready`, `all-ready`.
    pub wait_for: Option<Spanned<String>>,
    /// Apply a fault verb.
    pub fault: Option<Spanned<String>>,
    /// Lift the fault named by its `as`.
    pub heal: Option<Spanned<String>>,
    /// Send a control command to a replica (`{"loop": .., "mode": ..}` as a table).
    pub control: Option<toml::Table>,
    /// Run this SQL in a transaction on a connection of its own, straight to the server; it
    /// must complete within T (a statement that blocks fails the step). The transaction stays
    /// open for `hold`, then commits, while the next steps run (e.g. LOCK-2's bigint lock).
    pub sql: Option<Spanned<String>>,
    /// `sql`: how long the transaction stays open (default: commit at once).
    pub hold: Option<Spanned<String>>,
    /// The replica or role a fault or control targets: `leader`, `standby`, a replica name,
    /// or a name given by an earlier `as`.
    pub target: Option<Spanned<String>>,
    /// Names this fault (and its target) for later steps and expectations.
    #[serde(rename = "as")]
    pub name: Option<Spanned<String>>,
    /// The bound of a `wait_for`.
    pub within: Option<Spanned<String>>,
    /// `latency`: the delay.
    pub latency: Option<Spanned<String>>,
    /// `latency`: the jitter.
    pub jitter: Option<Spanned<String>>,
}

/// One expectation, as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExpect {
    /// The clause this expectation decides.
    pub clause: Spanned<String>,
    /// An event kind a replica must (or, with `absent`, must not) report.
    pub event: Option<Spanned<String>>,
    /// Which replica: a name, `any`, `other` (not the `after` fault's target), or a name given
    /// by an `as`.
    pub replica: Option<Spanned<String>>,
    /// Measured from the fault (or step) with this `as` name.
    pub after: Option<Spanned<String>>,
    /// The bound.
    pub within: Option<Spanned<String>>,
    /// The lower bound (e.g. the orphaned session is not released before 4T).
    pub not_before: Option<Spanned<String>>,
    /// The event must not happen within `within`.
    #[serde(default)]
    pub absent: bool,
    /// The gauge sum must reach this value at some sample (POOL-1's hazard).
    pub gauge_sum_reaches: Option<i64>,
    /// The number of granted lock rows must stay at most this.
    pub lock_rows_at_most: Option<usize>,
    /// The number of `leader_work` rows must be exactly this.
    pub work_rows: Option<usize>,
    /// A replica's `/readyz` must answer this status at some sample after `after`.
    pub readyz: Option<u16>,
    /// A replica's `/readyz` must report a failing check whose `name: error` contains this
    /// text, at some sample after `after` (e.g. the panic text of READY-4).
    pub readyz_says: Option<Spanned<String>>,
    /// Texts that must all appear on one line of the replica's log (e.g. the ERROR line of a
    /// panicked tick with its `loop`, `panic` and `stack` fields).
    #[serde(default)]
    pub log: Vec<Spanned<String>>,
}

/// The whole file, as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScenario {
    /// What the scenario shows, for a person.
    pub description: String,
    /// The clauses it decides.
    pub clauses: Vec<Spanned<String>>,
    /// T for this scenario (default: the run's `--t`).
    pub t: Option<Spanned<String>>,
    /// The cadence of the ticked loops (default: T).
    pub tick: Option<Spanned<String>>,
    /// Whether the continuous invariants (gauge sum, one lock row, gauge = pg_locks,
    /// leader-only work, overlap) are checked. Default: true. A scenario that shows a hazard
    /// (PgBouncer transaction mode) turns them off and expects the violation instead.
    #[serde(default = "yes")]
    pub invariants: bool,
    /// What the snapshot of the normalised timeline keeps: `full` (default) or `faults` (for
    /// a scenario that lets leadership move by design; see [`crate::snapshot::Story`]).
    #[serde(default)]
    pub story: crate::snapshot::Story,
    /// The replicas by name.
    pub replicas: BTreeMap<String, ReplicaDecl>,
    /// The steps, in order.
    #[serde(default)]
    pub step: Vec<RawStep>,
    /// The expectations.
    #[serde(default)]
    pub expect: Vec<RawExpect>,
}

/// A fault verb a step may apply.
pub const VERBS: &[&str] = &[
    "partition",
    "stall",
    "latency",
    "reset",
    "disable",
    "kill-backend",
    "restart-server",
    "stop-server",
    "kill",
    "freeze",
    "terminate",
    "restart",
];

/// Event kinds an expectation may name.
pub const EVENTS: &[&str] = &[
    "started",
    "ready",
    "check_refused",
    "check_failed",
    "acquired",
    "demoted",
    "released",
    "abandoned",
    "tick",
    "worker",
    "shutdown",
    "lock_released",
];

/// A validated scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The scenario's name: its file stem.
    pub name: String,
    /// Where it was read from.
    pub file: PathBuf,
    /// The validated content.
    pub raw: RawScenario,
}

/// A scenario file that cannot be used: the file, the line and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct FileError {
    /// The file.
    pub file: String,
    /// The 1-based line (0 when unknown).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl Scenario {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Scenario, FileError> {
        let text = std::fs::read_to_string(path).map_err(|e| FileError {
            file: path.display().to_string(),
            line: 0,
            message: format!("cannot read: {e}"),
        })?;
        Scenario::parse(path, &text)
    }

    /// Parses and validates `text` as the content of `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Scenario, FileError> {
        let file = path.display().to_string();
        let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
        let raw: RawScenario = toml::from_str(text).map_err(|e| FileError {
            file: file.clone(),
            line: e.span().map_or(0, |s| line_of(s.start)),
            message: e.message().to_owned(),
        })?;
        let err = |s: &std::ops::Range<usize>, message: String| FileError {
            file: file.clone(),
            line: line_of(s.start),
            message,
        };
        let span_ok = |v: &Option<Spanned<String>>| -> Result<(), FileError> {
            if let Some(v) = v {
                Span::parse(v.get_ref()).map_err(|m| err(&v.span(), m))?;
            }
            Ok(())
        };
        if raw.replicas.is_empty() {
            return Err(FileError {
                file,
                line: 0,
                message: "no [replicas]".into(),
            });
        }
        for c in &raw.clauses {
            if !clauses::exists(c.get_ref()) {
                return Err(err(
                    &c.span(),
                    format!("unknown clause ID {:?}", c.get_ref()),
                ));
            }
        }
        span_ok(&raw.t)?;
        span_ok(&raw.tick)?;
        let mut names: BTreeSet<String> = BTreeSet::new();
        for step in &raw.step {
            let actions = [
                step.sleep.is_some(),
                step.wait_for.is_some(),
                step.fault.is_some(),
                step.heal.is_some(),
                step.control.is_some(),
                step.sql.is_some(),
            ];
            let first = [
                &step.sleep,
                &step.wait_for,
                &step.fault,
                &step.heal,
                &step.sql,
            ]
            .into_iter()
            .flatten()
            .map(|s| s.span())
            .next()
            .or_else(|| step.target.as_ref().map(|t| t.span()))
            .unwrap_or(0..0);
            if actions.iter().filter(|a| **a).count() != 1 {
                return Err(err(
                    &first,
                    "a step takes exactly one of sleep, wait_for, fault, heal, control, sql".into(),
                ));
            }
            if step.hold.is_some() && step.sql.is_none() {
                return Err(err(
                    &step.hold.as_ref().map_or(first.clone(), |h| h.span()),
                    "`hold` belongs to an `sql` step".into(),
                ));
            }
            for v in [
                &step.sleep,
                &step.within,
                &step.latency,
                &step.jitter,
                &step.hold,
            ] {
                span_ok(v)?;
            }
            if let Some(w) = &step.wait_for {
                if !["leader", "new-leader", "no-leader", "ready", "all-ready"]
                    .contains(&w.get_ref().as_str())
                {
                    return Err(err(
                        &w.span(),
                        format!(
                            "unknown wait_for {:?}: expected leader, new-leader, no-leader, ready or all-ready",
                            w.get_ref()
                        ),
                    ));
                }
            }
            if let Some(f) = &step.fault {
                if !VERBS.contains(&f.get_ref().as_str()) {
                    return Err(err(
                        &f.span(),
                        format!(
                            "unknown fault {:?}: expected one of {}",
                            f.get_ref(),
                            VERBS.join(", ")
                        ),
                    ));
                }
                if f.get_ref() == "latency" && step.latency.is_none() {
                    return Err(err(
                        &f.span(),
                        "a latency fault needs `latency = \"…\"`".into(),
                    ));
                }
            }
            if let Some(t) = &step.target {
                let v = t.get_ref();
                if !["leader", "standby", "server"].contains(&v.as_str())
                    && !raw.replicas.contains_key(v)
                    && !names.contains(v)
                {
                    return Err(err(
                        &t.span(),
                        format!(
                            "unknown replica {v:?} (replicas: {})",
                            raw.replicas.keys().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
            }
            if let Some(h) = &step.heal {
                if !names.contains(h.get_ref()) {
                    return Err(err(
                        &h.span(),
                        format!("heal names no earlier fault: {:?}", h.get_ref()),
                    ));
                }
            }
            if let Some(n) = &step.name {
                if raw.replicas.contains_key(n.get_ref()) || !names.insert(n.get_ref().clone()) {
                    return Err(err(
                        &n.span(),
                        format!("the name {:?} is already taken", n.get_ref()),
                    ));
                }
            }
        }
        for ex in &raw.expect {
            if !clauses::exists(ex.clause.get_ref()) {
                return Err(err(
                    &ex.clause.span(),
                    format!("unknown clause ID {:?}", ex.clause.get_ref()),
                ));
            }
            for v in [&ex.within, &ex.not_before] {
                span_ok(v)?;
            }
            if let Some(e) = &ex.event {
                if !EVENTS.contains(&e.get_ref().as_str()) {
                    return Err(err(
                        &e.span(),
                        format!(
                            "unknown event {:?}: expected one of {}",
                            e.get_ref(),
                            EVENTS.join(", ")
                        ),
                    ));
                }
            }
            if let Some(r) = &ex.replica {
                let v = r.get_ref();
                if !["any", "other"].contains(&v.as_str())
                    && !raw.replicas.contains_key(v)
                    && !names.contains(v)
                {
                    return Err(err(&r.span(), format!("unknown replica {v:?}")));
                }
            }
            if let Some(a) = &ex.after {
                if !names.contains(a.get_ref()) {
                    return Err(err(
                        &a.span(),
                        format!("`after` names no step: {:?}", a.get_ref()),
                    ));
                }
            }
            let kinds = [
                ex.event.is_some(),
                ex.gauge_sum_reaches.is_some(),
                ex.lock_rows_at_most.is_some(),
                ex.work_rows.is_some(),
                ex.readyz.is_some(),
                ex.readyz_says.is_some(),
                !ex.log.is_empty(),
            ];
            if kinds.iter().filter(|k| **k).count() != 1 {
                return Err(err(&ex.clause.span(),
                    "an expectation takes exactly one of event, gauge_sum_reaches, lock_rows_at_most, work_rows, readyz, readyz_says, log".into()));
            }
            if !ex.log.is_empty()
                && ex
                    .replica
                    .as_ref()
                    .is_none_or(|r| ["any", "other"].contains(&r.get_ref().as_str()))
            {
                return Err(err(
                    &ex.clause.span(),
                    "a `log` expectation names one replica (its name or an `as` name)".into(),
                ));
            }
        }
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(Scenario {
            name,
            file: path.to_owned(),
            raw,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
description = "cut the leader off"
clauses = ["DEM-2"]

[replicas]
r1 = { path = "direct" }
r2 = {}

[[step]]
wait_for = "leader"
within = "3T"

[[step]]
fault = "partition"
target = "leader"
as = "cut"

[[step]]
sleep = "6T"

[[step]]
heal = "cut"

[[expect]]
event = "demoted"
replica = "cut"
after = "cut"
within = "2T"
clause = "DEM-2"
"#;

    fn parse(text: &str) -> Result<Scenario, FileError> {
        Scenario::parse(Path::new("scenarios/x.toml"), text)
    }

    #[test]
    fn good_file_parses() {
        let s = parse(GOOD).unwrap();
        assert_eq!(s.name, "x");
        assert_eq!(s.raw.replicas["r2"].path, DbPath::Direct);
        assert_eq!(s.raw.step.len(), 4);
        assert_eq!(
            Span::parse("0.5T").unwrap().at(Duration::from_millis(200)),
            Duration::from_millis(100)
        );
        assert_eq!(
            Span::parse("250ms").unwrap(),
            Span::Abs(Duration::from_millis(250))
        );
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            (
                GOOD.replace("within = \"3T\"", "within = \"3 parsecs\""),
                11,
                "bad duration",
            ),
            (
                GOOD.replace("as = \"cut\"", "as = \"cut\"\ncolour = \"red\""),
                17,
                "unknown field `colour`",
            ),
            (
                GOOD.replace("replica = \"cut\"", "replica = \"r9\""),
                26,
                "unknown replica \"r9\"",
            ),
            (
                GOOD.replace("clause = \"DEM-2\"", "clause = \"DEM-9\""),
                29,
                "unknown clause ID \"DEM-9\"",
            ),
            (
                GOOD.replace("fault = \"partition\"", "fault = \"nuke\""),
                14,
                "unknown fault \"nuke\"",
            ),
            (
                GOOD.replace("heal = \"cut\"", "heal = \"cat\""),
                22,
                "heal names no earlier fault",
            ),
        ];
        for (text, line, needle) in cases {
            let e = parse(&text).unwrap_err();
            assert_eq!(e.line, line, "{e}");
            assert!(e.message.contains(needle), "{e}");
            assert!(
                e.to_string()
                    .starts_with(&format!("scenarios/x.toml:{line}: ")),
                "{e}"
            );
        }
    }

    #[test]
    fn every_shipped_scenario_validates() {
        let dir = crate::scenario::run::default_dir();
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|x| x == "toml") && !path.ends_with("Cargo.toml") {
                Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
                n += 1;
            }
        }
        assert!(n >= 15, "only {n} scenario files in {}", dir.display());
    }

    #[test]
    fn new_keys_are_checked() {
        let hold_alone = GOOD.replace("as = \"cut\"", "as = \"cut\"\nhold = \"2T\"");
        let e = parse(&hold_alone).unwrap_err();
        assert!(e.message.contains("`hold` belongs to an `sql` step"), "{e}");
        let log_any = format!("{GOOD}\n[[expect]]\nclause = \"READY-4\"\nlog = [\"x\"]\n");
        let e = parse(&log_any).unwrap_err();
        assert!(e.message.contains("names one replica"), "{e}");
        let two = GOOD.replace(
            "within = \"2T\"\nclause",
            "within = \"2T\"\nreadyz_says = \"x\"\nclause",
        );
        let e = parse(&two).unwrap_err();
        assert!(e.message.contains("exactly one of"), "{e}");
    }
}
