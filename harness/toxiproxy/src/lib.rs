//! A Toxiproxy-compatible TCP fault-injection server: upstream Toxiproxy 2.x's HTTP API, JSON
//! shapes and status codes, and its proxy and toxic semantics, so a client of the upstream
//! server (here `toxiproxy_rust`) can drive either one unchanged.
//!
//! # Why hand-written rather than `noxious`
//!
//! The `noxious` crate (a Rust port of Toxiproxy's proxy core) was considered and not used:
//! it has no `reset_peer` toxic and its toxic kinds are a closed enum, so adding one means a
//! fork; its socket wrappers hide the `TcpStream`, so `SO_LINGER` 0 (the RST) cannot be set;
//! it has no HTTP API (the larger half of the work); and it pulls in tokio-util 0.6 and
//! mocking crates. The proxy core here is small instead: one task per connection owns both
//! sockets and runs each direction as a deterministic state machine over the toxic chain
//! (the private `link` module), which makes toxic changes act on live connections at once,
//! without upstream's goroutine-per-toxic rewiring.
//!
//! # Use
//!
//! In-process (tests, or a local-process backend): [`Server::start`] on `127.0.0.1:0`, then
//! point a client at [`ServerHandle::local_addr`]. As a binary: `toxiproxy-server -host=0.0.0.0
//! -port=8474` (see [`cli`]); it logs `Starting Toxiproxy HTTP server` once listening.
//!
//! # Toxics
//!
//! `latency`, `bandwidth`, `slow_close`, `timeout`, `reset_peer`, `slicer`, `limit_data` and
//! `noop`, each on the `upstream` (client to server) or `downstream` stream, applied to a
//! connection with probability `toxicity` (rolled per connection). See [`ToxicKind`].
//!
//! What an applied `timeout` toxic does when its input ends is an option of the server,
//! [`TimeoutMode`]: upstream's semantics by default, or a partition (`-timeout-mode=partition`,
//! `TOXIPROXY_TIMEOUT_MODE=partition`, [`Server::timeout_mode`]).

pub mod api;
pub mod cli;
mod collection;
mod conn;
pub mod error;
mod link;
pub mod net;
mod proxy;
mod server;
pub mod toxic;
pub mod toxics;

pub use api::VERSION;
pub use error::{ApiError, Error, ParseTimeoutModeError};
pub use proxy::ProxyView;
pub use server::{Server, ServerHandle};
pub use toxic::{Direction, TimeoutMode, Toxic, ToxicKind, ToxicView};
