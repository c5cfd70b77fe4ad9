//! How each clause is decided, and from which contract level up: the checks each scenario file
//! runs, each with the level its observations need (found by deciding the scenario's checks on
//! an empty history at level 0, where every check above it says what it needs), and the
//! elector's own tests, which run in-process on the Rust crate and decide nothing about another
//! program. `harness contract` prints the table; `docs/replica-contract.md` carries it.

use std::collections::BTreeMap;

use std::time::Duration;

use crate::check::{self, Bounds, Facts, WorkRow};
use crate::clauses;
use crate::level::{Feature, Level, Need};
use crate::scenario::model::{DbPath, Scenario};
use crate::timeline::Marks;

/// One check of one scenario that decides a clause, and what it needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decider {
    /// The scenario.
    pub scenario: String,
    /// The check's name.
    pub check: String,
    /// What the program must offer for it to run.
    pub need: Need,
    /// The feature beyond the spec its scenario turns on, which the program must have too.
    pub feature: Option<Feature>,
}

/// How one clause is decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClauseWays {
    /// The clause ID.
    pub id: String,
    /// The scenario checks that decide it.
    pub deciders: Vec<Decider>,
    /// Whether an elector test decides it (in-process, the Rust crate only).
    pub in_process: bool,
}

impl ClauseWays {
    /// The least a program must offer for a scenario to decide the clause: the lowest level,
    /// else the harness's own replica; `None` when no scenario decides it.
    pub fn lowest(&self) -> Option<Need> {
        self.easiest().map(|d| d.need)
    }

    /// The decider that asks least of a program: the lowest need, one without a feature before
    /// one with.
    pub fn easiest(&self) -> Option<&Decider> {
        (self.deciders.iter()).min_by_key(|d| (d.need.rank(), d.feature.is_some()))
    }
}

/// Every clause of the spec, in its order, with the checks of `scenarios` that decide it and
/// whether an elector test does.
pub fn table(scenarios: &[Scenario]) -> Vec<ClauseWays> {
    let mut by_clause: BTreeMap<String, Vec<Decider>> = BTreeMap::new();
    for s in scenarios {
        for d in deciders(s) {
            for id in d.1 {
                by_clause.entry(id).or_default().push(d.0.clone());
            }
        }
    }
    let tested: Vec<String> = (crate::in_process::elector_test_clauses().into_iter())
        .flat_map(|(_, ids)| ids)
        .collect();
    clauses::all()
        .into_iter()
        .map(|c| ClauseWays {
            deciders: by_clause.remove(&c.id).unwrap_or_default(),
            in_process: tested.contains(&c.id),
            id: c.id,
        })
        .collect()
}

/// Each check `s` runs, with the clauses it decides: what it needs is the more of its own need
/// and the scenario's (its steps may need the harness's own replica, or readiness).
fn deciders(s: &Scenario) -> Vec<(Decider, Vec<String>)> {
    let (marks, logs) = (Marks::new(), BTreeMap::new());
    // Leader-only work is checked wherever a replica with a database writes rows.
    let row = WorkRow {
        loop_name: "work".into(),
        replica: String::new(),
        term: 0,
        t_ms: 0.0,
        fence: None,
    };
    let writes = s.replicas.values().any(|d| d.path != DbPath::None);
    let rows = if writes { vec![row] } else { Vec::new() };
    let facts = Facts {
        entries: &[],
        rows: &rows,
        work_read: true,
        marks: &marks,
        logs: &logs,
        bounds: Bounds {
            t: Duration::from_millis(200),
            tick: Duration::from_millis(200),
            sample: Duration::from_millis(20),
            slack: Duration::from_millis(50),
        },
        pooled: &crate::check::expect::NONE_POOLED,
        wire: &s.wire_setup(true),
    };
    let checks = check::scenario(s.invariants, &s.expect, &[], &facts, Level::Process);
    let scenario_need = s.needs();
    checks
        .into_iter()
        .map(|c| {
            let own = c.needs.unwrap_or(Need::Level(Level::Process));
            let (need, feature) = match scenario_need {
                Some(Need::Feature(f)) => (own, Some(f)),
                Some(n) if n.rank() > own.rank() => (n, None),
                _ => (own, None),
            };
            let d = Decider {
                scenario: s.name.clone(),
                check: c.name,
                need,
                feature,
            };
            (d, c.clauses)
        })
        .collect()
}

/// The table as Markdown: a row per clause with the lowest level that decides it, the kinds of
/// check that do (each with its level), and whether the elector's tests decide it in-process.
pub fn markdown(rows: &[ClauseWays]) -> String {
    let mut md = String::from(
        "| clause | decided from outside from | by (check: level) | in-process (elector tests) |\n\
         |---|---|---|---|\n",
    );
    for r in rows {
        let lowest = r.easiest().map_or("—".to_owned(), |d| {
            let need = match d.need {
                Need::Level(l) => l.to_string(),
                other => other.short(),
            };
            match d.feature {
                Some(f) => format!("{need} + {f}"),
                None => need,
            }
        });
        let mut kinds: BTreeMap<String, Need> = BTreeMap::new();
        for d in &r.deciders {
            let kind = check_kind(&d.check);
            let least = kinds.entry(kind).or_insert(d.need);
            if d.need.rank() < least.rank() {
                *least = d.need;
            }
        }
        let by: Vec<String> = (kinds.iter())
            .map(|(k, n)| match n {
                Need::Level(l) => format!("{k}: {}", l.number()),
                _ => format!("{k}: own"),
            })
            .collect();
        let by = if by.is_empty() {
            "—".to_owned()
        } else {
            by.join("; ")
        };
        let tested = if r.in_process { "yes" } else { "—" };
        md.push_str(&format!("| {} | {lowest} | {by} | {tested} |\n", r.id));
    }
    md
}

/// A check's name without the scenario's step names, e.g. `demoted after` for `demoted by cut
/// after cut`.
fn check_kind(name: &str) -> String {
    let name = name.split(" by ").next().unwrap_or(name);
    let name = name.split(" after ").next().unwrap_or(name);
    name.split(" of ").next().unwrap_or(name).trim().to_owned()
}

/// The flags of `harness contract`.
#[derive(Debug, clap::Args)]
pub struct ContractArgs {
    /// The folder of scenario files whose checks decide the clauses.
    #[arg(long, default_value_os_t = crate::scenario::run::default_dir())]
    pub scenarios_dir: std::path::PathBuf,
}

/// `harness contract`: prints, as Markdown, from which contract level each clause is decided
/// and by which checks (the table of `docs/replica-contract.md`).
///
/// # Errors
/// The scenario files cannot be read or are not valid.
pub fn print(args: &ContractArgs) -> anyhow::Result<std::process::ExitCode> {
    let scenarios = crate::suite::load_from(&[], &args.scenarios_dir)?;
    print!("{}", markdown(&table(&scenarios)));
    Ok(std::process::ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contract's page carries the table as `harness contract` prints it from today's
    /// scenario files: a scenario or a check that changes what a level decides changes the page.
    #[test]
    fn the_contract_page_shows_what_each_level_decides_today() {
        let page = include_str!("../../docs/replica-contract.md");
        let (begin, end) = (
            "<!-- harness contract: begin -->\n",
            "<!-- harness contract: end -->",
        );
        let start = page.find(begin).expect("the begin marker") + begin.len();
        let stop = page.find(end).expect("the end marker");
        let scenarios =
            crate::suite::load_from(&[], &crate::scenario::run::default_dir()).expect("scenarios");
        let want = markdown(&table(&scenarios));
        assert!(
            page[start..stop] == want,
            "docs/replica-contract.md is out of date; its table is now:\n{want}"
        );
    }

    #[test]
    fn a_clause_is_decided_from_the_lowest_level_any_of_its_checks_needs() {
        let ways = ClauseWays {
            id: "X".into(),
            deciders: [
                Need::OwnReplica,
                Need::Level(Level::Events),
                Need::Level(Level::Metrics),
            ]
            .map(|need| Decider {
                scenario: "s".into(),
                check: "c".into(),
                need,
                feature: None,
            })
            .to_vec(),
            in_process: false,
        };
        assert_eq!(ways.lowest(), Some(Need::Level(Level::Metrics)));
        assert_eq!(check_kind("demoted by cut after cut"), "demoted");
        assert_eq!(check_kind("gauge sum"), "gauge sum");
    }
}
