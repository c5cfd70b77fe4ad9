//! The `toxiproxy-server` binary: upstream's Go-style flags, the readiness line on stdout, and
//! a clean exit on SIGTERM.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use toxiproxy_rust::client::Client;

#[test]
fn binary_starts_logs_readiness_and_exits_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toxiproxy-server"))
        .args(["-host=127.0.0.1", "-port", "0", "-seed=1"])
        .env("LOG_LEVEL", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
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
    let addr: SocketAddr = ready
        .split_whitespace()
        .find_map(|w| w.strip_prefix("address="))
        .expect("address in the readiness line")
        .parse()
        .unwrap();
    let version = Client::new(addr).version().unwrap();
    assert!(version.contains(toxiproxy_server::VERSION));

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
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
