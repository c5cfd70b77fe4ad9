//! The wire sampler: reads each replica's proxy journal (what the replica said to the database
//! and was told, [`wiretap`]) onto the timeline as [`What::Wire`] entries, each at the moment
//! the proxy read it, put on the run's clock (both are `CLOCK_MONOTONIC`).
//!
//! It reads every `every` while the run goes on and once more when stopped, after the replicas
//! have stopped, so that a shutdown's unlock and close are on the timeline too.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use wiretap::{monotonic_us, Cost, Page, PAGE_LIMIT};

use crate::timeline::{Timeline, What};
use crate::topology::Toxiproxy;

/// What the reading of the journals came to (the evidence folder's `wire.json`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WireSummary {
    /// Whether the proxies have a journal (the workspace's server; upstream Toxiproxy has
    /// none): without it, nothing the clauses decided from the wire can be judged.
    pub tapped: bool,
    /// Records read, over every proxy.
    pub records: u64,
    /// Records the proxies dropped unread (a reader too slow): what they said is not all
    /// there.
    pub dropped: u64,
    /// What decoding cost the proxy server per message (its figures, the latest read).
    pub cost: Cost,
    /// The first error reading a journal, if any.
    pub error: Option<String>,
}

/// How often the journals are read while a [`Hurry`] is held: a step that waits on the wire
/// sees what passed the proxy this soon after (small against any T the harness runs at).
pub const HURRIED: Duration = Duration::from_millis(2);

/// A running reader of the journals; stop it with [`WireReader::stop`] (dropped, it stops
/// reading at once).
pub struct WireReader {
    token: CancellationToken,
    task: Option<JoinHandle<WireSummary>>,
    pace: Pace,
}

/// How many [`Hurry`] guards are held, and the reader's wake-up when the first is taken; and
/// whether the reader found the proxies without a journal (it stops then).
#[derive(Clone, Default)]
struct Pace {
    hurried: Arc<AtomicUsize>,
    woken: Arc<Notify>,
    untapped: Arc<AtomicBool>,
}

/// While held, the reader reads every [`HURRIED`] instead of its own period (a barrier on a
/// wire event: [`WireReader::hurry`]).
pub struct Hurry(Pace);

impl Drop for Hurry {
    fn drop(&mut self) {
        self.0.hurried.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for WireReader {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

impl std::fmt::Debug for WireReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireReader").finish_non_exhaustive()
    }
}

impl WireReader {
    /// Starts reading the journals of `proxies` (each named for its replica) every `every`.
    pub fn start(
        timeline: &Timeline,
        toxiproxy: Toxiproxy,
        proxies: Vec<String>,
        every: Duration,
    ) -> WireReader {
        let token = CancellationToken::new();
        let reader = Reader {
            timeline: timeline.clone(),
            toxiproxy,
            after: proxies.into_iter().map(|p| (p, 0)).collect(),
            start_us: start_on_monotonic(timeline.start()),
            summary: WireSummary {
                tapped: true,
                ..WireSummary::default()
            },
        };
        let pace = Pace::default();
        let task = Some(tokio::spawn(reader.run(token.clone(), every, pace.clone())));
        WireReader { token, task, pace }
    }

    /// Reads every [`HURRIED`] until the guard is dropped, from now on (the reader is woken).
    pub fn hurry(&self) -> Hurry {
        self.pace.hurried.fetch_add(1, Ordering::SeqCst);
        self.pace.woken.notify_one();
        Hurry(self.pace.clone())
    }

    /// Whether the proxies turned out to keep no journal (upstream Toxiproxy): nothing of the
    /// wire will reach the timeline.
    pub fn untapped(&self) -> bool {
        self.pace.untapped.load(Ordering::SeqCst)
    }

    /// Reads what is left and stops.
    pub async fn stop(mut self) -> WireSummary {
        self.token.cancel();
        let Some(task) = self.task.take() else {
            return WireSummary::default();
        };
        task.await.unwrap_or_else(|e| WireSummary {
            error: Some(format!("the wire reader failed: {e}")),
            ..WireSummary::default()
        })
    }
}

/// `start` (an `Instant`, which is `CLOCK_MONOTONIC`) in microseconds of that clock.
fn start_on_monotonic(start: Instant) -> u64 {
    let since = Instant::now().saturating_duration_since(start);
    monotonic_us().saturating_sub(since.as_micros() as u64)
}

struct Reader {
    timeline: Timeline,
    toxiproxy: Toxiproxy,
    /// Each proxy and the last record read from it.
    after: Vec<(String, u64)>,
    start_us: u64,
    summary: WireSummary,
}

impl Reader {
    async fn run(mut self, token: CancellationToken, every: Duration, pace: Pace) -> WireSummary {
        loop {
            if !self.read_all().await {
                pace.untapped.store(true, Ordering::SeqCst);
                return self.summary;
            }
            let period = match pace.hurried.load(Ordering::SeqCst) {
                0 => every,
                _ => HURRIED,
            };
            tokio::select! {
                () = token.cancelled() => break,
                () = tokio::time::sleep(period) => {}
                () = pace.woken.notified() => {}
            }
        }
        // The replicas have stopped; their proxies read the last bytes and the closes within
        // moments of the exits.
        tokio::time::sleep(every.min(Duration::from_millis(100))).await;
        self.read_all().await;
        self.summary
    }

    /// Reads every journal to its end; false when the server has none.
    async fn read_all(&mut self) -> bool {
        for i in 0..self.after.len() {
            loop {
                let (name, after) = &self.after[i];
                let page = match self.toxiproxy.journal(name, *after).await {
                    Ok(Some(page)) => page,
                    Ok(None) => {
                        self.summary.tapped = false;
                        return false;
                    }
                    Err(e) => {
                        let e = format!("{e:#}");
                        self.summary.error.get_or_insert(e);
                        break;
                    }
                };
                let full = page.records.len() >= PAGE_LIMIT;
                self.after[i].1 = page.next;
                let replica = self.after[i].0.clone();
                self.record(&replica, page);
                if !full {
                    break;
                }
            }
        }
        true
    }

    fn record(&mut self, replica: &str, page: Page) {
        self.summary.records += page.records.len() as u64;
        self.summary.dropped = self.summary.dropped.max(page.dropped);
        self.summary.cost = page.cost;
        for r in page.records {
            let at = self.timeline.start()
                + Duration::from_micros(r.at_us.saturating_sub(self.start_us));
            let what = What::Wire {
                replica: replica.to_owned(),
                conn: r.conn,
                event: r.event,
            };
            self.timeline.record_at(at, what);
        }
    }
}
