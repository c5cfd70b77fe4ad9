//! X-WHO (beyond the spec): which replica leads, asked of the database.
//!
//! An elector built with [`Config::identity`](crate::Config::identity) names its lock session
//! (`application_name`) in the statement that wins the grant, so the name is on the session for
//! exactly as long as the session holds the key. [`Elector::who_leads`] asks the server who
//! holds the key and what its session is called; [`sql::WHO_LEADS`] is the same question for
//! psql or a status page.
//!
//! Any replica, leader or standby, and any other program can ask: the answer is the server's,
//! not this process's belief, so it also names a leader that this replica cannot reach.

use tokio_postgres::SimpleQueryMessage;

use crate::session::Loan;
use crate::{sql, Elector, Error};

/// The session that holds the leader key, by the server's own tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The holder's backend pid (`pg_locks.pid`).
    pub backend_pid: i32,
    /// The holder's `application_name`: the leading replica's
    /// [`identity`](crate::Config::identity) when it has one; `None` when `pg_stat_activity`
    /// no longer shows the backend (it ended between the two reads).
    pub name: Option<String>,
}

impl Elector {
    /// X-WHO: which session holds the leader key now, and the replica it names; `None` when
    /// nobody leads. One statement ([`sql::WHO_LEADS`]) on a connection from this elector's
    /// pool, each step bounded by T. It reads `pg_locks`, whose cost grows with the server's
    /// lock table: ask it when someone wants to know, not on every check.
    ///
    /// # Errors
    /// [`Error::Pool`] or [`Error::Timeout`] when no connection comes within T, [`Error::Db`] or
    /// [`Error::Timeout`] when the statement fails or is not answered within T, and
    /// [`Error::Protocol`] for an answer that is not a pid, or more than one row.
    pub async fn who_leads(&self) -> Result<Option<Leader>, Error> {
        let t = self.inner.interval;
        // A loan, so that a dropped or failed ask closes the connection rather than hand the
        // pool a session that is still busy.
        let loan = Loan::borrow(&self.inner.pool, t).await?;
        let answer = loan.query(sql::WHO_LEADS, t).await?;
        loan.give_back();
        leader_of(&answer)
    }
}

/// `WHO_LEADS`'s answer as a [`Leader`]: no row, or one. The key is granted to one session at
/// most; sessions waiting for it (`granted = false`) are not asked for, so more rows are an
/// answer this crate does not understand, never a guess.
fn leader_of(answer: &[SimpleQueryMessage]) -> Result<Option<Leader>, Error> {
    let rows: Vec<_> = (answer.iter())
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        })
        .collect();
    let row = match rows.as_slice() {
        [] => return Ok(None),
        [row] => row,
        more => {
            return Err(Error::Protocol(format!(
                "{} rows for the holder of the leader key",
                more.len()
            )))
        }
    };
    let pid = row.get(0).unwrap_or_default();
    let backend_pid = pid
        .parse()
        .map_err(|_| Error::Protocol(format!("{pid:?} as the leader's pid")))?;
    Ok(Some(Leader {
        backend_pid,
        name: row.get(1).map(str::to_owned),
    }))
}
