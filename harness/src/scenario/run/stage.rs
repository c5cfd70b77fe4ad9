//! The system a scenario runs on: the topology, the replica processes, the fault injector and
//! the samplers, all writing to one timeline; started before the first step and stopped after
//! the last.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt as _;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::time::Instant;

use crate::check::WorkRow;
use crate::fault::Nemesis;
use crate::level::Level;
use crate::observe::wire::{WireReader, WireSummary};
use crate::observe::{read_server_clock, Samplers, Target};
use crate::replica::program::Program;
use crate::replica::{ReplicaProcess, ReplicaSpec};
use crate::report::evidence::Evidence;
use crate::scenario::model::{DbPath, Scenario};
use crate::timeline::{server_clock_readings, server_time_on_run_clock, Entry, Timeline, What};
use crate::topology::{Observer, Topology, TopologyConfig};

/// The running system of one scenario.
pub(super) struct Stage {
    pub(super) topology: Topology,
    pub(super) observer: Arc<Observer>,
    pub(super) replicas: BTreeMap<String, ReplicaProcess>,
    pub(super) nemesis: Nemesis,
    pub(super) samplers: Samplers,
    pub(super) timeline: Timeline,
    wire: WireReader,
    every: Duration,
}

/// Fails with [`ServerTooOld`](super::ServerTooOld) when a replica's program needs a newer
/// PostgreSQL than the server (`postgres_from`).
async fn server_new_enough(scenario: &Scenario, observer: &Observer) -> anyhow::Result<()> {
    let Some((replica, needs)) = scenario.postgres_from() else {
        return Ok(());
    };
    let rows = (observer.query(
        "SELECT current_setting('server_version_num')::int / 10000",
        &[],
    ))
    .await
    .context("reading the server's version")?;
    let server: i32 = (rows.first())
        .context("no answer to the server's version")?
        .try_get(0)?;
    let server = u32::try_from(server).unwrap_or_default();
    if server < needs {
        return Err(super::ServerTooOld {
            replica: replica.to_owned(),
            needs,
            server,
        }
        .into());
    }
    Ok(())
}

/// A free TCP port on loopback for a replica's HTTP server, so it keeps its URL across restarts.
/// Drawn at random below Linux's ephemeral range (32768 and up), where the kernel hands out
/// the ports of `bind(0)` and of outgoing connections: a port found free that way and released
/// again was taken by another run's replica before this one could bind it (a Python replica
/// then died with "Address already in use" while the other's `/metrics` answered for it).
fn free_port(taken: &mut BTreeSet<u16>) -> anyhow::Result<u16> {
    for _ in 0..100 {
        let port = fastrand::u16(20_000..32_000);
        // Free now, and not one an earlier replica of this run was given (nothing holds that
        // one until its replica binds it: a second draw of it would be free too).
        if !taken.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            taken.insert(port);
            return Ok(port);
        }
    }
    anyhow::bail!("no free port for a replica's HTTP server in 100 tries (20000-31999)")
}

impl Stage {
    /// Starts the topology `config` describes (with the PgBouncers and proxy ports the
    /// scenario's replicas need) and every replica of `scenario` (`program`), then
    /// the samplers.
    pub(super) async fn start(
        scenario: &Scenario,
        config: TopologyConfig,
        program: &Program,
        clock: (Duration, Duration),
        evidence: &Evidence,
    ) -> anyhow::Result<Stage> {
        let (t, tick) = clock;
        let paths = scenario
            .replicas
            .values()
            .filter_map(|d| d.path.replica_path());
        let config = config
            .for_paths(paths.collect::<Vec<_>>())
            .proxies(scenario.replicas.len());
        let topology = Topology::start(config)
            .await
            .context(crate::exit::Failure::Setup)?;
        let observer = Arc::new(Observer::new(&topology));
        server_new_enough(scenario, &observer).await?;
        let (specs, targets) = specs(scenario, &topology, t, tick, evidence).await?;
        // The run's clock starts as the replicas start; DB times are mapped onto it.
        let run_start = Instant::now();
        let timeline = Timeline::starting_at(run_start);
        read_server_clock(&observer, &timeline, None).await?;
        let programs = scenario.programs(program)?;
        // Observed from the first moment: a replica that boots fast leads and writes before
        // a slower one has started (its gauge unreachable till then).
        let every = (t / 10).max(Duration::from_millis(10));
        let http = scenario.observes(program).level >= Level::Metrics;
        let samplers = Samplers::start(&timeline, observer.clone(), targets, (every, t / 2), http);
        let proxied = (scenario.replicas.iter())
            .filter(|(_, d)| d.path.replica_path().is_some())
            .map(|(name, _)| name.clone())
            .collect();
        let wire = WireReader::start(&timeline, topology.toxiproxy().clone(), proxied, t / 2);
        let replicas = spawn(scenario, &programs, specs, t).await?;
        Ok(Stage {
            nemesis: Nemesis::new(&topology, run_start),
            topology,
            observer,
            replicas,
            samplers,
            timeline,
            wire,
            every,
        })
    }

    /// The wire read fast until the guard is dropped (a barrier on a wire event).
    pub(super) fn hurry_wire(&self) -> crate::observe::wire::Hurry {
        self.wire.hurry()
    }

    /// Waits until each of `names` has asked for the lock on the wire, within `limit`
    /// ([`super::barrier::first_asks`]); the replicas that had not.
    pub(super) async fn first_asks(&self, names: &[String], limit: Duration) -> Vec<String> {
        let _fast = self.wire.hurry();
        let untapped = || self.wire.untapped();
        super::barrier::first_asks(&self.timeline, names, limit, untapped).await
    }

    /// How often the gauges and pg_locks are sampled.
    pub(super) fn sample_every(&self) -> Duration {
        self.every
    }

    /// Stops sampling, stops the replicas (standbys first, so none takes over from a leader
    /// that shuts down), reads the rest of their wire, puts their events on the timeline,
    /// reads `leader_work`, and shuts the topology down. Returns the whole timeline, the rows
    /// and what the wire reading came to.
    pub(super) async fn stop(mut self) -> (Vec<Entry>, Option<Vec<WorkRow>>, WireSummary) {
        // The leader by pg_locks, else by its gauge (a program whose lock the spec's query
        // does not show): stopped last, so that no standby takes over while they stop.
        let latest = self.samplers.latest();
        let by_gauge = (latest.gauges.iter())
            .find(|(_, v)| **v == Some(1))
            .map(|(k, _)| k.clone());
        let leader = latest.lock_holder.or(by_gauge);
        self.samplers.stop().await;
        let mut order: Vec<String> = (self.replicas.keys())
            .filter(|k| Some(*k) != leader.as_ref())
            .cloned()
            .collect();
        order.extend(leader.filter(|l| self.replicas.contains_key(l)));
        for name in order {
            let p = self.replicas.get_mut(&name).expect("known replica");
            stop_replica(p).await;
        }
        let wire = self.wire.stop().await;
        for p in self.replicas.values() {
            let replica = || p.name().to_owned();
            for ev in p.history() {
                let event = ev.line.event.clone();
                (self.timeline).record_at(
                    ev.at,
                    What::Replica {
                        replica: replica(),
                        event,
                    },
                );
            }
            for (at, line) in p.log_lines() {
                (self.timeline).record_at(
                    at,
                    What::Log {
                        replica: replica(),
                        line,
                    },
                );
            }
            for at in p.spawns() {
                (self.timeline).record_at(at, What::Spawned { replica: replica() });
            }
            for exit in p.exits() {
                let (code, signal) = (exit.status).map_or((None, None), |s| (s.code(), s.signal()));
                let what = What::Exited {
                    replica: replica(),
                    code,
                    signal,
                };
                self.timeline.record_at(exit.at, what);
            }
        }
        let entries = self.timeline.entries();
        let rows = work_rows(&self.observer, &entries).await;
        self.topology.retire().await;
        (entries, rows, wire)
    }
}

/// SIGTERM (after SIGCONT, in case it is frozen), then SIGKILL if it is not gone in 5 s.
async fn stop_replica(p: &mut ReplicaProcess) {
    if !p.is_running() {
        return;
    }
    let _ = p.sigcont();
    let _ = p.sigterm();
    let exited = p.wait_timeout(Duration::from_secs(5)).await;
    if exited.ok().flatten().is_none() {
        let _ = p.sigkill();
    }
}

/// Each replica's spec (its proxy made first) and its address for the samplers.
async fn specs(
    scenario: &Scenario,
    topology: &Topology,
    t: Duration,
    tick: Duration,
    evidence: &Evidence,
) -> anyhow::Result<(Vec<ReplicaSpec>, Vec<Target>)> {
    let (mut specs, mut targets, mut taken) = (Vec::new(), Vec::new(), BTreeSet::new());
    for (name, decl) in &scenario.replicas {
        let port = free_port(&mut taken)?;
        let mut spec = ReplicaSpec::new(name, scenario.told_interval(t));
        spec.tick = Some(tick);
        spec.http = Some(format!("127.0.0.1:{port}"));
        spec.extra_args = decl.args.clone();
        spec.no_shared_session_guard = decl.guard == Some(false);
        spec.wake = decl.wake;
        spec.fence = decl.fence;
        spec.verify_lock = decl.verify;
        spec.pool_max_lifetime = decl.pool_max_lifetime.map(|l| l.at(t));
        spec.stderr_log = Some(evidence.replica_log(name));
        if let Some(path) = DbPath::replica_path(decl.path) {
            spec.dsn = Some(topology.add_proxy(name, path).await?.dsn());
        }
        targets.push(Target {
            name: name.clone(),
            base_url: format!("http://127.0.0.1:{port}"),
        });
        specs.push(spec);
    }
    Ok((specs, targets))
}

/// Starts every replica without a `start_after` at once, each with its program, and once
/// they are all ready (started as their levels show it) each other one its `start_after`
/// later: a barrier, so that a slow boot of the first ones cannot put the later ones in step
/// with them.
async fn spawn(
    scenario: &Scenario,
    programs: &BTreeMap<String, Program>,
    specs: Vec<ReplicaSpec>,
    t: Duration,
) -> anyhow::Result<BTreeMap<String, ReplicaProcess>> {
    let (later, first): (Vec<_>, Vec<_>) = (specs.into_iter())
        .map(|s| (scenario.replicas[&s.name].start_after.map(|a| a.at(t)), s))
        .partition(|(after, _)| after.is_some());
    let mut replicas = BTreeMap::new();
    // The first group, then (once it is all ready) the later one, each replica its wait late.
    for group in [first, later] {
        let starting = group.into_iter().map(|(after, s)| {
            let program = programs[&s.name].clone();
            async move {
                tokio::time::sleep(after.unwrap_or_default()).await;
                ReplicaProcess::spawn_program(program, s).await
            }
        });
        for p in futures::future::join_all(starting).await {
            let p = p.context("starting a replica")?;
            replicas.insert(p.name().to_owned(), p);
        }
    }
    Ok(replicas)
}

/// The `leader_work` rows, on the run's clock by the server's clock readings in `entries`
/// ([`server_time_on_run_clock`]); `None` when the table cannot be read.
async fn work_rows(observer: &Observer, entries: &[Entry]) -> Option<Vec<WorkRow>> {
    let sql = "SELECT loop_name, replica, term, (extract(epoch FROM at) * 1000)::float8, fence \
               FROM leader_work ORDER BY id";
    let rows = observer.query(sql, &[]).await.ok()?;
    let readings = server_clock_readings(entries);
    let rows = rows
        .iter()
        .filter_map(|r| {
            Some(WorkRow {
                loop_name: r.get(0),
                replica: r.get(1),
                term: r.get(2),
                t_ms: server_time_on_run_clock(&readings, r.get::<_, f64>(3))?,
                fence: r.get(4),
            })
        })
        .collect();
    Some(rows)
}
