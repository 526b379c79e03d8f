//! `POST /webhooks/{source}`: forge deliveries, handed to the receiver
//! registered for the source. A receiver authenticates (401, nothing
//! stored), resolves the item and stores a pending event; the engine is
//! notified. Deliveries about nothing we track, or that cannot be read, are
//! answered 202 and ignored: a forge must not retry them, and a malformed
//! body is never a 500.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use wq_core::WebhookError;

use crate::error::ApiError;
use crate::extract::ApiPath;
use crate::state::AppState;

/// The answer to an accepted delivery.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WebhookAck {
    /// `stored` or `ignored`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

pub async fn receive(
    State(state): State<AppState>,
    ApiPath(source): ApiPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<WebhookAck>), ApiError> {
    let Some(receiver) = state.webhooks.get(source.as_str()) else {
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
        .collect();
    match receiver.receive(&pairs, &body, state.clock.now()).await {
        Ok(receipt) => {
            if let Some(engine) = &state.engine {
                for id in &receipt.items {
                    engine.notify(*id);
                }
            }
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
            Ok((StatusCode::ACCEPTED, Json(ack)))
        }
        Err(WebhookError::Unauthenticated(reason)) => {
            tracing::warn!(%source, %reason, "webhook refused");
            Err(ApiError::unauthenticated("webhook authentication failed"))
        }
        Err(WebhookError::Unavailable(reason)) => Err(ApiError::unavailable(reason)),
    }
}
