//! Histories the harness wrote in runs whose verdict flipped (2026-12-07, PostgreSQL 15,
//! T = 200 ms), judged again: each failed a program that kept its clause, and must not any
//! more. The files are the evidence folders' `timeline.jsonl` (the chaos run's cut to what
//! the wire model reads: its pg_locks samples, its faults and r2's wire, to 12.3 s).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::wire::model::WireModel;
use super::wire::{checks, WireSetup};
use super::{work_only_from_leader_at, Bounds, Check, Verdict, WorkRow};
use crate::level::Level;
use crate::timeline::Entry;

fn folder(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/histories")
        .join(name)
}

fn entries(name: &str) -> Vec<Entry> {
    let path = folder(name).join("timeline.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (text.lines())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// The run's bounds: T = 200 ms, a tick of T, pg_locks and gauges sampled every 20 ms, and the
/// suite's slack.
fn bounds() -> Bounds {
    let ms = Duration::from_millis;
    Bounds {
        t: ms(200),
        tick: ms(200),
        sample: ms(20),
        slack: ms(50),
    }
}

fn wire_check(entries: &[Entry], name: &str) -> Check {
    let model = WireModel::of(entries);
    let setup = WireSetup {
        tapped: true,
        ..WireSetup::default()
    };
    (checks(entries, &model, &bounds(), &setup).into_iter())
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name}"))
}

/// `chaos::case_4_seed_9_pgbouncer_session` (clean-clone CI): r2, behind PgBouncer in session
/// mode, was granted on a client connection opened before a server restart; its leader check
/// after the grant was read as a setting changed next to a refused check (RUN-2).
#[test]
fn chaos_9_a_leader_behind_a_session_pooler_after_a_server_restart() {
    let entries = entries("chaos-9-false-run-2");
    let model = WireModel::of(&entries);
    let granted = (model.sessions.iter())
        .any(|l| l.replica == "r2" && (l.granted_ms - 11_628.676).abs() < 0.01);
    assert!(granted, "r2's grant at 11629 ms is no lock session");
    let c = wire_check(&entries, "refused checks leave the pool alone");
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
}

/// `pgbouncer-session` with a program written to the page: r2's lock call, answered `t` just
/// after r1's unlock on the server backend PgBouncer then handed to r2, and the `SET` after
/// it, were read as a refused check and a setting changed next to it (RUN-2).
#[test]
fn pgbouncer_session_a_grant_in_step_with_the_release() {
    let entries = entries("pgbouncer-session-false-run-2");
    let model = WireModel::of(&entries);
    let held: Vec<(&str, f64)> = (model.sessions.iter())
        .map(|l| (l.replica.as_str(), l.granted_ms))
        .collect();
    assert_eq!(
        held,
        vec![("r1", 576.9), ("r2", 618.407)],
        "the lock sessions"
    );
    // Neither replica was refused: nothing for RUN-2 to decide here.
    let c = wire_check(&entries, "refused checks leave the pool alone");
    assert_eq!(c.verdict, Verdict::Unknown, "{c}");
}

/// `frozen-leader` with a program written to the page (level 2, its work on a pooled
/// connection every T/2): its work timer fired before its check after the thaw, and an
/// `INSERT` with its values inline left 0.6 ms after the thaw; LOOP-1 failed it, though the
/// page allows a thawed leader its overlap window, and passed the same program when its check
/// fired first.
#[test]
fn frozen_leader_a_write_at_the_thaw_before_the_check() {
    let entries = entries("frozen-leader-loop-1-flip");
    let path = folder("frozen-leader-loop-1-flip").join("work.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rows: Vec<WorkRow> = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    let end_ms = entries.last().map_or(0.0, |e| e.t_ms);
    let model = WireModel::of(&entries);
    let b = bounds();
    let c = work_only_from_leader_at(
        &entries,
        &model,
        &rows,
        end_ms,
        &b,
        &BTreeSet::new(),
        Level::Work,
    );
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
    assert_eq!(
        c.figures["late writes held in transit (unfenced)"], "1",
        "{c}"
    );
}

/// `gallery::case_04_moving_lock` (clean-clone CI, 2026-12-07): the flaw moves its lock every
/// fourth check, unlocking on one connection and locking on another; here r3's check won the
/// key in between, r1 demoted and closed the connection it had just unlocked. A close after an
/// unlock is a release (SESS-1 holds); the flaw is SESS-2's alone.
#[test]
fn moving_lock_a_close_after_the_unlock_is_a_release() {
    let entries = entries("moving-lock-race");
    let check = wire_check(
        &entries,
        "the lock connection ends only at a demotion or a release",
    );
    assert_eq!(check.verdict, Verdict::Valid, "{check}");
}

/// `gallery::case_19_no_exit` (2026-12-07, images and builds on a fresh machine, two server
/// tests at once): the flaw releases at SIGTERM and stays up, so the harness stops the other
/// two replicas first, 5 s each, while the leader r1 goes on writing. Its Python HTTP server
/// answered no gauge request from 2353 ms until sampling stopped at 2481 ms, while every
/// pg_locks sample showed its lock session (pid 37) held: the open span was closed at the
/// first unanswered sample, and its 50 rows of the stop read as written outside its terms
/// (LOOP-1, beside the flaw's own RUN-6). A span left unanswered while its lock session stays
/// held stays open, at the end of sampling as in its middle.
#[test]
fn no_exit_a_leader_unanswered_when_sampling_stopped_still_leads() {
    let name = "no-exit-gauge-unanswered-at-stop";
    let entries = entries(name);
    let path = folder(name).join("work.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rows: Vec<WorkRow> = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    let end_ms = entries.last().map_or(0.0, |e| e.t_ms);
    let model = WireModel::of(&entries);
    let c = work_only_from_leader_at(
        &entries,
        &model,
        &rows,
        end_ms,
        &bounds(),
        &BTreeSet::new(),
        Level::Work,
    );
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
}

/// `chaos::case_1_seed_4` (the demotion's order, before it was landed): r3 demoted in order at
/// 35936 ms and was granted again at 36191 ms; a gauge sample whose oldest ask (another
/// replica's) came before that grant carried r3's 1 of the new term, read as the old term
/// outliving its connection (DEM-1). The history is r3's lock connection and the connection of
/// its next grant, with the samples, faults and r3's WARN lines from 34 s.
#[test]
fn chaos_4_a_gauge_reading_of_the_next_term() {
    let entries = entries("chaos-4-gauge-of-the-next-term");
    let c = wire_check(&entries, "the demotion's order");
    assert_eq!(c.verdict, Verdict::Valid, "{c}");
}
