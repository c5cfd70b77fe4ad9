//! Waiting on observed state instead of sleeping.

use std::time::Duration;

use tokio::time::Instant;

/// Polls `cond` every 10 ms until it holds or `limit` passes; returns the time it took.
pub async fn eventually<F, Fut>(limit: Duration, mut cond: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if cond().await {
            return Some(start.elapsed());
        }
        if start.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
