//! X-WAKE (beyond the spec): a standby queued on the lock, so that a released key is taken
//! within milliseconds instead of at the next check, up to T later.
//!
//! A standby of an elector built with [`Config::wake`](crate::Config::wake) keeps one session
//! of its own waiting in the server's lock queue ([`sql::wait_lock`]) beside its checks every T.
//! The server grants the key to the first session in its queue the moment the holder's session
//! lets it go, whatever the reason: a graceful unlock, a crashed process whose socket the kernel
//! closed, a killed backend, or the orphaned-session bound. That is the wake-up a `NOTIFY` from
//! the releasing leader would give for a graceful release only, and it costs the same (one
//! session per standby: a listener needs a session of its own too). A lost wake-up (the queued
//! session broke, the server restarted) costs nothing but speed: the check every T still takes
//! the key, and a new session queues at the next check.
//!
//! | stage | type | dropped before its grant |
//! |---|---|---|
//! | a session queued on the key | [`Waiter`] | the task aborted, the connection closed, and the backend running its tagged attempt ended |
//!
//! Where the shared-session guard sees the session shared with another client (a
//! transaction-mode pooler), waking is turned off for good (see `Elector::run`): a queued
//! attempt there would hold one of the pooler's server sessions for as long as it waits and be
//! granted on a session other clients share.

use std::sync::Arc;

use tokio::time::Instant;
use tokio_postgres::error::SqlState;
use tokio_util::task::AbortOnDropHandle;

use crate::attempt::{answer, Answer};
use crate::elector::Inner;
use crate::session::{query, Grant, Loan};
use crate::{sql, Error};

/// A standby's session waiting in the lock queue (X-WAKE), or on its way there.
pub(crate) struct Waiter {
    task: Option<AbortOnDropHandle<Result<Grant, Error>>>,
    /// The number its queued attempt is tagged with ([`sql::tagged_wait`]), by which a
    /// given-up attempt is found and ended ([`sql::end_waiter`]).
    tag: u64,
    inner: Arc<Inner>,
}

impl Waiter {
    /// Queues a session of its own on the key (a connection borrowed from the pool and detached
    /// from it, so the pool's size is not held up by a wait that may last for hours).
    pub(crate) fn start(inner: &Arc<Inner>, statement: &str) -> Self {
        let tag = fastrand::u64(..);
        let task = tokio::spawn(queue(inner.clone(), sql::tagged_wait(tag, statement)));
        Self {
            task: Some(AbortOnDropHandle::new(task)),
            tag,
            inner: inner.clone(),
        }
    }

    /// Completes with the grant (its lease confirmed) or the reason the session broke; pending
    /// for ever when there is no waiter (for a `select!` branch).
    pub(crate) async fn granted(waiter: &mut Option<Waiter>) -> Result<Grant, Error> {
        let Some(task) = waiter.as_mut().and_then(|w| w.task.as_mut()) else {
            return std::future::pending().await;
        };
        let outcome = task.await;
        // Done: nothing waits on the server any more (a grant is the caller's now).
        if let Some(w) = waiter.as_mut() {
            w.task = None;
        }
        *waiter = None;
        outcome.unwrap_or_else(|e| Err(Error::Protocol(format!("the queued attempt: {e}"))))
    }
}

impl Drop for Waiter {
    /// Given up before its grant (the elector led by a check, shut down, or was dropped): the
    /// task is aborted, which closes the connection; a backend waiting in the lock queue does
    /// not notice the close until it is granted, so the backend running its tagged attempt is
    /// ended on a pooled connection, in the background, within T.
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        drop(task);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (inner, tag) = (self.inner.clone(), self.tag);
        runtime.spawn(async move {
            let t = inner.interval;
            let ended = async {
                let loan = Loan::borrow(&inner.pool, t).await?;
                loan.query(&sql::end_waiter(tag), t).await?;
                loan.give_back();
                Ok::<_, Error>(())
            };
            if let Err(e) = ended.await {
                tracing::debug!(waiter = format!("{tag:016x}"), error = %e,
                    "background leader: could not end the queued session; it ends when granted");
            }
        });
    }
}

/// The waiter's task: borrow and detach a session, bound its snapshot's age
/// ([`sql::waiter_settings`]), send the queued attempt (again every T), and on its grant
/// confirm the lease with one check.
async fn queue(inner: Arc<Inner>, statement: String) -> Result<Grant, Error> {
    let t = inner.interval;
    let client = Loan::borrow(&inner.pool, t).await?.detach()?;
    let wait_ms = u32::try_from(t.as_millis()).unwrap_or(u32::MAX).max(1);
    query(&client, &sql::waiter_settings(wait_ms), t).await?;
    tracing::debug!("background leader: a session queued on the lock");
    // Given up after T (`lock_timeout`) and sent again at once: the snapshot it holds is never
    // older than T.
    let (messages, sent) = loop {
        let sent = Instant::now();
        match client.simple_query(&statement).await {
            Ok(messages) => break (messages, sent),
            Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    tracing::debug!("background leader: the queued session was answered");
    match answer(inner.fence.is_some(), &messages)? {
        Answer::Granted {
            pid: granted,
            bounded,
            fence,
        } => (Grant::new(client, granted, bounded, fence, sent).confirm(t)).await,
        Answer::Refused | Answer::Reaped => {
            Err(Error::Protocol("refused to the queued attempt".into()))
        }
        // Only a pooler hands a queued attempt a session that held the key (freed or not).
        Answer::Shared | Answer::Freed => Err(Error::SharedSession),
    }
}
