//! The README and the pages under `docs/` say what to type: every relative link there leads to a
//! file (and a heading) that exists, and every `harness` command in their code blocks, and each
//! `ci/conformance.sh` one (whose arguments go to `harness run`), parses with the harness's own
//! command line and passes the checks it makes before anything starts (scenario names included).
//!
//! GitHub's heading anchors are computed here by hand (a few lines): no maintained crate gives
//! GitHub's exact rule.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::Parser as _;
use harness::cli::{Cli, Command};
use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

use super::repo;

/// The pages a user reads: the README, the elector's, and every page under `docs/`.
fn pages() -> Vec<PathBuf> {
    let root = repo();
    let mut pages = vec![root.join("README.md"), root.join("elector/README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("reading docs/")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

fn read(page: &Path) -> String {
    std::fs::read_to_string(page).unwrap_or_else(|e| panic!("reading {}: {e}", page.display()))
}

/// GitHub's anchor of a heading: lower case, every character but letters, digits, `-`, `_` and
/// spaces dropped, spaces turned into `-`; a repeated anchor gets `-1`, `-2`, ...
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut heading: Option<String> = None;
    for event in Parser::new(markdown) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let Some(h) = heading.take() else { continue };
                let slug: String = (h.to_lowercase().chars())
                    .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
                    .map(|c| if c == ' ' { '-' } else { c })
                    .collect();
                let mut unique = slug.clone();
                let mut n = 0;
                while out.contains(&unique) {
                    n += 1;
                    unique = format!("{slug}-{n}");
                }
                out.insert(unique);
            }
            _ => {}
        }
    }
    out
}

/// Why each relative link of `page` is broken (none when all lead somewhere).
fn broken_links(page: &Path) -> Vec<String> {
    let text = read(page);
    let dir = page.parent().expect("a page's folder");
    let mut broken = Vec::new();
    for event in Parser::new(&text) {
        let (Event::Start(Tag::Link { dest_url, .. }) | Event::Start(Tag::Image { dest_url, .. })) =
            event
        else {
            continue;
        };
        if dest_url.contains("://") || dest_url.starts_with("mailto:") {
            continue;
        }
        let (file, anchor) = match dest_url.split_once('#') {
            Some((f, a)) => (f, Some(a)),
            None => (dest_url.as_ref(), None),
        };
        let target = if file.is_empty() {
            page.to_path_buf()
        } else {
            dir.join(file)
        };
        if !target.exists() {
            broken.push(format!("{dest_url}: no {}", target.display()));
            continue;
        }
        if let Some(anchor) = anchor {
            if !anchors(&read(&target)).contains(anchor) {
                broken.push(format!("{dest_url}: no heading with that anchor"));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_of_the_readme_and_docs_leads_somewhere() {
    let broken: Vec<String> = pages()
        .iter()
        .flat_map(|p| {
            broken_links(p)
                .into_iter()
                .map(move |b| format!("{}: {b}", p.display()))
        })
        .collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The commands of `page`'s shell code blocks, a line each (a line ending in `\` joined to the
/// next, `$ ` prompts dropped); none from blocks of another language.
fn shell_commands(page: &Path) -> Vec<String> {
    let text = read(page);
    let mut commands = Vec::new();
    let mut in_shell = false;
    for event in Parser::new(&text) {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(lang))) => {
                in_shell = matches!(lang.as_ref(), "sh" | "bash" | "shell" | "console");
            }
            Event::End(TagEnd::CodeBlock) => in_shell = false,
            Event::Text(t) if in_shell => {
                let joined = t.replace("\\\n", " ");
                commands.extend(
                    (joined.lines())
                        .map(|l| l.trim().trim_start_matches("$ ").to_string())
                        .filter(|l| !l.is_empty() && !l.starts_with('#')),
                );
            }
            _ => {}
        }
    }
    commands
}

/// The harness command line `words` stand for, if they run the harness: `harness ...`,
/// `target/{release,debug}/harness ...`, or `ci/conformance.sh ...` (= `harness run ...`).
fn as_harness(words: &[String]) -> Option<Vec<String>> {
    let program = words.first()?;
    let rest = words[1..].iter().cloned();
    if program == "ci/conformance.sh" {
        return Some(
            ["harness", "run"]
                .map(String::from)
                .into_iter()
                .chain(rest)
                .collect(),
        );
    }
    (program == "harness" || program.ends_with("/harness"))
        .then(|| std::iter::once("harness".to_string()).chain(rest).collect())
}

/// Parses a harness command line and makes the checks the harness makes before it starts
/// anything: the rules between flags, and `run`'s scenario files, read and validated.
fn check_harness(words: &[String]) -> Result<(), String> {
    let cli = match Cli::try_parse_from(words) {
        Ok(cli) => cli,
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => return Ok(()),
        Err(e) => return Err(e.to_string()),
    };
    let checked = match cli.command {
        Command::Run(mut args) => {
            // A file under `target/` is written by an earlier command (`harness up`, `harness
            // chaos`): it cannot be read before that runs. Other paths are the repository's.
            let written = args.scenarios.iter().any(|s| s.starts_with("target/"));
            args.scenarios.retain(|s| !s.starts_with("target/"));
            for s in args.scenarios.iter_mut().filter(|s| s.contains('/')) {
                *s = repo().join(&*s).display().to_string();
            }
            args.validate().and_then(|()| {
                if written && args.scenarios.is_empty() {
                    Ok(())
                } else {
                    harness::suite::load(&args).map(drop)
                }
            })
        }
        Command::Chaos(args) => args.validate(),
        Command::Up(args) => args.validate(),
        _ => Ok(()),
    };
    checked.map_err(|e| format!("{e:#}"))
}

/// Why the command `line` would fail as written (nothing when it would not): each `&&`-joined
/// part that runs the harness must parse and pass its checks; a script or file it names under
/// `ci/`, `replicas/` or `scenarios/` must exist.
fn command_problems(line: &str) -> Vec<String> {
    let words = match shell_words::split(line) {
        Ok(w) => w,
        Err(e) => return vec![format!("`{line}`: not shell words: {e}")],
    };
    let words: Vec<String> = words
        .into_iter()
        .take_while(|w| !w.starts_with('#'))
        .collect();
    let mut problems = Vec::new();
    for part in words.split(|w| w == "&&" || w == ";") {
        // `VAR=value command ...`: the command starts after the assignments.
        let start = part
            .iter()
            .position(|w| !w.split_once('=').is_some_and(|(k, _)| is_env_name(k)));
        let Some(part) = start.map(|s| &part[s..]) else {
            continue;
        };
        let named = part.iter().flat_map(|w| w.split([' ', '='])).filter(|w| {
            ["ci/", "replicas/", "scenarios/"]
                .iter()
                .any(|d| w.starts_with(d))
        });
        for file in named {
            if !repo().join(file).exists() {
                problems.push(format!("`{line}`: {file} does not exist"));
            }
        }
        if let Some(harness) = as_harness(part) {
            if let Err(e) = check_harness(&harness) {
                problems.push(format!("`{line}`: {e}"));
            }
            problems.extend(example_levels(&harness).map(|p| format!("`{line}`: {p}")));
        } else {
            problems.extend(script_flags(part).map(|p| format!("`{line}`: {p}")));
        }
    }
    problems
}

/// The contract level each example program meets (`replicas/<name>/replica.py`): a command that
/// runs one at another level judges it on less than it offers (or more).
const EXAMPLE_LEVELS: &[(&str, u8)] = &[
    ("replicas/python/replica.py", 2),
    ("replicas/naive/replica.py", 1),
    ("target/replicas/go/replica", 2),
];

/// Where a harness command runs an example program at a level other than its own: `--impl
/// NAME=CMD` (level 1), `NAME:LEVEL=CMD` or `NAME:LEVEL:FEATURES=CMD`, and `--replica-cmd CMD` with `--replica-level N`
/// (default 1).
fn example_levels(words: &[String]) -> impl Iterator<Item = String> + '_ {
    let level_flag = (words.iter())
        .position(|w| w == "--replica-level")
        .and_then(|i| words.get(i + 1)?.parse::<u8>().ok())
        .unwrap_or(1);
    let runs = |cmd: &str| {
        EXAMPLE_LEVELS
            .iter()
            .find(|(p, _)| cmd.contains(p))
            .copied()
    };
    (words.iter().zip(words.iter().skip(1))).filter_map(move |(flag, value)| {
        let (cmd, level) = match flag.as_str() {
            "--impl" => {
                let (name, cmd) = value.split_once('=')?;
                let level = name.split(':').nth(1).map_or(Some(1), |l| l.parse().ok())?;
                (cmd, level)
            }
            "--replica-cmd" => (value.as_str(), level_flag),
            _ => return None,
        };
        let (program, own) = runs(cmd)?;
        (level != own).then(|| format!("{program} meets level {own}, but runs at level {level}"))
    })
}

/// The flags given to a script under `ci/` (other than `ci/conformance.sh`, whose flags are
/// the harness's) that neither it nor its Python half (`ci/<name>.py`) mentions.
fn script_flags(part: &[String]) -> impl Iterator<Item = String> + '_ {
    let script = (part.first())
        .filter(|s| s.starts_with("ci/") && s.ends_with(".sh"))
        .filter(|s| *s != "ci/conformance.sh");
    let text = script.map(|s| {
        let py = s.trim_end_matches(".sh").replace('-', "_") + ".py";
        let read = |p: &str| std::fs::read_to_string(repo().join(p)).unwrap_or_default();
        read(s) + &read(&py)
    });
    (part.iter().skip(1))
        .filter(|w| w.starts_with("--"))
        .filter_map(move |w| {
            let text = text.as_ref()?;
            let flag = w.split('=').next().unwrap_or(w);
            (!text.contains(flag)).then(|| format!("{} has no flag {flag}", part[0]))
        })
}

fn is_env_name(word: &str) -> bool {
    !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

#[test]
fn every_harness_command_in_the_readme_and_docs_parses_and_passes_its_checks() {
    let mut problems = Vec::new();
    let mut harness_commands = 0;
    for page in pages() {
        for line in shell_commands(&page) {
            let words = shell_words::split(&line).unwrap_or_default();
            harness_commands +=
                usize::from(words.split(|w| w == "&&").any(|p| as_harness(p).is_some()));
            problems.extend(
                command_problems(&line)
                    .into_iter()
                    .map(|p| format!("{}: {p}", page.display())),
            );
        }
    }
    assert!(
        problems.is_empty(),
        "commands that fail as written:\n{}",
        problems.join("\n")
    );
    // The README and docs show the harness at work in many places; finding none means this
    // test no longer reads them.
    assert!(
        harness_commands >= 10,
        "only {harness_commands} harness command(s) found"
    );
}

/// The checks above catch what they are for: a flag the harness does not have, a bad value, a
/// scenario that does not exist, a missing script, a broken link and anchor.
#[test]
fn the_checks_fail_on_what_they_are_for() {
    for bad in [
        "target/release/harness run --no-such-flag",
        "target/release/harness run --t 5",
        "ci/conformance.sh no-such-scenario --seed 7",
        "target/release/harness run --slack 300ms --t 200ms",
        "ci/no-such-script.sh",
        "target/release/harness run scenarios/no-such-file.toml",
        "FOO=1 target/debug/harness chaos --duration 5",
        "target/debug/harness up --replicas 11",
        "target/release/harness run --impl 'python=python3 replicas/python/replica.py'",
        "target/release/harness run --replica-cmd 'python3 replicas/python/replica.py'",
        "ci/build-images.sh --no-such-flag",
    ] {
        assert!(!command_problems(bad).is_empty(), "`{bad}` was accepted");
    }
    for good in [
        "ci/conformance.sh leader-partition --t 250ms --seed 7",
        "target/release/harness run scenarios/leader-partition.toml",
        "target/release/harness run target/up/incident.toml",
        "target/release/harness run --impl 'python:2=python3 replicas/python/replica.py'",
        "target/release/harness run --impl 'naive=python3 replicas/naive/replica.py'",
        "ci/build-images.sh --pg 13,15,17",
    ] {
        let problems = command_problems(good);
        assert!(problems.is_empty(), "`{good}`: {problems:?}");
    }

    let dir = super::scratch("docs-links");
    let page = dir.join("page.md");
    std::fs::write(
        &page,
        "# A heading\n[ok](#a-heading) [bad](#nothing) [gone](missing.md)\n",
    )
    .expect("writing a page");
    let broken = broken_links(&page);
    assert_eq!(broken.len(), 2, "{broken:?}");
}
