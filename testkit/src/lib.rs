//! Test fixtures shared by the workspace's tests and benches, and the few facts the harness
//! itself reads from here: the image names and PostgreSQL majors ([`images`]) and the reference
//! page's literal text ([`spec`]: the leader-finding query, the gauge's name), so that the
//! harness and the tests judge against one copy. The elector does not depend on this crate; the
//! harness (a dependency, not only a dev-dependency) does.
//!
//! | concern | module |
//! |---|---|
//! | which container image to run (named, locally built, or upstream) | [`images`] |
//! | a real PostgreSQL in a container, pools, observer queries on it | [`pg`] |
//! | PgBouncer in front of it, in its own container | [`pgbouncer`] |
//! | a Toxiproxy server in front of it, and the faults it injects | [`proxy`] |
//! | capturing tracing events in order | [`logs`] |
//! | the reference page's literal text (query, gauge name) | [`spec`] |
//! | waiting on observed state | [`wait`] |

pub mod images;
pub mod logs;
pub mod pg;
pub mod pgbouncer;
pub mod proxy;
pub mod spec;
pub mod wait;

pub use images::{ImageRef, Images};
pub use logs::{Event, Logs};
pub use pg::{backend_gone, leader_rows, pool_for, Pg};
pub use proxy::Proxy;
pub use spec::LEADER_QUERY as SPEC_LEADER_QUERY;
pub use wait::eventually;
