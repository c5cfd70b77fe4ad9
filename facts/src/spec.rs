//! The reference page's literal text that tests compare against: copied from
//! `background-leader.md`, never taken from the elector's own constants, so a typo in the crate
//! cannot pass its own test.

/// The leader-finding query, verbatim.
pub const LEADER_QUERY: &str = "SELECT pid, granted
FROM pg_locks
WHERE locktype = 'advisory'
  AND classid = 1886156915
  AND objid = 1
  AND objsubid = 2
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database());";

/// The gauge's name (spec: "Metric").
pub const GAUGE: &str = "plexsphere_background_leader";
