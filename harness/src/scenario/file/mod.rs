//! The scenario file: TOML a person can read and write, read into the typed
//! [model](super::model) and validated once, before anything starts, and written back in the
//! same syntax ([`Scenario::to_toml`]).
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
//! replicas, fault verbs, events or clause IDs, a key on a step or expectation it does not
//! belong to.

#[cfg(test)]
mod fuzz;
mod read;
#[cfg(test)]
mod round_trip;
mod word;
mod write;

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::model::{ReplicaDecl, Scenario, Step, WaitFor};
use crate::check::expect::Awaited;
use crate::check::Invariants;
use crate::fault::Verb;
use crate::snapshot::Story;
use crate::span::Span;
use word::Word;

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

/// What is wrong, and where in the text (`None`: the whole file).
type Located = (Option<Range<usize>>, String);

/// The whole file, as written.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    description: String,
    clauses: Vec<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    t: Option<Span>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tick: Option<Span>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    default_interval: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(default, skip_serializing_if = "is_all")]
    invariants: Invariants,
    #[serde(default, skip_serializing_if = "is_full")]
    story: Story,
    replicas: Spanned<BTreeMap<Spanned<String>, ReplicaDecl>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    step: Vec<Spanned<StepToml>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    expect: Vec<Spanned<ExpectToml>>,
}

fn is_all(i: &Invariants) -> bool {
    *i == Invariants::All
}

fn is_full(s: &Story) -> bool {
    *s == Story::Full
}

/// One step, as written: exactly one action key, and the keys that go with it.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct StepToml {
    #[serde(skip_serializing_if = "Option::is_none")]
    sleep: Option<Span>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wait_for: Option<Word<WaitFor>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fault: Option<Word<Verb>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    heal: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    control: Option<Spanned<ControlToml>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sql: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hold: Option<Span>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    latency: Option<Span>,
    #[serde(skip_serializing_if = "Option::is_none")]
    jitter: Option<Span>,
    #[serde(skip_serializing_if = "Option::is_none")]
    within: Option<Span>,
    #[serde(rename = "as", skip_serializing_if = "Option::is_none")]
    name: Option<Spanned<String>>,
}

/// A `control` table: one of `loop` and `worker`, and a `mode`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct ControlToml {
    #[serde(rename = "loop", skip_serializing_if = "Option::is_none")]
    loop_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker: Option<String>,
    mode: String,
}

/// One expectation, as written: exactly one kind key, and the keys that go with it.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct ExpectToml {
    clause: Spanned<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    event: Option<Word<Awaited>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gauge_sum_reaches: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    granted_at_once: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fence_tokens_rise: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pool_recycled: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    handover: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lock_rows_at_most: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    work_rows: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fence_rejects: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    readyz: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    readyz_says: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    log: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replica: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    after: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    within: Option<Span>,
    #[serde(skip_serializing_if = "Option::is_none")]
    not_before: Option<Span>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    absent: bool,
}

/// One step as a person types it at a running `harness up` (`harness fault`, `harness heal`):
/// the keys of a file's `[[step]]` that a fault or a heal takes, as data. [`Scenario::read_step`]
/// reads it with a file's checks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TypedStep {
    /// `fault = "…"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Verb>,
    /// `heal = "…"`: the `as` name of an earlier fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heal: Option<String>,
    /// `target = "…"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `latency = "…"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<Span>,
    /// `jitter = "…"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<Span>,
    /// `as = "…"`.
    #[serde(default, rename = "as", skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl TypedStep {
    fn raw(&self) -> StepToml {
        let spanned = |s: &Option<String>| s.clone().map(|v| Spanned::new(0..0, v));
        StepToml {
            fault: self.fault.map(Word),
            heal: spanned(&self.heal),
            target: spanned(&self.target),
            latency: self.latency,
            jitter: self.jitter,
            name: spanned(&self.name),
            ..StepToml::default()
        }
    }
}

/// The fault verbs as a file names them, in their order.
pub fn verbs() -> &'static [&'static str] {
    word::words::<Verb>()
}

/// Reads a fault verb as a file names it (`partition`, `kill-backend`, ...).
///
/// # Errors
/// An unknown verb; the message lists the verbs there are.
pub fn verb(word: &str) -> Result<Verb, String> {
    word::parse_as("fault", word)
}

impl Scenario {
    /// Reads `step` as the step after this scenario's steps, with the checks and messages a
    /// file's `[[step]]` gets (an unknown replica or name, a verb on the wrong target, a heal
    /// of no earlier fault, a latency without its delay).
    ///
    /// # Errors
    /// What a file with this step at its end would be refused for.
    pub fn read_step(&self, step: &TypedStep) -> Result<Step, String> {
        read::next_step(self, step.raw())
    }

    /// Reads and validates `path`.
    ///
    /// # Errors
    /// The file cannot be read, or is not a valid scenario (with the line of the mistake).
    pub fn load(path: &Path) -> Result<Scenario, FileError> {
        let bytes = std::fs::read(path).map_err(|e| FileError {
            file: path.display().to_string(),
            line: 0,
            message: format!("cannot read: {e}"),
        })?;
        Scenario::parse_bytes(path, &bytes)
    }

    /// Parses and validates `bytes` as the content of `path`.
    ///
    /// # Errors
    /// The bytes are not UTF-8 text (the line of the first that is not), or not a valid
    /// scenario (with the line of the mistake).
    pub fn parse_bytes(path: &Path, bytes: &[u8]) -> Result<Scenario, FileError> {
        match std::str::from_utf8(bytes) {
            Ok(text) => Scenario::parse(path, text),
            Err(e) => Err(FileError {
                file: path.display().to_string(),
                line: bytes[..e.valid_up_to()]
                    .iter()
                    .filter(|b| **b == b'\n')
                    .count()
                    + 1,
                message: format!("not UTF-8 text: {e}"),
            }),
        }
    }

    /// Parses and validates `text` as the content of `path`.
    ///
    /// # Errors
    /// The text is not a valid scenario (with the line of the mistake).
    pub fn parse(path: &Path, text: &str) -> Result<Scenario, FileError> {
        let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
        let error = |(span, message): Located| FileError {
            file: path.display().to_string(),
            line: span.map_or(0, |s| line_of(s.start)),
            message,
        };
        let raw: FileToml =
            toml::from_str(text).map_err(|e| error((e.span(), e.message().to_owned())))?;
        read::scenario(raw, path).map_err(error)
    }

    /// The scenario as a file, in the syntax [`Scenario::parse`] reads.
    pub fn to_toml(&self) -> String {
        let text = toml::to_string(&write::file(self)).expect("a scenario serialises");
        write::inline_tables(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::level::Level;
    use crate::replica::program::Program;
    use crate::scenario::model::{DbPath, Span};
    use std::time::Duration;

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
        assert_eq!(s.replicas["r2"].path, DbPath::Direct);
        assert_eq!(s.steps.len(), 4);
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
    fn start_after_is_a_span_and_a_bad_one_names_its_line() {
        let with = |decl: &str| GOOD.replace("r2 = {}", &format!("r2 = {decl}"));
        let s = parse(&with(r#"{ start_after = "0.5T" }"#)).unwrap();
        assert_eq!(s.replicas["r2"].start_after, Some(Span::T(0.5)));
        assert_eq!(s.replicas["r1"].start_after, None);
        let e = parse(&with(r#"{ start_after = "soon" }"#)).unwrap_err();
        assert_eq!(e.line, 7, "{e}");
        assert!(e.message.contains("bad duration \"soon\""), "{e}");
    }

    /// `default_interval`: the replicas are told 0 and the scenario runs at the page's 5 s,
    /// whatever the run's T; with a `t` of its own it is refused.
    #[test]
    fn default_interval_tells_zero_and_runs_at_five_seconds() {
        let s = parse(&format!("default_interval = true\n{GOOD}")).unwrap();
        let run_t = std::time::Duration::from_millis(200);
        assert_eq!(s.interval(run_t), std::time::Duration::from_secs(5));
        assert_eq!(
            s.told_interval(s.interval(run_t)),
            std::time::Duration::ZERO
        );
        assert!(s.wire_setup(true).default_interval);
        let plain = parse(GOOD).unwrap();
        assert_eq!(plain.told_interval(run_t), run_t);
        let e = parse(&format!("default_interval = true\nt = \"1s\"\n{GOOD}")).unwrap_err();
        assert!(e.message.contains("leave t out"), "{e}");
    }

    /// `postgres_from`: the scenario's need is the newest any replica declares.
    #[test]
    fn postgres_from_is_the_newest_a_replica_needs() {
        let with = |decls: &str| GOOD.replace("r2 = {}", decls);
        let s = parse(&with("r2 = { postgres_from = 14 }")).unwrap();
        assert_eq!(s.postgres_from(), Some(("r2", 14)));
        assert_eq!(parse(GOOD).unwrap().postgres_from(), None);
        let e = parse(&with(r#"r2 = { postgres_from = "14" }"#)).unwrap_err();
        assert_eq!(e.line, 7, "{e}");
    }

    #[test]
    fn a_replica_of_its_own_program_is_checked_and_runs_in_the_files_folder() {
        let own = |decl: &str| GOOD.replace("r2 = {}", &format!("r2 = {decl}"));
        let s = parse(&own(
            r#"{ cmd = "python3 ../r.py --listen {listen}", level = 0 }"#,
        ))
        .unwrap();
        let run = Program::Ours("harness".into());
        let programs = s.programs(&run).unwrap();
        assert_eq!(programs["r1"], run);
        let Program::External(c) = &programs["r2"] else {
            panic!("r2 runs its own cmd: {programs:?}");
        };
        assert_eq!(c.level, Level::Process);
        assert_eq!(c.dir.as_deref(), Some(Path::new("scenarios")));
        assert_eq!(s.observes(&run), crate::level::Offer::plain(Level::Process));
        let level_1 = parse(&own(r#"{ cmd = "./r" }"#)).unwrap();
        assert_eq!(level_1.observes(&run).level, Level::Metrics);
        for (decl, needle) in [
            (r#"{ cmd = "./r {port" }"#, ""),
            (
                r#"{ cmd = "./r {colour}" }"#,
                "unknown placeholder {colour}",
            ),
            (r#"{ cmd = "'./r" }"#, "cmd:"),
            (
                r#"{ cmd = "./r", args = ["--verify-lock"] }"#,
                "takes its flags in the cmd",
            ),
            (r#"{ level = 1 }"#, "give the cmd"),
            (
                r#"{ cmd = "./r", level = 7 }"#,
                "the contract's levels are 0, 1, 2 and 3",
            ),
        ] {
            let parsed = parse(&own(decl));
            if needle.is_empty() {
                // A `{` with no closing brace is kept as it is.
                assert!(parsed.is_ok(), "{decl}");
                continue;
            }
            let e = parsed.unwrap_err();
            assert_eq!(e.line, 7, "{e}");
            assert!(e.message.contains(needle), "{decl}: {e}");
        }
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
