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

/// A JSON value in which no object repeats a key: a body such as
/// `{"project": "a", "project": "b"}` is refused (422 naming the key)
/// rather than read as whichever copy the parser keeps, so what is checked
/// is what is stored. serde_json's nesting limit still applies (400).
#[derive(Debug, Clone, PartialEq)]
pub struct UniqueKeys(pub serde_json::Value);

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(UniqueKeysVisitor)
            .map(UniqueKeys)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Self::Value, E> {
        Ok(value.into())
    }

    fn visit_u64<E>(self, value: u64) -> Result<Self::Value, E> {
        Ok(value.into())
    }

    fn visit_f64<E>(self, value: f64) -> Result<Self::Value, E> {
        // serde_json never hands a non-finite number.
        Ok(serde_json::Number::from_f64(value).map_or(serde_json::Value::Null, Into::into))
    }

    fn visit_str<E>(self, value: &str) -> Result<Self::Value, E> {
        Ok(serde_json::Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Self::Value, E> {
        Ok(serde_json::Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        serde::Deserialize::deserialize(deserializer).map(|UniqueKeys(value)| value)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(UniqueKeys(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(serde_json::Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate key {:?}",
                    crate::error::clip(&key)
                )));
            }
            let UniqueKeys(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(serde_json::Value::Object(object))
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

    #[test]
    fn unique_keys_reads_json_and_refuses_a_repeated_key() {
        let text = r#"{"a": [1, -2, 2.5, "x", null, true, {"b": {}}], "c": 18446744073709551615}"#;
        let UniqueKeys(value) = serde_json::from_str(text).unwrap();
        assert_eq!(
            value,
            serde_json::from_str::<serde_json::Value>(text).unwrap()
        );

        let error =
            serde_json::from_str::<UniqueKeys>(r#"{"a": 1, "b": {"c": 1, "c": 2}}"#).unwrap_err();
        assert!(
            error.to_string().contains(r#"duplicate key "c""#),
            "{error}"
        );
        assert!(error.is_data(), "{error}");
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
