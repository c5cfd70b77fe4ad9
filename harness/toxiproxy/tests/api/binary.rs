//! The `toxiproxy-server` binary: upstream's Go-style flags, the readiness line on stdout, a
//! clean exit on SIGTERM, and the timeout mode's flag and environment variable.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use toxiproxy_rust::client::Client;
use toxiproxy_rust::proxy::ProxyPack;
use toxiproxy_server::cli::ENV_TIMEOUT_MODE;

use crate::common::{accept_within, connect, read_n};

/// A running `toxiproxy-server` process, killed on drop.
struct Running {
    child: Child,
    /// The API address, from the readiness line.
    api: SocketAddr,
    /// The readiness line.
    ready: String,
}

impl Running {
    /// Starts the binary on an ephemeral port with `args` and the environment variable
    /// `TOXIPROXY_TIMEOUT_MODE` set to `mode` (or removed), and waits for its readiness line.
    fn start(args: &[&str], mode: Option<&str>) -> Running {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_toxiproxy-server"));
        cmd.args(["-host=127.0.0.1", "-port", "0"])
            .args(args)
            .env("LOG_LEVEL", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        match mode {
            Some(m) => cmd.env(ENV_TIMEOUT_MODE, m),
            None => cmd.env_remove(ENV_TIMEOUT_MODE),
        };
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let ready = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a log line");
        assert!(ready.contains("Starting Toxiproxy HTTP server"), "{ready}");
        let api: SocketAddr = ready
            .split_whitespace()
            .find_map(|w| w.strip_prefix("address="))
            .expect("address in the readiness line")
            .parse()
            .unwrap();
        Running { child, api, ready }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn binary_starts_logs_readiness_and_exits_on_sigterm() {
    let mut server = Running::start(&["-seed=1"], None);
    let version = Client::new(server.api).version().unwrap();
    assert!(version.contains(toxiproxy_server::VERSION));

    let status = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let start = Instant::now();
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a client's close under `timeout` 0 on both streams reaches the server through the
/// binary's proxy (upstream mode) or is held (partition mode).
fn client_close_reaches_the_server(api: SocketAddr) -> bool {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = Client::new(api);
    let proxy = client
        .populate(vec![ProxyPack::new(
            "p".into(),
            "127.0.0.1:0".into(),
            listener.local_addr().unwrap().to_string(),
        )])
        .unwrap()
        .remove(0);
    let mut conn = connect(&proxy);
    let mut server = accept_within(&listener, Duration::from_secs(5));
    conn.write_all(b"ping").unwrap();
    assert_eq!(read_n(&mut server, 4, Duration::from_secs(2)), b"ping");
    proxy
        .with_timeout("upstream".into(), 0, 1.0)
        .with_timeout("downstream".into(), 0, 1.0);
    drop(conn);
    server
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    matches!(server.read(&mut [0u8; 16]), Ok(0))
}

/// `-timeout-mode` and `TOXIPROXY_TIMEOUT_MODE` select the mode (the flag wins); without
/// either the binary has upstream's semantics; a bad value is refused like a bad flag.
#[test]
fn binary_selects_the_timeout_mode_by_flag_or_environment() {
    let cases: [(&[&str], Option<&str>, &str); 4] = [
        (&[], None, "upstream"),
        (&[], Some("partition"), "partition"),
        (&["-timeout-mode=upstream"], Some("partition"), "upstream"),
        (&["-timeout-mode", "partition"], None, "partition"),
    ];
    for (args, env, mode) in cases {
        let server = Running::start(args, env);
        assert!(
            server.ready.contains(&format!("timeout_mode={mode}")),
            "{args:?} {env:?}: {}",
            server.ready
        );
        assert_eq!(
            client_close_reaches_the_server(server.api),
            mode == "upstream",
            "{args:?} {env:?}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_toxiproxy-server"))
        .env(ENV_TIMEOUT_MODE, "sometimes")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(ENV_TIMEOUT_MODE));
}

#[test]
fn binary_version_and_bad_flags() {
    let out = Command::new(env!("CARGO_BIN_EXE_toxiproxy-server"))
        .arg("-version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(toxiproxy_server::VERSION));
    let out = Command::new(env!("CARGO_BIN_EXE_toxiproxy-server"))
        .arg("-bogus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
