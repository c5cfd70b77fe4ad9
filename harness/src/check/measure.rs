//! A check's figure as typed data: the measured value, the bound it is held to, its unit and
//! which side of the bound is worse, and where on the run's timeline it was measured. The
//! report picks a clause's deciding figure from these and the timeline picture draws each bound
//! as a window; neither parses a message.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The unit of a measured value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Multiples of the check interval T.
    T,
    /// A count (samples, rows, replicas).
    Count,
}

/// Which side of its bound a value must stay on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Worse {
    /// Higher is worse: the value must stay at most the bound (`within 2T`).
    Above,
    /// Lower is worse: the value must be at least the bound (`not before 3T`).
    Below,
}

/// Where a bound lies on the run's timeline, in milliseconds since the run's start: the moment
/// the figure is measured from, the bound's edge, and where the measured event landed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// The moment measured from (e.g. the fault's step took effect).
    pub from_ms: f64,
    /// The bound's edge: `from_ms` plus the bound.
    pub bound_ms: f64,
    /// Where the measured event landed; `None` when it never came.
    pub at_ms: Option<f64>,
}

/// One figure measured against its bound.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measure {
    /// What was measured, e.g. `demoted after cut`.
    pub what: String,
    /// The measured value in `unit`; `None` when the awaited event never came (an infinite
    /// delay: broken when higher is worse, held when lower is).
    pub value: Option<f64>,
    /// The bound, in `unit`.
    pub bound: f64,
    /// Scheduling noise allowed past the bound, in `unit`.
    #[serde(default)]
    pub slack: f64,
    /// The unit of `value`, `bound` and `slack`.
    pub unit: Unit,
    /// Which side of the bound is worse.
    pub worse: Worse,
    /// Where it lies on the timeline, when it is a delay from a moment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
    /// Which of several repeated runs measured it (1 for the first), once repeats are merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<usize>,
    /// Whether the bound is one of liveness: how soon something the clause promises comes (a
    /// takeover, a release, a call after a notification). Only such a bound, missed by less
    /// than [`noise`](Self::noise), is a [near miss](Self::near_miss); never a safety bound
    /// (an overlap, a row after its term, an event too early).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub liveness: bool,
    /// The scheduling lateness the run itself measured around this figure, in `unit`: how
    /// late the harness's own samplers ticked between the moment measured from and the bound
    /// ([`crate::check::noise`]). Set on liveness bounds only.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub noise: f64,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

impl Measure {
    /// A value that must stay at most `bound`.
    pub fn at_most(what: String, value: Option<f64>, bound: f64, unit: Unit) -> Self {
        Self {
            what,
            value,
            bound,
            slack: 0.0,
            unit,
            worse: Worse::Above,
            window: None,
            run: None,
            liveness: false,
            noise: 0.0,
        }
    }

    /// A value that must be at least `bound`.
    pub fn at_least(what: String, value: Option<f64>, bound: f64, unit: Unit) -> Self {
        Self {
            worse: Worse::Below,
            ..Self::at_most(what, value, bound, unit)
        }
    }

    /// The same, with `slack` allowed past the bound.
    pub fn with_slack(mut self, slack: f64) -> Self {
        self.slack = slack;
        self
    }

    /// The same, placed on the timeline.
    pub fn with_window(mut self, window: Window) -> Self {
        self.window = Some(window);
        self
    }

    /// The same, as a bound of liveness (see [`liveness`](Self::liveness)).
    pub fn of_liveness(mut self) -> Self {
        self.liveness = true;
        self
    }

    /// Whether the value broke a liveness bound by no more than the noise the run measured:
    /// the run cannot tell such a miss from its own lateness, so it decides nothing by itself
    /// (the scenario runs again: `harness run`'s re-runs). An event that never came, a lower
    /// bound and a safety bound are never near misses.
    pub fn near_miss(&self) -> bool {
        match (self.value, self.worse) {
            (Some(v), Worse::Above) if self.liveness && !self.held() => {
                v <= self.bound + self.slack + self.noise
            }
            _ => false,
        }
    }

    /// How far the value stays inside its bound, as a fraction of the bound (of 1 for bounds
    /// below 1): 0 at the bound, negative past it, infinite for an event that never came.
    pub fn margin(&self) -> f64 {
        let scale = self.bound.abs().max(1.0);
        match (self.value, self.worse) {
            (None, Worse::Above) => f64::NEG_INFINITY,
            (None, Worse::Below) => f64::INFINITY,
            (Some(v), Worse::Above) => (self.bound - v) / scale,
            (Some(v), Worse::Below) => (v - self.bound) / scale,
        }
    }

    /// Whether the value keeps to its bound, slack included.
    pub fn held(&self) -> bool {
        match (self.value, self.worse) {
            (None, Worse::Above) => false,
            (None, Worse::Below) => true,
            (Some(v), Worse::Above) => v <= self.bound + self.slack,
            (Some(v), Worse::Below) => v + self.slack >= self.bound,
        }
    }

    /// The value as the report prints it, e.g. `1.86T`, `2`, or `never`.
    pub fn value_text(&self) -> String {
        self.value.map_or("never".into(), |v| self.unit.format(v))
    }

    /// The bound as the report prints it, e.g. `≤ 2T`.
    pub fn bound_text(&self) -> String {
        let op = match self.worse {
            Worse::Above => "≤",
            Worse::Below => "≥",
        };
        format!("{op} {}", self.unit.format(self.bound))
    }
}

impl Unit {
    /// `v` in this unit: `1.86T` (two decimals, trailing zeros dropped), `2`.
    pub fn format(&self, v: f64) -> String {
        match self {
            Unit::T => {
                let s = format!("{v:.2}");
                let s = s.trim_end_matches('0').trim_end_matches('.');
                format!("{s}T")
            }
            Unit::Count => format!("{v}"),
        }
    }
}

impl fmt::Display for Measure {
    /// `demoted after cut 1.86T, bound ≤ 2T`, with `(broken)` when it did not hold and the
    /// slack when the value is past the bound but within it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.value {
            Some(_) => write!(f, "{} {}", self.what, self.value_text())?,
            None => write!(f, "{}: never", self.what)?,
        }
        write!(f, ", bound {}", self.bound_text())?;
        if self.near_miss() {
            write!(
                f,
                " (broken, within the run's {} noise)",
                self.unit.format(self.noise)
            )?;
        } else if !self.held() {
            f.write_str(" (broken)")?;
        } else if self.margin() < 0.0 {
            write!(f, " (within {} slack)", self.unit.format(self.slack))?;
        }
        if let Some(run) = self.run {
            write!(f, " in run {run}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margins_order_worst_first_and_never_counts_by_direction() {
        let demoted =
            |v| Measure::at_most("demoted after cut".into(), v, 2.0, Unit::T).with_slack(0.25);
        assert!(demoted(Some(1.86)).margin() < demoted(Some(1.0)).margin());
        assert!(demoted(Some(2.1)).margin() < 0.0 && demoted(Some(2.1)).held());
        assert!(!demoted(Some(2.3)).held());
        assert!(!demoted(None).held());
        assert_eq!(demoted(None).margin(), f64::NEG_INFINITY);
        let early = |v| Measure::at_least("lock_released after cut".into(), v, 3.0, Unit::T);
        assert!(early(Some(3.5)).held() && !early(Some(2.0)).held());
        assert!(early(None).held(), "an absent event never came too early");
        assert_eq!(
            demoted(Some(1.86)).to_string(),
            "demoted after cut 1.86T, bound ≤ 2T"
        );
        assert_eq!(
            demoted(Some(2.1)).to_string(),
            "demoted after cut 2.1T, bound ≤ 2T (within 0.25T slack)"
        );
        assert_eq!(
            demoted(None).to_string(),
            "demoted after cut: never, bound ≤ 2T (broken)"
        );
        assert_eq!(Unit::Count.format(2.0), "2");
    }
}
