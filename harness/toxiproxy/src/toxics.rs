//! A proxy's toxic collection, published to its live connections through a watch channel.
//!
//! Every change (add, update, remove, reset) publishes a new [`ToxicSet`]; each connection task
//! holds a receiver and reconciles its pipelines at once, so toxics act on existing connections.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::watch;

use crate::error::ApiError;
use crate::toxic::{Direction, Toxic, ToxicView};

/// Ids are unique across the whole process, so a toxic deleted and re-created under the same
/// name is a new toxic for live connections.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The toxics of one proxy per direction, in chain order (creation order).
#[derive(Clone, Debug, Default)]
pub struct ToxicSet {
    /// Toxics on the client-to-server stream.
    pub upstream: Vec<Arc<Toxic>>,
    /// Toxics on the server-to-client stream.
    pub downstream: Vec<Arc<Toxic>>,
}

impl ToxicSet {
    /// The chain for one direction.
    pub fn chain(&self, direction: Direction) -> &[Arc<Toxic>] {
        match direction {
            Direction::Upstream => &self.upstream,
            Direction::Downstream => &self.downstream,
        }
    }
}

/// The toxics of a proxy.
#[derive(Debug)]
pub struct ToxicCollection {
    toxics: Vec<Arc<Toxic>>,
    tx: watch::Sender<Arc<ToxicSet>>,
}

impl Default for ToxicCollection {
    fn default() -> Self {
        Self::new()
    }
}

impl ToxicCollection {
    /// An empty collection.
    pub fn new() -> Self {
        let (tx, _) = watch::channel(Arc::new(ToxicSet::default()));
        Self {
            toxics: Vec::new(),
            tx,
        }
    }

    /// A receiver of the current and future toxic sets, for a connection.
    pub fn subscribe(&self) -> watch::Receiver<Arc<ToxicSet>> {
        self.tx.subscribe()
    }

    /// The toxics as upstream lists them: the upstream stream's first, then the downstream's.
    pub fn views(&self) -> Vec<ToxicView> {
        let mut out: Vec<ToxicView> = Vec::with_capacity(self.toxics.len());
        for dir in [Direction::Upstream, Direction::Downstream] {
            out.extend(
                self.toxics
                    .iter()
                    .filter(|t| t.direction == dir)
                    .map(|t| t.view()),
            );
        }
        out
    }

    /// One toxic by name.
    pub fn get(&self, name: &str) -> Result<ToxicView, ApiError> {
        self.find(name)
            .map(|i| self.toxics[i].view())
            .ok_or_else(ApiError::toxic_not_found)
    }

    /// Adds a toxic from a create request (upstream's validation order: body, stream, type,
    /// name conflict, then attributes).
    pub fn add_json(&mut self, body: &Value) -> Result<ToxicView, ApiError> {
        let mut toxic = Toxic::parse_new(body)?;
        if self.find(&toxic.name).is_some() {
            return Err(ApiError::toxic_exists());
        }
        toxic.parse_attributes(body)?;
        toxic.id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let view = toxic.view();
        self.toxics.push(Arc::new(toxic));
        self.publish();
        Ok(view)
    }

    /// Updates a toxic's attributes and toxicity.
    pub fn update_json(&mut self, name: &str, body: &Value) -> Result<ToxicView, ApiError> {
        let i = self.find(name).ok_or_else(ApiError::toxic_not_found)?;
        let mut toxic = (*self.toxics[i]).clone();
        toxic.apply_update(body)?;
        toxic.generation += 1;
        let view = toxic.view();
        self.toxics[i] = Arc::new(toxic);
        self.publish();
        Ok(view)
    }

    /// Removes a toxic.
    pub fn remove(&mut self, name: &str) -> Result<(), ApiError> {
        let i = self.find(name).ok_or_else(ApiError::toxic_not_found)?;
        self.toxics.remove(i);
        self.publish();
        Ok(())
    }

    /// Removes every toxic.
    pub fn clear(&mut self) {
        if !self.toxics.is_empty() {
            self.toxics.clear();
            self.publish();
        }
    }

    fn find(&self, name: &str) -> Option<usize> {
        self.toxics.iter().position(|t| t.name == name)
    }

    fn publish(&self) {
        let mut set = ToxicSet::default();
        for t in &self.toxics {
            match t.direction {
                Direction::Upstream => set.upstream.push(t.clone()),
                Direction::Downstream => set.downstream.push(t.clone()),
            }
        }
        self.tx.send_replace(Arc::new(set));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn add_update_remove_publish() {
        let mut c = ToxicCollection::new();
        let rx = c.subscribe();
        c.add_json(&json!({"type": "latency", "attributes": {"latency": 5}}))
            .unwrap();
        c.add_json(&json!({"type": "timeout", "stream": "upstream"}))
            .unwrap();
        assert_eq!(
            c.add_json(&json!({"type": "latency"})).unwrap_err(),
            ApiError::toxic_exists()
        );
        let names: Vec<_> = c.views().into_iter().map(|v| v.name).collect();
        assert_eq!(names, ["timeout_upstream", "latency_downstream"]);
        assert_eq!(rx.borrow().downstream.len(), 1);
        let before = rx.borrow().downstream[0].clone();
        c.update_json("latency_downstream", &json!({"attributes": {"jitter": 2}}))
            .unwrap();
        let after = rx.borrow().downstream[0].clone();
        assert_eq!(before.id, after.id);
        assert_eq!(after.generation, before.generation + 1);
        c.remove("timeout_upstream").unwrap();
        assert!(rx.borrow().upstream.is_empty());
        assert_eq!(
            c.remove("timeout_upstream").unwrap_err(),
            ApiError::toxic_not_found()
        );
    }
}
