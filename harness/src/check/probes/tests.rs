//! The unit tests of `probes`.

use super::*;
use crate::check::probes::probe_loop;
use crate::check::tests::ev;

pub(crate) fn started(elector: bool) -> ReplicaEvent {
    ReplicaEvent::Started {
        pid: 1,
        http: "127.0.0.1:1".into(),
        check_interval_ms: 200,
        elector,
    }
}

fn boot(loop_name: &str) -> ReplicaEvent {
    ReplicaEvent::BootPass {
        loop_name: loop_name.into(),
        outcome: crate::event::TickKind::Ok,
        error: None,
    }
}

#[test]
fn ready_needs_every_boot_pass_since_the_last_start() {
    let mut entries = vec![ev(0.0, "a", started(true))];
    for p in SPEC_PROBES {
        entries.push(ev(1.0, "a", boot(probe_loop(p))));
    }
    entries.push(ev(2.0, "a", ReplicaEvent::Ready));
    // A replica without an elector runs no boot pass and is not held to it (LOOP-4).
    entries.push(ev(2.0, "b", started(false)));
    entries.push(ev(3.0, "b", ReplicaEvent::Ready));
    assert_eq!(boot_passes_before_ready(&entries).verdict, Verdict::Valid);
    // After a restart the passes must run again before the next ready.
    entries.push(ev(4.0, "a", started(true)));
    entries.push(ev(5.0, "a", boot("invitations-expire")));
    entries.push(ev(6.0, "a", ReplicaEvent::Ready));
    let c = boot_passes_before_ready(&entries);
    assert_eq!(c.verdict, Verdict::Invalid, "{}", c.message);
    assert!(c.message.contains("access-session-sweep"), "{}", c.message);
    assert_eq!(boot_passes_before_ready(&[]).verdict, Verdict::Unknown);
}

#[test]
fn probe_list_must_be_the_spec_seven_and_workers() {
    let list = |names: Vec<&str>| Entry {
        t_ms: 1.0,
        what: What::Probes {
            replica: "a".into(),
            names: names.into_iter().map(String::from).collect(),
        },
    };
    let mut good: Vec<&str> = SPEC_PROBES.to_vec();
    good.push("workers");
    assert_eq!(probe_names(&[list(good.clone())]).verdict, Verdict::Valid);
    let mut wrong = good.clone();
    wrong[2] = "access-session-sweep";
    let c = probe_names(&[list(wrong)]);
    assert_eq!(c.verdict, Verdict::Invalid);
    assert!(
        c.message.contains("access-session-sweeper"),
        "{}",
        c.message
    );
    let mut twice = good;
    twice.push("workers");
    assert_eq!(probe_names(&[list(twice)]).verdict, Verdict::Invalid);
    assert_eq!(probe_names(&[]).verdict, Verdict::Unknown);
}
