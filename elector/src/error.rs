//! The elector's error type.

use std::time::Duration;

/// Everything the elector reports as an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The pool could not supply a connection.
    #[error("pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// A statement failed.
    #[error("postgres: {0}")]
    Db(#[from] tokio_postgres::Error),
    /// The server did not answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The lock session is shared with other clients, as behind a transaction-mode pooler
    /// (POOL-1): a standby found the lock held by its own server session, or the leader's check
    /// ran on another server session than the one granted the lock. The elector refuses to lead
    /// there: a standby does not take the lock, a leader demotes.
    #[error(
        "the lock session is shared with another client (a transaction-mode pooler such as \
         PgBouncer pool_mode=transaction?): connect directly or through a session-mode pooler"
    )]
    SharedSession,
    /// X-VERIFY: the leader's own session no longer holds the lock.
    #[error("the lock session no longer holds the leader lock")]
    LockGone,
    /// No statement on the lock session was answered for the length of its lease (4·T, the
    /// orphaned-session bound): the process was frozen or starved that long, and the server may
    /// have ended the session and another replica may lead.
    #[error(
        "no check was answered for {0:?} (the lease: 4·T, 3·T before PostgreSQL 14): the \
         server may have ended the lock session (was this process frozen or starved?)"
    )]
    LeaseRunOut(Duration),
    /// The server answered something the elector does not understand.
    #[error("unexpected answer: {0}")]
    Protocol(String),
    /// `run` was called while another `run` of the same elector is still running (RUN-8).
    #[error("Elector::run is already running: never run two at once")]
    AlreadyRunning,
    /// The check interval cannot be used: the orphaned-session bound it implies is out of the
    /// server's range (ORPH-1).
    #[error("check interval {interval:?} is out of range: {reason}")]
    InvalidCheckInterval {
        /// The interval in force.
        interval: Duration,
        /// Why it cannot be used.
        reason: String,
    },
    /// X-WHO: the replica's identity cannot be carried as an `application_name` as it is.
    #[error("identity {identity:?} cannot name the lock session: {reason}")]
    InvalidIdentity {
        /// The identity given.
        identity: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// A leader ticker was given a period of zero (LOOP-2).
    #[error("ticker {ticker:?}: a period of zero cannot tick")]
    InvalidTickerPeriod {
        /// The ticker's (and its loop's) name.
        ticker: String,
    },
    /// The gauge could not be registered.
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}
