//! Shrinking a chaos seed that found a violation: the smallest schedule that still violates the
//! same clause, by delta debugging (Zeller's ddmin) over its rounds, then over the second
//! strikes of the rounds left, each try a fresh run on a fresh topology, within a budget of
//! tries. The result is written beside the seed's schedule as `chaos-<seed>-shrunk.toml`, its
//! description saying what it was shrunk from and in how many of [`REPLAYS`] fresh runs it
//! violated the clause again: a try that violates once is kept, and a violation that needs an
//! interleaving (a write that lands after a heal, say) is not met on every run.
//!
//! ddmin is written here (40 lines): the property-based testers' shrinkers (proptest's value
//! trees) shrink values they generate themselves and run each try synchronously in process; a
//! try here is an async run of real servers and processes that takes seconds, drawn as parts of
//! a schedule that already exists, under a budget.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::ops::AsyncFnMut;
use std::path::PathBuf;

use anyhow::Context as _;
use tokio::time::Instant;

use super::schedule::{self, Drawn, Part};
use super::{run_scenario, SeedRun};
use crate::check::Check;
use crate::scenario::model::Scenario;
use crate::scenario::run::RunOptions;

/// What a violation is, for "the same clause": its clause IDs, or its name when it names none
/// (a step that failed, something left after the run).
fn marks_of(c: &Check) -> Vec<String> {
    if c.clauses.is_empty() {
        vec![c.name.clone()]
    } else {
        c.clauses.clone()
    }
}

/// What a shrink found.
#[derive(Debug)]
pub struct Shrunk {
    /// The shrunk schedule's file.
    pub file: PathBuf,
    /// Rounds before and after.
    pub rounds: (usize, usize),
    /// Strikes before and after.
    pub strikes: (usize, usize),
    /// The tries it ran (each a fresh run).
    pub tries: usize,
    /// The seconds the shrink took.
    pub seconds: f64,
    /// The clauses (or check names) it still violates.
    pub violates: Vec<String>,
    /// Of [`REPLAYS`] fresh runs of the result, how many violated one of them again: a
    /// violation that needs an interleaving is not met on every run.
    pub reproduced: usize,
}

/// How many times the shrunk schedule is run again at the end, to say how often it reproduces.
pub const REPLAYS: usize = 3;

impl std::fmt::Display for Shrunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "from {} round(s) and {} strike(s) to {} round(s) and {} strike(s) in {} tries \
             ({:.0} s); it still violates {}, again in {} of {REPLAYS} replays",
            self.rounds.0,
            self.strikes.0,
            self.rounds.1,
            self.strikes.1,
            self.tries,
            self.seconds,
            self.violates.join(", "),
            self.reproduced
        )
    }
}

/// Shrinks `run`'s schedule (`drawn`) to the smallest one that still violates one of the
/// clauses it violated, in at most `budget` tries; writes it beside the seed's schedule.
///
/// # Errors
/// A try's topology could not start, or the file could not be written.
pub async fn shrink(
    drawn: &Drawn,
    run: &SeedRun,
    opts: &RunOptions,
    budget: usize,
) -> anyhow::Result<Shrunk> {
    let began = Instant::now();
    let target: BTreeSet<String> = run.violations().flat_map(marks_of).collect();
    let name = format!("{}-shrunk", drawn.scenario.name);
    let tries = Cell::new(0);
    let violates = RefCell::new(target.clone());
    // A try: the schedule with only `kept` of the parts `among`, run fresh; whether it still
    // violates one of the clauses the seed violated.
    let try_parts = async |among: &[Part], kept: &[Part]| -> anyhow::Result<bool> {
        tries.set(tries.get() + 1);
        let candidate = drawn.keeping(among, kept, &format!("{name}-{}", tries.get()));
        let same = violated(&candidate, run.seed, opts, &target).await?;
        if !same.is_empty() {
            *violates.borrow_mut() = same.clone();
        }
        Ok(!same.is_empty())
    };
    let rounds = drawn.rounds();
    let kept_rounds = ddmin(rounds.clone(), budget, async |kept: &[Part]| {
        try_parts(&rounds, kept).await
    })
    .await?;
    let seconds = drawn.seconds(&kept_rounds);
    let among: Vec<Part> = rounds.iter().chain(&seconds).copied().collect();
    let with_rounds =
        |kept: &[Part]| -> Vec<Part> { kept_rounds.iter().chain(kept).copied().collect() };
    let left = budget.saturating_sub(tries.get());
    let kept_seconds = ddmin(seconds.clone(), left, async |kept: &[Part]| {
        try_parts(&among, &with_rounds(kept)).await
    })
    .await?;
    let mut shrunk = drawn.keeping(&among, &with_rounds(&kept_seconds), &name);
    let mut reproduced = 0;
    for i in 1..=REPLAYS {
        let again = format!("{name}-replay-{i}");
        let again = drawn.keeping(&among, &with_rounds(&kept_seconds), &again);
        reproduced += usize::from(!violated(&again, run.seed, opts, &target).await?.is_empty());
    }
    let result = Shrunk {
        file: run.file.with_file_name(&shrunk.file),
        rounds: (rounds.len(), kept_rounds.len()),
        strikes: (
            schedule::strike_count(&drawn.scenario),
            schedule::strike_count(&shrunk),
        ),
        tries: tries.get(),
        seconds: began.elapsed().as_secs_f64(),
        violates: violates.into_inner().into_iter().collect(),
        reproduced,
    };
    shrunk.description = format!(
        "Seed {}'s chaos schedule, shrunk by `harness chaos --shrink` {result}. Replay it with \
         `harness run` on this file, with the same replica program.",
        run.seed
    );
    std::fs::write(&result.file, shrunk.to_toml())
        .with_context(|| format!("writing {}", result.file.display()))?;
    Ok(result)
}

/// Runs `scenario` fresh: which of the violations in `target` it violated again.
async fn violated(
    scenario: &Scenario,
    seed: u64,
    opts: &RunOptions,
    target: &BTreeSet<String>,
) -> anyhow::Result<BTreeSet<String>> {
    let found = run_scenario(scenario, seed, opts).await?;
    let now: BTreeSet<String> = found.violations().flat_map(marks_of).collect();
    Ok(now.intersection(target).cloned().collect())
}

/// Zeller's ddmin: the smallest subset of `parts` (1-minimal as far as `budget` tries allow)
/// for which `fails` holds, given that it holds for all of `parts`, the empty one tried first.
/// Each try costs one of the budget; when it is spent, the smallest failing subset found so
/// far.
///
/// # Errors
/// A try's error.
pub async fn ddmin<P: Clone>(
    parts: Vec<P>,
    budget: usize,
    mut fails: impl AsyncFnMut(&[P]) -> anyhow::Result<bool>,
) -> anyhow::Result<Vec<P>> {
    // Nothing at all first: a second strike may be no part of the failure, and a lone part
    // is never split.
    if parts.is_empty() || budget == 0 {
        return Ok(parts);
    }
    if fails(&[]).await? {
        return Ok(Vec::new());
    }
    let (mut c, mut n, mut left) = (parts, 2usize, budget - 1);
    'outer: while c.len() >= 2 && left > 0 {
        let size = c.len().div_ceil(n);
        let chunks: Vec<Vec<P>> = c.chunks(size).map(<[P]>::to_vec).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            let complement: Vec<P> = (chunks.iter().enumerate())
                .filter(|(j, _)| *j != i)
                .flat_map(|(_, x)| x.iter().cloned())
                .collect();
            // A chunk alone, then (with more than two) all but it.
            let candidates = [
                Some(chunk.clone()),
                (chunks.len() > 2).then_some(complement),
            ];
            for (k, candidate) in candidates.into_iter().flatten().enumerate() {
                if left == 0 {
                    break 'outer;
                }
                left -= 1;
                if fails(&candidate).await? {
                    n = if k == 0 { 2 } else { (n - 1).max(2) };
                    c = candidate;
                    continue 'outer;
                }
            }
        }
        if n >= c.len() {
            break;
        }
        n = (2 * n).min(c.len());
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ddmin finds the two parts that together fail, and only them; with no budget it gives
    /// back what it was given; the tries it spends are at most the budget; when nothing at all
    /// still fails, nothing; a lone part that is needed stays.
    #[tokio::test]
    async fn ddmin_finds_the_parts_that_fail_together_within_its_budget() {
        let parts: Vec<u32> = (0..16).collect();
        let mut tries = 0;
        let found = ddmin(parts.clone(), 100, async |c: &[u32]| {
            tries += 1;
            Ok(c.contains(&3) && c.contains(&11))
        })
        .await
        .unwrap();
        assert_eq!(found, [3, 11]);
        assert!(tries <= 40, "{tries} tries");
        let none = ddmin(parts.clone(), 0, async |_: &[u32]| Ok(true))
            .await
            .unwrap();
        assert_eq!(none, parts);
        let mut spent = 0;
        let some = ddmin(parts.clone(), 3, async |c: &[u32]| {
            spent += 1;
            Ok(c.contains(&3))
        })
        .await
        .unwrap();
        assert_eq!(spent, 3);
        assert!(some.contains(&3) && some.len() < parts.len(), "{some:?}");
        let single = ddmin(parts.clone(), 100, async |c: &[u32]| Ok(c.contains(&5)))
            .await
            .unwrap();
        assert_eq!(single, [5]);
        let mut once = 0;
        let nothing = ddmin(parts, 100, async |_: &[u32]| {
            once += 1;
            Ok(true)
        })
        .await
        .unwrap();
        assert_eq!(
            (nothing, once),
            (Vec::new(), 1),
            "the empty schedule still fails"
        );
        let lone = ddmin(vec![7], 100, async |c: &[u32]| Ok(!c.is_empty()))
            .await
            .unwrap();
        assert_eq!(lone, [7]);
    }
}
