//! Panic payloads and stacks for the launchers and the supervisor (READY-4, LOOP-5).
//!
//! A pass's stack is gone once `catch_unwind` returns, so a process-wide panic hook (installed
//! once, chained to the previous hook) keeps the stack of the last panic on each thread.
//!
//! The hook captures the frames only; their symbols are resolved when the ERROR line is written,
//! after the unwind. Resolving them in the hook (reading the binary's debug info on the first
//! panic of a process) delayed the unwind, and with it RUN-7's abandonment, by ~0.7 T at T = 200 ms.
//! The ERROR line is written on a blocking thread ([`log_resolved`]) for the same reason: a
//! loaded host took 1.4 s to resolve a first panic's stack, and the tick's outcome (READY-4's
//! probe) waited for it.
//!
//! The frames are captured and resolved with the `backtrace` crate, not `std::backtrace`: std
//! captures and resolves under one process-wide lock, which its default hook also takes to print
//! a panic's message, so a second panic while the first stack resolved waited for the whole
//! resolution (3 s on a loaded CI host: the loop stopped ticking, READY-4). The crate has a lock
//! of its own, and the hook never waits on it: while a stack is being resolved, a panic's stack
//! is not captured, and its ERROR line says so.

use std::cell::RefCell;
use std::sync::{Once, RwLock, TryLockError};

use backtrace::Backtrace;

/// A panic's stack, as the hook kept it.
pub(crate) enum Stack {
    /// The frames, their symbols not resolved yet.
    Frames(Backtrace),
    /// Not captured: another panic's stack was being resolved, and capturing would have waited
    /// for it.
    Busy,
}

/// Held for writing while a stack's symbols are resolved; the hook only tries to read it.
static RESOLVING: RwLock<()> = RwLock::new(());

thread_local! {
    static LAST_STACK: RefCell<Option<Stack>> = const { RefCell::new(None) };
}

/// Installs the stack-keeping hook once per process; the previous hook still runs.
pub(crate) fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let stack = match RESOLVING.try_read() {
                Err(TryLockError::WouldBlock) => Stack::Busy,
                _free => Stack::Frames(Backtrace::new_unresolved()),
            };
            LAST_STACK.with(|s| *s.borrow_mut() = Some(stack));
            previous(info);
        }));
    });
}

/// The stack of the last panic on this thread, if the hook saw one, unresolved.
pub(crate) fn take_stack() -> Option<Stack> {
    LAST_STACK.with(|s| s.borrow_mut().take())
}

/// Polls `work` with this thread's kept stack cleared before each poll, so that the stack
/// [`take_stack`] finds after `work` panicked is that panic's own. A panic that skips the hook
/// (re-raised with `std::panic::resume_unwind`) then has no stack, rather than the stack of an
/// earlier panic on the same thread that nobody took (READY-4).
pub(crate) async fn with_own_stack<F: std::future::Future>(work: F) -> F::Output {
    let mut work = std::pin::pin!(work);
    std::future::poll_fn(move |cx| {
        drop(take_stack());
        work.as_mut().poll(cx)
    })
    .await
}

/// Writes `line` with the resolved text of `stack` on a blocking thread, under the caller's
/// subscriber: resolving the symbols (reading the binary's debug info, hundreds of ms on the
/// first panic of a process, more on a loaded host) never holds up the caller, whose outcome
/// (a probe, a restart) is reported at once.
pub(crate) fn log_resolved(stack: Option<Stack>, line: impl FnOnce(&str) + Send + 'static) {
    let dispatch = tracing::dispatcher::get_default(Clone::clone);
    let write = move || {
        let text = resolved(stack);
        tracing::dispatcher::with_default(&dispatch, || line(&text));
    };
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => drop(rt.spawn_blocking(write)),
        Err(_) => write(),
    }
}

/// The text of a kept stack, its symbols resolved (while no hook captures).
fn resolved(stack: Option<Stack>) -> String {
    match stack {
        None => "<stack unavailable>".to_owned(),
        Some(Stack::Busy) => "<not captured: another panic's stack was being resolved>".to_owned(),
        Some(Stack::Frames(mut frames)) => {
            let _resolving = RESOLVING.write().unwrap_or_else(|e| e.into_inner());
            frames.resolve();
            format!("{frames:?}")
        }
    }
}

/// The panic's value as text, as Go's `%v` of a recovered value would print it.
pub(crate) fn message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string panic payload>".to_owned()
    }
}
