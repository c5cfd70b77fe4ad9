//! Removals of finished topologies that a run of many scenarios lets go on in the background.
//!
//! Removing a scenario's containers takes about 0.9 s here and little CPU (0.16 core-seconds for
//! PostgreSQL's container, measured on 2026-12-07). `harness run` queues each scenario's removal
//! on a [`Teardowns`] instead of waiting for it, and the next scenario's topology waits for the
//! queue while its own containers start ([`TopologyConfig::after`](super::TopologyConfig::after)):
//! one scenario at a time (the main job's way), a removal never overlaps a scenario's replicas;
//! with `--jobs 2` the queue is shared, so a removal may run beside the other lane's replicas.
//! The run waits for every removal before it ends ([`Teardowns::finish`]).

use std::sync::{Arc, Mutex, PoisonError};

use tokio::task::JoinHandle;

/// A queue of topology removals under way. Cheap to clone (a shared handle).
#[derive(Clone, Debug, Default)]
pub struct Teardowns {
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Teardowns {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues a removal under way.
    pub(super) fn push(&self, task: JoinHandle<()>) {
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }

    /// How many queued removals have not finished yet.
    pub fn pending(&self) -> usize {
        let tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        tasks.iter().filter(|t| !t.is_finished()).count()
    }

    /// Waits until every queued removal has finished, those queued meanwhile too. A removal
    /// that panicked is logged: its resources carry the run's labels, and the next start's
    /// sweep removes them.
    pub async fn finish(&self) {
        loop {
            let taken = {
                let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
                std::mem::take(&mut *tasks)
            };
            if taken.is_empty() {
                return;
            }
            for task in taken {
                if let Err(e) = task.await {
                    tracing::warn!(error = %e, "removing a finished topology failed");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// `finish` waits for every queued removal, those queued while it waits too.
    #[tokio::test(start_paused = true)]
    async fn finish_waits_for_every_queued_removal_and_those_queued_meanwhile() {
        let queue = Teardowns::new();
        let done = Arc::new(Mutex::new(Vec::new()));
        let (q, d) = (queue.clone(), done.clone());
        queue.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            d.lock().unwrap().push(1);
            let d = d.clone();
            q.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                d.lock().unwrap().push(2);
            }));
        }));
        assert_eq!(queue.pending(), 1);
        queue.finish().await;
        assert_eq!(*done.lock().unwrap(), [1, 2]);
        assert_eq!(queue.pending(), 0);
    }
}
