//! The harness's exit codes (`harness::exit`), one test per code, each by running the command
//! as a user would: 0 every clause passed, 1 a clause failed, 2 usage, 3 the servers could not
//! start (the report shows the scenario as not-run, setup), 4 the report could not be written.

use std::path::{Path, PathBuf};
use std::process::Output;

use harness::exit;

/// Runs `harness run` with `args`, its report in a fresh `out`; returns what it did.
async fn run(name: &str, args: &[&str], env: &[(&str, &str)]) -> (Output, PathBuf) {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("exit-{name}"));
    let _ = std::fs::remove_dir_all(&out);
    (run_into(&out, args, env).await, out)
}

/// Runs `harness run` with `args` and `--out out`.
async fn run_into(out: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_harness"));
    command.arg("run").args(args).arg("--out").arg(out);
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().await.expect("harness runs")
}

fn said(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn code(o: &Output) -> Option<i32> {
    o.status.code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_clause_passed_is_0() {
    let (o, out) = run("passed", &["steady-election"], &[]).await;
    assert_eq!(code(&o), Some(i32::from(exit::PASSED)), "{}", said(&o));
    assert!(out.join("report.json").is_file());
}

/// A program that never takes the lock: the scenario's wait for a leader fails its clauses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_clause_is_1() {
    let args = [
        "steady-election",
        "--replica-cmd",
        "sleep 60",
        "--replica-level",
        "0",
    ];
    let (o, out) = run("failed", &args, &[]).await;
    assert_eq!(
        code(&o),
        Some(i32::from(exit::CLAUSE_FAILED)),
        "{}",
        said(&o)
    );
    assert!(said(&o).contains(" failed, "), "{}", said(&o));
    assert!(out.join("report.json").is_file());
}

#[tokio::test]
async fn bad_usage_is_2() {
    for (name, args) in [
        ("no-such-scenario", &["no-such-scenario"][..]),
        (
            "slack",
            &["steady-election", "--t", "200ms", "--slack", "300ms"][..],
        ),
        ("unknown-flag", &["--no-such-flag"][..]),
    ] {
        let (o, out) = run(name, args, &[]).await;
        assert_eq!(
            code(&o),
            Some(i32::from(exit::USAGE)),
            "{name}: {}",
            said(&o)
        );
        assert!(!out.join("report.json").exists(), "{name}: no report");
    }
}

/// No Docker daemon answers: the report says the scenario did not run, for its setup, and
/// fails no clause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_cannot_start_are_3_and_not_run() {
    let nowhere = [("DOCKER_HOST", "unix:///nonexistent/docker.sock")];
    let (o, out) = run("setup", &["steady-election"], &nowhere).await;
    assert_eq!(code(&o), Some(i32::from(exit::SETUP)), "{}", said(&o));
    assert!(said(&o).contains(" 0 failed, "), "{}", said(&o));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let text = report.to_string();
    assert!(
        text.contains("setup: the servers could not start"),
        "{text}"
    );
}

/// The output folder cannot be made (a file stands where it would go).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_that_cannot_be_written_is_4() {
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("exit-report-file");
    std::fs::write(&file, "not a folder").unwrap();
    let o = run_into(&file.join("out"), &["steady-election"], &[]).await;
    assert_eq!(code(&o), Some(i32::from(exit::REPORT)), "{}", said(&o));
}
