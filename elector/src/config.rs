//! `Config`: what an [`Elector`](crate::Elector) is built from (spec: "Config").

use std::time::Duration;

use crate::sql::IDLE_SESSION_TIMEOUT_MAX_MS;
use crate::Error;

/// The spec's `DefaultCheckInterval` (CFG-2).
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// How long the graceful unlock may take after the caller's shutdown token fired (RUN-6).
pub const UNLOCK_DEADLINE: Duration = Duration::from_secs(2);

/// How many check intervals the lock session may sit idle before the server ends it (ORPH-1).
pub const IDLE_SESSION_INTERVALS: u32 = 4;

/// X-PGVER: how many check intervals a lock session may sit idle on a server without
/// `idle_session_timeout` (before PostgreSQL 14) before a standby ends it, and the lease of a
/// term on such a server. Standbys check every T, so the session ends within 4·T of its last
/// statement, as the spec's bound has it (ORPH-2); a live leader's session is never idle for
/// much more than T.
pub const PRE14_IDLE_INTERVALS: u32 = 3;

/// Plain configuration data for [`Elector::new`](crate::Elector::new).
///
/// CFG-1: the spec's `ErrNilPool` cannot happen here: `pool` is not optional, so a `Config`
/// without a pool does not compile (E0063, a missing field), nor does one whose pool is `None`
/// (E0308, mismatched types). Each example names every other field, so it fails for the pool
/// alone. The test that decides CFG-1 is `elector/typecheck`'s: it checks the same two cases
/// for the compiler's own error, which a doctest on stable Rust does not check.
///
/// ```compile_fail,E0063
/// // CFG-1: there is no way to leave the pool out.
/// let cfg = elector::Config {
///     check_interval: std::time::Duration::ZERO,
///     registry: None,
///     verify_lock: false,
///     detect_shared_session: true,
///     identity: None,
///     fencing: false,
///     wake: false,
/// };
/// ```
///
/// ```compile_fail,E0308
/// // CFG-1: the pool is not optional either: `None` is not a pool.
/// let cfg = elector::Config {
///     pool: None,
///     check_interval: std::time::Duration::ZERO,
///     registry: None,
///     verify_lock: false,
///     detect_shared_session: true,
///     identity: None,
///     fencing: false,
///     wake: false,
/// };
/// ```
#[derive(Clone)]
pub struct Config {
    /// Supplies the connections the lock is tried on. Required.
    ///
    /// A refused check hands its connection back unchanged; a granted one detaches it for good
    /// (`Object::take`), so the pool's recycling never touches the lock session.
    pub pool: deadpool_postgres::Pool,
    /// How often a standby tries the lock and the leader verifies it, and how long the leader's
    /// `SELECT 1` may take. Default: 5 s ([`DEFAULT_CHECK_INTERVAL`]); zero uses the default.
    pub check_interval: Duration,
    /// Receives the `plexsphere_background_leader` gauge. Default: `None` (no gauge).
    pub registry: Option<prometheus::Registry>,
    /// X-VERIFY (beyond the spec): the leader's check also proves that its own session still
    /// holds the key, so an unlock or `DISCARD ALL` on the lock session demotes it.
    /// Default: `false` (the spec's plain `SELECT 1`).
    pub verify_lock: bool,
    /// POOL-1 (beyond the spec): a standby whose own server session already holds the key (a
    /// session shared through a transaction-mode pooler) refuses to lead with
    /// [`Error::SharedSession`](crate::Error::SharedSession) instead of stacking a second grant.
    /// Default: `true`; turn it off only to demonstrate the hazard.
    pub detect_shared_session: bool,
    /// X-WHO (beyond the spec): the replica's name, which the lock session carries as its
    /// `application_name` while it holds the key, so that [`Elector::who_leads`] (or
    /// [`sql::WHO_LEADS`](crate::sql::WHO_LEADS) from psql) says which replica leads.
    /// Printable ASCII without `'` or `\`, 1 to 63 bytes (what PostgreSQL keeps of an
    /// `application_name`); anything else is refused by [`Elector::new`] with
    /// [`Error::InvalidIdentity`]. Default: `None` (the lock session keeps the name its pool's
    /// connections carry).
    ///
    /// [`Elector::who_leads`]: crate::Elector::who_leads
    /// [`Elector::new`]: crate::Elector::new
    pub identity: Option<String>,
    /// X-FENCE (beyond the spec): each term carries a fencing token ([`Term::fence`]) drawn from
    /// a database sequence by the granting statement, larger than every earlier term's of any
    /// replica, so that work can reject the writes of an older term that reach their store
    /// late ([`sql::FENCE_LATEST`] shows the guarded write, a read at the statement's start,
    /// not at its transaction's commit: see [`Term::fence`]). The elector creates the sequence
    /// ([`sql::CREATE_FENCE`]) before its first attempt. Costs one `nextval` per grant,
    /// nothing per check. Default: `false` (the spec's attempt, no token).
    ///
    /// [`Term::fence`]: crate::Term::fence
    /// [`sql::FENCE_LATEST`]: crate::sql::FENCE_LATEST
    /// [`sql::CREATE_FENCE`]: crate::sql::CREATE_FENCE
    pub fencing: bool,
    /// X-WAKE (beyond the spec): a standby keeps one session of its own queued on the key
    /// beside its checks, so that a released key is taken within milliseconds of its release
    /// (a graceful unlock, a crash, a killed backend) instead of at the next check, up to T
    /// later. Costs one more backend per standby, held for as long as it stands by, and one
    /// round trip per handover; each check still runs every T, so a lost wake-up costs only
    /// speed. Not behind a transaction-mode pooler: the queued statement holds a server
    /// connection of the pooler's for as long as it waits; where the shared-session guard
    /// ([`Config::detect_shared_session`]) sees such a pooler, waking is turned off for good,
    /// with one WARN line. Default: `false` (the spec's polling).
    pub wake: bool,
}

impl Config {
    /// A configuration with the documented defaults around `pool`.
    pub fn new(pool: deadpool_postgres::Pool) -> Self {
        Self {
            pool,
            check_interval: DEFAULT_CHECK_INTERVAL,
            registry: None,
            verify_lock: false,
            detect_shared_session: true,
            identity: None,
            fencing: false,
            wake: false,
        }
    }

    /// Turns the queued standby on (X-WAKE); see [`Config::wake`].
    pub fn wake(mut self, on: bool) -> Self {
        self.wake = on;
        self
    }

    /// Turns fencing tokens on (X-FENCE); see [`Config::fencing`].
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// Names the replica on its lock session (X-WHO); see [`Config::identity`].
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = Some(identity.into());
        self
    }

    /// Sets the check interval (zero means the default).
    pub fn check_interval(mut self, interval: Duration) -> Self {
        self.check_interval = interval;
        self
    }

    /// Sets the registry that receives the gauge.
    pub fn registry(mut self, registry: prometheus::Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// The interval in force: `check_interval`, or the default when it is zero (CFG-2).
    pub fn effective_interval(&self) -> Duration {
        if self.check_interval.is_zero() {
            DEFAULT_CHECK_INTERVAL
        } else {
            self.check_interval
        }
    }
}

/// ORPH-1: the lock session's `idle_session_timeout` for interval `t`, `IDLE_SESSION_INTERVALS`·T
/// rounded to the millisecond (the setting's unit).
///
/// # Errors
/// [`Error::InvalidCheckInterval`] when it rounds to 0 ms (which would turn the bound off) or
/// exceeds the setting's range (`INT_MAX` ms, about 24.8 days, so T up to about 6.2 days).
pub(crate) fn idle_session_timeout_ms(t: Duration) -> Result<u32, Error> {
    let bound_ms = (t.as_secs_f64() * 1000.0 * f64::from(IDLE_SESSION_INTERVALS)).round();
    if bound_ms >= 1.0 && bound_ms <= f64::from(IDLE_SESSION_TIMEOUT_MAX_MS) {
        // In range, so the conversion is exact.
        Ok(bound_ms as u32)
    } else {
        Err(Error::InvalidCheckInterval {
            interval: t,
            reason: format!(
                "{IDLE_SESSION_INTERVALS}·T must round to between 1 ms and \
                 {IDLE_SESSION_TIMEOUT_MAX_MS} ms, the range of idle_session_timeout"
            ),
        })
    }
}

/// The longest `application_name` PostgreSQL keeps (`NAMEDATALEN` − 1 bytes); it cuts longer
/// ones short without a word.
pub(crate) const IDENTITY_MAX_BYTES: usize = 63;

/// X-WHO: `identity` as the lock session will carry it, or why it cannot be used. PostgreSQL
/// would silently cut a longer name and turn other bytes into `?`, so that `who_leads` could
/// not find the replica by the name it was given; quotes and backslashes are refused so the
/// name goes into the statement's literal as it is.
///
/// # Errors
/// [`Error::InvalidIdentity`] for an empty name, one over 63 bytes, or one with a byte outside
/// printable ASCII, `'` or `\`.
pub(crate) fn check_identity(identity: &str) -> Result<&str, Error> {
    let refuse = |reason: String| {
        Err(Error::InvalidIdentity {
            identity: identity.to_owned(),
            reason,
        })
    };
    if identity.is_empty() {
        return refuse("it is empty".into());
    }
    if identity.len() > IDENTITY_MAX_BYTES {
        return refuse(format!(
            "it is {} bytes long; application_name keeps {IDENTITY_MAX_BYTES}",
            identity.len()
        ));
    }
    match identity
        .chars()
        .find(|c| !(' '..='~').contains(c) || *c == '\'' || *c == '\\')
    {
        Some(c) => refuse(format!(
            "{c:?} is not allowed: use printable ASCII without quotes or backslashes"
        )),
        None => Ok(identity),
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("pool", &self.pool.status())
            .field("check_interval", &self.check_interval)
            .field("registry", &self.registry.is_some())
            .field("verify_lock", &self.verify_lock)
            .field("detect_shared_session", &self.detect_shared_session)
            .field("identity", &self.identity)
            .field("fencing", &self.fencing)
            .field("wake", &self.wake)
            .finish()
    }
}
