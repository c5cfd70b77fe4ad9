//! One proxied connection: a single task owns the client and upstream sockets and drives the two
//! [`Link`]s (upstream: client to server, downstream: server to client).
//!
//! Close semantics follow upstream Toxiproxy: when the end of one stream has been written, that
//! destination socket is closed for good, so the other direction stops reading it and ends once
//! its own pipeline is flushed (upstream has no half-close). Stopping the proxy closes both
//! sockets at once; a `reset_peer` toxic closes both when it fires.
//!
//! Like upstream, a connection that starts while a `reset_peer` toxic is on either stream (of
//! any toxicity) gets `SO_LINGER` 0 on both sockets, so every close of it is an RST: the
//! toxic's, and also the first end of stream, which then ends the whole connection at once (an
//! abortive close sends no FIN). A `reset_peer` added to a live connection closes it with a
//! FIN, as upstream's does.
//!
//! In the partition [`TimeoutMode`], an applied `timeout` toxic holds its stream's end (see the
//! `link` module): when the client closes (or its socket errs) while one is on the upstream
//! stream, the server's socket stays open and silent, as across a network partition; likewise
//! for the server's close on the downstream stream. The connection then ends when the toxic
//! goes, its timer fires, the other peer closes, or the proxy stops. In the upstream mode the
//! close goes through at once.
//!
//! An [`Order`] (`POST /proxies/{p}/inject`) makes the connection run a statement of the
//! proxy's own on its session: once the session is idle between the client's statements and
//! nothing is in flight through the toxics, the proxy sends the Query to the server, reads no
//! more from the client, and takes the answer off the server's stream up to its
//! ReadyForQuery ([`wiretap::Swallow`]); then the client's traffic flows on. The client never
//! sees either; the journal records [`wiretap::WireEvent::Injected`].

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error};

use wiretap::Swallow;

use crate::journal::{Journal, Observed};
use crate::link::{Item, Link};
use crate::toxic::{TimeoutMode, ToxicKind};
use crate::toxics::ToxicSet;

/// Bytes read from a socket at a time (Go's `io.Copy` buffer size).
const READ_SIZE: usize = 32 * 1024;

/// What a connection task needs.
pub(crate) struct ConnCtx {
    /// Proxy name, for logs.
    pub proxy: String,
    /// Address to dial.
    pub upstream: String,
    /// The proxy's toxics.
    pub toxics: watch::Receiver<Arc<ToxicSet>>,
    /// The proxy's wire journal.
    pub journal: Arc<Journal>,
    /// The statement the proxy's connections are to run themselves, the latest one.
    pub orders: watch::Receiver<Option<Arc<Order>>>,
    /// Cancelled when the proxy stops or is deleted.
    pub cancel: CancellationToken,
    /// Randomness for toxicity and jitter.
    pub rng: fastrand::Rng,
    /// What an applied `timeout` toxic does when its input ends.
    pub timeout_mode: TimeoutMode,
}

/// A statement each live connection runs once on its session, when idle before `until`.
#[derive(Debug)]
pub(crate) struct Order {
    /// The statement.
    pub sql: String,
    /// After this a connection that has not gone idle does without.
    pub until: Instant,
}

#[derive(Debug, PartialEq, Eq)]
enum End {
    /// Both streams ended (or, with zero linger, the first one).
    Closed,
    /// The proxy stopped, or its toxics went away.
    Killed,
    /// A `reset_peer` toxic fired.
    Reset,
}

/// Serves one accepted client until the connection ends.
pub(crate) async fn serve(mut client: TcpStream, peer: SocketAddr, mut ctx: ConnCtx) {
    // Dropped when the connection ends: if neither side closed first, the proxy ended it.
    let mut observed = Observed::open(ctx.journal.clone());
    let server = tokio::select! {
        biased;
        _ = ctx.cancel.cancelled() => return,
        r = TcpStream::connect(ctx.upstream.as_str()) => r,
    };
    let mut server = match server {
        Ok(s) => s,
        Err(err) => {
            error!(name = %ctx.proxy, client = %peer, upstream = %ctx.upstream, %err,
                "Unable to open connection to upstream");
            return;
        }
    };
    // Go enables TCP_NODELAY on every connection; do the same so latency is only the toxics'.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    // The toxics as the connection starts (upstream starts its links after dialing).
    let set = ctx.toxics.borrow_and_update().clone();
    let abortive = has_reset_peer(&set);
    if abortive {
        let _ = client.set_zero_linger();
        let _ = server.set_zero_linger();
    }
    let end = pump(
        &mut client,
        &mut server,
        &mut ctx,
        &set,
        abortive,
        &mut observed,
    )
    .await;
    debug!(name = %ctx.proxy, client = %peer, ?end, abortive, "Connection ended");
}

/// Whether a `reset_peer` toxic is on either stream, applied or not: upstream's `Link.Start`
/// sets zero linger for one whatever its toxicity.
fn has_reset_peer(set: &ToxicSet) -> bool {
    set.upstream
        .iter()
        .chain(&set.downstream)
        .any(|t| matches!(t.kind, ToxicKind::ResetPeer { .. }))
}

/// What woke the connection loop.
enum Event {
    Cancelled,
    ToxicsChanged(bool),
    Read { upstream: bool, n: Option<usize> },
    Ordered,
    Wrote { upstream: bool, n: Option<usize> },
    Timer,
}

/// State of one direction besides its link.
struct Side {
    link: Link,
    /// Still reading the source.
    reading: bool,
    /// The end of stream was written (or writing failed): the destination is closed.
    done: bool,
}

/// Runs both directions until the connection ends. `abortive`: the sockets have zero linger, so
/// the first end of stream ends the connection (closing a socket resets both directions).
/// `observed` sees every read before the toxics do.
async fn pump(
    client: &mut TcpStream,
    server: &mut TcpStream,
    ctx: &mut ConnCtx,
    set: &ToxicSet,
    abortive: bool,
    observed: &mut Observed,
) -> End {
    let (mut cr, mut cw) = client.split();
    let (mut sr, mut sw) = server.split();
    let ConnCtx {
        toxics,
        orders,
        cancel,
        rng,
        timeout_mode,
        ..
    } = ctx;
    // An order given before the connection opened is not its.
    orders.borrow_and_update();
    let mut order: Option<Arc<Order>> = None;
    let mut swallow: Option<Swallow> = None;
    let mode = *timeout_mode;
    let now = Instant::now();
    let mut up = Side {
        link: Link::new(&set.upstream, mode, now, rng),
        reading: true,
        done: false,
    };
    let mut down = Side {
        link: Link::new(&set.downstream, mode, now, rng),
        reading: true,
        done: false,
    };
    let mut cbuf = vec![0u8; READ_SIZE];
    let mut sbuf = vec![0u8; READ_SIZE];
    loop {
        let now = Instant::now();
        let wake_up = up.link.advance(now, rng);
        let wake_down = down.link.advance(now, rng);
        if up.link.reset_requested() || down.link.reset_requested() {
            return End::Reset;
        }
        if abortive && (up.link.output_ended() || down.link.output_ended()) {
            return End::Closed;
        }
        if !up.done && up.link.output_ended() {
            let _ = sw.shutdown().await;
            finish(&mut up, &mut down);
            continue;
        }
        if !down.done && down.link.output_ended() {
            let _ = cw.shutdown().await;
            finish(&mut down, &mut up);
            continue;
        }
        if up.done && down.done {
            return End::Closed;
        }
        let free = swallow.is_none() && idle(&up, &down, observed);
        if let Some(o) = order.take_if(|o| o.until <= now || free) {
            if o.until > now {
                // Written past the toxics: the link is empty, so nothing of the client's is
                // overtaken. A failed write ends the connection at the next read.
                if sw.write_all(&wiretap::query_message(&o.sql)).await.is_ok() {
                    observed.injected(&o.sql);
                    swallow = Some(Swallow::new());
                }
            }
            continue;
        }
        let wake = match (wake_up, wake_down) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let up_out: Bytes = if up.done {
            Bytes::new()
        } else {
            up.link.next_write().unwrap_or_default()
        };
        let down_out: Bytes = if down.done {
            Bytes::new()
        } else {
            down.link.next_write().unwrap_or_default()
        };
        // While the proxy's own statement runs, the client waits.
        let read_client = up.reading && up.link.wants_input() && swallow.is_none();
        let read_server = down.reading && down.link.wants_input();
        let event = tokio::select! {
            biased;
            _ = cancel.cancelled() => Event::Cancelled,
            r = toxics.changed() => Event::ToxicsChanged(r.is_ok()),
            Ok(()) = orders.changed() => Event::Ordered,
            r = sw.write(&up_out), if !up_out.is_empty() => Event::Wrote {
                upstream: true,
                n: r.ok().filter(|&n| n > 0),
            },
            r = cw.write(&down_out), if !down_out.is_empty() => Event::Wrote {
                upstream: false,
                n: r.ok().filter(|&n| n > 0),
            },
            r = cr.read(&mut cbuf), if read_client => Event::Read {
                upstream: true,
                n: r.ok().filter(|&n| n > 0),
            },
            r = sr.read(&mut sbuf), if read_server => Event::Read {
                upstream: false,
                n: r.ok().filter(|&n| n > 0),
            },
            () = tokio::time::sleep_until(wake.unwrap_or(now)), if wake.is_some() => Event::Timer,
        };
        match event {
            Event::Cancelled => return End::Killed,
            Event::ToxicsChanged(false) => return End::Killed,
            Event::ToxicsChanged(true) => {
                let set = toxics.borrow_and_update().clone();
                let now = Instant::now();
                up.link.reconcile(&set.upstream, now, rng);
                down.link.reconcile(&set.downstream, now, rng);
            }
            Event::Wrote { upstream, n } => {
                let (side, other) = if upstream {
                    (&mut up, &mut down)
                } else {
                    (&mut down, &mut up)
                };
                match n {
                    Some(n) => side.link.wrote(n),
                    // Writing failed: like upstream, the destination is closed.
                    None if abortive => return End::Closed,
                    None => {
                        if upstream {
                            let _ = sw.shutdown().await;
                        } else {
                            let _ = cw.shutdown().await;
                        }
                        finish(side, other);
                    }
                }
            }
            Event::Read { upstream, n } => {
                let (side, buf) = if upstream {
                    (&mut up, &cbuf)
                } else {
                    (&mut down, &sbuf)
                };
                match n {
                    Some(n) => {
                        let mut data = &buf[..n];
                        let rest;
                        if let Some(s) = swallow.as_mut().filter(|_| !upstream) {
                            // The answer to the proxy's statement is not the client's.
                            rest = s.feed(data);
                            if s.done() {
                                swallow = None;
                            }
                            data = &rest;
                        }
                        if data.is_empty() {
                            continue;
                        }
                        side.link.push_input(Item::Data {
                            data: Bytes::copy_from_slice(data),
                            ts: Instant::now(),
                        });
                        observed.read(upstream, data);
                    }
                    None => {
                        side.reading = false;
                        side.link.push_input(Item::Eof);
                        observed.eof(upstream);
                    }
                }
            }
            Event::Ordered => order = orders.borrow_and_update().clone(),
            Event::Timer => {}
        }
    }
}

/// Whether the session is idle between the client's statements, nothing in flight either way.
fn idle(up: &Side, down: &Side, observed: &Observed) -> bool {
    !up.done
        && !down.done
        && up.link.buffered() == 0
        && down.link.buffered() == 0
        && observed.idle()
}

/// `side` has written its end of stream: its destination is closed, which is the source of
/// `other`, so `other` reads no more and ends once its pipeline is flushed (even if an end of
/// stream read earlier from that source is held by a `timeout`).
fn finish(side: &mut Side, other: &mut Side) {
    side.done = true;
    side.reading = false;
    other.reading = false;
    other.link.close_source();
}
