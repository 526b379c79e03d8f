//! `GET /healthz` (the process answers) and `GET /readyz` (the database
//! answers too).

use axum::Json;
use axum::extract::State;

use crate::error::{ApiError, ErrorEnvelope};
use crate::models::HealthBody;
use crate::state::AppState;

fn ok() -> Json<HealthBody> {
    Json(HealthBody {
        status: "ok".to_owned(),
    })
}

/// Always 200: the process is up.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses((status = 200, description = "The process answers.", body = HealthBody)),
)]
pub async fn healthz() -> Json<HealthBody> {
    ok()
}

/// 200 when the store answers a ping, 503 `unavailable` otherwise.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "The database answers too.", body = HealthBody),
        (status = 503, description = "The database is not reachable.", body = ErrorEnvelope),
    ),
)]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<HealthBody>, ApiError> {
    match state.store.ping().await {
        Ok(()) => Ok(ok()),
        Err(error) => {
            tracing::warn!(%error, "readiness check failed: database ping: {error}");
            Err(ApiError::unavailable("database is not reachable"))
        }
    }
}
