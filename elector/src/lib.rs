#![doc = include_str!("../README.md")]
//!
//! ## Where each part of the spec lives
//! | spec section | module |
//! |---|---|
//! | The lock key, every statement | `sql` |
//! | Config | `config` |
//! | Run | `run`, and the granting statement's answer in `attempt` |
//! | Term | `term` |
//! | Do, IsLeader | `elector` |
//! | Session connection, demotion, orphaned session bound | `session` |
//! | The leadership watch (beyond the spec) | [`leadership`] |
//! | Which replica leads (X-WHO, beyond the spec) | [`who`] |
//! | A standby queued on the lock (X-WAKE, beyond the spec) | `wake` |
//! | Metric | `gauge` |
//! | Which loops run on the leader | [`ticker`], [`while_leader`], [`gate`] |
//! | Readiness | [`readiness`] |
//! | Background workers | [`supervisor`] |

mod attempt;
mod config;
mod elector;
mod error;
mod gauge;
pub mod leadership;
mod run;
mod session;
pub mod sql;
mod term;
mod wake;

pub use config::{
    Config, DEFAULT_CHECK_INTERVAL, IDLE_SESSION_INTERVALS, PRE14_IDLE_INTERVALS, UNLOCK_DEADLINE,
};
pub use elector::{Done, Elector};
pub use error::Error;
pub use gauge::{GAUGE_HELP, GAUGE_NAME};
pub use leadership::{Leadership, Role};
pub use term::{Term, TermCause};

pub mod gate;
mod panic;
pub mod readiness;
pub mod supervisor;
pub mod ticker;
pub mod while_leader;
pub mod who;

#[cfg(test)]
mod tests {
    /// `elector/tests/clauses.json` lists every unit test of the library, and no other.
    #[test]
    fn every_test_names_the_clauses_it_decides() {
        testkit::decides::assert_every_test_listed("elector");
    }
}
