//! Every statement the elector sends, and the lock key as named constants (spec: "The lock key").
//!
//! Each check is one simple-protocol statement, so a standby check and a leader check each cost
//! exactly one round trip.

// The literals of the guard's clock (POOL-1), as macros so that `concat!` builds the leader
// checks' constants from them and every statement writes the same text.
macro_rules! checked {
    () => {
        "plexsphere.background_leader_checked"
    };
}
macro_rules! now_ms {
    () => {
        "(date_part('epoch', clock_timestamp()) * 1000)::bigint"
    };
}
macro_rules! write_checked {
    () => {
        concat!(
            "set_config('",
            checked!(),
            "', ",
            now_ms!(),
            "::text, false)"
        )
    };
}

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

/// The session-local marker the granting statement leaves on the lock session (POOL-1): a
/// placeholder setting, set for the session (`is_local = false`), so it lives exactly as long as
/// the server session or until a `RESET`/`DISCARD ALL`, and costs a hash lookup to read.
pub const SESSION_MARKER: &str = "plexsphere.background_leader";

/// The marker's value: the key it stands for.
pub const SESSION_MARKER_VALUE: &str = "1886156915:1";

/// A standby's check (RUN-1, LOCK-1, ORPH-1) on a server with `idle_session_timeout`
/// (PostgreSQL 14 and later): the spec's `pg_try_advisory_lock(1886156915, 1)`, in one statement
/// whose cost does not grow with the server's lock table (no `pg_locks` read) and is that of the
/// bare call (see the `check_cost` bench): the server parses and plans a short `CASE` over
/// function calls, and no view.
///
/// A grant sets the orphaned-session bound (`idle_session_timeout` = `bound_ms`) in the same
/// statement, on the server, whether or not its answer ever reaches the standby: a standby that
/// gives an attempt up after T closes the session, and if that close is lost too (a partition),
/// the server still ends the session within the bound. `CASE` evaluates its branches in order,
/// so the bound is written only after a grant. A server without the setting (before PostgreSQL
/// 14; `current_setting(.., true)` is `NULL`) answers `unbounded` instead of `granted`.
///
/// With `guarded` (POOL-1) the statement first reads the session marker: a standby that finds it
/// on its own session shares that session with the leader and must not stack a second grant on
/// it. A grant writes the marker in the same statement. One statement runs on one server session
/// even behind a transaction-mode pooler.
///
/// Such a pooler also hands the lock session to standbys after its leader is gone: a leader
/// that demoted (its check landed on another server session) closes only its client
/// connection, and a grant whose client gave it up (its deadline passed while the pooler waited
/// for a server session) still runs. The session then holds the key in the pooler's list, and
/// the standbys' checks, which land on it, keep it from ever being idle for the bound. So the
/// grant and every leader check with the guard write the server's clock into the session
/// ([`CHECKED`]); a guarded attempt that finds the marker on a session nobody checked on for
/// `bound_ms` (the orphan bound, 4T, which is longer than any leader's lease) clears the marker
/// and unlocks the key there, and answers `freed`: the next check is granted.
///
/// With an `identity` (X-WHO) a grant also sets the session's `application_name` to it, in the
/// same statement, before the bound: the lock session names its replica for as long as it holds
/// the key, and [`WHO_LEADS`] reads it. The identity is checked when the elector is built
/// (printable ASCII without quotes or backslashes, 1 to 63 bytes), so it goes into the literal
/// as it is.
///
/// Answers `shared`, `freed`, `granted`, `unbounded` or `refused`, and the backend's pid.
///
/// What the marker cannot catch: a session that holds the key without the marker (taken by
/// another program, or by an elector with the guard off), which this attempt would stack; and a
/// marker left behind by `pg_advisory_unlock_all()` run on the lock session by someone else,
/// which makes that one server session refuse (as shared) until it ends or is reset.
///
/// The elector sends this statement once its first check learned that the server is
/// PostgreSQL 14 or later ([`SERVER_VERSION`]); on an older one it sends [`try_lock_pre14`].
pub fn try_lock(bound_ms: u32, guarded: bool, identity: Option<&str>) -> String {
    attempt(
        "pg_try_advisory_lock(1886156915, 1)",
        "'refused'",
        bound_ms,
        guarded,
        identity,
    )
}

/// X-PGVER: a standby's check on a server without `idle_session_timeout` (before PostgreSQL 14):
/// [`try_lock`], whose refusal also ends the lock session if it has been idle longer than
/// [`PRE14_IDLE_INTERVALS`](crate::PRE14_IDLE_INTERVALS)·T (3/4 of `bound_ms`), as the server's
/// timeout would have, and answers `reaped`: the standbys' checks every T keep the spec's bound
/// (the session ends within 4·T of its last statement). Only a session of the standby's own
/// role is ended (another's would need `pg_signal_backend`, and its error would fail every
/// check).
///
/// This branch reads `pg_locks` and `pg_stat_activity`; parsing and planning those views costs
/// some 0.3 to 0.7 ms of server time on every refusal, many times the bare call, which is why
/// a server with the setting is sent [`try_lock`] instead. The reaping branch still asks the
/// server first and answers `refused` without evaluating it where the setting exists, so this
/// statement is safe on any server (one upgraded in place under a running elector).
pub fn try_lock_pre14(bound_ms: u32, guarded: bool, identity: Option<&str>) -> String {
    let idle_ms = u64::from(bound_ms) * u64::from(crate::PRE14_IDLE_INTERVALS)
        / u64::from(crate::IDLE_SESSION_INTERVALS);
    let refused = format!(
        "CASE WHEN current_setting('idle_session_timeout', true) IS NOT NULL THEN 'refused' \
         WHEN (SELECT count(pg_terminate_backend(a.pid)) FROM pg_stat_activity a \
         WHERE a.pid IN (SELECT l.pid FROM pg_locks l WHERE l.locktype = 'advisory' \
         AND l.classid = 1886156915 AND l.objid = 1 AND l.objsubid = 2 AND l.granted \
         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())) \
         AND a.state = 'idle' AND a.usename = current_user \
         AND a.state_change < clock_timestamp() - interval '{idle_ms} milliseconds') > 0 \
         THEN 'reaped' ELSE 'refused' END"
    );
    attempt(
        "pg_try_advisory_lock(1886156915, 1)",
        &refused,
        bound_ms,
        guarded,
        identity,
    )
}

/// X-PGVER: the server's version as a number (`150004` for 15.4), asked on the elector's first
/// check, in the same message as that check's [`try_lock_pre14`] (right on every server), to
/// choose between [`try_lock`] (14 and later) and [`try_lock_pre14`] for every later check.
pub const SERVER_VERSION: &str = "SHOW server_version_num";

/// X-PGVER: the first `server_version_num` with `idle_session_timeout` (PostgreSQL 14).
pub const IDLE_SESSION_TIMEOUT_SINCE: u32 = 140_000;

/// X-WAKE: a standby's queued attempt, [`try_lock`] with the spec's key taken by
/// `pg_advisory_lock`, which waits in the server's lock queue until the holder's session
/// releases the key (a graceful unlock, or the session's end: a crash, a killed backend, the
/// orphaned-session bound) and is then granted at once. The grant sets the bound, the marker
/// and the name in the same statement, as [`try_lock`]'s does. It answers `granted`,
/// `unbounded` or `shared`, never `refused`; it has no deadline of its own.
pub fn wait_lock(bound_ms: u32, guarded: bool, identity: Option<&str>) -> String {
    // `pg_advisory_lock` returns void, which is never NULL: the test only orders the steps.
    attempt(
        "pg_advisory_lock(1886156915, 1) IS NOT NULL",
        "'refused'",
        bound_ms,
        guarded,
        identity,
    )
}

/// The granting statement around `lock`, a boolean expression that takes the key; `refused`
/// is the answer when it is false.
fn attempt(
    lock: &str,
    refused: &str,
    bound_ms: u32,
    guarded: bool,
    identity: Option<&str>,
) -> String {
    let shared = if guarded {
        format!(
            "WHEN current_setting('plexsphere.background_leader', true) = '1886156915:1' \
             THEN CASE WHEN coalesce(nullif(current_setting('{CHECKED}', true), '')::bigint, 0) \
             >= {NOW_MS} - {bound_ms} THEN 'shared' \
             WHEN set_config('plexsphere.background_leader', '', false) IS NULL THEN NULL \
             WHEN pg_advisory_unlock(1886156915, 1) IS NULL THEN NULL ELSE 'freed' END "
        )
    } else {
        String::new()
    };
    let marker = if guarded {
        format!(
            "WHEN set_config('plexsphere.background_leader', '1886156915:1', false) IS NULL \
             THEN NULL WHEN {WRITE_CHECKED} IS NULL THEN NULL "
        )
    } else {
        String::new()
    };
    let name = identity
        .map(|id| format!("WHEN set_config('application_name', '{id}', false) IS NULL THEN NULL "))
        .unwrap_or_default();
    format!(
        "SELECT CASE {shared}WHEN {lock} THEN CASE {marker}{name}\
         WHEN current_setting('idle_session_timeout', true) IS NULL THEN 'unbounded' \
         WHEN set_config('idle_session_timeout', '{bound_ms}', false) IS NOT NULL \
         THEN 'granted' END ELSE {refused} END, pg_backend_pid()"
    )
}

/// X-FENCE: the sequence a fencing elector draws each term's token from. A sequence only
/// grows (`nextval` never hands out a value twice, never goes back, and survives restarts of
/// the server and of every replica), and costs one call per grant, none per check. It is named
/// with its schema everywhere, so that roles with different `search_path`s share one sequence
/// and their tokens compare.
pub const FENCE_SEQUENCE: &str = "public.plexsphere_background_leader_fence";

/// X-FENCE: whether [`FENCE_SEQUENCE`] exists, asked before [`CREATE_FENCE`]: `CREATE SEQUENCE
/// IF NOT EXISTS` checks the right to create in the schema before it checks existence, so an
/// application role without that right (PostgreSQL 15 and later grant none on `public`) fails
/// it even when the sequence was created ahead. Answers `t` or `f`.
pub const FENCE_EXISTS: &str =
    "SELECT to_regclass('public.plexsphere_background_leader_fence') IS NOT NULL";

/// X-FENCE: creates [`FENCE_SEQUENCE`]. A fencing elector sends it at most once, before its first
/// attempt, when [`FENCE_EXISTS`] says the sequence is missing; a replica that created it at the
/// same moment makes it fail with a duplicate, which counts as done. Where replicas lack the
/// right to create in `public`, create it ahead with this statement and grant the application
/// role `USAGE, SELECT` on it (`nextval` and the guard's `last_value`).
pub const CREATE_FENCE: &str =
    "CREATE SEQUENCE IF NOT EXISTS public.plexsphere_background_leader_fence";

/// X-FENCE: the newest token handed out, as an SQL expression to compare a term's token with
/// (`$1` below) in a write to the same database. A guarded statement that runs after a newer
/// term began writes nothing, even when it reaches the server late (held by the network, a
/// pooler, or a frozen process). The guard is a read, evaluated when its statement runs: a
/// statement that passed it inside a transaction still open when the newer term began commits
/// its rows at `COMMIT` ([`Term::fence`](crate::Term::fence) says what holds and what to do
/// for work that writes in more than one statement); sent in autocommit, the write commits as
/// it runs.
///
/// ```sql
/// INSERT INTO t (...) SELECT ... WHERE $1 = (SELECT last_value FROM public.plexsphere_background_leader_fence)
/// ```
///
/// For a store outside the database, keep the largest token it has seen and reject a smaller
/// one (`UPDATE t SET ..., fence = $1 WHERE id = $2 AND fence <= $1`).
pub const FENCE_LATEST: &str = "(SELECT last_value FROM public.plexsphere_background_leader_fence)";

/// X-FENCE: the standby's `attempt` (a [`try_lock`] statement) with a third column, the term's
/// token: `nextval` of [`FENCE_SEQUENCE`], drawn only on a grant (`granted` or `unbounded`),
/// in the same statement, so a grant whose answer is lost still uses a token up and the next
/// one is larger. `OFFSET 0` keeps the attempt a subquery of its own, evaluated first.
pub fn fenced(attempt: &str) -> String {
    format!(
        "SELECT attempt.answer, attempt.pid, CASE WHEN attempt.answer IN ('granted', 'unbounded') \
         THEN nextval('public.plexsphere_background_leader_fence') END \
         FROM ({attempt} OFFSET 0) AS attempt(answer, pid)"
    )
}

/// X-WHO: which session leads, and the replica it names. The spec's leader-finding query
/// ([`LEADER_QUERY`]) joined with `pg_stat_activity` for the holder's `application_name`:
/// answers no row when nobody leads, else the granted holder's pid and name. An elector with
/// an identity ([`Config::identity`](crate::Config::identity)) names its lock session so; one
/// without shows whatever `application_name` its pool's connections carry.
///
/// It reads `pg_locks` (see [`PING_VERIFY`] for that cost), so it is for asking now and then
/// (an operator, a status page), not for every T. From psql it runs as it is.
pub const WHO_LEADS: &str = "SELECT l.pid, a.application_name
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory'
  AND l.classid = 1886156915
  AND l.objid = 1
  AND l.objsubid = 2
  AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database());";

/// The leader's check (RUN-5) with the guard off: the spec's `SELECT 1`, which proves that a
/// session answered, not which one.
pub const PING: &str = "SELECT 1";

/// The leader's check (RUN-5) with the guard on (POOL-1, the default): as cheap as `SELECT 1`,
/// and answers the pid of the backend that ran it. The leader compares it with the pid of the
/// session that was granted the lock: behind a transaction-mode pooler the check can land on
/// another server session (the lock session is busy, idle in the pooler's list, or ended), which
/// would answer `SELECT 1` as well.
///
/// It also writes the server's clock into the session ([`CHECKED`], as the grant does), so that
/// a standby whose attempt lands on the lock session (such a pooler hands it to every client)
/// can tell a live leader's session from one no leader has checked on for the orphan bound
/// (see [`try_lock`]). On any other session the setting means nothing.
pub const PING_SESSION: &str = concat!("SELECT pg_backend_pid(), ", write_checked!());

/// POOL-1: the session-local setting where the grant and each leader check with the guard
/// ([`PING_SESSION`]) write the server's clock in milliseconds since the epoch.
pub const CHECKED: &str = checked!();

/// The server's clock in milliseconds since the epoch, as SQL: the one clock every session of
/// a server reads alike, whichever client or pooler sent the statement.
const NOW_MS: &str = now_ms!();

/// `set_config` of [`CHECKED`] to [`NOW_MS`], as SQL (the grant's and the leader checks').
const WRITE_CHECKED: &str = write_checked!();

/// The leader's check with X-VERIFY: proves the session is alive and still holds the key
/// (answers `t` or `f`).
///
/// PostgreSQL has no function that asks whether this session holds an advisory key, so this
/// reads `pg_locks`, which copies the server's whole lock table under every lock-manager
/// partition lock: its cost grows with the locks other sessions hold (see the bench). X-VERIFY
/// is therefore off by default and, when on, runs on the leader only, once per T. Like
/// [`PING_SESSION`] it writes the server's clock into [`CHECKED`] (a second column).
pub const PING_VERIFY: &str = concat!(
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
     AND classid = 1886156915 AND objid = 1 AND objsubid = 2 AND pid = pg_backend_pid() AND granted), ",
    write_checked!()
);

/// X-WAKE: the settings of a standby's queued session, set once before it queues. A queued
/// attempt is a running statement, and a running statement holds a snapshot: VACUUM keeps every
/// row version it might see, in every table of the database, for as long as it waits. With
/// `lock_timeout` = `wait_ms` the attempt gives up after that long (SQLSTATE 55P03) and queues
/// again at once with a fresh snapshot, so the xmin horizon it holds back is never older than
/// `wait_ms`. `statement_timeout` is turned off on this session alone, so that a role's or a
/// database's own (a common safety setting) does not cancel every attempt (the waiter's own
/// `lock_timeout` overrides theirs the same way).
pub fn waiter_settings(wait_ms: u32) -> String {
    format!("SET lock_timeout = {wait_ms}; SET statement_timeout = 0")
}

/// X-WAKE: the comment a queued attempt begins with, naming its waiter by `tag` (a random number
/// each waiter draws): the attempt's own text, which `pg_stat_activity.query` shows for as long
/// as it waits, is how [`end_waiter`] finds it.
fn waiter_comment(tag: u64) -> String {
    format!("/* plexsphere background leader waiter {tag:016x} */")
}

/// X-WAKE: `statement` (a [`wait_lock`]) as the waiter tagged `tag` sends it.
pub fn tagged_wait(tag: u64, statement: &str) -> String {
    format!("{} {statement}", waiter_comment(tag))
}

/// X-WAKE: ends a standby's queued attempt that its elector gave up (it led by polling, it
/// shut down): a session that waits in the lock queue does not notice its client's close
/// before it is granted, so the elector ends it (a backend of its own role).
///
/// The backend is found by the attempt it runs ([`tagged_wait`]), not by a pid learned in a
/// statement of its own: behind a pooler, or once that backend ended and its pid was handed out
/// again, such a pid may name another client's session, or another standby's queued one. Only
/// a backend that runs the tagged attempt and waits on the key is ended; any other is left
/// alone. (It needs `track_activities`, on by default; with it off, nothing is ended here, and a
/// given-up attempt ends within T anyway: its `lock_timeout` ([`waiter_settings`]) ends the
/// statement, and the backend then sees its client's close.)
pub fn end_waiter(tag: u64) -> String {
    format!(
        "SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a \
         WHERE a.pid <> pg_backend_pid() AND a.state = 'active' \
         AND starts_with(a.query, '{}') AND a.pid IN (SELECT l.pid FROM pg_locks l \
         WHERE l.locktype = 'advisory' AND l.classid = 1886156915 AND l.objid = 1 \
         AND l.objsubid = 2 AND NOT l.granted)",
        waiter_comment(tag)
    )
}

/// Graceful release (RUN-6): the spec's `pg_advisory_unlock`, and the session marker cleared in
/// the same statement (answers `t` when the session held the lock, `f` when it did not).
pub const UNLOCK: &str = "SELECT pg_advisory_unlock(1886156915, 1) \
FROM set_config('plexsphere.background_leader', '', false)";

/// The largest `idle_session_timeout` the server accepts, in milliseconds (`INT_MAX`).
pub const IDLE_SESSION_TIMEOUT_MAX_MS: u32 = i32::MAX as u32;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_plxs() {
        assert_eq!(LOCK_CLASSID, 0x706C_7873);
        assert_eq!(&LOCK_CLASSID.to_be_bytes(), b"plxs");
        assert_eq!(SESSION_MARKER_VALUE, format!("{LOCK_CLASSID}:{LOCK_OBJID}"));
        let (guarded, unguarded) = (try_lock(800, true, None), try_lock(800, false, None));
        for sql in [&guarded, UNLOCK] {
            assert!(sql.contains(SESSION_MARKER), "{sql}");
        }
        assert!(!unguarded.contains(SESSION_MARKER), "{unguarded}");
        let fenced_attempt = fenced(&guarded);
        assert!(fenced_attempt.contains(&guarded), "{fenced_attempt}");
        for sql in [&fenced_attempt, CREATE_FENCE, FENCE_LATEST] {
            assert!(sql.contains(FENCE_SEQUENCE), "{sql}");
        }
        // X-PGVER: only the pre-14 statement reads views; both are the same attempt otherwise.
        let pre14 = try_lock_pre14(800, true, None);
        for view in ["pg_locks", "pg_stat_activity"] {
            assert!(pre14.contains(view) && !guarded.contains(view), "{view}");
        }
        let grant = |sql: &str| sql.split(" ELSE ").next().map(str::to_owned);
        assert_eq!(grant(&pre14), grant(&guarded), "the same grant");
        let named = try_lock(800, true, Some("api-1"));
        assert!(named.contains("'application_name', 'api-1'"), "{named}");
        assert!(!guarded.contains("application_name"), "{guarded}");
        for sql in [
            LEADER_QUERY,
            WHO_LEADS,
            &guarded,
            &unguarded,
            PING_VERIFY,
            UNLOCK,
        ] {
            assert!(sql.contains(&LOCK_CLASSID.to_string()), "{sql}");
        }
    }
}
