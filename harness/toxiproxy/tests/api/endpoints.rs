//! Every endpoint, through `toxiproxy_rust` where it has a call and plain HTTP for the status
//! codes and shapes it hides.

use std::net::TcpStream;

use serde_json::{json, Value};
use toxiproxy_rust::proxy::ProxyPack;

use crate::common::*;

#[test]
fn version_is_upstream_json() {
    let f = Fixture::new();
    assert!(f.client.is_running());
    let body = f.client.version().unwrap();
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["version"], toxiproxy_server::VERSION);
    assert_eq!(f.call("GET", "/version", None).0, 200);
}

#[test]
fn populate_all_and_find() {
    let f = Fixture::new();
    let proxies = f
        .client
        .populate(vec![
            ProxyPack::new("a".into(), "127.0.0.1:0".into(), f.echo.to_string()),
            ProxyPack::new("b".into(), "localhost:0".into(), f.echo.to_string()),
        ])
        .unwrap();
    assert_eq!(proxies.len(), 2);
    for p in &proxies {
        let listen: std::net::SocketAddr = p.proxy_pack.listen.parse().unwrap();
        assert_ne!(listen.port(), 0, "listen shows the bound port");
        assert!(listen.ip().is_loopback());
        assert!(p.proxy_pack.enabled);
    }
    let all = f.client.all().unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all["b"].proxy_pack.upstream, f.echo.to_string());
    let a = f.client.find_proxy("a").unwrap();
    assert_eq!(a.proxy_pack.listen, proxies[0].proxy_pack.listen);
    assert!(f.client.find_proxy("nope").is_err());
    assert!(f.client.find_and_reset_proxy("nope").is_err());

    let (status, body) = f.call("GET", "/proxies", None);
    assert_eq!(status, 200);
    assert_eq!(body["a"]["toxics"], json!([]));
    let (status, body) = f.call("GET", "/proxies/a", None);
    assert_eq!(status, 200);
    assert_eq!(body["name"], "a");
    assert_eq!(body["enabled"], true);
    let (status, body) = f.call("GET", "/proxies/nope", None);
    assert_eq!(status, 404);
    assert_eq!(body, json!({"error": "proxy not found", "status": 404}));
}

#[test]
fn populate_raw_answers_and_errors() {
    let f = Fixture::new();
    let up = f.echo.to_string();
    let list = json!([{"name": "p", "listen": "127.0.0.1:0", "upstream": up}]).to_string();
    let (status, body) = f.call("POST", "/populate", Some(&list));
    assert_eq!(status, 201);
    let listen = body["proxies"][0]["listen"].as_str().unwrap().to_owned();
    // Unchanged listen and upstream: the proxy is kept, toxics included.
    f.client
        .find_proxy("p")
        .unwrap()
        .with_latency("downstream".into(), 1, 0, 1.0);
    let same = json!([{"name": "p", "listen": listen, "upstream": up}]).to_string();
    let (status, body) = f.call("POST", "/populate", Some(&same));
    assert_eq!(status, 201);
    assert_eq!(
        body["proxies"][0]["toxics"][0]["name"],
        "latency_downstream"
    );
    // Disabled on creation.
    let off = json!([{"name": "q", "listen": "127.0.0.1:0", "upstream": up, "enabled": false}]);
    let (_, body) = f.call("POST", "/populate", Some(&off.to_string()));
    assert_eq!(body["proxies"][0]["enabled"], false);
    // Errors: bad JSON, not a list, missing fields.
    let (status, body) = f.call("POST", "/populate", Some("{"));
    assert_eq!(status, 400);
    assert_eq!(body["status"], 400);
    assert_eq!(body["proxies"], json!([]));
    assert_eq!(f.call("POST", "/populate", Some("{}")).0, 400);
    let missing = json!([{"name": "r", "listen": "127.0.0.1:0"}]).to_string();
    let (status, body) = f.call("POST", "/populate", Some(&missing));
    assert_eq!(status, 400);
    assert_eq!(body["error"], "missing required field: upstream at proxy 1");
}

/// Upstream resolves a listen address before comparing it with the bound one (2.12's fix #631),
/// so repeating a `/populate` that names the host (`localhost:PORT`, stored as `127.0.0.1:PORT`)
/// keeps the proxy: its toxics and its open connections stay. An update naming the same address
/// does not restart it either.
#[test]
fn populate_by_host_name_is_safe_to_repeat() {
    let f = Fixture::new();
    let up = f.echo.to_string();
    let first = json!([{"name": "h", "listen": "localhost:0", "upstream": up}]).to_string();
    let (status, body) = f.call("POST", "/populate", Some(&first));
    assert_eq!(status, 201, "{body}");
    let bound: std::net::SocketAddr = body["proxies"][0]["listen"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(bound.ip().is_loopback());
    let proxy = f.client.find_proxy("h").unwrap();
    proxy.with_latency("downstream".into(), 1, 0, 1.0);
    let mut conn = TcpStream::connect(bound).unwrap();
    assert_echo(&mut conn, b"before");

    let by_name = format!("localhost:{}", bound.port());
    let again = json!([{"name": "h", "listen": by_name, "upstream": up}]).to_string();
    let (status, body) = f.call("POST", "/populate", Some(&again));
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["proxies"][0]["listen"], bound.to_string());
    assert_eq!(
        body["proxies"][0]["toxics"][0]["name"],
        "latency_downstream"
    );
    assert_echo(&mut conn, b"kept by populate");

    let update = json!({"listen": by_name}).to_string();
    let (status, body) = f.call("POST", "/proxies/h", Some(&update));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["listen"], bound.to_string());
    assert_echo(&mut conn, b"kept by update");
}

/// A name given twice in one `/populate` list is not refused: upstream applies the entries in
/// order, so the later one replaces the earlier (which it stops), and the answer lists both.
#[test]
fn populate_later_entry_of_a_name_wins() {
    let f = Fixture::new();
    let other = f.block_on(echo_server());
    let list = json!([
        {"name": "twice", "listen": "127.0.0.1:0", "upstream": f.echo.to_string()},
        {"name": "twice", "listen": "127.0.0.1:0", "upstream": other.to_string()},
    ])
    .to_string();
    let (status, body) = f.call("POST", "/populate", Some(&list));
    assert_eq!(status, 201, "{body}");
    let answered = body["proxies"].as_array().unwrap();
    assert_eq!(answered.len(), 2, "{body}");
    assert_eq!(answered[0]["upstream"], f.echo.to_string());
    assert_eq!(
        answered[0]["enabled"], false,
        "the earlier entry was stopped"
    );
    assert_eq!(answered[1]["upstream"], other.to_string());
    assert_eq!(answered[1]["enabled"], true);
    let (_, all) = f.call("GET", "/proxies", None);
    assert_eq!(all.as_object().unwrap().len(), 1);
    assert_eq!(all["twice"]["upstream"], other.to_string());
    assert_eq!(all["twice"]["listen"], answered[1]["listen"]);
    let earlier = answered[0]["listen"].as_str().unwrap();
    assert!(
        TcpStream::connect(earlier).is_err(),
        "the earlier entry does not listen"
    );
    let mut conn = TcpStream::connect(answered[1]["listen"].as_str().unwrap()).unwrap();
    assert_echo(&mut conn, b"the later one");
}

#[test]
fn create_conflict_and_bad_input() {
    let f = Fixture::new();
    let body = json!({"name": "c", "listen": "127.0.0.1:0", "upstream": f.echo.to_string()});
    let (status, created) = f.call("POST", "/proxies", Some(&body.to_string()));
    assert_eq!(status, 201);
    assert_eq!(created["enabled"], true);
    assert_eq!(created["toxics"], json!([]));
    let (status, err) = f.call("POST", "/proxies", Some(&body.to_string()));
    assert_eq!(status, 409);
    assert_eq!(err, json!({"error": "proxy already exists", "status": 409}));
    let (status, err) = f.call("POST", "/proxies", Some(r#"{"name": "d"}"#));
    assert_eq!(status, 400);
    assert_eq!(err["error"], "missing required field: upstream");
    assert_eq!(f.call("POST", "/proxies", Some("not json")).0, 400);
    assert_eq!(f.call("POST", "/proxies", None).0, 400);
    assert_eq!(
        f.call(
            "POST",
            "/proxies",
            Some(r#"{"name": 1, "upstream": "x:1"}"#)
        )
        .0,
        400
    );
    // Listening on a port in use is a 500, as upstream.
    let busy = json!({"name": "e", "listen": created["listen"], "upstream": "127.0.0.1:1"});
    let (status, err) = f.call("POST", "/proxies", Some(&busy.to_string()));
    assert_eq!(status, 500);
    assert!(err["error"].as_str().unwrap().starts_with("listen tcp"));
    assert_eq!(f.call("GET", "/proxies/e", None).0, 404);
}

#[test]
fn update_disable_enable_and_readdress() {
    let f = Fixture::new();
    let proxy = f.proxy("u", f.echo);
    let listen = proxy.proxy_pack.listen.clone();
    proxy.disable().unwrap();
    let (_, body) = f.call("GET", "/proxies/u", None);
    assert_eq!(body["enabled"], false);
    assert!(
        TcpStream::connect(&listen).is_err(),
        "a disabled proxy does not listen"
    );
    proxy.enable().unwrap();
    let (_, body) = f.call("GET", "/proxies/u", None);
    assert_eq!(body["enabled"], true);
    assert_eq!(
        body["listen"],
        listen.as_str(),
        "re-enabled on the same port"
    );
    let mut conn = TcpStream::connect(&listen).unwrap();
    assert_echo(&mut conn, b"back");

    // Upstream can change; POST and PATCH both update.
    let other = f.block_on(echo_server());
    let patch = json!({"upstream": other.to_string()}).to_string();
    let (status, body) = f.call("PATCH", "/proxies/u", Some(&patch));
    assert_eq!(status, 200);
    assert_eq!(body["upstream"], other.to_string());
    assert_eq!(body["enabled"], true);
    let (status, body) = f.call("POST", "/proxies/u", Some(r#"{"listen": "127.0.0.1:0"}"#));
    assert_eq!(status, 200);
    assert_ne!(body["listen"], listen.as_str());
    let mut conn = TcpStream::connect(body["listen"].as_str().unwrap()).unwrap();
    assert_echo(&mut conn, b"moved");

    assert_eq!(f.call("POST", "/proxies/nope", Some("{}")).0, 404);
    assert_eq!(f.call("POST", "/proxies/u", Some("[")).0, 400);
    assert_eq!(
        f.call("POST", "/proxies/u", Some(r#"{"enabled": "yes"}"#))
            .0,
        400
    );
}

#[test]
fn delete_proxy() {
    let f = Fixture::new();
    let proxy = f.proxy("gone", f.echo);
    let listen = proxy.proxy_pack.listen.clone();
    assert_eq!(f.call("DELETE", "/proxies/gone", None).0, 204);
    assert_eq!(f.call("GET", "/proxies/gone", None).0, 404);
    assert!(TcpStream::connect(&listen).is_err());
    let (status, body) = f.call("DELETE", "/proxies/gone", None);
    assert_eq!(status, 404);
    assert_eq!(body["error"], "proxy not found");
    let again = f.proxy("gone", f.echo);
    again.delete().unwrap();
    assert!(f.client.all().unwrap().is_empty());
}

#[test]
fn toxic_crud() {
    let f = Fixture::new();
    let proxy = f.proxy("t", f.echo);
    proxy
        .with_latency("downstream".into(), 100, 10, 1.0)
        .with_timeout("upstream".into(), 0, 0.5);
    let toxics = proxy.toxics().unwrap();
    assert_eq!(toxics.len(), 2);
    // Upstream lists the upstream stream's toxics first.
    assert_eq!(toxics[0].name, "timeout_upstream");
    assert_eq!(toxics[0].toxicity, 0.5);
    assert_eq!(toxics[1].name, "latency_downstream");
    assert_eq!(toxics[1].attributes["latency"], 100);
    assert_eq!(toxics[1].attributes["jitter"], 10);

    let (status, body) = f.call("GET", "/proxies/t/toxics/latency_downstream", None);
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"name": "latency_downstream", "type": "latency", "stream": "downstream",
            "toxicity": 1.0, "attributes": {"latency": 100, "jitter": 10}})
    );
    let (_, proxy_body) = f.call("GET", "/proxies/t", None);
    assert_eq!(proxy_body["toxics"].as_array().unwrap().len(), 2);

    // Create with defaults; upstream answers 200 (not 201) with the toxic.
    let (status, body) = f.call(
        "POST",
        "/proxies/t/toxics",
        Some(r#"{"type": "bandwidth", "attributes": {"rate": 5}}"#),
    );
    assert_eq!(status, 200);
    assert_eq!(body["name"], "bandwidth_downstream");
    assert_eq!(body["stream"], "downstream");
    assert_eq!(body["toxicity"], 1.0);
    assert_eq!(body["attributes"], json!({"rate": 5}));
    let named = r#"{"name": "mine", "type": "slow_close", "stream": "upstream"}"#;
    assert_eq!(f.call("POST", "/proxies/t/toxics", Some(named)).0, 200);

    // Conflicts and bad input.
    let (status, body) = f.call("POST", "/proxies/t/toxics", Some(named));
    assert_eq!(status, 409);
    assert_eq!(
        body,
        json!({"error": "toxic already exists", "status": 409})
    );
    let (status, body) = f.call("POST", "/proxies/t/toxics", Some(r#"{"type": "bogus"}"#));
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid toxic type"))
    );
    let bad_stream = r#"{"type": "latency", "stream": "sideways"}"#;
    assert_eq!(f.call("POST", "/proxies/t/toxics", Some(bad_stream)).0, 400);
    let bad_attr = r#"{"name": "x", "type": "latency", "attributes": {"latency": "1s"}}"#;
    assert_eq!(f.call("POST", "/proxies/t/toxics", Some(bad_attr)).0, 400);
    assert_eq!(f.call("POST", "/proxies/t/toxics", Some("")).0, 400);
    assert_eq!(f.call("POST", "/proxies/nope/toxics", Some(named)).0, 404);
    assert_eq!(f.call("GET", "/proxies/nope/toxics", None).0, 404);

    // Update: attributes given are set, others kept; toxicity optional.
    let (status, body) = f.call(
        "POST",
        "/proxies/t/toxics/latency_downstream",
        Some(r#"{"attributes": {"latency": 7}}"#),
    );
    assert_eq!(status, 200);
    assert_eq!(body["attributes"], json!({"latency": 7, "jitter": 10}));
    let (status, body) = f.call(
        "PATCH",
        "/proxies/t/toxics/latency_downstream",
        Some(r#"{"toxicity": 0.25}"#),
    );
    assert_eq!(status, 200);
    assert_eq!(body["toxicity"], 0.25);
    assert_eq!(body["attributes"]["latency"], 7);
    let (status, body) = f.call("POST", "/proxies/t/toxics/none", Some("{}"));
    assert_eq!(status, 404);
    assert_eq!(body, json!({"error": "toxic not found", "status": 404}));
    assert_eq!(f.call("GET", "/proxies/t/toxics/none", None).0, 404);

    // Delete one, then all through the client.
    assert_eq!(
        f.call("DELETE", "/proxies/t/toxics/latency_downstream", None)
            .0,
        204
    );
    assert_eq!(
        f.call("DELETE", "/proxies/t/toxics/latency_downstream", None)
            .0,
        404
    );
    proxy.delete_all_toxics().unwrap();
    assert!(proxy.toxics().unwrap().is_empty());
    let (_, body) = f.call("GET", "/proxies/t/toxics", None);
    assert_eq!(body, json!([]));
}

#[test]
fn reset_enables_all_and_removes_toxics() {
    let f = Fixture::new();
    let a = f.proxy("a", f.echo);
    let b = f.proxy("b", f.echo);
    a.with_latency("downstream".into(), 10, 0, 1.0);
    b.with_bandwidth("upstream".into(), 0, 1.0);
    b.disable().unwrap();
    f.client.reset().unwrap();
    for (_, p) in f.client.all().unwrap() {
        assert!(p.proxy_pack.enabled);
        assert!(p.proxy_pack.toxics.is_empty());
    }
    let mut conn = connect(&b);
    assert_echo(&mut conn, b"after reset");
    assert_eq!(f.call("POST", "/reset", None).0, 204);
    // find_and_reset_proxy does the same for one proxy.
    a.with_timeout("downstream".into(), 0, 1.0);
    a.disable().unwrap();
    let a = f.client.find_and_reset_proxy("a").unwrap();
    assert!(a.toxics().unwrap().is_empty());
    let mut conn = connect(&a);
    assert_echo(&mut conn, b"ok");
}

#[test]
fn browsers_are_refused_like_upstream() {
    let f = Fixture::new();
    let (status, _) = f.call_with_header("/proxies", "User-Agent", "Mozilla/5.0 (X11)");
    assert_eq!(status, 403);
    assert_eq!(
        f.call_with_header("/proxies", "User-Agent", "curl/8").0,
        200
    );
}
