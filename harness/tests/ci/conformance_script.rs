//! `ci/conformance.sh` writes the report after the elector's tests only when they ran: nextest's
//! exit code 100 (tests failed) carries on, with this run's JUnit file; every other failure (a
//! build or setup error) stops the script with its code before the report, and an earlier run's
//! JUnit file is never read. The real script runs in a scratch copy of `ci/` where cargo, the
//! image build, the prerequisites check and the harness binary are stand-ins that record what
//! they were asked.

use std::path::{Path, PathBuf};
use std::process::Command;

use rstest::rstest;

use crate::{repo, scratch, write};

const JUNIT: &str = "target/nextest/conformance/junit.xml";

/// `cargo build` succeeds; `cargo nextest run` writes a JUnit file saying "fresh" when
/// FAKE_NEXTEST_WRITES=1, then exits with FAKE_NEXTEST_EXIT.
const CARGO: &str = r#"#!/bin/sh
case "$1" in
  build) exit 0 ;;
  nextest)
    echo "$*" >>nextest-calls
    if [ "$FAKE_NEXTEST_WRITES" = 1 ]; then
      mkdir -p target/nextest/conformance && echo fresh >target/nextest/conformance/junit.xml
    fi
    exit "$FAKE_NEXTEST_EXIT" ;;
  *) echo "stand-in cargo: unexpected: $*" >&2; exit 1 ;;
esac
"#;

/// Records its arguments and what the `--elector-junit` file held, then exits with
/// FAKE_HARNESS_EXIT.
const HARNESS: &str = r#"#!/bin/sh
printf '%s\n' "$*" >harness-args
prev=
for a in "$@"; do
  if [ "$prev" = --elector-junit ]; then cat "$a" >harness-read 2>/dev/null || echo missing >harness-read; fi
  prev=$a
done
exit "$FAKE_HARNESS_EXIT"
"#;

struct Outcome {
    dir: PathBuf,
    code: i32,
    stderr: String,
}

impl Outcome {
    fn file(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join(name))
            .ok()
            .map(|s| s.trim().to_owned())
    }
    /// What the harness read from the JUnit file, or `None` when the harness never ran.
    fn harness_read(&self) -> Option<String> {
        self.file("harness-read")
    }
}

/// Runs the real `ci/conformance.sh` in a scratch copy, after an earlier run left a JUnit file
/// saying "stale".
fn conformance(
    name: &str,
    nextest_exit: i32,
    nextest_writes: bool,
    harness_exit: i32,
    args: &[&str],
) -> Outcome {
    let outcome = conformance_on(None, name, nextest_exit, nextest_writes, harness_exit, args);
    assert!(
        outcome.file("nextest-calls").is_some(),
        "the script never ran the elector's tests; stderr:\n{}",
        outcome.stderr
    );
    outcome
}

/// [`conformance`] with `ELECTOR_PG_VERSIONS` set to `versions` (`None`: unset, the default).
fn conformance_on(
    versions: Option<&str>,
    name: &str,
    nextest_exit: i32,
    nextest_writes: bool,
    harness_exit: i32,
    args: &[&str],
) -> Outcome {
    let dir = scratch(name);
    let real = repo().join("ci");
    for f in ["conformance.sh", "env.sh"] {
        let text =
            std::fs::read_to_string(real.join(f)).unwrap_or_else(|e| panic!("reading ci/{f}: {e}"));
        write(&dir.join("ci").join(f), &text, true);
    }
    write(&dir.join("ci/prereqs.sh"), "prereqs() { :; }\n", false);
    write(&dir.join("ci/build-images.sh"), "exit 0\n", true);
    write(&dir.join("bin/cargo"), CARGO, true);
    write(&dir.join("target/release/harness"), HARNESS, true);
    write(&dir.join(JUNIT), "stale\n", false);
    let path = format!(
        "{}:{}",
        dir.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("bash");
    match versions {
        Some(v) => command.env("ELECTOR_PG_VERSIONS", v),
        None => command.env_remove("ELECTOR_PG_VERSIONS"),
    };
    let out = command
        .arg(dir.join("ci/conformance.sh"))
        .args(args)
        .current_dir(Path::new("/"))
        .env("PATH", path)
        .env("FAKE_NEXTEST_EXIT", nextest_exit.to_string())
        .env(
            "FAKE_NEXTEST_WRITES",
            if nextest_writes { "1" } else { "0" },
        )
        .env("FAKE_HARNESS_EXIT", harness_exit.to_string())
        .output()
        .expect("running bash");
    Outcome {
        dir,
        code: out.status.code().unwrap_or(-1),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A build failure (101), a setup error (96), nextest too old (92), no tests (4), or any other
/// error stops the script with nextest's code, before the report and without reading the
/// earlier run's JUnit file (the `|| true` this replaced read it and passed).
#[rstest]
#[case(1)]
#[case(4)]
#[case(92)]
#[case(96)]
#[case(101)]
#[case(102)]
#[case(104)]
fn an_error_that_is_not_a_test_failure_stops_before_the_report(#[case] code: i32) {
    let run = conformance(&format!("stops-{code}"), code, false, 0, &[]);
    assert_eq!(
        run.code, code,
        "the script should stop with nextest's code; stderr:\n{}",
        run.stderr
    );
    assert_eq!(
        run.harness_read(),
        None,
        "the report was written after nextest exited {code}"
    );
    assert!(
        run.stderr.contains("not a test failure"),
        "the script should say why it stopped; stderr:\n{}",
        run.stderr
    );
}

/// Failed tests (100) carry on: the report reads this run's JUnit file, and the script still
/// exits non-zero even when the report itself passes (a failed test without a clause ID).
#[test]
fn failed_tests_carry_on_to_the_report_and_fail_the_run() {
    let run = conformance("tests-failed", 100, true, 0, &[]);
    assert_eq!(
        run.harness_read().as_deref(),
        Some("fresh"),
        "{}",
        run.stderr
    );
    assert_ne!(run.code, 0, "failed elector tests must fail the run");
}

/// Failed tests whose run wrote no JUnit file never let the report read an older one.
#[test]
fn a_run_without_a_junit_file_never_reads_an_older_one() {
    let run = conformance("no-junit", 100, false, 0, &[]);
    assert_ne!(run.harness_read().as_deref(), Some("stale"));
    assert_ne!(run.code, 0);
    assert!(
        !run.dir.join(JUNIT).exists(),
        "the earlier run's JUnit file is still there"
    );
}

/// Passing tests: the report reads this run's file, gets the script's arguments, and its exit
/// code is the script's.
#[rstest]
#[case(0)]
#[case(1)]
fn passing_tests_leave_the_verdict_to_the_report(#[case] report: i32) {
    let run = conformance(
        &format!("passing-{report}"),
        0,
        true,
        report,
        &["leader-partition", "--t", "250ms"],
    );
    assert_eq!(
        run.harness_read().as_deref(),
        Some("fresh"),
        "{}",
        run.stderr
    );
    assert_eq!(
        run.file("harness-args").as_deref(),
        Some(
            format!("run --elector-junit {JUNIT} --pg 13,15,17 leader-partition --t 250ms")
                .as_str()
        )
    );
    assert_eq!(run.code, report, "{}", run.stderr);
}

/// X-PGVER: the report's columns are the versions of `ELECTOR_PG_VERSIONS` (13, 15 and 17
/// when it is unset, above), always as `--pg` (one version is a one-column report, as a CI job
/// per major writes it for `harness report merge`). The elector's tests run on 15: without 15
/// they are not run and not read; with scenarios split by `--shard K/N`, in shard 1 only.
#[rstest]
#[case("15", &[], true, "run --elector-junit {JUNIT} --pg 15 leader-partition")]
#[case("13,17", &[], false, "run --pg 13,17 leader-partition")]
#[case("13", &["--shard", "1/2"], false, "run --pg 13 --shard 1/2 leader-partition")]
#[case("15", &["--shard", "2/2"], false, "run --pg 15 --shard 2/2 leader-partition")]
#[case("15", &["--shard=1/2"], true, "run --elector-junit {JUNIT} --pg 15 --shard=1/2 leader-partition")]
fn the_versions_of_the_report_come_from_the_environment(
    #[case] versions: &str,
    #[case] shard: &[&str],
    #[case] tests_run: bool,
    #[case] expected: &str,
) {
    let name = format!(
        "versions-{}-{}",
        versions.replace(',', "-"),
        shard.join("").replace('/', "of")
    );
    let mut args = shard.to_vec();
    args.push("leader-partition");
    let run = conformance_on(Some(versions), &name, 0, true, 0, &args);
    assert_eq!(
        run.file("harness-args").as_deref(),
        Some(expected.replace("{JUNIT}", JUNIT).as_str()),
        "{}",
        run.stderr
    );
    assert_eq!(
        run.file("nextest-calls").is_some(),
        tests_run,
        "whether the elector's tests ran; stderr:\n{}",
        run.stderr
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
}
