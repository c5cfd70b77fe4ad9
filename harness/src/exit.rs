//! The harness's exit codes, which tell a broken setup from a broken elector (as cargo-nextest's
//! own do): a command's error carries what kind of failure it was as a [`Failure`] in its
//! context chain, and [`code_of`] reads it there.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | every clause that ran passed |
//! | 1 | a clause failed (or a command failed in a way none of the codes below names) |
//! | 2 | usage: a bad flag, value or scenario file (clap's own usage errors exit 2 too) |
//! | 3 | setup: the servers could not start (Docker, an image, a port) for any scenario of a run; the report still shows them, as `not-run (setup: ...)` |
//! | 4 | the report or the evidence could not be written |
//! | 128 + N | ended by signal N (130 for Ctrl-C, 143 for SIGTERM) after removing what it started |

use std::process::ExitCode;

/// Every clause that ran passed.
pub const PASSED: u8 = 0;
/// A clause failed.
pub const CLAUSE_FAILED: u8 = 1;
/// A bad flag, value or scenario file.
pub const USAGE: u8 = 2;
/// The servers could not start.
pub const SETUP: u8 = 3;
/// The report or the evidence could not be written.
pub const REPORT: u8 = 4;

/// What kind of failure an error is, attached as context (`.context(Failure::Setup)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// A bad flag, value or scenario file.
    #[error("usage")]
    Usage,
    /// The servers (PostgreSQL, PgBouncer, Toxiproxy) could not start.
    #[error("setup: the servers could not start")]
    Setup,
    /// The report or the evidence could not be written.
    #[error("the report could not be written")]
    Report,
}

impl Failure {
    /// Its exit code.
    pub fn code(self) -> u8 {
        match self {
            Failure::Usage => USAGE,
            Failure::Setup => SETUP,
            Failure::Report => REPORT,
        }
    }

    /// The kind `error` carries as context, if any (anyhow's downcast looks through every
    /// layer of context).
    pub fn of(error: &anyhow::Error) -> Option<Failure> {
        error.downcast_ref::<Failure>().copied()
    }
}

/// The exit code of a command that ended with `error`.
pub fn code_of(error: &anyhow::Error) -> ExitCode {
    ExitCode::from(Failure::of(error).map_or(CLAUSE_FAILED, Failure::code))
}

/// The exit code of a run whose report is written: a failed clause wins; else a scenario whose
/// servers could not start; else success.
pub fn of_run(clause_failed: bool, setup_failed: bool) -> ExitCode {
    ExitCode::from(match (clause_failed, setup_failed) {
        (true, _) => CLAUSE_FAILED,
        (false, true) => SETUP,
        (false, false) => PASSED,
    })
}

#[cfg(test)]
mod tests {
    use anyhow::Context as _;

    use super::*;

    #[test]
    fn the_kind_is_found_anywhere_in_the_chain() {
        let e = anyhow::anyhow!("no Docker daemon").context(Failure::Setup);
        assert_eq!(Failure::of(&e), Some(Failure::Setup));
        let deeper: anyhow::Result<()> = Err(e);
        let e = deeper.context("starting the topology").unwrap_err();
        assert_eq!(Failure::of(&e), Some(Failure::Setup));
        assert_eq!(Failure::of(&anyhow::anyhow!("other")), None);
        assert_eq!(
            format!("{e:#}"),
            "starting the topology: setup: the servers could not start: no Docker daemon"
        );
    }
}
