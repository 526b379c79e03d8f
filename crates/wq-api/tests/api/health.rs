//! `/healthz` and `/readyz`.

use serde_json::{Value, json};
use wq_testkit::http::{error_of, json_of};
use wq_testkit::{Backend, Faults, backend_tests};

use crate::api_app;

async fn healthz_and_readyz_answer_ok(backend: Backend) {
    let app = api_app(backend).start().await;
    let body: Value = json_of(app.get("/healthz").await).await;
    assert_eq!(body, json!({"status": "ok"}));
    let body: Value = json_of(app.get("/readyz").await).await;
    assert_eq!(body, json!({"status": "ok"}));
    app.finish().await;
}
backend_tests!(healthz_and_readyz_answer_ok);

async fn readyz_is_503_when_the_database_does_not_answer(backend: Backend) {
    let app = api_app(backend)
        .faults(Faults {
            ping_fails: true,
            ..Faults::default()
        })
        .start()
        .await;
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
    app.finish().await;
}
backend_tests!(readyz_is_503_when_the_database_does_not_answer);
