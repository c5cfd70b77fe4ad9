//! Config (CFG-2): the intervals an elector refuses. CFG-1 (a Config without a pool does not
//! compile) is decided in `elector/typecheck`, whose cases are examples that `cargo check`
//! must refuse.

/// ORPH-1, CFG-2 (review: the bound could be 0 or out of range): an interval whose 4·T rounds
/// to 0 ms (which would turn `idle_session_timeout` off) or exceeds the setting's range
/// (2147483647 ms) is refused with an error that says why.
#[tokio::test]
async fn intervals_whose_orphan_bound_is_out_of_range_are_refused() {
    use std::time::Duration;

    use elector::{Config, Elector};

    let pool = testkit::pool_for(
        "postgres://nobody@127.0.0.1:1/none",
        "x",
        1,
        Default::default(),
    );
    let build = |t: Duration| Elector::new(Config::new(pool.clone()).check_interval(t));
    for bad in [
        Duration::from_nanos(1),
        Duration::from_micros(100),
        Duration::from_millis(536_870_912),
        Duration::from_secs(7 * 24 * 3600),
        Duration::MAX,
    ] {
        let err = build(bad).expect_err(&format!("{bad:?} is refused"));
        let text = err.to_string();
        assert!(
            text.contains("idle_session_timeout") && text.contains("check interval"),
            "{bad:?}: {text}"
        );
    }
    for good in [
        Duration::from_micros(250),
        Duration::from_millis(1),
        Duration::from_secs(5),
        Duration::from_millis(536_870_911),
    ] {
        assert!(build(good).is_ok(), "{good:?} is accepted");
    }
}
