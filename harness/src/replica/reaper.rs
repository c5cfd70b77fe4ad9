//! The child's reaper: one task owns a replica's child process and waits for it, so that its
//! exit is seen when it happens (RUN-6: a program must exit after SIGTERM), not when someone
//! next asks. Every exit, of every incarnation, is kept with the harness's time of it.

use std::process::ExitStatus;
use std::sync::{Arc, Mutex};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::Child;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

/// How a child ended, seen by the harness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exit {
    /// When the harness reaped it.
    pub at: Instant,
    /// Its status (`None`: waiting for it failed, so how it ended is unknown).
    pub status: Option<ExitStatus>,
}

/// Every exit of one replica, across its restarts.
pub(super) type Exits = Arc<Mutex<Vec<Exit>>>;

/// Owns a running child (through its waiting task) and tells when it exited. Dropping it kills
/// the child if it still runs.
#[derive(Debug)]
pub(super) struct Reaper {
    pid: u32,
    exit: watch::Receiver<Option<Exit>>,
    _task: AbortOnDropHandle<()>,
}

impl Reaper {
    /// Takes `child` over; its exit goes to `exits` and to [`Reaper::exited`].
    pub(super) fn spawn(mut child: Child, pid: u32, exits: Exits) -> Self {
        let (tx, exit) = watch::channel(None);
        let task = tokio::spawn(async move {
            let status = child.wait().await.ok();
            let exit = Exit {
                at: Instant::now(),
                status,
            };
            exits.lock().unwrap_or_else(|e| e.into_inner()).push(exit);
            tx.send_replace(Some(exit));
        });
        Self {
            pid,
            exit,
            _task: AbortOnDropHandle::new(task),
        }
    }

    /// How the child ended, once it has.
    pub(super) fn exited(&self) -> Option<Exit> {
        *self.exit.borrow()
    }

    /// Waits for the child to end.
    pub(super) async fn wait(&mut self) -> Exit {
        let seen = self
            .exit
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|e| *e);
        // The sender lives in the task until it has sent: none is seen only when the task is
        // gone, which only this reaper's drop does.
        seen.unwrap_or(Exit {
            at: Instant::now(),
            status: None,
        })
    }

    /// Sends `signal` while the child runs; a no-op once it has been reaped.
    pub(super) fn signal(&self, signal: Signal) -> nix::Result<()> {
        if self.exited().is_some() {
            return Ok(());
        }
        let pid = i32::try_from(self.pid).map_err(|_| nix::Error::ESRCH)?;
        kill(Pid::from_raw(pid), signal)
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        // The task's child is killed when the aborted task drops it (kill_on_drop); killing it
        // here as well does it now rather than when the runtime gets to the task.
        let _ = self.signal(Signal::SIGKILL);
    }
}
