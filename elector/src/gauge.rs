//! The `plexsphere_background_leader` gauge (spec: "Metric"; CFG-4, MET-1, MET-2).
//!
//! Go's client answers a duplicate registration with the collector already registered, and the
//! spec relies on it: two electors on one registry write one series. prometheus-rs only answers
//! `AlreadyReg`, so this module keeps the gauges it registered and finds the one that belongs to
//! a registry by hand (see [`find_registered`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use prometheus::{IntGauge, Registry};

use crate::Error;

/// The metric's name.
pub const GAUGE_NAME: &str = "plexsphere_background_leader";
/// The metric's help text.
pub const GAUGE_HELP: &str = "1 while this replica holds the background leader lock, 0 otherwise.";

/// Gauges this process registered, with their registries (registries are cheap handles).
static REGISTERED: Mutex<Vec<(Registry, IntGauge)>> = Mutex::new(Vec::new());

/// The gauge of one elector; a no-op when the elector was given no registry.
#[derive(Clone, Debug, Default)]
pub(crate) struct LeaderGauge(Option<IntGauge>);

impl LeaderGauge {
    /// Registers the gauge on `registry`, or reuses the one already registered there (MET-2).
    pub(crate) fn register(registry: Option<&Registry>) -> Result<Self, Error> {
        let Some(registry) = registry else {
            return Ok(Self(None));
        };
        let mut registered = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
        let gauge = IntGauge::new(GAUGE_NAME, GAUGE_HELP)?;
        match registry.register(Box::new(gauge.clone())) {
            Ok(()) => {
                registered.push((registry.clone(), gauge.clone()));
                Ok(Self(Some(gauge)))
            }
            Err(prometheus::Error::AlreadyReg) => find_registered(&registered, registry)
                .map(|g| Self(Some(g)))
                .ok_or(Error::Metrics(prometheus::Error::AlreadyReg)),
            Err(e) => Err(e.into()),
        }
    }

    /// Sets the gauge: 1 while leading, 0 otherwise.
    pub(crate) fn set(&self, leading: bool) {
        if let Some(g) = &self.0 {
            g.set(i64::from(leading));
        }
    }
}

/// Finds the gauge registered on `registry`: prometheus-rs registries have no identity to compare,
/// so a throwaway probe metric is registered on each candidate and looked for in `registry`.
fn find_registered(registered: &[(Registry, IntGauge)], registry: &Registry) -> Option<IntGauge> {
    static PROBES: AtomicU64 = AtomicU64::new(0);
    registered.iter().find_map(|(candidate, gauge)| {
        let name = format!(
            "elector_registry_probe_{}",
            PROBES.fetch_add(1, Ordering::Relaxed)
        );
        let probe = IntGauge::new(name.clone(), "identity probe").ok()?;
        candidate.register(Box::new(probe.clone())).ok()?;
        let same = registry.gather().iter().any(|mf| mf.name() == name);
        let _ = candidate.unregister(Box::new(probe));
        same.then(|| gauge.clone())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(registry: &Registry) -> Vec<i64> {
        (registry.gather().iter())
            .filter(|mf| mf.name() == "plexsphere_background_leader")
            .map(|mf| mf.get_metric()[0].get_gauge().get_value() as i64)
            .collect()
    }

    /// MET-2: a second gauge asked for on a registry that already has one is that registry's
    /// own, never the gauge of another registry this process registered first.
    #[test]
    fn a_registry_gets_back_its_own_gauge() {
        let (x, y) = (Registry::new(), Registry::new());
        let on_x = LeaderGauge::register(Some(&x)).expect("x");
        let on_y = LeaderGauge::register(Some(&y)).expect("y");
        let again_on_y = LeaderGauge::register(Some(&y)).expect("y again");
        again_on_y.set(true);
        assert_eq!((value(&x), value(&y)), (vec![0], vec![1]));
        on_y.set(false);
        on_x.set(true);
        assert_eq!((value(&x), value(&y)), (vec![1], vec![0]));
        LeaderGauge::register(None).expect("none").set(true);
        assert_eq!((value(&x), value(&y)), (vec![1], vec![0]));
    }
}
