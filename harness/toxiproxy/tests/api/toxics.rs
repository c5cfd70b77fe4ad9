//! Each toxic's effect on real TCP traffic through a proxy to an echo server, set through
//! `toxiproxy_rust` on connections that are already open (the harness's use).

use std::io::Write;
use std::time::{Duration, Instant};

use crate::common::*;

const SHORT: Duration = Duration::from_millis(300);

#[test]
fn data_passes_unchanged_both_ways() {
    let f = Fixture::new();
    let (_proxy, mut conn) = f.echo_proxy("plain");
    let payload: Vec<u8> = (0..512 * 1024).map(|i| (i * 7 % 251) as u8).collect();
    let mut writer = conn.try_clone().unwrap();
    let sent = payload.clone();
    let t = std::thread::spawn(move || writer.write_all(&sent).unwrap());
    assert_eq!(
        read_n(&mut conn, payload.len(), Duration::from_secs(5)),
        payload
    );
    t.join().unwrap();
}

#[test]
fn latency_delays_and_removal_restores() {
    let f = Fixture::new();
    let (proxy, mut conn) = f.echo_proxy("lat");
    proxy
        .with_latency("downstream".into(), 150, 0, 1.0)
        .with_latency("upstream".into(), 50, 0, 1.0);
    let start = Instant::now();
    assert_echo(&mut conn, b"ping");
    let rtt = start.elapsed();
    assert!(rtt >= Duration::from_millis(200), "round trip {rtt:?}");
    assert!(rtt < Duration::from_millis(1000), "round trip {rtt:?}");
    proxy.delete_all_toxics().unwrap();
    let start = Instant::now();
    assert_echo(&mut conn, b"pong");
    assert!(start.elapsed() < Duration::from_millis(100));
}

#[test]
fn toxic_update_applies_to_live_connection() {
    let f = Fixture::new();
    let (proxy, mut conn) = f.echo_proxy("upd");
    proxy.with_latency("downstream".into(), 2000, 0, 1.0);
    let (status, _) = f.call(
        "POST",
        "/proxies/upd/toxics/latency_downstream",
        Some(r#"{"attributes": {"latency": 20}}"#),
    );
    assert_eq!(status, 200);
    let start = Instant::now();
    assert_echo(&mut conn, b"quick");
    let rtt = start.elapsed();
    assert!(rtt >= Duration::from_millis(20) && rtt < Duration::from_millis(1000));
}

#[test]
fn timeout_zero_is_a_silent_black_hole_and_removal_closes() {
    let f = Fixture::new();
    let (proxy, mut conn) = f.echo_proxy("hole");
    proxy.with_timeout("upstream".into(), 0, 1.0);
    conn.write_all(b"into the void").unwrap();
    assert_silent_and_open(&mut conn, SHORT);
    conn.write_all(b"still nothing").unwrap();
    assert_silent_and_open(&mut conn, SHORT);
    proxy.delete_all_toxics().unwrap();
    let (_, after) = wait_closed(&mut conn, Duration::from_secs(2));
    assert!(after < Duration::from_millis(500));
    // New connections work again.
    let mut fresh = connect(&proxy);
    assert_echo(&mut fresh, b"healed");
}

/// Upstream's `timeout` (since 2.1.4) closes its link when its input ends: a client's close
/// under `timeout` 0 on both streams reaches the server at once (the server default).
#[test]
fn timeout_lets_the_client_close_through_like_upstream() {
    let f = Fixture::new();
    let (proxy, client, mut server) = f.tcp_pair("to-up");
    proxy
        .with_timeout("upstream".into(), 0, 1.0)
        .with_timeout("downstream".into(), 0, 1.0);
    let mut client = client;
    client.write_all(b"lost").unwrap();
    drop(client);
    let (ending, after) = wait_closed(&mut server, Duration::from_secs(2));
    assert_eq!(ending, Ending::Eof);
    assert!(after < Duration::from_millis(500), "closed after {after:?}");
}

/// Likewise the server's close under a downstream `timeout` reaches the client at once.
#[test]
fn timeout_lets_the_server_close_through_like_upstream() {
    let f = Fixture::new();
    let (proxy, mut client, server) = f.tcp_pair("to-down");
    proxy.with_timeout("downstream".into(), 0, 1.0);
    drop(server);
    let (ending, after) = wait_closed(&mut client, Duration::from_secs(2));
    assert_eq!(ending, Ending::Eof);
    assert!(after < Duration::from_millis(500), "closed after {after:?}");
}

/// In partition mode a partitioned client's close must not reach the server (which keeps its
/// session until its own timeouts end it): `timeout` 0 holds the end of stream.
#[test]
fn partition_holds_the_client_close_until_the_toxics_go() {
    let f = Fixture::partition();
    let (proxy, mut client, mut server) = f.tcp_pair("part");
    proxy
        .with_timeout("upstream".into(), 0, 1.0)
        .with_timeout("downstream".into(), 0, 1.0);
    client.write_all(b"lost").unwrap();
    drop(client);
    assert_silent_and_open(&mut server, Duration::from_millis(500));
    server.write_all(b"unheard").unwrap();
    assert_silent_and_open(&mut server, Duration::from_millis(100));
    proxy.delete_all_toxics().unwrap();
    let (ending, after) = wait_closed(&mut server, Duration::from_secs(2));
    assert_eq!(ending, Ending::Eof);
    assert!(after < Duration::from_millis(500), "closed after {after:?}");
}

#[test]
fn partition_holds_the_server_close_until_the_toxic_goes() {
    let f = Fixture::partition();
    let (proxy, mut client, server) = f.tcp_pair("part-down");
    proxy.with_timeout("downstream".into(), 0, 1.0);
    drop(server);
    assert_silent_and_open(&mut client, Duration::from_millis(500));
    proxy.delete_all_toxics().unwrap();
    let (ending, after) = wait_closed(&mut client, Duration::from_secs(2));
    assert_eq!(ending, Ending::Eof);
    assert!(after < Duration::from_millis(500), "closed after {after:?}");
}

/// With upstream's semantics a `slow_close` behind the `timeout` holds a close instead (the way
/// a harness can partition through the upstream image): the client's close waits in the
/// `slow_close`, and removing the toxics closes the connection.
#[test]
fn slow_close_behind_a_timeout_holds_the_close_like_a_partition() {
    let f = Fixture::new();
    let (proxy, client, mut server) = f.tcp_pair("to-slow");
    for stream in ["upstream", "downstream"] {
        proxy
            .with_timeout(stream.into(), 0, 1.0)
            .with_slow_close(stream.into(), 86_400_000, 1.0);
    }
    let mut client = client;
    client.write_all(b"lost").unwrap();
    drop(client);
    assert_silent_and_open(&mut server, Duration::from_millis(500));
    proxy.delete_all_toxics().unwrap();
    let (ending, after) = wait_closed(&mut server, Duration::from_secs(2));
    assert_eq!(ending, Ending::Eof);
    assert!(after < Duration::from_millis(500), "closed after {after:?}");
}

#[test]
fn client_close_reaches_the_server_without_toxics() {
    let f = Fixture::new();
    let (_proxy, client, mut server) = f.tcp_pair("close");
    drop(client);
    let (ending, after) = wait_closed(&mut server, Duration::from_secs(2));
    assert_eq!(ending, Ending::Eof);
    assert!(after < Duration::from_millis(500), "closed after {after:?}");
}

#[test]
fn partition_timeout_closes_on_its_timer_not_on_the_client_close() {
    let f = Fixture::partition();
    let (proxy, mut client, mut server) = f.tcp_pair("to-close");
    proxy.with_timeout("upstream".into(), 400, 1.0);
    let start = Instant::now();
    client.write_all(b"dropped").unwrap();
    drop(client);
    assert_silent_and_open(&mut server, Duration::from_millis(200));
    let (ending, _) = wait_closed(&mut server, Duration::from_secs(3));
    let elapsed = start.elapsed();
    assert_eq!(ending, Ending::Eof);
    assert!(
        elapsed >= Duration::from_millis(400),
        "closed after {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_millis(1500),
        "closed after {elapsed:?}"
    );
}

#[test]
fn timeout_closes_after_its_delay() {
    let f = Fixture::new();
    let (proxy, mut conn) = f.echo_proxy("to");
    let start = Instant::now();
    proxy.with_timeout("downstream".into(), 200, 1.0);
    conn.write_all(b"dropped").unwrap();
    let (ending, _) = wait_closed(&mut conn, Duration::from_secs(2));
    let elapsed = start.elapsed();
    assert_eq!(ending, Ending::Eof);
    assert!(
        elapsed >= Duration::from_millis(200),
        "closed after {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_millis(1000),
        "closed after {elapsed:?}"
    );
}

#[test]
fn bandwidth_zero_stalls_then_heals_with_held_data() {
    let f = Fixture::new();
    let (proxy, mut conn) = f.echo_proxy("stall");
    proxy
        .with_bandwidth("upstream".into(), 0, 1.0)
        .with_bandwidth("downstream".into(), 0, 1.0);
    conn.write_all(b"held").unwrap();
    assert_silent_and_open(&mut conn, SHORT);
    conn.write_all(b" then more").unwrap();
    assert_silent_and_open(&mut conn, Duration::from_millis(100));
    proxy.delete_all_toxics().unwrap();
    assert_eq!(
        read_n(&mut conn, 14, Duration::from_secs(2)),
        b"held then more"
    );
    assert_echo(&mut conn, b"and after");
}

#[test]
fn bandwidth_limits_throughput() {
    let f = Fixture::new();
    let (proxy, mut conn) = f.echo_proxy("bw");
    proxy.with_bandwidth("downstream".into(), 100, 1.0); // 100 KB/s
    let payload = vec![7u8; 50_000];
    let start = Instant::now();
    conn.write_all(&payload).unwrap();
    assert_eq!(
        read_n(&mut conn, payload.len(), Duration::from_secs(3)),
        payload
    );
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(400), "took {took:?}");
    assert!(took < Duration::from_millis(1500), "took {took:?}");
}

/// A connection that starts while a `reset_peer` toxic is on the proxy gets zero linger, so
/// the toxic's close is an RST.
#[test]
fn reset_peer_resets_connections_that_start_with_it() {
    let f = Fixture::new();
    let proxy = f.proxy("rst", f.echo);
    proxy.with_reset_peer_raw(&f, "downstream", 100, 1.0);
    let mut conn = connect(&proxy);
    let start = Instant::now();
    conn.write_all(b"trigger").unwrap();
    let (ending, _) = wait_closed(&mut conn, Duration::from_secs(2));
    assert_eq!(ending, Ending::Reset);
    assert!(start.elapsed() >= Duration::from_millis(100));
}

/// Upstream sets zero linger only when a connection starts: a `reset_peer` added to a live
/// connection closes it after its timeout, but with a FIN, not an RST.
#[test]
fn reset_peer_added_to_a_live_connection_closes_it_without_rst() {
    let f = Fixture::new();
    let (proxy, mut conn) = f.echo_proxy("rst-live");
    proxy.with_reset_peer_raw(&f, "downstream", 100, 1.0);
    let start = Instant::now();
    conn.write_all(b"trigger").unwrap();
    let (ending, _) = wait_closed(&mut conn, Duration::from_secs(2));
    assert_eq!(ending, Ending::Eof);
    assert!(start.elapsed() >= Duration::from_millis(100));
}

/// The zero linger comes with the toxic's presence at the start, whatever its toxicity
/// (upstream issue #603): any close of such a connection reaches the other peer as an RST.
#[test]
fn reset_peer_present_at_the_start_makes_every_close_a_reset() {
    let f = Fixture::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = f.proxy("rst-linger", listener.local_addr().unwrap());
    proxy.with_reset_peer_raw(&f, "upstream", 0, 0.0);
    let mut client = connect(&proxy);
    let mut server = accept_within(&listener, Duration::from_secs(5));
    client.write_all(b"ping").unwrap();
    assert_eq!(read_n(&mut server, 4, Duration::from_secs(2)), b"ping");
    drop(client);
    let (ending, after) = wait_closed(&mut server, Duration::from_secs(2));
    assert_eq!(ending, Ending::Reset);
    assert!(after < Duration::from_millis(500), "closed after {after:?}");
}

#[test]
fn slow_close_delays_the_close() {
    let f = Fixture::new();
    let server = f.block_on(greet_and_close_server(b"bye"));
    let proxy = f.proxy("slow", server);
    proxy.with_slow_close("downstream".into(), 300, 1.0);
    let start = Instant::now();
    let mut conn = connect(&proxy);
    assert_eq!(read_n(&mut conn, 3, Duration::from_secs(2)), b"bye");
    let (ending, _) = wait_closed(&mut conn, Duration::from_secs(2));
    assert_eq!(ending, Ending::Eof);
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(300), "closed after {took:?}");
    // Without the toxic the close is immediate.
    proxy.delete_all_toxics().unwrap();
    let start = Instant::now();
    let mut conn = connect(&proxy);
    wait_closed(&mut conn, Duration::from_secs(2));
    assert!(start.elapsed() < Duration::from_millis(200));
}

#[test]
fn limit_data_closes_after_n_bytes() {
    let f = Fixture::new();
    let (proxy, mut conn) = f.echo_proxy("limit");
    proxy.with_limit_data("downstream".into(), 10, 1.0);
    conn.write_all(b"0123456789abcdefghij").unwrap();
    assert_eq!(read_n(&mut conn, 10, Duration::from_secs(2)), b"0123456789");
    let (ending, _) = wait_closed(&mut conn, Duration::from_secs(2));
    assert_eq!(ending, Ending::Eof);
}

#[test]
fn slicer_keeps_data_intact() {
    let f = Fixture::new();
    let (proxy, mut conn) = f.echo_proxy("slice");
    proxy.with_slicer("downstream".into(), 10, 5, 100, 1.0);
    let payload: Vec<u8> = (0..2000u32).map(|i| (i % 256) as u8).collect();
    conn.write_all(&payload).unwrap();
    assert_eq!(
        read_n(&mut conn, payload.len(), Duration::from_secs(3)),
        payload
    );
}

#[test]
fn zero_toxicity_never_applies() {
    let f = Fixture::new();
    let (proxy, mut conn) = f.echo_proxy("lucky");
    proxy.with_timeout("downstream".into(), 0, 0.0);
    assert_echo(&mut conn, b"unharmed");
    let mut fresh = connect(&proxy);
    assert_echo(&mut fresh, b"unharmed too");
}

#[test]
fn disabling_closes_existing_connections() {
    let f = Fixture::new();
    let (proxy, mut conn) = f.echo_proxy("off");
    proxy.disable().unwrap();
    wait_closed(&mut conn, Duration::from_secs(1));
    assert!(std::net::TcpStream::connect(&proxy.proxy_pack.listen).is_err());
    proxy.enable().unwrap();
    let mut fresh = connect(&proxy);
    assert_echo(&mut fresh, b"on again");
}

#[test]
fn deleting_closes_existing_connections() {
    let f = Fixture::new();
    let (proxy, mut conn) = f.echo_proxy("del");
    proxy.delete().unwrap();
    wait_closed(&mut conn, Duration::from_secs(1));
}

#[test]
fn unreachable_upstream_closes_the_client() {
    let f = Fixture::new();
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let proxy = f.proxy("dead", dead);
    let mut conn = connect(&proxy);
    wait_closed(&mut conn, Duration::from_secs(2));
}

/// `toxiproxy_rust` 0.1.6 has no call for `reset_peer`, so it is created over plain HTTP.
trait ResetPeer {
    fn with_reset_peer_raw(&self, f: &Fixture, stream: &str, timeout: u32, toxicity: f32);
}

impl ResetPeer for toxiproxy_rust::proxy::Proxy {
    fn with_reset_peer_raw(&self, f: &Fixture, stream: &str, timeout: u32, toxicity: f32) {
        let body = serde_json::json!({"type": "reset_peer", "stream": stream,
            "toxicity": toxicity, "attributes": {"timeout": timeout}});
        let path = format!("/proxies/{}/toxics", self.proxy_pack.name);
        assert_eq!(f.call("POST", &path, Some(&body.to_string())).0, 200);
        let toxics = self.toxics().unwrap();
        assert_eq!(toxics[0].r#type, "reset_peer");
    }
}
