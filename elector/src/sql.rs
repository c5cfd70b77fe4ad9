//! Every statement the elector sends, and the lock key as named constants (spec: "The lock key").
//!
//! Each check is one simple-protocol statement, so a standby check and a leader check each cost
//! exactly one round trip.

/// First half of the two-int4 advisory lock key: `0x706C7873`, ASCII `plxs`.
pub const LOCK_CLASSID: i32 = 1_886_156_915;
/// Second half of the two-int4 advisory lock key.
pub const LOCK_OBJID: i32 = 1;
/// `pg_locks.objsubid` of a two-int4 advisory key (a single-bigint key shows `1`).
pub const LOCK_OBJSUBID: i16 = 2;

/// The spec's leader-finding query, verbatim (LOCK-3): one granted row is the leader's backend.
pub const LEADER_QUERY: &str = "SELECT pid, granted
FROM pg_locks
WHERE locktype = 'advisory'
  AND classid = 1886156915
  AND objid = 1
  AND objsubid = 2
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database());";

/// A standby's check (RUN-1, LOCK-1): `pg_try_advisory_lock(1886156915, 1)`.
///
/// One statement, so it runs on one server session even behind a transaction-mode pooler. It
/// first asks whether this very session already holds the key: a standby that finds the lock on
/// its own session shares that session with the leader (POOL-1) and must not stack a second
/// grant on it. Answers `shared`, `granted` or `refused`.
pub const TRY_LOCK: &str = "SELECT CASE \
WHEN EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = 1886156915 \
AND objid = 1 AND objsubid = 2 AND pid = pg_backend_pid() AND granted) THEN 'shared' \
WHEN pg_try_advisory_lock(1886156915, 1) THEN 'granted' ELSE 'refused' END, pg_backend_pid()";

/// A standby's check without the shared-session guard: the spec's plain attempt, for showing
/// the transaction-mode pooler hazard (POOL-1) with `Config::detect_shared_session` off.
pub const TRY_LOCK_UNGUARDED: &str = "SELECT CASE \
WHEN pg_try_advisory_lock(1886156915, 1) THEN 'granted' ELSE 'refused' END, pg_backend_pid()";

/// The leader's check (RUN-5): proves the session is alive.
pub const PING: &str = "SELECT 1";

/// The leader's check with X-VERIFY: proves the session is alive and still holds the key
/// (answers `t` or `f`).
pub const PING_VERIFY: &str = "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
AND classid = 1886156915 AND objid = 1 AND objsubid = 2 AND pid = pg_backend_pid() AND granted)";

/// Graceful release (RUN-6).
pub const UNLOCK: &str = "SELECT pg_advisory_unlock(1886156915, 1)";

/// The orphaned-session bound (ORPH-1), set on the lock session right after the grant.
pub fn set_idle_session_timeout(millis: u128) -> String {
    format!("SET idle_session_timeout = {millis}")
}

/// SQLSTATE of "unrecognized configuration parameter": `idle_session_timeout` before PG 14.
pub const UNDEFINED_OBJECT: &str = "42704";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_plxs() {
        assert_eq!(LOCK_CLASSID, 0x706C_7873);
        assert_eq!(&LOCK_CLASSID.to_be_bytes(), b"plxs");
        for sql in [
            LEADER_QUERY,
            TRY_LOCK,
            TRY_LOCK_UNGUARDED,
            PING_VERIFY,
            UNLOCK,
        ] {
            assert!(sql.contains(&LOCK_CLASSID.to_string()), "{sql}");
        }
    }
}
