//! Gates for loops that stay on every replica (spec: "Which loops run on the leader"; LOOP-3).
//!
//! Every replica runs such a loop, and only one step of it (the capacity crossing's audit row,
//! the durable removals) is leader-only. A gate given no predicate stays open, so a
//! single-replica deployment does every step.

use std::fmt;
use std::sync::Arc;

use crate::Elector;

/// Whether a leader-only step may run now.
#[derive(Clone, Default)]
pub struct Gate(Option<Arc<dyn Fn() -> bool + Send + Sync>>);

impl Gate {
    /// A gate with no predicate: always open.
    pub fn open() -> Self {
        Self(None)
    }

    /// A gate open while `predicate` holds.
    pub fn new(predicate: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        Self(Some(Arc::new(predicate)))
    }

    /// A gate open only on the leader.
    pub fn leader(elector: &Elector) -> Self {
        let elector = elector.clone();
        Self::new(move || elector.is_leader())
    }

    /// A leader gate when there is an elector, an open gate when there is none.
    pub fn leader_or_open(elector: Option<&Elector>) -> Self {
        elector.map_or_else(Self::open, Self::leader)
    }

    /// Whether the gated step may run now.
    pub fn allows(&self) -> bool {
        self.0.as_ref().is_none_or(|p| p())
    }
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Gate(predicate)"
        } else {
            "Gate(open)"
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;

    /// LOOP-3: a gate with no predicate stays open; a predicate gate follows its predicate.
    #[test]
    fn open_gate_and_predicate_gate() {
        assert!(Gate::open().allows());
        assert!(Gate::default().allows());
        assert!(Gate::leader_or_open(None).allows());
        let flag = Arc::new(AtomicBool::new(false));
        let f = flag.clone();
        let gate = Gate::new(move || f.load(Ordering::SeqCst));
        assert!(!gate.allows());
        flag.store(true, Ordering::SeqCst);
        assert!(gate.allows());
        assert_eq!(
            format!("{:?} {gate:?}", Gate::open()),
            "Gate(open) Gate(predicate)"
        );
    }
}
