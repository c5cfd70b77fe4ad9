//! `Elector::run`: the election loop (spec: "Run"; RUN-1..RUN-8).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use deadpool_postgres::Object;
use tokio::time::{interval, timeout, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::config::IDLE_SESSION_INTERVALS;
use crate::elector::Inner;
use crate::session::LockSession;
use crate::{sql, Elector, Error};

impl Elector {
    /// Takes part in the election until `shutdown` is cancelled (spec: `Run`).
    ///
    /// Checks once at once and then every T (RUN-1). A standby borrows a pooled connection and
    /// tries the lock on it; a refused connection goes back unchanged (RUN-2), a granted one is
    /// detached from the pool and a term begins (RUN-3). A failed acquire or query is logged at
    /// WARN as `leader: acquire lock connection: <cause>` and retried at the next check; it never
    /// ends `run` (RUN-4). The leader runs `SELECT 1` every T and demotes itself when it fails or
    /// stays unanswered for T (RUN-5). On cancellation it unlocks under a 2 s deadline of its
    /// own, closes the connection, ends the term and returns `Ok(())` (RUN-6).
    ///
    /// A panic that unwinds `run`, and dropping the `run` future, end the term with
    /// `LeadershipLost` and close the lock connection without unlocking (RUN-7). Dropping the
    /// future is therefore safe but abrupt; cancel `shutdown` for a graceful release.
    ///
    /// # Errors
    /// Only [`Error::AlreadyRunning`], at once, when another `run` of this elector is in
    /// progress (RUN-8). `run` may be called again once the earlier one returned or panicked.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<(), Error> {
        let _running = Running::enter(&self.inner)?;
        let inner = &self.inner;
        let mut ticks = interval(inner.interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let mut held: Option<LockSession> = None;
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                _ = ticks.tick() => {}
            }
            held = match held.take() {
                None => try_acquire(inner).await,
                Some(session) => {
                    let checked = tokio::select! {
                        biased;
                        () = shutdown.cancelled() => None,
                        r = session.check() => Some(r),
                    };
                    match checked {
                        None => {
                            held = Some(session);
                            break;
                        }
                        Some(Ok(())) => {
                            tracing::trace!(
                                term = session.term_number(),
                                "background leader check passed"
                            );
                            Some(session)
                        }
                        Some(Err(e)) => {
                            session.demote(&e);
                            None
                        }
                    }
                }
            };
        }
        if let Some(session) = held {
            session.release().await;
        }
        Ok(())
    }
}

/// RUN-8: marks the elector as running; the mark goes when `run` returns, panics or is dropped.
struct Running(Arc<Inner>);

impl Running {
    fn enter(inner: &Arc<Inner>) -> Result<Self, Error> {
        inner
            .running
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .map_err(|_| Error::AlreadyRunning)?;
        Ok(Self(inner.clone()))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::SeqCst);
    }
}

/// A standby's check: one `pg_try_advisory_lock` on a borrowed connection, bounded by T.
async fn try_acquire(inner: &Arc<Inner>) -> Option<LockSession> {
    match try_lock(inner).await {
        Ok(Some(session)) => {
            let timeout = inner.interval * IDLE_SESSION_INTERVALS;
            match session.set_idle_session_timeout(timeout).await {
                Ok(()) => {}
                Err(Error::Db(e)) if e.code().map(|c| c.code()) == Some(sql::UNDEFINED_OBJECT) => {
                    tracing::warn!(error = %e,
                        "idle_session_timeout is not supported by this server (PostgreSQL 13 or \
                         older): an orphaned lock session is bounded only by TCP keepalives");
                }
                Err(e) => {
                    session.demote(&e);
                    return None;
                }
            }
            tracing::info!(
                term = session.term_number(),
                backend_pid = session.backend_pid,
                "background leader lock acquired"
            );
            Some(session)
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(error = %e, "leader: acquire lock connection: {e}");
            None
        }
    }
}

/// Tries the lock once. `Ok(None)`: another session holds it and the connection went back to the
/// pool unchanged. On any error or timeout the connection is detached and closed, since its state
/// is unknown (a late grant then dies with the session).
async fn try_lock(inner: &Arc<Inner>) -> Result<Option<LockSession>, Error> {
    let t = inner.interval;
    let conn = timeout(t, inner.pool.get())
        .await
        .map_err(|_| Error::Timeout(t))??;
    let attempt = if inner.detect_shared_session {
        sql::TRY_LOCK
    } else {
        sql::TRY_LOCK_UNGUARDED
    };
    let answer = match timeout(t, conn.simple_query(attempt)).await {
        Ok(Ok(messages)) => messages,
        Ok(Err(e)) => {
            drop(Object::take(conn));
            return Err(e.into());
        }
        Err(_) => {
            drop(Object::take(conn));
            return Err(Error::Timeout(t));
        }
    };
    let row = answer.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(row) => Some((
            row.get(0).unwrap_or_default().to_owned(),
            row.get(1)
                .and_then(|p| p.parse::<i32>().ok())
                .unwrap_or_default(),
        )),
        _ => None,
    });
    match row {
        Some((outcome, pid)) if outcome == "granted" => {
            Ok(Some(LockSession::begin(inner, Object::take(conn), pid)))
        }
        Some((outcome, pid)) if outcome == "refused" => {
            tracing::debug!(backend_pid = pid, "background leader lock held elsewhere");
            Ok(None)
        }
        Some((outcome, _)) if outcome == "shared" => Err(Error::SharedSession),
        other => {
            drop(Object::take(conn));
            Err(Error::Protocol(format!("{other:?} to the lock attempt")))
        }
    }
}
