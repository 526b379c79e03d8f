//! `POST /ui/items/{id}/actions/{action}`: the item page's buttons. Each
//! runs the same handler the API runs for it (`POST
//! /api/v1/work-items/{id}/{command}` or `.../retry`), with the signed-in
//! caller and so the same permission checks, and answers JSON for the
//! script to show inline: `{"ok", "outcome", "message"}`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use wq_api::AppState;
use wq_api::auth::Caller;
use wq_api::extract::{ApiBytes, ApiPath};
use wq_api::routes::items;

use crate::pages::require_api;
use crate::session::csrf_ok;

/// The answer the script shows.
#[derive(Debug, serde::Serialize)]
struct Outcome {
    ok: bool,
    /// `merged`, `queued`, `accepted`, `retried` or `refused`.
    outcome: String,
    message: String,
}

fn answer(status: StatusCode, ok: bool, outcome: &str, message: impl Into<String>) -> Response {
    (
        status,
        Json(Outcome {
            ok,
            outcome: outcome.to_owned(),
            message: message.into(),
        }),
    )
        .into_response()
}

/// The body of a button's request: the head the page showed, for Merge.
#[derive(Debug, Default, serde::Deserialize)]
struct ActionBody {
    #[serde(default)]
    expected_head_sha: Option<String>,
}

pub async fn run(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((raw_id, action)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let who = match require_api(&state, &headers).await {
        Ok(who) => who,
        Err(response) => return response,
    };
    if !csrf_ok(&who.csrf, &headers, None) {
        return answer(
            StatusCode::FORBIDDEN,
            false,
            "refused",
            "missing or wrong CSRF token: reload the page",
        );
    }
    let request: ActionBody = if body.iter().all(u8::is_ascii_whitespace) {
        ActionBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(request) => request,
            Err(error) => {
                return answer(
                    StatusCode::BAD_REQUEST,
                    false,
                    "refused",
                    format!("invalid JSON body: {error}"),
                );
            }
        }
    };
    let caller = Caller::signed_in(who.principal.clone());
    match action.as_str() {
        "retry" => match items::retry(State(state), caller, ApiPath(raw_id)).await {
            Ok(_) => answer(
                StatusCode::OK,
                true,
                "retried",
                "the item is active again and will be processed",
            ),
            Err(error) => refused(&error),
        },
        "merge" | "retry-merge" | "refresh" => {
            let command_body = if action == "merge" {
                match request.expected_head_sha.filter(|sha| !sha.is_empty()) {
                    Some(sha) => serde_json::json!({ "expected_head_sha": sha }),
                    None => {
                        return answer(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            false,
                            "refused",
                            "expected_head_sha: the head the page shows is required",
                        );
                    }
                }
                .to_string()
            } else {
                String::new()
            };
            match items::command(
                State(state),
                caller,
                ApiPath((raw_id, action.clone())),
                ApiBytes(command_body.into()),
            )
            .await
            {
                Ok((_, Json(reply))) => {
                    let status = reply["status"].as_str().unwrap_or("accepted").to_owned();
                    let message = match (action.as_str(), status.as_str()) {
                        ("merge", "merged") => "Merged by the forge.".to_owned(),
                        ("merge", "queued") => {
                            "Queued: the forge put it in its merge queue.".to_owned()
                        }
                        ("retry-merge", _) => {
                            "Retry accepted: one more automatic merge evaluation.".to_owned()
                        }
                        ("refresh", _) => {
                            "Refreshing: the change request is read again.".to_owned()
                        }
                        _ => reply["message"].as_str().unwrap_or("done").to_owned(),
                    };
                    answer(StatusCode::OK, true, &status, message)
                }
                Err(error) => refused(&error),
            }
        }
        other => answer(
            StatusCode::NOT_FOUND,
            false,
            "refused",
            format!("no action {other:?}"),
        ),
    }
}

fn refused(error: &wq_api::ApiError) -> Response {
    answer(error.status(), false, "refused", error.message())
}
