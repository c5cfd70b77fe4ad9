//! The held lock session: the one connection a leader keeps for its whole term (spec: "Session
//! connection requirement", "Demotion and the overlap window"; SESS-1, SESS-2, DEM-1, RUN-6,
//! RUN-7).
//!
//! A [`LockSession`] exists exactly while a term is live. It ends the term in each of its three
//! ways out: [`LockSession::demote`] (a failed check), [`LockSession::release`] (shutdown), and
//! `Drop` (a panic unwinding `run`, or the `run` future dropped), so no path can leave a lock
//! that no check verifies any more.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::ClientWrapper;
use tokio_postgres::SimpleQueryMessage;

use crate::config::UNLOCK_DEADLINE;
use crate::elector::Inner;
use crate::term::{TermCause, TermState};
use crate::{sql, Error};

/// The connection that holds the lock, detached from the pool, and the term it carries.
pub(crate) struct LockSession {
    inner: Arc<Inner>,
    /// `Some` until the connection is closed.
    client: Option<ClientWrapper>,
    term: Arc<TermState>,
    /// The server backend's pid, for logs.
    pub(crate) backend_pid: i32,
}

impl LockSession {
    /// RUN-3: the lock was granted on `client` (already taken out of the pool): a term begins.
    pub(crate) fn begin(inner: &Arc<Inner>, client: ClientWrapper, backend_pid: i32) -> Self {
        let number = inner.terms.fetch_add(1, Ordering::SeqCst) + 1;
        let term = TermState::new(number);
        *inner.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(term.clone());
        inner.leader.store(true, Ordering::SeqCst);
        inner.gauge.set(true);
        inner.changes.send_replace(Some(number));
        Self {
            inner: inner.clone(),
            client: Some(client),
            term,
            backend_pid,
        }
    }

    /// The term's number.
    pub(crate) fn term_number(&self) -> u64 {
        self.term.number
    }

    /// Runs one statement on the lock session with a deadline; returns its first column of the
    /// first row, if any.
    pub(crate) async fn query_one_value(
        &self,
        sql: &str,
        deadline: Duration,
    ) -> Result<Option<String>, Error> {
        let client = self.client.as_ref().ok_or(Error::LockGone)?;
        let messages = tokio::time::timeout(deadline, client.simple_query(sql))
            .await
            .map_err(|_| Error::Timeout(deadline))??;
        Ok(first_value(&messages))
    }

    /// ORPH-1: bounds an orphaned lock session to `IDLE_SESSION_INTERVALS`·T of silence.
    pub(crate) async fn set_idle_session_timeout(&self, timeout: Duration) -> Result<(), Error> {
        let sql = sql::set_idle_session_timeout(timeout.as_millis());
        self.query_one_value(&sql, self.inner.interval)
            .await
            .map(|_| ())
    }

    /// RUN-5: the leader's check: `SELECT 1` answered within T (with X-VERIFY, also proof that
    /// this session still holds the key).
    pub(crate) async fn check(&self) -> Result<(), Error> {
        let interval = self.inner.interval;
        if self.inner.verify_lock {
            match self.query_one_value(sql::PING_VERIFY, interval).await? {
                Some(v) if v == "t" => Ok(()),
                Some(v) if v == "f" => Err(Error::LockGone),
                other => Err(Error::Protocol(format!("{other:?} to the lock check"))),
            }
        } else {
            self.query_one_value(sql::PING, interval).await.map(|_| ())
        }
    }

    /// DEM-1: a failed check. In this order: the term ends with `LeadershipLost` (every Term
    /// and Do in flight cancelled, `is_leader` false, gauge 0), the connection is closed, and a
    /// WARN line carries the cause.
    pub(crate) fn demote(mut self, cause: &Error) {
        let (number, pid) = (self.term.number, self.backend_pid);
        self.end_term(TermCause::LeadershipLost);
        self.close();
        tracing::warn!(term = number, backend_pid = pid, error = %cause,
            "background leader lock lost: {cause}");
    }

    /// RUN-6: shutdown. Unlocks under a deadline of its own (the caller's token has already
    /// fired), closes the connection, then ends the term.
    pub(crate) async fn release(mut self) {
        let (number, pid) = (self.term.number, self.backend_pid);
        match self.query_one_value(sql::UNLOCK, UNLOCK_DEADLINE).await {
            Ok(_) => tracing::info!(
                term = number,
                backend_pid = pid,
                "background leader lock released"
            ),
            Err(e) => tracing::warn!(term = number, backend_pid = pid, error = %e,
                "background leader unlock failed; closing the session releases the lock: {e}"),
        }
        self.close();
        self.end_term(TermCause::Released);
    }

    fn end_term(&mut self, cause: TermCause) {
        if self.term.is_ended() {
            return;
        }
        // IsLeader and the gauge turn first, so whoever wakes on the cancelled term sees them.
        self.inner.leader.store(false, Ordering::SeqCst);
        self.inner.gauge.set(false);
        *self.inner.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.term.end(cause);
        self.inner.changes.send_replace(None);
        tracing::debug!(term = self.term.number, cause = %cause, "background leader term ended");
    }

    /// Dropping the client closes the connection: the server ends the session, and with it any
    /// lock the session still holds.
    fn close(&mut self) {
        drop(self.client.take());
        tracing::debug!(
            term = self.term.number,
            "background leader lock connection closed"
        );
    }
}

impl Drop for LockSession {
    /// RUN-7: a panic (or a dropped `run` future) leaves the session mid-way: end the term with
    /// `LeadershipLost` and close without unlocking, since the connection may be mid-query.
    fn drop(&mut self) {
        if self.term.is_ended() && self.client.is_none() {
            return;
        }
        self.end_term(TermCause::LeadershipLost);
        self.close();
        if std::thread::panicking() {
            tracing::warn!(
                term = self.term.number,
                backend_pid = self.backend_pid,
                "background leader lock abandoned after a panic"
            );
        } else {
            tracing::warn!(
                term = self.term.number,
                backend_pid = self.backend_pid,
                "background leader lock abandoned: the run future was dropped"
            );
        }
    }
}

/// The first column of the first row of a simple-protocol answer.
pub(crate) fn first_value(messages: &[SimpleQueryMessage]) -> Option<String> {
    messages.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
        _ => None,
    })
}
