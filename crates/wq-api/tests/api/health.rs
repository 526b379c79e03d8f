//! `/healthz` and `/readyz`.

use serde_json::{Value, json};
use wq_testkit::backend_tests;

use crate::helpers::{AppOptions, Backend, Faults, error_of, json_of, spawn_app, spawn_app_with};

async fn healthz_and_readyz_answer_ok(backend: Backend) {
    let app = spawn_app(backend).await;
    let body: Value = json_of(app.get("/healthz").await).await;
    assert_eq!(body, json!({"status": "ok"}));
    let body: Value = json_of(app.get("/readyz").await).await;
    assert_eq!(body, json!({"status": "ok"}));
    app.stop().await;
}
backend_tests!(healthz_and_readyz_answer_ok);

async fn readyz_is_503_when_the_database_does_not_answer(backend: Backend) {
    let options = AppOptions {
        faults: Faults {
            ping_fails: true,
            ..Faults::default()
        },
        ..AppOptions::default()
    };
    let app = spawn_app_with(backend, options).await;
    let envelope = error_of(app.get("/readyz").await, 503).await;
    assert_eq!(
        serde_json::to_value(envelope).unwrap(),
        json!({"error": {
            "code": "unavailable",
            "message": "database is not reachable",
            "field": null,
        }})
    );
    // Liveness does not depend on the database.
    let body: Value = json_of(app.get("/healthz").await).await;
    assert_eq!(body, json!({"status": "ok"}));
    app.stop().await;
}
backend_tests!(readyz_is_503_when_the_database_does_not_answer);
