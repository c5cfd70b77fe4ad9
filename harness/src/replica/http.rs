//! The replica's HTTP server.
//!
//! | route | answer |
//! |---|---|
//! | `GET /metrics` | Prometheus text of the replica's own registry (`plexsphere_background_leader`; none without a DSN) |
//! | `GET /readyz` | 200 when every check passes, else 503; JSON [`ReadyReport`]: the seven loop probes and `workers` |
//! | `GET /workers` | JSON list of [`WorkerInfo`] from the supervisor |
//! | `GET /leader` | JSON [`LeaderInfo`]: `is_leader`, `term` |
//! | `POST /control` | JSON [`ControlRequest`], e.g. `{"loop":"invitations-expire","mode":"fail"}` or `{"worker":"audit-archiver","mode":"crash"}`; 200, 400 (bad body or mode) or 404 (unknown name), with a [`ControlReply`] |

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use elector::readiness::Readiness;
use elector::supervisor::{WorkerState, WorkerStatuses};
use elector::Elector;
use prometheus::{Encoder as _, TextEncoder};
use tokio_util::sync::CancellationToken;

use super::api::{CheckVerdict, ControlReply, ControlRequest, LeaderInfo, ReadyReport, WorkerInfo};
use super::control::{Control, ControlError, LoopMode, WorkerMode};

/// What the handlers read.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) replica: String,
    pub(crate) registry: prometheus::Registry,
    pub(crate) readiness: Readiness,
    pub(crate) statuses: WorkerStatuses,
    pub(crate) elector: Option<Elector>,
    pub(crate) control: Arc<Control>,
}

/// Serves until `shutdown` is cancelled.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/readyz", get(readyz))
        .route("/workers", get(workers))
        .route("/leader", get(leader))
        .route("/control", post(control))
        .with_state(state);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

async fn metrics(State(s): State<AppState>) -> Response {
    let encoder = TextEncoder::new();
    let mut body = Vec::new();
    match encoder.encode(&s.registry.gather(), &mut body) {
        Ok(()) => (
            [(header::CONTENT_TYPE, encoder.format_type().to_owned())],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn readyz(State(s): State<AppState>) -> (StatusCode, Json<ReadyReport>) {
    let checks: Vec<CheckVerdict> = s
        .readiness
        .verdicts()
        .into_iter()
        .map(|v| CheckVerdict {
            name: v.name,
            ok: v.result.is_ok(),
            error: v.result.err(),
        })
        .collect();
    let ready = checks.iter().all(|c| c.ok);
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(ReadyReport { ready, checks }))
}

async fn workers(State(s): State<AppState>) -> Json<Vec<WorkerInfo>> {
    Json(
        s.statuses
            .snapshot()
            .into_iter()
            .map(|w| WorkerInfo {
                name: w.name,
                state: match w.state {
                    WorkerState::Running => "running",
                    WorkerState::Restarting => "restarting",
                    WorkerState::Exhausted => "exhausted",
                    WorkerState::Stopped => "stopped",
                }
                .to_owned(),
                restarts: w.restarts,
                last_exit: w.last_exit,
            })
            .collect(),
    )
}

async fn leader(State(s): State<AppState>) -> Json<LeaderInfo> {
    Json(LeaderInfo {
        replica: s.replica.clone(),
        elector: s.elector.is_some(),
        is_leader: s.elector.as_ref().is_some_and(Elector::is_leader),
        term: s.elector.as_ref().and_then(Elector::current_term),
    })
}

fn reply(status: StatusCode, ok: bool, message: String) -> (StatusCode, Json<ControlReply>) {
    (status, Json(ControlReply { ok, message }))
}

async fn control(State(s): State<AppState>, body: Bytes) -> (StatusCode, Json<ControlReply>) {
    let req: ControlRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return reply(
                StatusCode::BAD_REQUEST,
                false,
                format!("expected {{\"loop\"|\"worker\": NAME, \"mode\": MODE}}: {e}"),
            )
        }
    };
    let mode = req.mode.replace('-', "_");
    let applied = match (&req.loop_name, &req.worker) {
        (Some(name), None) => {
            let mode = match mode.as_str() {
                "ok" => LoopMode::Ok,
                "fail" => LoopMode::Fail,
                "panic" => LoopMode::Panic,
                other => {
                    return reply(
                        StatusCode::BAD_REQUEST,
                        false,
                        format!("unknown loop mode {other:?}: expected ok, fail or panic"),
                    )
                }
            };
            s.control
                .set_loop(name, mode)
                .map(|()| format!("loop {name:?}: mode {mode:?}"))
        }
        (None, Some(name)) => {
            let mode = match mode.as_str() {
                "ok" => WorkerMode::Ok,
                "crash" => WorkerMode::Crash,
                "exit" => WorkerMode::Exit,
                "crash_loop" => WorkerMode::CrashLoop,
                other => {
                    return reply(
                        StatusCode::BAD_REQUEST,
                        false,
                        format!(
                            "unknown worker mode {other:?}: expected ok, crash, exit or crash_loop"
                        ),
                    )
                }
            };
            s.control
                .set_worker(name, mode)
                .map(|()| format!("worker {name:?}: mode {mode:?}"))
        }
        _ => {
            return reply(
                StatusCode::BAD_REQUEST,
                false,
                "give exactly one of \"loop\" and \"worker\"".to_owned(),
            )
        }
    };
    match applied {
        Ok(message) => reply(StatusCode::OK, true, message),
        Err(e @ (ControlError::UnknownLoop(_) | ControlError::UnknownWorker(_))) => {
            reply(StatusCode::NOT_FOUND, false, e.to_string())
        }
    }
}
