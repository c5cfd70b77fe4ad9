//! [`Handover`](super::Expect::Handover) (X-WAKE): how the key passed from the lock session a
//! named step ended to another replica's, judged on the wire alone.
//!
//! A standby that wakes when the key is let go is granted either by a lock call that was
//! already waiting in the server's queue (sent before the old session ended: it wakes on a
//! crash too), or by one it sent within `within` of a notification the server delivered it
//! after the old session's grant (a `NOTIFY` from the leader that lets go, as the spec has it).
//! A standby that only polls does neither, whatever its timing: its call is sent after the end,
//! at its own pace, with no notification before it. Only the proxies' record enters the
//! judgement, so no step's timing, no `--slack` and no host's load can turn a poll that happens
//! to come soon after the end into a wake-up (measured on the Python example, which polls: its
//! calls after two SIGKILLs came 7 and 17 ms after the end, where the scenario's timing and the
//! example's start-up put them).

use super::{check, Facts};
use crate::check::wire::model::{LockSession, WireModel};
use crate::check::wire::QUEUE;
use crate::check::{in_t, t_of, Check, Measure, Unit, Verdict};
use crate::span::Span;

/// The handover after the step named `after`: the lock session the step's target held when the
/// step began, its end on the wire, and the first session another replica was granted after it.
pub(super) fn handover(after: &str, within: Span, facts: &Facts, model: &WireModel) -> Check {
    let b = &facts.bounds;
    let within_ms = within.at(b.t).as_secs_f64() * 1000.0;
    let name =
        format!("the key passes on at once after {after} (queued, or notified within {within})");
    let (old, ended, new) = match sessions(after, facts, model) {
        Ok(found) => found,
        Err(message) => return check(name, Verdict::Invalid, message),
    };
    let sent = sent_ms(new, model);
    let queued = sent < ended;
    let delay = (new.granted_ms - ended).max(0.0);
    // The last notification delivered to the new holder before its call, since the old grant.
    let notified = (model.conns.iter())
        .filter(|c| c.replica == new.replica)
        .flat_map(|c| c.notified.iter().copied())
        .filter(|n| *n > old.granted_ms && *n <= sent)
        .reduce(f64::max);
    let woken = notified.is_some_and(|n| sent - n <= within_ms);
    // A waiter that gave a queued call up (its `lock_timeout`) and queued again: the end may
    // fall in the gap between the two, and the gap is what it waited out of the queue.
    let requeued = (!queued)
        .then(|| requeued_at(new, ended, model))
        .flatten()
        .filter(|gave_up| sent - gave_up <= within_ms);
    let verdict = if queued || woken || requeued.is_some() {
        Verdict::Valid
    } else {
        Verdict::Invalid
    };
    let how = match (queued, requeued, notified) {
        (true, ..) => format!(
            "its lock call had waited in the server's queue since {} before the end",
            in_t(ended - sent, b.t)
        ),
        (false, Some(gave_up), _) => format!(
            "it had waited in the server's queue since before the end, and queued again {} \
             after giving a call up (its lock timeout)",
            in_t(sent - gave_up, b.t)
        ),
        (false, None, Some(n)) => format!(
            "its lock call was sent {} after the end, {} after a notification reached it",
            in_t(sent - ended, b.t),
            in_t(sent - n, b.t)
        ),
        (false, None, None) => format!(
            "its lock call was sent {} after the end, at its own pace: it was neither queued \
             nor notified",
            in_t(sent - ended, b.t)
        ),
    };
    let bound = if queued {
        String::new()
    } else {
        format!("; bound: {within} after a notification")
    };
    let message = format!(
        "{} was granted {delay:.0} ms ({}) after {}'s lock session ended on the wire: {how}{bound}",
        new.replica,
        in_t(delay, b.t),
        old.replica
    );
    let mut c = check(name, verdict, message);
    c.figures.insert("handover".into(), in_t(delay, b.t));
    // A queued call is granted when the server lets the key go, whatever the host's load, and a
    // poll has no wake-up to be measured from: only a notified call's delay is a measure.
    let wake_up = (requeued.or(notified))
        .filter(|_| !queued)
        .map(|n| sent - n);
    c.with_measures(wake_up.map(|d| measure(d, within_ms, b.t)))
}

/// The lock session the target of step `after` held when the step began, when it ended, and
/// the first session another replica was granted after it; or why there is no handover.
fn sessions<'m>(
    after: &str,
    facts: &Facts,
    model: &'m WireModel,
) -> Result<(&'m LockSession, f64, &'m LockSession), String> {
    let mark = (facts.marks.get(after)).ok_or_else(|| format!("no step named {after:?} ran"))?;
    let old = (model.sessions.iter())
        .filter(|l| l.replica == mark.target && l.granted_ms <= mark.at_ms)
        .filter(|l| l.ended_ms.is_none_or(|end| end >= mark.began_ms))
        .max_by(|a, b| a.granted_ms.total_cmp(&b.granted_ms))
        .ok_or_else(|| {
            let who = &mark.target;
            format!("{who} held no lock session on the wire when {after} began")
        })?;
    let ended =
        (old.ended_ms).ok_or_else(|| format!("{}'s lock session never ended", old.replica))?;
    let new = (model.sessions.iter())
        .filter(|l| l.replica != old.replica && l.granted_ms > old.granted_ms)
        .min_by(|a, b| a.granted_ms.total_cmp(&b.granted_ms))
        .ok_or_else(|| {
            let who = &old.replica;
            format!("no other replica was granted the lock on the wire after {who}'s session ended")
        })?;
    Ok((old, ended, new))
}

/// When the new holder gave up the queued lock call it had sent on the same session before the
/// old one ended (answered with an error: its `lock_timeout`), just before the call that was
/// granted; `None` when the call before that one was no queued call sent before the end.
fn requeued_at(new: &LockSession, ended: f64, model: &WireModel) -> Option<f64> {
    let c = model.conns.get(new.conn)?;
    let before = (c.statements.get(..new.grant)?.iter().rev()).find(|s| s.locks())?;
    let queue = (before.reading.as_ref()).is_ok_and(|r| r.calls_to(QUEUE).count() > 0);
    let (gave_up, _) = before.answer.as_ref()?;
    (queue && !before.succeeded() && before.sent_ms < ended).then_some(*gave_up)
}

/// When the lock call that granted `session` was sent.
fn sent_ms(session: &LockSession, model: &WireModel) -> f64 {
    (model.conns.get(session.conn))
        .and_then(|c| c.statements.get(session.grant))
        .map_or(session.granted_ms, |s| s.sent_ms)
}

/// A notified call's delay from its notification, against `within`.
fn measure(delay_ms: f64, within_ms: f64, t: std::time::Duration) -> Measure {
    Measure::at_most(
        "lock call after the notification".into(),
        Some(t_of(delay_ms, t)),
        t_of(within_ms, t),
        Unit::T,
    )
}
