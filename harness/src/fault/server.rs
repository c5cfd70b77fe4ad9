//! The server faults: a lock backend terminated, PostgreSQL restarted, stopped and started.

use anyhow::{anyhow, bail};
use tokio::time::Instant;

use super::{FaultRecord, Nemesis, Verb, SERVER};

impl Nemesis {
    /// The backend pid of the session holding the leader lock: the spec's leader-finding query
    /// (`facts::spec::LEADER_QUERY`, the reference page's text), verbatim, on the observer; `None` when no granted row.
    ///
    /// # Errors
    /// The query failed.
    pub async fn leader_backend_pid(&self) -> anyhow::Result<Option<i32>> {
        let rows = self.observer.query(facts::spec::LEADER_QUERY, &[]).await?;
        let granted: Vec<i32> = rows
            .iter()
            .filter(|r| r.get::<_, bool>(1))
            .map(|r| r.get::<_, i32>(0))
            .collect();
        match granted.as_slice() {
            [] => Ok(None),
            [pid] => Ok(Some(*pid)),
            many => bail!("the leader query returned several granted rows: {many:?}"),
        }
    }

    /// Terminates the server backend `pid` (`pg_terminate_backend`) from the observer
    /// connection: its client gets an error, its session's locks are released.
    ///
    /// Inverse: none (the client reconnects on its own).
    ///
    /// # Errors
    /// The query failed, or no backend with that pid was there to terminate.
    pub async fn kill_backend(&self, pid: i32) -> anyhow::Result<FaultRecord> {
        let started = Instant::now();
        let rows = self
            .observer
            .query("SELECT pg_terminate_backend($1)", &[&pid])
            .await?;
        let done = rows.first().is_some_and(|r| r.get::<_, bool>(0));
        if !done {
            bail!("pg_terminate_backend({pid}) terminated nothing");
        }
        Ok(self.record(
            Verb::KillBackend,
            &format!("backend {pid}"),
            false,
            format!("pg_terminate_backend({pid})"),
            started,
        ))
    }

    /// Terminates the lock backend of `replica`: the granted row of the spec's query whose
    /// session is the replica's (by `application_name`). The record's target is the replica.
    ///
    /// Inverse: none (the replica reconnects on its own).
    ///
    /// # Errors
    /// The replica holds no lock backend, or the termination failed.
    pub async fn kill_backend_of(&self, replica: &str) -> anyhow::Result<FaultRecord> {
        let rows = self.observer.lock_rows().await?;
        let pid = rows
            .iter()
            .find(|(_, granted, app)| *granted && app == replica)
            .map(|(pid, _, _)| *pid)
            .ok_or_else(|| anyhow!("{replica} holds no lock backend: {rows:?}"))?;
        let mut record = self.kill_backend(pid).await?;
        record.target = replica.to_owned();
        Ok(record)
    }

    /// Terminates the backend that holds the leader lock, whichever replica's it is, if any
    /// session holds it (a scenario's `kill-backend` on `server`). Behind a transaction-mode
    /// pooler the lock's server session serves no one replica (its `application_name` is the
    /// last client's), so this is how its backend is killed there. With no holder it kills
    /// nothing, and its record says so.
    ///
    /// Inverse: none.
    ///
    /// # Errors
    /// The query or the termination failed.
    pub async fn kill_lock_holder(&self) -> anyhow::Result<FaultRecord> {
        match self.leader_backend_pid().await? {
            Some(pid) => {
                let mut record = self.kill_backend(pid).await?;
                record.target = SERVER.to_owned();
                Ok(record)
            }
            None => Ok(self.record(
                Verb::KillBackend,
                SERVER,
                false,
                "pg_terminate_backend: no session held the leader lock".to_owned(),
                Instant::now(),
            )),
        }
    }

    /// Terminates the backend that holds the leader lock ([`leader_backend_pid`]
    /// then [`kill_backend`]).
    ///
    /// [`leader_backend_pid`]: Nemesis::leader_backend_pid
    /// [`kill_backend`]: Nemesis::kill_backend
    ///
    /// # Errors
    /// No session holds the lock, or the termination failed.
    pub async fn kill_leader_backend(&self) -> anyhow::Result<FaultRecord> {
        let pid = self
            .leader_backend_pid()
            .await?
            .ok_or_else(|| anyhow!("no session holds the leader lock"))?;
        self.kill_backend(pid).await
    }

    /// Restarts PostgreSQL (Docker: the container stops and starts, on a new host port) and
    /// returns once it accepts connections again; the observer reconnects. Every session ends.
    ///
    /// Inverse: none.
    ///
    /// # Errors
    /// The restart failed or the server did not come back in time.
    pub async fn restart_server(&self) -> anyhow::Result<FaultRecord> {
        let started = Instant::now();
        self.topology.restart_server().await?;
        self.observer
            .reconnect(crate::topology::READY_LIMIT)
            .await?;
        Ok(self.record(
            Verb::RestartServer,
            SERVER,
            false,
            "restart PostgreSQL".to_owned(),
            started,
        ))
    }

    /// Stops PostgreSQL (a fast shutdown: sessions are closed).
    ///
    /// Inverse: [`start_server`](Nemesis::start_server).
    ///
    /// # Errors
    /// The stop failed.
    pub async fn stop_server(&self) -> anyhow::Result<FaultRecord> {
        let started = Instant::now();
        self.topology.stop_server().await?;
        Ok(self.record(
            Verb::StopServer,
            SERVER,
            false,
            "stop PostgreSQL".to_owned(),
            started,
        ))
    }

    /// Starts PostgreSQL again and returns once it accepts connections.
    ///
    /// Inverse of [`stop_server`](Nemesis::stop_server).
    ///
    /// # Errors
    /// It did not start in time.
    pub async fn start_server(&self) -> anyhow::Result<FaultRecord> {
        let started = Instant::now();
        self.topology.start_server().await?;
        self.observer
            .reconnect(crate::topology::READY_LIMIT)
            .await?;
        Ok(self.record(
            Verb::StopServer,
            SERVER,
            true,
            "start PostgreSQL".to_owned(),
            started,
        ))
    }
}
