//! The unit tests of `handle`.

use super::*;

#[test]
fn parses_the_gauge_and_builds_the_command_line() {
    let text = "# HELP plexsphere_background_leader x\n# TYPE plexsphere_background_leader gauge\nplexsphere_background_leader 1\n";
    assert_eq!(
        gauge_value(text, "plexsphere_background_leader"),
        Ok(Some(1))
    );
    assert_eq!(gauge_value("", "plexsphere_background_leader"), Ok(None));
    let longer = "plexsphere_background_leader_total 3\nplexsphere_background_leader 0.0\n";
    assert_eq!(
        gauge_value(longer, "plexsphere_background_leader"),
        Ok(Some(0))
    );
    let bad = gauge_value(
        "plexsphere_background_leader yes\n",
        "plexsphere_background_leader",
    );
    assert!(bad.unwrap_err().contains("not a number"));
    // A labelled gauge is read, its labels kept (MET-1 fails it; the value still counts).
    let labelled = "plexsphere_background_leader{pod=\"a\"} 1\n";
    assert_eq!(
        gauge_reading(labelled, "plexsphere_background_leader"),
        Ok(Some(GaugeReading {
            value: 1,
            labels: Some("{pod=\"a\"}".into())
        }))
    );
    let two =
        "plexsphere_background_leader{pod=\"a\"} 1\nplexsphere_background_leader{pod=\"b\"} 0\n";
    assert!(gauge_value(two, "plexsphere_background_leader")
        .unwrap_err()
        .contains("more than one series"));
    let mut spec = ReplicaSpec::new("r1", Duration::from_millis(200)).dsn("postgres://x/y");
    spec.fail_loops.push("invitations-expire".into());
    let args = spec.args();
    assert_eq!(
        &args[..5],
        ["replica", "--name", "r1", "--check-interval-ms", "200"]
    );
    assert!(
        !args.iter().any(|a| a.contains("postgres://")),
        "the DSN stays off the command line: {args:?}"
    );
    assert!(args
        .windows(2)
        .any(|w| w == ["--fail-loop", "invitations-expire"]));
    assert_eq!(mode_text(&WorkerMode::CrashLoop).unwrap(), "crash_loop");
}

/// The features a scenario turns on reach another program as the contract's variables, and
/// none is one of the flags only the harness's own replica takes.
#[test]
fn features_reach_another_program_as_contract_variables() {
    let mut spec = ReplicaSpec::new("r1", Duration::from_millis(200));
    (spec.wake, spec.fence, spec.verify_lock) = (true, true, true);
    spec.no_shared_session_guard = true;
    let env = spec.contract_env();
    for (var, value) in [
        ("REPLICA_WAKE", "1"),
        ("REPLICA_FENCE", "1"),
        ("REPLICA_VERIFY_LOCK", "1"),
        ("REPLICA_SHARED_SESSION_GUARD", "0"),
    ] {
        assert!(env.contains(&(var, value.to_owned())), "{var}: {env:?}");
    }
    assert_eq!(spec.flags_only_ours(), Vec::<String>::new());
    assert!(spec.args().iter().any(|a| a == "--verify-lock"));
}
