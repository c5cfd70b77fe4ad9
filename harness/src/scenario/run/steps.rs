//! The step interpreter: carries a scenario's steps out on its stage, one after another, and
//! keeps the moments they name (`as`) for later steps and for the checks.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use tokio::time::Instant;

use super::stage::Stage;
use crate::event::TermChange;
use crate::fault::{Delay, FaultRecord, Verb, SERVER};
use crate::level::Level;
use crate::observe::Latest;
use crate::replica::ReplicaProcess;
use crate::scenario::model::{Control, Latency, Span, Step, Target, WaitFor};
use crate::timeline::{Mark, Marks, What};

/// Plays steps on a stage (which it owns until [`into_parts`](Player::into_parts)).
pub(super) struct Player {
    pub(super) stage: Stage,
    t: Duration,
    rng: fastrand::Rng,
    marks: Marks,
    /// The faults named so far: their verb and the replica (or server) they hit.
    faults: BTreeMap<String, (Verb, String)>,
}

impl Player {
    /// A player at check interval `t` whose random choices follow `seed`.
    pub(super) fn new(stage: Stage, t: Duration, seed: u64) -> Self {
        Self {
            stage,
            t,
            rng: fastrand::Rng::with_seed(seed),
            marks: Marks::new(),
            faults: BTreeMap::new(),
        }
    }

    /// The stage back, and the moments the steps named.
    pub(super) fn into_parts(self) -> (Stage, Marks) {
        (self.stage, self.marks)
    }

    /// Plays `steps` in order, each labelled on the timeline as it begins, until one fails;
    /// returns what failed (nothing when every step was carried out).
    pub(super) async fn play(&mut self, steps: &[Step]) -> Vec<String> {
        for (i, step) in steps.iter().enumerate() {
            if let Err(e) = self.play_one(i + 1, step).await {
                return vec![format!("step {} ({}): {e:#}", i + 1, step.label())];
            }
        }
        Vec::new()
    }

    /// Plays `step` as step number `number`, labelled on the timeline as it begins.
    ///
    /// # Errors
    /// The step could not be carried out (a wait that timed out, a fault that failed).
    pub(super) async fn play_one(&mut self, number: usize, step: &Step) -> anyhow::Result<()> {
        self.stage.timeline.record(What::Step {
            label: format!("{number}: {}", step.label()),
            acts: step.acts(),
        });
        self.step(step).await
    }

    pub(super) fn now_ms(&self) -> f64 {
        let timeline = &self.stage.timeline;
        timeline.offset(Instant::now()).as_secs_f64() * 1000.0
    }

    async fn step(&mut self, step: &Step) -> anyhow::Result<()> {
        let began_ms = self.now_ms();
        let mark = match step {
            Step::Sleep { span, .. } => self.sleep(*span).await,
            Step::WaitFor { until, within, .. } => self.wait_for(*until, *within).await?,
            Step::Fault {
                verb,
                target,
                latency,
                name,
            } => self.fault(*verb, target, *latency, name).await?,
            Step::Heal { fault, .. } => self.heal(fault, began_ms).await?,
            Step::Control {
                command, target, ..
            } => self.control(command, target, began_ms).await?,
            Step::Sql { sql, hold, .. } => self.sql(sql, *hold, began_ms).await?,
        };
        if let Some(name) = step.name() {
            self.marks.insert(name.to_owned(), mark);
        }
        Ok(())
    }

    /// A moment with no duration: it took effect as it began.
    fn instant(&self, target: String) -> Mark {
        let at_ms = self.now_ms();
        Mark {
            target,
            at_ms,
            began_ms: at_ms,
        }
    }

    /// A named sleep marks the moment it ended: nothing during it counts.
    async fn sleep(&mut self, span: Span) -> Mark {
        tokio::time::sleep(span.at(self.t)).await;
        self.instant(String::new())
    }

    /// Waits until `until` holds on samples taken after the step began (right after a fault,
    /// the latest samples still show the state before it). A named wait marks the moment the
    /// condition held, and the leader then.
    async fn wait_for(&mut self, until: WaitFor, within: Option<Span>) -> anyhow::Result<Mark> {
        let limit = within.map_or(10 * self.t, |s| s.at(self.t));
        if until == WaitFor::LeaderCheck {
            return self.leader_check(limit).await;
        }
        let since = Instant::now();
        let running: Vec<String> = (self.stage.replicas.iter_mut())
            .filter_map(|(name, p)| p.is_running().then(|| name.clone()))
            .collect();
        let samplers = &self.stage.samplers;
        let before = samplers.latest().lock_holder;
        let held = samplers
            .wait_until(limit, |l| {
                l.fresh_since(since) && holds(until, l, before.as_ref(), &running)
            })
            .await;
        held.ok_or_else(|| anyhow!("not reached within {limit:?}: {:?}", samplers.latest()))?;
        let leader = samplers.latest().agreed_leader();
        self.streams_catch_up(until, leader.as_deref()).await;
        Ok(self.instant(leader.unwrap_or_default()))
    }

    /// Waits for the leader's next check answered on the wire ([`super::barrier`]); the mark
    /// is the answer's moment, and the leader.
    async fn leader_check(&mut self, limit: Duration) -> anyhow::Result<Mark> {
        let leader = (self.stage.samplers.latest().lock_holder)
            .ok_or_else(|| anyhow!("no replica holds the lock: no leader's check to wait for"))?;
        let since_ms = self.now_ms();
        let _fast = self.stage.hurry_wire();
        let answered_ms =
            super::barrier::next_answer(&self.stage.timeline, &leader, since_ms, limit).await?;
        Ok(Mark {
            target: leader,
            at_ms: answered_ms,
            began_ms: answered_ms,
        })
    }

    /// Once the samples show a wait's condition, gives the event streams of the replicas that
    /// report events up to T to show it too: the gauge can read 1 before the harness has read
    /// the replica's `acquired` line from its stdout (a loaded CI host did so), and the next
    /// step must not begin before the event it waited on is on the timeline. Nothing is judged
    /// here: a stream that never agrees leaves the checks to say so.
    async fn streams_catch_up(&self, until: WaitFor, leader: Option<&str>) {
        let agree = |replicas: &BTreeMap<String, ReplicaProcess>| match until {
            WaitFor::Leader | WaitFor::NewLeader => (leader.and_then(|l| replicas.get(l)))
                .is_none_or(|p| !reports_events(p) || says_it_leads(p)),
            WaitFor::NoLeader => {
                (replicas.values()).all(|p| !reports_events(p) || !says_it_leads(p))
            }
            WaitFor::Ready | WaitFor::AllReady | WaitFor::LeaderCheck => true,
        };
        let deadline = Instant::now() + self.t;
        while !agree(&self.stage.replicas) && Instant::now() < deadline {
            tokio::time::sleep(self.t / 40).await;
        }
    }

    /// Applies `verb` to its target; the mark is the fault's, from the call to its return.
    async fn fault(
        &mut self,
        verb: Verb,
        target: &Target,
        latency: Option<Latency>,
        name: &Option<String>,
    ) -> anyhow::Result<Mark> {
        let target = self.resolve(target)?;
        let delay = latency.map_or_else(Delay::default, |l| Delay {
            latency: l.delay.at(self.t),
            jitter: l.jitter.map_or(Duration::ZERO, |j| j.at(self.t)),
        });
        let stage = &mut self.stage;
        let r = (stage.nemesis)
            .apply(verb, &target, delay, &mut stage.replicas)
            .await?;
        self.record(&r);
        if let Some(name) = name {
            self.faults.insert(name.clone(), (verb, target.clone()));
        }
        Ok(Mark {
            target,
            at_ms: r.end_ms(),
            began_ms: r.start_ms(),
        })
    }

    /// Lifts the fault named `fault` with its verb's inverse.
    async fn heal(&mut self, fault: &str, began_ms: f64) -> anyhow::Result<Mark> {
        let (verb, target) = (self.faults.get(fault).cloned())
            .ok_or_else(|| anyhow!("no fault named {fault:?} was applied"))?;
        let stage = &mut self.stage;
        let records = (stage.nemesis)
            .lift(verb, &target, &mut stage.replicas)
            .await?;
        records.iter().for_each(|r| self.record(r));
        let at_ms = records
            .last()
            .map_or_else(|| self.now_ms(), FaultRecord::end_ms);
        Ok(Mark {
            target,
            at_ms,
            began_ms,
        })
    }

    async fn control(
        &mut self,
        command: &Control,
        target: &Target,
        began_ms: f64,
    ) -> anyhow::Result<Mark> {
        let target = self.resolve(target)?;
        let replica =
            (self.stage.replicas.get(&target)).with_context(|| format!("no replica {target:?}"))?;
        match command {
            Control::Loop { name, mode } => replica.set_loop_mode(name, *mode).await,
            Control::Worker { name, mode } => replica.set_worker_mode(name, *mode).await,
        }
        .with_context(|| format!("control {} on {target}", command.json()))?;
        self.stage.timeline.record(What::Control {
            replica: target.clone(),
            switch: command.clone(),
        });
        Ok(Mark {
            target,
            at_ms: self.now_ms(),
            began_ms,
        })
    }

    /// Runs `sql` in a transaction that must get through the statements within T; it stays
    /// open for `hold` while the next steps run (the commit, or the end of the run, which
    /// closes the connection, ends it).
    async fn sql(&mut self, sql: &str, hold: Option<Span>, began_ms: f64) -> anyhow::Result<Mark> {
        let hold = hold.map_or(Duration::ZERO, |h| h.at(self.t));
        let client = self.stage.nemesis.observer().session().await?;
        client.batch_execute("BEGIN").await?;
        tokio::time::timeout(self.t, client.batch_execute(sql))
            .await
            .map_err(|_| anyhow!("the statement did not complete within T: it waits on a lock"))?
            .context("the statement failed")?;
        let at_ms = self.now_ms();
        tokio::spawn(async move {
            tokio::time::sleep(hold).await;
            if let Err(e) = client.batch_execute("COMMIT").await {
                tracing::warn!(error = %e, "sql step: commit failed");
            }
        });
        Ok(Mark {
            target: SERVER.into(),
            at_ms,
            began_ms,
        })
    }

    /// Puts a fault record on the timeline where it belongs ([`FaultRecord::marks`]).
    fn record(&self, r: &FaultRecord) {
        let timeline = &self.stage.timeline;
        for (at, lifted) in r.marks() {
            timeline.record_at(
                timeline.start() + at,
                What::Fault {
                    verb: r.verb,
                    target: r.target.clone(),
                    lifted,
                },
            );
        }
    }

    /// The replica a target names now: the leader by pg_locks, a running standby chosen with the
    /// seed, a replica, or the target of an earlier named step; the server for the server verbs.
    fn resolve(&mut self, target: &Target) -> anyhow::Result<String> {
        let latest = self.stage.samplers.latest();
        let replicas = &mut self.stage.replicas;
        match target {
            Target::Leader => (latest.lock_holder.clone())
                .filter(|h| replicas.contains_key(h))
                .ok_or_else(|| {
                    anyhow!("no replica leads now (pg_locks: {:?})", latest.lock_holder)
                }),
            Target::Standby => {
                // A replica whose process is gone (killed, terminated) is no standby.
                let others: Vec<String> = (replicas.iter_mut())
                    .filter(|(k, _)| Some(*k) != latest.lock_holder.as_ref())
                    .filter_map(|(k, p)| p.is_running().then(|| k.clone()))
                    .collect();
                if others.is_empty() {
                    bail!("no standby");
                }
                Ok(others[self.rng.usize(..others.len())].clone())
            }
            Target::Replica(name) => Ok(name.clone()),
            Target::Named(name) => (self.marks.get(name).map(|m| m.target.clone()))
                .ok_or_else(|| anyhow!("unknown target {name:?}")),
            Target::Server => Ok(SERVER.into()),
        }
    }
}

/// Whether the replica's program reports its events (contract level 3).
fn reports_events(p: &ReplicaProcess) -> bool {
    p.program().level() >= Level::Events
}

/// Whether the replica runs and its events, as read so far, say it leads: its last term event
/// since it last started is an acquisition.
fn says_it_leads(p: &ReplicaProcess) -> bool {
    p.is_running()
        && (p.history().iter().rev()).find_map(|e| e.event().term_change())
            == Some(TermChange::Begins)
}

/// Whether `until` holds on the latest samples; `before` led when the wait began, `running`
/// are the replicas that ran then.
fn holds(until: WaitFor, l: &Latest, before: Option<&String>, running: &[String]) -> bool {
    match until {
        WaitFor::Leader => l.agreed_leader().is_some(),
        WaitFor::NewLeader => l.agreed_leader().is_some_and(|r| Some(&r) != before),
        WaitFor::NoLeader => l.lock_rows == 0,
        WaitFor::Ready | WaitFor::AllReady => running
            .iter()
            .all(|r| l.ready.get(r).copied().flatten() == Some(200)),
        WaitFor::LeaderCheck => false,
    }
}
