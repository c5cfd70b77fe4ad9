//! The HTTP API (axum), with upstream Toxiproxy 2.x's routes, JSON shapes and status codes.
//!
//! | route | answer |
//! | --- | --- |
//! | `GET /version` | 200 `{"version": "2.12.0"}` |
//! | `POST /reset` | 204 |
//! | `GET /proxies` | 200, object by name |
//! | `POST /proxies` | 201 proxy; 400, 409, 500 (listen failed) |
//! | `POST /populate` | 201 `{"proxies": [...]}`; on error the error fields too, with its status |
//! | `GET /proxies/{p}` | 200 proxy; 404 |
//! | `POST`/`PATCH /proxies/{p}` | 200 proxy; 400, 404, 500 |
//! | `DELETE /proxies/{p}` | 204; 404 |
//! | `GET /proxies/{p}/toxics` | 200 list |
//! | `POST /proxies/{p}/toxics` | 200 toxic (upstream answers 200, not 201); 400, 404, 409 |
//! | `GET /proxies/{p}/toxics/{t}` | 200 toxic; 404 |
//! | `POST`/`PATCH /proxies/{p}/toxics/{t}` | 200 toxic; 400, 404 |
//! | `DELETE /proxies/{p}/toxics/{t}` | 204; 404 |
//! | `GET /proxies/{p}/journal?after=SEQ&limit=N` | 200 [`wiretap::Page`]; 404 (an extension: upstream has no such route) |
//! | `POST /proxies/{p}/inject` [`wiretap::Injection`] | 204; 400, 404 (an extension: each live connection runs the statement on its idle session, [`wiretap::WireEvent::Injected`]) |
//!
//! Errors are `{"error": "...", "status": N}`. Like upstream, a browser user agent
//! (`Mozilla/...`) is refused with 403.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::collection::{parse_body, Proxies};
use crate::error::ApiError;
use crate::proxy::ProxyView;

/// The version `GET /version` reports: the upstream release whose API this server implements.
pub const VERSION: &str = "2.12.0";

/// Shared state of the API.
pub(crate) type AppState = Arc<Mutex<Proxies>>;

type ApiResult<T> = Result<T, ApiError>;

/// The router of the HTTP API.
pub(crate) fn router(state: AppState) -> Router {
    Router::new()
        .route("/version", get(version))
        .route("/reset", post(reset))
        .route("/proxies", get(proxy_index).post(proxy_create))
        .route("/populate", post(populate))
        .route(
            "/proxies/{proxy}",
            get(proxy_show)
                .post(proxy_update)
                .patch(proxy_update)
                .delete(proxy_delete),
        )
        .route("/proxies/{proxy}/journal", get(journal))
        .route("/proxies/{proxy}/inject", post(inject))
        .route(
            "/proxies/{proxy}/toxics",
            get(toxic_index).post(toxic_create),
        )
        .route(
            "/proxies/{proxy}/toxics/{toxic}",
            get(toxic_show)
                .post(toxic_update)
                .patch(toxic_update)
                .delete(toxic_delete),
        )
        .layer(middleware::from_fn(stop_browsers))
        .with_state(state)
}

async fn stop_browsers(request: Request, next: Next) -> Response {
    let browser = request
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ua| ua.starts_with("Mozilla/"));
    if browser {
        return (StatusCode::FORBIDDEN, "User agent not allowed\n").into_response();
    }
    next.run(request).await
}

async fn version() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json;charset=utf-8")],
        format!("{{\"version\": \"{VERSION}\"}}\n"),
    )
        .into_response()
}

async fn reset(State(state): State<AppState>) -> ApiResult<StatusCode> {
    state.lock().await.reset().await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn proxy_index(State(state): State<AppState>) -> Response {
    Json(state.lock().await.index()).into_response()
}

async fn proxy_create(
    State(state): State<AppState>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<ProxyView>)> {
    let body = parse_body(&body)?;
    let view = state.lock().await.create(&body).await?;
    Ok((StatusCode::CREATED, Json(view)))
}

#[derive(Serialize)]
struct PopulateAnswer {
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    error: Option<ApiError>,
    proxies: Vec<ProxyView>,
}

async fn populate(State(state): State<AppState>, body: Bytes) -> Response {
    let (proxies, error) = match parse_body(&body) {
        Ok(body) => state.lock().await.populate(&body).await,
        Err(e) => (Vec::new(), Some(e)),
    };
    let status = error
        .as_ref()
        .map_or(StatusCode::CREATED, ApiError::status_code);
    (status, Json(PopulateAnswer { error, proxies })).into_response()
}

async fn proxy_show(
    State(state): State<AppState>,
    Path(proxy): Path<String>,
) -> ApiResult<Json<ProxyView>> {
    Ok(Json(state.lock().await.show(&proxy)?))
}

async fn proxy_update(
    State(state): State<AppState>,
    Path(proxy): Path<String>,
    body: Bytes,
) -> ApiResult<Json<ProxyView>> {
    let mut proxies = state.lock().await;
    proxies.show(&proxy)?;
    let body = parse_body(&body)?;
    Ok(Json(proxies.update(&proxy, &body).await?))
}

async fn proxy_delete(
    State(state): State<AppState>,
    Path(proxy): Path<String>,
) -> ApiResult<StatusCode> {
    state.lock().await.remove(&proxy).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn toxic_index(State(state): State<AppState>, Path(proxy): Path<String>) -> Response {
    match state.lock().await.toxics(&proxy) {
        Ok(list) => Json(list).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn toxic_create(
    State(state): State<AppState>,
    Path(proxy): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    let mut proxies = state.lock().await;
    proxies.show(&proxy)?;
    let body = parse_body(&body)?;
    Ok(Json(proxies.add_toxic(&proxy, &body)?).into_response())
}

async fn toxic_show(
    State(state): State<AppState>,
    Path((proxy, toxic)): Path<(String, String)>,
) -> ApiResult<Response> {
    Ok(Json(state.lock().await.show_toxic(&proxy, &toxic)?).into_response())
}

async fn toxic_update(
    State(state): State<AppState>,
    Path((proxy, toxic)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let mut proxies = state.lock().await;
    proxies.show_toxic(&proxy, &toxic)?;
    let body = parse_body(&body)?;
    Ok(Json(proxies.update_toxic(&proxy, &toxic, &body)?).into_response())
}

async fn toxic_delete(
    State(state): State<AppState>,
    Path((proxy, toxic)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    state.lock().await.remove_toxic(&proxy, &toxic)?;
    Ok(StatusCode::NO_CONTENT)
}

/// The query of `GET /proxies/{p}/journal`.
#[derive(Deserialize)]
struct JournalQuery {
    /// The last `seq` the reader has: the page starts after it, and what it has is forgotten.
    #[serde(default)]
    after: u64,
    /// The most records to answer.
    limit: Option<usize>,
}

/// `POST /proxies/{p}/inject`: each of the proxy's connections runs the statement once on its
/// session, when idle within the window (an extension: upstream has no such route).
async fn inject(
    State(state): State<AppState>,
    Path(proxy): Path<String>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    let proxies = state.lock().await;
    proxies.show(&proxy)?;
    let injection: wiretap::Injection =
        serde_json::from_value(parse_body(&body)?).map_err(ApiError::bad_body)?;
    proxies.inject(&proxy, injection)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn journal(
    State(state): State<AppState>,
    Path(proxy): Path<String>,
    Query(q): Query<JournalQuery>,
) -> ApiResult<Response> {
    let journal = state.lock().await.journal(&proxy)?;
    Ok(Json(journal.page(q.after, q.limit)).into_response())
}
