//! Expectations on what a replica says of itself: its `/readyz`
//! ([`Readyz`](super::Expect::Readyz), [`ReadyzSays`](super::Expect::ReadyzSays)) and its log
//! ([`Log`](super::Expect::Log)).

use super::{check, ms, Facts, Origin, Who};
use crate::check::log_level::LogLevel;
use crate::check::{in_t, Check, Verdict};
use crate::span::Span;
use crate::timeline::What;

pub(super) fn readyz(status: u16, who: &Who, after: Option<&String>, facts: &Facts) -> Check {
    let from = Origin::of(after, facts.marks);
    let seen = facts.entries.iter().find(|e| {
        e.t_ms >= from.search_ms
            && matches!(&e.what, What::Readiness { status: s, .. }
                if s.iter().any(|(r, s)| from.matches(who, facts.marks, r) && *s == Some(status)))
    });
    let name = format!("/readyz of {who} answers {status}");
    let Some(e) = seen else {
        return check(name, Verdict::Invalid, "never seen".into());
    };
    let delay = in_t((e.t_ms - from.from_ms).max(0.0), facts.bounds.t);
    check(name, Verdict::Valid, "seen".into()).figure(&format!("{status} after"), delay)
}

pub(super) fn readyz_says(text: &str, who: &Who, after: Option<&String>, facts: &Facts) -> Check {
    let from = Origin::of(after, facts.marks);
    let seen = facts.entries.iter().find_map(|e| match &e.what {
        What::Readiness { failing, .. } if e.t_ms >= from.search_ms => failing
            .iter()
            .filter(|(r, _)| from.matches(who, facts.marks, r))
            .flat_map(|(_, checks)| checks)
            .find(|check| check.contains(text))
            .map(|check| (e.t_ms, check.clone())),
        _ => None,
    });
    let name = format!("/readyz of {who} reports {text:?}");
    let Some((t_ms, said)) = seen else {
        return check(name, Verdict::Invalid, "never reported".into());
    };
    let delay = in_t((t_ms - from.from_ms).max(0.0), facts.bounds.t);
    check(name, Verdict::Valid, format!("reported {said:?}")).figure("reported after", delay)
}

pub(super) fn log(
    texts: &[String],
    who: &Who,
    after: Option<&String>,
    within: Option<Span>,
    facts: &Facts,
) -> Check {
    let from = Origin::of(after, facts.marks);
    let b = &facts.bounds;
    let slack_ms = b.slack.as_secs_f64() * 1000.0;
    let until_ms = ms(&within, b).map(|w| from.from_ms + w + slack_ms);
    let window = match (after, within) {
        (Some(a), Some(w)) => format!(" within {w} after {a}"),
        (Some(a), None) => format!(" after {a}"),
        (None, Some(w)) => format!(" within {w} of the start"),
        (None, None) => String::new(),
    };
    let name = format!("log of {who} has a line with {texts:?}{window}");
    let found = (facts.entries.iter()).find_map(|e| match &e.what {
        What::Log { replica, line }
            if e.t_ms >= from.search_ms
                && until_ms.is_none_or(|u| e.t_ms <= u)
                && from.matches(who, facts.marks, replica)
                && texts.iter().all(|t| has(line, t)) =>
        {
            Some((e.t_ms, replica, line))
        }
        _ => None,
    });
    match found {
        Some((at, replica, line)) => {
            let step = after.map_or("the start", String::as_str);
            let when = if at < from.from_ms {
                format!(
                    "while {step} ran, {} after it began",
                    in_t(at - from.search_ms, b.t)
                )
            } else {
                format!("{} after {step}", in_t(at - from.from_ms, b.t))
            };
            check(
                name,
                Verdict::Valid,
                format!("{replica}'s, {when}: {}", line.trim()),
            )
        }
        None => {
            let logs: Vec<String> = (facts.logs.iter())
                .filter(|(r, _)| from.matches(who, facts.marks, r))
                .map(|(_, log)| log.path.display().to_string())
                .collect();
            let message = format!("no such line{window} in {}", logs.join(", "));
            check(name, Verdict::Invalid, message)
        }
    }
}

/// Whether `line` has `text`: a level in capitals (`WARN`, `ERROR`) asks for the line's level
/// ([`LogLevel::of`]: `level=warning`, `"level":"warn"`, `"level":40` and the plain `WARN`
/// alike), any other text for itself.
fn has(line: &str, text: &str) -> bool {
    let level = (text == text.to_uppercase())
        .then(|| LogLevel::named(text))
        .flatten();
    match level {
        Some(level) => LogLevel::of(line) == Some(level),
        None => line.contains(text),
    }
}
