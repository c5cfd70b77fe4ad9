//! The `plexsphere_background_leader` gauge (spec: "Metric"; CFG-4, MET-1, MET-2).
//!
//! Go's client answers a duplicate registration with the collector already registered, and the
//! spec relies on it: two electors on one registry write one series. prometheus-rs only answers
//! `AlreadyReg` and has no way to hand out a registered collector, so the gauge is registered
//! wrapped in a collector of this crate ([`Registered`]), which hands itself to a lookup when the
//! registry gathers it on the looking thread (see [`registered_on`]). Nothing is kept outside
//! the registries: a registry that is dropped takes its gauge with it, a gauge unregistered and
//! registered again is found as it is now, and a scrape shows nothing but the gauge.

use std::cell::RefCell;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGauge, Registry};

use crate::Error;

/// The metric's name.
pub const GAUGE_NAME: &str = "plexsphere_background_leader";
/// The metric's help text.
pub const GAUGE_HELP: &str = "1 while this replica holds the background leader lock, 0 otherwise.";

/// The gauge of one elector; a no-op when the elector was given no registry.
#[derive(Clone, Debug, Default)]
pub(crate) struct LeaderGauge(Option<IntGauge>);

impl LeaderGauge {
    /// Registers the gauge on `registry`, or reuses the one this crate registered there before
    /// (MET-2).
    pub(crate) fn register(registry: Option<&Registry>) -> Result<Self, Error> {
        let Some(registry) = registry else {
            return Ok(Self(None));
        };
        let gauge = IntGauge::new(GAUGE_NAME, GAUGE_HELP)?;
        match registry.register(Box::new(Registered(gauge.clone()))) {
            Ok(()) => Ok(Self(Some(gauge))),
            Err(prometheus::Error::AlreadyReg) => registered_on(registry)
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

/// The gauge as this crate registers it: collected like the gauge itself, and found by a
/// lookup on the same thread.
#[derive(Clone)]
struct Registered(IntGauge);

thread_local! {
    /// `Some` while this thread looks up a registered gauge: the gauge found, if any.
    static LOOKUP: RefCell<Option<Option<IntGauge>>> = const { RefCell::new(None) };
}

impl Collector for Registered {
    fn desc(&self) -> Vec<&Desc> {
        self.0.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        LOOKUP.with(|lookup| {
            if let Some(found) = lookup.borrow_mut().as_mut() {
                *found = Some(self.0.clone());
            }
        });
        self.0.collect()
    }
}

/// The gauge this crate registered on `registry`, if one is: the registry gathers its collectors
/// on the calling thread, and [`Registered::collect`] hands its gauge to the lookup there. A
/// scrape on another thread meanwhile sees the same as always. `None` when the name is taken by
/// a collector of someone else's.
fn registered_on(registry: &Registry) -> Option<IntGauge> {
    LOOKUP.with(|lookup| *lookup.borrow_mut() = Some(None));
    // Its answer is not needed: gathering runs every collector's `collect`, ours among them.
    let _ = registry.gather();
    LOOKUP.with(|lookup| lookup.borrow_mut().take().flatten())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

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

    /// MET-2 (review: a registry's lookup returned the first gauge ever registered there, stale
    /// once it was unregistered): after the gauge is unregistered and registered again, a later
    /// elector on that registry writes the series a scrape shows.
    #[test]
    fn after_a_reregistration_a_later_elector_writes_the_scraped_gauge() {
        let r = Registry::new();
        let first = LeaderGauge::register(Some(&r)).expect("first");
        let same_desc = IntGauge::new(GAUGE_NAME, GAUGE_HELP).expect("a gauge");
        r.unregister(Box::new(same_desc)).expect("unregistered");
        first.set(true);
        assert_eq!(value(&r), Vec::<i64>::new(), "nothing registered");
        let second = LeaderGauge::register(Some(&r)).expect("second");
        let third = LeaderGauge::register(Some(&r)).expect("third");
        third.set(true);
        assert_eq!(
            value(&r),
            vec![1],
            "the third elector wrote a gauge nobody scrapes"
        );
        second.set(false);
        assert_eq!(value(&r), vec![0]);
    }

    /// A collector that counts its drops, to see a registry freed.
    struct Sentinel(IntGauge, std::sync::Arc<AtomicU64>);

    impl prometheus::core::Collector for Sentinel {
        fn desc(&self) -> Vec<&prometheus::core::Desc> {
            self.0.desc()
        }
        fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
            self.0.collect()
        }
    }

    impl Drop for Sentinel {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// MET-2 (review: a process-wide list kept every registry and its collectors alive): once
    /// the application dropped a registry and its electors, the registry and what it held are
    /// freed.
    #[test]
    fn a_dropped_registry_is_freed() {
        let dropped = std::sync::Arc::new(AtomicU64::new(0));
        let r = Registry::new();
        let sentinel = IntGauge::new("sentinel", "dropped with its registry").expect("gauge");
        r.register(Box::new(Sentinel(sentinel, dropped.clone())))
            .expect("the sentinel");
        let gauge = LeaderGauge::register(Some(&r)).expect("gauge");
        let again = LeaderGauge::register(Some(&r)).expect("again");
        drop((gauge, again, r));
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "the registry was kept alive"
        );
    }

    /// MET-2 (review: the lookup registered `elector_registry_probe_N` on other electors'
    /// registries): a scrape never shows anything but the gauge, even while electors on other
    /// registries look theirs up, over and over.
    #[test]
    fn a_scrape_never_shows_a_foreign_metric() {
        let (scraped, other) = (Registry::new(), Registry::new());
        LeaderGauge::register(Some(&scraped)).expect("scraped");
        LeaderGauge::register(Some(&other)).expect("other");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let scraper = std::thread::spawn({
            let (scraped, stop) = (scraped.clone(), stop.clone());
            move || {
                let mut foreign = std::collections::BTreeSet::new();
                while !stop.load(Ordering::SeqCst) {
                    for mf in scraped.gather() {
                        if mf.name() != GAUGE_NAME {
                            foreign.insert(mf.name().to_owned());
                        }
                    }
                }
                foreign
            }
        });
        for _ in 0..2_000 {
            LeaderGauge::register(Some(&other)).expect("other again");
        }
        stop.store(true, Ordering::SeqCst);
        let foreign = scraper.join().expect("the scraper");
        assert!(foreign.is_empty(), "a scrape showed {foreign:?}");
    }
}
