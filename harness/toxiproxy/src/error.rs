//! Errors: the HTTP API's error body, and the library's start-up errors.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// An error answered by the HTTP API, serialised like upstream Toxiproxy:
/// `{"error": "proxy not found", "status": 404}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{error} ({status})")]
pub struct ApiError {
    /// The message, upstream's wording (e.g. `proxy not found`).
    pub error: String,
    /// The HTTP status code.
    pub status: u16,
}

impl ApiError {
    /// An error with the given message and status.
    pub fn new(error: impl Into<String>, status: StatusCode) -> Self {
        Self {
            error: error.into(),
            status: status.as_u16(),
        }
    }

    /// 400 `bad request body: <detail>`.
    pub fn bad_body(detail: impl std::fmt::Display) -> Self {
        Self::new(
            format!("bad request body: {detail}"),
            StatusCode::BAD_REQUEST,
        )
    }

    /// 400 `missing required field: <field>`.
    pub fn missing_field(field: impl std::fmt::Display) -> Self {
        Self::new(
            format!("missing required field: {field}"),
            StatusCode::BAD_REQUEST,
        )
    }

    /// 404 `proxy not found`.
    pub fn proxy_not_found() -> Self {
        Self::new("proxy not found", StatusCode::NOT_FOUND)
    }

    /// 409 `proxy already exists`.
    pub fn proxy_exists() -> Self {
        Self::new("proxy already exists", StatusCode::CONFLICT)
    }

    /// 400 for a stream other than `upstream` / `downstream`.
    pub fn invalid_stream() -> Self {
        Self::new(
            "stream was invalid, can be either upstream or downstream",
            StatusCode::BAD_REQUEST,
        )
    }

    /// 400 `invalid toxic type`.
    pub fn invalid_toxic_type() -> Self {
        Self::new("invalid toxic type", StatusCode::BAD_REQUEST)
    }

    /// 409 `toxic already exists`.
    pub fn toxic_exists() -> Self {
        Self::new("toxic already exists", StatusCode::CONFLICT)
    }

    /// 404 `toxic not found`.
    pub fn toxic_not_found() -> Self {
        Self::new("toxic not found", StatusCode::NOT_FOUND)
    }

    /// 500 with the given message (upstream answers listen failures this way).
    pub fn internal(error: impl Into<String>) -> Self {
        Self::new(error, StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The status as an axum status code.
    pub fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status_code(), axum::Json(&self)).into_response()
    }
}

/// Errors of [`crate::Server::start`] and [`crate::ServerHandle::populate_json`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The address could not be resolved or bound.
    #[error("listen tcp {addr}: {source}")]
    Listen {
        /// The address as given.
        addr: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Populating proxies failed.
    #[error("populate: {0}")]
    Populate(ApiError),
}

/// A timeout mode other than `upstream` or `partition` (see [`crate::TimeoutMode`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid timeout mode {0:?}: expected upstream or partition")]
pub struct ParseTimeoutModeError(pub String);
