//! Readiness probes (spec: "Readiness"; READY-1..READY-5).
//!
//! A [`Probe`] reports the outcome of the last tick its loop ran on this replica and runs no pass
//! of its own. [`Readiness`] gathers the probes of a replica (and the supervisor's workers probe)
//! for a `/readyz` endpoint.

use std::fmt;
use std::sync::{Arc, Mutex};

/// The seven ticked loops that carry a probe, as `(loop name, probe name)` (READY-5).
pub const PROBED_LOOPS: [(&str, &str); 7] = [
    ("invitations-expire", "invitations-expire"),
    ("approvals-expire", "approvals-expire"),
    ("access-session-sweep", "access-session-sweeper"),
    ("actions-timeout", "actions-timeout"),
    ("management-fleet-reconcile", "management-fleet-reconcile"),
    (
        "provisioning-broker-reconcile",
        "provisioning-broker-reconcile",
    ),
    ("artifacts-refresh", "artifacts-refresh"),
];

/// The probe name of a loop, if the loop carries a probe (READY-5).
pub fn probe_name(loop_name: &str) -> Option<&'static str> {
    PROBED_LOOPS
        .iter()
        .find(|(l, _)| *l == loop_name)
        .map(|(_, p)| *p)
}

/// What one tick of a ticked loop came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TickOutcome {
    /// A standby's tick: no pass ran.
    Standby,
    /// The pass ran on the leader and succeeded.
    Passed,
    /// The pass ran on the leader and failed with this error.
    Failed(String),
    /// The pass panicked with this value (READY-4).
    Panicked(String),
    /// Leadership was lost while the pass ran: not a failure (DO-4).
    Lost,
}

impl TickOutcome {
    /// Whether the tick counts as failed.
    pub fn is_failure(&self) -> bool {
        matches!(self, TickOutcome::Failed(_) | TickOutcome::Panicked(_))
    }
}

/// Anything `/readyz` can ask: a name and a verdict.
pub trait Check: Send + Sync {
    /// The check's name on `/readyz`.
    fn name(&self) -> &str;
    /// `Ok` when ready, else the reason.
    fn check(&self) -> Result<(), String>;
}

#[derive(Clone, Debug)]
enum State {
    /// READY-1: no tick yet; the boot pass's outcome (`None` until it ran).
    Boot(Option<Result<(), String>>),
    /// The outcome of the last tick.
    Tick(Result<(), String>),
}

/// The readiness probe of one ticked loop. Cheap to clone; clones share the state.
#[derive(Clone, Debug)]
pub struct Probe {
    name: Arc<str>,
    loop_name: Arc<str>,
    state: Arc<Mutex<State>>,
}

impl Probe {
    /// A probe named `name` for the loop `loop_name`; it fails until the boot pass is recorded.
    pub fn new(name: &str, loop_name: &str) -> Self {
        Self {
            name: name.into(),
            loop_name: loop_name.into(),
            state: Arc::new(Mutex::new(State::Boot(None))),
        }
    }

    /// The probe for a loop by the spec's table (READY-5), or `None` for a loop without one.
    pub fn for_loop(loop_name: &str) -> Option<Self> {
        probe_name(loop_name).map(|p| Self::new(p, loop_name))
    }

    /// The loop this probe watches.
    pub fn loop_name(&self) -> &str {
        &self.loop_name
    }

    /// Records the boot pass's outcome; it is reported until the first tick (READY-1).
    pub fn record_boot(&self, outcome: Result<(), String>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(*state, State::Boot(_)) {
            *state = State::Boot(Some(outcome));
        }
    }

    /// Records a tick: a standby's tick, or a lost term, passes (READY-3); a failure or panic is
    /// reported until a later tick succeeds (READY-2, READY-4).
    pub fn record_tick(&self, outcome: &TickOutcome) {
        let result = match outcome {
            TickOutcome::Standby | TickOutcome::Passed | TickOutcome::Lost => Ok(()),
            TickOutcome::Failed(e) => Err(e.clone()),
            TickOutcome::Panicked(v) => Err(panic_report(&self.loop_name, v)),
        };
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = State::Tick(result);
    }
}

/// A panic's value as text (a `&str` or `String` payload), as the probes and logs show it.
pub fn panic_value(payload: &(dyn std::any::Any + Send)) -> String {
    crate::panic::message(payload)
}

/// READY-4: the probe's text for a panicked tick.
pub fn panic_report(loop_name: &str, value: &str) -> String {
    format!("plexsphere: background loop \"{loop_name}\": tick panicked: {value}")
}

impl Check for Probe {
    fn name(&self) -> &str {
        &self.name
    }

    fn check(&self) -> Result<(), String> {
        match &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            State::Boot(None) => Err("the boot pass has not run yet".to_owned()),
            State::Boot(Some(r)) | State::Tick(r) => r.clone(),
        }
    }
}

/// One check's verdict, as `/readyz` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The check's name.
    pub name: String,
    /// `Ok`, or why it is not ready.
    pub result: Result<(), String>,
}

/// The readiness of a replica: every registered check must pass.
#[derive(Clone, Default)]
pub struct Readiness {
    checks: Arc<Mutex<Vec<Arc<dyn Check>>>>,
}

impl Readiness {
    /// An empty set of checks (ready).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a check.
    pub fn add(&self, check: impl Check + 'static) {
        self.checks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::new(check));
    }

    /// Every check's verdict, in registration order.
    pub fn verdicts(&self) -> Vec<Verdict> {
        let checks = self
            .checks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        checks
            .iter()
            .map(|c| Verdict {
                name: c.name().to_owned(),
                result: c.check(),
            })
            .collect()
    }

    /// Whether every check passes (`/readyz` answers 200, else 503).
    pub fn is_ready(&self) -> bool {
        self.verdicts().iter().all(|v| v.result.is_ok())
    }
}

impl fmt::Debug for Readiness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.verdicts()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spec's seven probed loops (reference page, "Readiness"), as `(loop, probe)`: the
    /// page's text, not the crate's table.
    const SPEC_PROBES: [(&str, &str); 7] = [
        ("invitations-expire", "invitations-expire"),
        ("approvals-expire", "approvals-expire"),
        ("access-session-sweep", "access-session-sweeper"),
        ("actions-timeout", "actions-timeout"),
        ("management-fleet-reconcile", "management-fleet-reconcile"),
        (
            "provisioning-broker-reconcile",
            "provisioning-broker-reconcile",
        ),
        ("artifacts-refresh", "artifacts-refresh"),
    ];

    /// READY-5: the seven probed loops and their probe names; any other loop has none.
    #[test]
    fn the_seven_probed_loops_and_their_names() {
        let mut table: Vec<_> = PROBED_LOOPS.to_vec();
        let mut spec = SPEC_PROBES.to_vec();
        table.sort_unstable();
        spec.sort_unstable();
        assert_eq!(table, spec);
        for (loop_name, probe) in SPEC_PROBES {
            assert_eq!(probe_name(loop_name), Some(probe), "{loop_name}");
            let p = Probe::for_loop(loop_name).expect("a probed loop");
            assert_eq!((p.name(), p.loop_name()), (probe, loop_name));
        }
        for other in [
            "credentials-sweeper",
            "peers-endpoint-sweeper",
            "access-session-sweeper",
        ] {
            assert_eq!(probe_name(other), None, "{other}");
            assert!(Probe::for_loop(other).is_none(), "{other}");
        }
    }

    /// READY-1: before any tick the probe reports the boot pass (failing until it ran), and a
    /// boot recorded after a tick changes nothing.
    #[test]
    fn the_boot_pass_is_reported_until_the_first_tick() {
        let p = Probe::new("invitations-expire", "invitations-expire");
        assert!(p.check().is_err(), "ready before the boot pass ran");
        p.record_boot(Err("boot failed".into()));
        assert_eq!(p.check(), Err("boot failed".into()));
        p.record_boot(Ok(()));
        assert_eq!(p.check(), Ok(()));
        p.record_tick(&TickOutcome::Failed("tick 1".into()));
        p.record_boot(Ok(()));
        assert_eq!(
            p.check(),
            Err("tick 1".into()),
            "a late boot hid a failed tick"
        );
    }

    /// READY-2..READY-4: a failed or panicked tick is reported until a later tick succeeds; a
    /// standby tick and a lost term pass; a panic reads as the spec's text.
    #[test]
    fn ticks_set_the_probe() {
        let p = Probe::new("access-session-sweeper", "access-session-sweep");
        p.record_boot(Ok(()));
        p.record_tick(&TickOutcome::Failed("db down".into()));
        assert_eq!(p.check(), Err("db down".into()), "READY-2");
        p.record_tick(&TickOutcome::Passed);
        assert_eq!(p.check(), Ok(()), "READY-2: cleared by a success");
        p.record_tick(&TickOutcome::Panicked("boom".into()));
        assert_eq!(
            p.check(),
            Err("plexsphere: background loop \"access-session-sweep\": tick panicked: boom".into()),
            "READY-4"
        );
        p.record_tick(&TickOutcome::Standby);
        assert_eq!(p.check(), Ok(()), "READY-3: a standby tick");
        p.record_tick(&TickOutcome::Failed("x".into()));
        p.record_tick(&TickOutcome::Lost);
        assert_eq!(p.check(), Ok(()), "DO-4: a lost term is no failure");
        let failures: Vec<bool> = [
            TickOutcome::Standby,
            TickOutcome::Passed,
            TickOutcome::Failed("e".into()),
            TickOutcome::Panicked("v".into()),
            TickOutcome::Lost,
        ]
        .iter()
        .map(TickOutcome::is_failure)
        .collect();
        assert_eq!(failures, [false, false, true, true, false]);
    }

    /// READY-2: `/readyz` is ready only while every check passes; verdicts keep their order.
    #[test]
    fn readiness_needs_every_check() {
        let readiness = Readiness::new();
        assert!(readiness.is_ready(), "no checks: ready");
        let (a, b) = (Probe::new("a", "a"), Probe::new("b", "b"));
        readiness.add(a.clone());
        readiness.add(b.clone());
        a.record_boot(Ok(()));
        assert!(!readiness.is_ready(), "b has not booted");
        b.record_boot(Ok(()));
        assert!(readiness.is_ready());
        b.record_tick(&TickOutcome::Failed("b failed".into()));
        assert!(!readiness.is_ready());
        let verdicts = readiness.verdicts();
        let names: Vec<&str> = verdicts.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(verdicts[1].result, Err("b failed".into()));
        assert_eq!(format!("{readiness:?}").matches("Verdict").count(), 2);
    }

    /// A panic's value as text: a `&str` or `String` payload, else a placeholder.
    #[test]
    fn panic_values_as_text() {
        assert_eq!(panic_value(&"static"), "static");
        assert_eq!(panic_value(&String::from("owned")), "owned");
        assert_eq!(panic_value(&42_u8), "<non-string panic payload>");
    }
}
