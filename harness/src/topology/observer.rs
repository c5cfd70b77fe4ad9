//! The harness's own connection to PostgreSQL, directly and never through a proxy.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{Topology, READY_LIMIT};

/// A direct connection to PostgreSQL that reconnects after a server restart (the Docker host
/// port changes).
pub struct Observer {
    topology: Topology,
    client: tokio::sync::Mutex<Option<Arc<tokio_postgres::Client>>>,
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("run", &self.topology.run_id())
            .finish()
    }
}

impl Observer {
    /// An observer of `topology` (connects on first use).
    pub fn new(topology: &Topology) -> Observer {
        Observer {
            topology: topology.clone(),
            client: tokio::sync::Mutex::new(None),
        }
    }

    /// A live client: the current one, or a new one when it was closed (polling up to
    /// [`READY_LIMIT`] while the server comes back).
    ///
    /// # Errors
    /// PostgreSQL did not accept a connection within the limit.
    pub async fn client(&self) -> anyhow::Result<Arc<tokio_postgres::Client>> {
        let mut slot = self.client.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let fresh = Arc::new(self.topology.wait_observer(READY_LIMIT).await?);
        *slot = Some(fresh.clone());
        Ok(fresh)
    }

    /// A connection of its own (not the shared one), e.g. for a step that holds a transaction
    /// open while the observer keeps sampling.
    ///
    /// # Errors
    /// PostgreSQL did not accept a connection within [`READY_LIMIT`].
    pub async fn session(&self) -> anyhow::Result<tokio_postgres::Client> {
        self.topology.wait_observer(READY_LIMIT).await
    }

    /// Drops the current connection and connects again, polling up to `limit`.
    ///
    /// # Errors
    /// No connection within `limit`.
    pub async fn reconnect(&self, limit: Duration) -> anyhow::Result<Arc<tokio_postgres::Client>> {
        let mut slot = self.client.lock().await;
        slot.take();
        let fresh = Arc::new(self.topology.wait_observer(limit).await?);
        *slot = Some(fresh.clone());
        Ok(fresh)
    }

    /// Runs `sql` (extended protocol) on a live client; after a connection error, reconnects once
    /// and runs it again.
    ///
    /// # Errors
    /// The query failed twice, or no connection could be made.
    pub async fn query(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> anyhow::Result<Vec<tokio_postgres::Row>> {
        let client = self.client().await?;
        match client.query(sql, params).await {
            Ok(rows) => Ok(rows),
            Err(e) if e.is_closed() || client.is_closed() => {
                let client = self.reconnect(READY_LIMIT).await?;
                Ok(client.query(sql, params).await?)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The spec's query plus the holders' application names, on the observer connection.
    pub async fn lock_rows(&self) -> anyhow::Result<Vec<(i32, bool, String)>> {
        // The spec's text, not the elector's constant: a typo in the crate must not pass.
        let rows = self.query(facts::spec::LEADER_QUERY, &[]).await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let (pid, granted): (i32, bool) = (row.get(0), row.get(1));
            let app = self
                .query(
                    "SELECT application_name FROM pg_stat_activity WHERE pid = $1",
                    &[&pid],
                )
                .await?
                .first()
                .map(|r| r.get::<_, String>(0))
                .unwrap_or_default();
            out.push((pid, granted, app));
        }
        Ok(out)
    }
}
