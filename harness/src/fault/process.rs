//! The process faults: signals to a replica process, and its restart.

use nix::sys::signal::Signal;
use tokio::time::Instant;

use super::{FaultRecord, Nemesis, ProcessTarget, Verb};

impl Nemesis {
    fn signal(
        &self,
        verb: Verb,
        lifted: bool,
        target: &mut dyn ProcessTarget,
        signal: Signal,
    ) -> anyhow::Result<FaultRecord> {
        let started = Instant::now();
        let name = target.target_name();
        target.send_signal(signal)?;
        Ok(self.record(verb, &name, lifted, format!("{signal} {name}"), started))
    }

    /// SIGKILLs a replica: it dies at once; its sockets close (PostgreSQL ends its sessions).
    ///
    /// Inverse: none; [`restart`](Nemesis::restart) starts it again.
    ///
    /// # Errors
    /// The signal could not be sent.
    pub fn kill(&self, target: &mut dyn ProcessTarget) -> anyhow::Result<FaultRecord> {
        self.signal(Verb::Kill, false, target, Signal::SIGKILL)
    }

    /// SIGSTOPs a replica: it freezes with its sockets open (a silent leader).
    ///
    /// Inverse: [`thaw`](Nemesis::thaw).
    ///
    /// # Errors
    /// The signal could not be sent.
    pub fn freeze(&self, target: &mut dyn ProcessTarget) -> anyhow::Result<FaultRecord> {
        self.signal(Verb::Freeze, false, target, Signal::SIGSTOP)
    }

    /// SIGCONTs a frozen replica.
    ///
    /// Inverse of [`freeze`](Nemesis::freeze).
    ///
    /// # Errors
    /// The signal could not be sent.
    pub fn thaw(&self, target: &mut dyn ProcessTarget) -> anyhow::Result<FaultRecord> {
        self.signal(Verb::Freeze, true, target, Signal::SIGCONT)
    }

    /// SIGTERMs a replica: a graceful shutdown (the leader unlocks).
    ///
    /// Inverse: none; [`restart`](Nemesis::restart) starts it again.
    ///
    /// # Errors
    /// The signal could not be sent.
    pub fn terminate(&self, target: &mut dyn ProcessTarget) -> anyhow::Result<FaultRecord> {
        self.signal(Verb::Terminate, false, target, Signal::SIGTERM)
    }

    /// Starts a replica again (killing it first if it runs); returns once it runs. A verb of
    /// its own (after [`kill`](Nemesis::kill) or [`terminate`](Nemesis::terminate)), not a
    /// lift: it has no inverse.
    ///
    /// # Errors
    /// It did not start.
    pub async fn restart(&self, target: &mut dyn ProcessTarget) -> anyhow::Result<FaultRecord> {
        let started = Instant::now();
        let name = target.target_name();
        target.restart_process().await?;
        Ok(self.record(
            Verb::Restart,
            &name,
            false,
            format!("restart {name}"),
            started,
        ))
    }
}
