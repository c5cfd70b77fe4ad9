//! The Toxiproxy control client: a thin async wrapper over the `toxiproxy_rust` client.
//!
//! Every call goes through `toxiproxy_rust` (a blocking reqwest 0.11 client, so it runs on
//! `spawn_blocking`, never on an async worker), against the upstream Toxiproxy 2.x HTTP API, so
//! the upstream server can replace the workspace's own. `toxiproxy_rust` 0.1.6 has two gaps,
//! filled with plain HTTP calls to the same documented API: it cannot create a `reset_peer`
//! toxic, and it can only delete all of a proxy's toxics at once (a fault's inverse removes only
//! its own toxics, so faults compose).
//!
//! Toxic names follow `toxiproxy_rust`'s (and upstream's default) convention
//! `<type>_<stream>`, e.g. `timeout_upstream`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use serde::{Deserialize, Serialize};
use toxiproxy_rust::client::Client;
use toxiproxy_rust::proxy::{Proxy, ProxyPack};

/// How long one plain HTTP call to the API may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// A direction of a proxied connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// Client to server.
    Upstream,
    /// Server to client.
    Downstream,
}

impl Stream {
    /// Both directions.
    pub const BOTH: [Stream; 2] = [Stream::Upstream, Stream::Downstream];

    /// The API's name: `upstream` or `downstream`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Upstream => "upstream",
            Stream::Downstream => "downstream",
        }
    }
}

impl fmt::Display for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A toxic to add (attributes are `u32`, as in the API; times in milliseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Toxic {
    /// Delays every chunk of data by `latency` ± `jitter` milliseconds.
    Latency {
        /// Milliseconds added.
        latency: u32,
        /// Random ± milliseconds.
        jitter: u32,
    },
    /// Limits the rate to `rate` KB/s; 0 stalls the stream (heals cleanly).
    Bandwidth {
        /// KB/s.
        rate: u32,
    },
    /// Drops all data; closes the connection after `timeout` ms, never when 0 (a black hole
    /// until removed; removing it closes the connection).
    Timeout {
        /// Milliseconds; 0 = forever.
        timeout: u32,
    },
    /// Resets the connection (RST, `SO_LINGER` 0) `timeout` ms after the first data on its
    /// stream.
    ResetPeer {
        /// Milliseconds after the first data.
        timeout: u32,
    },
    /// Delays the close of the connection by `delay` ms.
    SlowClose {
        /// Milliseconds.
        delay: u32,
    },
}

impl Toxic {
    /// The API's type name.
    pub fn type_name(&self) -> &'static str {
        match self {
            Toxic::Latency { .. } => "latency",
            Toxic::Bandwidth { .. } => "bandwidth",
            Toxic::Timeout { .. } => "timeout",
            Toxic::ResetPeer { .. } => "reset_peer",
            Toxic::SlowClose { .. } => "slow_close",
        }
    }

    /// The name it gets on `stream`: `<type>_<stream>`.
    pub fn name_on(&self, stream: Stream) -> String {
        format!("{}_{}", self.type_name(), stream)
    }

    fn attributes(&self) -> BTreeMap<String, u32> {
        let pairs: Vec<(&str, u32)> = match *self {
            Toxic::Latency { latency, jitter } => vec![("latency", latency), ("jitter", jitter)],
            Toxic::Bandwidth { rate } => vec![("rate", rate)],
            Toxic::Timeout { timeout } | Toxic::ResetPeer { timeout } => {
                vec![("timeout", timeout)]
            }
            Toxic::SlowClose { delay } => vec![("delay", delay)],
        };
        pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
    }
}

/// A toxic as the server reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToxicState {
    /// Its name.
    pub name: String,
    /// Its type, e.g. `timeout`.
    pub kind: String,
    /// `upstream` or `downstream`.
    pub stream: String,
    /// Probability of applying to a connection.
    pub toxicity: f32,
    /// Its attributes.
    pub attributes: BTreeMap<String, u32>,
}

/// A proxy as the server reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProxyState {
    /// Its name.
    pub name: String,
    /// The address it listens on, as seen by the server (inside its container, for Docker).
    pub listen: String,
    /// The address it forwards to, as seen by the server.
    pub upstream: String,
    /// Whether it accepts and forwards connections.
    pub enabled: bool,
    /// Its toxics.
    pub toxics: Vec<ToxicState>,
}

impl From<ProxyPack> for ProxyState {
    fn from(p: ProxyPack) -> Self {
        ProxyState {
            name: p.name,
            listen: p.listen,
            upstream: p.upstream,
            enabled: p.enabled,
            toxics: p
                .toxics
                .into_iter()
                .map(|t| ToxicState {
                    name: t.name,
                    kind: t.r#type,
                    stream: t.stream,
                    toxicity: t.toxicity,
                    attributes: t.attributes.into_iter().collect(),
                })
                .collect(),
        }
    }
}

/// A proxy to create: `name`, `listen` (as seen by the server; port 0 = ephemeral) and
/// `upstream` (as seen by the server).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxySpec {
    /// The proxy's name.
    pub name: String,
    /// Where it listens.
    pub listen: String,
    /// Where it forwards to.
    pub upstream: String,
}

/// A client of one Toxiproxy server's HTTP API. Cheap to clone.
#[derive(Clone)]
pub struct Toxiproxy {
    api: SocketAddr,
    /// Created, used and replaced only on blocking threads (the blocking reqwest client must
    /// not be built inside the async runtime).
    client: Arc<Mutex<Option<Client>>>,
    http: reqwest::Client,
}

impl fmt::Debug for Toxiproxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Toxiproxy").field("api", &self.api).finish()
    }
}

impl Toxiproxy {
    /// A client of the API at `api` (e.g. `127.0.0.1:8474`). Connects lazily.
    pub fn new(api: SocketAddr) -> Toxiproxy {
        let http = reqwest::Client::builder()
            .timeout(HTTP_TIMEOUT)
            .no_proxy()
            .build()
            .unwrap_or_default();
        Toxiproxy {
            api,
            client: Arc::default(),
            http,
        }
    }

    /// The API's address.
    pub fn api(&self) -> SocketAddr {
        self.api
    }

    /// Runs `f` with the `toxiproxy_rust` client on a blocking thread. A panic inside the
    /// client (it panics when a toxic cannot be posted) becomes an error, and the client,
    /// whose lock it poisoned, is replaced.
    async fn call<T, F>(&self, what: String, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Client) -> Result<T, String> + Send + 'static,
    {
        let slot = self.client.clone();
        let api = self.api;
        let joined = tokio::task::spawn_blocking(move || {
            let client = {
                let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert_with(|| Client::new(api)).clone()
            };
            match std::panic::catch_unwind(AssertUnwindSafe(|| f(&client))) {
                Ok(result) => result,
                Err(panic) => {
                    *slot.lock().unwrap_or_else(|p| p.into_inner()) = None;
                    Err(panic_text(&*panic))
                }
            }
        })
        .await;
        match joined {
            Ok(result) => result.map_err(|e| anyhow!("toxiproxy at {api}: {what}: {e}")),
            Err(e) => bail!("toxiproxy at {api}: {what}: the blocking task failed: {e}"),
        }
    }

    /// Waits until the API answers (`GET /version`), for at most `limit`; returns the version.
    ///
    /// # Errors
    /// The API did not answer in time.
    pub async fn wait_ready(&self, limit: Duration) -> anyhow::Result<String> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let attempt = self
                .call("version".into(), |c| {
                    if c.is_running() {
                        c.version()
                    } else {
                        Err("not listening yet".into())
                    }
                })
                .await;
            match attempt {
                Ok(v) => return Ok(v.trim().to_owned()),
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(e.context(format!("the Toxiproxy API did not answer in {limit:?}")))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// Creates (or replaces) proxies in one call (`POST /populate`); returns them as the server
    /// reports them (a listen port 0 comes back as the bound port).
    ///
    /// # Errors
    /// The API refused or did not answer.
    pub async fn populate(&self, proxies: Vec<ProxySpec>) -> anyhow::Result<Vec<ProxyState>> {
        let names: Vec<String> = proxies.iter().map(|p| p.name.clone()).collect();
        let created = self
            .call(format!("populate {names:?}"), move |c| {
                c.populate(
                    proxies
                        .into_iter()
                        .map(|p| ProxyPack::new(p.name, p.listen, p.upstream))
                        .collect(),
                )
                .map(|v| {
                    v.into_iter()
                        .map(|p| ProxyState::from(p.proxy_pack))
                        .collect()
                })
            })
            .await?;
        let created: Vec<ProxyState> = created;
        for name in &names {
            if !created.iter().any(|p| &p.name == name) {
                bail!("toxiproxy at {}: populate did not create {name}", self.api);
            }
        }
        Ok(created)
    }

    /// One proxy, as the server reports it.
    ///
    /// # Errors
    /// No such proxy, or the API did not answer.
    pub async fn proxy(&self, name: &str) -> anyhow::Result<ProxyState> {
        let owned = name.to_owned();
        self.call(format!("find proxy {name}"), move |c| {
            c.find_proxy(&owned).map(|p| ProxyState::from(p.proxy_pack))
        })
        .await
    }

    /// Every proxy, by name.
    ///
    /// # Errors
    /// The API did not answer.
    pub async fn proxies(&self) -> anyhow::Result<BTreeMap<String, ProxyState>> {
        self.call("list proxies".into(), |c| {
            c.all().map(|all| {
                all.into_iter()
                    .map(|(k, p)| (k, ProxyState::from(p.proxy_pack)))
                    .collect()
            })
        })
        .await
    }

    /// Enables or disables a proxy. Disabling closes its existing connections and refuses new
    /// ones; enabling listens again on the same address.
    ///
    /// # Errors
    /// No such proxy, or the API refused.
    pub async fn set_enabled(&self, name: &str, enabled: bool) -> anyhow::Result<()> {
        let owned = name.to_owned();
        let verb = if enabled { "enable" } else { "disable" };
        let state = self
            .call(format!("{verb} {name}"), move |c| {
                let proxy = c.find_proxy(&owned)?;
                if enabled {
                    proxy.enable()?;
                } else {
                    proxy.disable()?;
                }
                c.find_proxy(&owned).map(|p| ProxyState::from(p.proxy_pack))
            })
            .await?;
        if state.enabled != enabled {
            bail!(
                "toxiproxy at {}: {name} is still enabled={} after {verb}",
                self.api,
                state.enabled
            );
        }
        Ok(())
    }

    /// The toxics of a proxy.
    ///
    /// # Errors
    /// No such proxy, or the API did not answer.
    pub async fn toxics(&self, name: &str) -> anyhow::Result<Vec<ToxicState>> {
        Ok(self.proxy(name).await?.toxics)
    }

    /// Adds `toxic` on `stream` of proxy `name` with toxicity 1.0 and checks that the server
    /// has it; returns its name (`<type>_<stream>`). Adding a toxic that exists keeps it.
    ///
    /// # Errors
    /// No such proxy, or the server does not have the toxic afterwards.
    pub async fn add_toxic(
        &self,
        name: &str,
        stream: Stream,
        toxic: Toxic,
    ) -> anyhow::Result<String> {
        let toxic_name = toxic.name_on(stream);
        let owned = name.to_owned();
        let state = match toxic {
            Toxic::ResetPeer { .. } => {
                // `toxiproxy_rust` cannot create this type: the API's own call.
                self.post_toxic(name, stream, &toxic).await?;
                self.proxy(name).await?
            }
            _ => {
                self.call(format!("add {toxic_name} to {name}"), move |c| {
                    let proxy = c.find_proxy(&owned)?;
                    add_with_client(&proxy, stream, toxic);
                    c.find_proxy(&owned).map(|p| ProxyState::from(p.proxy_pack))
                })
                .await?
            }
        };
        if !state.toxics.iter().any(|t| t.name == toxic_name) {
            bail!(
                "toxiproxy at {}: {toxic_name} is not on {name} after adding it (toxics: {:?})",
                self.api,
                state.toxics.iter().map(|t| &t.name).collect::<Vec<_>>()
            );
        }
        Ok(toxic_name)
    }

    /// Removes one toxic by name; a toxic that is not there is not an error.
    ///
    /// # Errors
    /// The API refused or did not answer.
    pub async fn remove_toxic(&self, name: &str, toxic_name: &str) -> anyhow::Result<()> {
        // `toxiproxy_rust` deletes all toxics or none: the API's own call.
        let url = format!("http://{}/proxies/{name}/toxics/{toxic_name}", self.api);
        let response = self
            .http
            .delete(&url)
            .send()
            .await
            .with_context(|| format!("toxiproxy: DELETE {url}"))?;
        let status = response.status();
        if status.is_success() || status == reqwest::StatusCode::NOT_FOUND {
            Ok(())
        } else {
            let body = response.text().await.unwrap_or_default();
            bail!("toxiproxy: DELETE {url}: {status}: {}", body.trim())
        }
    }

    /// Removes every toxic of a proxy.
    ///
    /// # Errors
    /// No such proxy, or the API did not answer.
    pub async fn clear_toxics(&self, name: &str) -> anyhow::Result<()> {
        let owned = name.to_owned();
        self.call(format!("delete the toxics of {name}"), move |c| {
            c.find_proxy(&owned)?.delete_all_toxics()
        })
        .await
    }

    /// Enables every proxy and removes every toxic (`POST /reset`).
    ///
    /// # Errors
    /// The API did not answer.
    pub async fn reset(&self) -> anyhow::Result<()> {
        self.call("reset".into(), |c| c.reset()).await
    }

    /// The records of proxy `name`'s wire journal after `after` (an extension of the API that
    /// the workspace's server has and upstream Toxiproxy has not: `Ok(None)` there). What this
    /// returns is forgotten by the server: one reader per proxy.
    ///
    /// # Errors
    /// No such proxy, or the API did not answer or answered something else than a page.
    pub async fn journal(&self, name: &str, after: u64) -> anyhow::Result<Option<wiretap::Page>> {
        let url = format!(
            "http://{}{}?after={after}",
            self.api,
            wiretap::journal_path(name)
        );
        let response =
            (self.http.get(&url).send().await).with_context(|| format!("toxiproxy: GET {url}"))?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if status.is_success() {
            let page = serde_json::from_str(&text)
                .with_context(|| format!("toxiproxy: GET {url}: not a journal page"))?;
            return Ok(Some(page));
        }
        // A missing proxy is the API's JSON error; a missing route (upstream) is plain text.
        let api_error = serde_json::from_str::<serde_json::Value>(&text).is_ok();
        if status == reqwest::StatusCode::NOT_FOUND && !api_error {
            return Ok(None);
        }
        bail!("toxiproxy: GET {url}: {status}: {}", text.trim())
    }

    /// Makes each live connection of proxy `name` run `sql` on its session, once, as soon as
    /// the session is idle within `within` (an extension of the API that the workspace's server
    /// has and upstream Toxiproxy has not).
    ///
    /// # Errors
    /// No such proxy, an upstream Toxiproxy (no such route), or the API did not answer.
    pub async fn inject(&self, name: &str, sql: &str, within: Duration) -> anyhow::Result<()> {
        let url = format!("http://{}{}", self.api, wiretap::inject_path(name));
        let body = wiretap::Injection {
            sql: sql.to_owned(),
            within_ms: u64::try_from(within.as_millis()).unwrap_or(u64::MAX),
        };
        let response = (self.http.post(&url).json(&body).send().await)
            .with_context(|| format!("toxiproxy: POST {url}"))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let text = response.text().await.unwrap_or_default();
        let api_error = serde_json::from_str::<serde_json::Value>(&text).is_ok();
        if status == reqwest::StatusCode::NOT_FOUND && !api_error {
            bail!("toxiproxy: POST {url}: this Toxiproxy cannot run a statement on a session (needs the harness's proxy)");
        }
        bail!("toxiproxy: POST {url}: {status}: {}", text.trim())
    }

    async fn post_toxic(&self, name: &str, stream: Stream, toxic: &Toxic) -> anyhow::Result<()> {
        let url = format!("http://{}/proxies/{name}/toxics", self.api);
        let body = serde_json::json!({
            "name": toxic.name_on(stream),
            "type": toxic.type_name(),
            "stream": stream.as_str(),
            "toxicity": 1.0,
            "attributes": toxic.attributes(),
        });
        let response = self
            .http
            .post(&url)
            .json(&body)
            .send()
            .await
            .with_context(|| format!("toxiproxy: POST {url}"))?;
        let status = response.status();
        // 409: it exists already, which is what was asked for.
        if status.is_success() || status == reqwest::StatusCode::CONFLICT {
            Ok(())
        } else {
            let text = response.text().await.unwrap_or_default();
            bail!("toxiproxy: POST {url}: {status}: {}", text.trim())
        }
    }
}

/// Adds a toxic through `toxiproxy_rust`'s typed calls (which panic when the request cannot be
/// sent, and ignore the status: the caller checks the result).
fn add_with_client(proxy: &Proxy, stream: Stream, toxic: Toxic) {
    let s = stream.as_str().to_owned();
    match toxic {
        Toxic::Latency { latency, jitter } => {
            proxy.with_latency(s, latency, jitter, 1.0);
        }
        Toxic::Bandwidth { rate } => {
            proxy.with_bandwidth(s, rate, 1.0);
        }
        Toxic::Timeout { timeout } => {
            proxy.with_timeout(s, timeout, 1.0);
        }
        Toxic::SlowClose { delay } => {
            proxy.with_slow_close(s, delay, 1.0);
        }
        Toxic::ResetPeer { .. } => unreachable!("reset_peer is posted over plain HTTP"),
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "the client panicked".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toxic_names_follow_the_client_convention() {
        assert_eq!(
            Toxic::Timeout { timeout: 0 }.name_on(Stream::Upstream),
            "timeout_upstream"
        );
        assert_eq!(
            Toxic::ResetPeer { timeout: 0 }.name_on(Stream::Downstream),
            "reset_peer_downstream"
        );
        assert_eq!(
            Toxic::Latency {
                latency: 5,
                jitter: 1
            }
            .attributes()
            .get("jitter"),
            Some(&1)
        );
    }

    /// Drives the in-process server through every call of the wrapper.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn drives_the_bundled_server() {
        let server = toxiproxy_server::Server::new()
            .start("127.0.0.1:0")
            .await
            .expect("server");
        let tp = Toxiproxy::new(server.local_addr());
        tp.wait_ready(Duration::from_secs(5)).await.expect("ready");
        let made = tp
            .populate(vec![ProxySpec {
                name: "p".into(),
                listen: "127.0.0.1:0".into(),
                upstream: "127.0.0.1:9".into(),
            }])
            .await
            .expect("populate");
        assert_ne!(made[0].listen, "127.0.0.1:0", "the bound port comes back");
        for toxic in [
            Toxic::Timeout { timeout: 0 },
            Toxic::ResetPeer { timeout: 0 },
            Toxic::Latency {
                latency: 10,
                jitter: 0,
            },
        ] {
            tp.add_toxic("p", Stream::Upstream, toxic)
                .await
                .expect("add");
        }
        assert_eq!(tp.toxics("p").await.unwrap().len(), 3);
        tp.remove_toxic("p", "timeout_upstream").await.unwrap();
        tp.remove_toxic("p", "timeout_upstream").await.unwrap();
        assert_eq!(tp.toxics("p").await.unwrap().len(), 2);
        tp.set_enabled("p", false).await.unwrap();
        assert!(!tp.proxy("p").await.unwrap().enabled);
        tp.reset().await.unwrap();
        let p = tp.proxy("p").await.unwrap();
        assert!(p.enabled && p.toxics.is_empty());
        assert!(tp.proxy("nope").await.is_err());
        assert!(tp
            .add_toxic("nope", Stream::Upstream, Toxic::Bandwidth { rate: 0 })
            .await
            .is_err());
        server.shutdown().await;
    }
}
