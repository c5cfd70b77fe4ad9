//! Killing and stopping replicas like pods.

use std::time::Duration;

use harness::event::{ReleaseOutcome, ReplicaEvent};

use crate::fixture::{lock_holder, start_many, the_leader, Pg, SLACK, T};

/// The index and term of the replica that acquires at history index `from` or later, within
/// `within`, among `replicas` except `except`.
async fn next_acquired(
    replicas: &[harness::replica::ReplicaProcess],
    marks: &[usize],
    except: usize,
    within: Duration,
) -> Option<(usize, tokio::time::Instant)> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        for (i, r) in replicas.iter().enumerate() {
            if i == except {
                continue;
            }
            if let Some(e) = r.history()[marks[i]..]
                .iter()
                .find(|e| matches!(e.event(), ReplicaEvent::Acquired { .. }))
            {
                return Some((i, e.at));
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The backend pid of `r`'s last `acquired` event.
fn lock_backend(r: &harness::replica::ReplicaProcess) -> i32 {
    r.history()
        .iter()
        .rev()
        .find_map(|e| match e.event() {
            ReplicaEvent::Acquired { backend_pid, .. } => Some(*backend_pid),
            _ => None,
        })
        .expect("an acquired event")
}

/// Failover after SIGKILL: the leader's socket closes, the server ends its session and drops
/// the lock, and a standby's next check takes it: a standby emits `acquired` within T (+ SLACK)
/// of the lock session's end. The time from the kill to that end (the kernel closing the
/// socket, Docker's port proxy passing the close on, the backend exiting) is measured and
/// reported, not bounded: on this machine it was 10–170 ms under load, outside the elector.
/// Five kills per run, each killed replica restarted as a standby.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_leader_hands_over_within_t() {
    let _serial = crate::fixture::exclusive().await;
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let mut replicas = start_many(&pg, &["k1", "k2", "k3"]).await;
    let mut leader = the_leader(&replicas, 3 * T).await;
    let mut takeovers = Vec::new();
    let mut traces = Vec::new();
    let mut releases = Vec::new();
    let mut after_release = Vec::new();
    let mut jitters = Vec::new();
    for _ in 0..5 {
        // Let the term settle, then kill at a random phase of the standbys' checks (the jitter
        // is printed with the figures).
        let jitter = Duration::from_millis(
            u64::from(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .subsec_nanos(),
            ) % (T.as_millis() as u64),
        );
        jitters.push(jitter);
        tokio::time::sleep(T + jitter).await;
        let marks: Vec<usize> = replicas.iter().map(|r| r.history_len()).collect();
        let lock_pid = lock_backend(&replicas[leader]);
        let killed_at = tokio::time::Instant::now();
        replicas[leader].sigkill().expect("kill");
        // The socket closes with the process; the server ends the session and drops the lock.
        let released = testkit::pg::backend_gone_at(&observer, lock_pid, 3 * T)
            .await
            .expect("the lock session ends with the socket, before the orphan bound of 4·T");
        releases.push(released - killed_at);
        let status = replicas[leader].wait().await.expect("reaped");
        assert!(!status.success());
        let (next, at) = next_acquired(&replicas, &marks, leader, 3 * T)
            .await
            .expect("a standby acquires");
        takeovers.push(at - killed_at);
        after_release.push(at.saturating_duration_since(released));
        // The new leader's checks around the kill, in ms from it (negative: before).
        let trace: Vec<String> = replicas[next]
            .history()
            .iter()
            .filter(|e| e.at + 2 * T >= killed_at && e.at <= at)
            .filter_map(|e| {
                let ms = if e.at >= killed_at {
                    (e.at - killed_at).as_millis() as i64
                } else {
                    -((killed_at - e.at).as_millis() as i64)
                };
                match e.event() {
                    ReplicaEvent::CheckRefused => Some(format!("refused@{ms}")),
                    ReplicaEvent::CheckFailed { .. } => Some(format!("failed@{ms}")),
                    ReplicaEvent::Acquired { .. } => Some(format!("acquired@{ms}")),
                    _ => None,
                }
            })
            .collect();
        traces.push(trace);
        assert_eq!(
            lock_holder(&observer).await,
            vec![replicas[next].name().to_owned()]
        );
        replicas[leader].restart().await.expect("restart");
        leader = next;
    }
    let ms = |v: &[Duration]| v.iter().map(Duration::as_millis).collect::<Vec<_>>();
    eprintln!(
        "SIGKILL at T = {} ms: takeover after the kill {:?} ms; lock session gone after the kill \
         {:?} ms; takeover after the session ended {:?} ms (kills at T + {:?} ms after a takeover)",
        T.as_millis(),
        ms(&takeovers),
        ms(&releases),
        ms(&after_release),
        ms(&jitters)
    );
    eprintln!("the new leaders' checks around each kill: {traces:?}");
    // The socket's close released the lock, not the orphan bound (idle_session_timeout, 4·T).
    for took in &takeovers {
        assert!(
            *took < 4 * T,
            "takeover {took:?} after the kill: {:?} ms",
            ms(&takeovers)
        );
    }
    for took in &after_release {
        assert!(
            *took <= T + SLACK,
            "takeover {took:?} after the lock session ended > T + {SLACK:?}: {:?} ms; \
             checks: {traces:?}",
            ms(&after_release)
        );
    }
}

/// RUN-6: SIGTERM on the leader: `shutdown`, then `released`, every worker `stopped`, exit 0;
/// a standby leads within T of the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_and_exits_zero() {
    let _serial = crate::fixture::exclusive().await;
    let pg = Pg::start().await;
    let mut replicas = start_many(&pg, &["t1", "t2"]).await;
    let leader = the_leader(&replicas, 3 * T).await;
    let other = 1 - leader;
    let other_mark = replicas[other].history_len();
    let mark = replicas[leader].history_len();
    replicas[leader].sigterm().expect("sigterm");
    let status = replicas[leader]
        .wait_timeout(Duration::from_secs(8))
        .await
        .expect("wait")
        .expect("exits within the grace");
    assert_eq!(status.code(), Some(0), "{status}");

    let r = &replicas[leader];
    let (shutdown_at, _) = r
        .wait_for_event(mark, T, |e| matches!(e, ReplicaEvent::Shutdown))
        .await
        .expect("shutdown event");
    let (released_at, released) = r
        .wait_for_event(mark, T, |e| matches!(e, ReplicaEvent::Released { .. }))
        .await
        .expect("released event");
    assert!(shutdown_at < released_at, "shutdown comes first");
    assert!(matches!(
        released.event(),
        ReplicaEvent::Released {
            term: 1,
            outcome: ReleaseOutcome::Unlocked,
            reason: None
        }
    ));
    let stopped = r.history()[mark..]
        .iter()
        .filter(|e| matches!(e.event(), ReplicaEvent::Worker { state, .. } if state == "stopped"))
        .count();
    assert_eq!(stopped, 23, "the election and the 22 loops stop");

    let (_, acquired) = replicas[other]
        .wait_for_event(other_mark, 2 * T, |e| {
            matches!(e, ReplicaEvent::Acquired { .. })
        })
        .await
        .expect("the standby acquires");
    let took = acquired.at - released.at;
    eprintln!("takeover after release: {} ms", took.as_millis());
    assert!(took <= T + SLACK, "{took:?}");
}

/// SIGSTOP freezes a replica (its HTTP does not answer within the client's short timeout, so
/// callers are not hung) and SIGCONT resumes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_freezes_and_sigcont_resumes() {
    let _serial = crate::fixture::shared().await;
    let pg = Pg::start().await;
    let mut replicas = start_many(&pg, &["s1"]).await;
    let r = &mut replicas[0];
    r.sigstop().expect("stop");
    // SIGSTOP takes effect asynchronously: wait until the kernel shows every thread stopped.
    let state = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("State:"))
            .map(str::to_owned)
    };
    let pid = r.pid();
    // Each thread stops on its own: the process can show `T` before its last thread does.
    let threads_stopped = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| {
                d.filter_map(Result::ok).all(|t| {
                    std::fs::read_to_string(t.path().join("stat")).is_ok_and(|s| {
                        s.rsplit(')')
                            .next()
                            .is_some_and(|r| r.trim_start().starts_with('T'))
                    })
                })
            })
            .unwrap_or(false)
    };
    let stopped = tokio::time::Instant::now();
    while !(state(pid).is_some_and(|s| s.contains("T (stopped)")) && threads_stopped())
        && stopped.elapsed() < Duration::from_secs(1)
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(threads_stopped(), "every thread stopped: {:?}", state(pid));
    let started = tokio::time::Instant::now();
    let answer = r.readyz().await;
    let state = state(pid);
    assert!(
        answer.is_err(),
        "a frozen replica does not answer: {answer:?}, {state:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(r.metrics_gauge().await, None);
    r.sigcont().expect("cont");
    let (status, _) = r.readyz().await.expect("answers again");
    assert!(status == 200 || status == 503);
}
