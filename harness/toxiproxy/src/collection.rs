//! The proxies of a server and the operations of the HTTP API on them, with upstream's rules.
//!
//! One async mutex guards the whole collection: API calls are rare and short (a stop waits only
//! for connection tasks to notice their cancellation), and it keeps every call atomic.

use std::collections::BTreeMap;

use serde_json::Value;
use tracing::info;

use crate::error::ApiError;
use crate::proxy::{Proxy, ProxyOptions, ProxyView};
use crate::toxic::{json_kind, opt_bool, opt_string, ToxicView};

/// A proxy as given to create or populate.
struct ProxyInput {
    name: String,
    listen: String,
    upstream: String,
    enabled: Option<bool>,
}

fn parse_proxy_input(v: &Value) -> Result<ProxyInput, ApiError> {
    let obj = v.as_object().ok_or_else(|| {
        ApiError::bad_body(format!("expected a JSON object, got {}", json_kind(v)))
    })?;
    Ok(ProxyInput {
        name: opt_string(obj, "name")?.unwrap_or_default(),
        listen: opt_string(obj, "listen")?.unwrap_or_default(),
        upstream: opt_string(obj, "upstream")?.unwrap_or_default(),
        enabled: opt_bool(obj, "enabled")?,
    })
}

/// Parses a request body as JSON (an empty body is Go's `EOF` error).
pub(crate) fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_body("EOF"));
    }
    serde_json::from_slice(body).map_err(ApiError::bad_body)
}

/// The proxies, by name.
#[derive(Debug)]
pub(crate) struct Proxies {
    map: BTreeMap<String, Proxy>,
    options: ProxyOptions,
}

impl Proxies {
    /// An empty collection.
    pub fn new(options: ProxyOptions) -> Self {
        Self {
            map: BTreeMap::new(),
            options,
        }
    }

    fn get_mut(&mut self, name: &str) -> Result<&mut Proxy, ApiError> {
        self.map.get_mut(name).ok_or_else(ApiError::proxy_not_found)
    }

    /// `GET /proxies`: every proxy, by name.
    pub fn index(&self) -> BTreeMap<String, ProxyView> {
        self.map
            .iter()
            .map(|(k, p)| (k.clone(), p.view()))
            .collect()
    }

    /// `GET /proxies/{name}`.
    pub fn show(&self, name: &str) -> Result<ProxyView, ApiError> {
        self.map
            .get(name)
            .map(Proxy::view)
            .ok_or_else(ApiError::proxy_not_found)
    }

    /// `GET /proxies/{name}/journal`: the proxy's wire journal.
    pub fn journal(&self, name: &str) -> Result<std::sync::Arc<crate::journal::Journal>, ApiError> {
        self.map
            .get(name)
            .map(|p| p.journal.clone())
            .ok_or_else(ApiError::proxy_not_found)
    }

    /// `POST /proxies/{name}/inject`: the proxy's connections run `injection`'s statement.
    pub fn inject(&self, name: &str, injection: wiretap::Injection) -> Result<(), ApiError> {
        let proxy = self.map.get(name).ok_or_else(ApiError::proxy_not_found)?;
        proxy.inject(injection);
        Ok(())
    }

    /// `POST /proxies`: creates (and by default starts) a proxy.
    pub async fn create(&mut self, body: &Value) -> Result<ProxyView, ApiError> {
        let input = parse_proxy_input(body)?;
        if input.name.is_empty() {
            return Err(ApiError::missing_field("name"));
        }
        if input.upstream.is_empty() {
            return Err(ApiError::missing_field("upstream"));
        }
        if self.map.contains_key(&input.name) {
            return Err(ApiError::proxy_exists());
        }
        let mut proxy = Proxy::new(
            input.name.clone(),
            input.listen,
            input.upstream,
            self.options.clone(),
        );
        if input.enabled.unwrap_or(true) {
            proxy.start().await?;
        }
        let view = proxy.view();
        info!(name = %view.name, listen = %view.listen, upstream = %view.upstream,
            enabled = view.enabled, "Created proxy");
        self.map.insert(input.name, proxy);
        Ok(view)
    }

    /// `POST /populate`: creates or replaces each proxy of a list, in order, so a name given
    /// twice ends as its later entry (the answer lists both). The whole list is validated
    /// first; a proxy whose listen and upstream are unchanged is kept as it is (toxics and
    /// connections included; the listen address is compared resolved, so `localhost:8666`
    /// keeps a proxy bound to `127.0.0.1:8666`), a changed one is replaced. On an error the
    /// proxies applied so far stay, and the error is returned with them.
    pub async fn populate(&mut self, body: &Value) -> (Vec<ProxyView>, Option<ApiError>) {
        let inputs = match self.parse_populate(body) {
            Ok(inputs) => inputs,
            Err(e) => return (Vec::new(), Some(e)),
        };
        let mut views: Vec<ProxyView> = Vec::with_capacity(inputs.len());
        for input in inputs {
            match self.add_or_replace(input).await {
                Ok((view, replaced)) => {
                    if replaced {
                        // A name given again in this list: upstream answers the proxies as
                        // they end up, so the earlier entry shows stopped.
                        for earlier in views.iter_mut().filter(|v| v.name == view.name) {
                            earlier.enabled = false;
                        }
                    }
                    views.push(view);
                }
                Err(e) => return (views, Some(e)),
            }
        }
        (views, None)
    }

    fn parse_populate(&self, body: &Value) -> Result<Vec<ProxyInput>, ApiError> {
        let list = body.as_array().ok_or_else(|| {
            ApiError::bad_body(format!(
                "expected a JSON array of proxies, got {}",
                json_kind(body)
            ))
        })?;
        let mut inputs: Vec<ProxyInput> = Vec::with_capacity(list.len());
        for (i, v) in list.iter().enumerate() {
            let input = parse_proxy_input(v)?;
            if input.name.is_empty() {
                return Err(ApiError::missing_field(format!("name at proxy {}", i + 1)));
            }
            if input.upstream.is_empty() {
                return Err(ApiError::missing_field(format!(
                    "upstream at proxy {}",
                    i + 1
                )));
            }
            inputs.push(input);
        }
        Ok(inputs)
    }

    /// Upstream's `AddOrReplace`; also says whether an existing proxy was stopped and replaced.
    async fn add_or_replace(&mut self, input: ProxyInput) -> Result<(ProxyView, bool), ApiError> {
        let mut replaced = false;
        if let Some(existing) = self.map.get_mut(&input.name) {
            if !existing.differs(&input.listen, &input.upstream).await? {
                return Ok((existing.view(), false));
            }
            existing.stop().await;
            replaced = true;
        }
        let mut proxy = Proxy::new(
            input.name.clone(),
            input.listen,
            input.upstream,
            self.options.clone(),
        );
        if input.enabled.unwrap_or(true) {
            proxy.start().await?;
        }
        let view = proxy.view();
        info!(name = %view.name, listen = %view.listen, upstream = %view.upstream,
            enabled = view.enabled, "Populated proxy");
        self.map.insert(input.name, proxy);
        Ok((view, replaced))
    }

    /// `POST /proxies/{name}`: changes listen, upstream or enabled (a changed address, compared
    /// resolved like `populate` does, restarts the proxy, which closes its connections).
    pub async fn update(&mut self, name: &str, body: &Value) -> Result<ProxyView, ApiError> {
        let proxy = self.get_mut(name)?;
        let obj = body.as_object().ok_or_else(|| {
            ApiError::bad_body(format!("expected a JSON object, got {}", json_kind(body)))
        })?;
        let listen = opt_string(obj, "listen")?.unwrap_or_else(|| proxy.listen.clone());
        let upstream = opt_string(obj, "upstream")?.unwrap_or_else(|| proxy.upstream.clone());
        let enabled = opt_bool(obj, "enabled")?.unwrap_or(proxy.enabled());
        if proxy.differs(&listen, &upstream).await? {
            proxy.stop().await;
            proxy.listen = listen;
            proxy.upstream = upstream;
        }
        if enabled != proxy.enabled() {
            if enabled {
                proxy.start().await?;
            } else {
                proxy.stop().await;
            }
        }
        let view = proxy.view();
        info!(name = %view.name, listen = %view.listen, upstream = %view.upstream,
            enabled = view.enabled, "Updated proxy");
        Ok(view)
    }

    /// `DELETE /proxies/{name}`: stops the proxy (closing its connections) and removes it.
    pub async fn remove(&mut self, name: &str) -> Result<(), ApiError> {
        let mut proxy = self
            .map
            .remove(name)
            .ok_or_else(ApiError::proxy_not_found)?;
        proxy.stop().await;
        info!(name = %name, "Deleted proxy");
        Ok(())
    }

    /// `POST /reset`: enables every proxy and removes every toxic.
    pub async fn reset(&mut self) -> Result<(), ApiError> {
        for proxy in self.map.values_mut() {
            proxy.start().await?;
            proxy.toxics.clear();
        }
        info!("Reset all proxies and toxics");
        Ok(())
    }

    /// Stops every proxy (server shutdown).
    pub async fn stop_all(&mut self) {
        for proxy in self.map.values_mut() {
            proxy.stop().await;
        }
    }

    /// `GET /proxies/{name}/toxics`.
    pub fn toxics(&self, name: &str) -> Result<Vec<ToxicView>, ApiError> {
        self.map
            .get(name)
            .map(|p| p.toxics.views())
            .ok_or_else(ApiError::proxy_not_found)
    }

    /// `POST /proxies/{name}/toxics`.
    pub fn add_toxic(&mut self, name: &str, body: &Value) -> Result<ToxicView, ApiError> {
        let proxy = self.get_mut(name)?;
        let view = proxy.toxics.add_json(body)?;
        info!(proxy = %name, toxic = %view.name, r#type = %view.kind, stream = %view.stream,
            toxicity = view.toxicity, attributes = %serde_json::Value::Object(view.attributes.clone()),
            "Created toxic");
        Ok(view)
    }

    /// `GET /proxies/{name}/toxics/{toxic}`.
    pub fn show_toxic(&self, name: &str, toxic: &str) -> Result<ToxicView, ApiError> {
        self.map
            .get(name)
            .ok_or_else(ApiError::proxy_not_found)?
            .toxics
            .get(toxic)
    }

    /// `POST /proxies/{name}/toxics/{toxic}`.
    pub fn update_toxic(
        &mut self,
        name: &str,
        toxic: &str,
        body: &Value,
    ) -> Result<ToxicView, ApiError> {
        let view = self.get_mut(name)?.toxics.update_json(toxic, body)?;
        info!(proxy = %name, toxic = %view.name, toxicity = view.toxicity,
            attributes = %serde_json::Value::Object(view.attributes.clone()), "Updated toxic");
        Ok(view)
    }

    /// `DELETE /proxies/{name}/toxics/{toxic}`.
    pub fn remove_toxic(&mut self, name: &str, toxic: &str) -> Result<(), ApiError> {
        self.get_mut(name)?.toxics.remove(toxic)?;
        info!(proxy = %name, toxic = %toxic, "Deleted toxic");
        Ok(())
    }
}
