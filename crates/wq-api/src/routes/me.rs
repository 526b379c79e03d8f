//! `GET /api/v1/me`: who the caller is, the rules that match them and the
//! permissions those grant. Behind an OAuth proxy (`auth.oauth_proxy`,
//! DDR-27) it also turns the proxy's session into a bearer token: called
//! with `X-Forwarded-Access-Token` and no `Authorization`, it returns that
//! token under `token`.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::auth::authenticate_me;
use crate::error::ApiError;
use crate::models::MeBody;
use crate::state::AppState;

#[utoipa::path(
    get,
    path = "/me",
    tag = "caller",
    responses(
        (status = 200, description = "The caller, its matching rules and what they grant.", body = MeBody),
    ),
)]
pub async fn me(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let (principal, token) = authenticate_me(&state, &headers).await?;
    let carries_token = token.is_some();
    let mut response = Json(MeBody::new(&principal, token)).into_response();
    if carries_token {
        // A credential: no cache may keep it.
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    Ok(response)
}
