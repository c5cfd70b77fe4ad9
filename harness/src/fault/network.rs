//! The link faults: partition (both ways or one), stall, reset, latency and a disabled proxy, on
//! one replica's Toxiproxy proxy, and their heals.

use std::time::Duration;

use anyhow::{anyhow, Context as _};
use tokio::time::Instant;

use super::{FaultRecord, Nemesis, Verb, UNLOCK_ALL};
use crate::topology::proxy::{Stream, Toxic};

/// A partition's toxics, on each stream: drop every byte (`timeout` 0), and hold every close for
/// a day behind it (`slow_close`), so neither side learns of a close until the heal. Upstream
/// Toxiproxy's `timeout` lets a close through (since 2.1.4); the `slow_close` behind it keeps the
/// partition silent there too, so the upstream image gives the same results.
const PARTITION: [Toxic; 2] = [
    Toxic::Timeout { timeout: 0 },
    Toxic::SlowClose { delay: 86_400_000 },
];

/// How long a session busy with a statement of the replica's may take to go idle and still be
/// unlocked: a check takes milliseconds; a session queued in `pg_advisory_lock` never goes
/// idle, and is left alone.
const UNLOCK_WITHIN: Duration = Duration::from_secs(1);

/// The verbs a [`heal`](Nemesis::heal) lifts, with their toxics.
const HEALED: [(Verb, &[Toxic]); 5] = [
    (Verb::Partition, &PARTITION),
    (Verb::PartitionRequests, &PARTITION),
    (Verb::PartitionAnswers, &PARTITION),
    (Verb::Stall, &[Toxic::Bandwidth { rate: 0 }]),
    (Verb::Reset, &[Toxic::ResetPeer { timeout: 0 }]),
];

impl Nemesis {
    async fn proxy_name(&self, replica: &str) -> anyhow::Result<String> {
        self.topology
            .proxy(replica)
            .await
            .map(|p| p.name)
            .ok_or_else(|| anyhow!("no proxy named {replica:?} in this topology"))
    }

    async fn add_both(&self, proxy: &str, toxic: Toxic) -> anyhow::Result<()> {
        let tp = self.topology.toxiproxy();
        tokio::try_join!(
            tp.add_toxic(proxy, Stream::Upstream, toxic),
            tp.add_toxic(proxy, Stream::Downstream, toxic),
        )?;
        Ok(())
    }

    /// Cuts `replica` off silently: on both streams a `timeout` toxic with timeout 0 drops all
    /// data and a `slow_close` behind it holds every close, so PostgreSQL keeps the session (only
    /// `idle_session_timeout` ends it), the replica's queries get no answer, and a close by either
    /// side reaches nobody, with the bundled server and with upstream Toxiproxy alike.
    ///
    /// Inverse: [`heal`](Nemesis::heal), which closes the replica's connections through the
    /// proxy (removing a `timeout` toxic closes the connection).
    ///
    /// # Errors
    /// No such proxy, or Toxiproxy refused.
    pub async fn partition(&self, replica: &str) -> anyhow::Result<FaultRecord> {
        let started = Instant::now();
        let proxy = self.proxy_name(replica).await?;
        for toxic in PARTITION {
            self.add_both(&proxy, toxic).await?;
        }
        self.mark(replica, Verb::Partition, true);
        Ok(self.record(
            Verb::Partition,
            replica,
            false,
            format!("partition {replica} (black hole, both directions)"),
            started,
        ))
    }

    /// Cuts `replica`'s link one way, silently: a partition's toxics on `stream` alone. With
    /// [`Stream::Upstream`] (`partition-requests`) the server hears nothing from the replica,
    /// not even its close, so only `idle_session_timeout` ends its sessions, while whatever the
    /// server sends still arrives; with [`Stream::Downstream`] (`partition-answers`) the
    /// replica's statements and its close reach the server (a leader that keeps checking keeps
    /// its session busy) and no answer comes back.
    ///
    /// Inverse: [`heal`](Nemesis::heal), which closes the replica's connections through the
    /// proxy.
    ///
    /// # Errors
    /// No such proxy, or Toxiproxy refused.
    pub async fn partition_one_way(
        &self,
        replica: &str,
        stream: Stream,
    ) -> anyhow::Result<FaultRecord> {
        let started = Instant::now();
        let proxy = self.proxy_name(replica).await?;
        let tp = self.topology.toxiproxy();
        for toxic in PARTITION {
            tp.add_toxic(&proxy, stream, toxic).await?;
        }
        let (verb, lost) = match stream {
            Stream::Upstream => (Verb::PartitionRequests, "its requests"),
            Stream::Downstream => (Verb::PartitionAnswers, "the server's answers"),
        };
        self.mark(replica, verb, true);
        Ok(self.record(
            verb,
            replica,
            false,
            format!("partition {replica} one way (black hole for {lost})"),
            started,
        ))
    }

    /// Stalls `replica`'s traffic: `bandwidth` 0 on both streams. Nothing is closed and nothing
    /// is lost; data waits.
    ///
    /// Inverse: [`heal`](Nemesis::heal): the waiting data flows and queries complete.
    ///
    /// # Errors
    /// No such proxy, or Toxiproxy refused.
    pub async fn stall(&self, replica: &str) -> anyhow::Result<FaultRecord> {
        let started = Instant::now();
        let proxy = self.proxy_name(replica).await?;
        self.add_both(&proxy, Toxic::Bandwidth { rate: 0 }).await?;
        self.mark(replica, Verb::Stall, true);
        Ok(self.record(
            Verb::Stall,
            replica,
            false,
            format!("stall {replica} (bandwidth 0, both directions)"),
            started,
        ))
    }

    /// Resets `replica`'s connections: a `reset_peer` toxic on the client-to-server stream
    /// closes every existing connection at its next data and resets (RST) every new one, as
    /// upstream Toxiproxy does. It stays until healed, so the replica cannot connect meanwhile.
    ///
    /// Inverse: [`heal`](Nemesis::heal).
    ///
    /// # Errors
    /// No such proxy, or Toxiproxy refused.
    pub async fn reset(&self, replica: &str) -> anyhow::Result<FaultRecord> {
        let started = Instant::now();
        let proxy = self.proxy_name(replica).await?;
        self.topology
            .toxiproxy()
            .add_toxic(&proxy, Stream::Upstream, Toxic::ResetPeer { timeout: 0 })
            .await?;
        self.mark(replica, Verb::Reset, true);
        Ok(self.record(
            Verb::Reset,
            replica,
            false,
            format!("reset {replica} (RST on the next data)"),
            started,
        ))
    }

    /// Releases every advisory lock `replica`'s sessions hold, behind its back: its proxy runs
    /// [`UNLOCK_ALL`] on each of its connections' sessions once it is idle between the
    /// replica's statements (within [`UNLOCK_WITHIN`]), and neither the statement nor its
    /// answer reaches the replica: what a stray unlock, or a pool's `DISCARD ALL`, does to a
    /// session. A leader whose check verifies its lock (X-VERIFY) notices at its next check;
    /// one that only runs `SELECT 1` goes on believing it leads. Needs the workspace's proxy
    /// (upstream Toxiproxy cannot).
    ///
    /// # Errors
    /// No such proxy, or the proxy cannot inject a statement.
    pub async fn unlock(&self, replica: &str) -> anyhow::Result<FaultRecord> {
        let started = Instant::now();
        let proxy = self.proxy_name(replica).await?;
        (self.topology.toxiproxy())
            .inject(&proxy, UNLOCK_ALL, UNLOCK_WITHIN)
            .await?;
        Ok(self.record(
            Verb::Unlock,
            replica,
            false,
            format!("{UNLOCK_ALL} on the sessions of {replica}, behind its back"),
            started,
        ))
    }

    /// Lifts [`partition`](Nemesis::partition), [`stall`](Nemesis::stall) and
    /// [`reset`](Nemesis::reset) on `replica` (latency and a disabled proxy stay: see
    /// [`clear_latency`](Nemesis::clear_latency) and [`enable`](Nemesis::enable)). Returns a
    /// record for each of those that was in effect (none when none was).
    ///
    /// # Errors
    /// No such proxy, or Toxiproxy refused.
    pub async fn heal(&self, replica: &str) -> anyhow::Result<Vec<FaultRecord>> {
        let started = Instant::now();
        let proxy = self.proxy_name(replica).await?;
        let tp = self.topology.toxiproxy();
        let names: std::collections::BTreeSet<String> = HEALED
            .iter()
            .flat_map(|(_, toxics)| toxics.iter())
            .flat_map(|toxic| Stream::BOTH.map(|s| toxic.name_on(s)))
            .collect();
        futures::future::try_join_all(names.iter().map(|n| tp.remove_toxic(&proxy, n))).await?;
        let lifted: Vec<Verb> = {
            let mut a = self.active.lock().map_err(|_| anyhow!("nemesis lock"))?;
            let set = a.entry(replica.to_owned()).or_default();
            HEALED
                .iter()
                .filter_map(|(v, _)| set.remove(v).then_some(*v))
                .collect()
        };
        Ok(lifted
            .into_iter()
            .map(|v| self.record(v, replica, true, format!("heal {replica}"), started))
            .collect())
    }

    /// Adds `delay` (± `jitter`) to every round trip of `replica`: a `latency` toxic on the
    /// server-to-client stream.
    ///
    /// Inverse: [`clear_latency`](Nemesis::clear_latency).
    ///
    /// # Errors
    /// No such proxy, a delay beyond `u32` milliseconds, or Toxiproxy refused.
    pub async fn latency(
        &self,
        replica: &str,
        delay: Duration,
        jitter: Duration,
    ) -> anyhow::Result<FaultRecord> {
        let started = Instant::now();
        let proxy = self.proxy_name(replica).await?;
        let ms = |d: Duration| u32::try_from(d.as_millis()).context("a delay in u32 milliseconds");
        let toxic = Toxic::Latency {
            latency: ms(delay)?,
            jitter: ms(jitter)?,
        };
        let tp = self.topology.toxiproxy();
        // Replacing a latency already in effect: remove it first (adding keeps the old one).
        tp.remove_toxic(&proxy, &toxic.name_on(Stream::Downstream))
            .await?;
        tp.add_toxic(&proxy, Stream::Downstream, toxic).await?;
        self.mark(replica, Verb::Latency, true);
        Ok(self.record(
            Verb::Latency,
            replica,
            false,
            format!("latency {replica} +{delay:?} ± {jitter:?} per round trip"),
            started,
        ))
    }

    /// Removes the latency of `replica`.
    ///
    /// Inverse of [`latency`](Nemesis::latency).
    ///
    /// # Errors
    /// No such proxy, or Toxiproxy refused.
    pub async fn clear_latency(&self, replica: &str) -> anyhow::Result<FaultRecord> {
        let started = Instant::now();
        let proxy = self.proxy_name(replica).await?;
        let name = Toxic::Latency {
            latency: 0,
            jitter: 0,
        }
        .name_on(Stream::Downstream);
        self.topology
            .toxiproxy()
            .remove_toxic(&proxy, &name)
            .await?;
        self.mark(replica, Verb::Latency, false);
        Ok(self.record(
            Verb::Latency,
            replica,
            true,
            format!("clear the latency of {replica}"),
            started,
        ))
    }

    /// Disables `replica`'s proxy: its connections are closed (a FIN, not a silent partition)
    /// and new ones are refused.
    ///
    /// Inverse: [`enable`](Nemesis::enable).
    ///
    /// # Errors
    /// No such proxy, or Toxiproxy refused.
    pub async fn disable(&self, replica: &str) -> anyhow::Result<FaultRecord> {
        let started = Instant::now();
        let proxy = self.proxy_name(replica).await?;
        self.topology.toxiproxy().set_enabled(&proxy, false).await?;
        self.mark(replica, Verb::Disable, true);
        Ok(self.record(
            Verb::Disable,
            replica,
            false,
            format!("disable the proxy of {replica} (connections closed)"),
            started,
        ))
    }

    /// Enables `replica`'s proxy again.
    ///
    /// Inverse of [`disable`](Nemesis::disable).
    ///
    /// # Errors
    /// No such proxy, or Toxiproxy refused.
    pub async fn enable(&self, replica: &str) -> anyhow::Result<FaultRecord> {
        let started = Instant::now();
        let proxy = self.proxy_name(replica).await?;
        self.topology.toxiproxy().set_enabled(&proxy, true).await?;
        self.mark(replica, Verb::Disable, false);
        Ok(self.record(
            Verb::Disable,
            replica,
            true,
            format!("enable the proxy of {replica}"),
            started,
        ))
    }

    /// Enables every proxy and removes every toxic (Toxiproxy's reset): lifts every network
    /// fault at once, with a record for each that was in effect.
    ///
    /// # Errors
    /// Toxiproxy refused.
    pub async fn heal_all(&self) -> anyhow::Result<Vec<FaultRecord>> {
        let started = Instant::now();
        self.topology.toxiproxy().reset().await?;
        let active = self
            .active
            .lock()
            .map(|mut a| std::mem::take(&mut *a))
            .unwrap_or_default();
        Ok(active
            .into_iter()
            .flat_map(|(target, verbs)| verbs.into_iter().map(move |v| (target.clone(), v)))
            .map(|(target, v)| self.record(v, &target, true, "heal every proxy".into(), started))
            .collect())
    }
}
