//! Expectations on the samples and the `leader_work` table: the gauge sum
//! ([`GaugeSumReaches`](super::Expect::GaugeSumReaches)), the granted lock rows
//! ([`LockRowsAtMost`](super::Expect::LockRowsAtMost)), the rows written
//! ([`WorkRows`](super::Expect::WorkRows)) and the fence's rejections
//! ([`FenceRejects`](super::Expect::FenceRejects)).

use super::{check, Facts};
use crate::check::{Check, FenceTally, Measure, Unit, Verdict, WorkRow};
use crate::timeline::{Entry, What};

pub(super) fn gauge_sum_reaches(n: i64, entries: &[Entry]) -> Check {
    let sum = |what: &What| match what {
        What::Gauges { values, .. } => Some(values.values().flatten().sum::<i64>()),
        _ => None,
    };
    let (verdict, max) = peak(entries, sum, |m| m >= n);
    let reached = max.map(|m| {
        Measure::at_least(
            "max gauge sum".into(),
            Some(m as f64),
            n as f64,
            Unit::Count,
        )
    });
    check(
        format!("gauge sum reaches {n}"),
        verdict,
        format!("max gauge sum {max:?}"),
    )
    .figure("max gauge sum", max.unwrap_or(0).to_string())
    .with_measures(reached)
}

pub(super) fn lock_rows_at_most(n: usize, entries: &[Entry]) -> Check {
    let granted = |what: &What| match what {
        What::Locks { rows } => Some(rows.iter().filter(|r| r.1).count()),
        _ => None,
    };
    let (verdict, max) = peak(entries, granted, |m| m <= n);
    let rows = max.map(|m| {
        Measure::at_most(
            "granted lock rows".into(),
            Some(m as f64),
            n as f64,
            Unit::Count,
        )
    });
    check(
        format!("at most {n} granted lock row(s)"),
        verdict,
        format!("max granted rows {max:?}"),
    )
    .figure("max granted rows", max.unwrap_or(0).to_string())
    .with_measures(rows)
}

/// The largest figure `of` reads from the samples, and whether it `holds` (unknown when no
/// sample had one).
fn peak<T: Ord + Copy>(
    entries: &[Entry],
    of: impl Fn(&What) -> Option<T>,
    holds: impl Fn(T) -> bool,
) -> (Verdict, Option<T>) {
    let max = entries.iter().filter_map(|e| of(&e.what)).max();
    let verdict = match max {
        None => Verdict::Unknown,
        Some(m) if holds(m) => Verdict::Valid,
        Some(_) => Verdict::Invalid,
    };
    (verdict, max)
}

pub(super) fn work_rows(n: usize, rows: &[WorkRow]) -> Check {
    let verdict = if rows.len() == n {
        Verdict::Valid
    } else {
        Verdict::Invalid
    };
    check(
        format!("{n} leader_work rows"),
        verdict,
        format!("{} rows", rows.len()),
    )
    .figure("rows", rows.len().to_string())
}

pub(super) fn fence_rejects(n: usize, facts: &Facts) -> Check {
    let tally = FenceTally::of(facts.entries, facts.rows, &facts.bounds);
    // No pass landed late (the program gave its held writes up, closing their connections,
    // before the fault lifted): nothing put the fence to the test, which is no failure of it.
    let verdict = if tally.late_unfenced == 0 && tally.late_fenced == 0 {
        Verdict::Unknown
    } else if tally.rejected() >= n && tally.late_fenced == 0 {
        Verdict::Valid
    } else {
        Verdict::Invalid
    };
    check(
        format!("the fence rejects at least {n} late write(s)"),
        verdict,
        format!(
            "{} pass(es) of fencing replicas landed after a newer term began: their unfenced \
             rows landed, {} fenced twin(s) rejected, {} landed{}",
            tally.late_unfenced,
            tally.rejected(),
            tally.late_fenced,
            if verdict == Verdict::Unknown {
                " (nothing put the fence to the test: the held passes never reached the server)"
            } else {
                ""
            }
        ),
    )
    .figure(
        "late unfenced writes landed",
        tally.late_unfenced.to_string(),
    )
    .figure("fenced writes rejected", tally.rejected().to_string())
    .figure("fenced writes landed late", tally.late_fenced.to_string())
}
