//! The spec's loops, by their names, as supervised workers (spec: "Which loops run on the
//! leader"; LOOP-1..LOOP-6), and the boot passes.
//!
//! Each pass is cheap but real: a leader-only pass writes one `leader_work` row
//! `(loop_name, replica, term)` on a pooled connection and stops when its term ends; a gated step
//! of an every-replica loop writes a row named `<loop>:<step>` only when its gate allows it.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use elector::gate::Gate;
use elector::readiness::{panic_report, Probe, Readiness, TickOutcome};
use elector::supervisor::Supervisor;
use elector::ticker::LeaderTicker;
use elector::while_leader::run_while_leader;
use elector::{Elector, Term};
use futures::FutureExt as _;
use tokio::time::{interval_at, Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::control::{
    injected_crash, injected_failure, injected_panic, Control, LoopMode, Trigger,
};
use super::db::Database;
use super::events::Emitter;
use crate::event::{ReplicaEvent, TickKind};

pub(crate) use super::names::ELECTION_WORKER;
use super::names::{EVERY_REPLICA_LOOPS, TICKED_LOOPS, WHILE_LEADER_LOOPS};

/// The least time one pass's database work may take: a pass may take 2·T, and never less than
/// this (a small T in tests must not fail passes on a busy machine).
pub(crate) const PASS_DEADLINE_FLOOR: Duration = Duration::from_secs(2);

/// What every loop of a replica shares. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct LoopContext(Arc<Inner>);

#[derive(Debug)]
pub(crate) struct Inner {
    elector: Elector,
    db: Database,
    control: Arc<Control>,
    emitter: Emitter,
    /// The cadence of the ticked and every-replica loops and of a while-leader iteration.
    tick: Duration,
    /// How long one pass's database work may take.
    deadline: Duration,
    /// peers-relay-assigner's local readiness flag.
    relay_ready: AtomicBool,
}

impl std::ops::Deref for LoopContext {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl LoopContext {
    pub(crate) fn new(
        elector: Elector,
        db: Database,
        control: Arc<Control>,
        emitter: Emitter,
        tick: Duration,
    ) -> Self {
        let deadline = (elector.check_interval() * 2).max(PASS_DEADLINE_FLOOR);
        Self(Arc::new(Inner {
            elector,
            db,
            control,
            emitter,
            tick,
            deadline,
            relay_ready: AtomicBool::new(false),
        }))
    }

    /// Runs `run` until it ends, or until `/control` tells the worker `worker` to end its run:
    /// `crash` panics while `run` is still alive, so the panic unwinds through it (for the
    /// election: RUN-7's "abandoned after a panic"); `exit` drops `run` and returns.
    async fn crashable(
        &self,
        worker: &str,
        run: impl Future<Output = Result<(), String>>,
    ) -> Result<(), String> {
        let mut run = std::pin::pin!(run);
        let trigger = tokio::select! {
            r = &mut run => return r,
            trigger = self.control.triggered(worker) => trigger,
        };
        match trigger {
            Trigger::Crash => panic!("{}", injected_crash(worker)),
            Trigger::Exit => {
                tracing::warn!(worker, "control: the worker's run returns");
                Ok(())
            }
        }
    }

    /// The injected fault of `name`, if any: an error, or a panic.
    fn inject(&self, name: &str) -> Result<(), String> {
        match self.control.loop_mode(name) {
            LoopMode::Ok => Ok(()),
            LoopMode::Fail => Err(injected_failure(name)),
            LoopMode::Panic => panic!("{}", injected_panic(name)),
        }
    }

    /// Bounds one pass's database work by the pass deadline.
    async fn bounded<T>(&self, work: impl Future<Output = Result<T, String>>) -> Result<T, String> {
        tokio::time::timeout(self.deadline, work)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {:?}", self.deadline)))
    }

    /// A leader-only pass under `term`: one `leader_work` row; stops when the term ends.
    async fn leader_pass(&self, name: &str, term: Term) -> Result<(), String> {
        self.inject(name)?;
        let Some(number) = term.number() else {
            return Ok(());
        };
        tokio::select! {
            biased;
            () = term.cancelled() => Ok(()),
            r = self.bounded(self.db.record_work(name, number, term.fence())) => r,
        }
    }

    /// A ticked loop (LOOP-1): the leader-ticker launcher, each tick reported as an event.
    async fn run_ticker(
        &self,
        ticker: &LeaderTicker,
        shutdown: &CancellationToken,
    ) -> Result<(), String> {
        // The term the last pass ran in, for its tick event (0: none).
        let current = Arc::new(AtomicU64::new(0));
        let pass = {
            let (ctx, current, name) = (self.clone(), current.clone(), ticker.name().to_owned());
            move |term: Term| {
                let (ctx, current, name) = (ctx.clone(), current.clone(), name.clone());
                async move {
                    current.store(term.number().unwrap_or(0), Ordering::SeqCst);
                    ctx.leader_pass(&name, term).await
                }
            }
        };
        let on_tick = |outcome: &TickOutcome| {
            let term = Some(current.load(Ordering::SeqCst)).filter(|t| *t != 0);
            self.emit_tick(ticker.name(), outcome, term);
        };
        ticker.run(&self.elector, shutdown, pass, on_tick).await;
        Ok(())
    }

    fn emit_tick(&self, name: &str, outcome: &TickOutcome, term: Option<u64>) {
        let (outcome, error) = match outcome {
            TickOutcome::Standby => return,
            TickOutcome::Passed => (TickKind::Ok, None),
            TickOutcome::Failed(e) => (TickKind::Failed, Some(e.clone())),
            TickOutcome::Panicked(v) => (TickKind::Panicked, Some(v.clone())),
            TickOutcome::Lost => (TickKind::Lost, None),
        };
        self.emitter.emit(ReplicaEvent::Tick {
            loop_name: name.to_owned(),
            outcome,
            term,
            error,
        });
    }

    /// A while-leader loop's body for one term (LOOP-2): one `leader_work` row per tick until
    /// the term ends. An injected failure skips an iteration; an injected panic ends the worker.
    async fn while_leader_body(&self, name: &str, term: Term) {
        let Some(number) = term.number() else {
            return;
        };
        let mut ticks = interval_at(Instant::now() + self.tick, self.tick);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                biased;
                () = term.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let result = match self.inject(name) {
                Err(e) => Err(e),
                Ok(()) => tokio::select! {
                    biased;
                    () = term.cancelled() => return,
                    r = self.bounded(self.db.record_work(name, number, term.fence())) => r,
                },
            };
            if let Err(e) = result {
                tracing::warn!(r#loop = name, term = number, error = %e,
                    "background loop iteration failed: {e}");
            }
        }
    }

    /// A loop that stays on every replica (LOOP-3): a real sample every tick, and its gated
    /// step only when `gate` allows it.
    async fn every_replica(
        &self,
        name: &str,
        step: Option<(&str, Gate)>,
        shutdown: &CancellationToken,
    ) -> Result<(), String> {
        let mut ticks = interval_at(Instant::now() + self.tick, self.tick);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(()),
                _ = ticks.tick() => {}
            }
            let result = tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(()),
                r = self.every_replica_pass(name, step.as_ref()) => r,
            };
            if let Err(e) = result {
                tracing::warn!(r#loop = name, error = %e, "background loop pass failed: {e}");
            }
        }
    }

    async fn every_replica_pass(
        &self,
        name: &str,
        step: Option<&(&str, Gate)>,
    ) -> Result<(), String> {
        self.inject(name)?;
        if name == "peers-relay-assigner" {
            // It re-flips a local readiness flag and takes no write.
            self.relay_ready.store(true, Ordering::SeqCst);
            return Ok(());
        }
        self.bounded(self.db.sample(name)).await?;
        if let Some((step, gate)) = step {
            if gate.allows() {
                if let Some(term) = self.elector.current_term() {
                    let row = format!("{name}:{step}");
                    self.bounded(self.db.record_work(&row, term, None)).await?;
                }
            }
        }
        Ok(())
    }

    /// A boot pass (LOOP-6): ungated, on every replica, a real read; its outcome is what the
    /// loop's probe reports until the first tick (READY-1).
    async fn boot_pass(&self, probe: &Probe) {
        let name = probe.loop_name().to_owned();
        let run = async {
            self.inject(&name)?;
            self.bounded(self.db.sample(&name)).await.map(|_| ())
        };
        let (outcome, result) = match AssertUnwindSafe(run).catch_unwind().await {
            Ok(Ok(())) => (TickKind::Ok, Ok(())),
            Ok(Err(e)) => (TickKind::Failed, Err(e)),
            Err(payload) => {
                let value = elector::readiness::panic_value(payload.as_ref());
                tracing::error!(r#loop = %name, panic = %value, "background loop boot pass panicked");
                (TickKind::Panicked, Err(panic_report(&name, &value)))
            }
        };
        if let Err(e) = &result {
            tracing::warn!(r#loop = %name, error = %e, "background loop boot pass failed: {e}");
        }
        self.emitter.emit(ReplicaEvent::BootPass {
            loop_name: name,
            outcome,
            error: result.as_ref().err().cloned(),
        });
        probe.record_boot(result);
    }
}

/// The boot passes of the probed loops, run once before the replica reports ready.
#[derive(Debug)]
pub(crate) struct BootPasses {
    ctx: LoopContext,
    probes: Vec<Probe>,
}

impl BootPasses {
    /// Runs every boot pass, one after the other (each is one cheap statement on the warm
    /// pooled connection), and records each one on its probe.
    pub(crate) async fn run(self) {
        for probe in &self.probes {
            self.ctx.boot_pass(probe).await;
        }
    }
}

/// Registers the election and every loop as supervised workers by name (LOOP-5), adds the
/// seven probes to `readiness`, and returns the boot passes to run before ready.
///
/// # Errors
/// A ticker cannot be built (a tick of zero).
pub(crate) fn wire(
    ctx: &LoopContext,
    sup: &mut Supervisor,
    readiness: &Readiness,
) -> Result<BootPasses, elector::Error> {
    {
        let ctx = ctx.clone();
        sup.add(ELECTION_WORKER, move |shutdown: CancellationToken| {
            let ctx = ctx.clone();
            async move {
                let elector = ctx.elector.clone();
                let run = async move { elector.run(shutdown).await.map_err(|e| e.to_string()) };
                ctx.crashable(ELECTION_WORKER, run).await
            }
        });
    }

    let mut probes = Vec::new();
    for name in TICKED_LOOPS {
        let ticker = LeaderTicker::new(name, ctx.tick)?;
        if let Some(probe) = ticker.probe() {
            readiness.add(probe.clone());
            probes.push(probe.clone());
        }
        let ctx = ctx.clone();
        sup.add(name, move |shutdown: CancellationToken| {
            let (ctx, ticker) = (ctx.clone(), ticker.clone());
            async move {
                ctx.crashable(ticker.name(), ctx.run_ticker(&ticker, &shutdown))
                    .await
            }
        });
    }

    for name in WHILE_LEADER_LOOPS {
        let ctx = ctx.clone();
        sup.add(name, move |shutdown: CancellationToken| {
            let ctx = ctx.clone();
            async move {
                let run = async {
                    run_while_leader(&ctx.elector, name, &shutdown, |term| {
                        let ctx = ctx.clone();
                        async move { ctx.while_leader_body(name, term).await }
                    })
                    .await;
                    Ok(())
                };
                ctx.crashable(name, run).await
            }
        });
    }

    for (name, step) in EVERY_REPLICA_LOOPS {
        let ctx = ctx.clone();
        sup.add(name, move |shutdown: CancellationToken| {
            let ctx = ctx.clone();
            async move {
                let step = step.map(|s| (s, Gate::leader(&ctx.elector)));
                ctx.crashable(name, ctx.every_replica(name, step, &shutdown))
                    .await
            }
        });
    }

    Ok(BootPasses {
        ctx: ctx.clone(),
        probes,
    })
}
