//! Extractors whose rejections answer with the [`ApiError`] envelope instead
//! of axum's plain-text bodies. Handlers use these, never `axum::Json`,
//! `Query` or `Path` as extractors (`axum::Json` is fine as a response).

use axum::extract::{FromRequest, FromRequestParts};

use crate::error::ApiError;

/// `axum::Json` as an extractor: a bad body is a 400/413/415/422 envelope.
#[derive(Debug, FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

/// `axum::body::Bytes`: a body over the limit (also one sent chunked,
/// without a length) is a 413 envelope.
#[derive(Debug)]
pub struct ApiBytes(pub axum::body::Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBytes {
    type Rejection = ApiError;

    async fn from_request(request: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        axum::body::Bytes::from_request(request, state)
            .await
            .map(ApiBytes)
            .map_err(ApiError::from)
    }
}

/// `axum::extract::Query`, rejecting with a 400 envelope.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

/// `axum::extract::Path`, rejecting with a 400 envelope naming the parameter.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorEnvelope;
    use axum::Router;
    use axum::body::Body;
    use axum::http::{Request, StatusCode, header};
    use axum::routing::post;
    use tower::ServiceExt;

    #[derive(Debug, serde::Deserialize)]
    struct Payload {
        #[allow(dead_code, reason = "only deserialized")]
        title: String,
    }

    async fn echo(ApiJson(_payload): ApiJson<Payload>) -> StatusCode {
        StatusCode::NO_CONTENT
    }

    async fn call(content_type: Option<&str>, body: &'static str) -> (StatusCode, ErrorEnvelope) {
        let app = Router::new().route("/", post(echo));
        let mut request = Request::post("/");
        if let Some(content_type) = content_type {
            request = request.header(header::CONTENT_TYPE, content_type);
        }
        let response = app
            .oneshot(request.body(Body::from(body)).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn json_rejections_use_the_envelope() {
        let (status, body) = call(Some("application/json"), "{not json").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body.error.code, "invalid_body");
        assert!(
            body.error.message.contains("JSON"),
            "{}",
            body.error.message
        );

        let (status, body) = call(Some("application/json"), r#"{"title": 5}"#).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(body.error.code, "invalid_body");
        assert!(
            body.error.message.contains("title"),
            "{}",
            body.error.message
        );

        let (status, body) = call(None, r#"{"title": "x"}"#).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(body.error.code, "unsupported_media_type");
    }
}
