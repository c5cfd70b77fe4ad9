//! The nemesis: the actor that carries the fault verbs out on a topology and keeps their
//! records. Its verbs are split by concern: the link faults in `network.rs`, the server faults
//! in `server.rs` and the process faults in `process.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail};
use futures::future::BoxFuture;
use nix::sys::signal::Signal;
use tokio::time::Instant;

use super::{Delay, FaultRecord, Lift, Verb, SERVER};
use crate::topology::proxy::Stream;
use crate::topology::{Observer, Topology};

/// A process the nemesis can signal and restart: a replica. Implemented for
/// [`ReplicaProcess`](crate::replica::ReplicaProcess).
pub trait ProcessTarget: Send {
    /// Its name (the record's target).
    fn target_name(&self) -> String;
    /// Sends `signal` to it.
    ///
    /// # Errors
    /// The signal could not be sent.
    fn send_signal(&mut self, signal: Signal) -> anyhow::Result<()>;
    /// Starts it again (after killing it, if it runs).
    fn restart_process(&mut self) -> BoxFuture<'_, anyhow::Result<()>>;
}

impl ProcessTarget for crate::replica::ReplicaProcess {
    fn target_name(&self) -> String {
        self.name().to_owned()
    }

    fn send_signal(&mut self, signal: Signal) -> anyhow::Result<()> {
        self.signal(signal)
    }

    fn restart_process(&mut self) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(self.restart())
    }
}

/// The replica processes a [`Nemesis`] may signal, by name.
pub trait Processes: Send {
    /// The process of the replica `name`, if there is one.
    fn process(&mut self, name: &str) -> Option<&mut dyn ProcessTarget>;
}

impl<P: ProcessTarget> Processes for BTreeMap<String, P> {
    fn process(&mut self, name: &str) -> Option<&mut dyn ProcessTarget> {
        self.get_mut(name).map(|p| p as &mut dyn ProcessTarget)
    }
}

fn process<'p>(
    processes: &'p mut dyn Processes,
    name: &str,
) -> anyhow::Result<&'p mut dyn ProcessTarget> {
    processes
        .process(name)
        .ok_or_else(|| anyhow!("no replica process named {name:?}"))
}

/// The fault injector of one run.
pub struct Nemesis {
    pub(super) topology: Topology,
    pub(super) observer: Observer,
    run_start: Instant,
    records: Arc<Mutex<Vec<FaultRecord>>>,
    /// Proxy faults in effect, by target (for the heal's record).
    pub(super) active: Mutex<BTreeMap<String, BTreeSet<Verb>>>,
}

impl std::fmt::Debug for Nemesis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nemesis")
            .field("topology", &self.topology)
            .finish_non_exhaustive()
    }
}

impl Nemesis {
    /// A nemesis for `topology`; record times are relative to `run_start`. It has an observer
    /// connection of its own (directly to PostgreSQL) for the backend verbs.
    pub fn new(topology: &Topology, run_start: Instant) -> Nemesis {
        Nemesis {
            topology: topology.clone(),
            observer: Observer::new(topology),
            run_start,
            records: Arc::default(),
            active: Mutex::default(),
        }
    }

    /// Every record so far, in order.
    pub fn records(&self) -> Vec<FaultRecord> {
        self.records.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// The nemesis's observer (PostgreSQL directly, reconnecting after restarts).
    pub fn observer(&self) -> &Observer {
        &self.observer
    }

    /// Carries `verb` out on `target` (a replica's name; ignored by the server verbs), with
    /// `delay` for [`Verb::Latency`]; the process verbs act on `processes`.
    ///
    /// # Errors
    /// As the verb's own method: no such proxy, process or lock backend, or the call failed.
    pub async fn apply(
        &self,
        verb: Verb,
        target: &str,
        delay: Delay,
        processes: &mut dyn Processes,
    ) -> anyhow::Result<FaultRecord> {
        match verb {
            Verb::Partition => self.partition(target).await,
            Verb::PartitionRequests => self.partition_one_way(target, Stream::Upstream).await,
            Verb::PartitionAnswers => self.partition_one_way(target, Stream::Downstream).await,
            Verb::Stall => self.stall(target).await,
            Verb::Latency => self.latency(target, delay.latency, delay.jitter).await,
            Verb::Reset => self.reset(target).await,
            Verb::Disable => self.disable(target).await,
            Verb::Unlock => self.unlock(target).await,
            Verb::KillBackend if target == SERVER => self.kill_lock_holder().await,
            Verb::KillBackend => self.kill_backend_of(target).await,
            Verb::RestartServer => self.restart_server().await,
            Verb::StopServer => self.stop_server().await,
            Verb::Kill => self.kill(process(processes, target)?),
            Verb::Freeze => self.freeze(process(processes, target)?),
            Verb::Terminate => self.terminate(process(processes, target)?),
            Verb::Restart => self.restart(process(processes, target)?).await,
        }
    }

    /// Lifts `verb` from `target` with its [inverse](Verb::inverse). A heal lifts every link
    /// fault in effect on the target, one record each.
    ///
    /// # Errors
    /// The verb has no inverse, or the inverse's call failed.
    pub async fn lift(
        &self,
        verb: Verb,
        target: &str,
        processes: &mut dyn Processes,
    ) -> anyhow::Result<Vec<FaultRecord>> {
        let one = |r: FaultRecord| vec![r];
        match verb.inverse() {
            None => bail!("{verb} has no inverse to lift"),
            Some(Lift::Heal) => self.heal(target).await,
            Some(Lift::ClearLatency) => self.clear_latency(target).await.map(one),
            Some(Lift::Enable) => self.enable(target).await.map(one),
            Some(Lift::StartServer) => self.start_server().await.map(one),
            Some(Lift::Thaw) => self.thaw(process(processes, target)?).map(one),
        }
    }

    /// Records one fault applied (or lifted, with `lifted`) by a call that began at `started`,
    /// logs it, and returns the record.
    pub(super) fn record(
        &self,
        verb: Verb,
        target: &str,
        lifted: bool,
        label: String,
        started: Instant,
    ) -> FaultRecord {
        let record = FaultRecord {
            verb,
            target: target.to_owned(),
            lifted,
            label,
            start: started.saturating_duration_since(self.run_start),
            end: Instant::now().saturating_duration_since(self.run_start),
        };
        if let Ok(mut r) = self.records.lock() {
            r.push(record.clone());
        }
        tracing::info!(
            verb = %record.verb, target = %record.target, lifted, start_ms = record.start_ms(),
            end_ms = record.end_ms(), "{}", record.label
        );
        record
    }

    /// Notes the link fault `verb` on `target` as in effect (`on`) or lifted, for the heal's
    /// records.
    pub(super) fn mark(&self, target: &str, verb: Verb, on: bool) {
        if let Ok(mut a) = self.active.lock() {
            let set = a.entry(target.to_owned()).or_default();
            if on {
                set.insert(verb);
            } else {
                set.remove(&verb);
            }
        }
    }
}
