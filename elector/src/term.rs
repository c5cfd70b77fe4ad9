//! `Term`: the context of one leadership term (spec: "Term"; TERM-1, TERM-2).
//!
//! Each term the elector starts owns a [`CancellationToken`] and a list of the [`Term`]s handed
//! out for it. A `Term`'s token is a child of the caller's parent token; when the term ends, the
//! elector cancels every listed token itself, synchronously, before it closes the connection
//! (DEM-1), and records in each the first cause that ended it (as Go's `context.Cause`).
//!
//! A term also ends when its [`Lease`] runs out: 4·T after the sending of the last statement
//! the server answered on the lock session. The server may end a silent session from then on
//! (ORPH-1), and a standby lead, so a process that was frozen or starved that long must not act
//! as the leader before its own next check demotes it: a timer of the term ends it then (every
//! token, `is_leader`, the gauge, the watch), and [`Term::is_cancelled`] and friends read the
//! lease directly, so they see it even before the timer's task has run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

/// Why a term ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TermCause {
    /// The spec's `ErrLeadershipLost`: a failed or unanswered check, a lost session, a panic
    /// that unwound `run`, or a `run` future dropped while leading.
    LeadershipLost,
    /// `run` gave the lock up on shutdown (RUN-6).
    Released,
    /// The caller's parent token ended first.
    ParentEnded,
    /// The term was asked for on a standby (TERM-2): it was never live.
    NotLeader,
}

impl std::fmt::Display for TermCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TermCause::LeadershipLost => "leadership lost",
            TermCause::Released => "leadership released",
            TermCause::ParentEnded => "parent context ended",
            TermCause::NotLeader => "not the leader",
        })
    }
}

/// One handed-out `Term` as its term sees it: the token to cancel and where its cause goes.
#[derive(Debug)]
struct Link {
    token: CancellationToken,
    cause: Arc<OnceLock<TermCause>>,
}

impl Link {
    /// Ends the linked `Term` for `cause`, unless its parent ended it first.
    fn end(&self, cause: TermCause) {
        let first = if self.token.is_cancelled() {
            TermCause::ParentEnded
        } else {
            cause
        };
        let _ = self.cause.set(first);
        self.token.cancel();
    }
}

/// How long the live term may go without a statement the server answered (beyond the spec).
///
/// The lock session's `idle_session_timeout` is 4·T (ORPH-1), counted by the server from the end
/// of the session's last statement, which is never earlier than its sending here. So until 4·T
/// after the sending of the last statement the server answered, the session cannot have been
/// ended by the timeout, and no standby can lead. After it, it may have been: the lease has run
/// out, and it never comes back (a later answer does not extend it); the elector's next check
/// demotes. A live leader never comes near it: a check that is not answered within T demotes
/// (RUN-5), 3·T before the lease runs out.
///
/// One lease per elector, granted afresh at each term; it is read without a lock (ISL-1).
///
/// On a server without `idle_session_timeout` (before PostgreSQL 14) nothing ends the session
/// on the server's own; the standbys end it once it has been idle [`crate::PRE14_IDLE_INTERVALS`]·T
/// (X-PGVER, [`crate::sql::try_lock`]), and such a term's lease is that long instead.
#[derive(Debug)]
pub(crate) struct Lease {
    epoch: Instant,
    /// The length of a term's lease on a server that bounds the session itself (4·T).
    bounded: Duration,
    /// The live term's length, in nanoseconds: `bounded`, or 3·T before PostgreSQL 14.
    length_ns: AtomicU64,
    /// The lease's end, in nanoseconds since `epoch`; 0 before the first grant.
    until_ns: AtomicU64,
}

impl Lease {
    /// A lease of `length`, not granted yet (run out).
    pub(crate) fn new(length: Duration) -> Self {
        Self {
            epoch: Instant::now(),
            bounded: length,
            length_ns: AtomicU64::new(nanos(length)),
            until_ns: AtomicU64::new(0),
        }
    }

    fn ns(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// A new term: the lease ends its length (4·T) after the sending of the statement that won
    /// the grant.
    pub(crate) fn grant(&self, sent: Instant) {
        self.grant_for(sent, self.bounded);
    }

    /// A new term on a server without `idle_session_timeout` (X-PGVER): a lease of
    /// [`crate::PRE14_IDLE_INTERVALS`]·T, the idle time after which a standby ends the session.
    pub(crate) fn grant_pre14(&self, sent: Instant) {
        let length = self.bounded * crate::PRE14_IDLE_INTERVALS / crate::IDLE_SESSION_INTERVALS;
        self.grant_for(sent, length);
    }

    /// A new term whose lease ends `length` after `sent`, and each confirmation extends by it.
    fn grant_for(&self, sent: Instant, length: Duration) {
        self.length_ns.store(nanos(length), Ordering::SeqCst);
        self.until_ns
            .store(self.ns(sent + length).max(1), Ordering::SeqCst);
    }

    /// The server answered a statement sent at `sent`: the lease ends `length` after it, unless
    /// it has run out already.
    pub(crate) fn confirm(&self, sent: Instant) {
        let (now, until) = (self.ns(Instant::now()), self.ns(sent + self.length()));
        let _ = (self.until_ns).fetch_update(Ordering::SeqCst, Ordering::SeqCst, |current| {
            (now < current && until > current).then_some(until)
        });
    }

    /// When the lease ends.
    pub(crate) fn until(&self) -> Instant {
        self.epoch + Duration::from_nanos(self.until_ns.load(Ordering::SeqCst))
    }

    /// Whether the lease has run out.
    pub(crate) fn run_out(&self) -> bool {
        Instant::now() >= self.until()
    }

    /// Completes when the lease has run out.
    pub(crate) async fn ran_out(&self) {
        while !self.run_out() {
            tokio::time::sleep_until(self.until()).await;
        }
    }

    /// The live term's length (4·T; 3·T before PostgreSQL 14).
    pub(crate) fn length(&self) -> Duration {
        Duration::from_nanos(self.length_ns.load(Ordering::SeqCst))
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The elector's side of one term: its number, its token, its links and, once ended, its cause.
#[derive(Debug)]
pub(crate) struct TermState {
    pub(crate) number: u64,
    /// X-FENCE: the term's fencing token, when fencing is on.
    fence: Option<i64>,
    token: CancellationToken,
    cause: OnceLock<TermCause>,
    links: Mutex<Vec<Link>>,
    lease: Arc<Lease>,
    /// Set by the first of those that may end the term (a check's demotion, the release, a
    /// drop, the lease's timer), so that its bookkeeping runs once.
    claimed: AtomicBool,
}

impl TermState {
    /// Term `number`, live while its token is not cancelled and `lease` has not run out.
    pub(crate) fn new(number: u64, fence: Option<i64>, lease: Arc<Lease>) -> Arc<Self> {
        Arc::new(Self {
            number,
            fence,
            token: CancellationToken::new(),
            cause: OnceLock::new(),
            links: Mutex::new(Vec::new()),
            lease,
            claimed: AtomicBool::new(false),
        })
    }

    /// Whether this caller is the first to end the term (and so does its bookkeeping).
    pub(crate) fn claim_end(&self) -> bool {
        !self.claimed.swap(true, Ordering::SeqCst)
    }

    fn links(&self) -> MutexGuard<'_, Vec<Link>> {
        self.links.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Ends the term with `cause` (the first cause wins) and cancels, before it returns, every
    /// `Term` handed out for it.
    pub(crate) fn end(&self, cause: TermCause) {
        let _ = self.cause.set(cause);
        self.token.cancel();
        let cause = self.cause().unwrap_or(cause);
        for link in std::mem::take(&mut *self.links()) {
            link.end(cause);
        }
    }

    /// Lists a handed-out `Term`; one asked for after the end is ended at once.
    fn link(&self, link: Link) {
        let mut links = self.links();
        match self.cause() {
            Some(cause) => link.end(cause),
            None => {
                links.retain(|l| !l.token.is_cancelled());
                links.push(link);
            }
        }
    }

    pub(crate) fn cause(&self) -> Option<TermCause> {
        self.cause.get().copied()
    }

    /// Whether the term has ended, or its lease has run out (the elector's next check will end
    /// it with `LeadershipLost`): what its holders see.
    pub(crate) fn is_ended(&self) -> bool {
        self.is_over() || self.lease.run_out()
    }

    /// Whether the elector has ended the term ([`TermState::end`]): its flag, gauge and watch
    /// have turned. A term whose lease ran out still has that to do.
    pub(crate) fn is_over(&self) -> bool {
        self.token.is_cancelled()
    }
}

/// The context of one leadership term, as returned by [`Elector::term`](crate::Elector::term)
/// and handed to [`Elector::do_work`](crate::Elector::do_work).
///
/// Its token ends when the parent token ends or when the term ends, whichever comes first.
/// Dropping the `Term` cancels its token: it is the spec's "always call the cancel function".
///
/// The term also ends when its lease runs out (4·T after the sending of the last check the
/// server answered, when a frozen or starved process may have lost the lock unseen), without
/// waiting for the elector's next check: the token and its clones are cancelled then by a timer
/// of the term, and [`is_cancelled`](Term::is_cancelled), [`cancelled`](Term::cancelled) and
/// [`cause`](Term::cause) read the lease itself, so they see it at once.
#[derive(Debug)]
pub struct Term {
    token: CancellationToken,
    cause: Arc<OnceLock<TermCause>>,
    state: Option<Arc<TermState>>,
    parent: CancellationToken,
    _guard: DropGuard,
}

impl Term {
    /// A live term: its token ends with `parent` or with `state`.
    pub(crate) fn live(parent: &CancellationToken, state: Arc<TermState>) -> Self {
        let token = parent.child_token();
        let cause = Arc::new(OnceLock::new());
        state.link(Link {
            token: token.clone(),
            cause: cause.clone(),
        });
        Self {
            _guard: token.clone().drop_guard(),
            token,
            cause,
            state: Some(state),
            parent: parent.clone(),
        }
    }

    /// A standby's term: already cancelled (TERM-2).
    pub(crate) fn ended(parent: &CancellationToken) -> Self {
        let token = CancellationToken::new();
        token.cancel();
        Self {
            _guard: token.clone().drop_guard(),
            token,
            cause: Arc::new(OnceLock::from(TermCause::NotLeader)),
            state: None,
            parent: parent.clone(),
        }
    }

    /// The token that ends with the term; hand clones of it to work run under the term.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Completes when the term has ended or its lease has run out; at once if it has already.
    pub async fn cancelled(&self) {
        match &self.state {
            Some(state) => tokio::select! {
                biased;
                () = self.token.cancelled() => {}
                () = state.lease.ran_out() => {}
            },
            None => self.token.cancelled().await,
        }
    }

    /// Whether the term has ended, or its lease has run out.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled() || self.lease_run_out()
    }

    /// The spec's `context.Cause`: `None` while the term is live; otherwise the first cause
    /// that ended it ([`TermCause::LeadershipLost`] after a loss, or once the lease has run out).
    ///
    /// The ending side records the cause before it cancels the token, so the token is read
    /// first: a cancelled token whose cause is still unset was cancelled by the parent.
    pub fn cause(&self) -> Option<TermCause> {
        let cancelled = self.token.is_cancelled();
        match self.cause.get() {
            Some(cause) => Some(*cause),
            None if cancelled => Some(TermCause::ParentEnded),
            None if self.lease_run_out() => Some(TermCause::LeadershipLost),
            None => None,
        }
    }

    fn lease_run_out(&self) -> bool {
        (self.state.as_ref()).is_some_and(|s| !s.token.is_cancelled() && s.lease.run_out())
    }

    /// The number of the term (1 for the first term of this elector), or `None` on a standby.
    pub fn number(&self) -> Option<u64> {
        self.state.as_ref().map(|s| s.number)
    }

    /// X-FENCE: the term's fencing token, larger than that of every term any replica began
    /// before it, or `None` on a standby or with fencing off
    /// ([`Config::fencing`](crate::Config::fencing)). Pass it with each write the term's work
    /// makes, and let the store reject a smaller one than it has seen
    /// ([`sql::FENCE_LATEST`](crate::sql::FENCE_LATEST)): the lease stops this process's work
    /// once it sees the term end, but not a write already on its way.
    ///
    /// What the guard `$1 = (SELECT last_value FROM public.plexsphere_background_leader_fence)`
    /// guarantees, exactly: it is a read, evaluated when its statement runs, and nothing makes
    /// it wait for or conflict with a newer grant. A guarded statement that starts running after
    /// a newer term drew its token writes nothing, however late it arrives. A guarded statement
    /// in autocommit (its own transaction) commits on the server right after it runs, so its
    /// window is that statement's own run time, which no freeze, network or pooler on the
    /// client's side can widen. But a statement that passed the guard inside an explicit
    /// transaction commits whenever its `COMMIT` arrives: a writer that froze (or whose
    /// `COMMIT` a pooler or the network held) after the guard and before the `COMMIT` lands
    /// its rows after the newer term began (the test
    /// `fence::a_guarded_transaction_open_across_a_handover_commits_and_a_claimed_row_fences_it`).
    /// For work that writes in more than one statement, fence on a row of your own instead:
    /// each term claims it before its first write (`UPDATE claim SET token = $1 WHERE token <
    /// $1`), and each guarded write locks it `FOR SHARE` and writes only while it carries the
    /// term's token. A new term's claim then waits for the older term's open transactions and
    /// every older write after it is refused; the wait falls on the new term's work, not on
    /// the election (see the crate's README).
    pub fn fence(&self) -> Option<i64> {
        self.state.as_ref().and_then(|s| s.fence)
    }

    /// A handle that outlives the `Term` (which the work consumes) and tells afterwards
    /// whether leadership ended while the parent was still live.
    pub(crate) fn watcher(&self) -> TermWatch {
        TermWatch {
            state: self.state.clone(),
            parent: self.parent.clone(),
        }
    }
}

/// See [`Term::watcher`].
pub(crate) struct TermWatch {
    state: Option<Arc<TermState>>,
    parent: CancellationToken,
}

impl TermWatch {
    /// Whether leadership ended (lost or released) while the parent is still live.
    pub(crate) fn leadership_ended(&self) -> bool {
        self.state.as_ref().is_some_and(|s| s.is_ended()) && !self.parent.is_cancelled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_millis(200);

    /// The lease runs 4·T from the sending of the granting statement, is extended by each
    /// answered check from that check's sending (never shortened by an older one), and once it
    /// has run out no answer brings it back.
    #[tokio::test(start_paused = true)]
    async fn a_lease_runs_from_the_last_answered_sending_and_never_comes_back() {
        let lease = Lease::new(4 * T);
        assert!(lease.run_out(), "a lease never granted has run out");
        let granted = Instant::now();
        lease.grant(granted);
        assert!(!lease.run_out());
        tokio::time::advance(T).await;
        lease.confirm(Instant::now());
        assert_eq!(lease.until(), granted + 5 * T);
        lease.confirm(granted);
        assert_eq!(
            lease.until(),
            granted + 5 * T,
            "an older sending shortened it"
        );
        tokio::time::advance(4 * T - Duration::from_millis(1)).await;
        assert!(!lease.run_out(), "ran out early");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(lease.run_out(), "did not run out at 4T");
        lease.confirm(Instant::now() - T);
        assert!(lease.run_out(), "an answer brought a run-out lease back");
        // A new term grants it afresh.
        lease.grant(Instant::now());
        assert!(!lease.run_out());
    }

    /// TERM-1: every `Term` handed out for a term ends with it, with its first cause, however
    /// many were handed out and dropped before; the list of them does not grow with the drops;
    /// one asked for after the end is ended at once.
    #[tokio::test(start_paused = true)]
    async fn every_handed_out_term_ends_with_its_term() {
        let lease = Arc::new(Lease::new(4 * T));
        lease.grant(Instant::now());
        assert_eq!(lease.length(), 4 * T);
        let state = TermState::new(7, None, lease);
        let parent = CancellationToken::new();
        let first = Term::live(&parent, state.clone());
        for _ in 0..100 {
            drop(Term::live(&parent, state.clone()));
        }
        let second = Term::live(&parent, state.clone());
        assert!(state.links().len() <= 3, "{} links", state.links().len());
        assert_eq!(second.number(), Some(7));
        state.end(TermCause::LeadershipLost);
        state.end(TermCause::Released);
        assert_eq!(state.cause(), Some(TermCause::LeadershipLost));
        for term in [&first, &second] {
            assert!(
                term.token().is_cancelled(),
                "a handed-out term outlived its term"
            );
            assert_eq!(term.cause(), Some(TermCause::LeadershipLost));
        }
        let late = Term::live(&parent, state.clone());
        assert!(
            late.token().is_cancelled(),
            "a term asked for after the end was live"
        );
        assert_eq!(late.cause(), Some(TermCause::LeadershipLost));
        assert!(state.is_over() && state.is_ended());
    }

    /// TERM-1 (review: `cause` read the cause, then the token, while the ending side writes the
    /// cause, then cancels): a `Term` read while another thread ends its term with a loss
    /// answers `None` or `LeadershipLost`, never `ParentEnded` (its parent is live). The race
    /// is nanoseconds wide: readers on more threads than cores are preempted between their
    /// reads now and then, over many terms.
    #[test]
    fn a_cause_read_during_a_loss_is_never_parent_ended() {
        let readers = 4;
        let parent = CancellationToken::new();
        let start = std::time::Instant::now();
        let mut terms = 0u32;
        while start.elapsed() < Duration::from_secs(2) {
            let lease = Arc::new(Lease::new(Duration::from_secs(3600)));
            lease.grant(Instant::now());
            let state = TermState::new(1, None, lease);
            let term = Arc::new(Term::live(&parent, state.clone()));
            let barrier = Arc::new(std::sync::Barrier::new(readers + 1));
            let seen: Vec<_> = (0..readers)
                .map(|_| {
                    let (term, barrier) = (term.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        loop {
                            if let Some(cause) = term.cause() {
                                return cause;
                            }
                        }
                    })
                })
                .collect();
            barrier.wait();
            state.end(TermCause::LeadershipLost);
            for reader in seen {
                let cause = reader.join().expect("a reader");
                assert_eq!(
                    cause,
                    TermCause::LeadershipLost,
                    "a term ended by a loss read {cause:?} (after {terms} terms)"
                );
            }
            terms += 1;
        }
    }

    /// Each cause as the logs and errors show it.
    #[test]
    fn causes_read_as_text() {
        let shown = [
            TermCause::LeadershipLost,
            TermCause::Released,
            TermCause::ParentEnded,
            TermCause::NotLeader,
        ]
        .map(|c| c.to_string());
        assert_eq!(
            shown,
            [
                "leadership lost",
                "leadership released",
                "parent context ended",
                "not the leader"
            ]
        );
    }

    /// A `Term` reads as ended, with `LeadershipLost`, once its lease runs out, and waiting on it
    /// ends then, though nothing cancelled its token.
    #[tokio::test(start_paused = true)]
    async fn a_term_ends_for_its_holders_when_its_lease_runs_out() {
        let lease = Arc::new(Lease::new(4 * T));
        lease.grant(Instant::now());
        let state = TermState::new(1, None, lease);
        let parent = CancellationToken::new();
        let term = Term::live(&parent, state.clone());
        assert!(!term.is_cancelled() && !state.is_ended());
        assert_eq!(term.cause(), None);
        let start = Instant::now();
        tokio::time::timeout(5 * T, term.cancelled())
            .await
            .expect("waiting on the term did not end when its lease ran out");
        assert_eq!(start.elapsed(), 4 * T);
        assert!(term.is_cancelled() && state.is_ended());
        assert_eq!(term.cause(), Some(TermCause::LeadershipLost));
    }
}
