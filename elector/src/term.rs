//! `Term`: the context of one leadership term (spec: "Term"; TERM-1, TERM-2).
//!
//! Each term the elector starts owns a [`CancellationToken`] and a list of the [`Term`]s handed
//! out for it. A `Term`'s token is a child of the caller's parent token; when the term ends, the
//! elector cancels every listed token itself, synchronously, before it closes the connection
//! (DEM-1), and records in each the first cause that ended it (as Go's `context.Cause`).

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

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

/// The elector's side of one term: its number, its token, its links and, once ended, its cause.
#[derive(Debug)]
pub(crate) struct TermState {
    pub(crate) number: u64,
    token: CancellationToken,
    cause: OnceLock<TermCause>,
    links: Mutex<Vec<Link>>,
}

impl TermState {
    pub(crate) fn new(number: u64) -> Arc<Self> {
        Arc::new(Self {
            number,
            token: CancellationToken::new(),
            cause: OnceLock::new(),
            links: Mutex::new(Vec::new()),
        })
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

    pub(crate) fn is_ended(&self) -> bool {
        self.token.is_cancelled()
    }
}

/// The context of one leadership term, as returned by [`Elector::term`](crate::Elector::term)
/// and handed to [`Elector::do_work`](crate::Elector::do_work).
///
/// Its token ends when the parent token ends or when the term ends, whichever comes first.
/// Dropping the `Term` cancels its token: it is the spec's "always call the cancel function".
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

    /// Completes when the term has ended.
    pub async fn cancelled(&self) {
        self.token.cancelled().await;
    }

    /// Whether the term has ended.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The spec's `context.Cause`: `None` while the term is live; otherwise the first cause
    /// that ended it ([`TermCause::LeadershipLost`] after a loss).
    pub fn cause(&self) -> Option<TermCause> {
        match self.cause.get() {
            Some(cause) => Some(*cause),
            None if self.token.is_cancelled() => Some(TermCause::ParentEnded),
            None => None,
        }
    }

    /// The number of the term (1 for the first term of this elector), or `None` on a standby.
    pub fn number(&self) -> Option<u64> {
        self.state.as_ref().map(|s| s.number)
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
