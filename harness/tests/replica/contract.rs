//! Programs that break the replica contract (docs/replica-contract.md) get a clear error that
//! names the replica, its level and what was expected, never a panic or a hang; a DSN given to
//! such a program never shows in the error. Real processes, no database: each program fails
//! before it would use one.

use std::time::Duration;

use harness::replica::program::{Command, Level, Program};
use harness::replica::{ReplicaProcess, ReplicaSpec};

use crate::fixture::T;

const SECRET_DSN: &str = "postgres://app:s3cret-pw@127.0.0.1:1/plexsphere";

/// A Python one-liner that serves `body` as `/metrics` on `REPLICA_HTTP`, as a level-1 program.
fn serving(body: &str) -> String {
    format!(
        "python3 -c 'import http.server as h, os\n\
         class H(h.BaseHTTPRequestHandler):\n \
         def do_GET(s):\n  b = {body:?}.encode(); s.send_response(200); s.end_headers(); s.wfile.write(b)\n \
         def log_message(s, *a): pass\n\
         host, port = os.environ[\"REPLICA_HTTP\"].rsplit(\":\", 1)\n\
         h.HTTPServer((host, int(port)), H).serve_forever()'"
    )
}

/// Starts `template` at `level` as replica `r1` with a DSN and a short start timeout; the error.
async fn refused(template: &str, level: Level) -> String {
    let program = Program::External(Command::parse(template, level).expect("a valid template"));
    let mut spec = ReplicaSpec::new("r1", T).dsn(SECRET_DSN);
    spec.start_timeout = Duration::from_secs(3);
    let started = tokio::time::Instant::now();
    let err = ReplicaProcess::spawn_program(program, spec)
        .await
        .expect_err("the program breaks the contract");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the error came after {:?}: no hang",
        started.elapsed()
    );
    let text = format!("{err:#}");
    assert!(text.contains("replica r1"), "names the replica: {text}");
    assert!(
        !text.contains("s3cret-pw"),
        "the DSN's password never shows: {text}"
    );
    text
}

/// LOOP-4 aside, a program must run: one that exits at once is named with its exit status.
#[tokio::test]
async fn a_program_that_exits_at_once_is_named_with_its_exit_status() {
    let e = refused("sh -c 'echo boom >&2; exit 3'", Level::Metrics).await;
    assert!(e.contains("exited before serving /metrics"), "{e}");
    assert!(e.contains("exit status: 3") && e.contains("boom"), "{e}");
    let e = refused("sh -c 'exit 4'", Level::Process).await;
    assert!(e.contains("level 0") && e.contains("exit status: 4"), "{e}");
    let e = refused("sh -c 'exit 5'", Level::Events).await;
    assert!(e.contains("exited before reporting `started`"), "{e}");
}

/// MET-1 from outside needs the gauge: a level-1 program without `/metrics` is refused.
#[tokio::test]
async fn a_level_1_program_that_serves_no_metrics_is_refused() {
    let e = refused("sleep 30", Level::Metrics).await;
    assert!(e.contains("no /metrics with the gauge within 3s"), "{e}");
    assert!(e.contains("level 1"), "{e}");
}

/// The gauge must be the spec's: a number, one series, under its own name.
#[tokio::test]
async fn a_malformed_or_missing_gauge_is_named() {
    let e = refused(
        &serving("plexsphere_background_leader yes\n"),
        Level::Metrics,
    )
    .await;
    assert!(
        e.contains("malformed gauge sample") && e.contains("\"yes\""),
        "{e}"
    );
    // Literal braces in a template are doubled. A labelled gauge is read (MET-1 fails it, the
    // checks say); two series of it are refused.
    let two = serving("plexsphere_background_leader{{pod=\"a\"}} 1\nplexsphere_background_leader{{pod=\"b\"}} 0\n");
    let e = refused(&two, Level::Metrics).await;
    assert!(e.contains("more than one series"), "{e}");
    let e = refused(&serving("background_leader 1\n"), Level::Metrics).await;
    assert!(
        e.contains("answered without the gauge plexsphere_background_leader"),
        "{e}"
    );
}

/// A level-3 program that prints garbage instead of events never reports `started`.
#[tokio::test]
async fn a_level_3_program_that_prints_garbage_is_refused() {
    let e = refused("sh -c 'echo not-json; sleep 30'", Level::Events).await;
    assert!(e.contains("no `started` event within 3s"), "{e}");
}

/// A scenario's replica flags are the harness's own replica's: another program is not given
/// them silently.
#[tokio::test]
async fn replica_flags_are_refused_for_another_program() {
    let program = Program::External(Command::parse("sleep 30", Level::Process).unwrap());
    let mut spec = ReplicaSpec::new("r1", T);
    spec.fail_loops = vec!["invitations-expire".into()];
    let e = format!(
        "{:#}",
        ReplicaProcess::spawn_program(program, spec)
            .await
            .unwrap_err()
    );
    assert!(
        e.contains("--fail-loop only the harness's own replica takes"),
        "{e}"
    );
}

/// A well-behaved level-1 program starts, and its gauge reads through the same client.
#[tokio::test]
async fn a_level_1_program_with_the_gauge_starts() {
    let program = Program::External(
        Command::parse(
            &serving("plexsphere_background_leader 0.0\n"),
            Level::Metrics,
        )
        .unwrap(),
    );
    let mut r = ReplicaProcess::spawn_program(program, ReplicaSpec::new("r1", T))
        .await
        .expect("starts");
    assert_eq!(r.try_metrics_gauge().await.unwrap(), Some(0));
    r.sigkill().unwrap();
    r.wait().await.unwrap();
}

/// A restarted program that exits at boot (its server still refuses it) is started again, as
/// an orchestrator restarts a crashing pod: the restart succeeds with the next attempt, and
/// the failed attempt's exit is kept. (chaos-119 in the main job: a replica restarted while
/// the server was stopped for longer than its own boot patience ended the scenario's steps.)
#[tokio::test]
async fn a_restart_that_exits_at_boot_is_started_again() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("restart-again");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let count = dir.join("starts");
    // The second start (the first restart) exits 3 at once; the others run.
    let template = format!(
        "sh -c 'n=$(cat {c} 2>/dev/null || echo 0); echo $((n + 1)) > {c}; \
         if [ \"$n\" = 1 ]; then exit 3; fi; exec sleep 60'",
        c = count.display()
    );
    let program = Program::External(Command::parse(&template, Level::Process).unwrap());
    let mut r = ReplicaProcess::spawn_program(program, ReplicaSpec::new("r1", T))
        .await
        .expect("starts");
    r.restart()
        .await
        .expect("started again after one failed attempt");
    assert!(r.is_running());
    assert_eq!(std::fs::read_to_string(&count).unwrap().trim(), "3");
    let exits = r.exits();
    let codes: Vec<Option<i32>> = exits
        .iter()
        .map(|e| e.status.and_then(|s| s.code()))
        .collect();
    // The first process, SIGKILLed by the restart (no code), then the attempt that exited 3.
    assert_eq!(codes, [None, Some(3)], "{exits:?}");
    r.sigkill().unwrap();
    r.wait().await.unwrap();
}
