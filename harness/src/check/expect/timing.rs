//! Event expectations ([`Expect::Event`]): an event, or an observation of the server, the
//! wire or the process, and its delay from a named step, held to the expectation's bounds;
//! below level 3, `acquired` and `demoted` seen from outside (pg_locks, the gauges, the wire).

use std::collections::BTreeMap;
use std::time::Duration;

use super::on_the_wire::grant_answered_on_the_wire;
use super::{check, ms, Awaited, Expect, Facts, Origin, Who};
use crate::check::wire::model::{lock_closes, lock_connection_closes, Stmt, WireModel, GRANTED};
use crate::check::{in_t, t_of, Bounds, Check, Measure, Unit, Verdict, Window};
use crate::event::EventKind;
use crate::level::Level;
use crate::timeline::{Entry, Marks, What};

pub(super) fn event(expect: &Expect, facts: &Facts, model: &WireModel, level: Level) -> Check {
    let Expect::Event {
        awaited,
        replica,
        after,
        within,
        not_before,
        absent,
    } = expect
    else {
        unreachable!("an event expectation")
    };
    let b = &facts.bounds;
    let from = Origin::of(after.as_ref(), facts.marks).holding(facts.entries);
    let label_after = after
        .as_ref()
        .map(|a| format!(" after {a}"))
        .unwrap_or_default();
    let name = format!(
        "{}{awaited} by {replica}{label_after}",
        if *absent { "no " } else { "" }
    );
    let outside = match awaited {
        Awaited::Event(kind @ (EventKind::Acquired | EventKind::Demoted))
            if level < Level::Events =>
        {
            Some(*kind)
        }
        _ => None,
    };
    let found = seen(*awaited, replica, &from, facts, model, outside, level);
    let delay = found.map(|s| (s.at_ms - from.from_ms).max(0.0));
    // A lower bound is measured from when the step began: a fault's call can take a while
    // (the toxics of a partition go on one by one), and its effect may have begun with it.
    let since_began = found.map(|s| (s.at_ms - from.search_ms).max(0.0));
    // Seen late by at most the sampling error: an upper bound allows it; a lower bound and an
    // absence need none (what is seen late happened no later).
    let error_ms = found.map_or(0.0, |s| if *absent { 0.0 } else { s.error_ms });
    let slack_ms = b.slack.as_secs_f64() * 1000.0;
    let in_window = |d: f64| ms(within, b).is_none_or(|w| d <= w + slack_ms + error_ms);
    let verdict = match (absent, delay) {
        (true, Some(d)) if in_window(d) => Verdict::Invalid,
        (true, _) => Verdict::Valid,
        (false, None) => Verdict::Invalid,
        (false, Some(d)) => {
            let early =
                (ms(not_before, b).zip(since_began)).is_some_and(|(nb, s)| s + slack_ms < nb);
            if in_window(d) && !early {
                Verdict::Valid
            } else {
                Verdict::Invalid
            }
        }
    };
    let message = match delay {
        Some(d) => format!(
            "{awaited} {d:.0} ms ({}){}; bound {}{}",
            in_t(d, b.t),
            if label_after.is_empty() {
                " after the start"
            } else {
                label_after.as_str()
            },
            within.map_or("none".into(), |w| w.to_string()),
            not_before.map_or(String::new(), |w| format!(", not before {w}"))
        ),
        None => format!(
            "no {awaited} by {replica}{label_after}{}",
            if *awaited == Awaited::Exited {
                other_exit(replica, &from, facts)
            } else {
                String::new()
            }
        ),
    };
    let late_ms = found.and_then(|s| s.reported_late_ms);
    let message = message + &how_seen(outside.is_some(), error_ms, late_ms, b.t);
    let mut c = check(name, verdict, message);
    if let Some(d) = delay {
        c.figures.insert(format!("{awaited} after"), in_t(d, b.t));
    }
    if outside.is_some() {
        c.figures
            .insert("sampling error".into(), in_t(error_ms, b.t));
    }
    let what = format!(
        "{awaited} after {}",
        after.as_deref().unwrap_or("the start")
    );
    let bounds = Delay {
        what: &what,
        from_ms: from.from_ms,
        delay_ms: delay,
        error_ms,
        b,
    };
    let since = Delay {
        from_ms: from.search_ms,
        delay_ms: since_began,
        ..bounds
    };
    let upper = bounds.measures(ms(within, b), None, *absent);
    c.with_measures(
        upper
            .into_iter()
            .chain(since.measures(None, ms(not_before, b), *absent)),
    )
}

/// An event's delay from its origin, to be held to the expectation's bounds.
#[derive(Clone, Copy)]
struct Delay<'a> {
    what: &'a str,
    from_ms: f64,
    /// `None`: the event never came.
    delay_ms: Option<f64>,
    /// How late the event may have been seen (sampled from outside), allowed on an upper bound.
    error_ms: f64,
    b: &'a Bounds,
}

impl Delay<'_> {
    /// One measure per bound: `within` is an upper bound (a lower one, cleared by the slack,
    /// when the event must be `absent` within it), `not_before` a lower one.
    fn measures(&self, within: Option<f64>, not_before: Option<f64>, absent: bool) -> Vec<Measure> {
        let slack = t_of(self.b.slack.as_secs_f64() * 1000.0, self.b.t);
        let error = t_of(self.error_ms, self.b.t);
        let upper = within.map(|w| match absent {
            false => (self.measure(Measure::at_most, w).with_slack(slack + error)).of_liveness(),
            true => self.measure(Measure::at_least, w).with_slack(-slack),
        });
        let lower = not_before.map(|nb| self.measure(Measure::at_least, nb).with_slack(slack));
        upper.into_iter().chain(lower).collect()
    }

    fn measure(
        &self,
        side: fn(String, Option<f64>, f64, Unit) -> Measure,
        bound_ms: f64,
    ) -> Measure {
        let t = self.b.t;
        let value = self.delay_ms.map(|d| t_of(d, t));
        side(self.what.to_owned(), value, t_of(bound_ms, t), Unit::T).with_window(Window {
            from_ms: self.from_ms,
            bound_ms: self.from_ms + bound_ms,
            at_ms: self.delay_ms.map(|d| self.from_ms + d),
        })
    }
}

/// When an awaited event was seen.
#[derive(Clone, Copy)]
struct Seen {
    /// When it happened, as far as the run shows.
    at_ms: f64,
    /// How late it may have been seen (sampled from outside), allowed on an upper bound.
    error_ms: f64,
    /// For an acquisition the replica reported: how long after its grant on the wire.
    reported_late_ms: Option<f64>,
}

/// The first `awaited` by `who` since `from`: from outside (`outside`: the kind, below level
/// 3) or on the timeline; a reported acquisition at its grant on the wire.
fn seen(
    awaited: Awaited,
    who: &Who,
    from: &Origin,
    facts: &Facts,
    model: &WireModel,
    outside: Option<EventKind>,
    level: Level,
) -> Option<Seen> {
    if let Some(kind) = outside {
        return seen_from_outside(kind, who, from, facts, model, level).map(|(at_ms, error_ms)| {
            Seen {
                at_ms,
                error_ms,
                reported_late_ms: None,
            }
        });
    }
    let e = (facts.entries.iter())
        .find(|e| e.t_ms >= from.search_ms && observed(e, awaited, who, from, facts.marks));
    let on_wire = match awaited {
        Awaited::Unlocked => unlocked_on_the_wire(from, facts, model),
        _ => None,
    };
    if let Some(at_ms) = on_wire.filter(|at| e.is_none_or(|e| *at <= e.t_ms)) {
        return Some(Seen {
            at_ms,
            error_ms: 0.0,
            reported_late_ms: None,
        });
    }
    let e = e?;
    let granted = granted_before(e, facts, model);
    Some(Seen {
        at_ms: granted.unwrap_or(e.t_ms),
        error_ms: 0.0,
        reported_late_ms: granted.map(|g| e.t_ms - g),
    })
}

/// RUN-6's `unlocked`, on the wire: when the first release by the step's target, sent after
/// the step began, was answered true (the server let the key go then), whatever pg_locks'
/// samples caught: under load a sampler can miss the moments between an unlock and the close
/// that follows it, and see the row and its backend gone together, as a session's end.
fn unlocked_on_the_wire(from: &Origin, facts: &Facts, model: &WireModel) -> Option<f64> {
    let target = &from.mark.filter(|_| facts.wire.tapped)?.target;
    let released = |s: &&Stmt| {
        (s.row().and_then(|r| r.first().cloned().flatten()))
            .is_some_and(|v| GRANTED.contains(&v.trim()))
    };
    (model.conns.iter())
        .filter(|c| &c.replica == target)
        .flat_map(|c| c.statements.iter())
        .filter(|s| s.unlocks() && s.sent_ms >= from.search_ms)
        .filter(released)
        .filter_map(|s| s.answer.as_ref().map(|(at, _)| *at))
        .min_by(f64::total_cmp)
}

/// What a message adds on how an event was seen: from outside with its sampling error, or
/// granted on the wire before the replica reported it.
fn how_seen(outside: bool, error_ms: f64, late_ms: Option<f64>, t: Duration) -> String {
    let sampled = (outside && error_ms > 0.0).then(|| {
        format!(
            "; seen from outside (sampling error up to {} allowed)",
            in_t(error_ms, t)
        )
    });
    let late =
        late_ms.map(|l| format!("; granted on the wire {l:.0} ms before the replica's own event"));
    sampled.into_iter().chain(late).collect()
}

/// When a program without the event stream is first seen to have `acquired` (a pg_locks sample
/// shows a replica that `who` names holding the lock on a backend the previous sample did not
/// show it holding) or
/// `demoted` (its gauge answers 0 after its last answer was 1, or its proxy saw it close a
/// connection that held the lock: the wire, with no sampling error) since the origin; with the
/// sampling error, the time since the previous sample of the same kind: the change happened
/// between the two, so it was seen at most that late. At level 0 there is no gauge: any close
/// of its lock connection is its demotion; above, a close counts only where it led again after
/// (else its gauge says when its term ended).
fn seen_from_outside(
    kind: EventKind,
    who: &Who,
    from: &Origin,
    facts: &Facts,
    model: &WireModel,
    level: Level,
) -> Option<(f64, f64)> {
    let sampled = seen_in_samples(kind, who, from, facts);
    if kind == EventKind::Acquired {
        return sampled
            .map(|s| grant_answered_on_the_wire(s, who, from, facts, model).unwrap_or(s));
    }
    let closes = if level < Level::Metrics {
        lock_connection_closes(facts.entries, model)
    } else {
        lock_closes(facts.entries, model)
    };
    let closed = (closes.into_iter())
        .find(|(r, at)| *at >= from.search_ms && from.matches(who, facts.marks, r))
        .map(|(_, at)| (at, 0.0));
    match (sampled, closed) {
        (Some(s), Some(c)) => Some(if c.0 <= s.0 { c } else { s }),
        (s, c) => s.or(c),
    }
}

/// [`seen_from_outside`] in the samples (pg_locks, the gauges).
fn seen_in_samples(kind: EventKind, who: &Who, from: &Origin, facts: &Facts) -> Option<(f64, f64)> {
    // Each holder with its backend: the same replica granted again on a new session (after a
    // server restart, which leaves no sample between the two) is a new acquisition.
    let (mut holders, mut locks_ms): (Vec<(i32, &String)>, Option<f64>) = (Vec::new(), None);
    let mut last_gauge: BTreeMap<&String, (i64, f64)> = BTreeMap::new();
    for e in facts.entries {
        let due = e.t_ms >= from.search_ms;
        match (kind, &e.what) {
            (EventKind::Acquired, What::Locks { rows }) => {
                let now: Vec<(i32, &String)> =
                    rows.iter().filter(|r| r.1).map(|r| (r.0, &r.2)).collect();
                let new = (now.iter())
                    .find(|h| !holders.contains(h) && from.matches(who, facts.marks, h.1));
                if let (true, Some(_)) = (due, new) {
                    return Some((e.t_ms, e.t_ms - locks_ms.unwrap_or(e.t_ms)));
                }
                (holders, locks_ms) = (now, Some(e.t_ms));
            }
            (EventKind::Demoted, What::Gauges { values, asked_ms }) => {
                for (r, v) in values {
                    let Some(v) = *v else { continue };
                    if let Some((1, asked_before)) = last_gauge.get(r).copied() {
                        if due && v == 0 && from.matches(who, facts.marks, r) {
                            return Some((e.t_ms, e.t_ms - asked_before));
                        }
                    }
                    last_gauge.insert(r, (v, asked_ms.unwrap_or(e.t_ms)));
                }
            }
            _ => {}
        }
    }
    None
}

/// When the grant that an `acquired` event `e` reports was answered on the wire: the latest
/// lock session of its replica granted at or before the event, with no other event of that
/// replica's terms in between (else the event reports another grant). The grant is when the
/// replica acquired; its own event follows by however long the program, and reading its output,
/// take under the machine's load, which is no part of a bound on the election. `None`: another
/// event, the wire not tapped, or no such grant (the event's own time is what there is).
fn granted_before(e: &Entry, facts: &Facts, model: &WireModel) -> Option<f64> {
    let What::Replica { replica, event } = &e.what else {
        return None;
    };
    if event.kind() != EventKind::Acquired || !facts.wire.tapped {
        return None;
    }
    let at = (model.sessions.iter())
        .filter(|l| &l.replica == replica && l.granted_ms <= e.t_ms)
        .map(|l| l.granted_ms)
        .max_by(f64::total_cmp)?;
    let between = (facts.entries.iter())
        .filter(|x| x.t_ms >= at && x.t_ms < e.t_ms)
        .any(|x| match &x.what {
            What::Replica { replica: r, event } => {
                r == replica && matches!(event.kind(), EventKind::Acquired | EventKind::Demoted)
            }
            _ => false,
        });
    (!between).then_some(at)
}

/// Whether entry `e` is what an event expectation awaits.
fn observed(e: &Entry, awaited: Awaited, who: &Who, from: &Origin, marks: &Marks) -> bool {
    match (awaited, &e.what) {
        // The rows the target held when the step began are gone; where it held none, it
        // holds no row at all.
        (Awaited::LockReleased, What::Locks { rows }) if !from.held.is_empty() => {
            !rows.iter().any(|r| r.1 && from.held.contains(&r.0))
        }
        (Awaited::LockReleased, What::Locks { rows }) => {
            let target = from.mark.map(|m| &m.target);
            !rows.iter().any(|r| r.1 && Some(&r.2) == target)
        }
        (
            Awaited::Unlocked,
            What::LockLeft {
                replica,
                backend_alive,
                ..
            },
        ) => *backend_alive && from.mark.is_some_and(|m| &m.target == replica),
        (
            Awaited::TimedOut,
            What::Wire {
                replica,
                event: wiretap::WireEvent::ServerError { code, .. },
                ..
            },
        ) => code == Awaited::IDLE_SESSION_TIMEOUT && from.matches(who, marks, replica),
        (Awaited::Exited, What::Exited { replica, code, .. }) => {
            *code == Some(0) && from.matches(who, marks, replica)
        }
        (Awaited::Event(kind), What::Replica { replica, event }) => {
            event.kind() == kind && from.matches(who, marks, replica)
        }
        _ => false,
    }
}

/// How `who` ended instead of an exit with status 0 after the origin, for the message: by a
/// signal (the harness's SIGKILL when it did not end within the run), or another status.
fn other_exit(who: &Who, from: &Origin, facts: &Facts) -> String {
    let seen = (facts.entries.iter()).find_map(|e| match &e.what {
        What::Exited {
            replica,
            code,
            signal,
        } if e.t_ms >= from.search_ms && from.matches(who, facts.marks, replica) => {
            Some((e.t_ms, *code, *signal))
        }
        _ => None,
    });
    let after = |at: f64| in_t(at - from.from_ms, facts.bounds.t);
    match seen {
        Some((at, Some(code), _)) => format!("; it exited with status {code} {} later", after(at)),
        Some((at, _, Some(9))) => format!(
            "; it did not exit until the harness's SIGKILL, {} later",
            after(at)
        ),
        Some((at, _, Some(signal))) => {
            format!("; it was ended by signal {signal} {} later", after(at))
        }
        _ => "; it did not exit within the run".to_owned(),
    }
}
