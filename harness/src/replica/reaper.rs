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
    pub(super) fn spawn(child: Child, pid: u32, exits: Exits) -> Self {
        Self::spawn_with(child, pid, exits, async {})
    }

    /// [`Reaper::spawn`], publishing each exit only once `before_publish` is done (the tests
    /// hold open the window between the reaping and its publication).
    fn spawn_with(
        mut child: Child,
        pid: u32,
        exits: Exits,
        before_publish: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Self {
        let (tx, exit) = watch::channel(None);
        let task = tokio::spawn(async move {
            let status = child.wait().await.ok();
            let at = Instant::now();
            before_publish.await;
            let exit = Exit { at, status };
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
    ///
    /// The child is reaped (by its task's `wait`) a moment before that task publishes the exit:
    /// a signal sent in between finds no process (`ESRCH`), and that is the no-op too. The pid
    /// cannot name another process then: it was this reaper's child, and only its own `wait`
    /// frees it.
    pub(super) fn signal(&self, signal: Signal) -> nix::Result<()> {
        if self.exited().is_some() {
            return Ok(());
        }
        let pid = i32::try_from(self.pid).map_err(|_| nix::Error::ESRCH)?;
        match kill(Pid::from_raw(pid), signal) {
            Err(nix::Error::ESRCH) => Ok(()),
            sent => sent,
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        // The task's child is killed when the aborted task drops it (kill_on_drop); killing it
        // here as well does it now rather than when the runtime gets to the task.
        let _ = self.signal(Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Clean-clone CI of 0484084 (chaos-119, step 56): a `restart` of a replica that a
    /// `terminate` had just stopped failed with `kill -SIGKILL ...: ESRCH`, sent after tokio had
    /// reaped the child and before the reaper published its exit. Held open here: the signal
    /// in that window is a no-op, as it is once the exit is published.
    #[tokio::test]
    async fn a_signal_between_the_reaping_and_its_publication_is_a_no_op() -> anyhow::Result<()> {
        let child = tokio::process::Command::new("true")
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().ok_or_else(|| anyhow::anyhow!("no pid"))?;
        let (release, hold) = tokio::sync::oneshot::channel::<()>();
        let reaper = Reaper::spawn_with(child, pid, Exits::default(), async {
            let _ = hold.await;
        });
        // Reaped: the pid names no process (a zombie still answers signal 0).
        let raw = Pid::from_raw(i32::try_from(pid)?);
        tokio::time::timeout(Duration::from_secs(10), async {
            while kill(raw, None) != Err(nix::Error::ESRCH) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await?;
        assert_eq!(reaper.exited(), None, "the window is held open");
        assert_eq!(reaper.signal(Signal::SIGKILL), Ok(()));
        let _ = release.send(());
        Ok(())
    }
}
