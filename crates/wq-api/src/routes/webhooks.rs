//! `POST /webhooks/{source}`: forge deliveries, handed to the receiver
//! registered for the source. A receiver authenticates (401, nothing
//! stored), resolves the item and stores a pending event; the engine is
//! notified. Deliveries about nothing we track, or that cannot be read
//! ([`WebhookError::Malformed`]), are answered 202 and ignored: a forge must
//! not retry them, and a malformed body is never a 500.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use wq_core::{DeliveryTrust, WebhookError};

use crate::error::{ApiError, ErrorEnvelope};
use crate::extract::{ApiBytes, ApiPath};
use crate::state::AppState;

/// The answer to an accepted delivery.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct WebhookAck {
    /// `stored` or `ignored`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The message of a 503 for a delivery that could not be stored.
pub const UNSTORED_MESSAGE: &str = "the delivery could not be stored; deliver it again later";

#[utoipa::path(
    post,
    path = "/webhooks/{source}",
    tag = "webhooks",
    params(("source" = String, Path, description = "The webhook source: `gitlab`, `github`, as the item types register them.")),
    request_body(content = Object, content_type = "application/json", description = "The forge's delivery as it sends it, with its own headers (signature or token, event name)."),
    responses(
        (status = 202, description = "Stored (an event for the items it concerns), or ignored (about nothing tracked, or unreadable): the forge must not deliver it again.", body = WebhookAck),
        (status = 401, description = "The delivery's signature or token does not check.", body = ErrorEnvelope),
        (status = 404, description = "No receiver for this source.", body = ErrorEnvelope),
    ),
)]
pub async fn receive(
    State(state): State<AppState>,
    ApiPath(source): ApiPath<String>,
    headers: HeaderMap,
    ApiBytes(body): ApiBytes,
) -> Result<(StatusCode, Json<WebhookAck>), ApiError> {
    let Some(receiver) = state.webhooks.get(source.as_str()) else {
        // The path's source is the caller's: not a label.
        count("", "unknown_source");
        return Err(ApiError::not_found(format!(
            "no webhook receiver for {source:?}"
        )));
    };
    let pairs: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(name, value)| {
            value
                .to_str()
                .ok()
                .map(|v| (name.as_str().to_ascii_lowercase(), v.to_owned()))
        })
        // The channel is this route's to say (none: a direct webhook).
        .filter(|(name, _)| name != wq_core::CHANNEL_HEADER)
        .collect();
    match receiver
        .receive(&pairs, &body, DeliveryTrust::Verify, state.clock.now())
        .await
    {
        Ok(receipt) => {
            if let Some(engine) = &state.engine {
                for id in &receipt.items {
                    engine.notify(*id);
                }
            }
            let source = receiver.source();
            let ack = match receipt.ignored {
                Some(reason) if receipt.items.is_empty() => WebhookAck {
                    status: "ignored".into(),
                    reason: Some(reason),
                },
                _ => WebhookAck {
                    status: "stored".into(),
                    reason: None,
                },
            };
            count(source, &ack.status);
            Ok((StatusCode::ACCEPTED, Json(ack)))
        }
        Err(error) => {
            count(receiver.source(), refusal_label(&error));
            refusal(&source, error)
        }
    }
}

/// Counts one delivery ([`crate::metrics::WEBHOOKS_TOTAL`]).
fn count(source: &'static str, outcome: &str) {
    metrics::counter!(
        crate::metrics::WEBHOOKS_TOTAL,
        "source" => source,
        "outcome" => outcome.to_owned(),
    )
    .increment(1);
}

/// The `outcome` label of a delivery that stored nothing.
fn refusal_label(error: &WebhookError) -> &'static str {
    match error {
        WebhookError::Malformed(_) => "malformed",
        WebhookError::Unauthenticated(_) => "unauthenticated",
        WebhookError::Unavailable(_) => "unavailable",
    }
}

/// The answer to a delivery that stored nothing: a malformed one is
/// ignored (202), the others refused. Why a refusal happened goes to the
/// log only: an unavailable store's error text is not for the sender.
fn refusal(source: &str, error: WebhookError) -> Result<(StatusCode, Json<WebhookAck>), ApiError> {
    match error {
        WebhookError::Malformed(reason) => {
            tracing::info!(%source, %reason, "malformed webhook ignored");
            Ok((
                StatusCode::ACCEPTED,
                Json(WebhookAck {
                    status: "ignored".into(),
                    reason: Some(format!("malformed: {reason}")),
                }),
            ))
        }
        WebhookError::Unauthenticated(reason) => {
            tracing::warn!(%source, %reason, "webhook refused");
            Err(ApiError::unauthenticated("webhook authentication failed"))
        }
        WebhookError::Unavailable(reason) => {
            tracing::error!(%source, %reason, "webhook not stored: {reason}");
            Err(ApiError::unavailable(UNSTORED_MESSAGE))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unstored_delivery_is_a_503_without_the_store_error() {
        let error = refusal(
            "gitlab",
            WebhookError::Unavailable(
                "store: database error: connection to 10.0.0.7 refused".into(),
            ),
        )
        .unwrap_err();
        assert_eq!(error.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(error.message(), UNSTORED_MESSAGE);
        let body = serde_json::to_string(&error.envelope()).unwrap();
        assert!(!body.contains("10.0.0.7"), "{body}");
        assert!(!body.contains("database"), "{body}");

        let error = refusal(
            "gitlab",
            WebhookError::Unauthenticated("bad token for forge gitlab-internal".into()),
        )
        .unwrap_err();
        assert_eq!(error.status(), StatusCode::UNAUTHORIZED);
        assert!(!error.message().contains("gitlab-internal"));

        let (status, ack) =
            refusal("gitlab", WebhookError::Malformed("body: not JSON".into())).unwrap();
        assert_eq!(status, StatusCode::ACCEPTED);
        assert_eq!(ack.status, "ignored");
        assert_eq!(ack.reason.as_deref(), Some("malformed: body: not JSON"));
    }
}
