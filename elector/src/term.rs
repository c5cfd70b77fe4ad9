//! `Term`: the context of one leadership term (spec: "Term"; TERM-1, TERM-2).
//!
//! Each term the elector starts owns a [`CancellationToken`]. The elector cancels it, with a
//! cause, when the term ends. A [`Term`] handed to the caller is a token that ends when either
//! the caller's parent token or the leadership term ends, whichever comes first.

use std::sync::{Arc, OnceLock};

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

/// The elector's side of one term: its number, its token and, once it ended, its cause.
#[derive(Debug)]
pub(crate) struct TermState {
    pub(crate) number: u64,
    token: CancellationToken,
    cause: OnceLock<TermCause>,
}

impl TermState {
    pub(crate) fn new(number: u64) -> Arc<Self> {
        Arc::new(Self {
            number,
            token: CancellationToken::new(),
            cause: OnceLock::new(),
        })
    }

    /// Ends the term with `cause` (the first cause wins) and cancels every token derived from it.
    pub(crate) fn end(&self, cause: TermCause) {
        let _ = self.cause.set(cause);
        self.token.cancel();
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
    state: Option<Arc<TermState>>,
    parent: CancellationToken,
    _guard: DropGuard,
}

impl Term {
    /// A live term: `token` ends with `parent` or with `state`.
    pub(crate) fn live(parent: &CancellationToken, state: Arc<TermState>) -> Self {
        let token = parent.child_token();
        let (linked, term_token) = (token.clone(), state.token.clone());
        // The link ends as soon as either side is cancelled, so it never outlives the Term.
        tokio::spawn(async move {
            tokio::select! {
                () = term_token.cancelled() => linked.cancel(),
                () = linked.cancelled() => {}
            }
        });
        Self {
            _guard: token.clone().drop_guard(),
            token,
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
        self.token.is_cancelled() || self.state.as_ref().is_some_and(|s| s.is_ended())
    }

    /// The spec's `context.Cause`: `None` while the term is live; after a loss,
    /// [`TermCause::LeadershipLost`].
    pub fn cause(&self) -> Option<TermCause> {
        if let Some(cause) = self.state.as_ref().and_then(|s| s.cause()) {
            return Some(cause);
        }
        if self.parent.is_cancelled() {
            return Some(TermCause::ParentEnded);
        }
        match &self.state {
            None => Some(TermCause::NotLeader),
            Some(_) if self.token.is_cancelled() => Some(TermCause::ParentEnded),
            Some(_) => None,
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
