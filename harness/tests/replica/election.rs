//! Three replicas on one database: exactly one leads, and only it does leader-only work.

use std::time::Duration;

use harness::event::{ReplicaEvent, TickKind};

use crate::fixture::{eventually, lock_holder, start_many, the_leader, work_by_replica, Pg, T};

/// RUN-3, MET-1, ISL-1, LOCK-3, X-WHO, LOOP-1..LOOP-3, LOOP-6, READY-1..READY-3: one of three
/// replicas acquires; its gauge is 1 and the others 0; every /readyz is 200; pg_locks names the
/// leader by application_name; leader_work rows come from the leader only; every replica ran
/// its seven boot passes before `ready`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_leads_and_only_it_works() {
    let _serial = crate::fixture::exclusive().await;
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let replicas = start_many(&pg, &["r1", "r2", "r3"]).await;
    let leader = the_leader(&replicas, 3 * T).await;
    let name = replicas[leader].name().to_owned();

    // LOOP-6: seven boot passes, all ok, before `ready`, on every replica (leader or not).
    for r in &replicas {
        let history = r.history();
        let ready = history
            .iter()
            .position(|e| matches!(e.event(), ReplicaEvent::Ready))
            .expect("ready");
        let boots: Vec<_> = history[..ready]
            .iter()
            .filter_map(|e| match e.event() {
                ReplicaEvent::BootPass {
                    loop_name, outcome, ..
                } => Some((loop_name.clone(), *outcome)),
                _ => None,
            })
            .collect();
        assert_eq!(boots.len(), 7, "{}: {boots:?}", r.name());
        assert!(boots.iter().all(|(_, o)| *o == TickKind::Ok), "{boots:?}");
        assert!(matches!(
            history[0].event(),
            ReplicaEvent::Started { elector: true, .. }
        ));
    }

    // MET-1 / ISL-1: the gauge is 1 on the leader and 0 elsewhere; /leader agrees.
    for (i, r) in replicas.iter().enumerate() {
        let want = i64::from(i == leader);
        assert!(
            eventually(Duration::from_secs(2), || async {
                r.metrics_gauge().await == Some(want)
            })
            .await,
            "{}: gauge {:?}, want {want}",
            r.name(),
            r.metrics_gauge().await
        );
        let info = r.leader().await.expect("/leader");
        assert_eq!(info.is_leader, i == leader, "{info:?}");
        assert!(info.elector);
    }
    // LOCK-3 / X-WHO: the spec's query finds one row, and it is the leader's backend.
    assert_eq!(lock_holder(&observer).await, vec![name.clone()]);

    // Let the loops tick a few times.
    tokio::time::sleep(5 * T).await;

    // READY-2/3: every replica is ready, the leader with passing ticks, the standbys by rule.
    for r in &replicas {
        let (status, report) = r.ready_report().await.expect("/readyz");
        assert_eq!(status, 200, "{}: {report:?}", r.name());
        assert_eq!(
            report.checks.len(),
            8,
            "seven probes and the workers probe: {report:?}"
        );
        assert!(
            report.check("access-session-sweeper").is_some(),
            "READY-5 probe name"
        );
    }

    // LOOP-1..3: leader-only rows come from the leader only, from every ticked loop, both
    // while-leader loops and both gated steps.
    let by_replica = work_by_replica(&observer).await;
    assert_eq!(by_replica.len(), 1, "{by_replica:?}");
    assert_eq!(by_replica[0].0, name);
    let loops: Vec<String> = observer
        .query("SELECT DISTINCT loop_name FROM leader_work ORDER BY 1", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for expected in harness::replica::TICKED_LOOPS
        .iter()
        .chain(harness::replica::WHILE_LEADER_LOOPS.iter())
        .copied()
        .chain([
            "capacity-collector:crossing",
            "observability-routing-consume:durable-deletion",
        ])
    {
        assert!(
            loops.iter().any(|l| l == expected),
            "no row of {expected}: {loops:?}"
        );
    }

    // Tick events: only the leader reports ticks (standby ticks are not reported), all ok.
    for (i, r) in replicas.iter().enumerate() {
        let ticks: Vec<_> = r
            .history()
            .into_iter()
            .filter_map(|e| match e.line.event {
                ReplicaEvent::Tick {
                    outcome,
                    term,
                    error,
                    ..
                } => Some((outcome, term, error)),
                _ => None,
            })
            .collect();
        if i == leader {
            let ticked: std::collections::BTreeSet<String> = r
                .history()
                .into_iter()
                .filter_map(|e| match e.line.event {
                    ReplicaEvent::Tick { loop_name, .. } => Some(loop_name),
                    _ => None,
                })
                .collect();
            assert_eq!(ticked.len(), 15, "every ticked loop ticked: {ticked:?}");
            let odd: Vec<_> = ticks
                .iter()
                .filter(|t| (t.0, t.1) != (TickKind::Ok, Some(1)))
                .collect();
            assert!(odd.is_empty(), "ticks other than ok in term 1: {odd:?}");
        } else {
            assert!(ticks.is_empty(), "{}: {ticks:?}", r.name());
            assert!(
                r.history()
                    .iter()
                    .any(|e| matches!(e.event(), ReplicaEvent::CheckRefused)),
                "a standby reports its refused checks"
            );
        }
    }

    // /workers: the election and the 22 loops, all running.
    let workers = replicas[leader].workers().await.expect("/workers");
    assert_eq!(workers.len(), 23, "{workers:?}");
    assert!(
        workers
            .iter()
            .all(|w| w.state == "running" && w.restarts == 0),
        "{workers:?}"
    );
    assert!(workers
        .iter()
        .any(|w| w.name == elector::supervisor::ELECTION_WORKER));
}
