//! Runs one scenario against a fresh topology and decides its checks: the continuous invariants
//! and the file's expectations. Every run keeps its evidence in a folder of its own: the
//! timeline (JSON lines and SVG), the checks, and each replica's log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use tokio::time::Instant;

use crate::check::{self, in_t, Bounds, Check, Verdict, WorkRow};
use crate::event::{ReplicaEvent, WORK_TABLE_DDL};
use crate::fault::{FaultRecord, Nemesis};
use crate::observe::{Samplers, Target};
use crate::replica::{ReplicaProcess, ReplicaSpec};
use crate::report::{self, Source};
use crate::scenario::file::{DbPath, RawExpect, RawStep, Scenario, Span};
use crate::timeline::{Entry, Timeline, What};
use crate::topology::{Images, Observer, ReplicaPath, Topology, TopologyConfig};

/// How to run scenarios.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// T when the scenario does not set one.
    pub t: Duration,
    /// The seed of every random choice (which standby a `standby` target picks).
    pub seed: u64,
    /// The output folder (each scenario's evidence goes to `<out>/scenarios/<name>/`).
    pub out: PathBuf,
    /// The harness binary (re-executed as `harness replica`).
    pub binary: PathBuf,
    /// The container images.
    pub images: Images,
    /// Scheduling noise allowed on top of a bound: small against T.
    pub slack: Duration,
    /// Which repetition this is (1 for the first): later ones keep their evidence in
    /// `<out>/scenarios/<name>.<repeat>/` so no run overwrites another's.
    pub repeat: usize,
}

impl RunOptions {
    /// The evidence folder of `scenario`'s run, relative to `out`.
    pub fn evidence_dir(&self, scenario: &str) -> String {
        if self.repeat > 1 {
            format!("scenarios/{scenario}.{}", self.repeat)
        } else {
            format!("scenarios/{scenario}")
        }
    }
}

/// What a scenario run produced.
#[derive(Debug)]
pub struct Outcome {
    /// The scenario's checks, as a report source.
    pub source: Source,
    /// The whole timeline.
    pub entries: Vec<Entry>,
}

/// A step with an `as` name: what it did, to whom, and when it took effect (ms since start).
#[derive(Clone, Debug)]
struct Named {
    verb: String,
    target: String,
    at_ms: f64,
    /// When the step began (a fault's call can take a while, e.g. a server restart, and its
    /// effects can show before it returns).
    began_ms: f64,
}

fn path_of(p: DbPath) -> Option<ReplicaPath> {
    match p {
        DbPath::Direct => Some(ReplicaPath::Direct),
        DbPath::PgbouncerSession => Some(ReplicaPath::PgBouncerSession),
        DbPath::PgbouncerTransaction => Some(ReplicaPath::PgBouncerTransaction),
        DbPath::None => None,
    }
}

/// A free TCP port on loopback for a replica's HTTP server, so it keeps its URL across restarts.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Runs `scenario` and returns its checks and timeline.
///
/// # Errors
/// The topology or a replica could not start, or a step could not be carried out (a wait that
/// timed out is not an error: it fails the scenario's checks).
pub async fn run(scenario: &Scenario, opts: &RunOptions) -> anyhow::Result<Outcome> {
    let raw = &scenario.raw;
    let t = raw
        .t
        .as_ref()
        .map_or(Ok(opts.t), |s| {
            Span::parse(s.get_ref()).map(|s| s.at(opts.t))
        })
        .map_err(|e| anyhow!(e))?;
    let tick = raw
        .tick
        .as_ref()
        .map_or(Ok(t), |s| Span::parse(s.get_ref()).map(|s| s.at(t)))
        .map_err(|e| anyhow!(e))?;
    let evidence_rel = opts.evidence_dir(&scenario.name);
    let evidence = opts.out.join(&evidence_rel);
    std::fs::create_dir_all(&evidence)
        .with_context(|| format!("creating {}", evidence.display()))?;
    let began = Instant::now();

    let paths: Vec<ReplicaPath> = raw
        .replicas
        .values()
        .filter_map(|d| path_of(d.path))
        .collect();
    let config = TopologyConfig::docker()
        .images(opts.images.clone())
        .for_paths(paths);
    let topology = Topology::start(config)
        .await
        .context("starting the topology")?;
    let observer = Arc::new(Observer::new(&topology));
    observer
        .query(WORK_TABLE_DDL, &[])
        .await
        .context("creating leader_work")?;

    let mut specs = Vec::new();
    let mut targets = Vec::new();
    for (name, decl) in &raw.replicas {
        let port = free_port()?;
        let mut spec = ReplicaSpec::new(name, t);
        spec.tick = Some(tick);
        spec.http = Some(format!("127.0.0.1:{port}"));
        spec.extra_args = decl.args.clone();
        spec.stderr_log = Some(evidence.join(format!("replica-{name}.log")));
        if let Some(path) = path_of(decl.path) {
            spec.dsn = Some(topology.add_proxy(name, path).await?.dsn());
        }
        targets.push(Target {
            name: name.clone(),
            base_url: format!("http://127.0.0.1:{port}"),
        });
        specs.push(spec);
    }

    // The run's clock starts as the replicas start; DB times are mapped onto it.
    let run_start = Instant::now();
    let timeline = Timeline::starting_at(run_start);
    let db_epoch0: f64 = observer
        .query("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .await?[0]
        .get(0);
    let db_offset_ms = Instant::now().duration_since(run_start).as_secs_f64() * 1000.0;

    let spawned = futures::future::join_all(
        specs
            .into_iter()
            .map(|s| ReplicaProcess::spawn(&opts.binary, s)),
    )
    .await;
    let mut replicas: BTreeMap<String, ReplicaProcess> = BTreeMap::new();
    for p in spawned {
        let p = p.context("starting a replica")?;
        replicas.insert(p.name().to_owned(), p);
    }
    let names: Vec<String> = replicas.keys().cloned().collect();
    let nemesis = Nemesis::new(&topology, run_start);
    let every = (t / 10).max(Duration::from_millis(10));
    let samplers = Samplers::start(&timeline, observer.clone(), targets, every, t / 2);

    let mut rng = fastrand::Rng::with_seed(opts.seed);
    let mut named: BTreeMap<String, Named> = BTreeMap::new();
    let mut step_errors: Vec<String> = Vec::new();
    for (i, step) in raw.step.iter().enumerate() {
        let label = describe(step);
        timeline.record(What::Step {
            label: format!("{}: {label}", i + 1),
            acts: step.sleep.is_none() && step.wait_for.is_none(),
        });
        if let Err(e) = do_step(
            step,
            t,
            &samplers,
            &nemesis,
            &mut replicas,
            &mut named,
            &timeline,
            &mut rng,
        )
        .await
        {
            step_errors.push(format!("step {} ({label}): {e:#}", i + 1));
            break;
        }
    }

    // Teardown: stop sampling, then stop the replicas gracefully, standbys first, so no
    // standby takes over from a leader that shuts down.
    let leader = samplers.latest().lock_holder;
    samplers.stop().await;
    let mut order: Vec<String> = replicas
        .keys()
        .filter(|k| Some(*k) != leader.as_ref())
        .cloned()
        .collect();
    order.extend(leader.filter(|l| replicas.contains_key(l)));
    for name in order {
        let p = replicas.get_mut(&name).expect("known replica");
        if p.is_running() {
            let _ = p.sigcont();
            let _ = p.sigterm();
            if p.wait_timeout(Duration::from_secs(5))
                .await
                .ok()
                .flatten()
                .is_none()
            {
                let _ = p.sigkill();
            }
        }
    }
    for p in replicas.values() {
        for ev in p.history() {
            timeline.record_at(
                ev.at,
                What::Replica {
                    replica: p.name().to_owned(),
                    event: ev.line.event.clone(),
                },
            );
        }
    }
    let rows = observer
        .query("SELECT loop_name, replica, term, extract(epoch FROM at)::float8 FROM leader_work ORDER BY id", &[])
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| WorkRow {
            loop_name: r.get(0),
            replica: r.get(1),
            term: r.get(2),
            t_ms: (r.get::<_, f64>(3) - db_epoch0) * 1000.0 + db_offset_ms,
        })
        .collect::<Vec<_>>();
    topology.shutdown().await;

    let entries = timeline.entries();
    let end_ms = entries.last().map_or(0.0, |e| e.t_ms);
    let bounds = Bounds {
        t,
        tick,
        sample: every,
        slack: opts.slack,
    };
    let mut checks = Vec::new();
    if !step_errors.is_empty() {
        let mut c = Check {
            name: "steps".into(),
            clauses: Vec::new(),
            verdict: Verdict::Invalid,
            figures: Default::default(),
            message: step_errors.join("; "),
        };
        c.clauses
            .extend(raw.clauses.iter().map(|c| c.get_ref().clone()));
        checks.push(c);
    }
    if raw.invariants {
        checks.push(check::gauge_sum(&entries, end_ms, &bounds));
        checks.push(check::one_lock_row(&entries));
        checks.push(check::gauge_matches_locks(&entries, &bounds));
        checks.push(check::overlap_bound(&entries, end_ms, &bounds));
        if rows.iter().any(|r| !r.loop_name.contains(':')) {
            checks.push(check::work_only_from_leader(
                &entries, &rows, end_ms, &bounds,
            ));
        }
    }
    // Boot and readiness shape hold in every scenario whose replicas run an elector; they are
    // unknown (not counted) where none does.
    checks.extend(
        [
            check::boot_passes_before_ready(&entries),
            check::probe_names(&entries),
        ]
        .into_iter()
        .filter(|c| c.verdict != Verdict::Unknown),
    );
    for ex in &raw.expect {
        checks.push(expectation(ex, &entries, &rows, &named, &bounds, &evidence));
    }

    timeline.write_jsonl(&evidence.join("timeline.jsonl"))?;
    std::fs::write(
        evidence.join("timeline.svg"),
        report::svg::render(&scenario.name, &entries, &names, t),
    )?;
    std::fs::write(
        evidence.join("checks.json"),
        serde_json::to_string_pretty(&checks)?,
    )?;
    std::fs::write(
        evidence.join("work.json"),
        serde_json::to_string_pretty(&rows)?,
    )?;
    let source = Source {
        name: scenario.name.clone(),
        seconds: began.elapsed().as_secs_f64(),
        checks,
        evidence: Some(evidence_rel),
    };
    Ok(Outcome { source, entries })
}

fn describe(step: &RawStep) -> String {
    let s = |v: &Option<toml::Spanned<String>>| v.as_ref().map(|x| x.get_ref().clone());
    if let Some(v) = s(&step.sleep) {
        format!("sleep {v}")
    } else if let Some(v) = s(&step.wait_for) {
        format!("wait for {v}")
    } else if let Some(v) = s(&step.fault) {
        format!("{v} {}", s(&step.target).unwrap_or_default())
            .trim_end()
            .to_owned()
    } else if let Some(v) = s(&step.heal) {
        format!("heal {v}")
    } else if let Some(c) = &step.control {
        format!(
            "control {} {}",
            s(&step.target).unwrap_or_default(),
            serde_json::to_string(c).unwrap_or_default()
        )
    } else if let Some(v) = s(&step.sql) {
        let mut lines = v.lines().map(str::trim).filter(|l| !l.is_empty());
        let first = lines.next().unwrap_or_default().to_owned();
        format!(
            "sql {first}{}",
            if lines.next().is_some() { " …" } else { "" }
        )
    } else {
        "step".into()
    }
}

fn span(v: &Option<toml::Spanned<String>>, t: Duration, default: Duration) -> Duration {
    v.as_ref()
        .and_then(|s| Span::parse(s.get_ref()).ok())
        .map_or(default, |s| s.at(t))
}

/// Resolves a step's target: `leader` (by gauge and pg_locks), `standby` (seeded choice among
/// the others), a replica's name, or the target of an earlier named fault.
fn resolve(
    target: &str,
    samplers: &Samplers,
    replicas: &BTreeMap<String, ReplicaProcess>,
    named: &BTreeMap<String, Named>,
    rng: &mut fastrand::Rng,
) -> anyhow::Result<String> {
    let latest = samplers.latest();
    match target {
        "leader" => latest
            .lock_holder
            .clone()
            .filter(|h| replicas.contains_key(h))
            .ok_or_else(|| anyhow!("no replica leads now (pg_locks: {:?})", latest.lock_holder)),
        "standby" => {
            let others: Vec<&String> = replicas
                .keys()
                .filter(|k| Some(*k) != latest.lock_holder.as_ref())
                .collect();
            if others.is_empty() {
                bail!("no standby");
            }
            Ok(others[rng.usize(..others.len())].clone())
        }
        name if replicas.contains_key(name) => Ok(name.to_owned()),
        name => named
            .get(name)
            .map(|n| n.target.clone())
            .ok_or_else(|| anyhow!("unknown target {name:?}")),
    }
}

#[allow(clippy::too_many_arguments)]
async fn do_step(
    step: &RawStep,
    t: Duration,
    samplers: &Samplers,
    nemesis: &Nemesis,
    replicas: &mut BTreeMap<String, ReplicaProcess>,
    named: &mut BTreeMap<String, Named>,
    timeline: &Timeline,
    rng: &mut fastrand::Rng,
) -> anyhow::Result<()> {
    let record = |r: &FaultRecord| {
        timeline.record_at(
            timeline.start() + r.end,
            What::Fault {
                verb: r.verb.clone(),
                target: r.target.clone(),
                lifted: r.lifted,
            },
        );
    };
    let now_ms = || timeline.offset(Instant::now()).as_secs_f64() * 1000.0;
    let step_began_ms = now_ms();
    if let Some(d) = &step.sleep {
        tokio::time::sleep(span(&Some(d.clone()), t, Duration::ZERO)).await;
        if let Some(n) = &step.name {
            let end_ms = now_ms();
            // A named sleep marks the moment it ended, for expectations measured from there.
            named.insert(
                n.get_ref().clone(),
                Named {
                    verb: "sleep".into(),
                    target: String::new(),
                    at_ms: end_ms,
                    // The moment is the sleep's end: nothing during it counts.
                    began_ms: end_ms,
                },
            );
        }
        return Ok(());
    }
    if let Some(w) = &step.wait_for {
        let limit = span(&step.within, t, 10 * t);
        // Only samples taken after the step began decide it: right after a fault, the latest
        // samples still show the state before it.
        let since = Instant::now();
        let running: Vec<String> = replicas
            .iter_mut()
            .filter_map(|(name, p)| p.is_running().then(|| name.clone()))
            .collect();
        let before = samplers.latest().lock_holder;
        let ok = match w.get_ref().as_str() {
            "new-leader" => {
                samplers
                    .wait_until(limit, |l| {
                        l.fresh_since(since)
                            && l.agreed_leader()
                                .is_some_and(|r| Some(&r) != before.as_ref())
                    })
                    .await
            }
            "leader" => {
                samplers
                    .wait_until(limit, |l| {
                        l.fresh_since(since) && l.agreed_leader().is_some()
                    })
                    .await
            }
            "no-leader" => {
                samplers
                    .wait_until(limit, |l| l.fresh_since(since) && l.lock_rows == 0)
                    .await
            }
            _ => {
                samplers
                    .wait_until(limit, |l| {
                        l.fresh_since(since)
                            && running
                                .iter()
                                .all(|r| l.ready.get(r).copied().flatten() == Some(200))
                    })
                    .await
            }
        };
        ok.ok_or_else(|| anyhow!("not reached within {limit:?}: {:?}", samplers.latest()))?;
        if let Some(n) = &step.name {
            let end_ms = now_ms();
            let target = samplers.latest().agreed_leader().unwrap_or_default();
            named.insert(
                n.get_ref().clone(),
                Named {
                    verb: "wait".into(),
                    target,
                    at_ms: end_ms,
                    // The moment is when the condition held: nothing during the wait counts.
                    began_ms: end_ms,
                },
            );
        }
        return Ok(());
    }
    if let Some(c) = &step.control {
        let target = resolve(
            step.target.as_ref().map_or("leader", |t| t.get_ref()),
            samplers,
            replicas,
            named,
            rng,
        )?;
        let body = serde_json::to_value(c)?;
        let (status, text) = replicas[&target].control(&body).await?;
        if status >= 300 {
            bail!("control {body} on {target}: HTTP {status}: {text}");
        }
        if let Some(n) = &step.name {
            named.insert(
                n.get_ref().clone(),
                Named {
                    verb: "control".into(),
                    target,
                    at_ms: now_ms(),
                    began_ms: step_began_ms,
                },
            );
        }
        return Ok(());
    }
    if let Some(sql) = &step.sql {
        let hold = span(&step.hold, t, Duration::ZERO);
        let client = nemesis.observer().session().await?;
        client.batch_execute("BEGIN").await?;
        tokio::time::timeout(t, client.batch_execute(sql.get_ref()))
            .await
            .map_err(|_| anyhow!("the statement did not complete within T: it waits on a lock"))?
            .context("the statement failed")?;
        if let Some(n) = &step.name {
            named.insert(
                n.get_ref().clone(),
                Named {
                    verb: "sql".into(),
                    target: "postgres".into(),
                    at_ms: now_ms(),
                    began_ms: step_began_ms,
                },
            );
        }
        // The transaction stays open while the next steps run; the commit (or the end of the
        // run, which closes the connection) ends it.
        tokio::spawn(async move {
            tokio::time::sleep(hold).await;
            if let Err(e) = client.batch_execute("COMMIT").await {
                tracing::warn!(error = %e, "sql step: commit failed");
            }
        });
        return Ok(());
    }
    if let Some(h) = &step.heal {
        let n = named
            .get(h.get_ref())
            .cloned()
            .ok_or_else(|| anyhow!("no fault named {:?}", h.get_ref()))?;
        let r = match n.verb.as_str() {
            "partition" | "stall" | "reset" => nemesis.heal(&n.target).await?,
            "latency" => nemesis.clear_latency(&n.target).await?,
            "disable" => nemesis.enable(&n.target).await?,
            "stop-server" => nemesis.start_server().await?,
            "freeze" => nemesis.thaw(replicas.get_mut(&n.target).context("replica")?)?,
            "kill" | "terminate" | "restart" => {
                nemesis
                    .restart(replicas.get_mut(&n.target).context("replica")?)
                    .await?
            }
            other => bail!("{other} has no inverse to heal"),
        };
        record(&r);
        return Ok(());
    }
    let Some(verb) = &step.fault else {
        bail!("empty step")
    };
    let verb = verb.get_ref().as_str();
    let target = match verb {
        "restart-server" | "stop-server" => "postgres".to_owned(),
        _ => resolve(
            step.target.as_ref().map_or("leader", |t| t.get_ref()),
            samplers,
            replicas,
            named,
            rng,
        )?,
    };
    let r = match verb {
        "partition" => nemesis.partition(&target).await?,
        "stall" => nemesis.stall(&target).await?,
        "reset" => nemesis.reset(&target).await?,
        "disable" => nemesis.disable(&target).await?,
        "latency" => {
            let d = span(&step.latency, t, Duration::ZERO);
            let j = span(&step.jitter, t, Duration::ZERO);
            nemesis.latency(&target, d, j).await?
        }
        "kill-backend" => {
            let rows = crate::observe::lock_rows(nemesis.observer()).await?;
            let pid = rows
                .iter()
                .find(|r| r.1 && r.2 == target)
                .map(|r| r.0)
                .ok_or_else(|| anyhow!("{target} holds no lock backend: {rows:?}"))?;
            let mut r = nemesis.kill_backend(pid).await?;
            r.target = target.clone();
            r
        }
        "restart-server" => nemesis.restart_server().await?,
        "stop-server" => nemesis.stop_server().await?,
        "kill" => nemesis.kill(replicas.get_mut(&target).context("replica")?)?,
        "freeze" => nemesis.freeze(replicas.get_mut(&target).context("replica")?)?,
        "terminate" => nemesis.terminate(replicas.get_mut(&target).context("replica")?)?,
        "restart" => {
            nemesis
                .restart(replicas.get_mut(&target).context("replica")?)
                .await?
        }
        other => bail!("unknown fault {other}"),
    };
    record(&r);
    if let Some(n) = &step.name {
        named.insert(
            n.get_ref().clone(),
            Named {
                verb: verb.to_owned(),
                target,
                at_ms: r.end_ms(),
                began_ms: r.start.as_secs_f64() * 1000.0,
            },
        );
    }
    Ok(())
}

/// The event kind of a replica event, as scenario files name it.
pub fn kind(e: &ReplicaEvent) -> &'static str {
    match e {
        ReplicaEvent::Started { .. } => "started",
        ReplicaEvent::Ready => "ready",
        ReplicaEvent::BootPass { .. } => "boot_pass",
        ReplicaEvent::CheckRefused => "check_refused",
        ReplicaEvent::CheckFailed { .. } => "check_failed",
        ReplicaEvent::Acquired { .. } => "acquired",
        ReplicaEvent::Demoted { .. } => "demoted",
        ReplicaEvent::Released { .. } => "released",
        ReplicaEvent::Abandoned { .. } => "abandoned",
        ReplicaEvent::Tick { .. } => "tick",
        ReplicaEvent::Worker { .. } => "worker",
        ReplicaEvent::Shutdown => "shutdown",
        ReplicaEvent::Unparsed { .. } => "unparsed",
    }
}

fn expectation(
    ex: &RawExpect,
    entries: &[Entry],
    rows: &[WorkRow],
    named: &BTreeMap<String, Named>,
    b: &Bounds,
    evidence: &Path,
) -> Check {
    let clause = ex.clause.get_ref().clone();
    let mut c = Check {
        name: String::new(),
        clauses: vec![clause],
        verdict: Verdict::Unknown,
        figures: Default::default(),
        message: String::new(),
    };
    let after = ex.after.as_ref().and_then(|a| named.get(a.get_ref()));
    // Delays are measured from the moment the named step took effect (a fault's call
    // returned); an effect that showed while the call still ran (e.g. a take-over during a
    // server restart) counts, with a delay of zero.
    let from_ms = after.map_or(0.0, |n| n.at_ms);
    let search_ms = after.map_or(0.0, |n| n.began_ms);
    let slack_ms = b.slack.as_secs_f64() * 1000.0;
    let within_ms = ex
        .within
        .as_ref()
        .and_then(|w| Span::parse(w.get_ref()).ok())
        .map(|s| s.at(b.t).as_secs_f64() * 1000.0);
    let not_before_ms = ex
        .not_before
        .as_ref()
        .and_then(|w| Span::parse(w.get_ref()).ok())
        .map(|s| s.at(b.t).as_secs_f64() * 1000.0);
    let who = ex
        .replica
        .as_ref()
        .map(|r| r.get_ref().clone())
        .unwrap_or_else(|| "any".into());
    let matches_who = |replica: &str| match who.as_str() {
        "any" => true,
        "other" => after.is_none_or(|n| n.target != replica),
        name => named
            .get(name)
            .map_or(name == replica, |n| n.target == replica),
    };
    if let Some(event) = &ex.event {
        let event = event.get_ref().as_str();
        let label_after = ex
            .after
            .as_ref()
            .map(|a| format!(" after {}", a.get_ref()))
            .unwrap_or_default();
        c.name = format!(
            "{}{event} by {who}{label_after}",
            if ex.absent { "no " } else { "" }
        );
        let found = if event == "lock_released" {
            let target = after.map(|n| n.target.clone());
            entries.iter().find(|e| {
                e.t_ms >= search_ms
                    && matches!(&e.what, What::Locks { rows } if !rows.iter().any(|r| r.1 && Some(&r.2) == target.as_ref()))
            })
        } else {
            entries.iter().find(|e| {
                e.t_ms >= search_ms && matches!(&e.what, What::Replica { replica, event: ev } if kind(ev) == event && matches_who(replica))
            })
        };
        let delay = found.map(|e| (e.t_ms - from_ms).max(0.0));
        if let Some(d) = delay {
            c.figures.insert(format!("{event} after"), in_t(d, b.t));
        }
        let in_window = |d: f64| within_ms.is_none_or(|w| d <= w + slack_ms);
        c.verdict = match (ex.absent, delay) {
            (true, Some(d)) if in_window(d) => Verdict::Invalid,
            (true, _) => Verdict::Valid,
            (false, None) => Verdict::Invalid,
            (false, Some(d)) => {
                let early = not_before_ms.is_some_and(|nb| d + slack_ms < nb);
                if in_window(d) && !early {
                    Verdict::Valid
                } else {
                    Verdict::Invalid
                }
            }
        };
        c.message = match delay {
            Some(d) => format!(
                "{event} {:.0} ms ({}) after{label_after}; bound {}{}",
                d,
                in_t(d, b.t),
                ex.within
                    .as_ref()
                    .map_or("none".into(), |w| w.get_ref().clone()),
                ex.not_before
                    .as_ref()
                    .map_or(String::new(), |w| format!(", not before {}", w.get_ref()))
            ),
            None => format!("no {event} by {who}{label_after}"),
        };
    } else if let Some(n) = ex.gauge_sum_reaches {
        c.name = format!("gauge sum reaches {n}");
        let max = entries
            .iter()
            .filter_map(|e| match &e.what {
                What::Gauges { values } => Some(values.values().flatten().sum::<i64>()),
                _ => None,
            })
            .max();
        c.figures
            .insert("max gauge sum".into(), format!("{}", max.unwrap_or(0)));
        c.verdict = match max {
            None => Verdict::Unknown,
            Some(m) if m >= n => Verdict::Valid,
            Some(_) => Verdict::Invalid,
        };
        c.message = format!("max gauge sum {max:?}");
    } else if let Some(n) = ex.lock_rows_at_most {
        c.name = format!("at most {n} granted lock row(s)");
        let max = entries
            .iter()
            .filter_map(|e| match &e.what {
                What::Locks { rows } => Some(rows.iter().filter(|r| r.1).count()),
                _ => None,
            })
            .max();
        c.figures
            .insert("max granted rows".into(), format!("{}", max.unwrap_or(0)));
        c.verdict = match max {
            None => Verdict::Unknown,
            Some(m) if m <= n => Verdict::Valid,
            Some(_) => Verdict::Invalid,
        };
        c.message = format!("max granted rows {max:?}");
    } else if let Some(n) = ex.work_rows {
        c.name = format!("{n} leader_work rows");
        c.figures.insert("rows".into(), rows.len().to_string());
        c.verdict = if rows.len() == n {
            Verdict::Valid
        } else {
            Verdict::Invalid
        };
        c.message = format!("{} rows", rows.len());
    } else if let Some(code) = ex.readyz {
        c.name = format!("/readyz of {who} answers {code}");
        let seen = entries.iter().find(|e| {
            e.t_ms >= search_ms
                && matches!(&e.what, What::Readiness { status, .. } if status.iter().any(|(r, s)| matches_who(r) && *s == Some(code)))
        });
        c.verdict = if seen.is_some() {
            Verdict::Valid
        } else {
            Verdict::Invalid
        };
        if let Some(e) = seen {
            c.figures.insert(
                format!("{code} after"),
                in_t((e.t_ms - from_ms).max(0.0), b.t),
            );
        }
        c.message = if seen.is_some() { "seen" } else { "never seen" }.to_owned();
    } else if let Some(text) = &ex.readyz_says {
        let text = text.get_ref();
        c.name = format!("/readyz of {who} reports {text:?}");
        let seen = entries.iter().find_map(|e| match &e.what {
            What::Readiness { failing, .. } if e.t_ms >= search_ms => failing
                .iter()
                .filter(|(r, _)| matches_who(r))
                .flat_map(|(_, checks)| checks)
                .find(|check| check.contains(text.as_str()))
                .map(|check| (e.t_ms, check.clone())),
            _ => None,
        });
        match seen {
            Some((t_ms, check)) => {
                c.verdict = Verdict::Valid;
                c.figures.insert(
                    "reported after".into(),
                    in_t((t_ms - from_ms).max(0.0), b.t),
                );
                c.message = format!("reported {check:?}");
            }
            None => {
                c.verdict = Verdict::Invalid;
                c.message = "never reported".into();
            }
        }
    } else if !ex.log.is_empty() {
        let texts: Vec<&str> = ex.log.iter().map(|l| l.get_ref().as_str()).collect();
        let replica = named.get(&who).map_or(who.clone(), |n| n.target.clone());
        c.name = format!("log of {who} has a line with {texts:?}");
        let file = evidence.join(format!("replica-{replica}.log"));
        match std::fs::read_to_string(&file) {
            Ok(log) => match log.lines().find(|l| texts.iter().all(|t| l.contains(t))) {
                Some(line) => {
                    c.verdict = Verdict::Valid;
                    c.message = format!("found: {}", line.trim());
                }
                None => {
                    c.verdict = Verdict::Invalid;
                    c.message = format!("no such line in {}", file.display());
                }
            },
            Err(e) => {
                c.verdict = Verdict::Invalid;
                c.message = format!("reading {}: {e}", file.display());
            }
        }
    }
    c
}

/// Where the scenario files are, by default: `scenarios/` at the workspace root.
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}
