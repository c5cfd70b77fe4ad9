//! `Elector`: the handle replicas share (spec: "Elector API": IsLeader, Term, Do).
//!
//! The election loop itself is in `run.rs`, the held lock session in `session.rs`.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::attempt::{fenced_if, Attempts};
use crate::config::{check_identity, idle_session_timeout_ms};
use crate::gauge::LeaderGauge;
use crate::leadership::{Leadership, Publisher};
use crate::term::{Lease, Term, TermState};
use crate::{Config, Error};

/// Elects one leader among the replicas that share a database (spec: "Background leader").
///
/// Cheap to clone: clones share one election. Build it with [`Elector::new`], drive it with
/// [`Elector::run`], and gate work with [`Elector::do_work`], [`Elector::term`] or
/// [`Elector::is_leader`].
#[derive(Clone)]
pub struct Elector {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) pool: deadpool_postgres::Pool,
    pub(crate) interval: Duration,
    /// The standby's attempt, which also sets the orphaned-session bound on a grant (ORPH-1):
    /// one statement for each kind of server, chosen on the first check (X-PGVER).
    pub(crate) attempts: Attempts,
    /// X-WAKE: the queued attempt a standby keeps waiting on the key, when waking is on.
    pub(crate) waiting: Option<std::sync::Arc<str>>,
    /// X-WAKE: set when a check met a shared session; waking is then off for good, through
    /// every later `run` of this elector too.
    pub(crate) wake_refused: AtomicBool,
    pub(crate) verify_lock: bool,
    /// X-FENCE: `Some` when fencing, set once the fence's sequence is known to exist.
    pub(crate) fence: Option<AtomicBool>,
    /// X-FENCE: set once the elector said at ERROR that the sequence could not be made ready.
    pub(crate) fence_said: AtomicBool,
    /// POOL-1: the leader's check also proves it ran on the lock session (the guard's other half).
    pub(crate) guard_session: bool,
    pub(crate) gauge: LeaderGauge,
    /// ISL-1: the one source of truth for `is_leader`, with the live term's lease.
    pub(crate) leader: AtomicBool,
    /// The live term's lease: 4·T past the last statement the server answered on its session.
    pub(crate) lease: Arc<Lease>,
    /// The live term, if any; `None` on a standby.
    pub(crate) current: Mutex<Option<Arc<TermState>>>,
    /// The leadership watch (the while-leader launcher waits on it).
    pub(crate) leadership: Publisher,
    pub(crate) terms: AtomicU64,
    /// RUN-8: set while a `run` is in progress.
    pub(crate) running: AtomicBool,
}

/// What [`Elector::do_work`] did with the work it was given (spec: "Do").
#[derive(Debug, PartialEq, Eq)]
pub enum Done<T, E> {
    /// DO-1: a standby; the work was not called. The spec's `(false, nil)`.
    Standby,
    /// DO-2: the replica led from start to end of the work; the work's own result.
    /// The spec's `(true, err)`.
    Ran(Result<T, E>),
    /// DO-3: leadership was lost while the work ran (its term token was cancelled); the
    /// spec's `(false, nil)`. DO-4: never a failure.
    Lost,
}

impl<T, E> Done<T, E> {
    /// The spec's boolean: whether the work ran under a term that held until it returned.
    pub fn ran(&self) -> bool {
        matches!(self, Done::Ran(_))
    }

    /// The spec's `(bool, error)` pair as a `Result`: `Ok(true)` after a successful run,
    /// `Err` with the work's error, `Ok(false)` when it did not run or leadership was lost.
    pub fn into_result(self) -> Result<bool, E> {
        match self {
            Done::Ran(r) => r.map(|_| true),
            Done::Standby | Done::Lost => Ok(false),
        }
    }
}

impl Elector {
    /// Builds an elector from `config` (spec: `leader.New`).
    ///
    /// # Errors
    /// [`Error::InvalidCheckInterval`] when 4·T rounds to 0 ms or exceeds `idle_session_timeout`'s
    /// range (ORPH-1); [`Error::InvalidIdentity`] for an identity the lock session cannot carry
    /// as it is (X-WHO, see [`Config::identity`]); [`Error::Metrics`] when the gauge cannot be registered on the given
    /// registry (a gauge this crate registered there before is reused as it is, MET-2: a new
    /// elector never resets the series another one writes).
    pub fn new(config: Config) -> Result<Self, Error> {
        let interval = config.effective_interval();
        let idle_session_timeout_ms = idle_session_timeout_ms(interval)?;
        let identity = config.identity.as_deref().map(check_identity).transpose()?;
        let gauge = LeaderGauge::register(config.registry.as_ref())?;
        let guarded = config.detect_shared_session;
        Ok(Self {
            inner: Arc::new(Inner {
                pool: config.pool,
                interval,
                attempts: Attempts::new(idle_session_timeout_ms, guarded, identity, config.fencing),
                waiting: config.wake.then(|| {
                    let wait = crate::sql::wait_lock(idle_session_timeout_ms, guarded, identity);
                    fenced_if(wait, config.fencing).into()
                }),
                fence: config.fencing.then(|| AtomicBool::new(false)),
                verify_lock: config.verify_lock,
                guard_session: config.detect_shared_session,
                gauge,
                leader: AtomicBool::new(false),
                lease: Arc::new(Lease::new(Duration::from_millis(
                    idle_session_timeout_ms.into(),
                ))),
                current: Mutex::new(None),
                leadership: Publisher::new(),
                terms: AtomicU64::new(0),
                running: AtomicBool::new(false),
                wake_refused: AtomicBool::new(false),
                fence_said: AtomicBool::new(false),
            }),
        })
    }

    /// The check interval in force (T).
    pub fn check_interval(&self) -> Duration {
        self.inner.interval
    }

    /// Whether this replica holds the lock (spec: `IsLeader`). Reads two atomics (the flag and
    /// the term's lease); safe and cheap from any thread (ISL-1).
    ///
    /// False as soon as the term's lease has run out, 4·T after the last check the server
    /// answered: a process that was frozen or starved that long may have lost its session to
    /// the server's timeout, and another replica may lead, before its own next check runs.
    pub fn is_leader(&self) -> bool {
        self.inner.leader.load(Ordering::SeqCst) && !self.inner.lease.run_out()
    }

    /// The number of the live term (1 for this elector's first), or `None` on a standby.
    pub fn current_term(&self) -> Option<u64> {
        self.inner.live_term().map(|t| t.number)
    }

    /// The leadership watch: the whole state ([`Leadership`]: standby or leading term N since
    /// when on backend P, how the last term ended, the latest standby check), updated at every
    /// transition and every standby check. See [`crate::leadership`].
    pub fn subscribe(&self) -> watch::Receiver<Leadership> {
        self.inner.leadership.subscribe()
    }

    /// The spec's `Term(parent)`: on the leader a live [`Term`] and `true`; the term ends when
    /// `parent` ends or leadership is lost (TERM-1). On a standby an already-cancelled term and
    /// `false` (TERM-2). Dropping the `Term` releases it.
    pub fn term(&self, parent: &CancellationToken) -> (Term, bool) {
        match self.inner.live_term() {
            Some(state) => (Term::live(parent, state), true),
            None => (Term::ended(parent), false),
        }
    }

    /// The spec's `Do(ctx, fn)`: runs one unit of background work on the leader, handing it
    /// the term so it can stop when leadership ends.
    ///
    /// Returns [`Done::Standby`] without calling `work` on a standby (DO-1), [`Done::Ran`] with
    /// the work's result when leadership held until it returned (DO-2), and [`Done::Lost`],
    /// logged at INFO, when leadership ended while it ran and `parent` is still live (DO-3).
    /// A term whose lease has run out counts as ended (see [`Elector::is_leader`]).
    /// Cancellation-safe: dropping the future drops the work and its `Term`.
    pub async fn do_work<F, Fut, T, E>(&self, parent: &CancellationToken, work: F) -> Done<T, E>
    where
        F: FnOnce(Term) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let (term, leading) = self.term(parent);
        if !leading {
            return Done::Standby;
        }
        let number = term.number();
        let watch = Term::watcher(&term);
        let result = work(term).await;
        if watch.leadership_ended() {
            tracing::info!(
                term = number,
                "background leader: leadership lost while work ran; the work is not counted"
            );
            return Done::Lost;
        }
        Done::Ran(result)
    }
}

impl Inner {
    pub(crate) fn live_term(&self) -> Option<Arc<TermState>> {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        current.as_ref().filter(|t| !t.is_ended()).cloned()
    }
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("check_interval", &self.inner.interval)
            .field("is_leader", &self.is_leader())
            .field("term", &self.current_term())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::Done;

    /// DO-1..DO-3: the spec's `(bool, error)` pair of each outcome: `(false, nil)` on a standby
    /// and after a loss, `(true, err)` after a run.
    #[test]
    fn each_outcome_as_the_specs_pair() {
        let standby: Done<(), String> = Done::Standby;
        let lost: Done<(), String> = Done::Lost;
        let ok: Done<(), String> = Done::Ran(Ok(()));
        let failed: Done<(), String> = Done::Ran(Err("pass failed".into()));
        let ran: Vec<bool> = [&standby, &lost, &ok, &failed].map(Done::ran).to_vec();
        assert_eq!(ran, [false, false, true, true]);
        assert_eq!(standby.into_result(), Ok(false));
        assert_eq!(lost.into_result(), Ok(false));
        assert_eq!(ok.into_result(), Ok(true));
        assert_eq!(failed.into_result(), Err("pass failed".to_owned()));
    }
}
