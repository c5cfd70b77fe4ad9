//! Run (RUN-1, RUN-2, RUN-4, RUN-6, RUN-7, RUN-8) and the spec's log lines (CFG-3).

use std::time::Duration;

use elector::{Config, Elector, Error, TermCause};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::fixture::*;

/// RUN-1: the first check comes at once, then one every T (seen on a refused standby).
#[tokio::test]
async fn checks_at_start_then_every_interval() {
    let pg = Pg::start().await;
    let (leader, _r1) = elector_on(&pg.url(), "leader", T).await;
    let (lstop, lrun) = lead(&leader).await;

    let (logs, _guard) = Logs::capture();
    let (standby, _r2) = elector_on(&pg.url(), "standby", T).await;
    let started = Instant::now();
    let (sstop, srun) = spawn_run(&standby);
    tokio::time::sleep(5 * T + T / 2).await;
    halt(sstop, srun).await;

    let checks: Vec<Duration> = logs
        .matching("background leader lock held elsewhere")
        .iter()
        .map(|e| e.at - started)
        .collect();
    assert_eq!(checks.len(), 6, "checks at 0, T, .., 5T: {checks:?}");
    for (k, at) in checks.iter().enumerate() {
        let due = T * k as u32;
        assert!(
            *at >= due && *at <= due + SLACK,
            "check {k} at {at:?}, due at {due:?} (+{SLACK:?})"
        );
    }
    halt(lstop, lrun).await;
}

/// RUN-2: 200 refused checks open and close no backend: the same pooled backend answers all.
///
/// The standby checks every 20 ms, so each attempt has 20 ms to answer. On a loaded machine an
/// attempt can miss that deadline: it is then a failed check, not a refused one, and it closes
/// its connection (its state is unknown). So the test counts: every backend opened in the window
/// (`pg_stat_database.sessions`) is explained by a failed check, and with no failure the same
/// backend answers before and after. A mutant that detaches refused connections opens ~200.
#[tokio::test]
async fn refused_checks_reuse_the_pooled_connection() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (leader, _r1) = elector_on(&pg.url(), "leader", T).await;
    let (lstop, lrun) = lead(&leader).await;

    let backends = || async {
        let rows = observer
            .query(
                "SELECT pid, backend_start::text, (SELECT sessions FROM pg_stat_database \
                 WHERE datname = current_database()) FROM pg_stat_activity \
                 WHERE application_name = 'standby' ORDER BY pid",
                &[],
            )
            .await
            .unwrap();
        let sessions: i64 = rows.first().map_or(0, |r| r.get(2));
        let pids: Vec<(i32, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        (pids, sessions)
    };
    let (logs, _guard) = Logs::capture();
    let refused = || logs.matching("background leader lock held elsewhere").len();
    let failed = || logs.matching("leader: acquire lock connection").len();
    let fast = Duration::from_millis(20);
    let pool = pg.pool("standby", 4);
    drop(pool.get().await.unwrap());
    let standby = Elector::new(Config::new(pool).check_interval(fast)).unwrap();
    let (sstop, srun) = spawn_run(&standby);
    wait_for(Duration::from_secs(5), || refused() > 0)
        .await
        .expect("a first refused check");
    let (before, sessions_before) = backends().await;
    let (first, failed_before) = (refused(), failed());
    wait_for(Duration::from_secs(20), || refused() >= first + 200)
        .await
        .expect("200 refused checks");
    let (after, sessions_after) = backends().await;
    let failures = failed() - failed_before;
    halt(sstop, srun).await;

    assert_eq!(before.len(), 1, "one pooled backend: {before:?}");
    let opened = usize::try_from(sessions_after - sessions_before).unwrap();
    // Every backend opened is explained by a failed check (a failed pool get opens none).
    assert!(
        opened <= failures,
        "{opened} backends opened across 200 refused checks and {failures} failed ones"
    );
    assert!(
        failures <= 100,
        "too few checks answered to decide: {failures} failed"
    );
    if failures == 0 {
        assert_eq!(before, after, "the same backend answered every check");
    }
    assert!(!standby.is_leader());
    halt(lstop, lrun).await;
}

/// RUN-4, CFG-3: a failed acquire logs the spec's WARN line, stays standby, retries every T,
/// and never ends `run`.
#[tokio::test]
async fn failed_acquire_warns_and_retries() {
    let (logs, _guard) = Logs::capture();
    // Nothing listens on port 1: every acquire fails.
    let pool = pool_for(
        "postgres://nobody@127.0.0.1:1/none",
        "x",
        1,
        Default::default(),
    );
    let elector = Elector::new(Config::new(pool).check_interval(T)).unwrap();
    let (stop, run) = spawn_run(&elector);
    tokio::time::sleep(3 * T + T / 2).await;
    assert!(
        !run.is_finished(),
        "run does not return on a failed acquire"
    );
    let warns = logs.matching("leader: acquire lock connection: ");
    assert_eq!(warns.len(), 4, "a WARN at 0, T, 2T, 3T: {warns:?}");
    assert!(warns.iter().all(|e| e.level == tracing::Level::WARN));
    assert!(!elector.is_leader());
    halt(stop, run).await;
}

/// RUN-6: on cancellation, unlock (after the token fired), close, end the term, return Ok; a
/// standby leads within T.
#[tokio::test]
async fn graceful_shutdown_hands_over_within_one_interval() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (logs, _guard) = Logs::capture();
    let (a, _ra) = elector_on(&pg.url(), "a", T).await;
    let (b, _rb) = elector_on(&pg.url(), "b", T).await;
    let (astop, arun) = lead(&a).await;
    let (bstop, brun) = spawn_run(&b);
    tokio::time::sleep(T / 2).await;
    let lock_pid = leader_rows(&observer).await[0].0;
    // A term whose parent outlives the shutdown ends by the release; one whose parent is the
    // shutdown token ended first by its parent (the first cause wins).
    let (term, _) = a.term(&tokio_util::sync::CancellationToken::new());
    let (child, _) = a.term(&astop.child_token());

    let cancelled = Instant::now();
    astop.cancel();
    arun.await.unwrap().expect("run returns Ok");
    assert_eq!(term.cause(), Some(TermCause::Released));
    assert_eq!(child.cause(), Some(TermCause::ParentEnded));
    assert!(
        !logs.matching("background leader lock released").is_empty(),
        "unlocked"
    );
    let took = until_leader(&b, T + SLACK).await;
    let handover = cancelled.elapsed();
    assert!(
        handover <= T + SLACK,
        "standby led {handover:?} after the cancel ({took:?})"
    );
    assert!(
        backend_gone(&observer, lock_pid, Duration::from_secs(1)).await,
        "the lock connection is closed"
    );
    halt(bstop, brun).await;
}

/// RUN-7: a panic that unwinds run ends the term with LeadershipLost, closes the connection
/// without unlocking, logs the WARN line, propagates; the server releases the lock.
#[tokio::test]
async fn panic_in_run_abandons_the_lock() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (logs, _guard) = Logs::capture();
    let (a, registry) = elector_on(&pg.url(), "a", T).await;
    let (stop, run) = lead(&a).await;
    let (term, _) = a.term(&stop);
    logs.panic_on("background leader check passed");

    let joined = tokio::time::timeout(2 * T, run).await.expect("run ends");
    let err = joined.expect_err("the panic propagates");
    assert!(err.is_panic());
    assert_eq!(term.cause(), Some(TermCause::LeadershipLost));
    assert!(!a.is_leader());
    assert_eq!(gauge(&registry), Some(0));
    let abandoned = logs.matching("background leader lock abandoned after a panic");
    assert_eq!(abandoned.len(), 1);
    assert_eq!(abandoned[0].level, tracing::Level::WARN);
    assert!(
        logs.matching("background leader lock released").is_empty(),
        "no unlock"
    );
    let released = async {
        loop {
            if leader_rows(&observer).await.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(T, released)
        .await
        .expect("the server releases the lock");

    // RUN-8: run may be called again after a panic.
    let (stop2, run2) = lead(&a).await;
    halt(stop2, run2).await;
}

/// RUN-7, CFG-3: a term its lease ended (the run future not polled for longer than the lease,
/// as in a starved process) and a run future then dropped leaves a WARN line: a replica that
/// led never loses its leadership with nothing above DEBUG (issue 48, item 6: the lease's timer
/// ended the term at DEBUG, and the drop took the ended term for a demotion already logged).
#[tokio::test]
async fn a_run_dropped_after_its_lease_ran_out_says_so_at_warn() {
    let pg = Pg::start().await;
    let (logs, _guard) = Logs::capture();
    let (a, _registry) = elector_on(&pg.url(), "a", T).await;
    let stop = CancellationToken::new();
    let mut run = Box::pin(a.run(stop.clone()));
    tokio::select! {
        ended = &mut run => panic!("run ended before it led: {ended:?}"),
        led = wait_for(10 * T, || a.is_leader()) => assert!(led.is_some(), "a did not lead"),
    }
    // The run future is not polled now: no check runs, and the lease (4T) runs out.
    tokio::time::sleep(5 * T).await;
    assert!(!a.is_leader(), "the lease ended the term");
    let before = logs.matching("background leader");
    drop(run);
    let warned: Vec<_> = (logs.matching("background leader").into_iter())
        .skip(before.len())
        .filter(|e| e.level == tracing::Level::WARN)
        .collect();
    assert_eq!(
        warned.len(),
        1,
        "one WARN line when the run future is dropped: {warned:#?}"
    );
    assert!(
        warned[0].message.starts_with("background leader lock lost"),
        "{:?}",
        warned[0].message
    );
}

/// RUN-8: a second concurrent run is refused at once; a later one works.
#[tokio::test]
async fn concurrent_run_is_refused_and_rerun_works() {
    let pg = Pg::start().await;
    let (a, _r) = elector_on(&pg.url(), "a", T).await;
    let (stop, run) = lead(&a).await;
    let second = tokio::time::timeout(T, a.run(stop.child_token()))
        .await
        .expect("refused at once");
    assert!(matches!(second, Err(Error::AlreadyRunning)), "{second:?}");
    assert!(
        a.is_leader(),
        "the refused call does not disturb the running one"
    );
    halt(stop, run).await;

    let (stop, run) = lead(&a).await;
    assert_eq!(a.current_term(), Some(2));
    halt(stop, run).await;
}

/// RUN-3, RUN-8 (review: a lock stranded on a pooled connection): a `run` future dropped at
/// any point of a check, hundreds of times at random points within a few round trips, never
/// leaves the lock on a session of the pool: after each drop the lock row goes, and at the end
/// another elector leads at its first check.
#[tokio::test]
async fn dropped_checks_never_strand_the_lock_on_a_pooled_session() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (a, _ra) = elector_on(&pg.url(), "a", T).await;
    // One round trip on this machine, the unit the drop points are drawn in.
    let probe = pg.observer().await;
    let mut rtt = Duration::ZERO;
    for _ in 0..20 {
        let sent = Instant::now();
        probe.simple_query("SELECT 1").await.unwrap();
        rtt = rtt.max(sent.elapsed());
    }
    let seed = fastrand::u64(..);
    eprintln!("seed {seed}, round trip {rtt:?}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let window = (3 * rtt).max(Duration::from_micros(300));
    for k in 0..300 {
        let drop_after = window.mul_f64(rng.f64());
        let token = tokio_util::sync::CancellationToken::new();
        let dropped = tokio::time::timeout(drop_after, a.run(token)).await;
        assert!(dropped.is_err(), "run ended by itself: {dropped:?}");
        let freed = async {
            while !leader_rows(&observer).await.is_empty() {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(2), freed)
            .await
            .is_err()
        {
            panic!(
                "drop {k} after {drop_after:?} (seed {seed}) left the lock on {:?}",
                leader_rows(&observer).await
            );
        }
    }
    let (b, _rb) = elector_on(&pg.url(), "b", T).await;
    let (bstop, brun) = spawn_run(&b);
    until_leader(&b, SLACK).await;
    halt(bstop, brun).await;
    // The dropped elector's pool holds no lock either: it leads again at its first check.
    let (astop, arun) = spawn_run(&a);
    until_leader(&a, SLACK).await;
    let began = a.current_term().unwrap_or_default() - 1;
    eprintln!("{began} of the 300 drops came after a term began");
    halt(astop, arun).await;
}

/// How the server misbehaves under a standby's check.
enum Server {
    /// Behind a proxy that drops every byte: nothing answers, nothing fails.
    Stalled,
    /// Stopped: connections fail.
    Stopped,
}

/// Cancels a standby's `run` T/4 into its first check against `server`; returns how long `run`
/// took to return after the cancel.
async fn cancel_during_a_standby_check(server: Server) -> Duration {
    let pg = Pg::start().await;
    let proxy = Proxy::start(pg.port).await;
    let (b, _rb) = elector_on(&pg.url_via(proxy.port), "b", T).await;
    match server {
        Server::Stalled => proxy.stall().await,
        Server::Stopped => pg.container.stop().await.expect("docker stop"),
    }
    let (stop, run) = spawn_run(&b);
    tokio::time::sleep(T / 4).await;
    let cancelled = Instant::now();
    stop.cancel();
    tokio::time::timeout(2 * T, run)
        .await
        .expect("run returns")
        .unwrap()
        .unwrap();
    assert!(!b.is_leader());
    cancelled.elapsed()
}

/// RUN-6 (review: shutdown blind during a standby check): a shutdown while a standby's check
/// waits on a server that answers nothing is honoured at once.
#[tokio::test]
async fn shutdown_during_a_standby_check_returns_at_once_against_a_stalled_server() {
    let took = cancel_during_a_standby_check(Server::Stalled).await;
    assert!(took <= SLACK, "run returned {took:?} after the cancel");
}

/// RUN-6 (review: shutdown blind during a standby check): the same against a stopped server,
/// whose connections fail instead of hanging.
#[tokio::test]
async fn shutdown_during_a_standby_check_returns_at_once_against_a_stopped_server() {
    let took = cancel_during_a_standby_check(Server::Stopped).await;
    assert!(took <= SLACK, "run returned {took:?} after the cancel");
}

/// RUN-6 (review: "released" whatever the unlock answered): a leader whose server stops
/// answering returns within the 2 s unlock bound (plus SLACK), reports the unlock as timed out
/// and closed, and never logs "released".
#[tokio::test]
async fn leader_shutdown_against_a_stalled_server_times_the_unlock_out() {
    let pg = Pg::start().await;
    let proxy = Proxy::start(pg.port).await;
    let (logs, _guard) = Logs::capture();
    let (a, _ra) = elector_on(&pg.url_via(proxy.port), "a", T).await;
    let (stop, run) = lead(&a).await;
    proxy.stall().await;
    let cancelled = Instant::now();
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(3), run)
        .await
        .expect("run returns")
        .unwrap()
        .unwrap();
    let took = cancelled.elapsed();
    let bound = Duration::from_secs(2);
    assert!(
        took >= bound - SLACK && took <= bound + SLACK,
        "run returned {took:?} after the cancel (unlock bound {bound:?} ± {SLACK:?})"
    );
    assert!(logs.matching("background leader lock released").is_empty());
    let timed_out = logs.matching("background leader unlock timed out");
    assert_eq!(timed_out.len(), 1, "{:#?}", logs.events());
    assert_eq!(timed_out[0].level, tracing::Level::WARN);
}

/// RUN-6 (review: "released" whatever the unlock answered): an unlock the server refuses (here
/// the lock backend was terminated before the shutdown) is reported as refused, not released.
#[tokio::test]
async fn refused_unlock_is_not_reported_as_released() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (logs, _guard) = Logs::capture();
    let (a, _ra) = elector_on(&pg.url(), "a", T).await;
    let (stop, run) = lead(&a).await;
    // Right after a check, so the next one is a whole T away.
    let checks = logs.matching("background leader check passed").len();
    wait_for(2 * T, || {
        logs.matching("background leader check passed").len() > checks
    })
    .await
    .expect("a check");
    let pid = lock_pid(&observer).await;
    terminate(&observer, pid).await;
    assert!(backend_gone(&observer, pid, T / 2).await);
    halt(stop, run).await;
    assert!(logs.matching("background leader lock released").is_empty());
    let refused = logs.matching("background leader unlock refused");
    assert_eq!(refused.len(), 1, "{:#?}", logs.events());
    assert_eq!(refused[0].level, tracing::Level::WARN);
}

/// RUN-6: a graceful shutdown unlocks before it closes: behind a proxy that delays each answer
/// by T/4, the unlock's answer (and so the close after it) comes T/4 after the server ran it, so
/// the lock row leaves pg_locks while the leader's backend still exists.
#[tokio::test]
async fn graceful_shutdown_unlocks_before_it_closes() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let proxy = Proxy::start(pg.port).await;
    let (a, _ra) = elector_on(&pg.url_via(proxy.port), "a", T).await;
    let (stop, run) = lead(&a).await;
    let pid = lock_pid(&observer).await;
    proxy
        .latency("downstream", (T / 4).as_millis() as u64)
        .await;
    stop.cancel();
    let mut unlocked_while_alive = false;
    let deadline = Instant::now() + 2 * T;
    while Instant::now() < deadline {
        let row = observer
            .query_one(
                "SELECT (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
                 AND classid = 1886156915 AND objid = 1 AND objsubid = 2), \
                 (SELECT count(*) FROM pg_stat_activity WHERE pid = $1)",
                &[&pid],
            )
            .await
            .unwrap();
        let (rows, alive): (i64, i64) = (row.get(0), row.get(1));
        if rows == 0 {
            unlocked_while_alive = alive == 1;
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(
        unlocked_while_alive,
        "the lock row left only with the backend: closed, not unlocked"
    );
    run.await.unwrap().unwrap();
    assert!(backend_gone(&observer, pid, T).await, "then closed");
}

/// RUN-6 under latency, with a queued standby (issue 35, item 7): the spec's order (unlock,
/// close, end the term) keeps the old term live until the unlock's answer arrives, while a
/// standby queued on the key (X-WAKE) is granted the moment the server runs the unlock. Behind a
/// proxy that delays each answer to the leader by 3·T, the two terms overlapped for about 3·T
/// (the lease or the answer ended the old one), past DEM-3's 2·T + one tick. The elector ends
/// the term once the unlock has gone unanswered for T, then waits for the answer (under its 2 s
/// deadline) and closes: the old term ends within T of the shutdown, the overlap stays under T,
/// and the unlock still comes before the close.
#[tokio::test]
async fn a_slow_unlock_ends_the_term_within_one_interval() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let proxy = Proxy::start(pg.port).await;
    let pool = pool_for(&pg.url_via(proxy.port), "a", 4, Default::default());
    let a = Elector::new(Config::new(pool).check_interval(T)).expect("elector");
    let pool = pool_for(&pg.url(), "b", 4, Default::default());
    let b = Elector::new(Config::new(pool).check_interval(T).wake(true)).expect("elector");
    let (stop, run) = lead(&a).await;
    let standby = spawn_run(&b);
    let start = Instant::now();
    while leader_rows(&observer).await.len() < 2 {
        assert!(start.elapsed() < 5 * T, "b queued on the key");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rows = leader_rows(&observer).await;
    let pid = rows.iter().find(|r| r.1).expect("a holds the key").0;
    proxy
        .latency("downstream", (3 * T).as_millis() as u64)
        .await;
    let cancelled = Instant::now();
    stop.cancel();
    let (mut a_ended, mut b_led) = (None, None);
    while cancelled.elapsed() < 4 * T && (a_ended.is_none() || b_led.is_none()) {
        if a_ended.is_none() && !a.is_leader() {
            a_ended = Some(cancelled.elapsed());
        }
        if b_led.is_none() && b.is_leader() {
            b_led = Some(cancelled.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let (a_ended, b_led) = (a_ended.expect("a's term ended"), b_led.expect("b led"));
    assert!(
        a_ended <= T + SLACK,
        "a's term ended {a_ended:?} after the shutdown (b led at {b_led:?}); bound T + {SLACK:?}"
    );
    let overlap = a_ended.saturating_sub(b_led);
    assert!(overlap <= T + SLACK, "a and b led at once for {overlap:?}");
    // The unlock still comes before the close: b was granted by it while a's backend lives on,
    // until the unlock's answer (3·T after it ran) lets a close.
    assert!(
        backend_alive(&observer, pid).await,
        "a closed its lock connection before the unlock's answer"
    );
    assert!(
        backend_gone(&observer, pid, 4 * T).await,
        "a's lock connection closed after the unlock's answer"
    );
    run.await.unwrap().expect("run returns Ok");
    halt(standby.0, standby.1).await;
}

/// RUN-7 (review: abandonment waited for a symbolised backtrace): under the supervisor (which
/// installs the stack-keeping panic hook), a panic that unwinds `run` abandons the lock at once:
/// the abandonment follows the panic within SLACK, the first panic of the process included.
#[tokio::test]
async fn abandonment_does_not_wait_for_the_panic_stack() {
    use elector::supervisor::{RestartBudget, Supervisor};

    // The default hook's own stack (RUST_BACKTRACE=1) is the user's choice and is resolved
    // before the unwind; this test measures what the elector adds.
    std::env::set_var("RUST_BACKTRACE", "0");
    let pg = Pg::start().await;
    let (logs, _guard) = Logs::capture();
    let (a, _ra) = elector_on(&pg.url(), "a", T).await;
    let mut supervisor = Supervisor::new(RestartBudget {
        max_restarts: 0,
        ..RestartBudget::default()
    });
    supervisor.add("background-leader", {
        let a = a.clone();
        move |token| {
            let a = a.clone();
            async move { a.run(token).await }
        }
    });
    let stop = tokio_util::sync::CancellationToken::new();
    let supervised = tokio::spawn(supervisor.run(stop.clone()));
    until_leader(&a, 10 * T).await;
    logs.panic_on("background leader check passed");
    wait_for(3 * T, || {
        !logs
            .matching("background leader lock abandoned after a panic")
            .is_empty()
    })
    .await
    .expect("abandoned");
    let panicked = logs
        .matching("background leader check passed")
        .last()
        .unwrap()
        .at;
    let abandoned = logs
        .matching("background leader lock abandoned")
        .last()
        .unwrap()
        .at;
    let delay = abandoned - panicked;
    eprintln!("abandoned {delay:?} after the panic");
    assert!(delay <= SLACK, "abandoned {delay:?} after the panic");
    stop.cancel();
    supervised.await.unwrap();
}

/// RUN-2 (review: the tests compared only which backend answered, so a refused attempt that
/// changed its session would pass): refused checks hand their connection back *unchanged*. The
/// standby's pool has one connection, so every check runs on it; the session's settings (every
/// row of `pg_settings`, the guard's marker, the application name) and its advisory locks, read
/// on that same backend before and after ten refused checks, are the same.
#[tokio::test]
async fn refused_checks_leave_the_pooled_session_unchanged() {
    let pg = Pg::start().await;
    let (leader, _r1) = elector_on(&pg.url(), "leader", T).await;
    let (lstop, lrun) = lead(&leader).await;
    let pool = pool_for(&pg.url(), "standby", 1, Default::default());
    let state = || async {
        let c = pool.get().await.expect("the standby's one connection");
        let rows = c
            .query(
                "SELECT pg_backend_pid()::text, 'pid' UNION ALL \
                 SELECT coalesce(current_setting('plexsphere.background_leader', true), '<unset>'), \
                 'marker' UNION ALL \
                 SELECT count(*)::text, 'advisory locks' FROM pg_locks \
                 WHERE locktype = 'advisory' AND pid = pg_backend_pid() UNION ALL \
                 SELECT coalesce(setting, '') || ' (' || source || ')', name FROM pg_settings",
                &[],
            )
            .await
            .expect("the session's state");
        rows.iter()
            .map(|r| (r.get::<_, String>(1), r.get::<_, String>(0)))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let before = state().await;
    let (logs, _guard) = Logs::capture();
    let standby = Elector::new(Config::new(pool.clone()).check_interval(T)).unwrap();
    let (sstop, srun) = spawn_run(&standby);
    wait_for(20 * T, || {
        logs.matching("background leader lock held elsewhere").len() >= 10
    })
    .await
    .expect("ten refused checks");
    halt(sstop, srun).await;
    assert!(
        logs.matching("leader: acquire lock connection").is_empty(),
        "a check failed, so its connection was closed: nothing to compare"
    );
    let after = state().await;
    let changed: Vec<_> = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: {v} -> {:?}", after.get(k)))
        .collect();
    assert!(
        changed.is_empty(),
        "refused checks changed the session: {changed:#?}"
    );
    assert_eq!(before.len(), after.len(), "settings appeared");
    halt(lstop, lrun).await;
}

/// RUN-6 (review: no test saw the close against the term's end): on shutdown, after the
/// unlock, the lock connection is closed while the term is still live, and the term ends after:
/// at the close, a `Term` handed out earlier (whose parent outlives the shutdown) is not
/// cancelled and the watch still says Leading; once `run` returned, the term has ended with
/// `Released`.
#[tokio::test]
async fn shutdown_closes_the_connection_before_the_term_ends() {
    let pg = Pg::start().await;
    let (logs, _guard) = Logs::capture();
    let (a, _ra) = elector_on(&pg.url(), "a", T).await;
    let (stop, run) = lead(&a).await;
    let (term, leading) = a.term(&tokio_util::sync::CancellationToken::new());
    assert!(leading);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (token, watch, at_close) = (term.token().clone(), a.subscribe(), seen.clone());
    logs.on_event(move |e| {
        if e.message
            .starts_with("background leader lock connection closed")
        {
            let leading = matches!(watch.borrow().role, elector::Role::Leading(_));
            at_close
                .lock()
                .unwrap()
                .push((token.is_cancelled(), leading));
        }
    });
    halt(stop, run).await;
    assert_eq!(
        *seen.lock().unwrap(),
        [(false, true)],
        "at the close: (term cancelled, watch leading)"
    );
    let released = logs
        .position("background leader lock released")
        .expect("unlocked");
    let closed = (logs.position("background leader lock connection closed")).expect("closed");
    assert!(released < closed, "the unlock comes before the close");
    assert_eq!(term.cause(), Some(TermCause::Released));
}
