//! The leadership watch (beyond the spec): the whole state of one elector as typed values, so an
//! application reacts to a transition without polling or parsing log lines, as client-go's
//! leader-election callbacks and kubert's lease claims allow.
//!
//! [`Elector::subscribe`](crate::Elector::subscribe) hands out a `tokio::sync::watch` receiver
//! of [`Leadership`]. A watch keeps the latest value only: a receiver that was not polled for a
//! while sees the newest state, and `last_term` still tells how the previous term ended (with
//! its number, backend and start), so a term that began and ended unseen is never silent.

use std::time::SystemTime;

use tokio::sync::watch;

/// What an elector is doing now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Leadership {
    /// Leading a term, or a standby.
    pub role: Role,
    /// How this elector's last term ended, if one did.
    pub last_term: Option<EndedTerm>,
    /// The latest standby check, if one ran.
    pub last_check: Option<StandbyCheck>,
}

/// Leading or not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Role {
    /// Not leading: trying the lock every T (or not running).
    #[default]
    Standby,
    /// Leading the given term.
    Leading(TermInfo),
}

/// One term, as it began.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TermInfo {
    /// The term's number on this elector (1 for its first).
    pub number: u64,
    /// When it began: the lock granted and the orphaned-session bound set.
    pub since: SystemTime,
    /// The lock session's server backend pid (`pg_locks.pid`).
    pub backend_pid: i32,
    /// X-FENCE: the term's fencing token, or `None` when fencing is off
    /// ([`Config::fencing`](crate::Config::fencing)).
    pub fence: Option<i64>,
}

/// A term that ended, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndedTerm {
    /// The term, as it began.
    pub term: TermInfo,
    /// When it ended.
    pub at: SystemTime,
    /// How.
    pub end: TermEnd,
}

/// How a term ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TermEnd {
    /// `run` gave the lock up on shutdown (RUN-6), with the unlock's outcome.
    Released(Release),
    /// A check failed or went unanswered (DEM-1), with its cause.
    Lost {
        /// The check's error.
        cause: String,
    },
    /// `run` ended without a check or a shutdown: the connection was closed unlocked (RUN-7).
    Abandoned(Abandon),
}

/// The outcome of the graceful unlock (RUN-6). In every case the session is closed after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Release {
    /// `pg_advisory_unlock` answered true: the lock left while the session still lived.
    Unlocked,
    /// The server answered false or an error: the session did not hold the lock any more, or
    /// it was already broken.
    Refused {
        /// What the server said.
        reason: String,
    },
    /// No answer within the 2 s unlock deadline; closing the session releases the lock once the
    /// server notices.
    TimedOut,
    /// No answer within T: the term ended then, while the unlock went on under its 2 s deadline
    /// and the session was closed after it (its outcome is logged). A slow link would otherwise
    /// keep the old term live after the server ran the unlock and a standby took the key.
    Slow,
}

/// Why a term was abandoned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abandon {
    /// A panic unwound `run`.
    Panicked,
    /// The `run` future was dropped while leading.
    Dropped,
}

/// One standby check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandbyCheck {
    /// How many standby checks this elector has run, this one included.
    pub number: u64,
    /// When it ended.
    pub at: SystemTime,
    /// How it ended (a granted check shows as a new term instead).
    pub outcome: CheckOutcome,
}

/// How a standby check that did not lead ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckOutcome {
    /// Another session holds the lock.
    Refused,
    /// The check failed (`leader: acquire lock connection: <cause>`, RUN-4), including a shared
    /// lock session refused by the guard (POOL-1).
    Failed {
        /// The cause.
        error: String,
    },
}

/// The elector's side of the watch.
#[derive(Debug)]
pub(crate) struct Publisher(watch::Sender<Leadership>);

impl Publisher {
    pub(crate) fn new() -> Self {
        Self(watch::Sender::new(Leadership::default()))
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<Leadership> {
        self.0.subscribe()
    }

    pub(crate) fn began(&self, term: TermInfo) {
        self.0.send_modify(|s| s.role = Role::Leading(term));
    }

    pub(crate) fn ended(&self, term: TermInfo, end: TermEnd) {
        let at = SystemTime::now();
        self.0.send_modify(|s| {
            s.role = Role::Standby;
            s.last_term = Some(EndedTerm { term, at, end });
        });
    }

    pub(crate) fn checked(&self, outcome: CheckOutcome) {
        let at = SystemTime::now();
        self.0.send_modify(|s| {
            let number = s.last_check.as_ref().map_or(0, |c| c.number) + 1;
            s.last_check = Some(StandbyCheck {
                number,
                at,
                outcome,
            });
        });
    }
}
