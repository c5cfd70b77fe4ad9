//! A Toxiproxy server in this process (the workspace's `toxiproxy-server`, driven through its
//! HTTP API exactly as an upstream server would be) with one proxy in front of a TCP port.

use serde_json::{json, Value};
use toxiproxy_server::{Server, ServerHandle};

/// One proxy in front of `127.0.0.1:<upstream>`; the server stops on drop.
pub struct Proxy {
    _server: ServerHandle,
    api: String,
    http: reqwest::Client,
    /// The proxy's listen port: point clients here.
    pub port: u16,
}

/// The name of the one proxy.
const NAME: &str = "pg";

impl Proxy {
    /// Starts a server on an ephemeral port and a proxy to `127.0.0.1:<upstream>`.
    pub async fn start(upstream: u16) -> Proxy {
        let server = Server::new()
            .start("127.0.0.1:0")
            .await
            .expect("the Toxiproxy server starts");
        let api = format!("http://{}", server.local_addr());
        let http = reqwest::Client::new();
        let created: Value = http
            .post(format!("{api}/proxies"))
            .json(&json!({"name": NAME, "listen": "127.0.0.1:0",
                          "upstream": format!("127.0.0.1:{upstream}")}))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .expect("POST /proxies")
            .json()
            .await
            .expect("a proxy as JSON");
        let listen = created["listen"].as_str().unwrap_or_default();
        let port = listen
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or_else(|| panic!("a listen address with a port: {created}"));
        Proxy {
            _server: server,
            api,
            http,
            port,
        }
    }

    /// Adds toxic `name` of `kind` on `stream` (`upstream`: client to server, `downstream`).
    pub async fn add_toxic(&self, name: &str, kind: &str, stream: &str, attributes: Value) {
        self.http
            .post(format!("{}/proxies/{NAME}/toxics", self.api))
            .json(&json!({"name": name, "type": kind, "stream": stream,
                          "toxicity": 1.0, "attributes": attributes}))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .unwrap_or_else(|e| panic!("adding toxic {name}: {e}"));
    }

    /// Removes toxic `name`.
    pub async fn remove_toxic(&self, name: &str) {
        self.http
            .delete(format!("{}/proxies/{NAME}/toxics/{name}", self.api))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .unwrap_or_else(|e| panic!("removing toxic {name}: {e}"));
    }

    /// A server that stops answering, as behind a network partition: every byte either way is
    /// dropped (a `timeout` toxic with timeout 0) and every close is held (a `slow_close` of a
    /// day behind it), on both streams, so neither side learns anything. The same toxics give
    /// the same partition on upstream Toxiproxy, whose `timeout` lets a close through.
    pub async fn stall(&self) {
        self.black_hole(&["upstream", "downstream"]).await;
    }

    /// A partition that lets the client's statements through but loses every answer: the
    /// server runs what it is sent, and neither side's close arrives.
    pub async fn lose_answers(&self) {
        self.black_hole(&["downstream"]).await;
    }

    /// Drops every byte on `dropped` streams and holds every close on both.
    async fn black_hole(&self, dropped: &[&str]) {
        for stream in ["upstream", "downstream"] {
            if dropped.contains(&stream) {
                let drop = format!("stall_{stream}");
                self.add_toxic(&drop, "timeout", stream, json!({"timeout": 0}))
                    .await;
            }
            let hold = format!("hold_{stream}");
            self.add_toxic(&hold, "slow_close", stream, json!({"delay": 86_400_000}))
                .await;
        }
    }

    /// Delays every byte on `stream` by `millis`.
    pub async fn latency(&self, stream: &str, millis: u64) {
        let name = format!("latency_{stream}");
        self.add_toxic(
            &name,
            "latency",
            stream,
            json!({"latency": millis, "jitter": 0}),
        )
        .await;
    }
}
