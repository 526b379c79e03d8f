//! `GET /healthz` (the process answers) and `GET /readyz` (the database
//! answers too).

use axum::Json;
use axum::extract::State;

use crate::error::ApiError;
use crate::models::HealthBody;
use crate::state::AppState;

fn ok() -> Json<HealthBody> {
    Json(HealthBody {
        status: "ok".to_owned(),
    })
}

/// Always 200: the process is up.
pub async fn healthz() -> Json<HealthBody> {
    ok()
}

/// 200 when the store answers a ping, 503 `unavailable` otherwise.
pub async fn readyz(State(state): State<AppState>) -> Result<Json<HealthBody>, ApiError> {
    match state.store.ping().await {
        Ok(()) => Ok(ok()),
        Err(error) => {
            tracing::warn!(%error, "readiness check failed: database ping: {error}");
            Err(ApiError::unavailable("database is not reachable"))
        }
    }
}
