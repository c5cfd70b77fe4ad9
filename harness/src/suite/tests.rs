//! The unit tests of `suite`.

use clap::Parser as _;

use super::*;
use crate::check::Unit;

fn run_args(extra: &[&str]) -> RunArgs {
    let argv = ["harness", "run"].iter().chain(extra);
    match crate::cli::Cli::try_parse_from(argv)
        .expect("parses")
        .command
    {
        crate::cli::Command::Run(args) => args,
        _ => panic!("run"),
    }
}

/// `harness run --shard K/N`: N shards run every scenario file once between them; a shard
/// left without a scenario is refused.
#[test]
fn shards_of_the_suite_run_every_scenario_once() {
    let names = |extra: &[&str]| -> Vec<String> {
        (load(&run_args(extra)).unwrap().into_iter())
            .map(|s| s.name)
            .collect()
    };
    let all = names(&[]);
    let (one, two) = (names(&["--shard", "1/2"]), names(&["--shard", "2/2"]));
    assert_eq!(one.len() + two.len(), all.len());
    let mut joined: Vec<String> = one.iter().chain(&two).cloned().collect();
    joined.sort();
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(joined, sorted);
    assert_eq!(one[0], all[0]);
    let many = format!("{0}/{0}", all.len() + 1);
    let e = load(&run_args(&["--shard", &many]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("so this shard has none"), "{e}");
}

/// `--jobs`: 1 to 4, 1 by default; with several at once, each scenario still gives one
/// source, in the files' order. (These end at once, unplayable by the program; the
/// conformance runs show the order with real scenarios side by side.)
#[tokio::test]
async fn scenarios_run_side_by_side_report_in_file_order() {
    assert_eq!(run_args(&[]).jobs, 1);
    for bad in ["0", "5"] {
        let argv = ["harness", "run", "--jobs", bad];
        assert!(
            crate::cli::Cli::try_parse_from(argv).is_err(),
            "--jobs {bad}"
        );
    }
    // A level-0 program cannot play a scenario that waits for readiness or needs the
    // harness's own replica: such a run ends at once, without a container.
    let program = Program::External(
        crate::replica::program::Command::parse("true", crate::level::Level::Process).unwrap(),
    );
    let scenarios: Vec<Scenario> = (load(&run_args(&[])).unwrap().into_iter())
        .filter(|s| s.needs().is_some_and(|n| !n.met_by(&program.offer())))
        .collect();
    assert!(scenarios.len() >= 4, "{}", scenarios.len());
    let opts = RunOptions {
        t: Duration::from_millis(200),
        seed: 1,
        out: std::env::temp_dir(),
        program,
        images: Images::upstream(),
        slack: Duration::from_millis(50),
        repeat: 1,
    };
    let sources = run_all(&scenarios, &opts, 1, 3).await;
    let names = |v: &[_]| {
        v.iter()
            .map(|s: &Source| s.name.clone())
            .collect::<Vec<_>>()
    };
    let expected: Vec<String> = scenarios.iter().map(|s| s.name.clone()).collect();
    assert_eq!(names(&sources), expected);
    assert!(sources.iter().all(Source::not_run));
}

/// A report names the T its scenarios ran at: a replayed incident's own, else `--t`.
#[test]
fn a_report_names_the_t_its_scenarios_ran_at() {
    let t = Duration::from_millis(200);
    let mut scenarios = load(&run_args(&[])).unwrap();
    scenarios.retain(|s| s.t.is_none());
    scenarios.truncate(2);
    assert_eq!(report_t(&scenarios, t), t);
    let own = crate::span::Span::parse("500ms").unwrap();
    scenarios[0].t = Some(own);
    assert_eq!(report_t(&scenarios, t), t, "mixed: the run's T");
    scenarios[1].t = Some(own);
    assert_eq!(report_t(&scenarios, t), Duration::from_millis(500));
}

fn source(figure: &str, verdict: Verdict) -> Source {
    Source {
        name: "s".into(),
        seconds: 1.0,
        checks: vec![Check {
            name: "demoted".into(),
            clauses: vec!["DEM-2".into()],
            verdict,
            figures: [("demoted after".to_owned(), figure.to_owned())].into(),
            message: "ok".into(),
            measures: Vec::new(),
            needs: None,
            flaky: false,
        }],
        evidence: None,
    }
}

#[test]
fn repeats_give_median_and_max_and_any_failure_fails() {
    let merged = merge_repeats(vec![
        source("1.10T", Verdict::Valid),
        source("0.90T", Verdict::Valid),
        source("1.04T", Verdict::Valid),
    ]);
    assert_eq!(merged.seconds, 3.0);
    let c = &merged.checks[0];
    assert_eq!(c.verdict, Verdict::Valid);
    assert_eq!(c.figures["demoted after"], "median 1.04T, max 1.10T (of 3)");
    let merged = merge_repeats(vec![
        source("1.00T", Verdict::Valid),
        source("2.50T", Verdict::Invalid),
    ]);
    assert_eq!(merged.checks[0].verdict, Verdict::Invalid);
    assert!(merged.checks[0].message.starts_with("run 2 of 2"));
    assert_eq!(
        summarise(&["3", "1", "2", "10"]),
        "median 2.50, max 10 (of 4)"
    );
    assert_eq!(summarise(&["a", "b"]), "a / b");
}

#[test]
fn repeats_keep_each_bounded_figure_at_its_worst_with_its_run() {
    let with = |v: f64| {
        let mut s = source(&format!("{v}T"), Verdict::Valid);
        let m = Measure::at_most("demoted after cut".into(), Some(v), 2.0, Unit::T);
        s.checks[0].measures.push(m);
        s
    };
    let merged = merge_repeats(vec![with(1.2), with(1.9), with(0.8)]);
    let m = &merged.checks[0].measures;
    assert_eq!(m.len(), 1);
    assert_eq!((m[0].value, m[0].run), (Some(1.9), Some(2)));
}

/// `harness run --jobs 2`: work that runs alone never overlaps any other, and the rest runs two
/// at once. Five pieces of 40 ms, the third alone, through the stream `run_all` uses: each
/// records when it began and ended; the alone one's span touches no other's, and the first two
/// overlap.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_scenario_that_runs_alone_runs_beside_no_other() {
    use futures::StreamExt as _;
    let turns = std::sync::Arc::new(tokio::sync::RwLock::new(()));
    let start = Instant::now();
    let spans: Vec<(bool, Duration, Duration)> = futures::stream::iter(0..5)
        .map(|i| {
            let turns = turns.clone();
            let alone = i == 2;
            tokio::spawn(async move {
                in_turn(&turns, alone, async {
                    let began = start.elapsed();
                    tokio::time::sleep(Duration::from_millis(40)).await;
                    (alone, began, start.elapsed())
                })
                .await
            })
        })
        .buffered(2)
        .map(|joined| joined.expect("the task"))
        .collect()
        .await;
    let overlaps =
        |a: &(bool, Duration, Duration), b: &(bool, Duration, Duration)| a.1 < b.2 && b.1 < a.2;
    let lone = spans.iter().find(|s| s.0).expect("the lone one");
    for other in spans.iter().filter(|s| !s.0) {
        assert!(!overlaps(lone, other), "{lone:?} overlaps {other:?}");
    }
    assert!(overlaps(&spans[0], &spans[1]), "two at once: {spans:?}");
}

/// Which shipped scenarios run alone under `--jobs`: every one behind a transaction-mode pooler
/// (the hazards among them), and no other that shows a hazard or none.
#[test]
fn the_transaction_pooler_scenarios_run_alone() {
    let scenarios = load(&run_args(&[])).unwrap();
    let alone: Vec<&str> = (scenarios.iter())
        .filter(|s| s.runs_alone())
        .map(|s| s.name.as_str())
        .collect();
    for name in [
        "pgbouncer-transaction-hazard",
        "pgbouncer-transaction-1-hazard",
        "pgbouncer-transaction-guarded",
        "pgbouncer-transaction-server-restart",
    ] {
        assert!(alone.contains(&name), "{name} runs alone: {alone:?}");
    }
    for name in ["steady-election", "leader-partition", "pgbouncer-session"] {
        assert!(!alone.contains(&name), "{name} runs beside others");
    }
}

/// A source whose release was held to 1T + 0.25T slack and came at `value` T, with `noise` T
/// of the run's own lateness around it; and, with `overlap`, a DEM-3 overlap of that many T
/// against 2T (a safety bound).
fn released(value: f64, noise: f64, overlap: Option<f64>) -> Source {
    let m = Measure {
        noise,
        ..Measure::at_most("released after stop".into(), Some(value), 1.0, Unit::T)
            .with_slack(0.25)
            .of_liveness()
    };
    let verdict = if m.held() {
        Verdict::Valid
    } else {
        Verdict::Invalid
    };
    let mut checks =
        vec![Check::new("released", &["X-WAKE"], verdict, format!("{value}T")).measure(m)];
    if let Some(o) = overlap {
        let m = Measure::at_most("overlap".into(), Some(o), 2.0, Unit::T);
        let verdict = if m.held() {
            Verdict::Valid
        } else {
            Verdict::Invalid
        };
        checks.push(Check::new("overlap", &["DEM-3"], verdict, format!("{o}T")).measure(m));
    }
    Source {
        name: "graceful".into(),
        seconds: 1.0,
        checks,
        evidence: None,
    }
}

/// Runs `repeated` over `plan` (one source per run, in order) and says how many ran.
async fn played(repeat: usize, plan: Vec<Source>) -> Vec<Source> {
    let mut plan = plan.into_iter();
    repeated(repeat, |_, _| {
        let next = plan.next().expect("no more runs planned than given");
        async move { next }
    })
    .await
}

/// A liveness bound missed within the run's own noise runs the scenario [`RERUNS`] more
/// times; held in some of them, the clause is flaky (undecided, with every run's figure and
/// no pass); missed in all, it fails. A miss past the noise, or any safety failure beside a
/// near miss, is decided by its run: nothing runs again.
#[tokio::test]
async fn a_near_miss_runs_again_and_is_flaky_never_a_silent_pass() {
    assert_eq!(RERUNS, 2);
    // 1.3T against 1T + 0.25T slack, with 0.1T of noise: a near miss.
    let near = || released(1.3, 0.1, None);
    assert!(near().checks[0].near_miss());
    let runs = played(
        1,
        vec![near(), released(0.9, 0.0, None), released(1.1, 0.0, None)],
    )
    .await;
    assert_eq!(runs.len(), 3);
    let merged = merge_repeats(runs);
    let c = &merged.checks[0];
    assert!(c.flaky && c.verdict == Verdict::Unknown, "{c}");
    assert!(
        c.message.contains("run(s) 1, held in run(s) 2, 3"),
        "{}",
        c.message
    );
    let figures: Vec<(Option<f64>, Option<usize>)> =
        c.measures.iter().map(|m| (m.value, m.run)).collect();
    assert_eq!(
        figures,
        [
            (Some(1.3), Some(1)),
            (Some(0.9), Some(2)),
            (Some(1.1), Some(3))
        ]
    );
    assert!(merged.flaky() && !merged.passed());
    let report = Report::new(200, 1, 3.0, vec![merged]);
    let row = report.clauses.iter().find(|r| r.id == "X-WAKE").unwrap();
    assert_eq!(row.verdict, ClauseVerdict::Flaky);
    assert!(!report.failed(), "flaky is undecided, not a failure");
    assert!(
        report.summary_line().contains("1 flaky, 0 failed"),
        "{}",
        report.summary_line()
    );
    assert!(report.markdown().contains("## Flaky clauses"));

    // Missed within the noise every time: a failure.
    let all_near = merge_repeats(played(1, vec![near(), near(), near()]).await);
    assert_eq!(all_near.checks[0].verdict, Verdict::Invalid);
    assert!(!all_near.checks[0].flaky);

    // Past the noise: one run, failed.
    let far = played(1, vec![released(1.5, 0.1, None)]).await;
    assert_eq!(far.len(), 1);
    // A near miss beside an overlap past DEM-3: one run, failed; never run away.
    let unsafe_run = played(1, vec![released(1.3, 0.1, Some(2.4))]).await;
    assert_eq!(unsafe_run.len(), 1);
    let report = Report::new(200, 1, 1.0, unsafe_run);
    assert!(report.failed());
    // Repeats first, then the re-runs: `--repeat 2` with a near miss in run 2 runs 4.
    let runs = played(2, vec![released(0.9, 0.0, None), near(), near(), near()]).await;
    assert_eq!(runs.len(), 4);
    assert!(merge_repeats(runs).checks[0].flaky);
}

/// A check one run did not report (it decided nothing there: a wire check with no standby
/// check to read, say) is undecided in that run, not failed: merged, it holds when it held in
/// every run that decided it, and says in how many it was not decided. Seen in `harness run
/// --repeat 5` on 2026-12-07: `standby cadence` absent from 1 of 5 runs of `late-answers` and
/// `rolling-upgrade` failed RUN-1 ("missing from 1 of 5 runs") while every run held.
#[test]
fn a_check_absent_from_a_run_is_undecided_there_not_failed() {
    let without = Source {
        checks: Vec::new(),
        ..source("1.00T", Verdict::Valid)
    };
    let merged = merge_repeats(vec![
        source("1.00T", Verdict::Valid),
        without,
        source("1.10T", Verdict::Valid),
    ]);
    let c = &merged.checks[0];
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
    assert!(c.message.contains("not decided in 1 of 3"), "{}", c.message);
    assert!(merged.passed());
    // Absent from every run but one that failed: failed.
    let failed = merge_repeats(vec![
        source("2.50T", Verdict::Invalid),
        Source {
            checks: Vec::new(),
            ..source("1.00T", Verdict::Valid)
        },
    ]);
    assert_eq!(failed.checks[0].verdict, Verdict::Invalid);
}
