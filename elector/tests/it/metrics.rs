//! The gauge (CFG-4, MET-1, MET-2) and the configuration defaults (CFG-2).

use std::time::Duration;

use elector::{Config, Elector, DEFAULT_CHECK_INTERVAL};

use crate::fixture::*;

/// CFG-2: the default interval is 5 s and zero means the default; the other defaults.
#[tokio::test]
async fn check_interval_defaults_to_five_seconds() {
    let pool = pool_for(
        "postgres://nobody@127.0.0.1:1/none",
        "x",
        1,
        Default::default(),
    );
    assert_eq!(DEFAULT_CHECK_INTERVAL, Duration::from_secs(5));
    let config = Config::new(pool.clone());
    assert_eq!(config.check_interval, Duration::from_secs(5));
    // The other defaults: no gauge, X-VERIFY off, POOL-1's guard on; Debug shows them.
    assert!(config.registry.is_none() && !config.verify_lock && config.detect_shared_session);
    let shown = format!("{config:?}");
    for field in [
        "check_interval: 5s",
        "registry: false",
        "verify_lock: false",
        "detect_shared_session: true",
    ] {
        assert!(shown.contains(field), "{field} in {shown}");
    }
    let zero = Elector::new(Config::new(pool.clone()).check_interval(Duration::ZERO)).unwrap();
    assert_eq!(zero.check_interval(), Duration::from_secs(5));
    let set = Elector::new(Config::new(pool).check_interval(T)).unwrap();
    assert_eq!(set.check_interval(), T);
    assert_eq!(
        format!("{set:?}"),
        "Elector { check_interval: 200ms, is_leader: false, term: None }"
    );
}

/// CFG-4: a registry receives the gauge; no registry registers none (not on the default one).
#[tokio::test]
async fn gauge_only_on_the_given_registry() {
    let pool = pool_for(
        "postgres://nobody@127.0.0.1:1/none",
        "x",
        1,
        Default::default(),
    );
    let registry = prometheus::Registry::new();
    let _with = Elector::new(Config::new(pool.clone()).registry(registry.clone())).unwrap();
    assert_eq!(gauge(&registry), Some(0));
    let _without = Elector::new(Config::new(pool)).unwrap();
    assert_eq!(gauge(prometheus::default_registry()), None);
}

/// MET-2: two electors on one registry write one series; MET-1: it is 1 while one leads.
#[tokio::test]
async fn two_electors_on_one_registry_share_the_series() {
    let pg = Pg::start().await;
    let registry = prometheus::Registry::new();
    let make = |app: &str| {
        Elector::new(
            Config::new(pg.pool(app, 2))
                .check_interval(T)
                .registry(registry.clone()),
        )
        .expect("the second elector reuses the registered gauge")
    };
    let (a, b) = (make("a"), make("b"));
    let families: Vec<_> = registry
        .gather()
        .into_iter()
        .filter(|mf| mf.name() == SPEC_GAUGE)
        .collect();
    assert_eq!(families.len(), 1);
    assert_eq!(families[0].get_metric().len(), 1, "one series");

    let (stop, run) = lead(&a).await;
    assert_eq!(gauge(&registry), Some(1));
    assert!(!b.is_leader());
    halt(stop, run).await;
    assert_eq!(gauge(&registry), Some(0));
}

/// MET-1, MET-2 (review: `Elector::new` zeroes a shared gauge): building a second elector on
/// the registry of a leading one leaves the shared series at 1.
#[tokio::test]
async fn a_second_elector_keeps_the_gauge_of_a_leading_one() {
    let pg = Pg::start().await;
    let registry = prometheus::Registry::new();
    let make = |app: &str| {
        Elector::new(
            Config::new(pg.pool(app, 2))
                .check_interval(T)
                .registry(registry.clone()),
        )
        .expect("an elector")
    };
    let a = make("a");
    let (stop, run) = lead(&a).await;
    assert_eq!(gauge(&registry), Some(1));
    let _b = make("b");
    assert_eq!(gauge(&registry), Some(1), "the leader's series stays 1");
    halt(stop, run).await;
}
