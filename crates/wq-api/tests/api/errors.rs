//! The error envelope for routing errors, the body limit and the timeout.

use std::time::Duration;

use serde_json::json;
use wq_api::ApiConfig;
use wq_core::ItemId;
use wq_testkit::http::error_of;
use wq_testkit::types::{PANIC_COMMAND, PROBE_TYPE};
use wq_testkit::{Backend, Faults};

use crate::api_app;

#[tokio::test]
async fn unknown_routes_and_methods_answer_with_the_envelope() {
    let app = api_app(Backend::Sqlite).start().await;
    let envelope = error_of(app.get("/api/v1/nothing-here").await, 404).await;
    assert_eq!(
        serde_json::to_value(envelope).unwrap(),
        json!({"error": {"code": "not_found", "message": "no such route", "field": null}})
    );
    let response = app
        .client
        .delete(app.url("/api/v1/work-items"))
        .send()
        .await
        .unwrap();
    let envelope = error_of(response, 405).await;
    assert_eq!(envelope.error.code, "method_not_allowed");
    app.finish().await;
}

#[tokio::test]
async fn a_body_over_the_limit_is_413() {
    let app = api_app(Backend::Sqlite)
        .api_config(ApiConfig {
            body_limit_bytes: 1024,
            ..ApiConfig::default()
        })
        .start()
        .await;
    let path = format!("/api/v1/work-items/{}/retry", ItemId::new_v7());

    let response = app
        .client
        .post(app.url(&path))
        .body(vec![b'x'; 2048])
        .send()
        .await
        .unwrap();
    let envelope = error_of(response, 413).await;
    assert_eq!(
        serde_json::to_value(envelope).unwrap(),
        json!({"error": {
            "code": "payload_too_large",
            "message": "request body is larger than the limit of 1024 bytes",
            "field": null,
        }})
    );

    // At the limit the request goes through (and the item is unknown).
    let response = app
        .client
        .post(app.url(&path))
        .body(vec![b'x'; 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(response, 404).await.error.code, "not_found");
    app.finish().await;
}

#[tokio::test]
async fn a_request_over_the_timeout_is_503() {
    let app = api_app(Backend::Sqlite)
        .api_config(ApiConfig {
            request_timeout: Duration::from_millis(100),
            ..ApiConfig::default()
        })
        .faults(Faults {
            list_delay: Some(Duration::from_secs(5)),
            ..Faults::default()
        })
        .start()
        .await;
    let envelope = error_of(app.get("/api/v1/work-items").await, 503).await;
    assert_eq!(envelope.error.code, "timeout");
    assert_eq!(
        envelope.error.message,
        "request did not complete within 100 ms"
    );
    app.finish().await;
}

#[tokio::test]
async fn responses_carry_a_request_id() {
    let app = api_app(Backend::Sqlite).start().await;
    let response = app.get("/healthz").await;
    assert!(response.headers().contains_key("x-request-id"));
    let response = app
        .client
        .get(app.url("/healthz"))
        .header("x-request-id", "given-id")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "given-id");
    app.finish().await;
}

#[tokio::test]
async fn a_panicking_handler_answers_the_500_envelope_and_the_server_keeps_serving() {
    let app = api_app(Backend::Sqlite).start().await;
    let item = app.insert(PROBE_TYPE).await;
    let envelope = error_of(
        app.post(&format!("/api/v1/work-items/{}/{PANIC_COMMAND}", item.id))
            .await,
        500,
    )
    .await;
    assert_eq!(envelope.error.code, "internal");
    assert!(
        !envelope.error.message.contains("nobody planned"),
        "the panic's message stays in the log: {}",
        envelope.error.message
    );
    assert_eq!(app.get("/healthz").await.status().as_u16(), 200);
    app.finish().await;
}
