//! The orphaned lock session bound (ORPH-1, ORPH-2 in-process, ORPH-3).

use elector::IDLE_SESSION_INTERVALS;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::fixture::*;

/// Whether `statement` sets `idle_session_timeout` to 4·T (in ms) on its session, as a `SET`
/// or a `set_config` call.
fn sets_the_bound(statement: &str) -> bool {
    let ms = (T * 4).as_millis();
    statement.contains(&format!("SET idle_session_timeout = {ms}"))
        || statement.contains(&format!(
            "set_config('idle_session_timeout', '{ms}', false)"
        ))
}

/// The lock backend's last statement and its state, read from the server side.
async fn last_statement(observer: &tokio_postgres::Client, pid: i32) -> (String, String) {
    let row = observer
        .query_one(
            "SELECT query, state FROM pg_stat_activity WHERE pid = $1",
            &[&pid],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// ORPH-1: `idle_session_timeout` = 4·T is set on the lock session as soon as the lock is
/// granted: by the granting statement itself, read from the server side (the lock backend's
/// last statement, before its first check replaces it). PostgreSQL 15 takes the setting, so no
/// WARN of the pre-14 fallback appears; the acquired line names each term and its backend.
#[tokio::test]
async fn idle_session_timeout_is_set_at_grant() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (logs, _guard) = Logs::capture();
    let (a, _r) = elector_on(&pg.url(), "a", T).await;
    let (stop, run) = lead(&a).await;
    let pid = lock_pid(&observer).await;
    let (query, _) = last_statement(&observer, pid).await;
    assert_eq!(IDLE_SESSION_INTERVALS, 4);
    assert!(
        query.contains("pg_try_advisory_lock(1886156915, 1)") && sets_the_bound(&query),
        "the grant's statement does not set the bound: {query:?}"
    );
    // A second term, on a new backend.
    terminate(&observer, pid).await;
    wait_for(4 * T, || a.current_term() == Some(2))
        .await
        .expect("a second term");
    let second = lock_pid(&observer).await;
    let acquired: Vec<(String, String)> = (logs.matching("background leader lock acquired"))
        .iter()
        .map(|e| (e.fields["term"].clone(), e.fields["backend_pid"].clone()))
        .collect();
    let expected = [("1", pid), ("2", second)].map(|(n, p)| (n.to_owned(), p.to_string()));
    assert_eq!(acquired, expected);
    assert!(
        logs.matching("idle_session_timeout is not supported")
            .is_empty(),
        "the pre-14 fallback's WARN on PostgreSQL 15"
    );
    halt(stop, run).await;
}

/// ORPH-2 (in one process): a leader that stops talking without closing its socket loses the
/// lock server-side 4·T after its last query; a standby leads within one more T. The leader is
/// "frozen" by no longer polling its `run` future, which keeps the socket open and silent.
#[tokio::test(flavor = "current_thread")]
async fn silent_leader_loses_the_lock_after_four_intervals() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (logs, _guard) = Logs::capture();
    let (a, _ra) = elector_on(&pg.url(), "a", T).await;
    let (b, _rb) = elector_on(&pg.url(), "b", T).await;
    let token = CancellationToken::new();
    let mut frozen_run = Box::pin(a.run(token.clone()));
    tokio::select! {
        r = &mut frozen_run => panic!("run ended early: {r:?}"),
        _ = until_leader(&a, 2 * T) => {}
    }
    let (bstop, brun) = spawn_run(&b);
    tokio::select! {
        r = &mut frozen_run => panic!("run ended early: {r:?}"),
        () = tokio::time::sleep(T + T / 2) => {}
    }
    // From here on `frozen_run` is not polled: no more checks.
    let last_query = logs
        .matching("background leader check passed")
        .last()
        .expect("a check passed")
        .at;
    let pid = lock_pid(&observer).await;
    assert!(
        backend_gone(&observer, pid, 6 * T).await,
        "the server ends the idle session"
    );
    let released = last_query.elapsed();
    let bound = T * IDLE_SESSION_INTERVALS;
    assert!(
        released + SLACK >= bound && released <= bound + SLACK,
        "released {released:?} after the last query (bound {bound:?} ± {SLACK:?})"
    );
    let at = Instant::now();
    until_leader(&b, T + SLACK).await;
    assert!(at.elapsed() <= T + SLACK);
    drop(frozen_run);
    assert!(!a.is_leader(), "dropping the run future ends the term");
    halt(bstop, brun).await;
}

/// ORPH-3: a live leader never comes near the timeout: it keeps one term for 20 T (5 times the
/// idle bound).
#[tokio::test]
async fn live_leader_keeps_the_lock() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (a, _r) = elector_on(&pg.url(), "a", T).await;
    let (stop, run) = lead(&a).await;
    let (term, _) = a.term(&stop);
    let pid = lock_pid(&observer).await;
    tokio::time::sleep(20 * T).await;
    assert!(!term.is_cancelled());
    assert_eq!(lock_pid(&observer).await, pid);
    assert_eq!(a.current_term(), Some(1));
    halt(stop, run).await;
}

/// ORPH-1 (review: the term began before the bound was set): no term is live before the lock
/// session's `idle_session_timeout` is set. Every byte to the server is delayed by T/2, so a
/// term that began at the grant would be seen while the server still runs the attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_term_is_live_before_the_orphan_bound_is_set() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let proxy = Proxy::start(pg.port).await;
    let (a, _r) = elector_on(&pg.url_via(proxy.port), "a", T).await;
    proxy.latency("upstream", (T / 2).as_millis() as u64).await;
    let (stop, run) = lead(&a).await;
    let pid = lock_pid(&observer).await;
    let (query, state) = last_statement(&observer, pid).await;
    assert!(
        sets_the_bound(&query) && state == "idle",
        "the term is live while the server's last statement is {query:?} ({state})"
    );
    halt(stop, run).await;
}

/// ORPH-1 (found by chaos seed 2): a standby's attempt reaches the server and is granted, but
/// its answer and its close are lost to a partition (in the chaos run: `kill-backend` of the
/// leader, then a partition of the standby). The standby gives the attempt up after T and
/// closes the session; the close cannot arrive, so the server must end that session itself
/// within 4·T of the grant, as it would a silent leader's. An elector that sets the bound only
/// after the answer arrives leaves the lock on that session for as long as the partition lasts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_answer_is_lost_is_bounded_too() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let proxy = Proxy::start(pg.port).await;
    // The standby's pool holds one warm connection through the proxy.
    let (standby, _r) = elector_on(&pg.url_via(proxy.port), "standby", T).await;
    // Its attempt will still reach the server; answers and closes will not come back.
    proxy.lose_answers().await;
    let (stop, run) = spawn_run(&standby);
    let start = Instant::now();
    let pid = loop {
        let rows = leader_rows(&observer).await;
        if let [(pid, true, app)] = rows.as_slice() {
            if app == "standby" {
                break *pid;
            }
        }
        assert!(
            start.elapsed() < T,
            "the first attempt was not granted: {rows:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    };
    let seen = Instant::now();
    let gone = testkit::pg::backend_gone_at(&observer, pid, 8 * T).await;
    assert!(!standby.is_leader(), "the answer never arrived");
    let bound = T * IDLE_SESSION_INTERVALS;
    match gone {
        Some(when) => assert!(
            when - seen <= bound + SLACK,
            "the unanswered grant's session ended {:?} after it was seen (bound {bound:?} + \
             {SLACK:?})",
            when - seen
        ),
        None => panic!("the unanswered grant's session still held the lock 8T later"),
    }
    halt(stop, run).await;
}

/// LOOP-1, DO-1, ISL-1 after ORPH-2 (found by chaos seeds 119 and 133: a leader frozen by
/// SIGSTOP for 4.5T and 5T): the server ends a silent leader's session 4·T after its last
/// query and a standby leads, but the frozen process still believes it leads until its own next
/// check runs. When it resumes, its tickers and while-leader loops may run before that check,
/// and they wrote leader-only rows while another replica led.
///
/// A term therefore lives at most 4·T past the sending of the last check the server answered
/// (the lease): the server cannot have ended the session before then. Here the leader is frozen
/// by no longer polling its `run` future; once a standby leads, the frozen elector must refuse
/// `Do`, `Term` and `IsLeader`, and a `Term` taken before the freeze must read as ended, all
/// before its `run` is polled again. Before the 4·T mark it still leads: the lease is not cut
/// short. Polled again, its `run` demotes it at once.
#[tokio::test(flavor = "current_thread")]
async fn a_frozen_leader_does_no_work_once_the_server_may_have_ended_its_session() {
    use elector::{Done, TermCause};
    let pg = Pg::start().await;
    let (logs, _guard) = Logs::capture();
    let (a, ra) = elector_on(&pg.url(), "a", T).await;
    let (b, _rb) = elector_on(&pg.url(), "b", T).await;
    let watch = a.subscribe();
    let token = CancellationToken::new();
    let mut frozen_run = Box::pin(a.run(token.clone()));
    tokio::select! {
        r = &mut frozen_run => panic!("run ended early: {r:?}"),
        _ = until_leader(&a, 2 * T) => {}
    }
    let (held, _) = a.term(&token);
    let (bstop, brun) = spawn_run(&b);
    tokio::select! {
        r = &mut frozen_run => panic!("run ended early: {r:?}"),
        () = tokio::time::sleep(T + T / 2) => {}
    }
    // From here on `frozen_run` is not polled: no more checks. The last one was sent before it
    // was logged as passed.
    let last_check = logs
        .matching("background leader check passed")
        .last()
        .expect("a check passed")
        .at;
    let bound = T * IDLE_SESSION_INTERVALS;
    // Just before the 4·T mark the session cannot have ended: the frozen leader still leads.
    tokio::time::sleep_until(last_check + bound - SLACK).await;
    let ran = a.do_work(&token, |_| async { Ok::<_, ()>(()) }).await;
    assert_eq!(ran, Done::Ran(Ok(())), "the lease ended before 4T");
    assert!(a.is_leader() && !held.is_cancelled());
    // Once a standby leads, the frozen elector does nothing a leader does.
    until_leader(&b, bound + 2 * T).await;
    let mut called = false;
    let done = a
        .do_work(&token, |_| {
            called = true;
            async { Ok::<_, ()>(()) }
        })
        .await;
    assert_eq!(done, Done::Standby, "Do ran the work on a frozen ex-leader");
    assert!(!called);
    assert!(!a.is_leader(), "IsLeader on a frozen ex-leader");
    assert!(!a.term(&token).1, "Term on a frozen ex-leader");
    assert_eq!(a.current_term(), None);
    assert!(
        held.is_cancelled(),
        "a term taken before the freeze still reads as live"
    );
    assert_eq!(held.cause(), Some(TermCause::LeadershipLost));
    assert!(
        futures::FutureExt::now_or_never(held.cancelled()).is_some(),
        "waiting on the old term does not end at once"
    );
    // Polled again, `run` demotes at its first check, with the lock-lost line.
    tokio::select! {
        r = &mut frozen_run => panic!("run ended early: {r:?}"),
        () = tokio::time::sleep(T / 4) => {}
    }
    let lost = logs.matching("background leader lock lost");
    assert_eq!(lost.len(), 1, "one demotion: {lost:?}");
    assert!(
        lost[0].message.contains("no check"),
        "the demotion says why: {:?}",
        lost[0].message
    );
    // The demotion is whole: the gauge, the flag and the watch say so (MET-1, DEM-1).
    assert_eq!(gauge(&ra), Some(0), "the gauge after the demotion");
    assert!(!a.is_leader());
    let state = watch.borrow().clone();
    assert_eq!(state.role, elector::leadership::Role::Standby, "{state:?}");
    assert!(
        matches!(
            state.last_term.as_ref().map(|t| &t.end),
            Some(elector::leadership::TermEnd::Lost { cause }) if cause.contains("no check")
        ),
        "the watch does not show the loss: {state:?}"
    );
    token.cancel();
    frozen_run.await.expect("run returns Ok");
    halt(bstop, brun).await;
}

/// LOOP-1, TERM-1 (review: the lease never reached `Term::token`): a leader whose election is
/// frozen (its `run` future no longer polled, as in a frozen or starved process) runs a loop
/// that selects on its term's token, as the token's docs recommend. The loop stops when the
/// term's lease runs out, 4·T after the sending of the last answered check, without waiting for
/// a check; from then on the gauge reads 0 and the watch says Standby, as `is_leader` does
/// (ISL-1).
#[tokio::test(flavor = "current_thread")]
async fn a_loop_on_the_terms_token_stops_when_the_lease_runs_out() {
    let pg = Pg::start().await;
    let (logs, _guard) = Logs::capture();
    let (a, registry) = elector_on(&pg.url(), "a", T).await;
    let token = CancellationToken::new();
    let mut frozen_run = Box::pin(a.run(token.clone()));
    tokio::select! {
        r = &mut frozen_run => panic!("run ended early: {r:?}"),
        _ = until_leader(&a, 2 * T) => {}
    }
    let (term, leading) = a.term(&CancellationToken::new());
    assert!(leading);
    let work = term.token().clone();
    let looping = tokio::spawn(async move {
        let mut passes = 0u32;
        loop {
            tokio::select! {
                biased;
                () = work.cancelled() => return (Instant::now(), passes),
                () = tokio::time::sleep(T / 10) => passes += 1,
            }
        }
    });
    tokio::select! {
        r = &mut frozen_run => panic!("run ended early: {r:?}"),
        () = tokio::time::sleep(T + T / 2) => {}
    }
    // From here on `frozen_run` is not polled: no more checks.
    let last_answer = logs
        .matching("background leader check passed")
        .last()
        .expect("a check passed")
        .at;
    let (stopped, passes) = tokio::time::timeout(6 * T, looping)
        .await
        .expect("the loop on the term's token ran on after the lease ran out")
        .expect("the loop");
    let after = stopped - last_answer;
    let bound = T * IDLE_SESSION_INTERVALS;
    // The lease runs from the check's sending, a round trip (well under SLACK) before its answer.
    assert!(
        after <= bound + SLACK && after + SLACK >= bound,
        "the loop stopped {after:?} after the last answer (bound {bound:?} ± {SLACK:?}; {passes} passes)"
    );
    assert_eq!(term.cause(), Some(elector::TermCause::LeadershipLost));
    assert!(!a.is_leader());
    assert_eq!(gauge(&registry), Some(0), "the gauge still reads 1");
    assert_eq!(a.subscribe().borrow().role, elector::Role::Standby);
    drop(frozen_run);
}

/// TERM-1, ORPH-1 (review: the lease must run from the sending of the last answered check,
/// never from its answer): behind a link that delays every answer by T/2, a leader whose
/// election is frozen stops leading 4·T after the *sending* of its last answered check, which
/// is T/2 before 4·T after its answer. Counted from the answer, two replicas could lead for
/// T/2 (the link's delay).
#[tokio::test(flavor = "current_thread")]
async fn the_lease_runs_from_the_sending_of_the_last_answered_check() {
    let pg = Pg::start().await;
    let proxy = Proxy::start(pg.port).await;
    let (logs, _guard) = Logs::capture();
    let (a, _r) = elector_on(&pg.url_via(proxy.port), "a", T).await;
    let token = CancellationToken::new();
    let mut frozen_run = Box::pin(a.run(token.clone()));
    tokio::select! {
        r = &mut frozen_run => panic!("run ended early: {r:?}"),
        _ = until_leader(&a, 2 * T) => {}
    }
    let delay = T / 2;
    proxy.latency("downstream", delay.as_millis() as u64).await;
    tokio::select! {
        r = &mut frozen_run => panic!("run ended early: {r:?}"),
        () = tokio::time::sleep(2 * T + T / 4) => {}
    }
    // From here on `frozen_run` is not polled: no more checks.
    let last_answer = logs
        .matching("background leader check passed")
        .last()
        .expect("a check passed")
        .at;
    let lost = wait_for(6 * T, || !a.is_leader())
        .await
        .expect("the lease ran out");
    let after = Instant::now() - last_answer;
    let bound = T * IDLE_SESSION_INTERVALS - delay;
    assert!(
        after <= bound + SLACK && after + SLACK >= bound,
        "leading ended {after:?} after the last answer (bound 4T - {delay:?} = {bound:?} ± \
         {SLACK:?}; waited {lost:?})"
    );
    drop(frozen_run);
}
