//! The launchers and readiness on a real leader (LOOP-1, LOOP-2, DO-4, READY-1..READY-4).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use elector::gate::Gate;
use elector::readiness::{panic_report, Check, Readiness, TickOutcome};
use elector::ticker::LeaderTicker;
use elector::while_leader::run_while_leader;
use tokio_util::sync::CancellationToken;

use crate::fixture::*;

/// LOOP-1: ticks run on the leader only, once per period, after asking Do. LOOP-3: a leader
/// gate is open on the leader only, and closes when its term ends.
#[tokio::test]
async fn ticks_run_only_on_the_leader() {
    let pg = Pg::start().await;
    let (a, _ra) = elector_on(&pg.url(), "a", T).await;
    let (b, _rb) = elector_on(&pg.url(), "b", T).await;
    let (astop, arun) = lead(&a).await;
    let (bstop, brun) = spawn_run(&b);

    let shutdown = CancellationToken::new();
    let ticker = LeaderTicker::new("invitations-expire", T / 2).expect("a ticker");
    let count = |e: &elector::Elector| {
        let (e, shutdown, ticker) = (e.clone(), shutdown.clone(), ticker.clone());
        let passes = Arc::new(AtomicUsize::new(0));
        let outcomes = Arc::new(Mutex::new(Vec::new()));
        let (p, o) = (passes.clone(), outcomes.clone());
        let task = tokio::spawn(async move {
            ticker
                .run(
                    &e,
                    &shutdown,
                    |_term| {
                        p.fetch_add(1, Ordering::SeqCst);
                        async { Ok::<(), String>(()) }
                    },
                    |outcome| o.lock().unwrap().push(outcome.clone()),
                )
                .await;
        });
        (passes, outcomes, task)
    };
    let (a_passes, a_outcomes, ta) = count(&a);
    let (b_passes, b_outcomes, tb) = count(&b);
    tokio::time::sleep(5 * T + T / 4).await;
    shutdown.cancel();
    ta.await.unwrap();
    tb.await.unwrap();

    assert_eq!(
        a_passes.load(Ordering::SeqCst),
        10,
        "ticks at T/2 .. 5T on the leader"
    );
    assert!(a_outcomes
        .lock()
        .unwrap()
        .iter()
        .all(|o| *o == TickOutcome::Passed));
    assert_eq!(b_passes.load(Ordering::SeqCst), 0, "no pass on the standby");
    assert_eq!(
        b_outcomes.lock().unwrap().len(),
        10,
        "the standby ticks, but runs nothing"
    );
    assert!(b_outcomes
        .lock()
        .unwrap()
        .iter()
        .all(|o| *o == TickOutcome::Standby));
    let gates =
        |e: &elector::Elector| [Gate::leader(e), Gate::leader_or_open(Some(e))].map(|g| g.allows());
    assert_eq!(gates(&a), [true, true], "the leader's gates");
    assert_eq!(gates(&b), [false, false], "the standby's gates");
    halt(astop, arun).await;
    assert_eq!(gates(&a), [false, false], "a released leader's gates");
    halt(bstop, brun).await;
}

/// READY-1..READY-4, DO-4: probe states through boot, failing, panicking, recovering, a
/// demotion mid-pass and a standby tick.
#[tokio::test]
async fn probe_follows_ticks_and_panics_are_failed_ticks() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (logs, _guard) = Logs::capture();
    let (a, _ra) = elector_on(&pg.url(), "a", T).await;
    let (astop, arun) = lead(&a).await;

    let ticker = LeaderTicker::new("access-session-sweep", T).expect("a ticker");
    let probe = ticker.probe().cloned().expect("a probed loop");
    assert_eq!(probe.name(), "access-session-sweeper", "READY-5");
    let readiness = Readiness::new();
    readiness.add(probe.clone());
    assert!(probe.check().is_err(), "not ready before the boot pass");
    probe.record_boot(Ok(()));
    assert_eq!(probe.check(), Ok(()), "READY-1: the boot pass");

    let shutdown = CancellationToken::new();
    let mut pass_no = 0;
    let mut step = |plan: &'static str| {
        let ticker = ticker.clone();
        let (a, shutdown) = (a.clone(), shutdown.clone());
        pass_no += 1;
        let n = pass_no;
        async move {
            let mut pass = move |term: elector::Term| async move {
                match plan {
                    "fail" => Err(format!("pass {n} failed")),
                    "panic" => panic!("boom {n}"),
                    "hang" => {
                        term.cancelled().await;
                        Err("cancelled".to_owned())
                    }
                    _ => Ok(()),
                }
            };
            let outcome = ticker.tick(&a, &shutdown, &mut pass).await;
            if let Some(p) = ticker.probe() {
                p.record_tick(&outcome);
            }
            outcome
        }
    };

    assert_eq!(
        step("fail").await,
        TickOutcome::Failed("pass 1 failed".into())
    );
    assert_eq!(
        probe.check(),
        Err("pass 1 failed".into()),
        "READY-2: the tick's error"
    );
    assert!(!readiness.is_ready(), "a failing probe fails /readyz");
    assert_eq!(step("ok").await, TickOutcome::Passed);
    assert_eq!(probe.check(), Ok(()), "READY-2: cleared by a later success");

    assert_eq!(step("panic").await, TickOutcome::Panicked("boom 3".into()));
    let expected = panic_report("access-session-sweep", "boom 3");
    assert_eq!(
        expected,
        "plexsphere: background loop \"access-session-sweep\": tick panicked: boom 3"
    );
    assert_eq!(probe.check(), Err(expected), "READY-4");
    // The ERROR line comes once its stack's symbols are resolved, on a blocking thread.
    let resolving = tokio::time::Instant::now();
    while logs.matching("background loop tick panicked").is_empty()
        && resolving.elapsed() < Duration::from_secs(30)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let errors = logs.matching("background loop tick panicked");
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].level, tracing::Level::ERROR);
    assert_eq!(errors[0].fields["loop"], "access-session-sweep");
    assert_eq!(errors[0].fields["panic"], "boom 3");
    assert!(
        errors[0].fields["stack"].contains("launchers"),
        "the panicking frames"
    );
    let failed = logs.matching("background loop tick failed");
    assert_eq!(
        failed.len(),
        2,
        "the failed and the panicked tick each WARN"
    );
    assert!(failed.iter().all(|e| e.level == tracing::Level::WARN));

    // DO-4: a demotion mid-pass is not a failed tick, and clears the probe.
    let pid = lock_pid(&observer).await;
    let hang = step("hang");
    let kill = async {
        tokio::time::sleep(T / 4).await;
        terminate(&observer, pid).await;
    };
    let (outcome, ()) = tokio::join!(hang, kill);
    assert_eq!(outcome, TickOutcome::Lost);
    assert_eq!(probe.check(), Ok(()));

    // READY-3: a standby tick passes.
    let (b, _rb) = elector_on(&pg.url(), "b", T).await;
    let (bstop, brun) = spawn_run(&b);
    until_leader(&b, 3 * T).await;
    assert!(!a.is_leader() || a.current_term() == Some(2));
    halt(astop, arun).await;
    assert_eq!(step("fail").await, TickOutcome::Standby);
    assert_eq!(probe.check(), Ok(()));
    halt(bstop, brun).await;
}

/// READY-3: a demoted leader whose last pass failed clears on its first standby tick.
#[tokio::test]
async fn demoted_leader_probe_clears_on_first_standby_tick() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (a, _ra) = elector_on(&pg.url(), "a", T).await;
    let (b, _rb) = elector_on(&pg.url(), "b", T).await;
    let (astop, arun) = lead(&a).await;
    let (bstop, brun) = spawn_run(&b);
    let ticker = LeaderTicker::new("approvals-expire", T).expect("a ticker");
    let probe = ticker.probe().cloned().unwrap();
    probe.record_boot(Ok(()));
    let shutdown = CancellationToken::new();
    let mut failing = |_t: elector::Term| async { Err::<(), _>("db down".to_owned()) };
    let outcome = ticker.tick(&a, &shutdown, &mut failing).await;
    probe.record_tick(&outcome);
    assert_eq!(probe.check(), Err("db down".into()));

    terminate(&observer, lock_pid(&observer).await).await;
    until_leader(&b, 2 * T + SLACK).await;
    // The overlap window: a notices at its own next check, within T of the kill.
    wait_for(T + SLACK, || !a.is_leader())
        .await
        .expect("a demoted at its next check");
    let outcome = ticker.tick(&a, &shutdown, &mut failing).await;
    probe.record_tick(&outcome);
    assert_eq!(outcome, TickOutcome::Standby);
    assert_eq!(probe.check(), Ok(()), "cleared on the first standby tick");
    for (stop, run) in [(astop, arun), (bstop, brun)] {
        halt(stop, run).await;
    }
}

/// LOOP-2: the while-leader launcher hands the loop one term, cancels it on loss, and starts
/// it again in the next term; a loop that returns early waits for the next term.
#[tokio::test]
async fn while_leader_restarts_the_loop_each_term() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let (a, _ra) = elector_on(&pg.url(), "a", T).await;
    let (astop, arun) = spawn_run(&a);
    let shutdown = CancellationToken::new();
    let terms = Arc::new(Mutex::new(Vec::new()));
    let launcher = tokio::spawn({
        let (a, shutdown, terms) = (a.clone(), shutdown.clone(), terms.clone());
        async move {
            run_while_leader(&a, "audit-archiver", &shutdown, |term| {
                let terms = terms.clone();
                async move {
                    terms.lock().unwrap().push((term.number(), None));
                    term.cancelled().await;
                    terms.lock().unwrap().push((term.number(), term.cause()));
                }
            })
            .await;
        }
    });
    // A body that returns at once is not started again until the next term.
    let early = Arc::new(Mutex::new(Vec::new()));
    let returns_early = tokio::spawn({
        let (a, shutdown, early) = (a.clone(), shutdown.clone(), early.clone());
        async move {
            run_while_leader(&a, "returns-early", &shutdown, |term| {
                let early = early.clone();
                async move { early.lock().unwrap().push(term.number()) }
            })
            .await;
        }
    });
    until_leader(&a, 10 * T).await;
    tokio::time::sleep(T / 2).await;
    terminate(&observer, lock_pid(&observer).await).await;
    wait_for(5 * T, || a.current_term() == Some(2))
        .await
        .expect("a second term");
    tokio::time::sleep(T / 2).await;
    shutdown.cancel();
    launcher.await.unwrap();
    returns_early.await.unwrap();
    assert_eq!(*early.lock().unwrap(), [Some(1), Some(2)], "once per term");
    let seen = terms.lock().unwrap().clone();
    use elector::TermCause::*;
    assert_eq!(
        seen,
        vec![
            (Some(1), None),
            (Some(1), Some(LeadershipLost)),
            (Some(2), None),
            (Some(2), Some(ParentEnded)),
        ]
    );
    halt(astop, arun).await;
}

/// Panics, to leave a stack on this thread that names this function.
#[inline(never)]
fn an_earlier_panic() {
    panic!("an earlier panic, caught elsewhere");
}

/// READY-4 (review: a panic re-raised with `resume_unwind` skips the panic hook, so its ERROR
/// line could carry the stack of an earlier panic): on one thread, a panic caught elsewhere
/// leaves its stack behind; then a pass re-raises a payload. The tick is a panicked tick with
/// that payload, and its ERROR line does not show the earlier panic's stack.
#[tokio::test]
async fn a_re_raised_panic_never_logs_an_earlier_panics_stack() {
    let pg = Pg::start().await;
    let (logs, _guard) = Logs::capture();
    let (a, _ra) = elector_on(&pg.url(), "a", T).await;
    let (astop, arun) = lead(&a).await;
    let ticker = LeaderTicker::new("invitations-expire", T).expect("a ticker");
    let shutdown = CancellationToken::new();
    // The first tick installs the stack-keeping hook.
    let mut ok = |_t: elector::Term| async { Ok::<(), String>(()) };
    assert_eq!(
        ticker.tick(&a, &shutdown, &mut ok).await,
        TickOutcome::Passed
    );
    assert!(std::panic::catch_unwind(an_earlier_panic).is_err());
    let mut re_raise = |_t: elector::Term| async {
        if true {
            std::panic::resume_unwind(Box::new("re-raised"));
        }
        Ok::<(), String>(())
    };
    let outcome = ticker.tick(&a, &shutdown, &mut re_raise).await;
    assert_eq!(outcome, TickOutcome::Panicked("re-raised".into()));
    wait_for(Duration::from_secs(10), || {
        !logs.matching("background loop tick panicked").is_empty()
    })
    .await
    .expect("the ERROR line");
    let line = &logs.matching("background loop tick panicked")[0];
    assert_eq!(line.fields["panic"], "re-raised");
    assert!(
        !line.fields["stack"].contains("an_earlier_panic"),
        "the re-raised panic's ERROR line shows the earlier panic's stack:\n{}",
        line.fields["stack"]
    );
    halt(astop, arun).await;
}

/// Panics every time it is called, from a frame this test names.
#[inline(never)]
fn a_panicking_pass() -> Result<(), String> {
    panic!("a pass that always panics")
}

/// READY-4, "the loop keeps ticking" (found by CI: a loop that panicked twice stopped ticking
/// for 3 s): the first panic of a process resolves its stack's symbols on a blocking thread,
/// hundreds of ms or seconds on a loaded host. A second panic while that runs must not wait
/// for it: the panic hook's capture, and the default hook's message before it, took std's
/// process-wide backtrace lock, which the resolution held. Each panicking tick returns within
/// T/4 (50 ms: a capture of the stack takes about a millisecond; the rest is scheduling), and the
/// second one returns before the first ERROR line is written, so the test exercises the overlap.
/// nextest runs each test in a process of its own, so the first resolution here is the
/// process's first (the slow one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_while_another_panics_stack_resolves_does_not_wait_for_it() {
    // The default hook's own backtrace (RUST_BACKTRACE=1) is the user's choice and is resolved
    // in the panicking thread; this test measures what the elector adds.
    std::env::set_var("RUST_BACKTRACE", "0");
    let pg = Pg::start().await;
    let (logs, _guard) = Logs::capture();
    let (a, _ra) = elector_on(&pg.url(), "a", T).await;
    let (astop, arun) = lead(&a).await;
    let ticker = LeaderTicker::new("invitations-expire", T).expect("a ticker");
    let shutdown = CancellationToken::new();
    let mut panics = |_t: elector::Term| async { a_panicking_pass() };
    let bound = T / 4;
    for n in 1..=3 {
        let started = tokio::time::Instant::now();
        let outcome = ticker.tick(&a, &shutdown, &mut panics).await;
        let took = started.elapsed();
        assert_eq!(
            outcome,
            TickOutcome::Panicked("a pass that always panics".into())
        );
        assert!(
            took < bound,
            "panicking tick {n} took {took:?} (bound {bound:?}); ERROR lines written so far: {}",
            logs.matching("background loop tick panicked").len()
        );
    }
    let written = logs.matching("background loop tick panicked").len();
    assert!(
        written < 3,
        "every stack was resolved before the next panic ({written} ERROR lines already): the \
         overlap this test is for did not happen"
    );
    wait_for(Duration::from_secs(30), || {
        logs.matching("background loop tick panicked").len() == 3
    })
    .await
    .expect("an ERROR line for each panic");
    let lines = logs.matching("background loop tick panicked");
    assert!(
        lines
            .iter()
            .any(|l| l.fields["stack"].contains("a_panicking_pass")),
        "no ERROR line names the panicking frame: {:?}",
        lines.iter().map(|l| &l.fields["stack"]).collect::<Vec<_>>()
    );
    halt(astop, arun).await;
}
