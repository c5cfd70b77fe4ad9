//! Expectations decided or timed on the wire, from the grants the replicas' lock calls were
//! answered ([`WireModel`]): how many replicas held one at once
//! ([`GrantedAtOnce`](super::Expect::GrantedAtOnce)), when an acquisition pg_locks showed
//! was granted, and the tokens the terms drew (X-FENCE,
//! [`FenceTokensRise`](super::Expect::FenceTokensRise)).

use super::{check, Facts, Origin, Who};
use crate::check::wire::model::{grants_held, sampled_until, LockSession, WireModel};
use crate::check::wire::sql::FENCE_SEQUENCE;
use crate::check::{in_t, Check, Measure, Unit, Verdict};
use wiretap::Closer;

/// An acquisition pg_locks showed at `sampled.0` (seen up to `sampled.1` late), timed by the
/// wire where the proxies kept a journal: the answer of the lock call that granted it, within
/// the sampling period around the sample (the server grants before its answer reaches the
/// proxy, so a sample can show the row first), with no sampling error.
pub(super) fn grant_answered_on_the_wire(
    sampled: (f64, f64),
    who: &Who,
    from: &Origin,
    facts: &Facts,
    model: &WireModel,
) -> Option<(f64, f64)> {
    if !facts.wire.tapped {
        return None;
    }
    let (at, error) = sampled;
    (model.sessions.iter())
        .filter(|l| from.matches(who, facts.marks, &l.replica))
        .filter(|l| (at - error..=at + error.max(1.0)).contains(&l.granted_ms))
        .min_by(|a, b| {
            (at - a.granted_ms)
                .abs()
                .total_cmp(&(at - b.granted_ms).abs())
        })
        .map(|l| (l.granted_ms, 0.0))
}

/// [`Expect::GrantedAtOnce`](super::Expect::GrantedAtOnce): the most replicas that held a grant
/// at one moment, on the wire.
pub(super) fn granted_at_once(n: usize, facts: &Facts, model: &WireModel) -> Check {
    let held = grants_held(&model.conns);
    // Sweep the moments a grant began: who held one then.
    let mut best: (usize, f64, Vec<&str>) = (0, 0.0, Vec::new());
    for (_, from, _) in &held {
        let mut who: Vec<&str> = (held.iter())
            .filter(|(_, f, to)| f <= from && to.is_none_or(|t| *from < t))
            .map(|(r, ..)| r.as_str())
            .collect();
        who.sort_unstable();
        who.dedup();
        if who.len() > best.0 {
            best = (who.len(), *from, who);
        }
    }
    let (max, at, who) = best;
    let verdict = if max >= n {
        Verdict::Valid
    } else {
        Verdict::Invalid
    };
    let message = match max {
        0 => "no replica was granted the lock on the wire".to_owned(),
        1 => format!(
            "never more than one replica held a grant at once ({} grants in all): a program with POOL-1's guard refuses the shared session, and must turn it off when told REPLICA_SHARED_SESSION_GUARD=0, as here",
            held.len()
        ),
        _ => format!(
            "{} held grants at once from {}",
            who.join(" and "),
            in_t(at, facts.bounds.t)
        ),
    };
    check(format!("{n} replicas granted at once"), verdict, message)
        .figure("most replicas granted at once", max.to_string())
        .with_measures(Some(Measure::at_least(
            "replicas granted at once".into(),
            Some(max as f64),
            n as f64,
            Unit::Count,
        )))
}

/// [`Expect::FenceTokensRise`](super::Expect::FenceTokensRise): the lock sessions in the order
/// of their grants, each with the token drawn on it, rising. A term without one (no draw from
/// the sequence on its lock session: a token counted by the program itself, or read with
/// `currval` or `last_value` instead of drawn), or one not above the term's before, fails.
pub(super) fn fence_tokens_rise(n: usize, facts: &Facts, model: &WireModel) -> Check {
    let mut terms: Vec<&LockSession> = model.sessions.iter().collect();
    terms.sort_by(|a, b| a.granted_ms.total_cmp(&b.granted_ms));
    let t = facts.bounds.t;
    let term = |s: &LockSession| format!("{}'s term from {}", s.replica, in_t(s.granted_ms, t));
    let missing = terms.iter().find(|s| s.token.is_none());
    let fell = (terms.windows(2))
        .find(|w| matches!((w[0].token, w[1].token), (Some(a), Some(b)) if b <= a));
    let (verdict, message) = match (missing, fell) {
        (Some(s), _) => (
            Verdict::Invalid,
            format!(
                "{} drew no token from {FENCE_SEQUENCE} on its lock session",
                term(s)
            ),
        ),
        (None, Some(w)) => (
            Verdict::Invalid,
            format!(
                "{} drew {:?}, not above {} ({:?})",
                term(w[1]),
                w[1].token,
                term(w[0]),
                w[0].token
            ),
        ),
        (None, None) if terms.len() < n => (
            Verdict::Invalid,
            format!("{} term(s) on the wire, fewer than {n}", terms.len()),
        ),
        (None, None) => (
            Verdict::Valid,
            format!(
                "{} terms, tokens {}",
                terms.len(),
                (terms.iter().filter_map(|s| s.token))
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join(" < ")
            ),
        ),
    };
    check(
        format!("fencing tokens rise over {n} terms"),
        verdict,
        message,
    )
    .with_measures(Some(Measure::at_least(
        "terms on the wire".into(),
        Some(terms.len() as f64),
        n as f64,
        Unit::Count,
    )))
}

/// [`Expect::PoolRecycled`](super::Expect::PoolRecycled): for each replica, the connections it
/// closed itself, before the harness stopped watching, that never held the lock: what its pool
/// retired. The fewest of any replica must reach `n`.
pub(super) fn pool_recycled(n: usize, facts: &Facts, model: &WireModel) -> Check {
    let until = sampled_until(facts.entries);
    let locked: std::collections::BTreeSet<usize> = model.sessions.iter().map(|s| s.conn).collect();
    let mut retired: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for (i, c) in model.conns.iter().enumerate() {
        let count = retired.entry(c.replica.as_str()).or_default();
        if !locked.contains(&i) && matches!(c.closed, Some((at, Closer::Client, _)) if at <= until)
        {
            *count += 1;
        }
    }
    let fewest = retired.iter().min_by_key(|(_, k)| **k);
    let verdict = match fewest {
        Some((_, k)) if *k >= n => Verdict::Valid,
        _ => Verdict::Invalid,
    };
    let message = match fewest {
        None => "no replica connection on the wire".to_owned(),
        Some((r, k)) if *k < n => format!(
            "{r} retired {k} pooled connection(s), fewer than {n}: the program did not honour \
             REPLICA_POOL_MAX_LIFETIME_MS, so the lock connection's independence from the pool \
             was not put to the test"
        ),
        Some(_) => (retired.iter())
            .map(|(r, k)| format!("{r} retired {k}"))
            .collect::<Vec<_>>()
            .join(", "),
    };
    check(
        format!("each pool retired at least {n} connection(s)"),
        verdict,
        message,
    )
    .with_measures(Some(Measure::at_least(
        "pooled connections retired (fewest)".into(),
        fewest.map(|(_, k)| *k as f64),
        n as f64,
        Unit::Count,
    )))
}
