//! Observers: samplers of every replica's gauge and readiness (over HTTP) and of pg_locks (the
//! spec's leader-finding query, verbatim, on the harness's direct connection), written to the
//! timeline as they are taken; and the reader of each replica's wire ([`wire`]).

pub mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::replica::api::ReadyReport;
use crate::replica::handle::GaugeReading;
use crate::timeline::{Timeline, What};
use crate::topology::Observer;

/// Each replica's last gauge answer and when it was asked for (the answer shows the replica
/// at some moment since).
type LastGauges = BTreeMap<String, (Option<i64>, tokio::time::Instant)>;

/// The latest samples, for steps that wait on the system's state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Latest {
    /// Replica → gauge (`None`: unreachable).
    pub gauges: BTreeMap<String, Option<i64>>,
    /// The granted holder of the lock by pg_locks, as `application_name`, when one holds it.
    pub lock_holder: Option<String>,
    /// How many granted rows the query returned.
    pub lock_rows: usize,
    /// Replica → `/readyz` status (`None`: unreachable).
    pub ready: BTreeMap<String, Option<u16>>,
    /// When the gauges, pg_locks and readiness were last sampled.
    pub gauges_at: Option<tokio::time::Instant>,
    /// See `gauges_at`.
    pub locks_at: Option<tokio::time::Instant>,
    /// See `gauges_at`.
    pub ready_at: Option<tokio::time::Instant>,
    /// Whether the replicas are asked over HTTP at all (a level-0 program serves nothing:
    /// then pg_locks alone says who leads).
    pub http: bool,
}

impl Latest {
    /// Whether every sample was taken after `since` (a wait never decides on old samples).
    pub fn fresh_since(&self, since: tokio::time::Instant) -> bool {
        let fresh = |t: Option<tokio::time::Instant>| t.is_some_and(|t| t > since);
        fresh(self.locks_at) && (!self.http || (fresh(self.gauges_at) && fresh(self.ready_at)))
    }

    /// The one replica that leads by both the gauge and pg_locks, if they agree (by pg_locks
    /// alone when the replicas serve no gauge).
    pub fn agreed_leader(&self) -> Option<String> {
        let holder = self.lock_holder.clone()?;
        if !self.http {
            return (self.lock_rows == 1).then_some(holder);
        }
        let by_gauge: Vec<&String> = self
            .gauges
            .iter()
            .filter(|(_, v)| **v == Some(1))
            .map(|(k, _)| k)
            .collect();
        (by_gauge == [&holder] && self.lock_rows == 1).then_some(holder)
    }
}

/// The samplers of one run; stop them with [`Samplers::stop`].
pub struct Samplers {
    token: CancellationToken,
    tasks: JoinSet<()>,
    latest: watch::Receiver<Latest>,
}

impl std::fmt::Debug for Samplers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Samplers")
            .field("latest", &*self.latest.borrow())
            .finish()
    }
}

/// A replica's HTTP address as the samplers see it (fixed across restarts).
#[derive(Clone, Debug)]
pub struct Target {
    /// The replica's name.
    pub name: String,
    /// `http://host:port`.
    pub base_url: String,
}

/// Reads the leader gauge from a replica's `/metrics` (`None` when unreachable or absent).
async fn gauge(client: &reqwest::Client, base: &str) -> Option<GaugeReading> {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    crate::replica::handle::gauge_reading(&text, facts::spec::GAUGE)
        .ok()
        .flatten()
}

impl Samplers {
    /// Starts sampling pg_locks every `every` and, when `http` (the replicas serve `/metrics`
    /// and `/readyz`: contract level 1 or more), gauges every `every` and readiness every
    /// `ready_every`.
    pub fn start(
        timeline: &Timeline,
        observer: Arc<Observer>,
        targets: Vec<Target>,
        (every, ready_every): (Duration, Duration),
        http: bool,
    ) -> Samplers {
        let token = CancellationToken::new();
        let (tx, latest) = watch::channel(Latest {
            http,
            ..Latest::default()
        });
        let tx = Arc::new(tx);
        let mut tasks = JoinSet::new();
        // One poller per replica keeps its last answer; a frozen or dead replica answers
        // nothing, so a value older than `stale` counts as unreachable. The combiner writes one
        // sample of every replica per period, never blocked by a slow one.
        let stale = (ready_every).max(every * 3);
        let client = reqwest::Client::builder()
            .timeout(stale)
            .build()
            .expect("HTTP client");
        let locks = Sink {
            timeline: timeline.clone(),
            token: token.clone(),
            tx: tx.clone(),
        };
        tasks.spawn(sample_server_clock(
            timeline.clone(),
            token.clone(),
            observer.clone(),
            ready_every,
        ));
        tasks.spawn(sample_locks(locks, observer, every));
        if !http {
            return Samplers {
                token,
                tasks,
                latest,
            };
        }
        let last: Arc<std::sync::Mutex<LastGauges>> = Arc::default();
        for r in targets.clone() {
            let (tok, c, last) = (token.clone(), client.clone(), last.clone());
            tasks.spawn(poll_gauge(tok, timeline.clone(), c, r, last, every));
        }
        let gauges = Sink {
            timeline: timeline.clone(),
            token: token.clone(),
            tx: tx.clone(),
        };
        tasks.spawn(combine_gauges(gauges, targets.clone(), last, every, stale));
        let ready = Sink {
            timeline: timeline.clone(),
            token: token.clone(),
            tx,
        };
        tasks.spawn(sample_readiness(ready, targets, client, ready_every));
        Samplers {
            token,
            tasks,
            latest,
        }
    }

    /// The latest samples.
    pub fn latest(&self) -> Latest {
        self.latest.borrow().clone()
    }

    /// Waits until `cond` holds on the latest samples, for at most `limit`; the time it took.
    pub async fn wait_until(
        &self,
        limit: Duration,
        mut cond: impl FnMut(&Latest) -> bool,
    ) -> Option<Duration> {
        let start = tokio::time::Instant::now();
        let mut rx = self.latest.clone();
        loop {
            if cond(&rx.borrow_and_update()) {
                return Some(start.elapsed());
            }
            let left = limit.checked_sub(start.elapsed())?;
            if tokio::time::timeout(left, rx.changed()).await.is_err() {
                return cond(&rx.borrow()).then(|| start.elapsed());
            }
        }
    }

    /// Stops every sampler and waits for them.
    pub async fn stop(mut self) {
        self.token.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// One `/readyz` answer: its status and, when the body parses, the report (`None` when the
/// replica does not answer).
async fn readyz(client: &reqwest::Client, base_url: &str) -> Option<(u16, Option<ReadyReport>)> {
    let resp = client.get(format!("{base_url}/readyz")).send().await.ok()?;
    let status = resp.status().as_u16();
    let report = resp.json::<ReadyReport>().await.ok();
    Some((status, report))
}

/// A sampler's ticker: after a stall (a query that waited out a server restart), it skips the
/// missed ticks instead of firing them back to back.
fn sampling_interval(every: Duration) -> tokio::time::Interval {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tick
}

/// Where a sampler writes: the timeline, the latest samples, and when to stop.
struct Sink {
    timeline: Timeline,
    token: CancellationToken,
    tx: Arc<watch::Sender<Latest>>,
}

/// Keeps `r`'s last gauge answer in `last`, every `every`; records on `timeline` the labels
/// its gauge carries, when first seen and whenever they change (MET-1).
async fn poll_gauge(
    tok: CancellationToken,
    timeline: Timeline,
    c: reqwest::Client,
    r: Target,
    last: Arc<std::sync::Mutex<LastGauges>>,
    every: Duration,
) {
    let mut tick = sampling_interval(every);
    let mut labels_seen: Option<String> = None;
    while !tok.is_cancelled() {
        tokio::select! { () = tok.cancelled() => break, _ = tick.tick() => {} }
        let asked = tokio::time::Instant::now();
        let reading =
            tokio::select! { () = tok.cancelled() => break, v = gauge(&c, &r.base_url) => v };
        let labels = reading.as_ref().and_then(|g| g.labels.clone());
        if labels.is_some() && labels != labels_seen {
            let what = What::GaugeLabels {
                replica: r.name.clone(),
                labels: labels.clone().unwrap_or_default(),
            };
            timeline.record(what);
            labels_seen = labels;
        }
        let v = reading.map(|g| g.value);
        if v.is_some() {
            last.lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(r.name.clone(), (v, asked));
        }
    }
}

/// Writes one sample of every replica's gauge per period: its last answer, unless asked for
/// longer than `stale` ago, with when the oldest of them was asked for.
async fn combine_gauges(
    sink: Sink,
    targets: Vec<Target>,
    last: Arc<std::sync::Mutex<LastGauges>>,
    every: Duration,
    stale: Duration,
) {
    let mut tick = sampling_interval(every);
    while !sink.token.is_cancelled() {
        tokio::select! { () = sink.token.cancelled() => break, _ = tick.tick() => {} }
        let now = tokio::time::Instant::now();
        let (mut values, mut oldest) = (BTreeMap::new(), now);
        {
            let last = last.lock().unwrap_or_else(|e| e.into_inner());
            for r in &targets {
                let fresh = (last.get(&r.name)).filter(|(_, at)| now.duration_since(*at) <= stale);
                if let Some((_, asked)) = fresh {
                    oldest = oldest.min(*asked);
                }
                values.insert(r.name.clone(), fresh.and_then(|(v, _)| *v));
            }
        }
        sink.tx.send_modify(|l| {
            l.gauges = values.clone();
            l.gauges_at = Some(now);
        });
        let asked_ms = Some(sink.timeline.offset(oldest).as_secs_f64() * 1000.0);
        sink.timeline
            .record_at(now, What::Gauges { values, asked_ms });
    }
}

/// The granted rows of `held` that are not granted in `rows` any more.
fn left(held: &[(i32, String)], rows: &[(i32, bool, String)]) -> Vec<(i32, String)> {
    held.iter()
        .filter(|(pid, _)| !rows.iter().any(|r| r.1 && r.0 == *pid))
        .cloned()
        .collect()
}

/// Whether backend `pid` is in pg_stat_activity.
async fn backend_exists(observer: &Observer, pid: i32) -> anyhow::Result<bool> {
    let rows = observer
        .query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", &[&pid])
        .await?;
    Ok(!rows.is_empty())
}

/// Runs the spec's leader-finding query every `every`; when a granted row goes, records whether
/// its backend still exists.
async fn sample_locks(sink: Sink, observer: Arc<Observer>, every: Duration) {
    let mut tick = sampling_interval(every);
    let mut held: Vec<(i32, String)> = Vec::new();
    while !sink.token.is_cancelled() {
        tokio::select! { () = sink.token.cancelled() => break, _ = tick.tick() => {} }
        // While the server restarts the query fails: no sample, not a false "no leader". An
        // answer that took longer than five sampling periods shows no moment that can be placed
        // (a query caught by a server stop was answered 2.3 s later, after the restart): it is
        // no sample either.
        let asked = tokio::time::Instant::now();
        let sampled = tokio::select! {
            () = sink.token.cancelled() => break,
            r = observer.lock_rows() => r,
        };
        let Ok(rows) = sampled else { continue };
        if asked.elapsed() > 5 * every {
            continue;
        }
        for (pid, replica) in left(&held, &rows) {
            let backend_alive = backend_exists(&observer, pid).await.unwrap_or(false);
            sink.timeline.record(What::LockLeft {
                replica,
                pid,
                backend_alive,
            });
        }
        held = rows
            .iter()
            .filter(|r| r.1)
            .map(|r| (r.0, r.2.clone()))
            .collect();
        let granted: Vec<&(i32, bool, String)> = rows.iter().filter(|r| r.1).collect();
        let holder = granted.first().map(|r| r.2.clone());
        let n = granted.len();
        sink.tx.send_modify(|l| {
            l.lock_holder = holder.clone();
            l.lock_rows = n;
            l.locks_at = Some(tokio::time::Instant::now());
        });
        sink.timeline.record(What::Locks { rows });
    }
}

/// Reads the server's clock once onto `timeline` ([`What::ServerClock`]), unless the answer took
/// longer than `within` (it then places nothing precisely). The stage takes the run's first
/// reading with it, before any replica writes; the sampler the others.
///
/// # Errors
/// The query failed (a server restart) or answered no number.
pub async fn read_server_clock(
    observer: &Observer,
    timeline: &Timeline,
    within: Option<Duration>,
) -> anyhow::Result<()> {
    const SQL: &str = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8";
    let asked = tokio::time::Instant::now();
    let rows = observer.query(SQL, &[]).await?;
    let epoch_ms: f64 = (rows.first())
        .ok_or_else(|| anyhow::anyhow!("the server's clock: no row"))?
        .try_get(0)?;
    if within.is_none_or(|w| asked.elapsed() <= w) {
        let asked_ms = timeline.offset(asked).as_secs_f64() * 1000.0;
        timeline.record(What::ServerClock { epoch_ms, asked_ms });
    }
    Ok(())
}

/// Reads the server's clock every `every` ([`read_server_clock`]); a failed reading (a server
/// restart) is skipped.
async fn sample_server_clock(
    timeline: Timeline,
    token: CancellationToken,
    observer: Arc<Observer>,
    every: Duration,
) {
    let mut tick = sampling_interval(every);
    while !token.is_cancelled() {
        tokio::select! { () = token.cancelled() => break, _ = tick.tick() => {} }
        tokio::select! {
            () = token.cancelled() => break,
            _ = read_server_clock(&observer, &timeline, Some(every)) => {}
        }
    }
}

/// Asks every replica's `/readyz` every `every`: its status, its failing checks, and its
/// check names whenever they change.
async fn sample_readiness(sink: Sink, targets: Vec<Target>, c: reqwest::Client, every: Duration) {
    let mut tick = sampling_interval(every);
    let mut names_seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    while !sink.token.is_cancelled() {
        tokio::select! { () = sink.token.cancelled() => break, _ = tick.tick() => {} }
        let answers = join_all(targets.iter().map(|r| {
            let c = c.clone();
            async move { (r.name.clone(), readyz(&c, &r.base_url).await) }
        }))
        .await;
        let mut status = BTreeMap::new();
        let mut failing = BTreeMap::new();
        for (name, answer) in answers {
            status.insert(name.clone(), answer.as_ref().map(|a| a.0));
            let Some((_, Some(report))) = answer else {
                continue;
            };
            let names: Vec<String> = report.checks.iter().map(|c| c.name.clone()).collect();
            if names_seen.get(&name) != Some(&names) {
                names_seen.insert(name.clone(), names.clone());
                (sink.timeline).record(What::Probes {
                    replica: name.clone(),
                    names,
                });
            }
            let bad: Vec<String> = (report.checks.iter())
                .filter(|c| !c.ok)
                .map(|c| format!("{}: {}", c.name, c.error.as_deref().unwrap_or("")))
                .collect();
            if !bad.is_empty() {
                failing.insert(name, bad);
            }
        }
        sink.tx.send_modify(|l| {
            l.ready = status.clone();
            l.ready_at = Some(tokio::time::Instant::now());
        });
        sink.timeline.record(What::Readiness { status, failing });
    }
}
