//! The while-leader launcher (spec: `runWhileLeader`; LOOP-2).
//!
//! Hands a self-paced loop the [`Term`] of one leadership term; the loop is expected to return
//! when the term's token is cancelled. It is started again in the next term.

use std::future::Future;

use tokio_util::sync::CancellationToken;

use crate::{Elector, Term};

/// Runs `body` once per leadership term until `shutdown` is cancelled. Cancellation-safe.
///
/// When `body` returns before its term ends, it is not restarted until the next term.
pub async fn run_while_leader<F, Fut>(
    elector: &Elector,
    name: &str,
    shutdown: &CancellationToken,
    mut body: F,
) where
    F: FnMut(Term) -> Fut,
    Fut: Future<Output = ()>,
{
    // The leadership watch wakes this launcher at every transition (and at every standby check,
    // which costs it one look at the live term).
    let mut changes = elector.subscribe();
    loop {
        // Wait for a term this launcher has not served yet.
        let (term, leading) = elector.term(shutdown);
        if !leading {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return,
                changed = changes.changed() => if changed.is_err() { return },
            }
            continue;
        }
        let number = term.number();
        tracing::info!(
            r#loop = name,
            term = number,
            "background loop started for the term"
        );
        body(term).await;
        tracing::info!(r#loop = name, term = number, "background loop stopped");
        // Sleep until this term is over, then serve the next one.
        while elector.current_term() == number && !shutdown.is_cancelled() {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return,
                changed = changes.changed() => if changed.is_err() { return },
            }
        }
        if shutdown.is_cancelled() {
            return;
        }
    }
}
