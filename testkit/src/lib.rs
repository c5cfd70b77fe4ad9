//! Test fixtures shared by the workspace's tests and benches. Nothing here ships: the facts the
//! harness shares with the tests (the image names and PostgreSQL majors, the reference page's
//! literal text, the clauses each of the elector's tests decides) live in the `facts` crate,
//! re-exported here as [`images`], [`spec`] and [`decides`].
//!
//! | concern | module |
//! |---|---|
//! | which clauses each of the elector's tests decides (from `facts`) | [`decides`] |
//! | which container image to run (named, locally built, or upstream; from `facts`) | [`images`] |
//! | a real PostgreSQL in a container, pools, observer queries on it | [`pg`] |
//! | PgBouncer in front of it, in its own container | [`pgbouncer`] |
//! | a Toxiproxy server in front of it, and the faults it injects | [`proxy`] |
//! | capturing tracing events in order | [`logs`] |
//! | the reference page's literal text (query, gauge name; from `facts`) | [`spec`] |
//! | waiting on observed state | [`wait`] |

pub mod logs;
pub mod pg;
pub mod pgbouncer;
pub mod proxy;
pub mod wait;

pub use facts::{decides, images, spec};

pub use images::{ImageRef, Images};
pub use logs::{Event, Logs};
pub use pg::{backend_gone, leader_rows, pool_for, Pg};
pub use proxy::Proxy;
pub use spec::LEADER_QUERY as SPEC_LEADER_QUERY;
pub use wait::eventually;
