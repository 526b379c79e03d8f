//! HTTP interface of workqueue: the axum [`router`] (health, readiness,
//! `/api/v1` work items, Prometheus metrics), its middleware (request ids,
//! tracing, timeout, body limit) and [`serve_with`]: a header read
//! timeout, a connection cap and a bounded graceful shutdown.
//!
//! Every error response is the JSON envelope of [`error::ApiError`]. The
//! OpenAPI 3.1 document of it all is generated from the handlers and served
//! at `/api/openapi.json` ([`openapi`]).
//! Every `/api/v1` route needs a bearer token and a rule granting what it
//! does ([`auth`]); `/healthz`, `/readyz`, `/metrics`, `/api/openapi.json`
//! and `/webhooks/*` (which check the forge's own signature) are open.

pub mod auth;
pub mod config;
pub mod error;
pub mod extract;
pub mod metrics;
pub mod models;
pub mod openapi;
pub mod routes;
pub mod state;

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderName, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tower::ServiceBuilder;
use tower_http::LatencyUnit;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tracing::Level;

pub use config::{
    ApiConfig, DEFAULT_BODY_LIMIT_BYTES, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_REQUEST_TIMEOUT, DEFAULT_SHUTDOWN_GRACE, ServeConfig,
};
pub use error::{ApiError, ErrorBody, ErrorEnvelope};
pub use state::AppState;

/// Header carrying the request id (set when absent, echoed in the response).
const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The whole HTTP surface: the routes of `openapi::routes` (each with
/// its documentation), the bearer check on `/api/v1`, the document at
/// `/api/openapi.json`, and the middleware.
pub fn router(state: AppState, config: &ApiConfig) -> Router {
    let (routes, openapi) = openapi::routes(&state).split_for_parts();
    let mut state = state;
    let document = openapi::document(openapi, &state);
    state.openapi = std::sync::Arc::new(
        serde_json::to_vec(&document)
            .expect("the document serializes")
            .into(),
    );

    let middleware = ServiceBuilder::new()
        .layer(SetRequestIdLayer::new(REQUEST_ID_HEADER, MakeRequestUuid))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|request: &Request| {
                    let request_id = request
                        .headers()
                        .get(REQUEST_ID_HEADER)
                        .and_then(|value| value.to_str().ok())
                        .unwrap_or_default();
                    tracing::info_span!(
                        "http_request",
                        method = %request.method(),
                        path = %request.uri().path(),
                        request_id,
                    )
                })
                .on_response(
                    DefaultOnResponse::new()
                        .level(Level::INFO)
                        .latency_unit(LatencyUnit::Millis),
                )
                // Server errors are logged once, where they are built.
                .on_failure(()),
        )
        .layer(PropagateRequestIdLayer::new(REQUEST_ID_HEADER))
        // A panicking handler answers the 500 envelope (its message goes to
        // the log only) and the connection keeps serving.
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(middleware::from_fn_with_state(
            config.request_timeout,
            request_timeout,
        ))
        .layer(middleware::from_fn_with_state(
            config.body_limit_bytes,
            content_length_limit,
        ))
        .layer(DefaultBodyLimit::max(config.body_limit_bytes));

    routes
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
        .layer(middleware)
}

/// The answer to a request whose handler panicked: the generic 500
/// envelope; the panic's message is logged, never sent.
fn panic_response(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("a panic without a message");
    error::ApiError::internal(format!("handler panicked: {message}")).into_response()
}

/// [`serve_with`] with the default [`ServeConfig`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, router, &ServeConfig::default(), shutdown).await
}

/// Serves `router` over HTTP/1.1 on `listener` until `shutdown` resolves:
/// then stops accepting, lets open requests finish for up to
/// `shutdown_grace` and drops every connection still open. A connection
/// that does not finish a request's headers within `header_read_timeout`
/// is closed; at most `max_connections` are served at once (further ones
/// wait in the listen backlog).
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    router: Router,
    config: &ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::server::graceful::GracefulShutdown;
    use hyper_util::service::TowerToHyperService;

    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout);
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(config.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        // A free slot first: beyond the cap, connections stay unaccepted.
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = std::sync::Arc::clone(&slots).acquire_owned() => {
                slot.expect("the connection semaphore is never closed")
            }
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // E.g. out of file descriptors: wait, do not spin.
                    tracing::warn!(%error, "accept failed: {error}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        connections.spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "connection from {peer} ended: {error}");
            }
            drop(slot);
        });
        // Reap finished connections as we go.
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    let open = connections.len();
    tracing::info!(
        open,
        "no longer accepting connections; waiting for {open} to finish"
    );
    if tokio::time::timeout(config.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace_ms = config.shutdown_grace.as_millis() as u64,
            "connections still open after the shutdown grace; dropping them"
        );
    }
    connections.shutdown().await;
    Ok(())
}

async fn no_route() -> ApiError {
    ApiError::not_found("no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::method_not_allowed()
}

/// Answers a request that runs longer than the limit with a 503 envelope
/// (the handler's future is dropped).
async fn request_timeout(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_elapsed) => ApiError::timeout(limit).into_response(),
    }
}

/// Refuses a declared body larger than the limit before anything reads it;
/// bodies without a length (chunked) are cut by `DefaultBodyLimit` when
/// extracted, and that 413 is answered with the same message naming the
/// limit.
async fn content_length_limit(
    State(limit_bytes): State<usize>,
    request: Request,
    next: Next,
) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    match declared {
        Some(length) if length > limit_bytes as u64 => {
            ApiError::payload_too_large(limit_bytes).into_response()
        }
        _ => {
            let response = next.run(request).await;
            if response.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::payload_too_large(limit_bytes).into_response()
            } else {
                response
            }
        }
    }
}
