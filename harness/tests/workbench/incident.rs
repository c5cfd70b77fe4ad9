//! A hand-made incident at `harness up`: streamed as it happens, faults typed from "another
//! terminal", written on exit as evidence and a scenario that `harness run` replays; and the
//! throwaway database's password, set to a known value, in no file and no output but the
//! address lines `harness up` prints.

use std::path::Path;
use std::time::Duration;

use harness::scenario::{Scenario, Step};
use nix::sys::signal::Signal;

use crate::common::{files_under, fresh_dir, text, Up, HARNESS};

const LIMIT: Duration = Duration::from_secs(30);

/// Streams, takes faults with the scenario files' verbs and targets (refusing bad ones with
/// their messages), and on exit writes the evidence and a scenario that replays the incident.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_made_incident_is_streamed_recorded_and_replayed() {
    let password = format!("pw-{}", fastrand::u64(..));
    let out = fresh_dir("up");
    let out_s = out.display().to_string();
    let env = [("ELECTOR_POSTGRES_PASSWORD", password.as_str())];
    let args = [
        "--replicas",
        "3",
        "--t",
        "200ms",
        "--out",
        &out_s,
        "--name",
        "incident",
    ];
    let mut up = Up::start(&args, &env);
    let ready = (up.wait_line(0, Duration::from_secs(120), |l| l.starts_with("Ctrl-C"))).await;
    let pids = up.replica_pids();
    assert_eq!(pids.len(), 3, "{:?}", up.lines());
    for pid in &pids {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        let cmdline = String::from_utf8_lossy(&cmdline);
        assert!(!cmdline.contains(&password), "ps shows the DSN");
    }
    let mut said = play_an_incident(&up, ready).await;

    let status = up.signal_and_wait(Signal::SIGINT).await;
    let lines = up.lines();
    assert!(status.success(), "{status}: {lines:#?}");
    assert!(!lines.iter().any(|l| l.contains("VIOLATED")), "{lines:#?}");
    assert!(
        lines.iter().any(|l| l.starts_with("   valid  gauge sum")),
        "{lines:#?}"
    );
    let gone = up.harness(&["fault", "kill", "r1"]).await;
    let (o, e) = text(&gone);
    assert_eq!(gone.status.code(), Some(1));
    assert!(e.contains("no `harness up` is running"), "{e}");
    said.extend([o, e]);

    let recorded = evidence_and_scenario(&out);
    let replay_out = fresh_dir("replay");
    said.extend(replay(&recorded, &replay_out, &password).await);
    no_password_but_the_addresses(&up, &password, &said, &[&out, &replay_out]);
}

/// Bad faults refused, then the leader partitioned, a new one elected, and everything healed;
/// returns what the commands printed.
async fn play_an_incident(up: &Up, ready: usize) -> Vec<String> {
    let led = up
        .wait_line(ready, LIMIT, |l| l.contains("holds the lock"))
        .await;
    let one = |l: &str| l.contains("gauges:") && l.contains("(sum 1)");
    up.wait_line(ready, LIMIT, one).await;
    let mut said = Vec::new();
    let (o, e) = text(&up.harness(&["fault", "nuke", "r1"]).await);
    assert!(e.contains("partition") && e.contains("kill-backend"), "{e}");
    said.extend([o, e]);
    let bad = up.harness(&["fault", "partition", "r9"]).await;
    assert_eq!(bad.status.code(), Some(1));
    let (o, e) = text(&bad);
    assert!(
        e.contains("unknown replica \"r9\" (replicas: r1, r2, r3)"),
        "{e}"
    );
    said.extend([o, e]);

    let cut = up.harness(&["fault", "partition", "leader"]).await;
    let (o, e) = text(&cut);
    assert!(cut.status.success(), "{o}\n{e}");
    assert!(
        o.contains("partition leader") && o.contains("(black hole, both directions)"),
        "{o}"
    );
    said.extend([o, e]);
    let faulted = up
        .wait_line(led, LIMIT, |l| l.contains("fault: partition r"))
        .await;
    up.wait_line(faulted, LIMIT, |l| l.contains(" demoted, term 1 ended"))
        .await;
    let new = up
        .wait_line(faulted, LIMIT, |l| l.contains("acquired the lock"))
        .await;
    let healed = up.harness(&["heal"]).await;
    let (o, e) = text(&healed);
    assert!(healed.status.success() && o.contains("heal f1"), "{o}\n{e}");
    said.extend([o, e]);
    up.wait_line(new, LIMIT, |l| l.contains("fault lifted: partition r"))
        .await;
    let (o, e) = text(&up.harness(&["heal"]).await);
    assert!(o.contains("nothing to heal"), "{o}");
    said.extend([o, e]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    said
}

/// The evidence folder's files and the recorded scenario's steps; the scenario's path.
fn evidence_and_scenario(out: &Path) -> std::path::PathBuf {
    let evidence = out.join("scenarios/incident");
    for file in [
        "timeline.jsonl",
        "timeline.svg",
        "checks.json",
        "work.json",
        "replica-r2.log",
    ] {
        assert!(
            evidence.join(file).is_file(),
            "{file} in {}",
            evidence.display()
        );
    }
    let timeline = std::fs::read_to_string(evidence.join("timeline.jsonl")).unwrap();
    assert!(
        timeline.contains(r#""kind":"fault","verb":"partition""#),
        "faults on the timeline"
    );
    let recorded = out.join("incident.toml");
    let scenario = Scenario::load(&recorded).unwrap_or_else(|e| panic!("{e}"));
    let labels: Vec<String> = scenario.steps.iter().map(Step::label).collect();
    assert_eq!(labels.len(), 5, "{labels:?}");
    assert!(
        matches!(scenario.steps[0], Step::Sleep { .. }),
        "{labels:?}"
    );
    assert_eq!(labels[1], "partition leader");
    assert_eq!(labels[3], "heal f1");
    recorded
}

/// `harness run` of the recorded scenario passes and partitions a replica again; returns what
/// it printed.
async fn replay(recorded: &Path, out: &Path, password: &str) -> [String; 2] {
    let replay = tokio::process::Command::new(HARNESS)
        .args(["run", &recorded.display().to_string(), "--out"])
        .arg(out)
        .env("ELECTOR_POSTGRES_PASSWORD", password)
        .output()
        .await
        .unwrap();
    let (o, e) = text(&replay);
    assert!(replay.status.success(), "the replay fails:\n{o}\n{e}");
    let replayed = std::fs::read_to_string(out.join("scenarios/incident/timeline.jsonl"));
    assert!(replayed
        .unwrap()
        .contains(r#""verb":"partition","target":"r"#));
    [o, e]
}

/// The password is in use (the address lines `harness up` prints carry it, as they may), and
/// nowhere else: no other line of its stdout or stderr, no output of the commands typed at
/// it, and no file it or the replay wrote (logs, timelines, checks, report, scenario).
fn no_password_but_the_addresses(up: &Up, password: &str, said: &[String], dirs: &[&Path]) {
    let is_address = |l: &str| {
        ["postgres ", "pgbouncer ", "proxy "]
            .iter()
            .any(|p| l.trim_start().starts_with(p))
    };
    let lines = up.lines();
    assert!(
        lines.iter().any(|l| is_address(l) && l.contains(password)),
        "the DSNs printed do not carry the password set: {lines:#?}"
    );
    for l in lines.iter().filter(|l| !is_address(l)) {
        assert!(!l.contains(password), "stdout: {l}");
    }
    for l in up.stderr.lock().unwrap().iter() {
        assert!(!l.contains(password), "stderr: {l}");
    }
    for s in said {
        assert!(!s.contains(password), "a command's output: {s}");
    }
    let mut files = 0;
    for dir in dirs {
        for file in files_under(dir) {
            let bytes = std::fs::read(&file).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(password),
                "{} holds the password",
                file.display()
            );
            files += 1;
        }
    }
    assert!(files >= 15, "only {files} files written");
}

/// A failed connection's error names the server but not the password of its DSN.
#[tokio::test]
async fn connection_errors_carry_no_password() {
    let dsn = "postgres://postgres:Sekrit-42@127.0.0.1:1/plexsphere";
    let e = harness::topology::try_connect(dsn, Duration::from_secs(2))
        .await
        .expect_err("nothing listens on port 1");
    let shown = format!("{e:#}");
    assert!(shown.contains("127.0.0.1:1"), "{shown}");
    assert!(!shown.contains("Sekrit-42"), "{shown}");
}
