//! The connections of the election (spec: "Session connection requirement", "Demotion and the
//! overlap window", "Bound on an orphaned lock session"; RUN-2, RUN-3, SESS-1, SESS-2, DEM-1,
//! ORPH-1, RUN-6, RUN-7).
//!
//! Ownership does the cleanup; each stage is a type whose drop ends what it began:
//!
//! | stage | type | dropped (a future dropped, an error, a panic) |
//! |---|---|---|
//! | a pooled connection lent to one standby check | [`Loan`] | detached from the pool and closed |
//! | the lock granted with its bound, the term not begun | [`Grant`] | closed: the lock goes with the session |
//! | a live term on the lock session | [`LockSession`] | term ended (abandoned), then closed |
//!
//! Only an answer that proves the session unchanged gives a loan back to the pool (RUN-2); a
//! grant detaches it for good (RUN-3). The statement that wins the grant sets the orphaned-session
//! bound (ORPH-1), so no moment exists where the lock is held without it, term or no term.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use deadpool_postgres::{ClientWrapper, Object};
use tokio::time::Instant;
use tokio_postgres::SimpleQueryMessage;
use tokio_util::task::AbortOnDropHandle;

use crate::config::{PRE14_IDLE_INTERVALS, UNLOCK_DEADLINE};
use crate::elector::Inner;
use crate::leadership::{Abandon, Release, TermEnd, TermInfo};
use crate::term::{TermCause, TermState};
use crate::{sql, Error};

/// Runs `sql` on `client` within `deadline`; returns the answer's messages.
pub(crate) async fn query(
    client: &tokio_postgres::Client,
    sql: &str,
    deadline: Duration,
) -> Result<Vec<SimpleQueryMessage>, Error> {
    tokio::time::timeout(deadline, client.simple_query(sql))
        .await
        .map_err(|_| Error::Timeout(deadline))?
        .map_err(Error::from)
}

/// A pooled connection lent to one standby check (RUN-2).
///
/// While a statement runs, the session's state is unknown: the server may grant the lock after
/// the caller stopped listening. So a loan that is dropped (the check's future dropped, a
/// timeout, an error) detaches its connection from the pool and closes it, and a lock granted
/// meanwhile dies with the session. Only [`Loan::give_back`] returns it to the pool.
pub(crate) struct Loan(Option<Object>);

impl Loan {
    /// Borrows a connection from `pool`, waiting at most `deadline` for it.
    pub(crate) async fn borrow(
        pool: &deadpool_postgres::Pool,
        deadline: Duration,
    ) -> Result<Self, Error> {
        let object = tokio::time::timeout(deadline, pool.get())
            .await
            .map_err(|_| Error::Timeout(deadline))??;
        Ok(Self(Some(object)))
    }

    /// Runs one statement on the lent connection within `deadline`.
    pub(crate) async fn query(
        &self,
        sql: &str,
        deadline: Duration,
    ) -> Result<Vec<SimpleQueryMessage>, Error> {
        let object = self.0.as_ref().ok_or(Error::LockGone)?;
        query(object, sql, deadline).await
    }

    /// The session is as it was lent (the lock was refused): back to the pool, unchanged.
    pub(crate) fn give_back(mut self) {
        drop(self.0.take());
    }

    /// The lock was granted on this session by a statement sent at `sent`, with the
    /// orphaned-session bound set by the same statement unless the server lacks the setting
    /// (`bounded`): detach it from the pool for good (RUN-3).
    pub(crate) fn grant(
        self,
        backend_pid: i32,
        bounded: bool,
        fence: Option<i64>,
        sent: Instant,
    ) -> Result<Grant, Error> {
        Ok(Grant::new(
            self.detach()?,
            backend_pid,
            bounded,
            fence,
            sent,
        ))
    }

    /// Takes the connection out of the pool for good (the pool may open another in its place).
    pub(crate) fn detach(mut self) -> Result<ClientWrapper, Error> {
        let object = self.0.take().ok_or(Error::LockGone)?;
        Ok(Object::take(object))
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        if let Some(object) = self.0.take() {
            drop(Object::take(object));
        }
    }
}

/// The lock, granted on a connection detached from the pool, before its term. The statement
/// that won the grant also set the orphaned-session bound (ORPH-1), so the server ends this
/// session within 4·T of its last statement even if its answer or its close is lost. Dropping
/// it closes the connection, and the lock goes with it.
pub(crate) struct Grant {
    client: ClientWrapper,
    backend_pid: i32,
    /// Whether the server took the bound (PostgreSQL 14 and later).
    bounded: bool,
    /// X-FENCE: the term's fencing token, drawn by the same statement.
    fence: Option<i64>,
    /// When the granting statement was sent: the term's lease runs from it.
    sent: Instant,
}

impl Grant {
    /// The lock, granted on `client` (detached from the pool) to backend `backend_pid` by a
    /// statement sent at `sent`.
    pub(crate) fn new(
        client: ClientWrapper,
        backend_pid: i32,
        bounded: bool,
        fence: Option<i64>,
        sent: Instant,
    ) -> Self {
        Self {
            client,
            backend_pid,
            bounded,
            fence,
            sent,
        }
    }

    /// X-WAKE: a grant that waited in the lock queue was won by a statement sent long before
    /// the server granted it, so its lease cannot run from that sending. One check on the
    /// session, answered within `deadline` by the granted backend, starts the lease from the
    /// check's sending instead (the server counts the bound from the end of the session's last
    /// statement, never earlier). It costs the handover one round trip.
    pub(crate) async fn confirm(mut self, deadline: Duration) -> Result<Self, Error> {
        let sent = Instant::now();
        let answer = first_value(&query(&self.client, sql::PING_SESSION, deadline).await?);
        on_the_lock_session(answer, self.backend_pid)?;
        self.sent = sent;
        Ok(self)
    }

    /// Begins the term, its lease from `sent`. On a server without `idle_session_timeout`
    /// (before PostgreSQL 14) it says so in a WARN line, and the lease is the standbys' idle
    /// limit instead (X-PGVER).
    pub(crate) fn begin(self, inner: &Arc<Inner>) -> LockSession {
        if self.bounded {
            inner.lease.grant(self.sent);
        } else {
            tracing::warn!(
                "idle_session_timeout is not supported by this server (PostgreSQL 13 or \
                 older): the standbys end this lock session once it is idle for \
                 {PRE14_IDLE_INTERVALS}·T, and the term's lease is as long"
            );
            inner.lease.grant_pre14(self.sent);
        }
        LockSession::begin(inner, self.client, self.backend_pid, self.fence)
    }
}

/// The connection that holds the lock, with its bound set, and the term it carries.
pub(crate) struct LockSession {
    inner: Arc<Inner>,
    /// `Some` until the connection is closed.
    client: Option<ClientWrapper>,
    term: Arc<TermState>,
    info: TermInfo,
    /// Ends the term when its lease runs out; aborted with the session.
    _lease_timer: AbortOnDropHandle<()>,
}

impl LockSession {
    /// RUN-3: a term begins on `client`, which holds the lock and its bound, its lease granted.
    fn begin(
        inner: &Arc<Inner>,
        client: ClientWrapper,
        backend_pid: i32,
        fence: Option<i64>,
    ) -> Self {
        let number = inner.terms.fetch_add(1, Ordering::SeqCst) + 1;
        let term = TermState::new(number, fence, inner.lease.clone());
        *inner.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(term.clone());
        inner.leader.store(true, Ordering::SeqCst);
        inner.gauge.set(true);
        let info = TermInfo {
            number,
            since: SystemTime::now(),
            backend_pid,
            fence,
        };
        inner.leadership.began(info.clone());
        let timer = tokio::spawn(lease_timer(inner.clone(), term.clone(), info.clone()));
        Self {
            inner: inner.clone(),
            client: Some(client),
            term,
            info,
            _lease_timer: AbortOnDropHandle::new(timer),
        }
    }

    /// The term's number.
    pub(crate) fn term_number(&self) -> u64 {
        self.info.number
    }

    /// The lock session's backend pid.
    pub(crate) fn backend_pid(&self) -> i32 {
        self.info.backend_pid
    }

    /// Runs one statement on the lock session within `deadline`; returns the first column of
    /// the first row, if any.
    async fn query_one_value(
        &self,
        sql: &str,
        deadline: Duration,
    ) -> Result<Option<String>, Error> {
        let client = self.client.as_ref().ok_or(Error::LockGone)?;
        Ok(first_value(&query(client, sql, deadline).await?))
    }

    /// RUN-5: the leader's check: `SELECT 1` answered within T (with X-VERIFY, also proof that
    /// this session still holds the key). An answer extends the term's lease; a lease that has
    /// run out (the process was frozen or starved for 4·T) fails the check whatever the answer.
    pub(crate) async fn check(&self) -> Result<(), Error> {
        let lease = &self.inner.lease;
        let sent = Instant::now();
        let answered = self.ping().await;
        if answered.is_ok() {
            lease.confirm(sent);
        }
        if lease.run_out() {
            return Err(Error::LeaseRunOut(lease.length()));
        }
        answered
    }

    /// The check's statement and what its answer means.
    ///
    /// With the guard on (POOL-1, the default) the check answers the pid of the backend that
    /// ran it: any other than the lock session's means the check ran on another server session
    /// (a transaction-mode pooler), so this leader cannot tell whether it still holds the lock,
    /// and an answer from there must not extend its lease. With X-VERIFY the check asks whether
    /// the session that ran it holds the key, which covers that case too.
    async fn ping(&self) -> Result<(), Error> {
        let interval = self.inner.interval;
        if self.inner.verify_lock {
            match self.query_one_value(sql::PING_VERIFY, interval).await? {
                Some(v) if v == "t" => Ok(()),
                Some(v) if v == "f" => Err(Error::LockGone),
                other => Err(Error::Protocol(format!("{other:?} to the lock check"))),
            }
        } else if self.inner.guard_session {
            let answer = self.query_one_value(sql::PING_SESSION, interval).await?;
            on_the_lock_session(answer, self.info.backend_pid)
        } else {
            self.query_one_value(sql::PING, interval).await.map(|_| ())
        }
    }

    /// DEM-1: a failed check. In this order: the term ends with `LeadershipLost` (every Term
    /// and Do in flight cancelled, `is_leader` false, gauge 0), and whoever waits on it on this
    /// thread runs; then the connection is closed; then a WARN line carries the cause.
    pub(crate) async fn demote(mut self, cause: &Error) {
        let end = TermEnd::Lost {
            cause: cause.to_string(),
        };
        self.end_term(TermCause::LeadershipLost, end);
        tokio::task::yield_now().await;
        self.close();
        tracing::warn!(term = self.info.number, backend_pid = self.info.backend_pid,
            error = %cause, "background leader lock lost: {cause}");
    }

    /// RUN-6: shutdown. Unlocks under a deadline of its own (the caller's token has already
    /// fired), closes the connection, then ends the term; reports the unlock's outcome.
    ///
    /// An unlock still unanswered after T ends the term then, with [`Release::Slow`], and goes
    /// on under its deadline before the close (a documented deviation from the spec's order):
    /// the server grants the key to a standby the moment it runs the unlock, so waiting for an
    /// answer that a slow link holds back would keep two terms live at once for as long, past
    /// DEM-3's 2·T + one tick (a queued standby, X-WAKE, leads within milliseconds).
    pub(crate) async fn release(mut self) {
        let outcome = {
            let unlock = self.unlock();
            tokio::pin!(unlock);
            tokio::select! {
                outcome = &mut unlock => outcome,
                () = tokio::time::sleep(self.inner.interval) => {
                    end_term(&self.inner, &self.term, &self.info, TermCause::Released,
                        TermEnd::Released(Release::Slow));
                    tracing::warn!(term = self.info.number, backend_pid = self.info.backend_pid,
                        "background leader unlock unanswered after {:?}: the term ended; \
                         waiting for the unlock before the close", self.inner.interval);
                    unlock.await
                }
            }
        };
        let (term, backend_pid) = (self.info.number, self.info.backend_pid);
        match &outcome {
            Unlock::Unlocked => {
                tracing::info!(term, backend_pid, "background leader lock released");
            }
            Unlock::Refused { reason } => tracing::warn!(term, backend_pid, error = %reason,
                "background leader unlock refused: {reason}; closing the session"),
            Unlock::TimedOut => tracing::warn!(
                term,
                backend_pid,
                "background leader unlock timed out after {UNLOCK_DEADLINE:?}; closing the \
                 session releases the lock"
            ),
        }
        self.close();
        self.end_term(TermCause::Released, TermEnd::Released(outcome.into()));
    }

    /// `pg_advisory_unlock` within [`UNLOCK_DEADLINE`], and what came of it.
    async fn unlock(&self) -> Unlock {
        match self.query_one_value(sql::UNLOCK, UNLOCK_DEADLINE).await {
            Ok(Some(v)) if v == "t" => Unlock::Unlocked,
            Ok(other) => Unlock::Refused {
                reason: format!(
                    "pg_advisory_unlock answered {}: the session did not hold the lock",
                    other.as_deref().unwrap_or("nothing")
                ),
            },
            Err(Error::Timeout(_)) => Unlock::TimedOut,
            Err(e) => Unlock::Refused {
                reason: e.to_string(),
            },
        }
    }

    fn end_term(&mut self, cause: TermCause, end: TermEnd) {
        end_term(&self.inner, &self.term, &self.info, cause, end);
    }

    /// Dropping the client closes the connection: the server ends the session, and with it any
    /// lock the session still holds.
    fn close(&mut self) {
        drop(self.client.take());
        tracing::debug!(
            term = self.info.number,
            "background leader lock connection closed"
        );
    }
}

impl Drop for LockSession {
    /// RUN-7: a panic (or a dropped `run` future) leaves the session mid-way: end the term with
    /// `LeadershipLost` and close without unlocking, since the connection may be mid-query.
    fn drop(&mut self) {
        if self.client.is_none() {
            return;
        }
        let how = if std::thread::panicking() {
            Abandon::Panicked
        } else {
            Abandon::Dropped
        };
        // A demotion dropped between its two steps, or a term its lease's timer ended (at
        // DEBUG), only has its close left to do; neither has said anything at WARN yet, so the
        // line below is the one that says the leadership ended (CFG-3): lost, as the term ended.
        let lost = self.term.is_over();
        self.end_term(TermCause::LeadershipLost, TermEnd::Abandoned(how));
        self.close();
        let (term, backend_pid) = (self.info.number, self.info.backend_pid);
        let by = match how {
            Abandon::Panicked => "unwound by a panic",
            Abandon::Dropped => "dropped",
        };
        match how {
            _ if lost => tracing::warn!(
                term,
                backend_pid,
                "background leader lock lost: its term had ended; the connection closed as the \
                 run future was {by}"
            ),
            Abandon::Panicked => tracing::warn!(
                term,
                backend_pid,
                "background leader lock abandoned after a panic"
            ),
            Abandon::Dropped => tracing::warn!(
                term,
                backend_pid,
                "background leader lock abandoned: the run future was dropped"
            ),
        }
    }
}

/// Ends `term` once, whoever comes first (a check's demotion, the release, a drop, or the
/// lease's timer). `is_leader` and the gauge turn first, so whoever wakes on the cancelled term
/// sees them, and only while `term` is still the elector's current one; then every handed-out
/// `Term` ends; then the watch.
fn end_term(inner: &Inner, term: &Arc<TermState>, info: &TermInfo, cause: TermCause, end: TermEnd) {
    if !term.claim_end() {
        return;
    }
    {
        let mut current = inner.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, term)) {
            inner.leader.store(false, Ordering::SeqCst);
            inner.gauge.set(false);
            *current = None;
        }
    }
    term.end(cause);
    inner.leadership.ended(info.clone(), end);
    tracing::debug!(term = info.number, cause = %cause, "background leader term ended");
}

/// LOOP-1, TERM-1, ISL-1: ends the term when its lease runs out (4·T after the sending of the
/// last answered check), without waiting for the next check: a frozen or starved process ends
/// every handle of the term (every `Term`'s token included), `is_leader`, the gauge and the
/// watch as soon as it runs again. The elector's next check then fails and closes the
/// connection (DEM-1's order holds: the term ended first).
async fn lease_timer(inner: Arc<Inner>, term: Arc<TermState>, info: TermInfo) {
    inner.lease.ran_out().await;
    let cause = Error::LeaseRunOut(inner.lease.length()).to_string();
    end_term(
        &inner,
        &term,
        &info,
        TermCause::LeadershipLost,
        TermEnd::Lost { cause },
    );
}

/// POOL-1: what [`sql::PING_SESSION`] `answer`ed means for the session granted the lock to
/// backend `lock_pid`: another pid is another server session (a transaction-mode pooler).
fn on_the_lock_session(answer: Option<String>, lock_pid: i32) -> Result<(), Error> {
    match answer.as_deref().map(str::parse::<i32>) {
        Some(Ok(pid)) if pid == lock_pid => Ok(()),
        Some(Ok(pid)) => {
            tracing::debug!(
                lock_pid,
                answered_pid = pid,
                "background leader check ran off the lock session"
            );
            Err(Error::SharedSession)
        }
        _ => Err(Error::Protocol(format!("{answer:?} to the lock check"))),
    }
}

/// The first column of the first row of a simple-protocol answer.
pub(crate) fn first_value(messages: &[SimpleQueryMessage]) -> Option<String> {
    messages.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
        _ => None,
    })
}

/// What the server said to the graceful unlock: a [`Release`] but [`Release::Slow`], which is
/// the term's outcome, never an unlock's.
enum Unlock {
    /// It answered true.
    Unlocked,
    /// It answered false or an error.
    Refused {
        /// What it said.
        reason: String,
    },
    /// No answer within [`UNLOCK_DEADLINE`].
    TimedOut,
}

impl From<Unlock> for Release {
    fn from(u: Unlock) -> Release {
        match u {
            Unlock::Unlocked => Release::Unlocked,
            Unlock::Refused { reason } => Release::Refused { reason },
            Unlock::TimedOut => Release::TimedOut,
        }
    }
}
