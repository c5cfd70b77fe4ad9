//! What the granting statement answered (spec: "The lock key"; `sql::try_lock` for a standby's
//! polled attempt, `sql::wait_lock` for a queued one, X-WAKE): one row of the outcome, the
//! backend's pid and, for a fencing elector, the term's token.

use crate::elector::Inner;
use crate::Error;

/// What an attempt answered.
pub(crate) enum Answer {
    /// The key was granted to backend `pid`; `bounded` when the server took the bound; `fence`,
    /// the term's token (X-FENCE).
    Granted {
        pid: i32,
        bounded: bool,
        fence: Option<i64>,
    },
    /// Another session holds the key.
    Refused,
    /// X-PGVER: another session held the key and had sat idle too long on a server without
    /// `idle_session_timeout`; this attempt ended it (the key is free for the next one).
    Reaped,
    /// This session already holds the key (POOL-1).
    Shared,
}

/// Reads an attempt's answer; anything else than one of the three is a protocol error.
pub(crate) fn answer(
    inner: &Inner,
    messages: &[tokio_postgres::SimpleQueryMessage],
) -> Result<Answer, Error> {
    let row = messages.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(row) => Some((
            row.get(0).unwrap_or_default().to_owned(),
            row.get(1).and_then(|p| p.parse::<i32>().ok()),
            // Only a fencing elector's attempt has the column (`get` would panic without it).
            (row.try_get(2).ok().flatten()).and_then(|f| f.parse::<i64>().ok()),
        )),
        _ => None,
    });
    // X-FENCE: a fencing elector's grant carries its token.
    let fenced = |fence: Option<i64>| inner.fence.is_none() || fence.is_some();
    match row {
        Some((outcome, Some(pid), fence))
            if (outcome == "granted" || outcome == "unbounded") && fenced(fence) =>
        {
            Ok(Answer::Granted {
                pid,
                bounded: outcome == "granted",
                fence,
            })
        }
        Some((outcome, _, _)) if outcome == "refused" => Ok(Answer::Refused),
        Some((outcome, _, _)) if outcome == "reaped" => Ok(Answer::Reaped),
        Some((outcome, _, _)) if outcome == "shared" => Ok(Answer::Shared),
        other => Err(Error::Protocol(format!("{other:?} to the lock attempt"))),
    }
}
