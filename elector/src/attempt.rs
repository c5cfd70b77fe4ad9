//! What the granting statement answered (spec: "The lock key"; `sql::try_lock` for a standby's
//! polled attempt, `sql::wait_lock` for a queued one, X-WAKE): one row of the outcome, the
//! backend's pid and, for a fencing elector, the term's token; and which polled attempt a
//! server is sent ([`Attempts`], X-PGVER).

use std::sync::OnceLock;

use crate::Error;

/// A standby's polled attempt for each kind of server, and the one this elector's server needs,
/// once its first check learned which it is (X-PGVER). A server with `idle_session_timeout`
/// (14 and later) is sent [`crate::sql::try_lock`], at the cost of the spec's bare call; an
/// older one [`crate::sql::try_lock_pre14`], whose refusal also reaps an orphaned lock session.
pub(crate) struct Attempts {
    /// For PostgreSQL 14 and later.
    bounded: String,
    /// For PostgreSQL 13 and older.
    pre14: String,
    /// The first check's: [`Self::pre14`] (right on every server) and the version question, in
    /// one simple-protocol message, so that learning the version costs no round trip of its own.
    first: String,
    /// Whether the server is older than 14, learned once.
    pre14_server: OnceLock<bool>,
}

impl Attempts {
    /// Both statements, with the orphaned-session bound `bound_ms`, the guard, the identity and,
    /// when `fencing`, the term's token ([`crate::sql::fenced`]).
    pub(crate) fn new(bound_ms: u32, guarded: bool, identity: Option<&str>, fencing: bool) -> Self {
        let pre14 = fenced_if(
            crate::sql::try_lock_pre14(bound_ms, guarded, identity),
            fencing,
        );
        Self {
            bounded: fenced_if(crate::sql::try_lock(bound_ms, guarded, identity), fencing),
            first: format!("{pre14}; {}", crate::sql::SERVER_VERSION),
            pre14,
            pre14_server: OnceLock::new(),
        }
    }

    /// The statement to send: the one this elector's server needs once its version is known;
    /// before that, the pre-14 statement followed by the version question (the answer's first
    /// row is still the attempt's).
    pub(crate) fn statement(&self) -> &str {
        match self.pre14_server.get() {
            Some(&pre14) => self.pick(pre14),
            None => &self.first,
        }
    }

    /// Learns the server's version, once, from the answer to [`Self::statement`] while it is
    /// unknown: the first row after the attempt's own.
    pub(crate) fn learn(&self, messages: &[tokio_postgres::SimpleQueryMessage]) {
        use tokio_postgres::SimpleQueryMessage::{CommandComplete, Row};
        if self.pre14_server.get().is_some() {
            return;
        }
        let version = (messages.iter())
            .skip_while(|m| !matches!(m, CommandComplete(_)))
            .find_map(|m| match m {
                Row(row) => row.get(0).and_then(|v| v.trim().parse::<u32>().ok()),
                _ => None,
            });
        match version {
            Some(v) => {
                let _ = (self.pre14_server).set(v < crate::sql::IDLE_SESSION_TIMEOUT_SINCE);
            }
            None => tracing::debug!("background leader: the server's version was not answered"),
        }
    }

    fn pick(&self, pre14: bool) -> &str {
        if pre14 {
            &self.pre14
        } else {
            &self.bounded
        }
    }
}

/// A standby's attempt (the spec's statement with the guard, identity and bound, polled
/// ([`crate::sql::try_lock`]) or queued ([`crate::sql::wait_lock`])), and with fencing, the
/// term's token drawn on a grant ([`crate::sql::fenced`]).
pub(crate) fn fenced_if(statement: String, fencing: bool) -> String {
    if fencing {
        crate::sql::fenced(&statement)
    } else {
        statement
    }
}

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
    /// POOL-1: this session held the key, and no leader had checked on it for the orphan bound
    /// (a transaction-mode pooler's session whose leader is gone); this attempt unlocked it
    /// there (the key is free for the next one).
    Freed,
}

/// Reads an attempt's answer (`fencing`: the elector fences, so a grant must carry its
/// token); anything else than one of the outcomes is a protocol error.
pub(crate) fn answer(
    fencing: bool,
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
    let fenced = |fence: Option<i64>| !fencing || fence.is_some();
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
        Some((outcome, _, _)) if outcome == "freed" => Ok(Answer::Freed),
        other => Err(Error::Protocol(format!("{other:?} to the lock attempt"))),
    }
}
