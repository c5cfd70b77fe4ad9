//! Which program a replica runs: this harness's own replica (`harness replica`), or any program
//! that follows the replica contract (`docs/replica-contract.md`), started from a command
//! template, at the contract level it declares.
//!
//! The level says what the harness may expect to observe: a level-0 program is a process and
//! its lock row in pg_locks; level 1 adds `/metrics` (the gauge) and `/readyz`; level 2 adds the
//! `leader_work` rows of its leader-only work; level 3 adds the JSON-lines event stream on
//! stdout. A check that needs more than the program's level is not run, and says which level
//! would decide it.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{anyhow, bail};

pub use crate::level::{Feature, Level, Offer};

/// The placeholders a command template may hold, each replaced per replica (a literal brace is
/// written doubled: `{{`, `}}`).
pub const PLACEHOLDERS: [(&str, &str); 5] = [
    ("{name}", "the replica's name (also its application_name)"),
    ("{listen}", "the HTTP listen address, 127.0.0.1:PORT"),
    ("{port}", "the HTTP port alone"),
    ("{interval_ms}", "the check interval T in milliseconds"),
    (
        "{dsn}",
        "the DSN (prefer the PLEXSPHERE_DSN variable: a command line shows in ps)",
    ),
];

/// The environment variables every program is started with (the contract's names; the DSN's is
/// the spec's).
pub const ENV: [(&str, &str); 4] = [
    (
        "PLEXSPHERE_DSN",
        "the DSN, through the replica's own proxy (absent: no database)",
    ),
    (
        "REPLICA_NAME",
        "the replica's name: set it as application_name",
    ),
    ("REPLICA_HTTP", "the HTTP listen address, 127.0.0.1:PORT"),
    (
        "REPLICA_CHECK_INTERVAL_MS",
        "the check interval T in milliseconds",
    ),
];

/// A program given by a command template (`--replica-cmd`), at its declared level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// The template, split into words as a POSIX shell would (no shell runs it).
    pub argv: Vec<String>,
    /// What it lets the harness observe.
    pub level: Level,
    /// The opt-in features beyond the spec it declares (`--replica-features`).
    pub features: BTreeSet<Feature>,
    /// The folder it runs in (`None`: the harness's): a scenario file's own commands run in
    /// the file's folder, so their relative paths hold wherever the harness is started.
    pub dir: Option<PathBuf>,
}

impl Command {
    /// Parses `template` (split like a shell's words; every `{...}` must be a known
    /// placeholder).
    ///
    /// # Errors
    /// The template is empty, its quotes do not close, or it holds an unknown placeholder.
    pub fn parse(template: &str, level: Level) -> anyhow::Result<Command> {
        let argv =
            shell_words::split(template).map_err(|e| anyhow!("--replica-cmd {template:?}: {e}"))?;
        if argv.is_empty() {
            bail!("--replica-cmd is empty: give the program to start, e.g. \"python3 replica.py --listen {{listen}}\"");
        }
        for word in &argv {
            if let Some(unknown) = unknown_placeholder(word) {
                let known: Vec<&str> = PLACEHOLDERS.iter().map(|(p, _)| *p).collect();
                bail!(
                    "--replica-cmd: unknown placeholder {unknown} in {word:?}; known: {}",
                    known.join(", ")
                );
            }
        }
        Ok(Command {
            argv,
            level,
            features: BTreeSet::new(),
            dir: None,
        })
    }

    /// The same command, declaring `features`.
    pub fn with_features(self, features: impl IntoIterator<Item = Feature>) -> Command {
        Command {
            features: features.into_iter().collect(),
            ..self
        }
    }

    /// The same command, run in `dir`.
    pub fn in_dir(self, dir: impl Into<PathBuf>) -> Command {
        Command {
            dir: Some(dir.into()),
            ..self
        }
    }

    /// The command line for one replica, placeholders replaced.
    pub fn argv_for(&self, values: &Values<'_>) -> Vec<String> {
        self.argv.iter().map(|w| values.fill(w)).collect()
    }

    /// The template as given, for messages (it never holds the DSN itself).
    pub fn display(&self) -> String {
        shell_words::join(&self.argv)
    }
}

/// The first `{...}` in `word` that is not a known placeholder (`{{` and `}}` are literal
/// braces).
fn unknown_placeholder(word: &str) -> Option<String> {
    expand(word, |p| {
        PLACEHOLDERS.iter().any(|(k, _)| *k == p).then(String::new)
    })
    .err()
}

/// `word` with each placeholder replaced by `value(placeholder)`, read left to right as a
/// format string is: `{{` and `}}` are literal braces, a `{` with no closing `}` is kept.
/// `Err`: the first placeholder `value` does not know.
fn expand(word: &str, value: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(word.len());
    let mut rest = word;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            out.push_str(&tail[..1]);
            rest = &tail[2..];
        } else if let (true, Some(end)) = (tail.starts_with('{'), tail.find('}')) {
            let placeholder = &tail[..=end];
            out.push_str(&value(placeholder).ok_or_else(|| placeholder.to_owned())?);
            rest = &tail[end + 1..];
        } else {
            out.push_str(&tail[..1]);
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The values of the placeholders for one replica.
#[derive(Clone, Copy, Debug)]
pub struct Values<'a> {
    /// `{name}`.
    pub name: &'a str,
    /// `{listen}`.
    pub listen: &'a str,
    /// `{interval_ms}`.
    pub interval_ms: u128,
    /// `{dsn}` (empty without a database).
    pub dsn: Option<&'a str>,
}

impl Values<'_> {
    fn fill(&self, word: &str) -> String {
        let port = self.listen.rsplit(':').next().unwrap_or_default();
        let value = |p: &str| {
            Some(match p {
                "{name}" => self.name.to_owned(),
                "{listen}" => self.listen.to_owned(),
                "{port}" => port.to_owned(),
                "{interval_ms}" => self.interval_ms.to_string(),
                "{dsn}" => self.dsn.unwrap_or_default().to_owned(),
                _ => return None,
            })
        };
        // Every placeholder was checked when the template was parsed.
        expand(word, value).unwrap_or_else(|_| word.to_owned())
    }
}

/// The program every replica of a run starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Program {
    /// This harness's own replica: the binary, run as `binary replica --name ...` (level 3,
    /// with `/control` and the replica flags scenarios may pass).
    Ours(PathBuf),
    /// Any program, from a command template.
    External(Command),
}

impl Program {
    /// What the harness may observe of it.
    pub fn level(&self) -> Level {
        match self {
            Program::Ours(_) => Level::Events,
            Program::External(c) => c.level,
        }
    }

    /// Whether it is this harness's own replica (which takes the replica flags and `/control`).
    pub fn is_ours(&self) -> bool {
        matches!(self, Program::Ours(_))
    }

    /// What it offers the harness: its level, whether it is ours, its features (ours: every
    /// one).
    pub fn offer(&self) -> Offer {
        Offer {
            level: self.level(),
            ours: self.is_ours(),
            features: match self {
                Program::Ours(_) => Feature::ALL.into_iter().collect(),
                Program::External(c) => c.features.clone(),
            },
        }
    }

    /// Whether it has `feature` (the harness's own replica has every one).
    pub fn has(&self, feature: Feature) -> bool {
        self.offer().features.contains(&feature)
    }

    /// A name for messages: the binary's path, or the template.
    pub fn describe(&self) -> String {
        match self {
            Program::Ours(bin) => format!("{} replica", bin.display()),
            Program::External(c) => c.display(),
        }
    }
}

/// One implementation to compare (`harness run --impl`): a name and its program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Implementation {
    /// Its name: its column in the comparison and its folder under the output.
    pub name: String,
    /// What it runs.
    pub program: Program,
}

impl Implementation {
    /// Parses `ours` (the harness's own replica, `ours` its binary), `NAME=CMD` (a program at
    /// level 1), `NAME:LEVEL=CMD` or `NAME:LEVEL:FEATURES=CMD` (FEATURES: the opt-in features it
    /// has, comma-separated, as `--replica-features` takes them).
    ///
    /// # Errors
    /// A name that is not a plain word, a level that is not 0 to 3, an unknown feature, or a bad
    /// template.
    pub fn parse(text: &str, ours: &std::path::Path) -> anyhow::Result<Implementation> {
        if text == "ours" {
            return Ok(Implementation {
                name: "ours".into(),
                program: Program::Ours(ours.to_owned()),
            });
        }
        let Some((head, template)) = text.split_once('=') else {
            bail!("--impl {text:?}: expected `ours`, `NAME=CMD`, `NAME:LEVEL=CMD` or `NAME:LEVEL:FEATURES=CMD`");
        };
        let mut parts = head.splitn(3, ':');
        let name = parts.next().unwrap_or_default();
        let level = match parts.next() {
            Some(level) => level
                .parse::<Level>()
                .map_err(|e| anyhow!("--impl {name}: {e}"))?,
            None => Level::Metrics,
        };
        let features = (parts.next().into_iter())
            .flat_map(|f| f.split(','))
            .filter(|f| !f.is_empty())
            .map(|f| {
                f.parse::<Feature>()
                    .map_err(|e| anyhow!("--impl {name}: {e}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let plain = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if name.is_empty() || !name.chars().all(plain) || name == "ours" {
            bail!("--impl {name:?}: a name is letters, digits, - and _ (and not `ours`, the harness's own replica)");
        }
        Ok(Implementation {
            name: name.to_owned(),
            program: Program::External(Command::parse(template, level)?.with_features(features)),
        })
    }
}

/// Parses every `--impl` of a command line, in its order (see [`Implementation::parse`]).
///
/// # Errors
/// One does not parse, or two have one name (each is a column and a folder).
pub fn implementations(
    texts: &[String],
    ours: &std::path::Path,
) -> anyhow::Result<Vec<Implementation>> {
    let impls: Vec<Implementation> = (texts.iter())
        .map(|text| Implementation::parse(text, ours))
        .collect::<anyhow::Result<_>>()?;
    let mut names: Vec<&str> = impls.iter().map(|i| i.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        bail!("--impl {}: two implementations of one name", w[0]);
    }
    Ok(impls)
}

/// The flags that choose the replica program (`harness run`, `chaos` and `up`).
#[derive(Clone, Debug, clap::Args)]
pub struct ProgramArgs {
    /// Runs every replica as this program instead of the harness's own replica: a command
    /// line, split like a shell's words (no shell runs it), with placeholders {name}, {listen},
    /// {port}, {interval_ms} and {dsn}; the program also gets PLEXSPHERE_DSN, REPLICA_NAME,
    /// REPLICA_HTTP and REPLICA_CHECK_INTERVAL_MS. See docs/replica-contract.md.
    #[arg(long, value_name = "CMD")]
    pub replica_cmd: Option<String>,
    /// The contract level the program meets (0: process and pg_locks; 1: + /metrics and
    /// /readyz; 2: + leader_work rows; 3: + the event stream). Checks that need more are
    /// reported not-run with the level that would decide them.
    #[arg(long, value_name = "N", requires = "replica_cmd", default_value = "1")]
    pub replica_level: Level,
    /// The opt-in features beyond the spec the program has (`guard`: POOL-1's shared-session
    /// guard; `wake`: X-WAKE; `fence`: X-FENCE), comma-separated. A scenario that needs one the program lacks is
    /// reported not-run; one that turns a feature off says so in the program's environment.
    #[arg(
        long,
        value_name = "FEATURES",
        requires = "replica_cmd",
        value_delimiter = ','
    )]
    pub replica_features: Vec<Feature>,
}

impl Program {
    /// What it runs, for a report: the harness's own replica, or the template and its level.
    pub fn summary(&self) -> String {
        match self {
            Program::Ours(_) => "the harness's own replica, level 3".into(),
            Program::External(c) if c.features.is_empty() => {
                format!("{}, {}", c.display(), c.level)
            }
            Program::External(c) => {
                let f: Vec<&str> = c.features.iter().map(|f| f.name()).collect();
                format!("{}, {}, with {}", c.display(), c.level, f.join(", "))
            }
        }
    }
}

impl ProgramArgs {
    /// The program the flags choose: `--replica-cmd` at its level, else `ours` (the harness
    /// binary, run as `harness replica`).
    ///
    /// # Errors
    /// The command template is not valid (see [`Command::parse`]).
    pub fn program(&self, ours: PathBuf) -> anyhow::Result<Program> {
        match &self.replica_cmd {
            Some(template) => Ok(Program::External(
                Command::parse(template, self.replica_level)?
                    .with_features(self.replica_features.iter().copied()),
            )),
            None => Ok(Program::Ours(ours)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_is_split_like_shell_words_and_filled_per_replica() {
        let c = Command::parse(
            "python3 'my replica.py' --listen {listen} --id={name} --t {interval_ms}",
            Level::Metrics,
        )
        .unwrap();
        let values = Values {
            name: "r2",
            listen: "127.0.0.1:4100",
            interval_ms: 200,
            dsn: Some("postgres://u:secret@h/db"),
        };
        assert_eq!(
            c.argv_for(&values),
            [
                "python3",
                "my replica.py",
                "--listen",
                "127.0.0.1:4100",
                "--id=r2",
                "--t",
                "200"
            ]
        );
        assert!(!c.display().contains("secret"));
        let port = Command::parse("x --port {port} {dsn}", Level::Process).unwrap();
        assert_eq!(port.argv_for(&values)[2], "4100");
        assert_eq!(port.argv_for(&values)[3], "postgres://u:secret@h/db");
    }

    #[test]
    fn bad_templates_are_refused_with_what_was_expected() {
        let e = Command::parse("", Level::Process).unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
        let e = Command::parse("x 'open", Level::Process)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--replica-cmd"), "{e}");
        let e = Command::parse("x --addr {addr}", Level::Process)
            .unwrap_err()
            .to_string();
        assert!(e.contains("{addr}") && e.contains("{listen}"), "{e}");
        // A brace that is not a placeholder's (JSON in an argument) is left alone when it has no
        // closing brace; a closed one must be known.
        assert!(Command::parse("x {", Level::Process).is_ok());
        // Doubled braces are literal ones.
        let json = Command::parse("x '{{\"a\": {port}}}'", Level::Process).unwrap();
        let values = Values {
            name: "r1",
            listen: "127.0.0.1:9",
            interval_ms: 1,
            dsn: None,
        };
        assert_eq!(json.argv_for(&values), ["x", "{\"a\": 9}"]);
    }

    #[test]
    fn levels_parse_from_their_numbers_only() {
        assert_eq!("2".parse::<Level>(), Ok(Level::Work));
        assert!("4".parse::<Level>().unwrap_err().contains("0, 1, 2 and 3"));
        assert!("two".parse::<Level>().is_err());
        assert!(Level::Process < Level::Events);
    }
}
