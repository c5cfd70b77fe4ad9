//! A small supervisor of named workers (spec: "Background workers"; LOOP-5).
//!
//! Each worker runs as its own tokio task. A worker that returns or panics before shutdown is
//! restarted after a back-off, unless it already used its restart budget (`max_restarts` within
//! `window`); then it stays down and [`WorkersProbe`] reports it.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::panic;
use crate::readiness::Check;

/// The worker name of the election itself.
pub const ELECTION_WORKER: &str = "background-leader";

/// How often a worker may be restarted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartBudget {
    /// Restarts allowed within `window`. Default: 5.
    pub max_restarts: u32,
    /// The sliding window the restarts are counted in. Default: 60 s.
    pub window: Duration,
    /// The pause before a restart. Default: 1 s.
    pub backoff: Duration,
}

impl Default for RestartBudget {
    fn default() -> Self {
        Self {
            max_restarts: 5,
            window: Duration::from_secs(60),
            backoff: Duration::from_secs(1),
        }
    }
}

/// Where a worker is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkerState {
    /// Running.
    Running,
    /// Ended (returned or panicked) and waiting for its restart.
    Restarting,
    /// Used up its restart budget and stays down.
    Exhausted,
    /// Ended after shutdown.
    Stopped,
}

/// A worker's state and restart count, as the workers probe and `/workers` show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerStatus {
    /// The worker's name.
    pub name: String,
    /// Its state.
    pub state: WorkerState,
    /// How many times it was restarted.
    pub restarts: u32,
    /// Why it last ended, if it did.
    pub last_exit: Option<String>,
}

type Factory = Box<
    dyn Fn(CancellationToken) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>>
        + Send
        + Sync,
>;

/// Every worker's status by name, as a watch so an application sees each change as it happens.
type Statuses = Arc<watch::Sender<BTreeMap<String, WorkerStatus>>>;

/// Runs named workers and restarts them within a budget.
pub struct Supervisor {
    budget: RestartBudget,
    workers: Vec<(String, Arc<Factory>)>,
    statuses: Statuses,
}

impl Supervisor {
    /// A supervisor with `budget` for each worker.
    pub fn new(budget: RestartBudget) -> Self {
        Self {
            budget,
            workers: Vec::new(),
            statuses: Arc::new(watch::Sender::new(BTreeMap::new())),
        }
    }

    /// Registers a worker by `name`; `start` is called for each (re)start with the shutdown
    /// token. Panics when the name is taken: names identify workers.
    pub fn add<F, Fut, E>(&mut self, name: &str, start: F)
    where
        F: Fn(CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display,
    {
        assert!(
            !self.workers.iter().any(|(n, _)| n == name),
            "worker {name:?} is already registered"
        );
        let factory: Factory = Box::new(move |token| {
            let run = start(token);
            Box::pin(async move { run.await.map_err(|e| e.to_string()) })
        });
        self.workers.push((name.to_owned(), Arc::new(factory)));
        self.set(name, WorkerState::Stopped, None);
    }

    /// The workers probe for `/readyz`: fails while a worker has exhausted its budget.
    pub fn probe(&self) -> WorkersProbe {
        WorkersProbe(self.statuses.clone())
    }

    /// A handle to every worker's status.
    pub fn statuses(&self) -> WorkerStatuses {
        WorkerStatuses(self.statuses.clone())
    }

    /// Starts every worker and supervises them until `shutdown` is cancelled and all of them
    /// ended. Cancellation-safe only in the sense that dropping it aborts the workers (each
    /// worker's task, not only its supervising task).
    pub async fn run(self, shutdown: CancellationToken) {
        panic::install_hook();
        let mut set = JoinSet::new();
        for (name, factory) in self.workers {
            let (statuses, shutdown, budget) =
                (self.statuses.clone(), shutdown.clone(), self.budget);
            set.spawn(supervise(name, factory, statuses, shutdown, budget));
        }
        while set.join_next().await.is_some() {}
    }

    fn set(&self, name: &str, state: WorkerState, last_exit: Option<String>) {
        set_status(&self.statuses, name, state, last_exit, false);
    }
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("budget", &self.budget)
            .field(
                "workers",
                &self.workers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

fn set_status(
    statuses: &Statuses,
    name: &str,
    state: WorkerState,
    exit: Option<String>,
    restart: bool,
) {
    statuses.send_modify(|map| {
        let status = map.entry(name.to_owned()).or_insert_with(|| WorkerStatus {
            name: name.to_owned(),
            state: WorkerState::Stopped,
            restarts: 0,
            last_exit: None,
        });
        status.state = state;
        if exit.is_some() {
            status.last_exit = exit;
        }
        if restart {
            status.restarts += 1;
        }
    });
}

async fn supervise(
    name: String,
    factory: Arc<Factory>,
    statuses: Statuses,
    shutdown: CancellationToken,
    budget: RestartBudget,
) {
    let mut restarts: Vec<Instant> = Vec::new();
    let mut first = true;
    loop {
        set_status(&statuses, &name, WorkerState::Running, None, !first);
        first = false;
        tracing::debug!(worker = %name, "worker started");
        // Aborted with this task: a dropped supervisor leaves no worker running detached. The
        // start closure is called inside the worker's task, so that a panic in the closure
        // itself (before it returns its future) is the worker's crash, not this task's.
        let (start, token) = (factory.clone(), shutdown.clone());
        let worker = AbortOnDropHandle::new(tokio::spawn(async move { start(token).await }));
        let exit = match worker.await {
            Ok(Ok(())) => "returned".to_owned(),
            Ok(Err(e)) => format!("failed: {e}"),
            Err(e) if e.is_panic() => {
                let value = panic::message(e.into_panic().as_ref());
                format!("panicked: {value}")
            }
            Err(e) => format!("aborted: {e}"),
        };
        if shutdown.is_cancelled() {
            set_status(&statuses, &name, WorkerState::Stopped, Some(exit), false);
            return;
        }
        let now = Instant::now();
        restarts.retain(|t| now.duration_since(*t) < budget.window);
        if restarts.len() >= budget.max_restarts as usize {
            tracing::error!(worker = %name, exit = %exit,
                "worker exhausted its restart budget and stays down");
            set_status(&statuses, &name, WorkerState::Exhausted, Some(exit), false);
            return;
        }
        restarts.push(now);
        tracing::warn!(worker = %name, exit = %exit, "worker ended; restarting");
        set_status(&statuses, &name, WorkerState::Restarting, Some(exit), false);
        tokio::select! {
            () = shutdown.cancelled() => {
                set_status(&statuses, &name, WorkerState::Stopped, None, false);
                return;
            }
            () = tokio::time::sleep(budget.backoff) => {}
        }
    }
}

/// A read handle to the workers' statuses (for `/workers`).
#[derive(Clone, Debug)]
pub struct WorkerStatuses(Statuses);

impl WorkerStatuses {
    /// Every worker's status, by name.
    pub fn snapshot(&self) -> Vec<WorkerStatus> {
        self.0.borrow().values().cloned().collect()
    }

    /// A watch of every worker's status by name, updated at each change (a worker started,
    /// ended, restarting, exhausted or stopped).
    pub fn subscribe(&self) -> watch::Receiver<BTreeMap<String, WorkerStatus>> {
        self.0.subscribe()
    }
}

/// The workers probe (LOOP-5): fails while any worker has exhausted its restart budget.
#[derive(Clone, Debug)]
pub struct WorkersProbe(Statuses);

impl Check for WorkersProbe {
    fn name(&self) -> &str {
        "workers"
    }

    fn check(&self) -> Result<(), String> {
        let map = self.0.borrow();
        let down: Vec<String> = map
            .values()
            .filter(|s| s.state == WorkerState::Exhausted)
            .map(|s| {
                format!(
                    "worker {:?} exhausted its restart budget ({})",
                    s.name,
                    s.last_exit.as_deref().unwrap_or("no exit recorded")
                )
            })
            .collect();
        if down.is_empty() {
            Ok(())
        } else {
            Err(down.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::*;

    fn budget() -> RestartBudget {
        RestartBudget {
            max_restarts: 3,
            window: Duration::from_secs(60),
            backoff: Duration::from_secs(1),
        }
    }

    /// LOOP-5: a worker that keeps panicking is restarted `max_restarts` times, then stays down
    /// and the workers probe reports it; a healthy worker is untouched.
    #[tokio::test(start_paused = true)]
    async fn panicking_worker_exhausts_its_budget() {
        let starts = Arc::new(AtomicU32::new(0));
        let mut sup = Supervisor::new(budget());
        let s = starts.clone();
        sup.add("flaky", move |_token| {
            let n = s.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 100 {
                    panic!("flaky start {n}");
                }
                Ok::<(), String>(())
            }
        });
        sup.add(ELECTION_WORKER, |token: CancellationToken| async move {
            token.cancelled().await;
            Ok::<(), String>(())
        });
        let (probe, statuses) = (sup.probe(), sup.statuses());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(sup.run(shutdown.clone()));
        tokio::time::sleep(Duration::from_secs(10)).await;

        assert_eq!(
            starts.load(Ordering::SeqCst),
            4,
            "the first start and three restarts"
        );
        let flaky = statuses
            .snapshot()
            .into_iter()
            .find(|s| s.name == "flaky")
            .unwrap();
        assert_eq!(flaky.state, WorkerState::Exhausted);
        assert_eq!(flaky.restarts, 3);
        assert_eq!(flaky.last_exit.as_deref(), Some("panicked: flaky start 3"));
        let err = probe.check().unwrap_err();
        assert!(
            err.contains("\"flaky\" exhausted its restart budget"),
            "{err}"
        );
        let leader = statuses
            .snapshot()
            .into_iter()
            .find(|s| s.name == ELECTION_WORKER)
            .unwrap();
        assert_eq!(leader.state, WorkerState::Running);

        shutdown.cancel();
        task.await.unwrap();
        let leader = statuses
            .snapshot()
            .into_iter()
            .find(|s| s.name == ELECTION_WORKER)
            .unwrap();
        assert_eq!(
            leader.state,
            WorkerState::Stopped,
            "not restarted after shutdown"
        );
    }

    /// LOOP-5 (review: a start closure that panics before it returns its future unwound the
    /// supervising task, so the worker was never restarted and showed Running for ever): such a
    /// panic is a crash like any other: restarted after the back-off, counted against the
    /// budget, and reported by the workers probe once the budget is used up.
    #[tokio::test(start_paused = true)]
    async fn a_start_closure_that_panics_is_a_crash() {
        let starts = Arc::new(AtomicU32::new(0));
        let mut sup = Supervisor::new(budget());
        let s = starts.clone();
        sup.add("panics-at-start", move |_token| {
            let n = s.fetch_add(1, Ordering::SeqCst);
            assert!(n >= 100, "start {n} panics before it returns");
            async { Ok::<(), String>(()) }
        });
        let (probe, statuses) = (sup.probe(), sup.statuses());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(sup.run(shutdown.clone()));
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let st = &statuses.snapshot()[0];
        assert_eq!(
            (st.state.clone(), st.restarts, starts.load(Ordering::SeqCst)),
            (WorkerState::Restarting, 1, 2),
            "restarted once after the back-off, and waiting for the next: {st:?}"
        );
        tokio::time::sleep(Duration::from_secs(10)).await;
        let st = &statuses.snapshot()[0];
        assert_eq!((st.state.clone(), st.restarts), (WorkerState::Exhausted, 3));
        assert_eq!(starts.load(Ordering::SeqCst), 4);
        assert!(
            (st.last_exit.as_deref())
                .is_some_and(|e| e.contains("start 3 panics before it returns")),
            "{st:?}"
        );
        let err = probe.check().unwrap_err();
        assert!(err.contains("\"panics-at-start\" exhausted"), "{err}");
        shutdown.cancel();
        task.await.unwrap();
    }

    /// LOOP-5: a registered worker is listed (stopped, no restarts) before the supervisor runs;
    /// the workers probe is named `workers`.
    #[test]
    fn workers_are_listed_from_registration() {
        let mut sup = Supervisor::new(budget());
        sup.add("invitations-expire", |_token| async {
            Ok::<(), String>(())
        });
        let listed = sup.statuses().snapshot();
        let expected = WorkerStatus {
            name: "invitations-expire".into(),
            state: WorkerState::Stopped,
            restarts: 0,
            last_exit: None,
        };
        assert_eq!(listed, [expected]);
        assert_eq!(sup.probe().name(), "workers");
        assert_eq!(sup.probe().check(), Ok(()));
        let shown = format!("{sup:?}");
        assert!(shown.contains("\"invitations-expire\"") && shown.contains("max_restarts: 3"));
    }

    /// LOOP-5: the window slides: a restart exactly `window` old no longer counts.
    #[tokio::test(start_paused = true)]
    async fn a_restart_one_window_old_is_out_of_the_window() {
        let starts = Arc::new(AtomicU32::new(0));
        let mut sup = Supervisor::new(RestartBudget {
            max_restarts: 1,
            window: Duration::from_secs(5),
            backoff: Duration::from_secs(1),
        });
        let s = starts.clone();
        // Ends at once (0 s), restarted at 1 s, ends at 5 s: one window after the restart at 0 s.
        sup.add("short", move |_token| {
            let n = s.fetch_add(1, Ordering::SeqCst);
            async move {
                if n > 0 {
                    tokio::time::sleep(Duration::from_secs(4)).await;
                }
                Err::<(), _>("ended")
            }
        });
        let statuses = sup.statuses();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(sup.run(shutdown.clone()));
        tokio::time::sleep(Duration::from_millis(6_500)).await;
        let st = &statuses.snapshot()[0];
        assert_eq!((st.state.clone(), st.restarts), (WorkerState::Running, 2));
        assert_eq!(starts.load(Ordering::SeqCst), 3);
        shutdown.cancel();
        task.await.unwrap();
    }

    /// Dropping the supervisor's future (an aborted task) ends its workers too: none is left
    /// running detached.
    #[tokio::test(start_paused = true)]
    async fn dropping_the_supervisor_ends_its_workers() {
        struct Dropped(Arc<AtomicU32>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(AtomicU32::new(0));
        let mut sup = Supervisor::new(budget());
        let d = dropped.clone();
        sup.add("forever", move |_token| {
            let guard = Dropped(d.clone());
            async move {
                let _guard = guard;
                std::future::pending::<Result<(), String>>().await
            }
        });
        let statuses = sup.statuses();
        let task = tokio::spawn(sup.run(CancellationToken::new()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(statuses.snapshot()[0].state, WorkerState::Running);
        task.abort();
        let _ = task.await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "the worker was left running"
        );
    }

    /// LOOP-5: restarts spread wider than the window never exhaust the budget; a returning
    /// worker is restarted after the back-off.
    #[tokio::test(start_paused = true)]
    async fn restarts_outside_the_window_do_not_count() {
        let starts = Arc::new(AtomicU32::new(0));
        let mut sup = Supervisor::new(RestartBudget {
            max_restarts: 2,
            window: Duration::from_secs(5),
            backoff: Duration::from_secs(1),
        });
        let s = starts.clone();
        sup.add("returns", move |_token| {
            s.fetch_add(1, Ordering::SeqCst);
            async {
                tokio::time::sleep(Duration::from_secs(4)).await;
                Err::<(), _>("done early")
            }
        });
        let (probe, statuses) = (sup.probe(), sup.statuses());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(sup.run(shutdown.clone()));
        // Starts at 0, 5, 10, 15, 20, 25 s: each restart has at most one other in its window.
        tokio::time::sleep(Duration::from_millis(27_500)).await;
        assert_eq!(starts.load(Ordering::SeqCst), 6);
        assert_eq!(probe.check(), Ok(()));
        let st = &statuses.snapshot()[0];
        assert_eq!(st.state, WorkerState::Running);
        assert_eq!(st.last_exit.as_deref(), Some("failed: done early"));
        shutdown.cancel();
        task.await.unwrap();
    }
}
