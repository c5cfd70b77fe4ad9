//! Fault injection inside a replica, driven by `POST /control` (and the `--fail-loop` /
//! `--panic-loop` flags): make a loop's passes fail or panic (READY-2, READY-4), or make a
//! worker's run end (LOOP-5).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::names::{all_loop_names, ELECTION_WORKER};

/// A replica's fault switch (its `POST /control`), as a scenario step sets it and the
/// history records it ([`crate::timeline::What::Control`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Switch {
    /// What a loop's next passes do.
    Loop {
        /// The loop.
        name: String,
        /// Fail, panic, or run normally again.
        mode: LoopMode,
    },
    /// What a supervised worker does next.
    Worker {
        /// The worker.
        name: String,
        /// Crash, exit, crash on every run, or run normally again.
        mode: WorkerMode,
    },
}

impl Switch {
    /// Whether it lifts a fault (mode `ok`) rather than setting one.
    pub fn lifts(&self) -> bool {
        matches!(
            self,
            Switch::Loop {
                mode: LoopMode::Ok,
                ..
            } | Switch::Worker {
                mode: WorkerMode::Ok,
                ..
            }
        )
    }
}

/// What a loop's next passes do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopMode {
    /// Run normally.
    #[default]
    Ok,
    /// Fail with an injected error (the tick is a failed tick).
    Fail,
    /// Panic with an injected value (the tick is a panicked tick).
    Panic,
}

/// What a worker does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerMode {
    /// Clear a pending or standing fault.
    Ok,
    /// The worker's current run panics (or its next run, when it is not running now).
    Crash,
    /// The worker's current run returns (or its next run, when it is not running now).
    Exit,
    /// Every run panics at once, until `ok`: drives the worker through its restart budget.
    CrashLoop,
}

/// The error text of an injected failure of `loop_name`.
pub fn injected_failure(loop_name: &str) -> String {
    format!("injected failure of {loop_name:?}")
}

/// The panic value of an injected panic of `loop_name` (the probe then reports
/// `plexsphere: background loop "<loop>": tick panicked: <this value>`).
pub fn injected_panic(loop_name: &str) -> String {
    format!("injected panic of {loop_name:?}")
}

/// The panic value of an injected crash of the worker `worker`.
pub fn injected_crash(worker: &str) -> String {
    format!("injected crash of worker {worker:?}")
}

/// What ends a worker's run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// Panic.
    Crash,
    /// Return.
    Exit,
}

#[derive(Debug, Default)]
struct WorkerFault {
    pending: Option<Trigger>,
    always: bool,
}

#[derive(Debug, Default)]
struct WorkerCtl {
    fault: Mutex<WorkerFault>,
    notify: Notify,
}

impl WorkerCtl {
    fn take(&self) -> Option<Trigger> {
        let mut f = self.fault.lock().unwrap_or_else(|e| e.into_inner());
        if f.always {
            return Some(Trigger::Crash);
        }
        f.pending.take()
    }
}

/// The fault switches of one replica: one per loop and one per worker, known at boot.
#[derive(Debug)]
pub struct Control {
    loops: Mutex<BTreeMap<String, LoopMode>>,
    workers: BTreeMap<String, Arc<WorkerCtl>>,
}

/// A `/control` request for a name this replica does not have.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// No such loop.
    #[error("no loop named {0:?} runs on this replica")]
    UnknownLoop(String),
    /// No such worker.
    #[error("no worker named {0:?} runs on this replica")]
    UnknownWorker(String),
}

impl Control {
    /// The switches of a replica with (`wired`) or without background loops (no DSN: none).
    pub fn new(wired: bool) -> Self {
        let names: Vec<&str> = if wired {
            all_loop_names().collect()
        } else {
            Vec::new()
        };
        let loops = names
            .iter()
            .map(|n| ((*n).to_owned(), LoopMode::Ok))
            .collect();
        let workers = names
            .iter()
            .copied()
            .chain(wired.then_some(ELECTION_WORKER))
            .map(|n| (n.to_owned(), Arc::default()))
            .collect();
        Self {
            loops: Mutex::new(loops),
            workers,
        }
    }

    /// Sets what `loop_name`'s next passes do.
    ///
    /// # Errors
    /// [`ControlError::UnknownLoop`] when no such loop runs here.
    pub fn set_loop(&self, loop_name: &str, mode: LoopMode) -> Result<(), ControlError> {
        let mut loops = self.loops.lock().unwrap_or_else(|e| e.into_inner());
        let slot = loops
            .get_mut(loop_name)
            .ok_or_else(|| ControlError::UnknownLoop(loop_name.to_owned()))?;
        *slot = mode;
        tracing::info!(r#loop = loop_name, mode = ?mode, "control: loop mode set");
        Ok(())
    }

    /// What `loop_name`'s passes do now.
    pub fn loop_mode(&self, loop_name: &str) -> LoopMode {
        self.loops
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(loop_name)
            .copied()
            .unwrap_or_default()
    }

    /// Sets what the worker `worker` does next.
    ///
    /// # Errors
    /// [`ControlError::UnknownWorker`] when no such worker runs here.
    pub fn set_worker(&self, worker: &str, mode: WorkerMode) -> Result<(), ControlError> {
        let ctl = self
            .workers
            .get(worker)
            .ok_or_else(|| ControlError::UnknownWorker(worker.to_owned()))?;
        {
            let mut f = ctl.fault.lock().unwrap_or_else(|e| e.into_inner());
            match mode {
                WorkerMode::Ok => *f = WorkerFault::default(),
                WorkerMode::Crash => f.pending = Some(Trigger::Crash),
                WorkerMode::Exit => f.pending = Some(Trigger::Exit),
                WorkerMode::CrashLoop => f.always = true,
            }
        }
        ctl.notify.notify_waiters();
        tracing::info!(worker, mode = ?mode, "control: worker mode set");
        Ok(())
    }

    /// Completes when the worker `worker` is told to end its run, with how. Pends forever for
    /// an unknown worker.
    pub(crate) async fn triggered(&self, worker: &str) -> Trigger {
        let Some(ctl) = self.workers.get(worker) else {
            return std::future::pending().await;
        };
        loop {
            let notified = ctl.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(t) = ctl.take() {
                return t;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn switches_are_per_name_and_unknown_names_are_refused() {
        let c = Control::new(true);
        assert_eq!(c.loop_mode("invitations-expire"), LoopMode::Ok);
        c.set_loop("invitations-expire", LoopMode::Fail).unwrap();
        assert_eq!(c.loop_mode("invitations-expire"), LoopMode::Fail);
        assert!(matches!(
            c.set_loop("nope", LoopMode::Fail),
            Err(ControlError::UnknownLoop(_))
        ));
        c.set_worker("audit-archiver", WorkerMode::Exit).unwrap();
        assert_eq!(c.triggered("audit-archiver").await, Trigger::Exit);
        c.set_worker(ELECTION_WORKER, WorkerMode::CrashLoop)
            .unwrap();
        assert_eq!(c.triggered(ELECTION_WORKER).await, Trigger::Crash);
        assert_eq!(c.triggered(ELECTION_WORKER).await, Trigger::Crash);
        assert!(Control::new(false)
            .set_worker(ELECTION_WORKER, WorkerMode::Crash)
            .is_err());
    }
}
