//! `Elector::run`: the election loop (spec: "Run"; RUN-1..RUN-8).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::time::{interval, MissedTickBehavior};
use tokio_postgres::error::SqlState;
use tokio_util::sync::CancellationToken;

use crate::attempt::{answer, Answer};
use crate::elector::Inner;
use crate::leadership::CheckOutcome;
use crate::session::{Grant, Loan, LockSession};
use crate::wake::Waiter;
use crate::{Elector, Error};

impl Elector {
    /// Takes part in the election until `shutdown` is cancelled (spec: `Run`).
    ///
    /// Checks once at once and then every T (RUN-1). A standby borrows a pooled connection and
    /// tries the lock on it; a refused connection goes back unchanged (RUN-2), a granted one is
    /// detached from the pool, its orphaned-session bound is set, and a term begins (RUN-3,
    /// ORPH-1). A failed acquire or query is logged at WARN as
    /// `leader: acquire lock connection: <cause>` and retried at the next check; it never ends
    /// `run` (RUN-4). The leader runs `SELECT 1` every T and demotes itself when it fails or stays
    /// unanswered for T (RUN-5). On cancellation, honoured at once in every state, it unlocks
    /// under a 2 s deadline of its own, closes the connection, ends the term and returns `Ok(())`
    /// (RUN-6); a standby check in flight is abandoned and its connection closed.
    ///
    /// A panic that unwinds `run`, and dropping the `run` future, end the term with
    /// `LeadershipLost` and close the lock connection without unlocking (RUN-7); a standby check
    /// in flight is closed too, so no lock is ever left on a pooled connection. Dropping the
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
        // X-WAKE: the standby's session queued on the key, when waking is on, and how many in a
        // row broke before their grant.
        let mut waiter: Option<Waiter> = None;
        let mut broken = Broken::default();
        // X-WAKE's queued attempt, until a check meets a shared session (see
        // `refuse_wake_if_shared`), in this `run` or an earlier one.
        let mut waking =
            (inner.waiting.clone()).filter(|_| !inner.wake_refused.load(Ordering::SeqCst));
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                granted = Waiter::granted(&mut waiter) => {
                    if let Err(e) = &granted {
                        refuse_wake_if_shared(inner, &mut waking, e);
                    }
                    held = woken(inner, granted, &mut broken);
                    continue;
                }
                _ = ticks.tick() => {}
            }
            held = match held.take() {
                None => tokio::select! {
                    biased;
                    () = shutdown.cancelled() => break,
                    checked = standby_check(inner) => checked.unwrap_or_else(|e| {
                        refuse_wake_if_shared(inner, &mut waking, &e);
                        None
                    }),
                },
                Some(session) => match leader_check(&session, &shutdown).await {
                    Checked::Passed => Some(session),
                    Checked::Failed(e) => {
                        session.demote(&e).await;
                        None
                    }
                    Checked::Shutdown => {
                        held = Some(session);
                        break;
                    }
                },
            };
            // A leader needs no queued session (dropping it ends it); a standby keeps one, once
            // its fence (X-FENCE) is ready: a fenced attempt fails without it.
            match (&held, &waking) {
                (None, Some(statement)) if waiter.is_none() && fence_is_ready(inner) => {
                    waiter = Some(Waiter::start(inner, statement));
                    broken.since = tokio::time::Instant::now();
                }
                (Some(_), _) | (None, None) => waiter = None,
                _ => {}
            }
        }
        drop(waiter);
        if let Some(session) = held {
            session.release().await;
        }
        Ok(())
    }
}

/// How many queued sessions in a row may break soon after they queued before each further one
/// is logged at WARN: one breaks now and then (a server restart ends it), but a wake-up that
/// keeps failing (a setting or a pooler that cancels every attempt) is silently a standby that
/// polls, opening and closing a backend every T.
const BROKEN_WAITERS_WARN: u32 = 3;

/// X-WAKE: the queued sessions that broke in a row, each within 2·T of queuing.
#[derive(Debug)]
struct Broken {
    /// How many.
    count: u32,
    /// When the current queued session started.
    since: tokio::time::Instant,
}

impl Default for Broken {
    fn default() -> Self {
        Self {
            count: 0,
            since: tokio::time::Instant::now(),
        }
    }
}

/// X-WAKE: the queued session was granted the key (a term begins), or broke (a new one queues
/// at the next check, which still runs every T).
fn woken(
    inner: &Arc<Inner>,
    granted: Result<Grant, Error>,
    broken: &mut Broken,
) -> Option<LockSession> {
    match granted {
        Ok(grant) => {
            broken.count = 0;
            Some(lead(inner, grant))
        }
        Err(e) => {
            let soon = broken.since.elapsed() <= 2 * inner.interval;
            broken.count = if soon {
                broken.count.saturating_add(1)
            } else {
                1
            };
            if broken.count >= BROKEN_WAITERS_WARN {
                tracing::warn!(error = %e, broken = broken.count,
                    "background leader: the queued attempt keeps failing, so waking is off until \
                     one holds; the checks every T still run: {e}");
            } else {
                tracing::debug!(error = %e, "background leader: the queued attempt ended: {e}");
            }
            None
        }
    }
}

/// X-WAKE where the shared-session guard answered `shared` (a transaction-mode pooler hands the
/// elector's statements to server sessions other clients use): waking is off for good (every
/// later `run` of the elector too: a supervisor's restart does not turn it on again), said once
/// at WARN. A queued attempt there would hold one of the pooler's server sessions for as
/// long as it waits, and its grant would land on a session other clients then share; the checks
/// every T go on (and the guard keeps refusing to lead on a shared session).
fn refuse_wake_if_shared(inner: &Inner, waking: &mut Option<Arc<str>>, e: &Error) {
    if matches!(e, Error::SharedSession) && waking.take().is_some() {
        inner.wake_refused.store(true, Ordering::SeqCst);
        tracing::warn!(
            "background leader: waking is off: {}; a queued attempt would hold a server \
             session of the pooler for as long as it waits, so the standby checks every T only",
            Error::SharedSession
        );
    }
}

/// How a leader's check ended.
enum Checked {
    Passed,
    Failed(Error),
    Shutdown,
}

/// RUN-5: the leader's check, or the shutdown if it comes first.
async fn leader_check(session: &LockSession, shutdown: &CancellationToken) -> Checked {
    tokio::select! {
        biased;
        () = shutdown.cancelled() => Checked::Shutdown,
        checked = session.check() => match checked {
            Ok(()) => {
                tracing::trace!(term = session.term_number(), "background leader check passed");
                Checked::Passed
            }
            Err(e) => Checked::Failed(e),
        },
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

/// A standby's check (RUN-1..RUN-4): one attempt on a borrowed connection, the borrowing and
/// the attempt each bounded by T (and, until the fence's sequence is known to exist, its check
/// by another T); on a grant, the bound and then the term. Its outcome goes to the leadership watch.
/// A failed check (logged at WARN and published here) comes back as the error, for the caller
/// to learn from (X-WAKE is refused on a shared session).
async fn standby_check(inner: &Arc<Inner>) -> Result<Option<LockSession>, Error> {
    let failed = match try_lock(inner).await {
        Ok(Some(grant)) => return Ok(Some(lead(inner, grant))),
        Ok(None) => {
            tracing::debug!("background leader lock held elsewhere");
            inner.leadership.checked(CheckOutcome::Refused);
            return Ok(None);
        }
        Err(e) => e,
    };
    tracing::warn!(error = %failed, "leader: acquire lock connection: {failed}");
    inner.leadership.checked(CheckOutcome::Failed {
        error: failed.to_string(),
    });
    Err(failed)
}

/// RUN-3: a grant begins a term.
fn lead(inner: &Arc<Inner>, grant: Grant) -> LockSession {
    let session = grant.begin(inner);
    tracing::info!(
        term = session.term_number(),
        backend_pid = session.backend_pid(),
        "background leader lock acquired"
    );
    session
}

/// Tries the lock once on a loan from the pool. `Ok(None)`: another session holds it and the
/// connection went back to the pool unchanged. On any other answer, error, timeout or a dropped
/// future the loan closes the connection, since its state is unknown.
async fn try_lock(inner: &Arc<Inner>) -> Result<Option<Grant>, Error> {
    let t = inner.interval;
    let loan = Loan::borrow(&inner.pool, t).await?;
    if let Some(ready) = inner.fence.as_ref().filter(|r| !r.load(Ordering::SeqCst)) {
        match fence_ready(&loan, t).await {
            Ok(()) => ready.store(true, Ordering::SeqCst),
            Err(e @ Error::Db(_)) => {
                // The server answered (a right missing, say): the session is as it was lent.
                loan.give_back();
                fence_not_ready(inner, &e);
                return Err(e);
            }
            Err(e) => return Err(e),
        }
    }
    // X-PGVER: the first check also asks the server's version, in the same round trip, and the
    // statement the server needs is sent from then on.
    let sent = tokio::time::Instant::now();
    let messages = loan.query(inner.attempts.statement(), t).await?;
    inner.attempts.learn(&messages);
    match answer(inner.fence.is_some(), &messages)? {
        Answer::Granted {
            pid,
            bounded,
            fence,
        } => loan.grant(pid, bounded, fence, sent).map(Some),
        Answer::Refused => {
            loan.give_back();
            Ok(None)
        }
        Answer::Reaped => {
            loan.give_back();
            tracing::warn!(
                "background leader: ended the lock session, idle for over {}·T on a server \
                 without idle_session_timeout (an orphaned leader's)",
                crate::PRE14_IDLE_INTERVALS
            );
            Ok(None)
        }
        Answer::Freed => {
            loan.give_back();
            tracing::warn!(
                "background leader: freed the key on a pooled server session no leader had \
                 checked on for {}·T (a transaction-mode pooler kept a gone leader's lock \
                 session busy with the standbys' checks)",
                crate::IDLE_SESSION_INTERVALS
            );
            Ok(None)
        }
        Answer::Shared => {
            loan.give_back();
            Err(Error::SharedSession)
        }
    }
}

/// X-FENCE: whether a fenced attempt can run (fencing off, or its sequence known to exist).
fn fence_is_ready(inner: &Inner) -> bool {
    (inner.fence.as_ref()).is_none_or(|ready| ready.load(Ordering::SeqCst))
}

/// X-FENCE: the fence's sequence could not be made ready (`e`, answered by the server): said
/// once per elector at ERROR, with what the operator must do; each check fails until then.
fn fence_not_ready(inner: &Inner, e: &Error) {
    if inner.fence_said.swap(true, Ordering::SeqCst) {
        return;
    }
    let (sequence, create) = (crate::sql::FENCE_SEQUENCE, crate::sql::CREATE_FENCE);
    tracing::error!(error = %e,
        "background leader: fencing is on, but its sequence {sequence} is missing and could \
         not be created ({e}): this replica cannot lead until an owner runs `{create}` and \
         `GRANT USAGE, SELECT ON SEQUENCE {sequence} TO` the application's role");
}

/// X-FENCE: makes sure the fence's sequence exists, once per elector: asked first, so that a
/// role that may not create it but was granted it leads; created when missing, and a replica
/// that created it at the same moment (a duplicate on the catalog) counts as done.
async fn fence_ready(loan: &Loan, t: std::time::Duration) -> Result<(), Error> {
    let exists = loan.query(crate::sql::FENCE_EXISTS, t).await?;
    if crate::session::first_value(&exists).as_deref() == Some("t") {
        return Ok(());
    }
    match loan.query(crate::sql::CREATE_FENCE, t).await {
        Err(Error::Db(e))
            if [SqlState::DUPLICATE_TABLE, SqlState::UNIQUE_VIOLATION]
                .iter()
                .any(|c| e.code() == Some(c)) =>
        {
            Ok(())
        }
        created => created.map(drop),
    }
}
