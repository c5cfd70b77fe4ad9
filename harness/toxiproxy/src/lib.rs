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
//! [`TimeoutMode`]: see the next section. A `reset_peer` resets (RST) only connections that
//! started while it was on the proxy, as upstream's does; one added to a live connection closes
//! it with a FIN.
//!
//! # The `timeout` toxic: upstream or partition
//!
//! An applied `timeout` drops every byte. When its input ends (the source closed, or reading it
//! failed), it does one of two things, chosen for the whole server:
//!
//! | mode | when the input ends | upstream Toxiproxy |
//! | --- | --- | --- |
//! | `upstream` (default) | the link closes: the destination gets the close at once | 2.1.4 and later |
//! | `partition` | the end is held: the destination is not told until the toxic goes, its timer fires, the other peer closes or the proxy stops | up to 2.1.3 |
//!
//! (2.1.0's `timeout` never read its input; 2.1.1 to 2.1.3 read it and dropped its end like
//! data; 2.1.4, commit "Bail out of the loop when the stub Input stream is done", closes.)
//!
//! The option: the flag `-timeout-mode=upstream|partition`, else the environment variable
//! `TOXIPROXY_TIMEOUT_MODE` (an empty value counts as unset; the flag wins), else `upstream`;
//! in-process, [`Server::timeout_mode`]. A bad value exits with status 2 rather than falling
//! back. The readiness line names the mode (`timeout_mode=partition`). The default is
//! upstream's so that this binary and its image drop in for upstream's unchanged, and whoever
//! wants the partition model asks for it; the environment variable exists so a harness can set
//! it on the container without changing the command line (the upstream image ignores it, while
//! its Go flag parser would refuse an unknown flag).
//!
//! ## Who depends on the partition model
//!
//! Nothing in the workspace any more; it stays for whoever models a partition with `timeout`
//! alone, as Toxiproxy 2.1.0's users did. The harness's `partition` fault
//! (`harness/src/fault/network.rs`) is a `timeout` 0 followed by a `slow_close` of a day on each stream
//! of one replica's proxy: a partition under either semantics (the `slow_close` holds a close
//! that upstream's `timeout` lets through), and removing both closes the connection (test
//! `slow_close_behind_a_timeout_holds_the_close_like_a_partition`). The harness runs this
//! server with upstream's semantics, so the upstream image drops in with the same results.
//!
//! Before that change, `leader-partition` depended on the partition mode: the cut leader
//! demotes within 2T (DEM-2) and drops its lock connection, and deadpool-postgres aborts the
//! connection task on drop, so the replica closes its socket at once. With `timeout` alone in
//! upstream mode that close reached PostgreSQL, which dropped the lock at the demotion: measured
//! at T = 200 ms, `lock_released` came 1.93T after the cut and ORPH-2 ("not before 3T, within
//! 4T") failed. `flapping-network` passed in both modes (its heal closes the connections either
//! way). No other scenario uses `partition`.

//! # The wire journal (an extension)
//!
//! Every proxied connection runs a [`wiretap::Tap`]: what the proxy reads off either socket is
//! decoded as the PostgreSQL protocol (with the `pgwire` crate) before any toxic acts on it, and
//! what it says (the client's startup, the server's pid, each statement with its parameters and
//! its answer, who closed the connection) is kept in the proxy's journal, served on
//! `GET /proxies/{name}/journal?after=SEQ` (a [`wiretap::Page`]; what a page answered is
//! forgotten). The bytes are forwarded untouched whatever the decoding makes of them; the page
//! says what decoding cost per message. Upstream has no such route (a 404 in plain text there).
//!
//! # Remaining differences from upstream 2.12.0
//!
//! - `partition` mode, above (off by default).
//! - Listen addresses are compared as the address this server would bind first: `:8666` equals
//!   a bound `[::]:8666`, and `0.0.0.0:8666` stays `0.0.0.0:8666` once bound, so repeating a
//!   `/populate` with either keeps the proxy. Upstream keeps Go's empty host (`:8666`) and Go
//!   reports a `0.0.0.0` listener as `[::]`, so it restarts such proxies.
//! - `slicer` settings upstream does not survive (`average_size` 0 recurses until the stack
//!   overflows; a `size_variation` beyond half a piece cuts out of range) cut pieces of at least
//!   one byte here.
//! - On a connection with zero linger (a `reset_peer` was on the proxy when it started), the
//!   first end of stream resets both sockets at once; upstream resets the other one after the
//!   other direction's chain has flushed into it (and zero linger discards what it had not sent).
//! - Toxic changes act on live connections at once (no goroutine rewiring), and no metrics are
//!   served (`-proxy-metrics` and `-runtime-metrics` are accepted and ignored).

pub mod api;
pub mod cli;
mod collection;
mod conn;
pub mod error;
mod journal;
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
