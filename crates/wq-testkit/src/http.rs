//! Reading the API's answers in tests: the error envelope with its status
//! and content type, or a successful JSON body.

use wq_api::ErrorEnvelope;

/// Reads an error response: asserts the status and the JSON content type,
/// and returns the envelope.
pub async fn error_of(response: reqwest::Response, status: u16) -> ErrorEnvelope {
    assert_eq!(response.status().as_u16(), status, "unexpected status");
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert_eq!(content_type, "application/json");
    response.json().await.expect("an error envelope")
}

/// Reads a successful (200) JSON response.
pub async fn json_of<T: serde::de::DeserializeOwned>(response: reqwest::Response) -> T {
    assert_eq!(response.status().as_u16(), 200, "unexpected status");
    response.json().await.expect("a JSON body")
}
