//! Test fixtures: a server per test on an ephemeral port (so tests run in parallel), TCP
//! servers to proxy to, and blocking socket helpers. The server runs on its own tokio runtime;
//! tests drive it only through the blocking `toxiproxy_rust` client and plain HTTP.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;
use toxiproxy_rust::client::Client;
use toxiproxy_rust::proxy::{Proxy, ProxyPack};
use toxiproxy_server::{Server, ServerHandle, TimeoutMode};

/// A server under test, with a TCP echo server to proxy to.
pub struct Fixture {
    rt: Runtime,
    handle: Option<ServerHandle>,
    /// The API address.
    pub api: SocketAddr,
    /// The `toxiproxy_rust` client pointed at it.
    pub client: Client,
    /// An echo server.
    pub echo: SocketAddr,
}

impl Fixture {
    /// A server with the defaults (upstream's `timeout` semantics).
    pub fn new() -> Self {
        Self::with(Server::new().seed(42))
    }

    /// A server whose `timeout` toxic holds the end of stream (a partition).
    pub fn partition() -> Self {
        Self::with(Server::new().seed(42).timeout_mode(TimeoutMode::Partition))
    }

    fn with(server: Server) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let handle = rt.block_on(server.start("127.0.0.1:0")).unwrap();
        let api = handle.local_addr();
        let echo = rt.block_on(echo_server());
        Self {
            rt,
            handle: Some(handle),
            api,
            client: Client::new(api),
            echo,
        }
    }

    /// Creates a proxy on an ephemeral port through `populate`; returns it (listen resolved).
    pub fn proxy(&self, name: &str, upstream: SocketAddr) -> Proxy {
        let mut proxies = self
            .client
            .populate(vec![ProxyPack::new(
                name.into(),
                "127.0.0.1:0".into(),
                upstream.to_string(),
            )])
            .unwrap();
        assert_eq!(proxies.len(), 1);
        proxies.remove(0)
    }

    /// A proxy to the echo server and a client connection through it, checked to work.
    pub fn echo_proxy(&self, name: &str) -> (Proxy, TcpStream) {
        let proxy = self.proxy(name, self.echo);
        let mut conn = connect(&proxy);
        assert_echo(&mut conn, b"warm-up");
        (proxy, conn)
    }

    /// A proxy to a plain TCP listener, a client connection through it and the listener's
    /// accepted socket (the server side), checked to carry data both ways.
    pub fn tcp_pair(&self, name: &str) -> (Proxy, TcpStream, TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy = self.proxy(name, listener.local_addr().unwrap());
        let mut client = connect(&proxy);
        let mut server = accept_within(&listener, Duration::from_secs(5));
        client.write_all(b"ping").unwrap();
        assert_eq!(read_n(&mut server, 4, Duration::from_secs(2)), b"ping");
        server.write_all(b"pong").unwrap();
        assert_eq!(read_n(&mut client, 4, Duration::from_secs(2)), b"pong");
        (proxy, client, server)
    }

    /// Runs a future on the server's runtime (to start helper servers).
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// A raw HTTP call; returns the status and the body parsed as JSON (Null when empty).
    pub fn call(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let (status, text) = http(self.api, method, path, body, &[]);
        let json = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, json)
    }

    /// A raw GET with one extra header; returns status and body text.
    pub fn call_with_header(&self, path: &str, name: &str, value: &str) -> (u16, String) {
        http(self.api, "GET", path, None, &[(name, value)])
    }
}

/// A minimal HTTP/1.1 exchange over a fresh connection (`Connection: close`), so status codes
/// and bodies the client library hides can be checked without another HTTP client.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let body = body.unwrap_or("");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    conn.write_all(req.as_bytes()).unwrap();
    let mut resp = Vec::new();
    conn.read_to_end(&mut resp).unwrap();
    let resp = String::from_utf8(resp).unwrap();
    let (head, rest) = resp.split_once("\r\n\r\n").expect("HTTP head");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("HTTP status");
    let chunked = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    (status, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            self.rt.block_on(handle.shutdown());
        }
    }
}

/// A TCP echo server; each connection echoes until the client closes.
pub async fn echo_server() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = sock.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// A server that writes `greeting` to each connection, then closes it.
pub async fn greet_and_close_server(greeting: &'static [u8]) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let _ = sock.write_all(greeting).await;
            let _ = sock.shutdown().await;
            // Drain until the peer goes, so the close is a FIN and not an RST.
            let mut buf = [0u8; 1024];
            while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
        }
    });
    addr
}

/// Accepts one connection within `timeout` (so a missing one fails instead of hanging).
pub fn accept_within(listener: &std::net::TcpListener, timeout: Duration) -> TcpStream {
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + timeout;
    loop {
        match listener.accept() {
            Ok((conn, _)) => {
                conn.set_nonblocking(false).unwrap();
                conn.set_nodelay(true).unwrap();
                return conn;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("no connection accepted within {timeout:?}: {e}"),
        }
    }
}

/// Connects to a proxy's listen address.
pub fn connect(proxy: &Proxy) -> TcpStream {
    let conn = TcpStream::connect(&proxy.proxy_pack.listen).unwrap();
    conn.set_nodelay(true).unwrap();
    conn
}

/// Reads exactly `n` bytes within `timeout`.
pub fn read_n(conn: &mut TcpStream, n: usize, timeout: Duration) -> Vec<u8> {
    let deadline = Instant::now() + timeout;
    let mut out = vec![0u8; n];
    let mut got = 0;
    while got < n {
        let left = deadline
            .checked_duration_since(Instant::now())
            .unwrap_or_else(|| panic!("timed out after {got} of {n} bytes"));
        conn.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match conn.read(&mut out[got..]) {
            Ok(0) => panic!("connection closed after {got} of {n} bytes"),
            Ok(k) => got += k,
            Err(e) if is_timeout(&e) => panic!("timed out after {got} of {n} bytes"),
            Err(e) => panic!("read failed after {got} of {n} bytes: {e}"),
        }
    }
    out
}

/// Sends `msg` and expects it echoed back within 2 s.
pub fn assert_echo(conn: &mut TcpStream, msg: &[u8]) {
    conn.write_all(msg).unwrap();
    assert_eq!(read_n(conn, msg.len(), Duration::from_secs(2)), msg);
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// Asserts nothing arrives for `dur` and the connection stays open.
pub fn assert_silent_and_open(conn: &mut TcpStream, dur: Duration) {
    conn.set_read_timeout(Some(dur)).unwrap();
    let mut buf = [0u8; 64];
    match conn.read(&mut buf) {
        Err(e) if is_timeout(&e) => {}
        Ok(0) => panic!("connection closed, expected it open and silent"),
        Ok(n) => panic!("received {n} bytes, expected silence"),
        Err(e) => panic!("read failed ({e}), expected silence"),
    }
}

/// How a connection ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ending {
    /// Orderly close (FIN).
    Eof,
    /// Reset by peer (RST).
    Reset,
}

/// Waits up to `within` for the connection to end, discarding data; returns how and when.
pub fn wait_closed(conn: &mut TcpStream, within: Duration) -> (Ending, Duration) {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        let left = within
            .checked_sub(start.elapsed())
            .expect("connection still open");
        conn.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match conn.read(&mut buf) {
            Ok(0) => return (Ending::Eof, start.elapsed()),
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                return (Ending::Reset, start.elapsed())
            }
            Err(e) if is_timeout(&e) => panic!("connection still open after {within:?}"),
            Err(e) => panic!("unexpected read error {e}"),
        }
    }
}
