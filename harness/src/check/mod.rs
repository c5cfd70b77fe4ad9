//! Checkers: invariants and timing bounds over a run's timeline, in units of T, and a
//! scenario's own expectations ([`expect`]).
//!
//! Each checker returns a [`Check`] whose verdict is valid, invalid or unknown (Jepsen's three:
//! unknown when the timeline lacks what the checker needs), with the figures it measured.
//! [`scenario`] decides every check of one scenario run.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::event::ReplicaEvent;
use crate::fault::Verb;
use crate::level::{Level, Need};
use crate::timeline::{fault_spans, Entry, What};
use history::RowIs;
use wire::model::WireModel;

pub mod exits;
pub mod expect;
pub mod history;
pub mod leadership;
pub mod log_level;
pub mod measure;
pub mod noise;
pub mod outside;
mod overlap;
pub mod probes;
pub mod spans;
pub mod steady;
pub mod wire;
pub mod work;

#[cfg(test)]
mod replays;

pub use leadership::leadership_spans;
use leadership::{acquired_before_a_freeze, down_after, stops_leading};
pub use probes::{boot_passes_before_ready, probe_names, SPEC_PROBES};
pub use work::{work_only_from_leader, work_only_from_leader_at, FenceTally, WorkRow};

pub use expect::{Expectation, Facts};
pub use measure::{Measure, Unit, Window, Worse};
pub use overlap::{overlap_bound, overlap_seen_from_outside, overlaps};

/// A checker's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The property holds on this timeline.
    Valid,
    /// The property is violated; the message says where.
    Invalid,
    /// The timeline does not hold what the checker needs.
    Unknown,
}

/// One checker's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// What was checked, e.g. `gauge sum`.
    pub name: String,
    /// The clauses it decides.
    pub clauses: Vec<String>,
    /// The verdict.
    pub verdict: Verdict,
    /// What it measured, e.g. `max overlap` → `1.04T`.
    pub figures: BTreeMap<String, String>,
    /// Where it failed, or a one-line summary.
    pub message: String,
    /// The figures it holds to a bound, as typed data (the report's deciding figures, the
    /// timeline's bound windows).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measures: Vec<Measure>,
    /// Set when the check was not run because the replica program's contract level is below
    /// the one whose observations it needs (its verdict is then unknown): that level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs: Option<Need>,
    /// Set when runs of one scenario disagreed on it only by near misses ([`Check::near_miss`]):
    /// it failed within the run's own noise in some and held in others. Its verdict is then
    /// unknown, its clause flaky (undecided, never a pass), and its measures list each run's
    /// figure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flaky: bool,
}

/// One line: `name [clauses] Verdict: message`, as a failing test or run prints it.
impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (name, clauses) = (&self.name, self.clauses.join(", "));
        write!(f, "{name} [{clauses}] {:?}: {}", self.verdict, self.message)
    }
}

impl Check {
    /// A check of `clauses` with no figures yet.
    pub fn new(name: &str, clauses: &[&str], verdict: Verdict, message: String) -> Self {
        Self {
            name: name.to_owned(),
            clauses: clauses.iter().map(|c| (*c).to_owned()).collect(),
            verdict,
            figures: BTreeMap::new(),
            message,
            measures: Vec::new(),
            needs: None,
            flaky: false,
        }
    }

    /// The same, deciding `clauses` instead.
    pub fn with_clauses(mut self, clauses: &[String]) -> Self {
        self.clauses = clauses.to_vec();
        self
    }

    /// The same, with the text figure `key` → `value`.
    pub fn figure(mut self, key: &str, value: String) -> Self {
        self.figures.insert(key.to_owned(), value);
        self
    }

    /// The same, with a figure held to a bound.
    pub fn measure(self, m: Measure) -> Self {
        self.with_measures([m])
    }

    /// Whether it failed on near misses alone: a liveness bound missed by less than the noise
    /// the run measured ([`Measure::near_miss`]), and nothing else broken. Such a failure is
    /// not decided by this run; any other, safety above all, is.
    pub fn near_miss(&self) -> bool {
        self.verdict == Verdict::Invalid
            && self.measures.iter().any(Measure::near_miss)
            && (self.measures.iter()).all(|m| m.held() || m.near_miss())
    }

    /// The same, with these figures held to their bounds.
    pub fn with_measures(mut self, ms: impl IntoIterator<Item = Measure>) -> Self {
        self.measures.extend(ms);
        self
    }
}

/// The verdict of a checker that looked at `decided` samples (or reports) and found its property
/// `held` in all of them: unknown when it had nothing to look at.
fn verdict_of(decided: usize, held: bool) -> Verdict {
    match (decided, held) {
        (0, _) => Verdict::Unknown,
        (_, true) => Verdict::Valid,
        (_, false) => Verdict::Invalid,
    }
}

/// Formats a duration in units of T, e.g. `1.04T`.
pub fn in_t(d_ms: f64, t: Duration) -> String {
    format!("{:.2}T", t_of(d_ms, t))
}

/// A duration in milliseconds as a number of T (a typed figure's value).
pub fn t_of(d_ms: f64, t: Duration) -> f64 {
    d_ms / (t.as_secs_f64() * 1000.0)
}

fn ms_of(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A count that must stay at most `bound` (e.g. bad samples at most 0), when anything was
/// `decided`.
fn count_at_most(what: &str, decided: usize, value: usize, bound: usize) -> Option<Measure> {
    (decided > 0)
        .then(|| Measure::at_most(what.into(), Some(value as f64), bound as f64, Unit::Count))
}

/// The longest of `spans` as a delay held to `bound_ms` from its start, placed on the timeline
/// (no window when there is no span).
fn longest_within(what: &str, spans: &[(f64, f64)], bound_ms: f64, b: &Bounds) -> Measure {
    let longest = spans
        .iter()
        .copied()
        .max_by(|x, y| (x.1 - x.0).total_cmp(&(y.1 - y.0)));
    let value = longest.map_or(0.0, |(s, e)| e - s);
    let m = Measure::at_most(
        what.into(),
        Some(t_of(value, b.t)),
        t_of(bound_ms, b.t),
        Unit::T,
    )
    .with_slack(t_of(ms_of(b.slack), b.t));
    match longest {
        Some((s, e)) => m.with_window(Window {
            from_ms: s,
            bound_ms: s + bound_ms,
            at_ms: Some(e),
        }),
        None => m,
    }
}

/// The bounds the invariants use.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// The check interval T.
    pub t: Duration,
    /// The cadence of the leader-ticked loops (one tick already running when leadership moves).
    pub tick: Duration,
    /// How often the gauges and pg_locks are sampled.
    pub sample: Duration,
    /// Scheduling and sampling noise allowed on top of a bound: small against T.
    pub slack: Duration,
}

impl Bounds {
    /// DEM-3 as the conformance issue states it: an overlap never exceeds 2·T + one tick.
    pub fn max_overlap(&self) -> Duration {
        2 * self.t + self.tick
    }
}

/// Which continuous invariants a run is held to (a scenario file's `invariants`: `true`,
/// `false` or `"safety"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Invariants {
    /// Every one (`true`, the default): see [`continuous`].
    #[default]
    All,
    /// The safety properties only (`"safety"`): the gauge sum, one granted lock row, and the
    /// overlap of two leaders. What an elector still owes behind a transaction-mode pooler with
    /// its guard on: there the lock can stay on a server session in the pooler's list that no
    /// replica believes it holds (a leader that demoted cannot reach it), so the gauge's leader
    /// and pg_locks' disagree, and a row outlives its term, by design (POOL-1).
    Safety,
    /// None (`false`): the scenario shows a hazard and expects the violation instead.
    None,
}

impl Invariants {
    /// The scenario files' word for the safety properties.
    pub const SAFETY: &'static str = "safety";
}

impl Serialize for Invariants {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Invariants::All => s.serialize_bool(true),
            Invariants::None => s.serialize_bool(false),
            Invariants::Safety => s.serialize_str(Self::SAFETY),
        }
    }
}

impl<'de> Deserialize<'de> for Invariants {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Flag(bool),
            Word(String),
        }
        match Raw::deserialize(d) {
            Ok(Raw::Flag(true)) => Ok(Invariants::All),
            Ok(Raw::Flag(false)) => Ok(Invariants::None),
            Ok(Raw::Word(w)) if w == Self::SAFETY => Ok(Invariants::Safety),
            _ => Err(serde::de::Error::custom(
                "invariants: expected true, false or \"safety\"",
            )),
        }
    }
}

/// Every check of one scenario run: the steps that failed (`step_errors`: they fail the
/// scenario, and no clause by themselves), the continuous invariants the scenario asks for, the boot and
/// readiness shape wherever replicas run an elector, and the scenario's expectations.
///
/// `level` is what the replica program lets the harness observe: a check that needs more is
/// not run (unknown, with [`Check::needs`] set), never passed on a timeline that lacks what it
/// reads.
pub fn scenario(
    invariants: Invariants,
    expectations: &[Expectation],
    step_errors: &[String],
    facts: &Facts,
    level: Level,
) -> Vec<Check> {
    let mut checks = Vec::new();
    // A step that could not be carried out (a wait that timed out) fails the scenario, and no
    // clause by itself: each expectation and invariant decides its own clause on what the run
    // did show (one whose moment never came is not run), so a slow gauge is not reported as
    // a wrong key.
    if !step_errors.is_empty() {
        checks.push(Check {
            name: "steps".into(),
            clauses: Vec::new(),
            verdict: Verdict::Invalid,
            figures: BTreeMap::new(),
            message: step_errors.join("; "),
            measures: Vec::new(),
            needs: None,
            flaky: false,
        });
    }
    // What the replicas said on the wire, read once for every check that reads it.
    let model = WireModel::of(facts.entries);
    let observe = |(needs, c): (Level, Check)| observed(level, needs, c);
    match invariants {
        Invariants::All => checks.extend(continuous(facts, &model, level).into_iter().map(observe)),
        Invariants::Safety => checks.extend(safety(facts, &model, level).into_iter().map(observe)),
        Invariants::None => {}
    }
    // Boot and readiness shape hold in every scenario whose replicas run an elector; they are
    // unknown (not counted) where none does.
    checks.extend(
        [
            boot_passes_before_ready(facts.entries),
            probe_names(facts.entries),
        ]
        .into_iter()
        .map(|c| observed(level, Level::Events, c))
        .filter(|c| c.verdict != Verdict::Unknown || c.needs.is_some()),
    );
    checks.extend((expectations.iter()).map(|ex| {
        observed(
            level,
            ex.expect.needs(),
            expect::decide_at(ex, facts, &model, level),
        )
    }));
    noise::annotate(&mut checks, facts.entries, &facts.bounds);
    checks
}

/// `c` as run at `level`: unchanged when `needs` is within it; otherwise not run (unknown,
/// no figures) with a message naming the level that would decide it.
fn observed(level: Level, needs: Level, c: Check) -> Check {
    if needs <= level {
        return c;
    }
    Check {
        verdict: Verdict::Unknown,
        figures: BTreeMap::new(),
        measures: Vec::new(),
        message: format!(
            "not run: needs {needs} ({}); the program is at {level}",
            needs.adds()
        ),
        needs: Some(Need::Level(needs)),
        ..c
    }
}

/// The safety properties: the gauge sum, one granted lock row, the overlap of two leaders.
/// Each with the contract level its observations need; `model` is the wire of `facts.entries`.
fn safety(facts: &Facts, model: &WireModel, level: Level) -> Vec<(Level, Check)> {
    let (entries, end_ms, b) = (facts.entries, facts.end_ms(), &facts.bounds);
    let mut checks = vec![
        (Level::Metrics, gauge_sum_at(entries, end_ms, b, level)),
        (Level::Process, one_lock_row(entries)),
        (Level::Events, overlap_bound(entries, end_ms, b)),
    ];
    if level < Level::Events {
        checks.push((
            Level::Process,
            overlap_seen_from_outside(facts, model, level),
        ));
    }
    checks
}

/// The continuous invariants: gauge sum, one lock row, gauge = pg_locks, overlap, the lock rows
/// against the terms ([`history`]), and leader-only work where leader-only loops wrote rows.
/// Each with the contract level its observations need (the terms come from the event stream);
/// `model` is the wire of `facts.entries`.
fn continuous(facts: &Facts, model: &WireModel, level: Level) -> Vec<(Level, Check)> {
    let (entries, end_ms, b) = (facts.entries, facts.end_ms(), &facts.bounds);
    let mut checks = vec![
        (Level::Metrics, gauge_sum_at(entries, end_ms, b, level)),
        (Level::Metrics, steady::gauge_one_while_held(entries, b)),
        (Level::Metrics, steady::gauge_has_no_labels(entries)),
        (Level::Process, one_lock_row(entries)),
        (Level::Metrics, lock_row_while_leading(entries, b)),
        (Level::Metrics, gauge_matches_locks_at(entries, b, level)),
        (Level::Events, overlap_bound(entries, end_ms, b)),
        (Level::Events, history::rows_belong_to_terms(entries, b)),
        (Level::Process, exits::no_exit_unless_stopped(entries)),
    ];
    if level < Level::Events {
        checks.push((
            Level::Process,
            overlap_seen_from_outside(facts, model, level),
        ));
    }
    // Where no term ended, or no unlock was reported, these have nothing to decide (without
    // the event stream they cannot know, and say which level would).
    let has_events = (entries.iter()).any(|e| matches!(e.what, What::Replica { .. }));
    checks.extend(
        [
            history::rows_leave_with_their_terms(entries, b),
            history::reported_unlocks_hold(entries, b),
        ]
        .into_iter()
        .filter(|c| c.verdict != Verdict::Unknown || !has_events)
        .map(|c| (Level::Events, c)),
    );
    // A wire check with nothing to decide on this run (no failed check to follow, no standby
    // to time) is left out, as the history checks are; without any wire entry (the table of
    // what decides each clause) each says it could decide.
    let has_wire = (entries.iter()).any(|e| matches!(e.what, What::Wire { .. }));
    checks.extend(
        (wire::checks(entries, model, b, facts.wire).into_iter())
            .filter(|c| c.verdict != Verdict::Unknown || c.needs.is_some() || !has_wire)
            .map(|c| (Level::Process, c)),
    );
    if facts.rows.iter().any(|r| !r.is_gated_step()) {
        checks.push((
            Level::Work,
            work_only_from_leader_at(entries, model, facts.rows, end_ms, b, facts.pooled, level),
        ));
    } else if level >= Level::Work && facts.work_read {
        checks.extend(no_work_from_a_leader(entries, end_ms, b, level).map(|c| (Level::Work, c)));
    }
    checks
}

/// How many of its ticks a leader of a program at level 2 or more runs before it must have
/// written a `leader_work` row: three (one may be in flight at the end, one lost to a fault).
const TICKS_BEFORE_WORK: u32 = 3;

/// LOOP-1 where a program at level 2 or more wrote no `leader_work` row at all (the table was
/// read): a failure when some replica led for [`TICKS_BEFORE_WORK`] ticks in one term (by its
/// events at level 3, its gauge at level 2), since the level promises a row per pass of its
/// leader-only work; nothing to decide when none led that long.
fn no_work_from_a_leader(
    entries: &[Entry],
    end_ms: f64,
    b: &Bounds,
    level: Level,
) -> Option<Check> {
    let spans = if level >= Level::Events {
        leadership_spans(entries, end_ms)
    } else {
        outside::gauge_spans(entries, b)
    };
    let need = ms_of(b.tick * TICKS_BEFORE_WORK);
    let (replica, led) = (spans.iter())
        .flat_map(|(r, v)| v.iter().map(move |(s, e)| (r, e.min(end_ms) - s)))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    (led >= need).then(|| {
        Check::new(
            "leader-only work",
            &["LOOP-1"],
            Verdict::Invalid,
            format!(
                "no leader_work row, though {replica} led for {} in one term: a program at {level} \
                 writes a row for each pass of its leader-only work",
                in_t(led, b.t)
            ),
        )
        .figure("rows", "0".into())
    })
}

/// MET-1: the gauge sum is never above 2, and 2 only inside an overlap window: each replica
/// whose gauge says 1 in a sum of 2 led at a moment the sample can show. A sample shows each
/// replica at some moment between the time its oldest value was asked for and its own time;
/// a replica's span is widened at its start by how late the harness may read an `acquired` (the
/// report lag: the gauge goes to 1 before the event is read) and at its end by one sampling
/// period and the slack.
pub fn gauge_sum(entries: &[Entry], end_ms: f64, b: &Bounds) -> Check {
    gauge_sum_at(entries, end_ms, b, Level::Events)
}

/// [`gauge_sum`] for a program at `level`: below level 3 nobody reports when it led, so a sum
/// of 2 is held to the overlap bound instead of to the leaders' own reports.
pub fn gauge_sum_at(entries: &[Entry], end_ms: f64, b: &Bounds, level: Level) -> Check {
    let spans = leadership_spans(entries, end_ms);
    let pad = ms_of(b.sample + b.slack);
    let lag = history::report_lag_ms(b);
    let led_within = |r: &str, from: f64, to: f64| {
        (spans.get(r).into_iter().flatten()).any(|(s, e)| s - lag <= to && e + pad >= from)
    };
    // Without the event stream (a program below level 3) nobody reports when it led: a sum of
    // 2 is explained when it has lasted no longer than the overlap bound (DEM-3), measured
    // from the first sample that showed it, plus one sample period and the slack; a sum below
    // 2 in between ends it only when it holds for a few samples ([`spans::SETTLED`]).
    let by_events = level >= Level::Events;
    let overlap_ms = ms_of(b.max_overlap()) + pad;
    let mut two = spans::Stretches::new();
    let (mut samples, mut max_sum, mut bad) = (0usize, 0i64, Vec::new());
    let mut down = BTreeSet::new();
    for e in entries {
        down_after(e, &mut down);
        let What::Gauges { values, asked_ms } = &e.what else {
            continue;
        };
        samples += 1;
        // A replica that was just killed or frozen keeps its last answer for a moment.
        let up = || values.iter().filter(|(r, _)| !down.contains(*r));
        let sum: i64 = up().filter_map(|(_, v)| *v).sum();
        max_sum = max_sum.max(sum);
        let asked = asked_ms.unwrap_or(e.t_ms);
        if sum >= 2 {
            two.wrong(e.t_ms);
        } else {
            two.right(e.t_ms);
        }
        let explained = match (by_events, two.open_since().filter(|_| sum >= 2)) {
            (false, Some(since)) => e.t_ms - since <= overlap_ms,
            _ => up()
                .filter(|(_, v)| **v == Some(1))
                .all(|(r, _)| led_within(r, asked, e.t_ms)),
        };
        if sum > 2 || (sum == 2 && !explained) {
            bad.push(format!("sum {sum} at {:.0} ms {values:?}", e.t_ms));
        }
    }
    let verdict = verdict_of(samples, bad.is_empty());
    let message = if bad.is_empty() {
        format!("{samples} samples, max sum {max_sum}")
    } else {
        format!("{} bad samples, first: {}", bad.len(), bad[0])
    };
    let outside = "gauge samples above 1 outside an overlap";
    let max_sum = max_sum.max(0) as usize;
    Check::new("gauge sum", &["MET-1"], verdict, message)
        .figure("samples", samples.to_string())
        .figure("max gauge sum", max_sum.to_string())
        .with_measures(count_at_most(outside, samples, bad.len(), 0))
        .with_measures(count_at_most("max gauge sum", samples, max_sum, 2))
}

/// The longest gap between two pg_locks samples across which a wrong stretch goes on: two
/// sampling periods and the slack. A longer one means pg_locks could not be read (the server
/// was stopped or restarting), and nothing seen then decides a stretch's length.
pub(crate) fn sampling_gap(b: &Bounds) -> f64 {
    ms_of(2 * b.sample + b.slack)
}

/// LOCK-3 (one half): the spec's query never shows more than one granted row for the key. It
/// counts rows of any mode: the spec's exclusive lock is never granted twice, but the key taken
/// in the shared form (`pg_try_advisory_lock_shared`) is granted to every replica that asks,
/// and shows a row for each; [`lock_row_while_leading`] is the half that asks for the row.
pub fn one_lock_row(entries: &[Entry]) -> Check {
    let (mut samples, mut worst) = (0usize, 0usize);
    for e in entries {
        if let What::Locks { rows } = &e.what {
            samples += 1;
            worst = worst.max(rows.iter().filter(|r| r.1).count());
        }
    }
    let verdict = verdict_of(samples, worst <= 1);
    Check::new(
        "one granted lock row",
        &["LOCK-3"],
        verdict,
        format!("{samples} samples, at most {worst} granted row(s)"),
    )
    .figure("max granted rows", worst.to_string())
    .with_measures(count_at_most("granted lock rows", samples, worst, 1))
}

/// LOCK-3 (the other half): while a replica's gauge says it leads, the spec's query shows its
/// granted row. A span where the gauges sum to 1 and the query shows no granted row lasts no
/// longer than one sampling period plus the overlap bound (a killed backend's row goes at once,
/// its leader's gauge at its next failed check, within 2T and a tick); a lock taken on another
/// key or in another form leaves it empty all along. Unknown without gauges (below level 1).
pub fn lock_row_while_leading(entries: &[Entry], b: &Bounds) -> Check {
    let mut sum: Option<i64> = None;
    let (mut wrong, mut compared) = (spans::Stretches::sampled(sampling_gap(b)), 0usize);
    for e in entries {
        match &e.what {
            What::Gauges { values, .. } => {
                sum =
                    (values.values().all(Option::is_some)).then(|| values.values().flatten().sum());
            }
            What::Locks { rows } => {
                // Where a gauge is unreadable (a killed or frozen replica) nothing is known:
                // an open span ends there.
                let Some(s) = sum else {
                    wrong.undecided(e.t_ms);
                    continue;
                };
                compared += 1;
                if s == 1 && !rows.iter().any(|r| r.1) {
                    wrong.wrong(e.t_ms);
                } else {
                    wrong.right(e.t_ms);
                }
            }
            _ => {}
        }
    }
    let spans = wrong.finish(entries.last().map_or(0.0, |e| e.t_ms));
    let allowed = ms_of(b.sample + b.max_overlap());
    let longest = spans.iter().map(|(a, z)| z - a).fold(0.0, f64::max);
    let verdict = verdict_of(compared, longest <= allowed + ms_of(b.slack));
    Check::new(
        "a granted row while a replica leads",
        &["LOCK-3"],
        verdict,
        format!(
            "{compared} samples; the longest span with a leader by its gauge and no granted \
             row in the spec's query: {}",
            in_t(longest, b.t)
        ),
    )
    .with_measures(
        (compared > 0)
            .then(|| longest_within("leader by gauge without a granted row", &spans, allowed, b)),
    )
}

/// ISL-1: the leader by gauge and the leader by pg_locks agree, except for disagreements shorter
/// than one sampling period plus the overlap bound. A row of no live term (an ended term's, or
/// a given-up attempt's within its allowance: see [`history::RowIs`]) says nothing of who
/// leads; the history checks bound it.
pub fn gauge_matches_locks(entries: &[Entry], b: &Bounds) -> Check {
    gauge_matches_locks_at(entries, b, Level::Events)
}

/// [`gauge_matches_locks`] for a program at `level`: below level 3 there are no terms to judge
/// a granted row against, so it is its holder's lead, as the spec's leader-finding query says.
pub fn gauge_matches_locks_at(entries: &[Entry], b: &Bounds, level: Level) -> Check {
    let mut gauges: Option<BTreeMap<String, Option<i64>>> = None;
    let mut lock_holder: Option<Option<String>> = None;
    let mut lock_at = 0.0f64;
    // A pg_locks sample older than this (the server was down or unreachable) tells nothing.
    let stale_ms = sampling_gap(b);
    let mut wrong = spans::Stretches::new();
    let (mut compared, mut undecided) = (0usize, 0usize);
    let mut judge = history::Rows::new(entries, b);
    // Without the event stream (a program below level 3) there are no terms to judge a row
    // against: a granted row is its holder's lead, as the spec's leader-finding query says.
    let terms_known = level >= Level::Events;
    // What the sampled row says of who leads (see `history::RowIs`).
    let mut row_is = RowIs::Leading;
    for e in entries {
        match &e.what {
            What::Gauges { values, .. } => gauges = Some(values.clone()),
            What::Locks { rows } if !terms_known => {
                let holder = rows.iter().find(|r| r.1).map(|r| r.2.clone());
                lock_holder = Some(holder);
                lock_at = e.t_ms;
            }
            What::Locks { rows } => {
                let judged = judge.sample(e.t_ms, rows).into_iter().next();
                row_is = judged.as_ref().map_or(RowIs::Leading, |j| j.0);
                lock_holder = Some(judged.map(|j| j.1));
                lock_at = e.t_ms;
            }
            _ => continue,
        }
        let (Some(values), Some(l)) = (&gauges, &lock_holder) else {
            continue;
        };
        // A holder whose gauge cannot be read (frozen, killed, partitioned from the harness),
        // or a pg_locks that could not be read lately, neither agrees nor disagrees: the sample
        // decides nothing, and a disagreement seen before it ends at the last decided sample.
        let unreadable = l
            .as_ref()
            .is_some_and(|holder| values.get(holder).is_some_and(Option::is_none));
        if unreadable || row_is == RowIs::Excused || e.t_ms - lock_at > stale_ms {
            undecided += 1;
            wrong.undecided(lock_at);
            continue;
        }
        let g: BTreeSet<&String> = values
            .iter()
            .filter(|(_, v)| **v == Some(1))
            .map(|(k, _)| k)
            .collect();
        compared += 1;
        match (l, row_is) {
            (_, RowIs::Stray { since_ms }) => wrong.wrong(since_ms),
            (Some(holder), _) if g.contains(holder) && g.len() == 1 => wrong.right(e.t_ms),
            (None, _) if g.is_empty() => wrong.right(e.t_ms),
            _ => wrong.wrong(e.t_ms),
        }
    }
    let spans = wrong.finish(entries.last().map_or(0.0, |e| e.t_ms));
    let longest = spans.iter().map(|(s, e)| e - s).fold(0.0, f64::max);
    let allowed = ms_of(b.sample + b.max_overlap());
    let bound = allowed + ms_of(b.slack);
    let verdict = verdict_of(compared, longest <= bound);
    Check::new(
        "gauge leader = pg_locks leader",
        &["ISL-1"],
        verdict,
        format!(
            "{compared} comparisons ({undecided} samples undecided: the holder's gauge or \
             pg_locks was unreadable, or the row was no live term's), longest disagreement {}",
            in_t(longest, b.t)
        ),
    )
    .figure("longest disagreement", in_t(longest, b.t))
    .with_measures(
        (compared > 0)
            .then(|| longest_within("longest gauge/pg_locks disagreement", &spans, allowed, b)),
    )
}

#[cfg(test)]
pub(crate) mod tests;
