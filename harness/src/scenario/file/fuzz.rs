//! The fuzz target of the scenario parser (proptest): arbitrary bytes, a good file mutated byte
//! by byte, and arbitrary well-formed TOML built from the file's vocabulary. The parser never
//! panics, and every error names a line of the text; a file that parses writes back to a file
//! that reads as the same scenario.
//!
//! Each property runs `FUZZ_CASES` cases (default 2000); for a long run:
//! `FUZZ_CASES=200000 cargo nextest run -p harness fuzz`.

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use proptest::sample::select;
use toml::Value;

use crate::scenario::model::Scenario;

fn config() -> ProptestConfig {
    let cases = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(2000);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Parses `bytes` and checks what came out: no panic (proptest reports one), an error on a
/// line of the text, a scenario that round-trips.
fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
    let path = Path::new("fuzz.toml");
    match Scenario::parse_bytes(path, bytes) {
        Err(e) => {
            let lines = bytes.iter().filter(|b| **b == b'\n').count() + 1;
            prop_assert!(
                (1..=lines).contains(&e.line),
                "error without a line of the text ({lines} lines): {e}"
            );
        }
        Ok(s) => {
            let text = s.to_toml();
            let back = Scenario::parse(path, &text);
            prop_assert_eq!(back.as_ref(), Ok(&s), "written:\n{}", text);
        }
    }
    Ok(())
}

/// A file that parses, every kind of step and expectation in it.
const GOOD: &str = r#"description = "cut the leader off"
clauses = ["DEM-2", "READY-2"]
t = "200ms"

[replicas]
r1 = { path = "direct" }
r2 = { path = "pgbouncer-session", args = ["--verify-lock"] }

[[step]]
wait_for = "leader"
within = "3T"
as = "led"

[[step]]
fault = "latency"
target = "standby"
latency = "2T"
jitter = "5ms"

[[step]]
fault = "partition"
target = "leader"
as = "cut"

[[step]]
control = { loop = "invitations-expire", mode = "fail" }
target = "r2"

[[step]]
sql = "SELECT 1"
hold = "1T"

[[step]]
heal = "cut"

[[expect]]
event = "demoted"
replica = "cut"
after = "cut"
within = "2T"
clause = "DEM-2"

[[expect]]
readyz = 503
replica = "r2"
clause = "READY-2"
"#;

/// Words of the vocabulary (the verbs come from [`super::verbs`]), and some near misses.
const WORDS: &[&str] = &[
    "partition",
    "kill_backend",
    "Partition",
    "leader",
    "new-leader",
    "no-leader",
    "ready",
    "all-ready",
    "leader-check",
    "standby",
    "server",
    "any",
    "other",
    "r1",
    "r2",
    "r3",
    "cut",
    "led",
    "direct",
    "pgbouncer-session",
    "pgbouncer-transaction",
    "pgbouncer-transaction-1",
    "none",
    "full",
    "faults",
    "fail",
    "panic",
    "ok",
    "crash",
    "exit",
    "crash_loop",
    "crash-loop",
    "demoted",
    "acquired",
    "released",
    "lock_released",
    "tick",
    "invitations-expire",
    "DEM-2",
    "LOCK-1",
    "MET-1",
    "READY-2",
    "DEM-9",
    "3T",
    "0.5T",
    "-1T",
    "250ms",
    "2s",
    "1e9T",
    "NaNT",
    "",
    "nuke",
];

const TOP_KEYS: &[&str] = &[
    "description",
    "clauses",
    "t",
    "tick",
    "default_interval",
    "seed",
    "invariants",
    "story",
    "replicas",
    "step",
    "expect",
];
const STEP_KEYS: &[&str] = &[
    "sleep", "wait_for", "fault", "heal", "control", "sql", "hold", "target", "latency", "jitter",
    "within", "as",
];
const EXPECT_KEYS: &[&str] = &[
    "clause",
    "event",
    "gauge_sum_reaches",
    "granted_at_once",
    "fence_tokens_rise",
    "pool_recycled",
    "handover",
    "lock_rows_at_most",
    "work_rows",
    "fence_rejects",
    "readyz",
    "readyz_says",
    "log",
    "replica",
    "after",
    "within",
    "not_before",
    "absent",
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(WORDS).prop_map(str::to_owned),
        1 => "[a-zA-Z0-9_.-]{0,10}",
        1 => any::<String>(),
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => text().prop_map(Value::String),
        2 => any::<i64>().prop_map(Value::Integer),
        1 => (0i64..600).prop_map(Value::Integer),
        1 => any::<bool>().prop_map(Value::Boolean),
        1 => (-1e3f64..1e3).prop_map(Value::Float),
    ]
}

fn key(known: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop_oneof![9 => select(known).prop_map(str::to_owned), 1 => "[a-z_]{1,8}"]
}

fn value() -> impl Strategy<Value = Value> {
    let all_keys: &'static [&'static str] = STEP_KEYS;
    scalar().prop_recursive(3, 24, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key(all_keys), inner, 0..4)
                .prop_map(|m| Value::Table(m.into_iter().collect())),
        ]
    })
}

/// The words that fit the key `name`.
fn words_for(name: &str) -> &'static [&'static str] {
    match name {
        "fault" => super::verbs(),
        "wait_for" => &[
            "leader",
            "new-leader",
            "no-leader",
            "ready",
            "all-ready",
            "leader-check",
        ],
        "event" => &["demoted", "acquired", "released", "lock_released", "tick"],
        "target" | "replica" | "after" | "heal" | "as" | "handover" => &[
            "leader", "standby", "server", "any", "other", "r1", "r2", "cut", "led",
        ],
        "path" => &[
            "direct",
            "pgbouncer-session",
            "pgbouncer-transaction",
            "pgbouncer-transaction-1",
            "none",
        ],
        "mode" => &["fail", "panic", "ok", "crash", "exit", "crash_loop"],
        "name" => &[
            "invitations-expire",
            "approvals-expire",
            "background-leader",
        ],
        "clause" => &["DEM-2", "LOCK-1", "MET-1", "READY-2"],
        "story" => &["full", "faults"],
        _ => WORDS,
    }
}

/// A value fit for `key` most of the time, and one of any type now and then.
fn typed(name: &str) -> BoxedStrategy<Value> {
    let string = || text().prop_map(Value::String);
    let strings = || prop::collection::vec(string(), 0..3).prop_map(Value::Array);
    let fit = match name {
        "t" | "tick" | "sleep" | "hold" | "latency" | "jitter" | "within" | "not_before" => {
            let good = select(&["3T", "0.5T", "250ms", "2s", "0ms"][..]);
            let bad = select(&["-1T", "1e400T", "T", "5", "NaNT"][..]);
            prop_oneof![20 => good, 1 => bad]
                .prop_map(|s| Value::String(s.to_owned()))
                .boxed()
        }
        "invariants" => prop_oneof![
            any::<bool>().prop_map(Value::Boolean),
            Just(Value::String("safety".to_owned())),
        ]
        .boxed(),
        "absent" => any::<bool>().prop_map(Value::Boolean).boxed(),
        "gauge_sum_reaches" | "granted_at_once" | "fence_tokens_rise" | "pool_recycled"
        | "lock_rows_at_most" | "work_rows" | "fence_rejects" | "readyz" | "seed" => {
            prop_oneof![(0i64..600), any::<i64>()]
                .prop_map(Value::Integer)
                .boxed()
        }
        "clauses" | "log" | "args" => strings().boxed(),
        "control" => (
            select(&["loop", "worker"][..]),
            typed("name"),
            typed("mode"),
        )
            .prop_map(|(which, name, mode)| {
                Value::Table(
                    [(which.to_owned(), name), ("mode".to_owned(), mode)]
                        .into_iter()
                        .collect(),
                )
            })
            .boxed(),
        _ => {
            let words = words_for(name);
            let fit = select(words).prop_map(|w| Value::String(w.to_owned()));
            prop_oneof![5 => fit, 1 => string()].boxed()
        }
    };
    prop_oneof![200 => fit, 1 => value()].boxed()
}

/// A table with values for `always`, one of `must`, some of `may`, and a stray key now and
/// then.
fn table(
    always: &'static [&'static str],
    must: &'static [&'static str],
    may: &'static [&'static str],
) -> BoxedStrategy<Value> {
    let stray = prop::option::weighted(0.03, "[a-z_]{1,6}");
    let picked = (select(must), prop::sample::subsequence(may, 0..4), stray);
    picked
        .prop_flat_map(move |(first, mut keys, stray)| {
            keys.insert(0, first);
            keys.extend(always);
            keys.sort_unstable();
            keys.dedup();
            let mut names: Vec<String> = keys.into_iter().map(str::to_owned).collect();
            names.extend(stray);
            let values: Vec<BoxedStrategy<Value>> = names.iter().map(|k| typed(k)).collect();
            (Just(names), values)
        })
        .prop_map(|(names, values)| Value::Table(names.into_iter().zip(values).collect()))
        .boxed()
}

const ACTIONS: &[&str] = &["sleep", "wait_for", "fault", "heal", "control", "sql"];
const KINDS: &[&str] = &[
    "event",
    "gauge_sum_reaches",
    "granted_at_once",
    "fence_tokens_rise",
    "pool_recycled",
    "handover",
    "lock_rows_at_most",
    "work_rows",
    "fence_rejects",
    "readyz",
    "readyz_says",
    "log",
];

fn replicas() -> impl Strategy<Value = Value> {
    let decl = prop::collection::btree_map(key(&["path", "args"]), "[a-z]{0,1}", 0..3)
        .prop_flat_map(|m| {
            let keys: Vec<String> = m.into_keys().collect();
            let values: Vec<BoxedStrategy<Value>> = keys.iter().map(|k| typed(k)).collect();
            (Just(keys), values)
        })
        .prop_map(|(k, v)| Value::Table(k.into_iter().zip(v).collect()));
    let names =
        prop_oneof![5 => select(&["r1", "r2", "r3"][..]).prop_map(str::to_owned), 1 => text()];
    let some = prop::collection::btree_map(names, decl, 1..4);
    prop_oneof![8 => some, 1 => Just(BTreeMap::new())]
        .prop_map(|m| Value::Table(m.into_iter().collect()))
}

/// A file of the scenario's shape, each part present or not, with stray keys and values of
/// any type.
fn file() -> impl Strategy<Value = String> {
    let tops = prop::sample::subsequence(TOP_KEYS, 0..4).prop_flat_map(|keys| {
        let values: Vec<BoxedStrategy<Value>> = keys.iter().map(|k| typed(k)).collect();
        (Just(keys), values)
    });
    let steps = prop::collection::vec(table(&[], ACTIONS, &STEP_KEYS[6..]), 0..6);
    let expects = prop::collection::vec(table(&["clause"], KINDS, EXPECT_KEYS), 0..4);
    let clauses = prop::collection::vec(text().prop_map(Value::String), 0..3);
    (tops, text(), clauses, replicas(), steps, expects).prop_map(|((k, v), d, c, r, s, e)| {
        let mut doc: BTreeMap<String, Value> = k.into_iter().map(str::to_owned).zip(v).collect();
        doc.insert("description".into(), Value::String(d));
        doc.insert("clauses".into(), Value::Array(c));
        doc.insert("replicas".into(), r);
        doc.insert("step".into(), Value::Array(s));
        doc.insert("expect".into(), Value::Array(e));
        toml::to_string(&doc).unwrap_or_default()
    })
}

/// The good file with a few bytes replaced, inserted or removed.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let edit = (0..GOOD.len(), 0u8..3, any::<u8>());
    prop::collection::vec(edit, 1..6).prop_map(|edits| {
        let mut bytes = GOOD.as_bytes().to_vec();
        for (at, kind, byte) in edits {
            let at = at.min(bytes.len().saturating_sub(1));
            match kind {
                0 => bytes[at] = byte,
                1 => bytes.insert(at, byte),
                _ => {
                    bytes.remove(at);
                }
            }
        }
        bytes
    })
}

#[test]
fn the_good_file_parses() {
    Scenario::parse(Path::new("fuzz.toml"), GOOD).unwrap_or_else(|e| panic!("{e}"));
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        check(&bytes)?;
    }

    #[test]
    fn a_good_file_mutated(bytes in mutated()) {
        check(&bytes)?;
    }

    #[test]
    fn well_formed_toml(text in file()) {
        check(text.as_bytes())?;
    }
}
