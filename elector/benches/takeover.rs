//! The elector's measured figures against a real PostgreSQL (issue: "Measured, in a benchmark"):
//!
//! - take-over latency after a graceful shutdown and after a backend kill, median and max in
//!   units of T, over `TRIALS` trials each at T = 200 ms (goal: median ≈ 0.5·T, max ≤ T + 20 ms);
//! - X-WAKE's handover table: release to new leader, p50 and p99 in ms, polling against waking,
//!   at T = 200 ms and 5 s, after a graceful release, a killed backend and a crashed process
//!   (goal when waking: p50 under 20 ms whatever T is; polling: about T/2);
//! - backends opened per 1000 refused standby checks (goal: 0), from `pg_stat_database.sessions`;
//! - round trips per standby check and per leader check (goal: 1), counted as ReadyForQuery
//!   messages on a relay between the elector and the server.
//!
//! Run: `cargo bench -p elector --bench takeover` (the PostgreSQL image is chosen as the tests
//! choose it, see `testkit::images`; `ELECTOR_BENCH_TRIALS`, `ELECTOR_BENCH_SEED` override the
//! defaults). Results are printed and written to `target/bench/elector-takeover.json`.
//!
//! The relay is written by hand (some 40 lines): no maintained crate counts PostgreSQL protocol
//! messages on a live connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{ManagerConfig, Pool, RecyclingMethod, Runtime};
use elector::{Config, Elector};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_postgres::NoTls;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::layer::SubscriberExt;

const T: Duration = Duration::from_millis(200);

/// Counts tracing events by message (the elector logs each check).
#[derive(Clone, Default)]
struct Counts(Arc<Mutex<HashMap<String, u64>>>);

impl Counts {
    fn get(&self, message: &str) -> u64 {
        self.0.lock().unwrap().get(message).copied().unwrap_or(0)
    }
}

struct Message(String);
impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Counts {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut m = Message(String::new());
        event.record(&mut m);
        *self.0.lock().unwrap().entry(m.0).or_default() += 1;
    }
}

/// A TCP relay to `upstream` that counts the server's ReadyForQuery ('Z') messages: one per
/// completed round trip of the simple or extended protocol.
async fn counting_relay(upstream: String, ready: Arc<AtomicU64>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (client, _) = listener.accept().await.unwrap();
            let server = TcpStream::connect(&upstream).await.unwrap();
            let (mut cr, mut cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            tokio::spawn(async move { tokio::io::copy(&mut cr, &mut sw).await });
            let ready = ready.clone();
            tokio::spawn(async move {
                // Server messages: a type byte and a big-endian length that counts itself.
                let (mut buf, mut pending) = (vec![0u8; 16384], Vec::<u8>::new());
                loop {
                    let n = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if cw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                    pending.extend_from_slice(&buf[..n]);
                    while pending.len() >= 5 {
                        let len = u32::from_be_bytes(pending[1..5].try_into().unwrap()) as usize;
                        if pending.len() < 1 + len {
                            break;
                        }
                        if pending[0] == b'Z' {
                            ready.fetch_add(1, Ordering::SeqCst);
                        }
                        pending.drain(..1 + len);
                    }
                }
            });
        }
    });
    port
}

fn pool(url: &str, app: &str) -> Pool {
    let mut cfg = deadpool_postgres::Config::new();
    cfg.url = Some(url.to_owned());
    cfg.application_name = Some(app.to_owned());
    cfg.manager = Some(ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    });
    cfg.create_pool(Some(Runtime::Tokio1), NoTls).unwrap()
}

async fn elector(url: &str, app: &str, t: Duration) -> Elector {
    elector_with(url, app, t, false).await
}

async fn elector_with(url: &str, app: &str, t: Duration, wake: bool) -> Elector {
    let pool = pool(url, app);
    drop(pool.get().await.unwrap());
    Elector::new(Config::new(pool).check_interval(t).wake(wake)).unwrap()
}

fn run(
    e: &Elector,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<Result<(), elector::Error>>,
) {
    let token = CancellationToken::new();
    let (e, t) = (e.clone(), token.clone());
    (token, tokio::spawn(async move { e.run(t).await }))
}

async fn until(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() <= limit {
        if cond() {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}

fn stats(mut xs: Vec<f64>) -> serde_json::Value {
    xs.sort_by(f64::total_cmp);
    let median = xs[xs.len() / 2];
    let max = *xs.last().unwrap();
    serde_json::json!({"trials": xs.len(), "median_t": median, "max_t": max,
        "max_ms": max * T.as_secs_f64() * 1000.0, "min_t": xs[0]})
}

/// The pid of the session granted the lock (a waking standby's queued session shows too).
async fn lock_pid(observer: &tokio_postgres::Client) -> i32 {
    let rows = observer
        .query(testkit::SPEC_LEADER_QUERY, &[])
        .await
        .unwrap();
    let granted: Vec<i32> = rows
        .iter()
        .filter(|r| r.get::<_, bool>(1))
        .map(|r| r.get(0))
        .collect();
    assert_eq!(granted.len(), 1, "one granted row");
    granted[0]
}

/// What ends the leader's term in a take-over trial.
#[derive(Clone, Copy)]
enum Fault {
    /// Its shutdown token: a graceful release (`pg_advisory_unlock`).
    Graceful,
    /// Its lock session's backend killed (`pg_terminate_backend`).
    BackendKill,
    /// Its `run` task aborted: the connection closes without an unlock, as a killed process's.
    ProcessCrash,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Graceful => "graceful",
            Fault::BackendKill => "backend_kill",
            Fault::ProcessCrash => "process_crash",
        }
    }
}

/// `trials` take-overs between two electors at interval `t` (waking as given), each ended by
/// `fault`: a leads, b stands by, the fault hits a, b leads; then the roles swap. A random
/// pause (seeded) spreads the fault over the standby's check phase. Seconds from fault to lead.
async fn takeovers(
    url: &str,
    observer: &tokio_postgres::Client,
    t: Duration,
    wake: bool,
    fault: Fault,
    trials: usize,
    rng: &mut fastrand::Rng,
) -> Vec<f64> {
    let (mut a, mut b) = (
        elector_with(url, "a", t, wake).await,
        elector_with(url, "b", t, wake).await,
    );
    let (mut astop, mut arun) = run(&a);
    until(2 * t, || a.is_leader()).await.expect("a leads");
    let (mut bstop, mut brun) = run(&b);
    let mut samples = Vec::new();
    for _ in 0..trials {
        let phase = rng.u64(0..t.as_millis() as u64);
        tokio::time::sleep(t + Duration::from_millis(phase)).await;
        let fault_at = Instant::now();
        match fault {
            Fault::Graceful => astop.cancel(),
            Fault::BackendKill => {
                let pid = lock_pid(observer).await;
                observer
                    .execute("SELECT pg_terminate_backend($1)", &[&pid])
                    .await
                    .unwrap();
            }
            Fault::ProcessCrash => arun.abort(),
        }
        until(3 * t, || b.is_leader()).await.expect("take-over");
        samples.push(fault_at.elapsed().as_secs_f64());
        match fault {
            Fault::Graceful | Fault::ProcessCrash => {
                let _ = arun.await;
                (astop, arun) = run(&a);
            }
            Fault::BackendKill => {
                until(2 * t, || !a.is_leader()).await.expect("a demotes");
            }
        }
        std::mem::swap(&mut a, &mut b);
        std::mem::swap(&mut astop, &mut bstop);
        std::mem::swap(&mut arun, &mut brun);
    }
    for (stop, run) in [(astop, arun), (bstop, brun)] {
        stop.cancel();
        let _ = run.await;
    }
    samples
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let trials: usize = std::env::var("ELECTOR_BENCH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let seed: u64 = std::env::var("ELECTOR_BENCH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    let mut rng = fastrand::Rng::with_seed(seed);
    println!("seed {seed}, {trials} trials per figure, T = {T:?}");
    let counts = Counts::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(counts.clone()))
        .unwrap();

    let pg = testkit::Pg::start().await;
    let port = pg.port;
    let url = pg.url();
    let (observer, conn) = tokio_postgres::connect(&url, NoTls).await.unwrap();
    tokio::spawn(conn);

    // Take-over after a graceful shutdown and after a backend kill, at T = 200 ms, polling.
    let mut results = serde_json::Map::new();
    for kind in [Fault::Graceful, Fault::BackendKill] {
        let samples = takeovers(&url, &observer, T, false, kind, trials, &mut rng).await;
        let samples: Vec<f64> = samples.iter().map(|d| d / T.as_secs_f64()).collect();
        let s = stats(samples);
        println!(
            "take-over after {:<12}: median {:.3} T, max {:.3} T ({:.0} ms), n = {}",
            kind.name(),
            s["median_t"].as_f64().unwrap(),
            s["max_t"].as_f64().unwrap(),
            s["max_ms"].as_f64().unwrap(),
            trials
        );
        results.insert(format!("takeover_{}", kind.name()), s);
    }

    // X-WAKE: the handover table, polling against waking, at T = 200 ms and 5 s, after a
    // graceful release, a killed backend and a crashed process (`ELECTOR_BENCH_WAKE=0` skips
    // it; `ELECTOR_BENCH_WAKE_TRIALS` sets its trials per cell, default 20).
    if std::env::var("ELECTOR_BENCH_WAKE").as_deref() != Ok("0") {
        let wake_trials: usize = std::env::var("ELECTOR_BENCH_WAKE_TRIALS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20);
        let mut table = Vec::new();
        println!("handover, release to new leader (ms), {wake_trials} trials per row:");
        for t in [T, Duration::from_secs(5)] {
            for kind in [Fault::Graceful, Fault::BackendKill, Fault::ProcessCrash] {
                for wake in [false, true] {
                    let mut ms: Vec<f64> =
                        (takeovers(&url, &observer, t, wake, kind, wake_trials, &mut rng).await)
                            .iter()
                            .map(|s| s * 1000.0)
                            .collect();
                    ms.sort_by(f64::total_cmp);
                    let pct =
                        |p: f64| ms[((ms.len() as f64 * p).ceil() as usize).clamp(1, ms.len()) - 1];
                    let (p50, p99) = (pct(0.5), pct(0.99));
                    let how = if wake { "wake" } else { "polling" };
                    println!(
                        "  T = {t:?} {:<13} {how:<8} p50 {p50:>7.1} ms  p99 {p99:>7.1} ms",
                        kind.name()
                    );
                    table.push(serde_json::json!({"t_ms": t.as_millis() as u64,
                        "fault": kind.name(), "mode": how, "trials": ms.len(),
                        "p50_ms": p50, "p99_ms": p99}));
                }
            }
        }
        results.insert("handover".into(), serde_json::json!(table));
    }

    // Backends opened by 1000 refused checks, and round trips per check, through the relay.
    let ready = Arc::new(AtomicU64::new(0));
    let relay = counting_relay(format!("127.0.0.1:{port}"), ready.clone()).await;
    let relayed =
        format!("postgres://postgres:postgres@127.0.0.1:{relay}/plexsphere?sslmode=disable");
    let leader = elector(&relayed, "leader", T).await;
    let (lstop, lrun) = run(&leader);
    until(2 * T, || leader.is_leader()).await.expect("leader");
    let sessions = || async {
        observer
            .query_one(
                "SELECT sessions FROM pg_stat_database WHERE datname = current_database()",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    // Leader: round trips per check over 25 checks (the standby does not run yet).
    let (z0, c0) = (
        ready.load(Ordering::SeqCst),
        counts.get("background leader check passed"),
    );
    tokio::time::sleep(25 * T).await;
    let (z1, c1) = (
        ready.load(Ordering::SeqCst),
        counts.get("background leader check passed"),
    );
    let leader_rt = (z1 - z0) as f64 / (c1 - c0) as f64;

    let fast = Duration::from_millis(10);
    let standby = elector(&relayed, "standby", fast).await;
    let (sstop, srun) = run(&standby);
    until(Duration::from_secs(2), || {
        counts.get("background leader lock held elsewhere") > 0
    })
    .await
    .unwrap();
    let (s0, z0, r0, c0) = (
        sessions().await,
        ready.load(Ordering::SeqCst),
        counts.get("background leader lock held elsewhere"),
        counts.get("background leader check passed"),
    );
    until(Duration::from_secs(60), || {
        counts.get("background leader lock held elsewhere") >= r0 + 1000
    })
    .await
    .unwrap();
    let (s1, z1, r1, c1) = (
        sessions().await,
        ready.load(Ordering::SeqCst),
        counts.get("background leader lock held elsewhere"),
        counts.get("background leader check passed"),
    );
    sstop.cancel();
    srun.await.unwrap().unwrap();
    lstop.cancel();
    lrun.await.unwrap().unwrap();
    let refused = r1 - r0;
    // The leader's checks in the same window go through the relay too: subtract them at the
    // rate measured above.
    let standby_rt = ((z1 - z0) as f64 - (c1 - c0) as f64 * leader_rt) / refused as f64;
    let opened = (s1 - s0) as f64 * 1000.0 / refused as f64;
    println!("backends opened per 1000 refused checks: {opened:.1} ({refused} checks)");
    println!("round trips per standby check: {standby_rt:.3}; per leader check: {leader_rt:.3}");
    results.insert(
        "backends_per_1000_refused".into(),
        serde_json::json!(opened),
    );
    results.insert(
        "round_trips_standby_check".into(),
        serde_json::json!(standby_rt),
    );
    results.insert(
        "round_trips_leader_check".into(),
        serde_json::json!(leader_rt),
    );
    results.insert("seed".into(), serde_json::json!(seed));
    results.insert("t_ms".into(), serde_json::json!(T.as_millis() as u64));

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("elector-takeover.json");
    std::fs::write(&path, serde_json::to_string_pretty(&results).unwrap()).unwrap();
    println!("written to {}", path.display());
}
