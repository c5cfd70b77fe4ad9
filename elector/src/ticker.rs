//! The leader-ticker launcher (spec: `runLeaderTicker`; LOOP-1, DO-4, READY-2..READY-4).
//!
//! Ticks a pass on a fixed cadence and asks [`Elector::do_work`] before each tick, so passes
//! run only on the leader. A pass that fails or panics is a failed tick; the loop keeps ticking.

use std::fmt::Display;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::{interval_at, Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::readiness::{Probe, TickOutcome};
use crate::{panic, Done, Elector, Error, Term};

/// A loop ticked on the leader: its name, its cadence and its optional readiness probe.
#[derive(Clone, Debug)]
pub struct LeaderTicker {
    name: String,
    period: Duration,
    probe: Option<Probe>,
}

impl LeaderTicker {
    /// A ticker for `name` every `period`, with the probe the spec gives that loop (READY-5).
    ///
    /// # Errors
    /// [`Error::InvalidTickerPeriod`] when `period` is zero (a ticker cannot tick without a
    /// cadence; such a value comes from configuration).
    pub fn new(name: &str, period: Duration) -> Result<Self, Error> {
        if period.is_zero() {
            return Err(Error::InvalidTickerPeriod {
                ticker: name.to_owned(),
            });
        }
        Ok(Self {
            name: name.to_owned(),
            period,
            probe: Probe::for_loop(name),
        })
    }

    /// The loop's name (also its worker's name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cadence; the first tick comes one period after the start. Never zero.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The loop's readiness probe, if it carries one.
    pub fn probe(&self) -> Option<&Probe> {
        self.probe.as_ref()
    }

    /// Ticks `pass` until `shutdown` is cancelled. `on_tick` sees every tick's outcome (for
    /// metrics or an event stream).
    ///
    /// Each tick: a standby runs nothing; the leader runs `pass` with the term (DO-2); a pass
    /// whose term was lost is not a failure (DO-4); an `Err` is logged at WARN as
    /// `background loop tick failed`; a panic is logged at ERROR as
    /// `background loop tick panicked` with the `loop`, `panic` and `stack` fields (written as
    /// soon as the stack's symbols are resolved, on a blocking thread), then at WARN
    /// as a failed tick (READY-4). Cancellation-safe.
    pub async fn run<F, Fut, E>(
        &self,
        elector: &Elector,
        shutdown: &CancellationToken,
        mut pass: F,
        mut on_tick: impl FnMut(&TickOutcome),
    ) where
        F: FnMut(Term) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: Display,
    {
        let mut ticks = interval_at(Instant::now() + self.period, self.period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let outcome = self.tick(elector, shutdown, &mut pass).await;
            if let Some(probe) = &self.probe {
                probe.record_tick(&outcome);
            }
            on_tick(&outcome);
        }
    }

    /// One tick: asks `do_work`, catches a panic, logs a failure.
    pub async fn tick<F, Fut, E>(
        &self,
        elector: &Elector,
        shutdown: &CancellationToken,
        pass: &mut F,
    ) -> TickOutcome
    where
        F: FnMut(Term) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: Display,
    {
        panic::install_hook();
        let name = self.name.as_str();
        let done = AssertUnwindSafe(panic::with_own_stack(elector.do_work(shutdown, pass)))
            .catch_unwind()
            .await;
        let outcome = match done {
            Ok(Done::Standby) => TickOutcome::Standby,
            Ok(Done::Lost) => TickOutcome::Lost,
            Ok(Done::Ran(Ok(()))) => TickOutcome::Passed,
            Ok(Done::Ran(Err(e))) => TickOutcome::Failed(e.to_string()),
            Err(payload) => {
                let value = panic::message(payload.as_ref());
                let (name, panic) = (name.to_owned(), value.clone());
                panic::log_resolved(panic::take_stack(), move |stack| {
                    tracing::error!(r#loop = name, panic = %panic, stack = %stack,
                        "background loop tick panicked");
                });
                TickOutcome::Panicked(value)
            }
        };
        match &outcome {
            TickOutcome::Failed(e) => {
                tracing::warn!(r#loop = name, error = %e, "background loop tick failed: {e}");
            }
            TickOutcome::Panicked(v) => {
                tracing::warn!(r#loop = name, error = %v,
                    "background loop tick failed: tick panicked: {v}");
            }
            TickOutcome::Passed => tracing::debug!(r#loop = name, "background loop tick passed"),
            TickOutcome::Standby | TickOutcome::Lost => {}
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readiness::Check;

    /// LOOP-2 (review: a zero period, which can come from configuration, panicked in
    /// `interval_at` on every start): a ticker with a zero period is refused when it is built,
    /// with an error that names the ticker; any other period builds.
    #[test]
    fn a_zero_period_is_refused_when_the_ticker_is_built() {
        let refused = LeaderTicker::new("invitations-expire", Duration::ZERO).unwrap_err();
        assert!(
            matches!(&refused, Error::InvalidTickerPeriod { ticker } if ticker == "invitations-expire")
        );
        assert_eq!(
            refused.to_string(),
            "ticker \"invitations-expire\": a period of zero cannot tick"
        );
        let ticker = LeaderTicker::new("invitations-expire", Duration::from_nanos(1)).unwrap();
        assert_eq!(
            (ticker.name(), ticker.period()),
            ("invitations-expire", Duration::from_nanos(1))
        );
        assert_eq!(
            ticker.probe().map(|p| p.name().to_owned()).as_deref(),
            Some("invitations-expire")
        );
    }
}
