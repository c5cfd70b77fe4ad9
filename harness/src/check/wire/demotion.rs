//! DEM-1's order, where the outside can see it: "It then: 1. ends the term with cause
//! ErrLeadershipLost, which … sets the gauge to 0; 2. closes the connection; 3. logs a WARN line
//! with the ping error." The wire shows the failed check and the replica's close; the gauge
//! samplers show the term still running after that close; the log shows a WARN line written
//! well before it.
//!
//! Each part judges only what no interleaving of a correct program can show:
//! - **the gauge after the close.** A reading asked for after the proxy saw the replica close
//!   its lock connection reflects the replica's state after that close (the proxy stamps a close
//!   when the client's FIN reaches it, after the replica's own close, on the same monotonic
//!   clock as the samplers), so a 1 there, before any new grant of that replica, is a term that
//!   outlived its connection. No tolerance is needed for it.
//! - **the WARN line before the close.** A log line is stamped when the harness reads it, never
//!   before it was written, but the close's stamp may lag the close. A replica whose only WARN
//!   lines around its demotion were read between the failed check and [`WARN_EARLY_T`] before
//!   the close, none within that allowance of the close, wrote its WARN that much before it. A
//!   correct program writes its WARN a few microseconds after its close, so a WARN line of other
//!   work written before (a loop tick that failed on the same bad link) does not count against
//!   it.
//!
//! Only a close the replica made itself after a failed check on its lock session (an error,
//! or no answer within T) is judged: a session the server or a fault ended is noticed at the
//! replica's next check, and a release (an unlock sent) is RUN-6's.

use wiretap::Closer;

use super::lock_session::{held_statements, visible_sessions as visible};
use super::model::LockSession;
use super::Wire;
use crate::check::{count_at_most, in_t, ms_of, verdict_of, Check};

/// How long before the close a WARN line must have been read to count as written before it,
/// as a share of T: the close's stamp lags the close by the proxy's scheduling (under a
/// millisecond on an idle machine, some milliseconds on a loaded one), and a correct program's
/// check deadline may fire late by as much. A quarter of T (50 ms at the suite's T), small
/// against the program that logs first and closes a full T later.
pub const WARN_EARLY_T: f64 = 0.25;

/// One gauge reading of a replica: the value shows the replica at some moment between
/// `asked_ms` and `read_ms`.
#[derive(Clone, Debug, PartialEq)]
pub struct GaugeRead {
    /// The replica.
    pub replica: String,
    /// At or before when it was asked for (ms): a sample's oldest ask.
    pub asked_ms: f64,
    /// When the sample that carries it was recorded (ms): after its answer came.
    pub read_ms: f64,
    /// The value.
    pub value: i64,
}

/// When `l` failed a check and then closed its connection itself: `(failed_at, closed_at)`,
/// the last failed check before the close (a program that let one pass demotes at a later one:
/// RUN-5's and the close's checks judge that; a line it wrote in between is not this order's).
/// A check's failure is where the wire puts it, T after the proxy read it: the program's own
/// deadline started before it sent the check, so its close may come a little before that; up
/// to the run's slack is allowed.
fn demoted(w: &Wire, l: &LockSession) -> Option<(f64, f64)> {
    let (t, slack) = (ms_of(w.b.t), ms_of(w.b.slack));
    let c = &w.conns[l.conn];
    let (closed, by, _) = c.closed?;
    if by != Closer::Client || held_statements(w, l).any(|s| s.unlocks()) {
        return None;
    }
    let failed = held_statements(w, l)
        .filter_map(|s| super::leader::failed_at(s, t, slack, w.end_ms))
        .take_while(|f| *f <= closed + slack)
        .last();
    failed.map(|f| (f, closed))
}

/// The readings of `l`'s replica's gauge asked for after `closed` and answered before its next
/// grant reached the proxy, as the wire shows a grant whoever pg_locks showed (the replica
/// learns of a grant after that: a reading of the next term's 1 is no reading of this one).
fn gauge_after<'a>(
    w: &'a Wire,
    l: &'a LockSession,
    closed: f64,
) -> impl Iterator<Item = &'a GaugeRead> {
    let next_grant = (w.conns.iter())
        .filter(|c| c.replica == l.replica)
        .flat_map(|c| &c.statements)
        .filter(|s| s.granted())
        .filter_map(|s| s.answer.as_ref().map(|(at, _)| *at))
        .filter(|at| *at > closed)
        .fold(f64::INFINITY, f64::min);
    (w.gauges.iter())
        .filter(move |g| g.replica == l.replica && g.asked_ms > closed && g.read_ms < next_grant)
}

/// Whether anything shows `l`'s demotion after `failed` and `closed`: a gauge reading after
/// the close, or a WARN line of its replica from the failure on (less the slack, as below).
fn seen(w: &Wire, l: &LockSession, failed: f64, closed: f64) -> bool {
    gauge_after(w, l, closed).next().is_some()
        || (w.warns.iter()).any(|(r, at)| *r == l.replica && *at >= failed - ms_of(w.b.slack))
}

/// What broke the order for `l`, demoted at `failed` and closed at `closed`, if anything.
fn out_of_order(w: &Wire, l: &LockSession, failed: f64, closed: f64) -> Option<String> {
    let leading = gauge_after(w, l, closed).find(|g| g.value >= 1);
    if let Some(g) = leading {
        return Some(format!(
            "{}'s gauge read {} when asked {} after it closed its lock connection at {closed:.0} \
             ms (a failed check at {failed:.0} ms): the term must end before the close",
            l.replica,
            g.value,
            in_t(g.asked_ms - closed, w.b.t)
        ));
    }
    let allowance = WARN_EARLY_T * ms_of(w.b.t);
    let of_replica = |(r, _): &&(String, f64)| *r == l.replica;
    let near_close = |(_, at): &&(String, f64)| (*at - closed).abs() <= allowance;
    if w.warns.iter().filter(of_replica).any(|x| near_close(&x)) {
        return None;
    }
    // The failure as the wire puts it may follow the program's own deadline (see `demoted`).
    let from = failed - ms_of(w.b.slack);
    let early =
        (w.warns.iter().filter(of_replica)).find(|(_, at)| *at >= from && *at < closed - allowance);
    early.map(|(_, at)| {
        format!(
            "{} logged its WARN line at {at:.0} ms, {} before it closed its lock connection at \
             {closed:.0} ms (a failed check at {failed:.0} ms), and none near the close: the \
             WARN comes after the close",
            l.replica,
            in_t(closed - at, w.b.t)
        )
    })
}

/// DEM-1, the order of a demotion: the term ends (the gauge reads 0) before the replica closes
/// its lock connection, and the WARN line comes after that close.
pub(super) fn demotion_in_order(w: &Wire) -> Check {
    let (mut n, mut bad) = (0usize, Vec::new());
    for l in visible(w) {
        let Some((failed, closed)) = demoted(w, l).filter(|(f, c)| seen(w, l, *f, *c)) else {
            continue;
        };
        n += 1;
        bad.extend(out_of_order(w, l, failed, closed));
    }
    let message = match bad.first() {
        None => format!(
            "{n} demotions closed by the replica, each with its term ended before the close and \
             no WARN line long before it"
        ),
        Some(first) => first.clone(),
    };
    Check::new(
        "the demotion's order",
        &["DEM-1"],
        verdict_of(n, bad.is_empty()),
        message,
    )
    .with_measures(count_at_most("demotions out of order", n, bad.len(), 0))
}
